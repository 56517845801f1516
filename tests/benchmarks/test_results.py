"""benchmarks/results.py, the one writer of benchmarks/RESULTS.md: a section is replaced (or appended) without
touching the others, and the summary generated from the sections' headline lines is placed after the intro, links
each section's GitHub anchor and is the same when regenerated."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from types import ModuleType

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "results.py"

INTRO = "# Benchmark results\n\nEvery figure here was measured by the command given with it.\n\n"
OPS = "## Advantage ops\n\nCommand: `python benchmarks/bench_ops.py`  \n\n| a | b |\n|---|---|\n| 1 | 2 |\n\n"
KEYS = (
    "## State keys\n\nCommand: `x`\n\n### Exact keys\n\ntext\n\n"
    "<!-- headline: exact keys | 4.45 GB/s | python-xxhash loop, 2.12 GB/s | Some CPU, 2 cores | 2026-12-01 -->\n\n\n"
)
TRAIN = "## Training: seconds per phase\n\nbody (with) punctuation: kept\n"


@pytest.fixture
def results(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_results_under_test", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    target = tmp_path / "RESULTS.md"
    target.write_text(INTRO + OPS + KEYS + TRAIN)
    monkeypatch.setattr(module, "RESULTS", target)
    return module


def sections(module: ModuleType) -> dict[str, str]:
    _, found = module.split(module.RESULTS.read_text())
    return {s.split("\n", 1)[0]: s for s in found}


def summary_rows(text: str) -> list[str]:
    block = text[text.index("<!-- summary -->") : text.index("<!-- /summary -->")]
    return [line for line in block.splitlines() if line.startswith("| [")]


def test_replacing_a_section_keeps_the_others_byte_for_byte(results: ModuleType) -> None:
    before = sections(results)
    results.write_section(
        "## Advantage ops",
        "\nnew body\n\n| c |\n|---|\n| 3 |\n",
        headlines=[("GiGPO, 512 tasks", "10.8 ms, 369× faster", "a loop, 4.00 s", "Some CPU, 2 cores", "2026-12-02")],
    )
    after = sections(results)
    assert list(after) == list(before)
    assert after["## State keys"] == before["## State keys"]
    assert after["## Training: seconds per phase"] == before["## Training: seconds per phase"]
    assert after["## Advantage ops"] == (
        "## Advantage ops\n\nnew body\n\n| c |\n|---|\n| 3 |\n\n"
        "<!-- headline: GiGPO, 512 tasks | 10.8 ms, 369× faster | a loop, 4.00 s | Some CPU, 2 cores | 2026-12-02 -->"
        "\n\n"
    )
    text = results.RESULTS.read_text()
    assert text.startswith(INTRO + "<!-- summary -->\n")  # the intro kept, the summary right after it
    assert text.endswith(TRAIN)
    assert text.count("<!-- summary -->") == 1


def test_headlines_appear_in_the_summary_with_their_anchor(results: ModuleType) -> None:
    results.write_section(
        "## Training: seconds per phase",
        "body",
        headlines=[("iteration, bf16", "44.3 s", "fp32 compute, 70.0 s", "Some CPU, 2 cores", "2026-12-01")],
    )
    text = results.RESULTS.read_text()
    assert "**Summary** (generated from each section's headline lines by benchmarks/results.py" in text
    assert "| section | what | figure | baseline | machine | date |" in text
    rows = summary_rows(text)
    assert rows == [
        "| [Advantage ops](#advantage-ops) | (no headline line in the section) | | | | |",
        "| [State keys](#state-keys) | exact keys | 4.45 GB/s | python-xxhash loop, 2.12 GB/s | Some CPU, 2 cores | "
        "2026-12-01 |",
        "| [Training: seconds per phase](#training-seconds-per-phase) | iteration, bf16 | 44.3 s | "
        "fp32 compute, 70.0 s | Some CPU, 2 cores | 2026-12-01 |",
    ]
    # The summary is no '## ' section of its own: the file still has exactly the three sections.
    assert len(re.findall(r"^## ", text, re.MULTILINE)) == 3


def test_refreshing_twice_gives_the_same_text(results: ModuleType) -> None:
    first = results.refresh()
    second = results.refresh()
    assert first == second == results.RESULTS.read_text()
    results.write_section("## State keys", "other", headlines=[("w", "f", "b", "m", "d")])
    once = results.RESULTS.read_text()
    assert results.refresh() == once


def test_a_new_section_is_appended(results: ModuleType) -> None:
    before = sections(results)
    results.write_section("## Learner cost per episode", "3.2x less", headlines=[("w", "1.30 s", "b", "m", "d")])
    after = sections(results)
    assert list(after) == [*before, "## Learner cost per episode"]
    assert after["## Advantage ops"] == before["## Advantage ops"]
    assert after["## State keys"] == before["## State keys"]
    assert after["## Training: seconds per phase"] == TRAIN + "\n"  # one blank line before the next heading
    assert after["## Learner cost per episode"] == (
        "## Learner cost per episode\n\n3.2x less\n\n<!-- headline: w | 1.30 s | b | m | d -->\n"
    )
    assert summary_rows(results.RESULTS.read_text())[-1] == (
        "| [Learner cost per episode](#learner-cost-per-episode) | w | 1.30 s | b | m | d |"
    )


def test_anchors_follow_github(results: ModuleType) -> None:
    assert results.anchor("Training: seconds per phase") == "training-seconds-per-phase"
    assert results.anchor("Rollouts (vLLM, bf16)") == "rollouts-vllm-bf16"
    assert results.section_anchors("# A\n\n## A\n\n### B\n\n## B\n") == ["a-1", "b-1"]


def test_a_malformed_headline_is_refused(results: ModuleType) -> None:
    with pytest.raises(ValueError, match="5 fields"):
        results.write_section("## X", "body", headlines=[("only", "four", "fields", "here")])
    with pytest.raises(ValueError, match="'\\|'"):
        results.write_section("## X", "body", headlines=[("a | b", "f", "b", "m", "d")])
    with pytest.raises(ValueError, match="heading"):
        results.write_section("Advantage ops", "body")
