"""``pyagentrl eval CHECKPOINT``: the success rate of a checkpoint's policy on held-out tasks (seeds from
``EVAL_SEED_BASE`` on, which training never draws), one episode per task, with a Wilson 95 % interval and each
task's outcome.

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
from pyagentrl.training.config import TrainConfig, load_config
from pyagentrl.training.stats import wilson_interval

# The trainer calls score_policy, so this module takes nothing from pyagentrl.training.trainer at import time (an
# import cycle); EVAL_SEED_BASE and rollout_config are imported where they are used.


def held_out_seeds(tasks: int) -> list[int]:
    """The task seeds of ``tasks`` held-out tasks: ``EVAL_SEED_BASE + k``, which training never draws."""
    from pyagentrl.training.trainer import EVAL_SEED_BASE

    if tasks < 1:
        raise ValueError(f"tasks must be >= 1, got {tasks}")
    return [EVAL_SEED_BASE + k for k in range(tasks)]


def score_policy(
    engine: RolloutEngine, config: TrainConfig, tasks: int, temperature: float | None = None
) -> dict[str, Any]:
    """The success of the weights ``engine`` holds on the first ``tasks`` held-out tasks of ``config``'s
    environment: one episode each, with the config's rollout settings and sampling seed ``config.seed``, at
    ``temperature`` (default: the config's; 0: greedy).

    Returns ``tasks``, ``successes``, ``success_rate``, ``ci95`` (Wilson), ``won`` (each task's outcome, in task-seed
    order, so that policies scored on the same tasks pair up) and ``temperature``.
    """
    from pyagentrl.training.trainer import rollout_config

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


def _engine(checkpoint: Path, base_model: str, name: str, options: dict[str, Any]) -> RolloutEngine:
    state = json.loads((checkpoint / "state.json").read_text())
    if not state["lora"]:
        return make_engine(name, checkpoint / "model", **options)
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    from pyagentrl.training.actor import hf_weights

    base_path = resolve_model(base_model)
    engine = make_engine(name, base_path, **options)
    policy = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(base_path), checkpoint / "model")
    engine.update_weights(hf_weights(policy))
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
    policy = _engine(path, config.model, name, options)
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
