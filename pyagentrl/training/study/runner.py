"""Running a study: each family x arm x seed as a supervised ``pyagentrl train`` subprocess (resumed from its latest
checkpoint when interrupted, skipped once recorded), scored by ``pyagentrl eval`` and recorded, then the report."""

from __future__ import annotations

import contextlib
import ctypes
import json
import signal
import subprocess
import sys
import time
from pathlib import Path

from pyagentrl.training.checkpoint import keep_model_only
from pyagentrl.training.study.records import read_result, record_dir, write_record
from pyagentrl.training.study.report import write_report
from pyagentrl.training.study.spec import StudySpec

_PR_SET_PDEATHSIG = 1  # linux/prctl.h


def _cli(*args: str) -> list[str]:
    # -P keeps the working directory (a source checkout without the compiled ops) off sys.path.
    return [sys.executable, *(["-P"] if sys.version_info >= (3, 11) else []), "-m", "pyagentrl", *args]


class RunFailed(RuntimeError):
    """A run's process failed; the study stops there (rerunning it resumes)."""


def _resumable(seed_dir: Path) -> Path | None:
    """The run directory under ``seed_dir`` that has a checkpoint to resume from. A run that died before its first
    checkpoint has nothing to resume: it is kept, renamed ``abandoned-run-*``, and the seed is trained again."""
    resumable = None
    for run in sorted(seed_dir.glob("run-*")):
        if (run / "checkpoints" / "latest").is_file():
            resumable = run
        else:
            run.rename(run.with_name(f"abandoned-{run.name}"))
    return resumable


def _die_with_parent() -> None:
    """Runs in the child before exec (Linux): the kernel sends it SIGTERM when the study process dies, so a killed
    study leaves no training process behind to write into the run its rerun resumes."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


def _run(*args: str) -> None:
    command = _cli(*args)
    preexec = _die_with_parent if sys.platform.startswith("linux") else None
    if subprocess.run(command, preexec_fn=preexec).returncode != 0:
        raise RunFailed(f"{' '.join(args)} failed; rerun the study to continue from the last checkpoint")


def run_arm(spec: StudySpec, report: str | Path, family: str, arm: str, seed: int) -> None:
    """Trains (or resumes, or skips) one run, scores its last checkpoint on held-out tasks and writes its record
    under ``report``."""
    report = Path(report).resolve()
    record = record_dir(report, family, arm, seed)
    done = read_result(report, family, arm, seed)
    if done is not None:
        if spec.keep == "model" and Path(done["run"]).is_dir():  # again: a study killed while removing
            keep_model_only(Path(done["run"]) / "checkpoints")
        return
    seed_dir = spec.output / family / arm / f"seed{seed}"
    seed_dir.mkdir(parents=True, exist_ok=True)
    overrides = [*spec.families[family], *spec.arms[arm], f"seed={seed}", "name=run", f"output_dir={seed_dir}"]
    previous = _resumable(seed_dir)
    clock = time.perf_counter()
    if previous is not None:
        print(f"[study] {family}/{arm}/seed{seed}: resuming {previous}", flush=True)
        _run("train", "--resume", str(previous))
        run = previous
    else:
        print(f"[study] {family}/{arm}/seed{seed}: training", flush=True)
        _run("train", str(spec.config), *overrides)
        (run,) = [r for r in seed_dir.glob("run-*") if (r / "checkpoints" / "latest").is_file()]
    checkpoint = run / "checkpoints" / (run / "checkpoints" / "latest").read_text().strip()
    if not (checkpoint / "eval.json").is_file():
        _run("eval", str(checkpoint), "--tasks", str(spec.eval_tasks))
    result = {
        "family": family,
        "arm": arm,
        "seed": seed,
        "run": str(run),
        "eval": json.loads((checkpoint / "eval.json").read_text()),
        "seconds_last_invocation": time.perf_counter() - clock,
    }
    write_record(record, run, result)
    print(f"[study] {family}/{arm}/seed{seed}: recorded in {record}", flush=True)
    if spec.keep == "model":  # only now: until the record exists, a killed study resumes this run
        keep_model_only(run / "checkpoints")


def run_study(spec: StudySpec, report: str | Path) -> Path:
    """Every (family, arm, seed) run that is not done, then the report in ``report``. Seed by seed, so that a study
    stopped part way has every arm of its first seeds (a comparison) rather than every seed of its first arms."""
    report = Path(report).resolve()
    for seed in spec.seeds:
        for family in spec.families:
            for arm in spec.arms:
                run_arm(spec, report, family, arm, seed)
    return write_report(spec, report)
