"""The verl/verl-agent adapters against a per-row loop implementation of the originals' numerics."""

import statistics
from collections import Counter

import numpy as np
import pytest
import torch
from testkit import loop_oracle

from pyagentrl.adapters import verl as adapter
from pyagentrl.synthetic import make_step_batch


def _verl_batch(seed: int, tasks: int = 4, singletons: int = 3):
    """A verl-agent batch, rows shuffled: ``tasks`` uids of 4 rollouts of 1-8 steps, ``singletons`` uids of
    one row (verl's raw-score rule), and a uid whose three rows all score 10·0.95² (inexact in float32,
    the originals' all-equal case). About a fifth of the rows get an anchor of their own (step groups of
    one get 0); the others share anchors within their uid, and equal anchor texts recur across uids."""
    b = make_step_batch(tasks, 4, steps=(1, 8), response_len=6, seed=seed)
    gen = torch.Generator().manual_seed(seed)
    rows = b.num_rows + singletons + 3
    scores = torch.cat(
        [b.episode_scores * 0.9025, torch.rand(singletons, generator=gen) * 5 + 1, torch.full((3,), 10 * 0.95**2)]
    )
    uid = [f"task-{g}" for g in b.group_ids.tolist()] + [f"solo-{k}" for k in range(singletons)] + ["equal"] * 3
    traj = [f"traj-{t}" for t in b.traj_ids.tolist()] + [f"solo-{k}" for k in range(singletons)] + ["e0", "e1", "e1"]
    anchors = [f"You see cabinet {a % 97}." for a in b.anchor_ids.tolist()]
    anchors += [f"You see cabinet {k}." for k in range(singletons)] + ["You see cabinet 1."] * 2 + ["A safe."]
    for i in torch.nonzero(torch.rand(rows, generator=gen) < 0.2).flatten().tolist():
        anchors[i] = f"A room like no other ({i})."
    lengths = torch.randint(0, 7, (rows - b.num_rows, 1), generator=gen)
    mask = torch.cat([b.response_mask, (torch.arange(6) < lengths).float()])
    token_rewards = torch.zeros(rows, 6)
    token_rewards[:, 0] = scores  # the episode reward on one token, as verl-agent places it
    step_rewards = torch.rand(rows, generator=gen) * 3
    order = torch.randperm(rows, generator=gen)
    uid, traj, anchors = (np.array(x, dtype=object)[order.numpy()] for x in (uid, traj, anchors))
    return token_rewards[order], step_rewards[order], mask[order], anchors, uid, traj


def test_batches_hold_the_cases_the_comparisons_need():
    for seed in range(6):
        _, _, _, anchors, uid, _ = _verl_batch(seed)
        rows_of = Counter(uid.tolist())
        step_groups = Counter(zip(uid.tolist(), anchors.tolist(), strict=True))
        assert 1 in rows_of.values()  # uids of one row
        assert any(n == 1 and rows_of[u] > 1 for (u, _), n in step_groups.items())  # lone anchors in big uids
        assert any(n > 1 for n in step_groups.values())
        assert len(set(anchors.tolist())) < len(step_groups)  # one anchor text in several uids


# A large epsilon too: at 1e-6 it changes results by less than the tolerance, so misplacing it would pass.
@pytest.mark.parametrize("eps", [1e-6, 0.1])
@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("mode", ["mean_norm", "mean_std_norm"])
def test_gigpo_matches_loop_reference(seed, mode, eps):
    token_rewards, step_rewards, mask, anchors, uid, traj = _verl_batch(seed)
    adv, returns = adapter.compute_gigpo_outcome_advantage(
        token_rewards, step_rewards, mask, anchors, uid, traj, epsilon=eps, step_advantage_w=0.7, mode=mode
    )
    # The loop runs in float64: its float32 statistics are off by ulp/std, unbounded for a group whose
    # values (nearly) tie, while ours accumulate in float64 and round once. In float64 it is exact on
    # all-equal groups of float32 scores, so every row is compared.
    want = loop_oracle.gigpo_outcome_advantage(
        token_rewards.double(), step_rewards.double(), mask.double(), anchors, uid, eps, step_weight=0.7, mode=mode
    ).float()
    assert adv.shape == mask.shape and torch.equal(adv, returns)
    torch.testing.assert_close(adv, want, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("mode", ["mean_norm", "mean_std_norm"])
def test_gigpo_singletons_follow_verl_agent(mode):
    # verl-agent's rules, by hand: a uid of one row is normalised with mean 0, std 1 (its raw score);
    # a step group of one gets 0. Rows 1-3 form one uid, rows 1 and 2 one step group; row 0 shares
    # their anchor, not their uid.
    token_rewards = torch.tensor([[3.0, 0.5], [1.0, 0.0], [2.0, 0.0], [4.0, 0.0]])
    step_rewards = torch.tensor([5.0, 1.0, 2.0, 7.0])
    uid = np.array(["solo", "t", "t", "t"], dtype=object)
    anchors = np.array(["a", "a", "a", "b"], dtype=object)
    traj = np.array(["s", "x", "y", "z"], dtype=object)
    adv, _ = adapter.compute_gigpo_outcome_advantage(
        token_rewards, step_rewards, torch.ones(4, 2), anchors, uid, traj, step_advantage_w=0.5, mode=mode
    )
    scale = mode == "mean_std_norm"
    episode = [3.5 / (1 + 1e-6) if scale else 3.5] + [
        (x - 7 / 3) / ((statistics.stdev([1, 2, 4]) + 1e-6) if scale else 1) for x in (1, 2, 4)
    ]
    step = [0.0, -0.5 / (statistics.stdev([1, 2]) + 1e-6) if scale else -0.5, 0.0, 0.0]
    step[2] = -step[1]
    want = torch.tensor([e + 0.5 * s for e, s in zip(episode, step, strict=True)])
    torch.testing.assert_close(adv, want[:, None].expand(4, 2))


@pytest.mark.parametrize("eps", [1e-6, 0.1])
@pytest.mark.parametrize("norm_by_std", [True, False])
def test_grpo_matches_loop_reference(norm_by_std, eps):
    rewards = torch.tensor([[1.0, 0.0], [0.0, 0.5], [2.0, 0.0], [3.0, 0.0], [1.0, 1.0]])
    mask = torch.tensor([[1.0, 0.0], [1.0, 1.0], [1.0, 1.0], [1.0, 0.0], [1.0, 1.0]])
    index = np.array(["a", "a", "a", "b", "c"], dtype=object)
    adv, _ = adapter.compute_grpo_outcome_advantage(rewards, mask, index, eps, norm_adv_by_std_in_grpo=norm_by_std)
    want = loop_oracle.grpo_outcome_advantage(rewards, mask, index, eps, norm_by_std=norm_by_std)
    torch.testing.assert_close(adv, want)


def test_all_equal_group_is_exactly_zero_where_the_original_is_not():
    # Eight rollouts that all score 10·0.95² = 9.025: the float32 loop gives ±0.3–0.5, we give 0.
    rewards = torch.zeros(8, 1)
    rewards[:, 0] = 10 * 0.95**2
    mask = torch.ones(8, 1)
    index = np.array(["t"] * 8, dtype=object)
    adv, _ = adapter.compute_grpo_outcome_advantage(rewards, mask, index)
    assert torch.equal(adv, torch.zeros_like(adv))
    original = loop_oracle.grpo_outcome_advantage(rewards, mask, index)
    assert original.abs().max() > 0.1  # documents the reference's bug this library fixes


def test_gigpo_bad_input():
    token_rewards, step_rewards, mask, anchors, uid, traj = _verl_batch(0)
    with pytest.raises(ValueError, match="mode"):
        adapter.compute_gigpo_outcome_advantage(token_rewards, step_rewards, mask, anchors, uid, traj, mode="x")
    with pytest.raises(ValueError, match="anchor_obs"):
        adapter.compute_gigpo_outcome_advantage(token_rewards, step_rewards, mask, anchors[:3], uid, traj)
    with pytest.raises(ValueError, match="step_rewards"):
        adapter.compute_gigpo_outcome_advantage(token_rewards, step_rewards[:3], mask, anchors, uid, traj)
    nan_steps = step_rewards.clone()
    nan_steps[2] = float("nan")
    with pytest.raises(ValueError, match=r"step_rewards contains NaN or inf \(first at row 2\)"):
        adapter.compute_gigpo_outcome_advantage(token_rewards, nan_steps, mask, anchors, uid, traj)
    inf_rewards = token_rewards.clone()
    inf_rewards[1, 0] = float("inf")
    with pytest.raises(ValueError, match="token_level_rewards contains NaN or inf"):
        adapter.compute_gigpo_outcome_advantage(inf_rewards, step_rewards, mask, anchors, uid, traj)
    with pytest.raises(ValueError, match="token_level_rewards is empty"):
        adapter.compute_grpo_outcome_advantage(torch.zeros(0, 4), torch.zeros(0, 4), np.array([], dtype=object))


def test_bf16_rewards_are_summed_in_float32():
    # verl accepts bf16 token rewards; the scores are summed in float32, as from float32 rewards. Rewards
    # on every token make a bf16 sum differ from the float32 one (checked), so such a sum fails here.
    _, step_rewards, mask, anchors, uid, traj = _verl_batch(1)
    rewards = (torch.randn(mask.shape, generator=torch.Generator().manual_seed(1)) * 3).bfloat16()
    assert not torch.equal(rewards.sum(-1).float(), rewards.float().sum(-1))
    got, _ = adapter.compute_gigpo_outcome_advantage(rewards, step_rewards, mask, anchors, uid, traj)
    want, _ = adapter.compute_gigpo_outcome_advantage(rewards.float(), step_rewards, mask, anchors, uid, traj)
    torch.testing.assert_close(got, want)
    got, _ = adapter.compute_grpo_outcome_advantage(rewards, mask, uid)
    want, _ = adapter.compute_grpo_outcome_advantage(rewards.float(), mask, uid)
    torch.testing.assert_close(got, want)


def test_policy_loss_signature_and_metrics():
    logp = (-torch.rand(4, 5)).requires_grad_()
    old = logp.detach() + 0.05
    adv = torch.randn(4, 5)
    mask = torch.ones(4, 5)
    loss, metrics = adapter.compute_policy_loss_per_action(
        old, logp, adv, mask, "token-mean", {"clip_ratio_low": 0.2, "clip_ratio_high": 0.28}
    )
    loss.backward()
    assert logp.grad is not None and set(metrics) >= {"actor/pg_clipfrac", "actor/ppo_kl"}
    assert metrics["actor/ppo_kl"] == pytest.approx(0.05, abs=1e-5)


def test_gigpo_similarity_groups_near_identical_anchors():
    # Two rollouts whose anchors differ only in a trailing move counter (Jaccard 28/30 of word 3-grams):
    # exact keys keep them apart (A^S = 0), MinHash at a threshold of 0.8 joins them (A^S = ±1 under
    # mean_norm), at 1 (all lanes equal, a valid threshold) it does not: the threshold is passed on.
    body = " ".join(f"you see a cabinet {i}, a drawer {i}, a shelf {i}." for i in range(1, 4))
    anchors = np.array([body + " moves 3", body + " moves 4"], dtype=object)
    token_rewards = torch.zeros(2, 2)
    step_rewards = torch.tensor([1.0, 3.0])
    mask = torch.ones(2, 2)
    uid = np.array(["t", "t"], dtype=object)
    traj = np.array(["a", "b"], dtype=object)
    args = (token_rewards, step_rewards, mask, anchors, uid, traj)
    exact, _ = adapter.compute_gigpo_outcome_advantage(*args)
    near, _ = adapter.compute_gigpo_outcome_advantage(*args, enable_similarity=True, similarity_thresh=0.8)
    strict, _ = adapter.compute_gigpo_outcome_advantage(*args, enable_similarity=True, similarity_thresh=1.0)
    torch.testing.assert_close(exact[:, 0], torch.zeros(2))
    torch.testing.assert_close(near[:, 0], torch.tensor([-1.0, 1.0]))
    torch.testing.assert_close(strict[:, 0], torch.zeros(2))
