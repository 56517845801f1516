"""The run's random streams: every random choice of iteration i derives from (run seed, i, stream, rank), so a
resumed run makes exactly the iterations the uninterrupted run would have made, and evaluation draws its tasks from
seeds training never draws."""

from __future__ import annotations

from enum import IntEnum

import numpy as np

#: Training draws task seeds below this; evaluation uses seeds from it on, so they are never trained on.
EVAL_SEED_BASE = 2**30


class Stream(IntEnum):
    """What a seed is for; the values are part of every recorded run's seeds and never change."""

    TASKS = 0  # the iteration's task seeds (one per task group, over all ranks)
    SAMPLING = 1  # the rollout engine's sampling seed (per rank)
    MINIBATCHES = 2  # the order of the batch's rows in the minibatches
    TORCH = 3  # torch's global generator during the iteration (e.g. LoRA dropout; per rank)


def iteration_seed(seed: int, iteration: int, stream: Stream, rank: int = 0) -> int:
    """An independent 31-bit seed for each (run seed, iteration, stream, rank)."""
    return int(np.random.default_rng([seed, iteration, int(stream), rank]).integers(2**31))


def task_seeds(seed: int, iteration: int, num_groups: int) -> list[int]:
    """The iteration's task seeds, one per task group over all ranks, all below ``EVAL_SEED_BASE``."""
    rng = np.random.default_rng([seed, iteration, int(Stream.TASKS)])
    return [int(s) for s in rng.integers(0, EVAL_SEED_BASE, size=num_groups)]


def held_out_seeds(tasks: int) -> list[int]:
    """The task seeds of ``tasks`` held-out tasks: ``EVAL_SEED_BASE + k``, which training never draws."""
    if tasks < 1:
        raise ValueError(f"tasks must be >= 1, got {tasks}")
    return [EVAL_SEED_BASE + k for k in range(tasks)]
