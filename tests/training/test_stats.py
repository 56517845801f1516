"""Held-out statistics against published values and independent references (scipy, numpy)."""

from __future__ import annotations

import numpy as np
import pytest
from testkit.peers import import_peer

from pyagentrl.training.stats import mcnemar_exact_p, mean_interval, paired_difference, t95, wilson_interval


def test_wilson_interval_known_values() -> None:
    # Wilson (1927) 95 % intervals, as tabulated by Newcombe (1998), Table I: 0/10 and 5/10.
    assert wilson_interval(0, 10) == pytest.approx((0.0, 0.2775), abs=1e-4)
    assert wilson_interval(5, 10) == pytest.approx((0.2366, 0.7634), abs=1e-4)
    assert wilson_interval(81, 263) == pytest.approx((0.2553, 0.3662), abs=1e-4)


def test_t_quantiles_match_scipy() -> None:
    stats = import_peer("scipy.stats")
    for dof in range(1, 31):
        assert t95(dof) == pytest.approx(stats.t.ppf(0.975, dof), abs=6e-4)
    assert t95(200) == pytest.approx(stats.norm.ppf(0.975), abs=1e-5)
    with pytest.raises(ValueError, match="degrees of freedom"):
        t95(0)


def test_mean_interval_is_the_t_interval() -> None:
    stats = import_peer("scipy.stats")
    values = [0.59, 0.39, 0.53, 0.48]
    mean, half = mean_interval(values)
    low, high = stats.t.interval(0.95, len(values) - 1, loc=np.mean(values), scale=stats.sem(values))
    assert mean == pytest.approx(np.mean(values)) and half is not None
    assert (mean - half, mean + half) == pytest.approx((low, high), abs=1e-3)
    assert mean_interval([0.5]) == (0.5, None)


@pytest.mark.parametrize(("only_first", "only_second"), [(0, 0), (3, 0), (7, 2), (12, 12), (1, 30), (40, 25)])
def test_mcnemar_exact_p_is_a_binomial_test(only_first: int, only_second: int) -> None:
    stats = import_peer("scipy.stats")
    n = only_first + only_second
    expected = 1.0 if n == 0 else stats.binomtest(only_first, n, 0.5).pvalue
    assert mcnemar_exact_p(only_first, only_second) == pytest.approx(expected, rel=1e-9)


def test_paired_difference_against_numpy() -> None:
    rng = np.random.default_rng(0)
    easy = rng.random(192) < 0.5  # tasks differ in difficulty: both policies tend to solve the same ones
    first = easy | (rng.random(192) < 0.15)
    second = easy & (rng.random(192) < 0.9)
    d = paired_difference(first.tolist(), second.tolist())
    diffs = first.astype(float) - second.astype(float)
    half = t95(191) * diffs.std(ddof=1) / np.sqrt(192)
    assert d.difference == pytest.approx(diffs.mean())
    assert (d.low, d.high) == pytest.approx((diffs.mean() - half, diffs.mean() + half))
    assert (d.only_first, d.only_second, d.tasks) == (int((first & ~second).sum()), int((second & ~first).sum()), 192)
    # Pairing removes the shared difficulty: the interval is narrower than the unpaired one of the two rates.
    unpaired = 1.96 * np.sqrt(first.var(ddof=1) / 192 + second.var(ddof=1) / 192)
    assert half < unpaired


def test_paired_difference_refuses_unpaired_outcomes() -> None:
    with pytest.raises(ValueError, match="same tasks: 3 against 2"):
        paired_difference([True, False, True], [True, False])
    with pytest.raises(ValueError, match="at least 2 tasks"):
        paired_difference([True], [False])
    same = paired_difference([True, False, True], [True, False, True])
    assert (same.difference, same.low, same.high, same.p_value) == (0.0, 0.0, 0.0, 1.0)
