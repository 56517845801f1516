"""Synthetic multi-turn batches in the flat layout (one row per environment step), shaped like real
GiGPO batches: task groups of N rollouts, sparse end-of-episode rewards, and anchor states that recur
across the rollouts of a task. Used by the demo, the benchmarks and the tests."""

from __future__ import annotations

import torch

from pyagentrl.ops.batch import StepBatch


def make_step_batch(
    num_tasks: int,
    rollouts: int = 8,
    steps: int | tuple[int, int] = 50,
    response_len: int = 64,
    shared_fraction: float = 0.3,
    win_rate: float = 0.4,
    shuffle: bool = True,
    seed: int = 0,
) -> StepBatch:
    """A batch of ``num_tasks`` × ``rollouts`` trajectories.

    Args:
        steps: trajectory length, or a (min, max) range drawn per trajectory.
        shared_fraction: probability that a row's state comes from a pool of two states per (task,
            step), where rollouts of one task meet; other rows get a state of their own. With 8
            rollouts, 0.4 puts about 30% of rows in anchor groups of size ≥ 2.
        shuffle: permute the rows, as a framework's batch may.
    """
    gen = torch.Generator().manual_seed(seed)
    num_trajs = num_tasks * rollouts
    if isinstance(steps, int):
        lengths = torch.full((num_trajs,), steps, dtype=torch.int64)
    else:
        lengths = torch.randint(steps[0], steps[1] + 1, (num_trajs,), generator=gen)
    traj_ids = torch.repeat_interleave(torch.arange(num_trajs), lengths)
    rows = traj_ids.numel()
    starts = torch.cumsum(lengths, 0) - lengths
    step_ids = torch.arange(rows) - starts[traj_ids]
    group_ids = traj_ids // rollouts

    won = torch.rand(num_trajs, generator=gen) < win_rate
    is_last = step_ids == lengths[traj_ids] - 1
    rewards = torch.where(is_last & won[traj_ids], 10.0, 0.0)
    episode_scores = torch.where(won[traj_ids], 10.0, 0.0)

    # Shared states: one of two states per (task, step); other rows get a state of their own.
    shared = torch.rand(rows, generator=gen) < shared_fraction
    pooled = (group_ids * 4096 + step_ids) * 2 + torch.randint(0, 2, (rows,), generator=gen)
    own = (1 << 40) + torch.arange(rows)
    anchor_ids = torch.where(shared, pooled, own)

    lengths_tok = torch.randint(0, response_len + 1, (rows,), generator=gen)
    response_mask = (torch.arange(response_len)[None, :] < lengths_tok[:, None]).float()

    order = torch.randperm(rows, generator=gen) if shuffle else torch.arange(rows)
    return StepBatch(
        rewards=rewards[order].float(),
        episode_scores=episode_scores[order].float(),
        group_ids=group_ids[order],
        traj_ids=traj_ids[order],
        step_ids=step_ids[order],
        anchor_ids=anchor_ids[order],
        response_mask=response_mask[order],
    )
