"""GRPO, GiGPO and GAGPO advantages: kernels against the reference path and the paper's identities."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from pyagentrl import ops
from pyagentrl.ops._dispatch import reference_ops
from pyagentrl.synthetic import make_step_batch

batches = st.tuples(st.integers(1, 5), st.integers(1, 6), st.integers(0, 2**31 - 1), st.floats(0.0, 0.9))


def _both_paths(fn):
    fast = fn()
    with reference_ops():
        slow = fn()
    return fast, slow


@settings(max_examples=60, deadline=None)
@given(batches, st.sampled_from(["mean_std_norm", "mean_norm"]))
def test_gigpo_kernel_matches_reference(case, norm):
    tasks, rollouts, seed, shared = case
    b = make_step_batch(tasks, rollouts, steps=(1, 10), shared_fraction=shared, seed=seed)
    returns = ops.discounted_returns(b.rewards, traj_ids=b.traj_ids, step_ids=b.step_ids, gamma=0.95)

    def run():
        return ops.gigpo_advantage(
            b.episode_scores, returns, group_ids=b.group_ids, anchor_ids=b.anchor_ids, traj_ids=b.traj_ids, norm=norm
        )

    fast, slow = _both_paths(run)
    torch.testing.assert_close(fast, slow, rtol=1e-5, atol=1e-5)


@settings(max_examples=60, deadline=None)
@given(batches, st.floats(0.0, 1.0), st.sampled_from(["mean_std_norm", "mean_norm", "none"]))
def test_gagpo_kernel_matches_reference(case, lam, norm):
    tasks, rollouts, seed, shared = case
    b = make_step_batch(tasks, rollouts, steps=(1, 10), shared_fraction=shared, seed=seed)

    def run():
        return ops.gagpo_advantage(
            b.rewards.double(),
            group_ids=b.group_ids,
            traj_ids=b.traj_ids,
            step_ids=b.step_ids,
            anchor_ids=b.anchor_ids,
            lam=lam,
            norm=norm,
        )

    fast, slow = _both_paths(run)
    torch.testing.assert_close(fast, slow, rtol=1e-9, atol=1e-9)


def test_grpo_statistics_once_per_trajectory():
    # Group 0: trajectory A (3 steps, score 1) and B (1 step, score 0). Per trajectory: mean 0.5.
    scores = torch.tensor([1.0, 1.0, 1.0, 0.0])
    groups = torch.zeros(4, dtype=torch.int64)
    trajs = torch.tensor([0, 0, 0, 1])
    per_traj = ops.grpo_advantage(scores, group_ids=groups, traj_ids=trajs, norm="mean_norm")
    torch.testing.assert_close(per_traj, torch.tensor([0.5, 0.5, 0.5, -0.5]))
    per_row = ops.grpo_advantage(
        scores, group_ids=groups, traj_ids=torch.arange(4), norm="mean_norm"
    )  # long trajectories weigh more
    torch.testing.assert_close(per_row, torch.tensor([0.25, 0.25, 0.25, -0.75]))


def test_grpo_rejects_scores_that_vary_within_a_trajectory():
    with pytest.raises(ValueError, match="differ within one trajectory"):
        ops.grpo_advantage(
            torch.tensor([1.0, 0.0]),
            group_ids=torch.zeros(2, dtype=torch.int64),
            traj_ids=torch.zeros(2, dtype=torch.int64),
        )


def test_gigpo_step_groups_never_cross_task_groups():
    # Same anchor key in two task groups: two step groups of one row each, so A^S = 0.
    returns = torch.tensor([1.0, 5.0])
    out = ops.gigpo_advantage(
        torch.zeros(2),
        returns,
        group_ids=torch.tensor([0, 1]),
        anchor_ids=torch.tensor([7, 7]),
        traj_ids=torch.tensor([0, 0]),
        norm="mean_norm",
        episode_singleton="zero",
    )
    torch.testing.assert_close(out, torch.zeros(2))


def test_gigpo_combines_episode_and_step_terms():
    # One task, two trajectories meeting in state 5 with returns 1 and 3: A^S = ∓1 (mean_norm).
    scores = torch.tensor([2.0, 2.0, 0.0, 0.0])
    returns = torch.tensor([1.0, 2.0, 3.0, 0.0])
    groups = torch.zeros(4, dtype=torch.int64)
    anchors = torch.tensor([5, 6, 5, 8])
    trajs = torch.tensor([0, 0, 1, 1])
    out = ops.gigpo_advantage(
        scores, returns, group_ids=groups, anchor_ids=anchors, traj_ids=trajs, step_weight=0.5, norm="mean_norm"
    )
    torch.testing.assert_close(out, torch.tensor([1.0 - 0.5, 1.0, -1.0 + 0.5, -1.0]))


GAMMA, TURNS = 0.95, 10


def _two_failed_episodes() -> dict[str, torch.Tensor]:
    """(G9)'s example: two failed 10-turn episodes at 0.1 a turn; A leaves state s at turn 0, B stays in s all ten
    turns. Anchor ids keyed by state (s is id 0; A's later states are its own) and by (state, turn)."""
    return {
        "traj_ids": torch.tensor([0] * TURNS + [1] * TURNS),
        "step_ids": torch.arange(TURNS).repeat(2),
        "rewards": torch.full((2 * TURNS,), -0.1, dtype=torch.float64),
        "by_state": torch.tensor([0, *range(1, TURNS), *[0] * TURNS]),
        "by_state_and_turn": torch.tensor([0, *range(1, TURNS), 0, *range(TURNS, 2 * TURNS - 1)]),
    }


def test_gigpo_state_anchors_reward_waiting_under_a_time_limit():
    e = _two_failed_episodes()
    trajs, by_state = e["traj_ids"], e["by_state"]
    returns = ops.discounted_returns(e["rewards"], traj_ids=trajs, step_ids=e["step_ids"], gamma=GAMMA)
    closed_form = torch.tensor([-0.1 * (1 - GAMMA ** (TURNS - t)) / (1 - GAMMA) for t in range(TURNS)] * 2)
    torch.testing.assert_close(returns, closed_form.double())
    ids = {"group_ids": torch.zeros(2 * TURNS, dtype=torch.int64), "traj_ids": trajs, "norm": "mean_norm"}
    scores = torch.full((2 * TURNS,), -1.0, dtype=torch.float64)
    out = ops.gigpo_advantage(scores, returns, anchor_ids=by_state, **ids)
    in_s = by_state == 0
    torch.testing.assert_close(out[in_s], returns[in_s] - returns[in_s].mean())
    assert out[0] < -0.29 and out[TURNS:].sum() > 0.29  # leaving is punished, staying rewarded: same outcome
    # Time-aware anchors (s at turn 0 groups only with s at turn 0): equal turns left, no credit either way.
    out = ops.gigpo_advantage(scores, returns, anchor_ids=e["by_state_and_turn"], **ids)
    torch.testing.assert_close(out, torch.zeros(2 * TURNS, dtype=torch.float64))


def test_gagpo_state_anchors_share_the_time_limit_bias():
    """(G9) for GAGPO's value proxy (V1), on the same two failed episodes."""
    e = _two_failed_episodes()
    trajs, steps, rewards, by_state = e["traj_ids"], e["step_ids"], e["rewards"], e["by_state"]
    returns = ops.discounted_returns(rewards, traj_ids=trajs, step_ids=steps, gamma=GAMMA)
    ids = {"group_ids": torch.zeros(2 * TURNS, dtype=torch.int64), "traj_ids": trajs, "step_ids": steps}
    adv = ops.gagpo_advantage(rewards, anchor_ids=by_state, gamma=GAMMA, lam=0.95, norm="none", **ids)
    # A's later states are seen once, so V̂ = G there and A's deltas telescope: Â = G − V̂(s) at the leaving row.
    torch.testing.assert_close(adv[0], returns[0] - returns[by_state == 0].mean())
    torch.testing.assert_close(adv[1:TURNS], torch.zeros(TURNS - 1, dtype=torch.float64))
    assert adv[0] < -0.29 and adv[TURNS:].sum() > 0  # leaving is punished, staying is not: same outcome
    adv = ops.gagpo_advantage(rewards, anchor_ids=e["by_state_and_turn"], gamma=GAMMA, lam=0.95, norm="none", **ids)
    torch.testing.assert_close(adv, torch.zeros(2 * TURNS, dtype=torch.float64))


@settings(max_examples=40, deadline=None)
@given(batches)
def test_gagpo_lambda_one_is_return_minus_value(case):
    tasks, rollouts, seed, shared = case
    b = make_step_batch(tasks, rollouts, steps=(1, 12), shared_fraction=shared, seed=seed)
    r = b.rewards.double() + torch.rand(b.num_rows, dtype=torch.float64)  # dense rewards too
    adv = ops.gagpo_advantage(
        r,
        group_ids=b.group_ids,
        traj_ids=b.traj_ids,
        step_ids=b.step_ids,
        anchor_ids=b.anchor_ids,
        gamma=0.9,
        lam=1.0,
        norm="none",
    )
    g = ops.discounted_returns(r, traj_ids=b.traj_ids, step_ids=b.step_ids, gamma=0.9)
    states, num = ops.factorize_pairs(b.group_ids, b.anchor_ids)
    value = ops.grouped_stats(g, states, num).mean[states]
    torch.testing.assert_close(adv, g - value, rtol=1e-9, atol=1e-9)
    seen_once = torch.bincount(states, minlength=num)[states] == 1
    assert torch.allclose(adv[seen_once], torch.zeros((), dtype=adv.dtype), atol=1e-9)


@settings(max_examples=40, deadline=None)
@given(batches)
def test_gagpo_lambda_zero_is_td_residual(case):
    tasks, rollouts, seed, shared = case
    b = make_step_batch(tasks, rollouts, steps=(1, 12), shared_fraction=shared, seed=seed, shuffle=False)
    r = b.rewards.double()
    adv = ops.gagpo_advantage(
        r,
        group_ids=b.group_ids,
        traj_ids=b.traj_ids,
        step_ids=b.step_ids,
        anchor_ids=b.anchor_ids,
        gamma=0.9,
        lam=0.0,
        norm="none",
    )
    g = ops.discounted_returns(r, traj_ids=b.traj_ids, step_ids=b.step_ids, gamma=0.9)
    states, num = ops.factorize_pairs(b.group_ids, b.anchor_ids)
    value = ops.grouped_stats(g, states, num).mean[states]
    # Rows are in trajectory order (shuffle=False): the next row is the next step unless a trajectory ends.
    is_last = torch.ones_like(b.step_ids, dtype=torch.bool)
    is_last[:-1] = b.traj_ids[1:] != b.traj_ids[:-1]
    next_value = torch.where(is_last, torch.zeros_like(value), torch.roll(value, -1))
    torch.testing.assert_close(adv, r + 0.9 * next_value - value, rtol=1e-9, atol=1e-9)


def test_gagpo_normalises_within_task_groups():
    b = make_step_batch(4, 8, steps=(3, 8), seed=5)
    adv = ops.gagpo_advantage(
        b.rewards,
        group_ids=b.group_ids,
        traj_ids=b.traj_ids,
        step_ids=b.step_ids,
        anchor_ids=b.anchor_ids,
        norm="mean_norm",
    )
    means = torch.zeros(4, dtype=torch.float64).index_add_(0, b.group_ids, adv.double())
    assert torch.allclose(means, torch.zeros(4, dtype=torch.float64), atol=1e-4)


def test_broadcast_to_tokens():
    mask = torch.tensor([[1, 1, 0], [0, 0, 0]])
    out = ops.broadcast_to_tokens(torch.tensor([2.0, -1.0]), mask)
    torch.testing.assert_close(out, torch.tensor([[2.0, 2.0, 0.0], [0.0, 0.0, 0.0]]))
    with pytest.raises(ValueError, match="response_mask"):
        ops.broadcast_to_tokens(torch.tensor([2.0]), mask)


def test_factorize_string_ids_and_pairs():
    ids, n = ops.factorize(["b", "a", "b", "c"])
    assert n == 3 and ids.tolist() == [0, 1, 0, 2]
    pairs, k = ops.factorize_pairs(torch.tensor([0, 0, 1, 0]), torch.tensor([5, 6, 5, 5]))
    assert k == 3 and pairs.tolist() == [0, 1, 2, 0]


def test_gagpo_rejects_a_trajectory_in_two_task_groups():
    with pytest.raises(ValueError, match="traj_ids: trajectory 0 has rows in task groups 0 and 1"):
        ops.gagpo_advantage(
            torch.tensor([0.0, 1.0]),
            group_ids=torch.tensor([0, 1]),
            traj_ids=torch.tensor([0, 0]),
            step_ids=torch.tensor([0, 1]),
            anchor_ids=torch.tensor([3, 4]),
        )


@pytest.mark.parametrize("op", ["group_normalize", "discounted_returns", "gagpo"])
def test_advantages_are_constants_on_both_paths(op):
    # Advantages carry no gradient: the kernel and the reference path agree on that.
    b = make_step_batch(2, 4, steps=(2, 5), seed=3)
    r = b.rewards.clone().requires_grad_()
    calls = {
        "group_normalize": lambda: ops.group_normalize(r, b.group_ids),
        "discounted_returns": lambda: ops.discounted_returns(r, traj_ids=b.traj_ids, step_ids=b.step_ids, gamma=0.9),
        "gagpo": lambda: ops.gagpo_advantage(
            r, group_ids=b.group_ids, traj_ids=b.traj_ids, step_ids=b.step_ids, anchor_ids=b.anchor_ids
        ),
    }
    fast, slow = _both_paths(calls[op])
    assert not fast.requires_grad and not slow.requires_grad
    torch.testing.assert_close(fast, slow)
