"""``pyagentrl plot RUN_DIR``: the training curves of a run as one PNG (``<run>/plots/curves.png``)."""

from __future__ import annotations

from pathlib import Path

from pyagentrl.training.metrics import read_metrics

PANELS = (
    ("success_rate", "success rate"),
    ("mean_score", "mean episode score"),
    ("episode_length", "episode length (steps)"),
    ("invalid_action_rate", "invalid-action rate"),
    ("anchor_rows_in_groups", "rows in anchor groups ≥ 2"),
    ("advantage_std", "advantage std"),
    ("clip_fraction", "clip fraction"),
    ("entropy", "entropy (nats/token)"),
    ("kl", "KL to reference"),
    ("grad_norm", "gradient norm"),
    ("tokens_per_second", "generated tokens/s"),
)
PHASES = ("rollout", "keys", "advantages", "old_logprobs", "update", "weight_sync")


def plot_run(run_dir: str | Path) -> Path:
    """Draws every metric panel and the seconds per phase; returns the PNG's path."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise ImportError(f"pyagentrl plot needs matplotlib: pip install 'pyagentrl[train]' ({exc})") from exc
    run = Path(run_dir)
    rows = read_metrics(run)
    if not rows:
        raise ValueError(f"{run} has no metrics.jsonl lines to plot")
    iterations = [row["iteration"] for row in rows]
    fig, axes = plt.subplots(3, 4, figsize=(16, 10), constrained_layout=True)
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
    return out
