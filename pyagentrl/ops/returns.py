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
    num = _checks.num_ids(traj, "traj_ids", num_trajs, "num_trajs")
    gamma = _checks.unit_interval(gamma, "gamma")
    lam = _checks.unit_interval(lam, "lam")
    check_steps_unless_kernel(traj, step, num)
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


CONTIGUOUS_STEPS = "step_ids of each trajectory must be 0..n-1, each exactly once"


def check_steps_unless_kernel(traj: torch.Tensor, step: torch.Tensor, num_trajs: int) -> None:
    """Checks that every trajectory's step ids are exactly 0..n−1, where the CPU kernel will not: it checks them
    itself, with the same messages (csrc/cpu/trajectory.cpp), so the check runs once whichever implementation
    runs. The references and other devices are checked here."""
    if traj.numel() == 0 or (traj.device.type == "cpu" and uses_kernel("trajectory_gae", traj.device)):
        return
    check_steps(traj, step, num_trajs)


def check_steps(traj: torch.Tensor, step: torch.Tensor, num_trajs: int) -> None:
    """Raises ValueError unless each trajectory's step ids are 0..n−1, each once (ids non-negative and traj ids in
    [0, num_trajs), checked by the caller). Names the first offending row as the CPU kernel does: the first row
    whose step is not below its trajectory's row count, or that repeats an earlier row's step. Steps are only
    compared, never added to, before that check (a step near 2**63 would wrap)."""
    length = torch.bincount(traj, minlength=num_trajs)
    out_of_range = step >= length[traj]
    # Each (trajectory, step) slot's first row; with every step below its count the slots are distinct per row.
    starts = torch.cumsum(length, 0) - length
    slot = starts[traj] + torch.where(out_of_range, torch.zeros_like(step), step)
    rows = torch.arange(traj.numel(), device=traj.device)
    claims = torch.where(out_of_range, traj.numel(), rows)  # a row out of range claims no slot
    first = torch.full_like(rows, traj.numel()).scatter_reduce(0, slot, claims, "amin")
    repeated = ~out_of_range & (first[slot] < rows)
    bad = out_of_range | repeated
    if not bool(bad.any()):
        return
    i = int(bad.nonzero()[0, 0])
    t, s = int(traj[i]), int(step[i])
    if bool(out_of_range[i]):
        count = int(length[t])
        raise ValueError(
            f"step_ids[{i}] = {s} is outside [0, {count}) (trajectory {t} has {count} rows): {CONTIGUOUS_STEPS}"
        )
    j = int(first[slot[i]])
    raise ValueError(f"step_ids: trajectory {t} has step {s} twice (rows {j} and {i}): {CONTIGUOUS_STEPS}")
