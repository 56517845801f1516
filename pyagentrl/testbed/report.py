"""The study's README, generated from its records: curves with 95 % bands over seeds, success at equal episode
budgets, episodes to reach 50 % and 80 %, paired differences against GRPO and the critic, anchor quality, the
baselines and the anchor sweep. FINDINGS.md beside it is written by hand."""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path
from typing import Any

import numpy as np

from pyagentrl.testbed.arms import ANCHORS, STEP_ESTIMATORS
from pyagentrl.testbed.spec import Spec
from pyagentrl.testbed.study import read_records, records_dir
from pyagentrl.training.stats import mean_interval

WINDOW = 5  # iterations averaged for a success level (one iteration is only groups x group_size episodes)
THRESHOLDS = (0.5, 0.8)


def smooth(curve: list[float], window: int = WINDOW) -> np.ndarray:
    """Trailing moving average; the first ``window − 1`` points average what exists so far (curves only)."""
    values = np.asarray(curve, dtype=np.float64)
    sums = np.cumsum(values)
    out = sums.copy()
    out[window:] = sums[window:] - sums[:-window]
    return out / np.minimum(np.arange(1, values.size + 1), window)


def budget_end(iterations: int, fraction: float) -> int:
    """The iteration count at ``fraction`` of the budget, halves rounded up (12.5 of 50 is 13)."""
    return max(1, math.floor(fraction * iterations + 0.5))


def success_at(curve: list[float], fraction: float) -> float:
    """Mean success of the ``WINDOW`` iterations that end at ``fraction`` of the budget (:func:`budget_end`)."""
    end = budget_end(len(curve), fraction)
    return float(np.mean(curve[max(0, end - WINDOW) : end]))


def episodes_to(curve: list[float], threshold: float, per_iteration: int) -> int | None:
    """Episodes sampled until the mean success of ``WINDOW`` whole iterations first reaches ``threshold`` (None:
    never in the budget)."""
    full = smooth(curve)[WINDOW - 1 :]
    reached = np.flatnonzero(full >= threshold)
    return None if reached.size == 0 else int(reached[0] + WINDOW) * per_iteration


def _ci(values: list[float]) -> str:
    """Percent, with the 95 % t-interval's half-width over seeds."""
    mean, half = mean_interval(values)
    return f"{mean * 100:.0f}" if half is None else f"{mean * 100:.0f} ± {half * 100:.0f}"


def _median_episodes(values: list[int | None], budget: int) -> str:
    reached = [v for v in values if v is not None]
    if len(reached) * 2 <= len(values):
        return f"> {budget} ({len(reached)}/{len(values)})"
    ordered = sorted(v if v is not None else budget + 1 for v in values)
    return f"{statistics.median(ordered):.0f} ({len(reached)}/{len(values)})"


def _paired(records: dict[int, dict[str, Any]], baseline: dict[int, dict[str, Any]]) -> str:
    seeds = sorted(set(records) & set(baseline))
    if len(seeds) < 2:
        return "–"
    diffs = [success_at(records[s]["success"], 1.0) - success_at(baseline[s]["success"], 1.0) for s in seeds]
    mean, half = mean_interval(diffs)
    assert half is not None
    mark = " *" if abs(mean) > half else ""
    return f"{mean * 100:+.0f} [{(mean - half) * 100:+.0f}, {(mean + half) * 100:+.0f}]{mark}"


def _versus_pooled(arm: str, by_seed: dict[int, dict[str, Any]], runs: dict) -> str:
    """A step-level arm against the same estimator with pooled anchors (no state matching): what its anchors add."""
    estimator, _, anchors = arm.partition("-")
    if estimator not in STEP_ESTIMATORS or anchors == "pooled":
        return "–"
    return _paired(by_seed, runs.get((f"{estimator}-pooled", "none"), {}))


def _table(spec: Spec, runs: dict[tuple[str, str], dict[int, dict[str, Any]]], noise: str) -> list[str]:
    per_iteration = spec.settings.groups * spec.settings.group_size
    budget = per_iteration * spec.settings.iterations
    quarter, half = (budget_end(spec.settings.iterations, f) * per_iteration for f in (0.25, 0.5))
    lines = [
        f"| arm | success at {quarter} episodes | at {half} | at {budget} (final) | episodes to 50 % "
        "(seeds reaching) | to 80 % | final minus GRPO, paired | final minus critic, paired | final minus pooled "
        "anchors, paired | anchor purity | "
        "rows grouped (oracle) |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for (arm, level), by_seed in runs.items():
        if level != noise or not by_seed:
            continue
        recs = list(by_seed.values())
        curves = [r["success"] for r in recs]
        cells = [
            f"`{arm}`",
            _ci([success_at(c, 0.25) for c in curves]),
            _ci([success_at(c, 0.5) for c in curves]),
            _ci([success_at(c, 1.0) for c in curves]),
            *[_median_episodes([episodes_to(c, t, per_iteration) for c in curves], budget) for t in THRESHOLDS],
            "–" if arm == "grpo" else _paired(by_seed, runs.get(("grpo", "none"), {})),
            "–" if arm == "critic" else _paired(by_seed, runs.get(("critic", "none"), {})),
            _versus_pooled(arm, by_seed, runs),
        ]
        if recs[0].get("purity"):
            cells.append(f"{np.mean([np.mean(r['purity']) for r in recs]):.3f}")
            grouped = np.mean([np.mean(r["grouped"]) for r in recs])
            oracle = np.mean([np.mean(r["oracle_grouped"]) for r in recs])
            cells.append(f"{grouped:.2f} ({oracle:.2f})")
        else:
            cells += ["–", "–"]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def _figure(
    spec: Spec, task: str, runs: dict[tuple[str, str], dict[int, dict[str, Any]]], baselines: dict, out: Path
) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    levels = ("none", *spec.noise_levels)
    per_iteration = spec.settings.groups * spec.settings.group_size
    fig, axes = plt.subplots(2, len(levels), figsize=(4.2 * len(levels), 6.4), sharex=True, sharey=True, squeeze=False)
    palette = ("tab:green", "tab:blue", "tab:orange", "tab:purple", "tab:red", "tab:cyan")
    colours = dict(zip(ANCHORS, palette, strict=True))
    for row, estimator in enumerate(STEP_ESTIMATORS):
        for col, level in enumerate(levels):
            ax = axes[row][col]
            shown = [("grpo", "none", "grey", "--"), ("critic", "none", "black", ":")]
            shown += [(f"{estimator}-{a}", level, colours[a], "-") for a in ANCHORS]
            if level != "none":  # oracle and pooled anchors ignore the text: their runs without noise stand for all
                shown = [s if not s[0].endswith(("-oracle", "-pooled")) else (s[0], "none", s[2], s[3]) for s in shown]
            for arm, at, colour, style in shown:
                by_seed = runs.get((arm, at))
                if not by_seed:
                    continue
                curves = np.stack([smooth(r["success"]) for r in by_seed.values()])
                x = np.arange(1, curves.shape[1] + 1) * per_iteration
                mean = curves.mean(axis=0)
                ax.plot(x, mean, color=colour, linestyle=style, label=arm, linewidth=1.4)
                if curves.shape[0] > 1:
                    half = [mean_interval(list(c))[1] or 0.0 for c in curves.T]
                    ax.fill_between(x, mean - half, mean + half, color=colour, alpha=0.12, linewidth=0)
            ax.axhline(baselines["random_mover"]["success"], color="tab:brown", linewidth=0.8, label="random mover")
            ax.axhline(baselines["blind_sequence"]["success"], color="tab:pink", linewidth=0.8, label="blind sequence")
            ax.set_title(f"{estimator}, noise {level}", fontsize=9)
            ax.set_ylim(0, 1)
            ax.grid(alpha=0.3)
            if row == 1:
                ax.set_xlabel("episodes")
            if col == 0:
                ax.set_ylabel("success (5-iteration mean)")
            if col == 0:  # the panel without noise shows every arm
                ax.legend(fontsize=6, loc="upper left")
    fig.suptitle(f"{task}: mean over seeds, 95 % band", fontsize=10)
    fig.tight_layout()
    path = out / f"{task}.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _sweep_lines(sweep: list[dict[str, Any]]) -> list[str]:
    lines = ["| noise | anchors | setting | purity | rows grouped | oracle grouped |", "|---|---|---|---|---|---|"]
    for row in sweep:
        setting = f"k={row['k']}" if "k" in row else f"threshold {row['threshold']}" if "threshold" in row else "–"
        lines.append(
            f"| {row['noise']} | {row['mode']} | {setting} | {row['purity']:.3f} | {row['grouped']:.2f} | "
            f"{row['oracle_grouped']:.2f} |"
        )
    return lines


def write_report(spec: Spec, out: Path, command: str) -> Path:
    """``<out>/README.md`` and one figure per task from the records in ``out``."""
    settings = spec.settings
    per_iteration = settings.groups * settings.group_size
    timing = json.loads((out / "timing.json").read_text()) if (out / "timing.json").exists() else {}
    lines = [
        f"# Credit-assignment testbed: {spec.name}",
        "",
        f"Generated from the records by `{command}` (rerun it to continue or rebuild; FINDINGS.md is written by hand).",
        "",
        "A tabular softmax policy over the true state, trained by policy gradient with each arm's advantages on real "
        "rollouts of the project's environments (docs/testbed.md). Every arm runs the same seeds; a seed fixes the "
        "tasks drawn, the actions sampled and the noise, so two arms with the same seed differ only through their "
        "advantages.",
        "",
        f"Settings: {settings.iterations} iterations of {settings.groups} task groups x {settings.group_size} "
        f"episodes ({per_iteration} episodes an iteration, {per_iteration * settings.iterations} in all), SGD "
        f"lr {settings.lr} on the logits, {settings.epochs} epoch(s), clip {settings.clip}, γ {settings.gamma}, "
        f"λ {settings.lam}, critic value step {settings.value_lr}; {spec.seeds} seeds per arm. Anchors: "
        + ", ".join(f"{mode} {dict(options)}" for mode, options in spec.anchors.items())
        + ".",
        "",
        "Success is the share of an iteration's episodes (fresh tasks from the pool, sampled before the "
        f"update) that win, averaged over {WINDOW} iterations; ± is the 95 % t-interval over seeds. Episodes "
        f"to a level: the first time the mean of {WINDOW} whole iterations reaches it, the median over seeds "
        "(seeds that never reach it count as beyond the budget). Paired differences compare the final success"
        " of two arms seed by seed ([95 % interval]; * where it excludes 0); pooled anchors: the same "
        "estimator with every step of a task group in one anchor group (no state matching), so that column is"
        " what the arm's anchors add. Purity: of the rows in anchor groups of two or more, the share whose "
        "true state is their group's most common one. Rows grouped: the share of rows in anchor groups of two"
        " or more (the oracle's in brackets).",
    ]
    if timing:
        walls = [i["wall_seconds"] / 60 for i in timing["invocations"]]
        lines += [
            "",
            f"Compute: {timing['runs']} runs, {timing['run_seconds'] / 60:.1f} min of run time on {timing['workers']} "
            f"workers ({timing['machine']}); wall time of the invocations that ran them, baselines and sweep "
            f"included: {' + '.join(f'{w:.1f}' for w in walls)} = {sum(walls):.1f} min.",
        ]
    for task in spec.tasks:
        records = read_records(out, task.name)
        runs: dict[tuple[str, str], dict[int, dict[str, Any]]] = {}
        for arm in spec.arms:
            runs[(arm.name, "none")] = {}
        for level in spec.noise_levels:
            for arm in spec.noise_arms:
                runs[(arm.name, level)] = {}
        for record in records:  # only what the spec asks for: a folder may hold runs of a larger spec
            key = (record["arm"], record["noise"])
            if key in runs and record["seed"] < spec.seeds:
                runs[key][record["seed"]] = record
        baselines = json.loads((records_dir(out) / f"{task.name}.baselines.json").read_text())
        blind = baselines["blind_sequence"]
        lines += [
            "",
            f"## {task.name}",
            "",
            f"`{task.env}` with {dict(task.config)}, tasks drawn from a pool of {task.pool} seeds.",
            "",
            f"Baselines on the pool: a uniform random mover (the untrained policy) wins "
            f"{baselines['random_mover']['success'] * 100:.1f} % ({baselines['random_mover']['episodes']} episodes); "
            f"the best blind sequence of at most {spec.blind_length} moves, chosen on {blind['selection_tasks']} other "
            f"seeds ({', '.join(blind['actions'])}; {blind['selection_wins']} wins there), wins "
            f"{blind['success'] * 100:.1f} % of the pool.",
            "",
            f"![{task.name}]({_figure(spec, task.name, runs, baselines, out).name})",
        ]
        for level in ("none", *spec.noise_levels):
            lines += ["", f"### Noise: {level}", "", *_table(spec, runs, level)]
        sweep_path = records_dir(out) / f"{task.name}.sweep.json"
        if sweep_path.exists():
            lines += [
                "",
                "### Anchor quality by setting (random mover's episodes, no training)",
                "",
                *_sweep_lines(json.loads(sweep_path.read_text())),
            ]
    path = out / "README.md"
    path.write_text("\n".join(lines) + "\n")
    return path
