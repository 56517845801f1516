"""The flat batch (validated once), the estimator and loss registries, keyword-only ids, and the compiled loss path."""

import dataclasses

import pytest
import torch

from pyagentrl import ops
from pyagentrl.ops import AdvantageConfig, LossConfig, StepBatch
from pyagentrl.synthetic import make_step_batch


def _batch(seed: int = 0) -> StepBatch:
    return make_step_batch(6, 4, steps=(1, 9), response_len=8, seed=seed)


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("norm", ["mean_std_norm", "mean_norm"])
def test_registered_estimators_equal_the_public_ops(seed, norm):
    b = _batch(seed)
    cfg = AdvantageConfig(gamma=0.9, lam=0.8, norm=norm, step_weight=0.7)
    ids = {"group_ids": b.group_ids, "traj_ids": b.traj_ids}
    returns = ops.discounted_returns(b.rewards, traj_ids=b.traj_ids, step_ids=b.step_ids, gamma=0.9)
    want = {
        "grpo": ops.grpo_advantage(b.episode_scores, **ids, norm=norm),
        "gigpo": ops.gigpo_advantage(
            b.episode_scores, returns, **ids, anchor_ids=b.anchor_ids, step_weight=0.7, norm=norm
        ),
        "gagpo": ops.gagpo_advantage(
            b.rewards, **ids, step_ids=b.step_ids, anchor_ids=b.anchor_ids, gamma=0.9, lam=0.8, norm=norm
        ),
    }
    for name, expected in want.items():
        torch.testing.assert_close(ops.get_adv_estimator(name)(b, cfg), expected, rtol=0, atol=0)
    equal = AdvantageConfig(gamma=0.9, lam=0.8, norm=norm, norm_over="trajectories")
    torch.testing.assert_close(
        ops.get_adv_estimator("gagpo")(b, equal),
        ops.gagpo_advantage(
            b.rewards,
            **ids,
            step_ids=b.step_ids,
            anchor_ids=b.anchor_ids,
            gamma=0.9,
            lam=0.8,
            norm=norm,
            norm_over="trajectories",
        ),
        rtol=0,
        atol=0,
    )


def test_batch_derives_groups_once():
    b = _batch()
    assert b.num_groups == 6 and b.num_trajs == 24
    assert torch.equal(b.traj_group[b.traj_ids], b.group_ids)
    assert torch.equal(b.traj_score[b.traj_ids], b.episode_scores)
    # Anchor-state groups: equal (group, anchor) pairs and nothing else share a state id.
    pairs = list(zip(b.group_ids.tolist(), b.anchor_ids.tolist(), strict=True))
    by_pair = {p: s for p, s in zip(pairs, b.state_ids.tolist(), strict=True)}
    assert len(by_pair) == b.num_states == len(set(by_pair.values()))
    assert all(by_pair[p] == s for p, s in zip(pairs, b.state_ids.tolist(), strict=True))


def _modified(**changes: torch.Tensor) -> StepBatch:
    b = make_step_batch(2, 2, steps=3, response_len=4, shuffle=False)
    return dataclasses.replace(b, **changes)


@pytest.mark.parametrize(
    ("change", "error", "match"),
    [
        (lambda b: {"group_ids": b.group_ids * 2}, ValueError, r"group_ids must be dense 0\.\.2: no row has id 1"),
        (lambda b: {"traj_ids": b.traj_ids + 1}, ValueError, r"traj_ids must be dense .* no row has id 0"),
        (lambda b: {"step_ids": b.step_ids + 1}, ValueError, "step_ids of each trajectory must be 0..n-1"),
        (lambda b: {"step_ids": b.step_ids * 0}, ValueError, "step_ids of each trajectory must be 0..n-1"),
        (lambda b: {"group_ids": torch.tensor([0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1])}, ValueError, "trajectory 0"),
        (lambda b: {"episode_scores": torch.arange(12.0)}, ValueError, "episode_scores: trajectory 0"),
        (lambda b: {"rewards": b.rewards.double()}, ValueError, "episode_scores must be torch.float64"),
        (lambda b: {"rewards": torch.full((12,), float("nan"))}, ValueError, "rewards contains NaN"),
        (lambda b: {"anchor_ids": b.anchor_ids.int()}, TypeError, "anchor_ids must be int64"),
        (lambda b: {"traj_ids": b.traj_ids[:5]}, ValueError, "traj_ids must be 1-D with 12 rows"),
        (lambda b: {"response_mask": torch.ones(11, 4)}, ValueError, "response_mask must be"),
        (lambda b: {"response_mask": -torch.ones(12, 4)}, ValueError, "response_mask has a negative entry"),
    ],
)
def test_batch_rejects_broken_layouts(change, error, match):
    good = make_step_batch(2, 2, steps=3, response_len=4, shuffle=False)
    with pytest.raises(error, match=match):
        _modified(**change(good))


@pytest.mark.parametrize(
    "call",
    [
        lambda b: ops.grpo_advantage(b.episode_scores, b.group_ids, b.traj_ids),
        lambda b: ops.gigpo_advantage(b.episode_scores, b.rewards, b.group_ids, b.anchor_ids, b.traj_ids),
        lambda b: ops.gagpo_advantage(b.rewards, b.group_ids, b.traj_ids, b.step_ids, b.anchor_ids),
        lambda b: ops.discounted_returns(b.rewards, b.traj_ids, b.step_ids, gamma=0.9),
        lambda b: ops.trajectory_gae(b.rewards, None, b.traj_ids, b.step_ids, gamma=0.9, lam=0.9),
    ],
)
def test_id_arguments_are_keyword_only(call):
    # Swapped positional ids would run and give wrong advantages; a positional call cannot be made at all.
    with pytest.raises(TypeError, match="positional argument"):
        call(_batch())


def test_registries_name_what_they_hold_and_take_new_entries():
    with pytest.raises(ValueError, match=r"unknown advantage estimator 'ppo'; registered: \['gagpo', 'gigpo', 'grpo'"):
        ops.get_adv_estimator("ppo")
    with pytest.raises(ValueError, match="unknown policy loss 'dpo'"):
        ops.get_policy_loss("dpo")

    @ops.register_adv_est("test_constant")
    def constant(batch: StepBatch, config: AdvantageConfig) -> torch.Tensor:
        return torch.ones_like(batch.rewards)

    try:
        assert ops.get_adv_estimator("test_constant") is constant
        with pytest.raises(ValueError, match="already registered"):
            ops.register_adv_est("test_constant")(lambda b, c: b.rewards)
    finally:
        del ops.ADV_ESTIMATORS["test_constant"]


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"gamma": 1.5}, "gamma"),
        ({"lam": -0.1}, "lam"),
        ({"norm": "std"}, "norm"),
        ({"eps": -1.0}, "eps"),
        ({"step_weight": float("inf")}, "step_weight"),
        ({"episode_singleton": "one"}, "singleton"),
        ({"norm_over": "steps"}, "norm_over"),
    ],
)
def test_advantage_config_checks_each_setting(kwargs, match):
    with pytest.raises(ValueError, match=match):
        AdvantageConfig(**kwargs)


def test_loss_config_checks_each_setting():
    for kwargs, match in [
        ({"clip_low": 1.0}, "clip_low"),
        ({"clip_high": -1.0}, "clip_high"),
        ({"loss_agg_mode": "x"}, "loss_agg_mode"),
    ]:
        with pytest.raises(ValueError, match=match):
            LossConfig(**kwargs)


def test_grpo_and_gigpo_refuse_gagpos_norm_none():
    with pytest.raises(ValueError, match="norm='none' is GAGPO's"):
        ops.get_adv_estimator("gigpo")(_batch(), AdvantageConfig(norm="none"))


def _loss_inputs(seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    rows, length = 6, 10
    logp = -torch.rand(rows, length, generator=gen) * 3
    old = logp + (torch.rand(rows, length, generator=gen) - 0.5)  # ratios well past both clip bounds
    adv = torch.randn(rows, length, generator=gen)
    mask = (torch.rand(rows, length, generator=gen) < 0.8).float()
    seg = torch.where(mask != 0, torch.arange(length) // 4, 0).expand(rows, length).contiguous()
    return logp, old, adv, mask, seg


def test_per_action_loss_equals_the_public_loss():
    logp, old, adv, mask, seg = _loss_inputs()
    cfg = LossConfig(clip_low=0.2, clip_high=0.28, loss_agg_mode="segment-mean")
    got = ops.get_policy_loss("per_action")(logp, old, adv, mask, seg, cfg)
    want = ops.per_action_clipped_loss(
        logp, old, adv, mask, seg, clip_low=0.2, clip_high=0.28, loss_agg_mode="segment-mean"
    )
    for a, b in zip(got, want, strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_token_loss_is_ppos_token_level_ratio():
    logp, old, adv, mask, _ = _loss_inputs(1)
    out = ops.get_policy_loss("token")(logp, old, adv, mask, None, LossConfig(clip_low=0.2, clip_high=0.3))
    ratio = torch.exp(logp - old)
    token = torch.maximum(-adv * ratio, -adv * ratio.clamp(0.8, 1.3))
    torch.testing.assert_close(out.loss, (token * mask).sum() / mask.sum())
    assert 0 < float(out.clip_fraction) < 1


@pytest.mark.parametrize("name", ["per_action", "token"])
@pytest.mark.parametrize("mode", ops.LOSS_AGG_MODES)
def test_the_trainers_loss_path_compiles_into_one_graph(name, mode):
    # fullgraph=True fails on any graph break: a host sync (.item(), bool(tensor)) or a data-dependent branch.
    logp, old, adv, mask, seg = _loss_inputs(2)
    cfg = LossConfig(clip_low=0.2, clip_high=0.28, loss_agg_mode=mode)
    loss_fn = ops.get_policy_loss(name)

    def step(lp: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        out = loss_fn(lp, old, adv, mask, seg, cfg)
        return out.loss, out.clip_fraction

    torch._dynamo.reset()
    compiled = torch.compile(step, fullgraph=True, backend="aot_eager")
    eager_lp, compiled_lp = logp.clone().requires_grad_(), logp.clone().requires_grad_()
    want, got = step(eager_lp), compiled(compiled_lp)
    want[0].backward()
    got[0].backward()
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(compiled_lp.grad, eager_lp.grad)
