"""`pyagentrl study`: the spec is checked before any run, every arm x seed runs once, a finished run is never run
again, an interrupted one resumes from its checkpoint, and the report is built from the runs' records alone."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from testkit.training import TINY, cli

from pyagentrl.training.config import ConfigError
from pyagentrl.training.study import load_spec


def _spec(tmp_path: Path, **changes: object) -> Path:
    spec = {
        "name": "tiny",
        "config": str(TINY),
        "seeds": [1, 2],
        "eval_tasks": 2,
        "families": {"frozenlake": {"iterations": 1, "env.options": {"size": 4, "max_steps": 3}}},
        "arms": {"grpo": {"algorithm.estimator": "grpo"}, "gigpo-simhash": {"anchors.mode": "simhash"}},
        **changes,
    }
    path = tmp_path / "spec.yaml"
    path.write_text(json.dumps(spec))  # JSON is YAML
    return path


@pytest.mark.parametrize(
    ("changes", "match"),
    [
        ({"seeds": []}, "seeds"),
        ({"seeds": [1, 1]}, "seeds"),
        ({"eval_tasks": 0}, "eval_tasks"),
        ({"config": "missing.yaml"}, "config"),
        ({"arms": {}}, "arms"),
        ({"arms": {"a b": {}}}, "arms name"),
        ({"families": {"x": [1]}}, "families.x"),
        ({"extra": 1}, "unknown keys"),
        ({"keep": "all"}, "keep must be one of model, checkpoints"),
        ({"arms": {"bad": {"algorithm.estimator": "ppo"}}}, "arm 'bad'.*estimator"),
        # Issue 51: the name names directories; YAML's true is no seed or count; a seed must fit the run's.
        ({"name": "../x"}, "name must be a word"),
        ({"seeds": [True]}, "seeds must be a non-empty list of distinct ints"),
        ({"seeds": [2**32]}, r"seeds must be .* in \[0, 2\^32 - 1\]"),
        ({"eval_tasks": True}, "eval_tasks must be an int in"),
    ],
)
def test_bad_specs_are_refused_before_any_run(tmp_path: Path, changes: dict[str, object], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        load_spec(_spec(tmp_path, **changes))


def test_overrides_keep_their_types(tmp_path: Path) -> None:
    spec = load_spec(_spec(tmp_path), output=tmp_path / "runs")
    assert spec.families["frozenlake"] == ["iterations=1", 'env.options={"size": 4, "max_steps": 3}']
    assert spec.arms["grpo"] == ['algorithm.estimator="grpo"'] and spec.output == tmp_path / "runs"


@pytest.mark.slow
def test_study_runs_each_arm_once_and_resumes(tmp_path: Path) -> None:
    spec_path = _spec(tmp_path, keep="checkpoints")  # a scored run stays resumable: the test resumes one below
    runs, report = tmp_path / "runs", tmp_path / "report"
    args = ("study", str(spec_path), "--output", str(runs), "--report", str(report))
    first = cli(*args, timeout=1200)
    assert first.stdout.count(": training") == 4
    done = sorted(report.glob("results/*/*/seed*/done.json"))
    assert len(done) == 4
    results = [json.loads(p.read_text()) for p in done]
    assert all(r["eval"]["tasks"] == 2 and r["eval"]["checkpoint"].startswith(str(runs)) for r in results)
    assert all(len(r["eval"]["won"]) == 2 for r in results)  # each task's outcome: the arms pair up task by task
    for path, result in zip(done, results, strict=True):  # the record holds copies of the run's metrics and config
        for name in ("metrics.jsonl", "config.yaml"):
            assert (path.parent / name).read_text() == (Path(result["run"]) / name).read_text()
    table = (report / "README.md").read_text()
    assert "| grpo |" in table and "| gigpo-simhash |" in table and "2 of 2 |" in table
    assert table.count(" ms | 2 of 2 |") == 2  # the arms' own seconds (keys + advantages)
    assert len({line.count("|") for line in table.splitlines() if line.startswith("|")}) == 1  # one column count
    assert "Status: 4 of 4 runs finished." in table
    assert " ± " in table and "nan" not in table  # two seeds: an interval
    assert "| baseline |" in table and table.count(", 4 tasks |") == 1  # gigpo-simhash − grpo over 2 seeds x 2 tasks
    assert (report / "curves.png").stat().st_size > 10_000
    metrics = [json.loads(line) for line in (done[0].parent / "metrics.jsonl").read_text().splitlines()]
    assert 0 < metrics[0]["anchor_purity"] <= 1
    # The untrained policy's success: iteration 0 of one run per seed (the first arm's).
    firsts = []
    for seed in (1, 2):
        record = report / "results" / "frozenlake" / "grpo" / f"seed{seed}"
        firsts.append(json.loads((record / "metrics.jsonl").read_text().splitlines()[0]))
    wins, episodes = sum(round(m["success_rate"] * m["episodes"]) for m in firsts), sum(m["episodes"] for m in firsts)
    assert f"{wins}/{episodes} training episodes succeeded" in table

    assert all((Path(r["eval"]["checkpoint"]) / "deepspeed").is_dir() for r in results)  # keep: checkpoints

    # The records are the study: with the run directories gone (a new clone), nothing runs and the report is the same.
    shutil.move(runs, tmp_path / "runs-aside")
    again = cli(*args)
    assert again.returncode == 0 and ": training" not in again.stdout and ": resuming" not in again.stdout
    assert (report / "README.md").read_text() == table
    shutil.move(tmp_path / "runs-aside", runs)

    # Interrupted after its checkpoint: resumed (not retrained); a run that died before any checkpoint: retrained.
    shutil.rmtree(report / "results" / "frozenlake" / "grpo" / "seed2")
    (report / "results" / "frozenlake" / "gigpo-simhash" / "seed1" / "done.json").unlink()  # an incomplete record
    (dead,) = (runs / "frozenlake" / "gigpo-simhash" / "seed1").glob("run-*")
    shutil.rmtree(dead / "checkpoints")
    (dead / "checkpoints").mkdir()
    third = cli(*args, timeout=1200)
    assert "frozenlake/grpo/seed2: resuming" in third.stdout
    assert "frozenlake/gigpo-simhash/seed1: training" in third.stdout
    assert third.stdout.count(": training") == 1 and not dead.exists()
    assert (dead.parent / f"abandoned-{dead.name}" / "metrics.jsonl").is_file()  # kept, not deleted
    assert len(sorted(report.glob("results/*/*/seed*/done.json"))) == 4


@pytest.mark.slow
def test_a_scored_run_keeps_its_model_only_by_default(tmp_path: Path) -> None:
    # One run, checkpointed twice: once scored, the earlier checkpoint and the last one's optimizer and RNG states go
    # (about 90 % of a real run's disk); the model still loads and scores, and resuming is refused by name.
    from transformers import AutoModelForCausalLM

    from pyagentrl.training.checkpoint import ResumeError, read_state

    families = {"frozenlake": {"iterations": 2, "checkpoint.every": 1, "env.options": {"size": 4, "max_steps": 3}}}
    spec_path = _spec(tmp_path, seeds=[1], arms={"grpo": {"algorithm.estimator": "grpo"}}, families=families)
    runs, report = tmp_path / "runs", tmp_path / "report"
    out = cli("study", str(spec_path), "--output", str(runs), "--report", str(report), timeout=1200)
    assert out.returncode == 0 and "Status: 1 of 1 runs finished." in (report / "README.md").read_text()
    result = json.loads((report / "results" / "frozenlake" / "grpo" / "seed1" / "done.json").read_text())
    checkpoints = Path(result["run"]) / "checkpoints"
    assert sorted(p.name for p in checkpoints.iterdir()) == ["iter_000002", "latest"]
    last = checkpoints / "iter_000002"
    kept = ["config.yaml", "deepspeed.json", "eval.json", "model", "state.json"]
    assert sorted(p.name for p in last.iterdir()) == kept
    assert json.loads((last / "eval.json").read_text()) == result["eval"]
    AutoModelForCausalLM.from_pretrained(last / "model")
    with pytest.raises(ResumeError, match="holds the model only"):
        read_state(last, 1)


@pytest.mark.slow
def test_report_only_needs_no_finished_run(tmp_path: Path) -> None:
    args = ("study", str(_spec(tmp_path)), "--output", str(tmp_path / "runs"), "--report", str(tmp_path / "r"))
    out = cli(*args, "--report-only")
    table = (tmp_path / "r" / "README.md").read_text()
    assert "0 of 2 |" in table and "Untrained policy: no finished run yet." in table and out.returncode == 0
    assert len({line.count("|") for line in table.splitlines() if line.startswith("|")}) == 1  # one column count
    assert "Status: 0 of 4 runs finished (rerun" in table and "FINDINGS.md" not in table
    # 4x4 maps need six moves, the episodes last three: no blind sequence wins (tests/envs/test_open_loop.py), and
    # it is chosen on other task seeds than the held-out ones (tests/training/test_baselines.py).
    assert "Best fixed sequence of at most 3 actions, chosen on the task seeds 0..199" in table
    assert "(where it wins 0/200)" in table and "): 0/2 (0.000" in table
    assert "Uniform random mover over the admissible actions, up to 3 steps: 0/2 a pass" in table
    # A hand-written FINDINGS.md beside the report is linked, and never overwritten.
    (tmp_path / "r" / "FINDINGS.md").write_text("by hand\n")
    cli(*args, "--report-only")
    assert "[FINDINGS.md](FINDINGS.md)" in (tmp_path / "r" / "README.md").read_text()
    assert (tmp_path / "r" / "FINDINGS.md").read_text() == "by hand\n"


@pytest.mark.parametrize(
    ("done", "metrics"),
    [("{not json", None), ('{"eval": {}}', None), ('{"eval": {}}', '{"a": 1}\n'), ("[]", '{"a": 1}\n')],
)
def test_a_broken_record_is_named(tmp_path: Path, done: str, metrics: str | None) -> None:
    # A hand-edited record (done.json without its metrics, or not JSON, or without its evaluation) stops the report
    # with the record's path, not with an IndexError or KeyError deep in it.
    report = tmp_path / "r"
    record = report / "results" / "frozenlake" / "grpo" / "seed1"
    record.mkdir(parents=True)
    (record / "done.json").write_text(done)
    if metrics is not None:
        (record / "metrics.jsonl").write_text(metrics)
    out = cli(
        "study",
        str(_spec(tmp_path)),
        "--output",
        str(tmp_path / "runs"),
        "--report",
        str(report),
        "--report-only",
        check=False,
    )
    assert out.returncode == 1 and "Traceback" not in out.stderr
    assert f"pyagentrl study: {record}" in out.stderr and "remove" in out.stderr


def test_the_shipped_study_spec_is_valid() -> None:
    from testkit.peers import require_embedding_model
    from testkit.training import REPO

    require_embedding_model()  # one arm uses embedding anchors
    spec = load_spec(REPO / "train" / "studies" / "estimators.yaml")  # every family x arm config validated
    assert set(spec.families) == {"frozenlake", "sokoban"} and len(spec.arms) == 9 and len(spec.seeds) == 3


def test_a_killed_study_leaves_no_run_behind(tmp_path: Path) -> None:
    # The study's child (here a sleeper standing in for `pyagentrl train`) gets SIGTERM when the study dies, even by
    # SIGKILL, so a rerun never races a leftover training process for the same run directory.
    pid_file = tmp_path / "child.pid"
    sleeper = "import os, time; open(os.environ['PID_FILE'], 'w').write(str(os.getpid())); time.sleep(120)"
    parent_code = (
        "import sys\n"
        "from pyagentrl.training.study import runner\n"
        f"runner._cli = lambda *args: [sys.executable, '-c', {sleeper!r}]\n"
        "runner._run('train')\n"
    )
    parent = subprocess.Popen([sys.executable, "-P", "-c", parent_code], env={**os.environ, "PID_FILE": str(pid_file)})
    deadline = time.monotonic() + 60
    while not (pid_file.is_file() and pid_file.read_text()) and time.monotonic() < deadline:
        time.sleep(0.1)
    child = int(pid_file.read_text())
    parent.kill()
    parent.wait()
    while time.monotonic() < deadline:
        try:
            os.kill(child, 0)
        except ProcessLookupError:
            return
        time.sleep(0.1)
    os.kill(child, signal.SIGKILL)
    pytest.fail("the study's child outlived the study")


def test_a_family_without_a_blind_reference_says_why(tmp_path: Path) -> None:
    from pyagentrl.training.study.report import _baseline_lines, family_baselines

    families = {"slippery": {"env.options": {"size": 3, "slippery": True, "max_steps": 3}}}
    spec = load_spec(_spec(tmp_path, families=families), output=tmp_path / "runs")
    record, source = family_baselines(spec, "slippery", {})
    lines = _baseline_lines(record, source, 3)
    assert any(line.startswith("- Best fixed sequence: none (FrozenLakeEnv: an open-loop score") for line in lines)
    assert any(line.startswith("- Uniform random mover") for line in lines)  # the random mover needs no fixed moves
