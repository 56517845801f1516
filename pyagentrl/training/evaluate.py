"""Scoring on held-out tasks: ``pyagentrl eval CHECKPOINT``, the trainer's own scores of the untrained and the trained
policy, and the lines that report them. The success rate on held-out tasks (seeds from ``EVAL_SEED_BASE`` on, which
training never draws), one episode per task, with a Wilson 95 % interval and each task's outcome.

`score_policy` scores whatever weights an engine holds, so that a checkpoint (here), the base model
(`pyagentrl.training.baselines`) and the trainer's own in-process engine at the start and at the end of a run are
measured by one piece of code, on the same tasks.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

from pyagentrl.envs import EnvBatch, env_factory, prompt_family
from pyagentrl.hashing import StateKeyer
from pyagentrl.rollout import RolloutEngine, collect, make_engine
from pyagentrl.rollout.models import resolve_model
from pyagentrl.training.checkpoint import is_lora_checkpoint, load_checkpoint_policy
from pyagentrl.training.config import TrainConfig, load_config
from pyagentrl.training.seeding import held_out_seeds
from pyagentrl.training.settings import rollout_config
from pyagentrl.training.stats import wilson_interval


def score_policy(
    engine: RolloutEngine, config: TrainConfig, tasks: int, temperature: float | None = None
) -> dict[str, Any]:
    """The success of the weights ``engine`` holds on the first ``tasks`` held-out tasks of ``config``'s
    environment: one episode each, with the config's rollout settings and sampling seed ``config.seed``, at
    ``temperature`` (default: the config's; 0: greedy).

    Returns ``tasks``, ``successes``, ``success_rate``, ``ci95`` (Wilson), ``won`` (each task's outcome, in task-seed
    order, so that policies scored on the same tasks pair up) and ``temperature``.
    """
    seeds = held_out_seeds(tasks)
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
    low, high = wilson_interval(wins, s.num_trajs)
    return {
        "tasks": s.num_trajs,
        "successes": wins,
        "success_rate": wins / s.num_trajs,
        "ci95": [low, high],
        "won": [int(w) for w in won],  # task by task, in task-seed order: arms scored on the same tasks pair up
        "temperature": settings.sampling.temperature,
    }


def checkpoint_engine(checkpoint: Path, base_model: str, name: str, options: dict[str, Any]) -> RolloutEngine:
    """The engine ``name`` holding the policy of ``checkpoint``: its ``model/`` directory, or for a LoRA run the base
    model ``base_model`` (the run's ``model`` setting) with the adapter's merged weights sent in."""
    if not is_lora_checkpoint(checkpoint):
        return make_engine(name, checkpoint / "model", **options)
    from pyagentrl.training.actor import hf_weights

    engine = make_engine(name, resolve_model(base_model), **options)
    engine.update_weights(hf_weights(load_checkpoint_policy(checkpoint)))
    return engine


def evaluate_checkpoint(
    checkpoint: str | Path, tasks: int = 32, engine: str | None = None, temperature: float | None = None
) -> dict[str, Any]:
    path = Path(checkpoint)
    if not (path / "state.json").is_file() or not (path / "config.yaml").is_file():
        raise FileNotFoundError(f"{checkpoint} is not a checkpoint directory (<run>/checkpoints/iter_NNNNNN)")
    if tasks < 1:
        raise ValueError(f"--tasks must be >= 1, got {tasks}")
    config = load_config(path / "config.yaml")
    name = engine or config.rollout.engine
    options = dict(config.rollout.engine_options) if name == config.rollout.engine else {}
    policy = checkpoint_engine(path, config.model, name, options)
    try:
        score = score_policy(policy, config, tasks, temperature)
    finally:
        policy.close()
    result = {"checkpoint": str(path.resolve()), **score, "engine": name}
    (path / "eval.json").write_text(json.dumps(result, indent=2) + "\n")
    wins, (low, high) = score["successes"], score["ci95"]
    seeds = held_out_seeds(tasks)
    print(
        f"{path}: success rate {wins}/{score['tasks']} = {score['success_rate']:.3f} "
        f"(95 % CI {low:.3f}-{high:.3f}; held-out task seeds {seeds[0]}..{seeds[-1]}, "
        f"temperature {score['temperature']}, engine {name})"
    )
    return result


def describe_tasks(config: TrainConfig) -> str:
    """What the held-out tasks of ``config`` test, in words: one pinned map measures learning that map only."""
    pinned = config.env.options.get("map_seed")
    if pinned is not None:
        return (
            f"{config.env.name} with its map pinned (map_seed {pinned}): every task is the same map, so a gain "
            "shows the policy learned that map, not that it reads maps"
        )
    return f"{config.env.name} tasks drawn from held-out seeds, never trained on"


def _named_baselines(baselines: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    named = [("a uniform random mover", baselines["random_mover"])]
    blind = baselines["blind_sequence"]
    if "none" not in blind:
        first, last = blind["selection_range"]
        moves = ", ".join(blind["sequence"])
        named.append((f"the best blind sequence chosen on seeds {first}..{last} ({moves})", blind))
    return named


def score_line(what: str, entry: dict[str, Any], detail: str = "") -> str:
    """One held-out score (an entry of ``eval.json``) as a line of text."""
    low, high = entry["ci95"]
    return (
        f"Held-out score, {what}: {entry['successes']:g}/{entry['tasks']} = {entry['success_rate']:.3f} "
        f"(95 % CI {low:.3f}-{high:.3f}{detail})"
    )


def baselines_line(baselines: dict[str, Any]) -> str:
    """The model-free baselines of ``eval.json`` in one line each (`pyagentrl.training.baselines`)."""
    return "\n".join(score_line(name, b) for name, b in _named_baselines(baselines))


def _compare(trained: dict[str, Any], other: dict[str, Any]) -> str:
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
