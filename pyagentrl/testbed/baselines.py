"""What a trained testbed policy must beat on a task's pool: a uniform random mover (the untrained tabular policy
is exactly this one: its logits start at 0) and the best blind sequence of moves chosen on other task seeds."""

from __future__ import annotations

from functools import partial
from typing import Any

import numpy as np

from pyagentrl.envs.open_loop import best_open_loop, play
from pyagentrl.envs.registry import make_env
from pyagentrl.testbed.loop import TASK_SEED_BASE, TaskSpec, uniform_episodes
from pyagentrl.testbed.spec import Spec

SELECTION_SEED_BASE = 100_000  # the blind sequence is chosen on these seeds, never on the pool's
RANDOM_MOVER_ITERATIONS = 20


def random_mover(task: TaskSpec, spec: Spec, seed: int = 0) -> dict[str, Any]:
    """Success of the uniform policy over the task's pool, drawn as training draws tasks."""
    batches = uniform_episodes(task, spec.settings, "none", RANDOM_MOVER_ITERATIONS, seed, stream="random_mover")
    won = [w for episodes in batches for w in episodes.won]
    return {"success": float(np.mean(won)), "episodes": len(won)}


def blind_sequence(task: TaskSpec, spec: Spec) -> dict[str, Any]:
    """The best fixed sequence of at most ``spec.blind_length`` moves on ``spec.selection_tasks`` other seeds, and
    its success on the pool (each pool task counts once, as each is drawn equally often in training)."""
    factory = partial(make_env, task.env, **dict(task.config))
    selection = [SELECTION_SEED_BASE + i for i in range(spec.selection_tasks)]
    best = best_open_loop(factory, selection, spec.blind_length)
    env = factory()
    wins = sum(play(env, seed, best.actions) for seed in range(TASK_SEED_BASE, TASK_SEED_BASE + task.pool))
    env.close()
    return {
        "actions": list(best.actions),
        "selection_wins": best.wins,
        "selection_tasks": best.tasks,
        "success": wins / task.pool,
    }


def task_baselines(task: TaskSpec, spec: Spec) -> dict[str, Any]:
    return {"random_mover": random_mover(task, spec), "blind_sequence": blind_sequence(task, spec)}
