"""``pyagentrl plot RUN_DIR``: the training curves of a run as one PNG (``<run>/plots/curves.png``) and, for a run
that scored its policies on held-out tasks, the learning curve against those scores (``<run>/plots/learning.png``)."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

from pyagentrl.training.metrics import METRICS_FILE

EVAL_FILE = "eval.json"  # written by the trainer (training/trainer.py)

PANELS = (
    ("success_rate", "success rate"),
    ("mean_score", "mean episode score"),
    ("episode_length", "episode length (steps)"),
    ("invalid_action_rate", "invalid-action rate"),
    ("anchor_rows_in_groups", "rows in anchor groups ≥ 2"),
    ("advantage_std", "advantage std"),
    ("clip_fraction", "clip fraction"),
    ("entropy", "entropy (nats/token)"),
    ("action_entropy", "entropy of the action tokens"),
    ("logprob_gap", "|engine - learner| log-prob"),
    ("lr", "learning rate"),
    ("kl", "KL to reference"),
    ("grad_norm", "gradient norm"),
    ("tokens_per_second", "generated tokens/s"),
)
PHASES = ("rollout", "keys", "advantages", "old_logprobs", "update", "weight_sync")


class PlotError(ValueError):
    """A run directory that cannot be plotted: no metrics, or a line or ``eval.json`` the plots cannot read."""


def _metrics(run: Path) -> list[dict[str, Any]]:
    """The run's metrics rows, each checked to be what the trainer writes: a JSON object with an integer
    ``iteration`` and numbers (or null) under the plotted keys. A line that is not JSON, as a kill leaves one, is
    skipped (as `read_metrics` does); any other bad line is refused, naming it."""
    path = run / METRICS_FILE
    try:
        lines = path.read_text().splitlines() if path.is_file() else []
    except (OSError, UnicodeDecodeError) as exc:
        raise PlotError(f"{path} is not readable text ({exc})") from None
    numbers = {key for key, _ in PANELS} | {f"seconds_{phase}" for phase in PHASES}
    rows = []
    for n, line in enumerate(lines, 1):
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue
        where = f"{path}, line {n}"
        if not isinstance(row, dict):
            raise PlotError(f"{where} is not a JSON object: {line[:80]}")
        if not _is_number(row.get("iteration")) or not float(row["iteration"]).is_integer():
            raise PlotError(f"{where} has no integer iteration: {row.get('iteration')!r}")
        bad = next((k for k in sorted(numbers & set(row)) if row[k] is not None and not _is_number(row[k])), None)
        if bad is not None:
            raise PlotError(f"{where}: {bad} is not a number: {row[bad]!r}")
        rows.append(row)
    if not rows:
        raise PlotError(f"{run} has no metrics.jsonl lines to plot")
    return rows


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _pyplot() -> Any:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise ImportError(f"pyagentrl plot needs matplotlib: pip install 'pyagentrl[train]' ({exc})") from exc
    return plt


def plot_run(run_dir: str | Path) -> Path:
    """Draws every metric panel and the seconds per phase (and, with an ``eval.json``, :func:`plot_learning`);
    returns the PNG's path."""
    plt = _pyplot()
    run = Path(run_dir)
    rows = _metrics(run)
    iterations = [row["iteration"] for row in rows]
    fig, axes = plt.subplots(4, 4, figsize=(16, 13), constrained_layout=True)
    flat = axes.flatten()
    for ax, (key, title) in zip(flat, PANELS, strict=False):
        points = [(i, row[key]) for i, row in zip(iterations, rows, strict=True) if row.get(key) is not None]
        if points:
            ax.plot(*zip(*points, strict=True), marker="o")
        ax.set_title(title)
        ax.set_xlabel("iteration")
    ax = flat[len(PANELS)]
    bottom = [0.0] * len(rows)
    for phase in PHASES:
        values = [float(row.get(f"seconds_{phase}") or 0.0) for row in rows]
        ax.bar(iterations, values, bottom=bottom, label=phase)
        bottom = [b + v for b, v in zip(bottom, values, strict=True)]
    ax.set_title("seconds per phase")
    ax.set_xlabel("iteration")
    ax.legend(fontsize=7)
    fig.suptitle(run.name)
    out = run / "plots" / "curves.png"
    out.parent.mkdir(exist_ok=True)
    fig.savefig(out, dpi=80)
    plt.close(fig)
    if (run / EVAL_FILE).is_file():
        plot_learning(run)
    return out


def plot_learning(run_dir: str | Path) -> Path:
    """The training success per iteration, and the held-out success of the untrained policy (before iteration 0) and
    of the trained one (after the last) with their Wilson 95 % intervals, at the run's temperature and greedy."""
    plt = _pyplot()
    run = Path(run_dir)
    rows = _metrics(run)
    record = _eval_record(run / EVAL_FILE)
    fig, ax = plt.subplots(figsize=(7, 4), constrained_layout=True)
    ax.plot([r["iteration"] for r in rows], [r["success_rate"] for r in rows], marker="o", label="training episodes")
    last = rows[-1]["iteration"] + 1 if rows else 1
    for policy, x in (("untrained", -0.5), ("trained", last - 0.5)):
        entry = record.get(policy)
        for score, label, marker, shift in ((entry, "T", "s", 0.0), ((entry or {}).get("greedy"), "greedy", "D", 0.3)):
            if not score:
                continue
            rate = score["success_rate"]
            low, high = score["ci95"] or (rate, rate)  # None: one greedy trial, drawn without a bar
            name = f"held out, {policy}, {label}={score['temperature']:g}: {score['successes']}/{score['tasks']}"
            ax.errorbar(x + shift, rate, yerr=[[rate - low], [high - rate]], fmt=marker, capsize=4, label=name)
    ax.set_ylim(-0.02, 1.02)
    ax.set_xlabel("iteration")
    ax.set_ylabel("success rate")
    ax.set_title(textwrap.fill(f"{run.name}: {record.get('tasks_are', '')}", 100), fontsize=7)
    ax.legend(fontsize=7, loc="lower right")
    out = run / "plots" / "learning.png"
    out.parent.mkdir(exist_ok=True)
    fig.savefig(out, dpi=90)
    plt.close(fig)
    return out


def _eval_record(path: Path) -> dict[str, Any]:
    """``eval.json`` as the trainer writes it: a JSON object whose policy entries are objects or null."""
    try:
        record = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise PlotError(f"{path} is not readable JSON ({exc})") from None
    if not isinstance(record, dict) or not all(isinstance(record.get(p) or {}, dict) for p in ("untrained", "trained")):
        raise PlotError(f"{path} is not an evaluation record (a JSON object with untrained and trained entries)")
    return record
