"""The flat training batch: one row per environment step, validated once when it is built.

Rollouts fill it, the estimators of :mod:`pyagentrl.ops.estimators` read it, the trainer carries it. Everything the
estimators would otherwise recompute and re-check on every call (dense trajectory groups, each trajectory's score,
the anchor-state groups, the counts) is derived here once, so the estimators' hot path makes no host round trip.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from pyagentrl.ops import _checks
from pyagentrl.ops._dispatch import run
from pyagentrl.ops.returns import check_steps


@dataclass(frozen=True)
class StepBatch:
    """One row per environment step (docs/algorithms.md, "The flat layout").

    Attributes:
        rewards: float32/float64 [R], the step reward r_t.
        episode_scores: [R] in the dtype of ``rewards``, the episode score of the row's trajectory (equal on all
            of its rows).
        group_ids: int64 [R], the task group, dense 0..G−1 (the N rollouts of one task).
        traj_ids: int64 [R], the trajectory, dense 0..T−1 over the batch; every trajectory in one task group.
        step_ids: int64 [R], 0..n−1 within each trajectory, each once; rows may come in any order.
        anchor_ids: int64 [R], the key of the state the action was taken from (any values: hashes or dense ids;
            only equality within a task group matters).
        response_mask: optional [R, L], 1 on each row's response tokens.

    Derived on construction: ``num_groups``, ``num_trajs``, ``traj_group`` (int64 [T]), ``traj_score`` ([T]),
    ``state_ids`` (int64 [R], dense ids of the (task group, anchor) pairs: the anchor-state groups) and
    ``num_states``.

    Raises ValueError/TypeError naming the field and the first offending row or trajectory.
    """

    rewards: torch.Tensor
    episode_scores: torch.Tensor
    group_ids: torch.Tensor
    traj_ids: torch.Tensor
    step_ids: torch.Tensor
    anchor_ids: torch.Tensor
    response_mask: torch.Tensor | None = None

    num_groups: int = field(init=False)
    num_trajs: int = field(init=False)
    traj_group: torch.Tensor = field(init=False, repr=False)
    traj_score: torch.Tensor = field(init=False, repr=False)
    state_ids: torch.Tensor = field(init=False, repr=False)
    num_states: int = field(init=False)

    def __post_init__(self) -> None:
        r = _checks.float_values(self.rewards, "rewards")
        n, device = r.numel(), r.device
        scores = _checks.float_values(self.episode_scores, "episode_scores")
        if scores.shape != r.shape or scores.dtype != r.dtype:
            raise ValueError(f"episode_scores must be {r.dtype} [{n}], got {scores.dtype} {tuple(scores.shape)}")
        _checks.same_device(scores, "episode_scores", device)
        group = _checks.ids(self.group_ids, "group_ids", n, device)
        traj = _checks.ids(self.traj_ids, "traj_ids", n, device)
        step = _checks.ids(self.step_ids, "step_ids", n, device)
        anchors = _checks.ids_any_value(self.anchor_ids, "anchor_ids", n, device)
        num_groups = _dense_count(group, "group_ids")
        num_trajs = _dense_count(traj, "traj_ids")
        check_steps(traj, step, num_trajs)
        traj_group = _one_value_per_trajectory(group, traj, num_trajs, "group_ids", "task groups")
        traj_score = _one_value_per_trajectory(scores, traj, num_trajs, "episode_scores", "episode scores")
        if self.response_mask is not None:
            mask = _checks.tensor(self.response_mask, "response_mask")
            if mask.dim() != 2 or mask.shape[0] != n:
                raise ValueError(f"response_mask must be [{n}, L], got shape {tuple(mask.shape)}")
            _checks.same_device(mask, "response_mask", device)
            _checks.finite_mask(mask, "response_mask")
        state_ids, num_states = run("factorize_pairs", device, group, anchors)
        for name, value in [
            ("num_groups", num_groups),
            ("num_trajs", num_trajs),
            ("traj_group", traj_group),
            ("traj_score", traj_score),
            ("state_ids", state_ids),
            ("num_states", int(num_states)),
        ]:
            object.__setattr__(self, name, value)

    @property
    def num_rows(self) -> int:
        return self.rewards.numel()


def _dense_count(ids: torch.Tensor, name: str) -> int:
    """The number of ids, checking that every id in 0..max is used (an id beyond the rows is refused first, before
    bincount would allocate a table up to it)."""
    count = torch.bincount(ids, minlength=_checks.num_ids(ids, name, None))
    if bool((count == 0).any()):
        missing = int((count == 0).nonzero()[0, 0])
        raise ValueError(f"{name} must be dense 0..{count.numel() - 1}: no row has id {missing}")
    return count.numel()


def _one_value_per_trajectory(
    values: torch.Tensor, traj: torch.Tensor, num_trajs: int, name: str, what: str
) -> torch.Tensor:
    """values[t] of each trajectory t, checking that all rows of t agree."""
    first = values.new_zeros(num_trajs).scatter_(0, traj, values)
    bad = first[traj] != values
    if bool(bad.any()):
        row = int(bad.nonzero()[0, 0])
        raise ValueError(f"{name}: trajectory {int(traj[row])} (row {row}) has rows with different {what}")
    return first
