"""Running a testbed study: every (task, noise, arm, seed) once, in worker processes, resumable.

Records go to ``<out>/records/<task>.jsonl``, one line per finished run, written by this process only (workers
return their records), so a killed study loses at most the runs in flight: a rerun reads the lines back, drops a
torn last line, and runs only what is missing. The baselines and the anchor sweep of a task are cached beside them
(``<task>.baselines.json``, ``<task>.sweep.json``). ``<out>/spec.json`` holds what the records were made with: a
rerun whose settings, tasks, anchors, sweep or baselines differ is refused (arms, noise levels and seeds may grow).
A failed run stops the study: the queued runs are cancelled, the finished ones are kept.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import platform
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import asdict
from pathlib import Path
from typing import Any

from pyagentrl.testbed.arms import Arm, parse_arm
from pyagentrl.testbed.loop import RunSettings, TaskSpec, keyer_for, train_run
from pyagentrl.testbed.spec import Spec

RunKey = tuple[str, str, str, int]  # task, noise, arm, seed
_KEYERS: dict[str, Any] = {}  # per worker process: a keyer's embedding cache outlives one run


def records_dir(out: Path) -> Path:
    return out / "records"


class StudyError(RuntimeError):
    """A study that cannot go on: the message names the run or the setting."""


def read_records(out: Path, task: str) -> list[dict[str, Any]]:
    """The finished runs of ``task``; a torn last line (a kill while writing) is dropped from the file, and a last
    line without its newline gets one, so that the next record starts a line of its own."""
    path = records_dir(out) / f"{task}.jsonl"
    if not path.exists():
        return []
    text = path.read_text()
    lines = text.splitlines()
    records = []
    for i, line in enumerate(lines):
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            if i != len(lines) - 1:
                raise StudyError(f"{path}: line {i + 1} is not JSON (only a last line can be torn by a kill)") from None
    if len(records) != len(lines) or (text and not text.endswith("\n")):
        _write_text(path, "".join(_line(r) for r in records))
    return records


def _line(record: dict[str, Any]) -> str:
    return json.dumps(record, separators=(",", ":")) + "\n"


def _append(out: Path, task: str, record: dict[str, Any]) -> None:
    path = records_dir(out) / f"{task}.jsonl"
    with path.open("a") as f:
        f.write(_line(record))
        f.flush()
        os.fsync(f.fileno())


def _round(record: dict[str, Any]) -> dict[str, Any]:
    return {k: [round(x, 4) for x in v] if isinstance(v, list) else v for k, v in record.items()}


def _worker(task: TaskSpec, arm_name: str, noise: str, seed: int, settings: RunSettings, anchors: dict) -> dict:
    import torch

    torch.set_num_threads(1)
    arm = parse_arm(arm_name)
    keyer = None
    if arm.reads_text:
        assert arm.anchors is not None
        if arm.anchors not in _KEYERS:
            _KEYERS[arm.anchors] = keyer_for(arm.anchors, {**anchors.get(arm.anchors, {}), "num_threads": 1})
        keyer = _KEYERS[arm.anchors]
    record = train_run(task, arm, noise, seed, settings, keyer)
    return _round({"task": task.name, "noise": noise, "arm": arm.name, "seed": seed, **record})


def pending_runs(spec: Spec, out: Path) -> list[tuple[TaskSpec, str, Arm, int]]:
    """The runs not yet recorded, seed by seed (submitted in that order, so a study stopped early has mostly whole
    seeds; the report pairs arms on the seeds both have)."""
    done: set[RunKey] = set()
    for task in spec.tasks:
        done |= {(r["task"], r["noise"], r["arm"], r["seed"]) for r in read_records(out, task.name)}
    return [
        (task, noise, arm, seed)
        for seed in range(spec.seeds)
        for task, noise, arm in spec.runs()
        if (task.name, noise, arm.name, seed) not in done
    ]


def run_study(spec: Spec, out: Path, workers: int = 2, log: Callable[[str], None] = print) -> None:
    """Runs what is missing of ``spec`` into ``out`` (see the module doc), then its baselines and anchor sweep."""
    from pyagentrl.testbed.baselines import task_baselines
    from pyagentrl.testbed.sweep import anchor_sweep

    started = time.perf_counter()
    check_output_dir(spec, out)
    records_dir(out).mkdir(parents=True, exist_ok=True)
    _write_json(out / "spec.json", _spec_json(spec))
    for task in spec.tasks:
        path = records_dir(out) / f"{task.name}.baselines.json"
        if not path.exists():
            log(f"{task.name}: baselines (random mover, blind sequence)")
            _write_json(path, task_baselines(task, spec))
        path = records_dir(out) / f"{task.name}.sweep.json"
        if not path.exists() and (spec.sweep.minhash or spec.sweep.simhash or spec.sweep.embedding):
            log(f"{task.name}: anchor sweep")
            _write_json(path, anchor_sweep(task, spec))
    todo = pending_runs(spec, out)
    total = len(spec.runs()) * spec.seeds
    log(f"{total - len(todo)} of {total} runs recorded; {len(todo)} to go on {workers} workers")
    anchors = {mode: dict(options) for mode, options in spec.anchors.items()}
    # Spawned, not forked: a fork after the embedding encoder or torch's thread pool started can hang the child.
    with ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn")) as pool:
        futures = {
            pool.submit(_worker, task, arm.name, noise, seed, spec.settings, anchors): (
                task.name,
                noise,
                arm.name,
                seed,
            )
            for task, noise, arm, seed in todo
        }
        for done, future in enumerate(as_completed(futures), 1):
            task_name, noise, arm_name, seed = futures[future]
            try:
                record = future.result()
            except Exception as exc:
                for queued in futures:
                    queued.cancel()
                raise StudyError(
                    f"run {task_name} / noise {noise} / {arm_name} / seed {seed} failed: {exc!r} "
                    f"({done - 1} runs of this invocation were recorded; rerun to go on)"
                ) from exc
            _append(out, task_name, record)
            if done % 20 == 0 or done == len(todo):
                elapsed = time.perf_counter() - started
                log(f"{done}/{len(todo)} runs, {elapsed:.0f} s ({task_name} {noise} {arm_name} seed {seed})")
    records = [r for task in spec.tasks for r in read_records(out, task.name)]
    timing_path = out / "timing.json"
    invocations = json.loads(timing_path.read_text())["invocations"] if timing_path.exists() else []
    if todo:
        invocations.append({"runs": len(todo), "wall_seconds": round(time.perf_counter() - started, 1)})
    timing = {
        "runs": len(records),
        "run_seconds": round(sum(r["seconds"] for r in records), 1),
        "workers": workers,
        "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores",
        "invocations": invocations,
    }
    _write_json(timing_path, timing)


def _write_text(path: Path, text: str) -> None:
    """Written whole or not at all (a temporary file, then a rename)."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    tmp.replace(path)


def _write_json(path: Path, value: Any) -> None:
    _write_text(path, json.dumps(value, indent=1) + "\n")


#: What the records of a study depend on; a rerun into the same folder must keep them.
FIXED = ("settings", "tasks", "anchors", "sweep", "baselines")


def check_output_dir(spec: Spec, out: Path) -> None:
    """Refuses ``out`` when its records were made with other settings, tasks, anchors, sweep or baselines."""
    path = out / "spec.json"
    if not path.exists():
        return
    stored = json.loads(path.read_text())
    current = json.loads(json.dumps(_spec_json(spec)))  # tuples as lists, as stored
    for key in FIXED:
        if stored.get(key) != current[key]:
            raise StudyError(
                f"{out} holds records made with other {key} ({json.dumps(stored.get(key))}, now "
                f"{json.dumps(current[key])}): give another --out, or restore the spec"
            )


def _spec_json(spec: Spec) -> dict[str, Any]:
    return {
        "name": spec.name,
        "seeds": spec.seeds,
        "settings": asdict(spec.settings),
        "tasks": [asdict(t) for t in spec.tasks],
        "arms": [a.name for a in spec.arms],
        "noise_levels": list(spec.noise_levels),
        "noise_arms": [a.name for a in spec.noise_arms],
        "anchors": {k: dict(v) for k, v in spec.anchors.items()},
        "sweep": asdict(spec.sweep),
        "baselines": {"blind_length": spec.blind_length, "selection_tasks": spec.selection_tasks},
    }
