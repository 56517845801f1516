"""The `pyagentrl` command refuses hostile and careless inputs (issue 51) in one line on stderr,
``pyagentrl <command>: <the problem>``, with exit code 2, before any work: no traceback, no run directory."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from testkit.training import TINY

from pyagentrl.cli import main


def _refused(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    """The one line ``pyagentrl ARGV`` writes on stderr as it exits with code 2."""
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    return lines[0]


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            ["iterations=["],
            "pyagentrl train: iterations: '[' is not a valid value (did not find expected node content)",
        ),
        (["actor.lr={"], "pyagentrl train: actor.lr: '{' is not a valid value (did not find expected node content)"),
        (["name=../x"], "pyagentrl train: name: must be a plain directory name (no '/', not '.' or '..'), got '../x'"),
        (["seed=100000000000000000000"], "pyagentrl train: seed: must lie in [0, 2^32 - 1]"),
        (["actor.lr=inf"], "pyagentrl train: actor.lr: must be a finite number, got inf"),
        (["env.options.bogus=1"], "pyagentrl train: env.options.bogus: unknown option of frozenlake"),
    ],
)
def test_train_refuses_a_bad_setting_before_any_work(
    tmp_path: Path, overrides: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    runs = tmp_path / "runs"
    assert _refused(["train", str(TINY), f"output_dir={runs}", *overrides], capsys).startswith(message)
    assert not runs.exists() and not (tmp_path / "x").exists()  # name=../x would have written tmp_path/x-<time>


def test_train_refuses_an_output_dir_that_is_a_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    afile = tmp_path / "afile"
    afile.write_text("")
    line = _refused(["train", str(TINY), f"output_dir={afile}"], capsys)
    assert (
        line
        == f"pyagentrl train: output_dir: '{afile}' cannot hold run directories: {afile} is a file, not a directory"
    )


def test_train_refuses_a_config_that_is_not_utf8(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "latin1.yaml"
    config.write_bytes("name: café\n".encode("latin-1"))
    line = _refused(["train", str(config)], capsys)
    assert line == f"pyagentrl train: {config} is not UTF-8 text (invalid continuation byte at byte 9)"


@pytest.mark.parametrize("temperature", ["-1", "nan", "inf"])
def test_eval_refuses_a_negative_temperature(
    tmp_path: Path, temperature: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # Refused before the checkpoint is even looked at: this one does not exist.
    line = _refused(["eval", str(tmp_path / "iter_000001"), "--temperature", temperature], capsys)
    assert line == f"pyagentrl eval: --temperature must be a finite number >= 0 (0: greedy), got {float(temperature)}"


@pytest.mark.parametrize(
    ("lines", "message"),
    [
        (['{"iteration": 0}', "[1, 2]"], "metrics.jsonl, line 2 is not a JSON object: [1, 2]"),
        (['{"success_rate": 1.0}'], "metrics.jsonl, line 1 has no integer iteration: None"),
        (['{"iteration": "zero"}'], "metrics.jsonl, line 1 has no integer iteration: 'zero'"),
        (['{"iteration": 0, "success_rate": "high"}'], "metrics.jsonl, line 1: success_rate is not a number: 'high'"),
        ([], "has no metrics.jsonl lines to plot"),
    ],
)
def test_plot_refuses_a_bad_metrics_line(
    tmp_path: Path, lines: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.jsonl").write_text("".join(line + "\n" for line in lines))
    line = _refused(["plot", str(run)], capsys)
    assert line.startswith(f"pyagentrl plot: {run}") and line.endswith(message)
    assert not (run / "plots").exists()


def test_plot_refuses_an_eval_record_that_is_not_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.jsonl").write_text('{"iteration": 0, "success_rate": 0.5}\n')
    (run / "eval.json").write_text("{torn")
    assert _refused(["plot", str(run)], capsys).startswith(f"pyagentrl plot: {run / 'eval.json'} is not readable JSON")


def _study_spec(**changes: object) -> dict:
    return {
        "name": "tiny",
        "config": str(TINY),
        "seeds": [1],
        "eval_tasks": 2,
        "families": {"lake": {"env.options": {"size": 4, "max_steps": 3}}},
        "arms": {"grpo": {"algorithm.estimator": "grpo"}},
        **changes,
    }


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (b"name: [tiny\n", "is not valid YAML: while parsing a flow sequence"),
        (b"name: tiny\nname: again\n", "is not valid YAML: while constructing a mapping"),
        ("name: café\n".encode("latin-1"), "is not UTF-8 text (invalid continuation byte at byte 9)"),
        (b"- tiny\n", "expected a mapping"),
        (yaml.safe_dump(_study_spec(colour="red")).encode(), "unknown keys ['colour']"),
        (yaml.safe_dump(_study_spec(seeds=[True])).encode(), "seeds must be a non-empty list of distinct ints in [0, "),
        (yaml.safe_dump(_study_spec(seeds=[-1])).encode(), "seeds must be a non-empty list of distinct ints in [0, "),
        (yaml.safe_dump(_study_spec(eval_tasks=True)).encode(), "eval_tasks must be an int in [1, 2^30], got True"),
        (yaml.safe_dump(_study_spec(name="../x")).encode(), "name must be a word (letters, digits, '-' or '_')"),
        (yaml.safe_dump(_study_spec(arms=["grpo"])).encode(), "arms must be a non-empty mapping of names to overrides"),
        (
            yaml.safe_dump(_study_spec(arms={"grpo": {"env.options.bogus": 1}})).encode(),
            "family 'lake', arm 'grpo': env.options.bogus: unknown option of frozenlake",
        ),
    ],
)
def test_study_refuses_a_bad_spec_before_any_run(
    tmp_path: Path, text: bytes, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_bytes(text)
    runs, report = tmp_path / "runs", tmp_path / "report"
    line = _refused(["study", str(spec), "--output", str(runs), "--report", str(report)], capsys)
    assert line.startswith("pyagentrl study: study spec") and message in line
    assert not runs.exists() and not report.exists()


def test_baselines_refuses_a_directory_as_out(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import pyagentrl.training.baselines as baselines

    def no_work(*args: object, **kwargs: object) -> None:
        raise AssertionError("the baselines were computed")

    monkeypatch.setattr(baselines, "compute_baselines", no_work)
    line = _refused(["baselines", str(TINY), "--no-policy", "--out", str(tmp_path)], capsys)
    assert line == f"pyagentrl baselines: --out {tmp_path} is a directory; give the path of the JSON file to write"
    afile = tmp_path / "afile"
    afile.write_text("")
    line = _refused(["baselines", str(TINY), "--no-policy", "--out", str(afile / "b.json")], capsys)
    assert (
        line == f"pyagentrl baselines: --out {afile / 'b.json'}: cannot write there: {afile} is a file, not a directory"
    )


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            b"name: t\nseeds: 1\ntasks:\n  5: {env: frozenlake}\narms: [grpo]\n",
            "tasks: a task name names its record files: letters, digits, '.', '-' and '_', got 5",
        ),
        (
            b"name: t\nseeds: 1\ntasks:\n  lake: {env: frozenlake}\narms: [grpo, gigpo-exact]\n"
            b"noise: {levels: [[low]], arms: [gigpo-exact]}\n",
            "noise.levels must be a list of distinct levels, got [['low']]",
        ),
        ("name: café\n".encode("latin-1"), "is not UTF-8 text (invalid continuation byte at byte 9)"),
    ],
)
def test_testbed_refuses_a_bad_spec_before_any_run(
    tmp_path: Path, text: bytes, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_bytes(text)
    line = _refused(["testbed", str(spec), "--out", str(tmp_path / "out")], capsys)
    assert line.startswith("pyagentrl testbed: ") and line.endswith(message)
    assert not (tmp_path / "out").exists()


def test_plot_refuses_a_json_line_that_is_not_a_metrics_row(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Valid JSON, but not what the trainer writes: one line from the loader, not matplotlib's traceback."""
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.jsonl").write_text(json.dumps({"iteration": 0, "grad_norm": [1]}) + "\n")
    assert _refused(["plot", str(run)], capsys).endswith("grad_norm is not a number: [1]")
