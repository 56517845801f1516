"""Grouped statistics and group normalisation: the building block of every critic-free estimator."""

from __future__ import annotations

from typing import Literal, NamedTuple

import torch

from pyagentrl.ops import _checks
from pyagentrl.ops._dispatch import run

NormMode = Literal["mean_std_norm", "mean_norm"]
SingletonRule = Literal["zero", "raw"]


class GroupStats(NamedTuple):
    size: torch.Tensor  # int64 [G], members per group
    mean: torch.Tensor  # [G], dtype of the values
    std: torch.Tensor  # [G]; 0 for groups of fewer than 2 values


def grouped_stats(
    values: torch.Tensor, group_ids: torch.Tensor, num_groups: int | None = None, *, unbiased: bool = True
) -> GroupStats:
    """Size, mean and standard deviation of ``values`` per group (docs/algorithms.md (S1), (S2)).

    Args:
        values: float32/float64 [N].
        group_ids: int64 [N], dense ids in [0, num_groups).
        num_groups: number of groups; defaults to ``group_ids.max() + 1``. Empty groups get size 0,
            mean 0 and std 0.
        unbiased: divide by n − 1 (torch.std's default, verl's convention) instead of n.

    Sums accumulate in float64 with compensation; a group whose values are all equal gets that value
    as its mean and std exactly 0, and groups of fewer than 2 values get std 0.
    """
    x = _checks.float_values(values, "values")
    g = _checks.ids(group_ids, "group_ids", x.numel(), x.device)
    num = _checks.num_ids(g, "group_ids", num_groups, "num_groups")
    return GroupStats(*run("grouped_stats", x.device, x, g, num, unbiased))


def group_normalize(
    values: torch.Tensor,
    group_ids: torch.Tensor,
    num_groups: int | None = None,
    *,
    norm: NormMode = "mean_std_norm",
    eps: float = 1e-6,
    unbiased: bool = True,
    singleton: SingletonRule = "zero",
) -> torch.Tensor:
    """Relative score within each group (docs/algorithms.md (S3)–(S5); GiGPO Eq. 3/7, GRPO):

        mean_std_norm:  (x_i − μ_g) / (σ_g + ε)        mean_norm:  x_i − μ_g

    A group whose members are all equal gets exactly 0. A group of one member gets 0 with
    ``singleton="zero"``, or is compared with μ = 0, σ = 1 (its raw score, verl's rule) with
    ``singleton="raw"``.
    """
    x = _checks.float_values(values, "values")
    g = _checks.ids(group_ids, "group_ids", x.numel(), x.device)
    num = _checks.num_ids(g, "group_ids", num_groups, "num_groups")
    scale = _checks.norm_mode(norm)
    singleton_raw = _checks.singleton_rule(singleton)
    eps = _checks.non_negative(eps, "eps")
    return run("group_normalize", x.device, x, g, num, scale, unbiased, eps, singleton_raw)
