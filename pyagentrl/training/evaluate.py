"""Scoring on held-out tasks: ``pyagentrl eval CHECKPOINT``, the trainer's own scores of the untrained and the trained
policy, and the lines that report them. The success rate on held-out tasks (seeds from ``EVAL_SEED_BASE`` on, which
training never draws), one episode per task, with a Wilson 95 % interval and each task's outcome.

`score_policy` scores whatever weights an engine holds, so that a checkpoint (here), the base model
(`pyagentrl.training.baselines`) and the trainer's own in-process engine at the start and at the end of a run are
measured by one piece of code, on the same tasks.
"""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path
from typing import Any

from pyagentrl.envs import EnvBatch, env_factory, prompt_family
from pyagentrl.hashing import StateKeyer
from pyagentrl.rollout import RolloutEngine, collect, make_engine
from pyagentrl.rollout.models import resolve_model
from pyagentrl.training.checkpoint import check_policy_files, is_lora_checkpoint, load_checkpoint_policy
from pyagentrl.training.config import TrainConfig, load_stored_config
from pyagentrl.training.seeding import held_out_seeds
from pyagentrl.training.settings import rollout_config
from pyagentrl.training.stats import wilson_interval
from pyagentrl.training.tasks import TaskSet, trained_keys


def score_policy(
    engine: RolloutEngine,
    config: TrainConfig,
    tasks: int,
    temperature: float | None = None,
    task_set: TaskSet | None = None,
) -> dict[str, Any]:
    """The success of the weights ``engine`` holds on the first ``tasks`` held-out tasks of ``config``'s
    environment: one episode each, with the config's rollout settings and sampling seed ``config.seed``, at
    ``temperature`` (default: the config's; 0: greedy).

    Returns ``tasks``, ``successes``, ``success_rate``, ``won`` (each task's outcome, in task-seed order, so that
    policies scored on the same tasks pair up), ``temperature``, ``distinct_tasks`` (by content,
    `pyagentrl.training.tasks`; ``task_set`` if already known) and ``ci95`` (Wilson): over the episodes when
    they sample, over the distinct tasks when greedy (copies of one task replay one deterministic episode), and
    None for one distinct task played greedily, which is a single trial.
    """
    seeds = held_out_seeds(tasks)
    task_set = task_set or TaskSet.of(config, seeds)
    settings = rollout_config(config, sampling_seed=config.seed)
    if temperature is not None:
        settings = replace(settings, sampling=replace(settings.sampling, temperature=temperature))
    env = config.env
    with EnvBatch(env_factory(env.name, **env.options), tasks, 1, workers=env.workers, backend=env.backend) as envs:
        rollout = collect(engine, envs, prompt_family(env.name), seeds, StateKeyer(), settings)
    s = rollout.steps
    won = [False] * s.num_trajs
    for t, w in zip(s.traj_ids.tolist(), rollout.won.tolist(), strict=True):
        won[t] = w
    wins = sum(won)
    score = {
        "tasks": s.num_trajs,
        "successes": wins,
        "success_rate": wins / s.num_trajs,
        "ci95": list(wilson_interval(wins, s.num_trajs)),
        "won": [int(w) for w in won],  # task by task, in task-seed order: arms scored on the same tasks pair up
        "temperature": settings.sampling.temperature,
    }
    return by_content(score, task_set, deterministic=settings.sampling.temperature == 0)


def by_content(entry: dict[str, Any], task_set: TaskSet, deterministic: bool) -> dict[str, Any]:
    """``entry`` (a score with ``won``, task by task) with ``distinct_tasks`` and, when its episodes are
    deterministic (greedy, a blind sequence) and tasks repeat, its interval over the distinct tasks: copies of one
    task replay one episode, so each distinct task counts once (None for a single one). Copies that disagree (a
    slippery lake) show the episodes were not deterministic: the interval stays over the episodes."""
    entry["distinct_tasks"] = task_set.distinct
    if deterministic and task_set.distinct < len(task_set.keys):
        outcomes: dict[str, set[int]] = {}
        for key, won in zip(task_set.keys, entry["won"], strict=True):
            outcomes.setdefault(key, set()).add(int(won))
        if all(len(seen) == 1 for seen in outcomes.values()):
            wins = sum(seen.pop() for seen in outcomes.values())
            entry["ci95"] = list(wilson_interval(wins, len(outcomes))) if len(outcomes) > 1 else None
    return entry


def checkpoint_engine(
    checkpoint: Path, base_model: str, name: str, options: dict[str, Any], trust_remote_code: bool = False
) -> RolloutEngine:
    """The engine ``name`` holding the policy of ``checkpoint``: its ``model/`` directory (safetensors only), or for
    a LoRA run the base model ``base_model`` (the run's ``model`` setting) with the adapter's merged weights sent
    in. ``options`` must pass :func:`pyagentrl.rollout.check_engine_options`; ``trust_remote_code`` is the caller's."""
    check_policy_files(checkpoint)
    if not is_lora_checkpoint(checkpoint):
        return make_engine(name, checkpoint / "model", trust_remote_code=trust_remote_code, **options)
    from pyagentrl.training.actor import hf_weights

    engine = make_engine(name, resolve_model(base_model), trust_remote_code=trust_remote_code, **options)
    engine.update_weights(hf_weights(load_checkpoint_policy(checkpoint, trust_remote_code)))
    return engine


def evaluate_checkpoint(
    checkpoint: str | Path,
    tasks: int = 32,
    engine: str | None = None,
    temperature: float | None = None,
    trust_remote_code: bool = False,
) -> dict[str, Any]:
    """Scores ``checkpoint`` on ``tasks`` held-out tasks and writes its ``eval.json``. The checkpoint's stored config
    gives the environment and rollout settings, never ``trust_remote_code`` (this call's) nor an engine option off
    the engine's known list (refused)."""
    path = Path(checkpoint)
    if not (path / "state.json").is_file() or not (path / "config.yaml").is_file():
        raise FileNotFoundError(f"{checkpoint} is not a checkpoint directory (<run>/checkpoints/iter_NNNNNN)")
    if tasks < 1:
        raise ValueError(f"--tasks must be >= 1, got {tasks}")
    if temperature is not None and not (temperature >= 0 and math.isfinite(temperature)):
        raise ValueError(f"--temperature: must be >= 0 (0: greedy), got {temperature}")
    config = load_stored_config(path / "config.yaml")
    name = engine or config.rollout.engine
    options = dict(config.rollout.engine_options) if name == config.rollout.engine else {}
    held_out = TaskSet.of(config, held_out_seeds(tasks))
    trained_on = len(set(held_out.keys) & trained_keys(config))  # by content, against every task the run drew
    policy = checkpoint_engine(path, config.model, name, options, trust_remote_code)
    try:
        score = score_policy(policy, config, tasks, temperature, held_out)
    finally:
        policy.close()
    result = {
        "checkpoint": str(path.resolve()),
        **score,
        "engine": name,
        **held_out.record(),
        "held_out_trained_on": trained_on,
        "tasks_are": describe_tasks(config, held_out, trained_on),
    }
    (path / "eval.json").write_text(json.dumps(result, indent=2) + "\n")
    seeds = held_out_seeds(tasks)
    print(
        f"{path}: success rate {score['successes']}/{score['tasks']} = {score['success_rate']:.3f} "
        f"({interval_text(score)}; held-out task seeds {seeds[0]}..{seeds[-1]}, temperature {score['temperature']}, "
        f"engine {name})\n  Tasks: {result['tasks_are']}."
    )
    return result


def describe_tasks(config: TrainConfig, task_set: TaskSet, trained_on: int | None = None) -> str:
    """What the held-out tasks of ``config`` test, in words: how many distinct tasks they are and, when known,
    how many of them the run trained on (``trained_on``)."""
    tasks, distinct = len(task_set.keys), task_set.distinct
    if distinct == tasks:
        count = f"{tasks} distinct tasks"
    elif distinct == 1:
        count = f"1 distinct task x {tasks} samples"
    else:
        count = f"{distinct} distinct tasks in {tasks} samples"
    text = f"{config.env.name}, {count}"
    if config.env.options.get("map_seed") is not None:
        text += f" (map pinned: map_seed {config.env.options['map_seed']})"
    if trained_on is not None:
        text += (
            f"; {trained_on} of {task_set.distinct} trained on"
            if trained_on
            else "; none of them trained on (compared by content)"
        )
    if task_set.distinct == 1:
        text += ": a gain shows the policy learned this task, not that it solves others"
    return text


def _named_baselines(baselines: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    named = [("a uniform random mover", baselines["random_mover"])]
    blind = baselines["blind_sequence"]
    if "none" not in blind:
        first, last = blind["selection_range"]
        moves = ", ".join(blind["sequence"])
        named.append((f"the best blind sequence chosen on seeds {first}..{last} ({moves})", blind))
    return named


def interval_text(entry: dict[str, Any]) -> str:
    """An entry's interval and what it is over: its episodes, or its distinct tasks when fewer (greedy)."""
    distinct, tasks = entry.get("distinct_tasks", entry["tasks"]), entry["tasks"]
    if entry["ci95"] is None:
        return f"no interval: {tasks} greedy episodes of 1 distinct task are one trial"
    low, high = entry["ci95"]
    if distinct == tasks:
        return f"95 % CI {low:.3f}-{high:.3f}"
    if entry.get("temperature") == 0:
        return f"95 % CI {low:.3f}-{high:.3f} over its {distinct} distinct tasks"
    return f"95 % CI {low:.3f}-{high:.3f} over {tasks} samples of {distinct} distinct task{'s' if distinct > 1 else ''}"


def score_line(what: str, entry: dict[str, Any], detail: str = "") -> str:
    """One held-out score (an entry of ``eval.json``) as a line of text."""
    return (
        f"Held-out score, {what}: {entry['successes']:g}/{entry['tasks']} = {entry['success_rate']:.3f} "
        f"({interval_text(entry)}{detail})"
    )


def baselines_line(baselines: dict[str, Any]) -> str:
    """The model-free baselines of ``eval.json`` in one line each (`pyagentrl.training.baselines`)."""
    return "\n".join(score_line(name, b) for name, b in _named_baselines(baselines))


def _compare(trained: dict[str, Any], other: dict[str, Any]) -> str:
    if trained["ci95"] is None or other["ci95"] is None:
        return "not apart from"  # one trial has no interval to be apart with
    if trained["ci95"][0] > other["ci95"][1]:
        return "above"
    if trained["ci95"][1] < other["ci95"][0]:
        return "below"
    return "not apart from"


def eval_summary(record: dict[str, Any]) -> str:
    """The verdict of ``eval.json``: the trained policy's Wilson interval against the untrained policy's and, when
    scored, the model-free baselines', on the same held-out tasks at the same temperature."""
    trained, untrained = record["trained"], record["untrained"]
    verdict = (
        "the trained policy's 95 % interval lies above the untrained one's"
        if _compare(trained, untrained) == "above"
        else "the intervals overlap: this run does not show that training helped"
    )
    greedy = ""
    if "greedy" in trained and "greedy" in untrained:
        greedy = f" (greedy: {untrained['greedy']['successes']} and {trained['greedy']['successes']})"
    lines = [
        f"Learned? untrained {untrained['successes']}/{untrained['tasks']}, trained {trained['successes']}/"
        f"{trained['tasks']} on the same held-out tasks at temperature {trained['temperature']}{greedy}: {verdict}."
    ]
    if "baselines" in record:
        for name, baseline in _named_baselines(record["baselines"]):
            place = _compare(trained, baseline)
            relation = "overlaps" if place == "not apart from" else f"lies {place}"
            greedy_place = f" (greedy: {_compare(trained['greedy'], baseline)})" if "greedy" in trained else ""
            lines.append(
                f"  Against {name}, {baseline['successes']:g}/{baseline['tasks']}: the trained policy's interval "
                f"{relation} its interval{greedy_place}."
            )
    lines.append(f"  Tasks: {record['tasks_are']}.")
    return "\n".join(lines)
