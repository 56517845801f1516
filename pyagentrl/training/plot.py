"""``pyagentrl plot RUN_DIR``: the training curves of a run as one PNG (``<run>/plots/curves.png``) and, for a run
that scored its policies on held-out tasks, the learning curve against those scores (``<run>/plots/learning.png``)."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

from pyagentrl.training.metrics import read_metrics

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
    rows = read_metrics(run)
    if not rows:
        raise ValueError(f"{run} has no metrics.jsonl lines to plot")
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
    rows = read_metrics(run)
    record = json.loads((run / EVAL_FILE).read_text())
    fig, ax = plt.subplots(figsize=(7, 4), constrained_layout=True)
    ax.plot([r["iteration"] for r in rows], [r["success_rate"] for r in rows], marker="o", label="training episodes")
    last = rows[-1]["iteration"] + 1 if rows else 1
    for policy, x in (("untrained", -0.5), ("trained", last - 0.5)):
        entry = record.get(policy)
        for score, label, marker, shift in ((entry, "T", "s", 0.0), ((entry or {}).get("greedy"), "greedy", "D", 0.3)):
            if not score:
                continue
            low, high = score["ci95"]
            rate = score["success_rate"]
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
