"""Backward recursions along trajectories: discounted returns and GAE over a value proxy."""

from __future__ import annotations

import torch

from pyagentrl.ops import _checks
from pyagentrl.ops._dispatch import run, uses_kernel


def trajectory_gae(
    rewards: torch.Tensor,
    values: torch.Tensor | None,
    *,
    traj_ids: torch.Tensor,
    step_ids: torch.Tensor,
    gamma: float,
    lam: float,
    num_trajs: int | None = None,
) -> torch.Tensor:
    """Generalised advantage estimation per trajectory, rows in any order (GAGPO's recursion,
    docs/algorithms.md (V2), (V3)):

        δ_t = r_t + γ V(s_{t+1}) − V(s_t),    Â_t = δ_t + γλ Â_{t+1},

    with V after a trajectory's last row taken as 0 (a terminal state; pass the bootstrap value in the
    last reward for truncated trajectories) and Â beyond the last row 0. ``values=None`` means V = 0.

    Args:
        rewards, values: float32/float64 [N] (values in the dtype of rewards).
        traj_ids: int64 [N] dense trajectory ids in [0, num_trajs).
        step_ids: int64 [N]; each trajectory's rows must have step ids 0..n−1, each exactly once.
    """
    r = _checks.float_values(rewards, "rewards")
    n = r.numel()
    if values is not None:
        values = _checks.float_values(values, "values")
        if values.shape != r.shape or values.dtype != r.dtype:
            raise ValueError(
                f"values must match rewards ({r.dtype} {tuple(r.shape)}), got {values.dtype} {tuple(values.shape)}"
            )
        _checks.same_device(values, "values", r.device)
    traj = _checks.ids(traj_ids, "traj_ids", n, r.device)
    step = _checks.ids(step_ids, "step_ids", n, r.device)
    num = _checks.num_ids(traj, "traj_ids", num_trajs)
    gamma = _checks.unit_interval(gamma, "gamma")
    lam = _checks.unit_interval(lam, "lam")
    if not has_contiguous_steps(traj, step, num):
        raise ValueError("step_ids of each trajectory must be 0..n-1, each exactly once")
    return run("trajectory_gae", r.device, r, values, traj, step, num, gamma, lam)


def discounted_returns(
    rewards: torch.Tensor,
    *,
    traj_ids: torch.Tensor,
    step_ids: torch.Tensor,
    gamma: float,
    num_trajs: int | None = None,
) -> torch.Tensor:
    """G_t = r_t + γ G_{t+1} per trajectory, G after the last step = 0 (GiGPO Eq. 5,
    docs/algorithms.md (G5)). Linear time; rows in any order, placed by ``step_ids`` (0..n−1 per trajectory)."""
    return trajectory_gae(
        rewards, None, traj_ids=traj_ids, step_ids=step_ids, gamma=gamma, lam=1.0, num_trajs=num_trajs
    )


def has_contiguous_steps(traj: torch.Tensor, step: torch.Tensor, num_trajs: int) -> bool:
    """Whether every trajectory's step ids are exactly 0..n−1. The CPU kernel checks this itself (with the offending
    trajectory in its message); the references and other devices check here."""
    if traj.numel() == 0 or (traj.device.type == "cpu" and uses_kernel("trajectory_gae", traj.device)):
        return True
    return steps_are_contiguous(traj, step, num_trajs)


def steps_are_contiguous(traj: torch.Tensor, step: torch.Tensor, num_trajs: int) -> bool:
    """Each trajectory's step ids are 0..n−1, each once (ids non-negative, checked by the caller)."""
    length = torch.bincount(traj, minlength=num_trajs)
    if bool((step >= length[traj]).any()):
        return False
    # Each (trajectory, step) slot at most once: with step < length, n rows in n slots then fill them all.
    starts = torch.cumsum(length, 0) - length
    taken = torch.bincount(starts[traj] + step, minlength=traj.numel())
    return bool((taken <= 1).all())
