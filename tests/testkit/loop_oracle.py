"""Per-row Python implementations in the style of the public GiGPO reference (verl-agent's
gigpo/core_gigpo.py): dict-of-lists grouping and scalar tensor ops, float32 statistics.

Written here from its published behaviour (docs/algorithms.md §7) as the benchmark baseline and as
an independent oracle for the verl adapters' numerics. Not used by the library.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import numpy as np
import torch


def _normalize_by_key(scores: torch.Tensor, keys: Any, eps: float, remove_std: bool, lone_raw: bool) -> torch.Tensor:
    out = scores.clone()
    members: dict[Any, list[torch.Tensor]] = defaultdict(list)
    for i in range(len(out)):
        members[keys[i]].append(out[i])
    mean: dict[Any, torch.Tensor] = {}
    std: dict[Any, torch.Tensor] = {}
    for key, values in members.items():
        if len(values) == 1:
            mean[key] = torch.tensor(0.0) if lone_raw else values[0]
            std[key] = torch.tensor(1.0)
        else:
            stacked = torch.stack(values)
            mean[key] = torch.mean(stacked)
            std[key] = torch.std(stacked)
    for i in range(len(out)):
        if remove_std:
            out[i] = out[i] - mean[keys[i]]
        else:
            out[i] = (out[i] - mean[keys[i]]) / (std[keys[i]] + eps)
    return out


def grpo_outcome_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: np.ndarray,
    eps: float = 1e-6,
    norm_by_std: bool = True,
) -> torch.Tensor:
    """verl's GRPO: row score = sum of token rewards; a lone member keeps its raw score."""
    scores = token_level_rewards.sum(dim=-1)
    adv = _normalize_by_key(scores, index, eps, remove_std=not norm_by_std, lone_raw=True)
    return adv.unsqueeze(-1) * response_mask


def gigpo_outcome_advantage(
    token_level_rewards: torch.Tensor,
    step_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    anchor_obs: np.ndarray,
    index: np.ndarray,
    eps: float = 1e-6,
    step_weight: float = 1.0,
    mode: str = "mean_norm",
) -> torch.Tensor:
    """verl-agent's GiGPO: episode statistics over all step rows of a group (a lone row keeps its raw
    score); step groups = identical anchors within a group (a lone row gets 0)."""
    remove_std = mode == "mean_norm"
    scores = token_level_rewards.sum(dim=-1)
    episode = _normalize_by_key(scores, index, eps, remove_std, lone_raw=True)
    step_keys = [(index[i], anchor_obs[i]) for i in range(len(index))]
    step = _normalize_by_key(step_rewards.clone(), step_keys, eps, remove_std, lone_raw=False)
    return (episode + step_weight * step).unsqueeze(-1) * response_mask


def discounted_returns(rewards: torch.Tensor, traj_ids: np.ndarray, step_ids: np.ndarray, gamma: float) -> torch.Tensor:
    """For each row, finds the rows of its trajectory with later steps by a search over the batch and
    sums their discounted rewards: quadratic, as in the public reference."""
    out = torch.zeros_like(rewards)
    for i in range(len(rewards)):
        later = np.nonzero((traj_ids == traj_ids[i]) & (step_ids >= step_ids[i]))[0]
        total = 0.0
        for j in later:
            total += float(rewards[j]) * gamma ** int(step_ids[j] - step_ids[i])
        out[i] = total
    return out


def gagpo_advantage(
    rewards: torch.Tensor,
    group_ids: np.ndarray,
    traj_ids: np.ndarray,
    step_ids: np.ndarray,
    anchor_ids: np.ndarray,
    returns: torch.Tensor,
    gamma: float,
    lam: float,
    eps: float = 1e-6,
) -> torch.Tensor:
    """GAGPO with dicts: value proxy per (group, state), GAE per trajectory, group normalisation."""
    value_members: dict[tuple[int, int], list[float]] = defaultdict(list)
    for i in range(len(rewards)):
        value_members[(int(group_ids[i]), int(anchor_ids[i]))].append(float(returns[i]))
    value = {k: sum(v) / len(v) for k, v in value_members.items()}
    rows_of: dict[int, list[int]] = defaultdict(list)
    for i in range(len(rewards)):
        rows_of[int(traj_ids[i])].append(i)
    adv = torch.zeros_like(rewards)
    for rows in rows_of.values():
        rows.sort(key=lambda i: int(step_ids[i]))
        running, next_value = 0.0, 0.0
        for i in reversed(rows):
            v = value[(int(group_ids[i]), int(anchor_ids[i]))]
            running = float(rewards[i]) + gamma * next_value - v + gamma * lam * running
            adv[i] = running
            next_value = v
    return _normalize_by_key(adv, [int(g) for g in group_ids], eps, remove_std=False, lone_raw=False)
