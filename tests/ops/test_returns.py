"""Discounted returns and trajectory GAE: kernel against the reference and closed forms."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from pyagentrl import ops
from pyagentrl.ops import reference
from pyagentrl.synthetic import make_step_batch


@settings(max_examples=100, deadline=None)
@given(
    st.integers(1, 6),
    st.integers(1, 4),
    st.integers(0, 2**31 - 1),
    st.floats(0.0, 1.0),
    st.floats(0.0, 1.0),
    st.booleans(),
)
def test_gae_kernel_matches_reference(tasks, rollouts, seed, gamma, lam, with_values):
    b = make_step_batch(tasks, rollouts, steps=(1, 12), seed=seed)
    gen = torch.Generator().manual_seed(seed)
    rewards = torch.randn(b.num_rows, generator=gen, dtype=torch.float64)
    values = torch.randn(b.num_rows, generator=gen, dtype=torch.float64) if with_values else None
    num = int(b.traj_ids.max()) + 1
    got = ops.trajectory_gae(rewards, values, traj_ids=b.traj_ids, step_ids=b.step_ids, gamma=gamma, lam=lam)
    want = reference.trajectory_gae(rewards, values, b.traj_ids, b.step_ids, num, gamma, lam)
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)


def test_discounted_returns_closed_form_unsorted_rows():
    # Trajectory 0: rewards 1, 2, 3 at steps 0, 1, 2 given out of order; trajectory 1: one step.
    rewards = torch.tensor([3.0, 5.0, 1.0, 2.0], dtype=torch.float64)
    traj = torch.tensor([0, 1, 0, 0])
    step = torch.tensor([2, 0, 0, 1])
    g = 0.9
    out = ops.discounted_returns(rewards, traj_ids=traj, step_ids=step, gamma=g)
    expected = torch.tensor([3.0, 5.0, 1 + g * 2 + g * g * 3, 2 + g * 3], dtype=torch.float64)
    torch.testing.assert_close(out, expected)


def test_gamma_one_is_suffix_sum_and_gamma_zero_is_reward():
    b = make_step_batch(3, 4, steps=(2, 9), seed=1)
    r = torch.randn(b.num_rows, dtype=torch.float64)
    assert torch.equal(ops.discounted_returns(r, traj_ids=b.traj_ids, step_ids=b.step_ids, gamma=0.0), r)
    full = ops.discounted_returns(r, traj_ids=b.traj_ids, step_ids=b.step_ids, gamma=1.0)
    first = b.step_ids == 0
    totals = torch.zeros(int(b.traj_ids.max()) + 1, dtype=torch.float64).index_add_(0, b.traj_ids, r)
    torch.testing.assert_close(full[first], totals[b.traj_ids[first]])


def test_float32_rewards_keep_dtype():
    r = torch.ones(5)
    out = ops.discounted_returns(r, traj_ids=torch.zeros(5, dtype=torch.int64), step_ids=torch.arange(5), gamma=0.5)
    assert out.dtype == torch.float32
    assert out[0].item() == pytest.approx(1 + 0.5 + 0.25 + 0.125 + 0.0625)


@pytest.mark.parametrize(
    ("traj", "step", "message"),
    [
        ([0, 0, 0], [0, 2, 3], "0..n-1"),  # gap
        ([0, 0, 0], [0, 1, 1], "twice|0..n-1"),  # duplicate
        ([0, 0], [0, -1], "negative"),
    ],
)
def test_bad_step_ids_raise(traj, step, message):
    with pytest.raises(ValueError, match=message):
        ops.discounted_returns(
            torch.zeros(len(traj)), traj_ids=torch.tensor(traj), step_ids=torch.tensor(step), gamma=0.9
        )


def test_empty_batch_raises():
    e = torch.empty(0, dtype=torch.int64)
    with pytest.raises(ValueError, match="rewards is empty"):
        ops.discounted_returns(torch.empty(0), traj_ids=e, step_ids=e, gamma=0.9)
