"""The files a study keeps under its report directory: each scored run's record (``results/<family>/<arm>/seed<k>/``
with ``done.json``, ``metrics.jsonl`` and ``config.yaml``) and the families' stored ``baselines.json``; reading and
writing them, and `BrokenRecord` when one cannot be read."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pyagentrl.cache import atomic_write
from pyagentrl.training.metrics import METRICS_FILE, read_metrics

DONE = "done.json"  # a scored run's evaluation; its presence marks the run finished
_EVAL_KEYS = {"success_rate", "successes", "tasks", "won"}  # what the report reads of an evaluation
BASELINES = "baselines.json"  # beside the report: per family, a `pyagentrl baselines` record on the held-out tasks


class BrokenRecord(ValueError):
    """A record's ``done.json`` is there but the record cannot be read (only a hand edit leads here)."""


def record_dir(report: Path, family: str, arm: str, seed: int) -> Path:
    """Where a scored run's record lies (committed with the report; see the package docstring)."""
    return report / "results" / family / arm / f"seed{seed}"


def read_result(report: Path, family: str, arm: str, seed: int) -> dict[str, Any] | None:
    """A scored run's ``done.json`` with its metrics rows under ``"metrics"``, or None while it is not scored."""
    record = record_dir(report, family, arm, seed)
    if not (record / DONE).is_file():
        return None
    try:
        result = json.loads((record / DONE).read_text())
    except json.JSONDecodeError as exc:
        raise BrokenRecord(f"{record / DONE} is not JSON ({exc}); remove {record} to run it again") from None
    metrics = read_metrics(record)
    evaluation = result.get("eval") if isinstance(result, dict) else None
    if not isinstance(evaluation, dict) or not evaluation.keys() >= _EVAL_KEYS or not metrics:
        raise BrokenRecord(
            f"{record} has {DONE} but not its evaluation ({', '.join(sorted(_EVAL_KEYS))}) or not its "
            f"{METRICS_FILE} rows; restore them, or remove {record} to run it again"
        )
    return {**result, "metrics": metrics}


def write_record(record: Path, run: Path, result: dict[str, Any]) -> None:
    """The run's metrics and config first, ``done.json`` last and whole: a record with ``done.json`` is complete."""
    record.mkdir(parents=True, exist_ok=True)
    for name in (METRICS_FILE, "config.yaml"):
        atomic_write(record / name, (run / name).read_text())
    atomic_write(record / DONE, json.dumps(result, indent=2) + "\n")


def stored_baselines(report: Path) -> dict[str, Any]:
    """``<report>/baselines.json``: per family, a `pyagentrl baselines` record (empty when there is none)."""
    path = report / BASELINES
    if not path.is_file():
        return {}
    try:
        stored = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise BrokenRecord(
            f"{path} is not JSON ({exc}); remove it or write it again with pyagentrl baselines"
        ) from None
    if not isinstance(stored, dict):
        raise BrokenRecord(f"{path} holds no mapping of families to baselines; remove it or write it again")
    return stored
