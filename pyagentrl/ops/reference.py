"""Readable PyTorch implementations of every op, written from the equations.

They are the test oracle for the compiled kernels and the fallback on devices without a kernel, so
they run on any device and favour clarity over speed (statistics in float64, one recursion step per
column). Equations: docs/algorithms.md; GiGPO = arXiv 2505.10978, GAGPO = arXiv 2605.13217.
Arguments are validated by the public API in :mod:`pyagentrl.ops`, not here.
"""

from __future__ import annotations

import torch

# exp() of a segment's mean log-ratio is clamped to this range (as verl does) against overflow.
MAX_LOG_RATIO = 20.0


def grouped_stats(
    values: torch.Tensor, group_ids: torch.Tensor, num_groups: int, unbiased: bool
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Count, mean and std of ``values`` per group (docs/algorithms.md (S1), (S2)); std is 0 for groups
    of fewer than 2 values or all-equal values, and an all-equal group's mean is that value exactly (S4)."""
    x = values.double()
    count = torch.bincount(group_ids, minlength=num_groups)
    total = torch.zeros(num_groups, dtype=torch.float64, device=x.device).index_add_(0, group_ids, x)
    mean = total / count.clamp(min=1)
    lo = torch.full_like(mean, float("inf")).scatter_reduce(0, group_ids, x, "amin")
    hi = torch.full_like(mean, float("-inf")).scatter_reduce(0, group_ids, x, "amax")
    all_equal = lo == hi
    mean = torch.where(all_equal, lo, mean)
    mean = torch.where(count > 0, mean, torch.zeros_like(mean))
    sq_dev = (x - mean[group_ids]) ** 2
    m2 = torch.zeros_like(mean).index_add_(0, group_ids, sq_dev)
    dof = (count - int(unbiased)).clamp(min=1)
    std = torch.sqrt(m2 / dof)
    std = torch.where((count < 2) | all_equal, torch.zeros_like(std), std)
    return count, mean.to(values.dtype), std.to(values.dtype)


def group_normalize(
    values: torch.Tensor,
    group_ids: torch.Tensor,
    num_groups: int,
    scale: bool,
    unbiased: bool,
    eps: float,
    singleton_raw: bool,
) -> torch.Tensor:
    """(x − μ_g) / (σ_g + ε), or x − μ_g when not ``scale`` (docs/algorithms.md (S3)–(S5); GiGPO Eq. 3, 7).

    With ``singleton_raw`` a group of one member uses μ = 0, σ = 1 (verl's rule); otherwise it gets 0.
    """
    count, mean, std = grouped_stats(values, group_ids, num_groups, unbiased)
    mean, std = mean.double(), std.double()
    if singleton_raw:
        lone = count == 1
        mean = torch.where(lone, torch.zeros_like(mean), mean)
        std = torch.where(lone, torch.ones_like(std), std)
    centred = values.double() - mean[group_ids]
    # centred == 0 covers all-equal groups exactly, also at eps = 0 (no 0/0).
    out = torch.where(centred == 0, centred, centred / (std[group_ids] + eps)) if scale else centred
    return out.to(values.dtype)


def factorize_pairs(a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Dense ids of the pairs (a_i, b_i), numbered by first appearance, and their number (docs/algorithms.md
    (G6))."""
    if a.numel() == 0:
        return torch.empty_like(a), a.new_zeros(())
    _, inverse = torch.unique(torch.stack([a, b]), dim=1, return_inverse=True)
    num = int(inverse.max()) + 1
    rows = torch.arange(a.numel(), device=a.device)
    first_row = torch.full((num,), a.numel(), device=a.device).scatter_reduce(0, inverse, rows, "amin")
    rank = torch.empty_like(first_row)
    rank[torch.argsort(first_row)] = torch.arange(num, device=a.device)
    return rank[inverse], a.new_tensor(num)


def trajectory_gae(
    rewards: torch.Tensor,
    values: torch.Tensor | None,
    traj_ids: torch.Tensor,
    step_ids: torch.Tensor,
    num_trajs: int,
    gamma: float,
    lam: float,
) -> torch.Tensor:
    """Â_t = δ_t + γλ Â_{t+1} with δ_t = r_t + γ V(s_{t+1}) − V(s_t), V after the last step = 0
    (docs/algorithms.md (V2), (V3)).

    Without ``values`` this is the discounted return G_t = r_t + γ G_{t+1} (docs/algorithms.md (G5)).
    Rows may come in any order; ``step_ids`` give each row's position in its trajectory.
    """
    if rewards.numel() == 0:
        return torch.empty_like(rewards)
    length = int(step_ids.max()) + 1
    # One row per trajectory, one column per step; padding past a trajectory's end holds r = V = 0,
    # which contributes nothing to the recursion.
    r = torch.zeros(num_trajs, length + 1, dtype=torch.float64, device=rewards.device)
    v = torch.zeros_like(r)
    r[traj_ids, step_ids] = rewards.double()
    if values is not None:
        v[traj_ids, step_ids] = values.double()
    adv = torch.zeros_like(r)
    for t in range(length - 1, -1, -1):
        delta = r[:, t] + gamma * v[:, t + 1] - v[:, t]
        adv[:, t] = delta + gamma * lam * adv[:, t + 1]
    return adv[traj_ids, step_ids].to(rewards.dtype)


def per_action_clipped_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    segment_ids: torch.Tensor | None,
    clip_low: float,
    clip_high: float,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-token clipped loss with one importance ratio per action segment (GSPO-token, docs/algorithms.md
    (L1)–(L3)).

    s = exp(Σ_j m_j (logp_j − old_j) / max(Σ_j m_j, 1)) over the tokens of a segment; the token's
    surrogate ratio log s_j = logp_j − sg(logp_j) + sg(log s) has value s and gradient s·∇logp_j;
    loss_j = max(−A_j s_j, −A_j clip(s_j, 1 − ε_low, 1 + ε_high)). Returns (token_loss, ratio,
    d loss / d logp); autograd through ``token_loss`` gives the same gradient.
    """
    rows, length = logp.shape
    seg = torch.zeros_like(logp, dtype=torch.long) if segment_ids is None else segment_ids
    active = mask != 0
    # A segment is (row, segment id); ids of inactive tokens are ignored.
    flat_seg = torch.where(active, torch.arange(rows, device=logp.device)[:, None] * length + seg, 0)
    log_diff = (mask * (logp - old_logp)).detach().double()
    seg_sum = torch.zeros(rows * length, dtype=torch.float64, device=logp.device)
    seg_sum.index_add_(0, flat_seg.flatten(), torch.where(active, log_diff, 0).flatten())
    seg_weight = torch.zeros_like(seg_sum).index_add_(
        0, flat_seg.flatten(), torch.where(active, mask, 0).double().flatten()
    )
    log_s = (seg_sum / seg_weight.clamp(min=1.0)).clamp(-MAX_LOG_RATIO, MAX_LOG_RATIO)
    log_s_token = log_s[flat_seg].to(logp.dtype)
    ratio = torch.exp(logp - logp.detach() + log_s_token)
    clipped = ratio.clamp(1.0 - clip_low, 1.0 + clip_high)
    token_loss = torch.maximum(-advantages * ratio, -advantages * clipped)
    token_loss = torch.where(active, token_loss, torch.zeros_like(token_loss))
    ratio_out = torch.where(active, ratio, torch.ones_like(ratio))
    s = ratio.detach()
    unclipped_wins = -advantages * s >= -advantages * s.clamp(1.0 - clip_low, 1.0 + clip_high)
    dloss = torch.where(active & unclipped_wins, -advantages * s, torch.zeros_like(s))
    return token_loss, ratio_out, dloss.detach()
