"""The verl adapters against verl itself: its GRPO estimator, its GSPO loss, and its registries."""

import numpy as np
import pytest
import torch
from testkit.peers import import_peer

from pyagentrl.adapters import verl as adapter


@pytest.fixture(scope="module")
def core_algos():
    return import_peer("verl.trainer.ppo.core_algos")


@pytest.fixture(scope="module")
def actor_config():
    config = import_peer("verl.workers.config")
    return lambda **kw: config.ActorConfig(strategy="fsdp", rollout_n=1, ppo_micro_batch_size_per_gpu=1, **kw)


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("norm_by_std", [True, False])
def test_grpo_matches_verl(core_algos, seed, norm_by_std):
    gen = torch.Generator().manual_seed(seed)
    rows, length = 64, 12
    rewards = torch.zeros(rows, length)
    rewards[:, -1] = torch.randn(rows, generator=gen)
    mask = (torch.rand(rows, length, generator=gen) < 0.8).float()
    index = np.array([f"uid-{i}" for i in torch.randint(0, 20, (rows,), generator=gen).tolist()], dtype=object)
    ours, ours_ret = adapter.compute_grpo_outcome_advantage(rewards, mask, index, norm_adv_by_std_in_grpo=norm_by_std)
    theirs, theirs_ret = core_algos.compute_grpo_outcome_advantage(
        rewards, mask, index, norm_adv_by_std_in_grpo=norm_by_std
    )
    torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(ours_ret, theirs_ret, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("mode", ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum"])
@pytest.mark.parametrize("seed", range(3))
def test_per_action_loss_matches_verl_gspo(core_algos, actor_config, mode, seed):
    # One action per row: the per-action ratio is GSPO's sequence ratio, so loss and gradient must agree.
    gen = torch.Generator().manual_seed(seed)
    rows, length = 32, 20
    logp = -torch.rand(rows, length, generator=gen, dtype=torch.float64) * 2
    # Sequence log-ratios spread over ±0.8 (ratios 0.45-2.2), so that rows cross both clip bounds.
    shift = (torch.rand(rows, 1, generator=gen, dtype=torch.float64) - 0.5) * 1.6
    old = logp - shift + 0.2 * torch.randn(rows, length, generator=gen, dtype=torch.float64)
    adv = torch.randn(rows, 1, generator=gen, dtype=torch.float64).expand(rows, length).contiguous()
    mask = (torch.rand(rows, length, generator=gen) < 0.8).double()
    config = actor_config(clip_ratio=0.2, clip_ratio_low=0.2, clip_ratio_high=0.28)
    ratio = torch.exp(((logp - old) * mask).sum(-1) / mask.sum(-1).clamp(min=1))
    # Each bound binds somewhere: below 1 - 0.2 with a negative advantage, above 1 + 0.28 with a positive one.
    assert ((ratio < 0.8) & (adv[:, 0] < 0)).any() and ((ratio > 1.28) & (adv[:, 0] > 0)).any()
    a, b = logp.clone().requires_grad_(), logp.clone().requires_grad_()
    ours, our_metrics = adapter.compute_policy_loss_per_action(old, a, adv, mask, mode, config)
    theirs, their_metrics = core_algos.compute_policy_loss_gspo(old, b, adv, mask, mode, config)
    ours.backward()
    theirs.backward()
    torch.testing.assert_close(ours, theirs)
    torch.testing.assert_close(a.grad, b.grad)
    assert our_metrics["actor/pg_clipfrac"] > 0
    assert our_metrics["actor/pg_clipfrac"] == pytest.approx(their_metrics["actor/pg_clipfrac"], abs=1e-6)
    assert our_metrics["actor/ppo_kl"] == pytest.approx(their_metrics["actor/ppo_kl"], abs=1e-6)


def test_registered_in_verl_registries(core_algos, actor_config):
    # Importing the adapter registered everything already; registering again is harmless.
    assert {"pyagentrl_grpo", "pyagentrl_gigpo"} <= set(core_algos.ADV_ESTIMATOR_REGISTRY)
    assert adapter.register_with_verl() is True
    grpo = core_algos.get_adv_estimator_fn("pyagentrl_grpo")
    # Called the way verl's compute_advantage calls registered estimators, reward_baselines included.
    rewards, mask, uid = torch.tensor([[1.0, 0.0], [0.0, 0.0]]), torch.ones(2, 2), np.array(["a", "a"], dtype=object)
    got, _ = grpo(token_level_rewards=rewards, response_mask=mask, index=uid, config=None, reward_baselines=rewards)
    want, _ = adapter.compute_grpo_outcome_advantage(rewards, mask, uid)
    torch.testing.assert_close(got, want)
    loss_fn = core_algos.get_policy_loss_fn("pyagentrl_per_action")
    # Called the way verl's actor calls it, with the global batch info that makes the loss DP-invariant.
    logp = torch.zeros(2, 3, requires_grad=True)
    config = actor_config(clip_ratio=0.2)
    config.global_batch_info.update({"dp_size": 1, "batch_num_tokens": 6, "global_batch_size": 2})
    loss, metrics = loss_fn(torch.zeros(2, 3), logp, torch.ones(2, 3), torch.ones(2, 3), "token-mean", config)
    assert loss.item() == pytest.approx(-1.0) and "actor/pg_clipfrac" in metrics
    gigpo = core_algos.get_adv_estimator_fn("pyagentrl_gigpo")
    with pytest.raises(ValueError, match="anchor_obs"):
        gigpo(token_level_rewards=torch.zeros(2, 3), response_mask=torch.ones(2, 3), index=np.array(["a", "a"]))
