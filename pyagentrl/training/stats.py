"""Intervals and tests for held-out success rates: one rate (Wilson), a mean over seeds (Student's t), and two
policies scored on the same tasks (a paired difference with McNemar's exact test)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

# Two-sided 95 % quantiles of Student's t by degrees of freedom (1..30); beyond 30 the normal's 1.96 (within 4 %).
_T95 = (
    12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
    2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
    2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042,
)  # fmt: skip
_Z95 = 1.959964


def t95(dof: int) -> float:
    """The two-sided 95 % quantile of Student's t with ``dof`` degrees of freedom."""
    if dof < 1:
        raise ValueError(f"degrees of freedom must be >= 1, got {dof}")
    return _T95[dof - 1] if dof <= len(_T95) else _Z95


def wilson_interval(successes: int, trials: int, z: float = _Z95) -> tuple[float, float]:
    """The Wilson score interval of a binomial proportion (95 % for the default z)."""
    if trials <= 0:
        raise ValueError(f"trials must be positive, got {trials}")
    p = successes / trials
    denominator = 1 + z * z / trials
    centre = (p + z * z / (2 * trials)) / denominator
    half = z * math.sqrt(p * (1 - p) / trials + z * z / (4 * trials * trials)) / denominator
    return max(0.0, centre - half), min(1.0, centre + half)


def mean_interval(values: Sequence[float]) -> tuple[float, float | None]:
    """The mean of ``values`` and the half-width of its 95 % t-interval (None for a single value)."""
    n = len(values)
    if n == 0:
        raise ValueError("mean_interval of no values")
    mean = sum(values) / n
    if n < 2:
        return mean, None
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    return mean, t95(n - 1) * sd / math.sqrt(n)


def mcnemar_exact_p(only_first: int, only_second: int) -> float:
    """McNemar's exact two-sided p-value: under "the two policies are equally good", each task that only one of them
    solved is a fair coin, so the smaller count is a Binomial(only_first + only_second, 1/2) tail, doubled."""
    n = only_first + only_second
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, k) for k in range(min(only_first, only_second) + 1)) / 2**n
    return min(1.0, 2 * tail)


@dataclass(frozen=True)
class PairedDifference:
    difference: float  # success rate of the first policy minus the second's, on the same tasks
    low: float  # 95 % interval of the difference
    high: float
    p_value: float  # McNemar's exact test
    tasks: int
    only_first: int  # tasks only the first policy solved
    only_second: int


def paired_difference(first: Sequence[int], second: Sequence[int]) -> PairedDifference:
    """The difference of two success rates on the same tasks: ``first[i]`` and ``second[i]`` are task i's outcomes
    (1 or True for a success).

    Pairing removes the tasks' own difficulty from the noise: only the tasks where the two outcomes differ count.
    The interval is the t-interval of the per-task differences (each -1, 0 or 1); it covers the evaluation's noise
    for these two policies, not the training noise between seeds.
    """
    if len(first) != len(second):
        raise ValueError(f"paired outcomes need the same tasks: {len(first)} against {len(second)}")
    n = len(first)
    if n < 2:
        raise ValueError(f"a paired difference needs at least 2 tasks, got {n}")
    only_first = sum(1 for a, b in zip(first, second, strict=True) if a and not b)
    only_second = sum(1 for a, b in zip(first, second, strict=True) if b and not a)
    mean = (only_first - only_second) / n
    # sum of squared deviations of the d_i: sum d_i^2 - n mean^2, with d_i^2 = 1 on the discordant tasks
    variance = (only_first + only_second - n * mean * mean) / (n - 1)
    half = t95(n - 1) * math.sqrt(variance / n)
    return PairedDifference(
        mean, mean - half, mean + half, mcnemar_exact_p(only_first, only_second), n, only_first, only_second
    )
