"""How an episode's rows share its advantage (docs/algorithms.md (E1)–(E4)) and GiGPO's blend (G10): hand-computed
values, the zero-sum identities, today's values under the default, and the refusals (ops and training config)."""

from __future__ import annotations

import math
from collections import defaultdict

import numpy as np
import pytest
import torch
from testkit import loop_oracle
from testkit.training import CONFIGS, TINY

from pyagentrl import ops
from pyagentrl.ops import AdvantageConfig, StepBatch
from pyagentrl.synthetic import make_step_batch
from pyagentrl.training.config import ConfigError, load_config, validate

WEIGHTINGS = ("episode", "rows", "inverse_length")

# ---- a small batch, computed by hand ------------------------------------------------------------------------------
# Three task groups; per trajectory: (group, episode score, step rewards, anchors).
#   group 0: τ0 wins in 1 step, τ1 loses in 3;  group 1: τ2 (2 steps), τ3 (1 step), τ4 (3 steps);
#   group 2: τ5 alone (2 steps).
TRAJECTORIES = [
    (0, 1.0, [1.0], [10]),
    (0, 0.0, [0.0, 0.0, 0.0], [10, 11, 12]),
    (1, 2.0, [0.0, 2.0], [20, 21]),
    (1, -1.0, [-1.0], [20]),
    (1, 2.0, [0.0, 0.0, 2.0], [20, 22, 21]),
    (2, 3.0, [0.0, 3.0], [30, 31]),
]
GAMMA = 0.5
S3 = math.sqrt(3.0)
S15 = math.sqrt(1.5)
# A^E per trajectory, by (weighting, norm), ε = 0, unbiased std, singleton "zero" (τ5 gets 0 everywhere):
#   (E1) group 0: μ = 0.5, σ = 1/√2;  group 1: μ = 1, σ = √3.
#   (E2) group 0: rows [1, 0, 0, 0], μ' = 0.25, σ' = 0.5;  group 1: rows [2, 2, −1, 2, 2, 2], μ' = 1.5, σ' = √1.5.
#   (E3) (E1) times n̄/n: group 0: n̄ = 2, weights 2 and 2/3;  group 1: n̄ = 2, weights 1, 2 and 2/3.
EPISODE = {
    ("episode", "mean_norm"): [0.5, -0.5, 1.0, -2.0, 1.0, 0.0],
    ("rows", "mean_norm"): [0.75, -0.25, 0.5, -2.5, 0.5, 0.0],
    ("inverse_length", "mean_norm"): [1.0, -1 / 3, 1.0, -4.0, 2 / 3, 0.0],
    ("episode", "mean_std_norm"): [1 / math.sqrt(2), -1 / math.sqrt(2), 1 / S3, -2 / S3, 1 / S3, 0.0],
    ("rows", "mean_std_norm"): [1.5, -0.5, 0.5 / S15, -2.5 / S15, 0.5 / S15, 0.0],
    ("inverse_length", "mean_std_norm"): [math.sqrt(2), -math.sqrt(2) / 3, 1 / S3, -4 / S3, 2 / 3 / S3, 0.0],
}
# Step returns with γ = 0.5: τ0 [1]; τ1 [0, 0, 0]; τ2 [1, 2]; τ3 [−1]; τ4 [0.5, 1, 2]; τ5 [1.5, 3].
# Anchor groups of two or more rows: (0, 10): G = 1, 0;  (1, 20): G = 1, −1, 0.5 (μ = 1/6);  (1, 21): 2, 2 (equal).
STEP_MEAN_NORM = [[0.5], [-0.5, 0.0, 0.0], [5 / 6, 0.0], [-7 / 6], [1 / 3, 0.0, 0.0], [0.0, 0.0]]
# mean_std_norm: group (0, 10) σ = 1/√2; group (1, 20) σ² = ((5/6)² + (7/6)² + (1/3)²)/2 = 13/12.
S_A, S_P = 1 / math.sqrt(2), math.sqrt(13 / 12)
STEP_MEAN_STD_NORM = [[0.5 / S_A], [-0.5 / S_A, 0, 0], [5 / 6 / S_P, 0], [-7 / 6 / S_P], [1 / 3 / S_P, 0, 0], [0, 0]]


def _hand_batch(order: torch.Tensor | None = None) -> StepBatch:
    columns: dict[str, list] = defaultdict(list)
    for traj, (group, score, rewards, anchors) in enumerate(TRAJECTORIES):
        for step, (reward, anchor) in enumerate(zip(rewards, anchors, strict=True)):
            for name, value in [("g", group), ("t", traj), ("s", step), ("a", anchor), ("r", reward), ("R", score)]:
                columns[name].append(value)
    n = len(columns["g"])
    perm = torch.arange(n) if order is None else order
    ids = {k: torch.tensor(columns[k], dtype=torch.int64)[perm] for k in "gtsa"}
    return StepBatch(
        rewards=torch.tensor(columns["r"], dtype=torch.float64)[perm],
        episode_scores=torch.tensor(columns["R"], dtype=torch.float64)[perm],
        group_ids=ids["g"],
        traj_ids=ids["t"],
        step_ids=ids["s"],
        anchor_ids=ids["a"],
    )


def _per_row(per_traj: list[float]) -> torch.Tensor:
    return torch.tensor(
        [per_traj[t] for t, (_, _, rewards, _) in enumerate(TRAJECTORIES) for _ in rewards], dtype=torch.float64
    )


def _step_rows(norm: str) -> torch.Tensor:
    table = STEP_MEAN_NORM if norm == "mean_norm" else STEP_MEAN_STD_NORM
    return torch.tensor([v for traj in table for v in traj], dtype=torch.float64)


def _config(norm: str, weighting: str = "episode", **kwargs) -> AdvantageConfig:
    return AdvantageConfig(gamma=GAMMA, norm=norm, eps=0.0, episode_weighting=weighting, **kwargs)


@pytest.mark.parametrize("norm", ["mean_norm", "mean_std_norm"])
@pytest.mark.parametrize("weighting", WEIGHTINGS)
def test_hand_computed_batch(weighting, norm):
    episode = _per_row(EPISODE[(weighting, norm)])
    step = _step_rows(norm)
    batch = _hand_batch()
    torch.testing.assert_close(ops.get_adv_estimator("grpo")(batch, _config(norm, weighting)), episode)
    gigpo = ops.get_adv_estimator("gigpo")
    torch.testing.assert_close(gigpo(batch, _config(norm, weighting, step_weight=0.5)), episode + 0.5 * step)
    blended = gigpo(batch, _config(norm, weighting, combine="blend", alpha=0.8))
    torch.testing.assert_close(blended, 0.8 * episode + 0.2 * step)
    # Rows in any order: each row keeps its value.
    order = torch.randperm(batch.num_rows, generator=torch.Generator().manual_seed(1))
    shuffled = _hand_batch(order)
    torch.testing.assert_close(ops.get_adv_estimator("grpo")(shuffled, _config(norm, weighting)), episode[order])


def test_hand_computed_singletons_under_raw():
    # τ5 alone in group 2 (2 rows, score 3): (E1) and (E3) keep its raw score; under (E2) its two equal rows are an
    # all-equal group (S4) and get 0, as in verl-agent.
    batch = _hand_batch()
    for weighting, want in [("episode", 3.0), ("rows", 0.0), ("inverse_length", 3.0)]:
        config = AdvantageConfig(norm="mean_norm", episode_singleton="raw", episode_weighting=weighting)
        got = ops.get_adv_estimator("grpo")(batch, config)
        assert got[-2:].tolist() == [want, want], weighting


def _double(batch: StepBatch) -> StepBatch:
    return StepBatch(
        rewards=batch.rewards.double(),
        episode_scores=batch.episode_scores.double(),
        group_ids=batch.group_ids,
        traj_ids=batch.traj_ids,
        step_ids=batch.step_ids,
        anchor_ids=batch.anchor_ids,
    )


def _group_sums(values: torch.Tensor, batch: StepBatch) -> torch.Tensor:
    return torch.zeros(batch.num_groups, dtype=torch.float64).index_add_(0, batch.group_ids, values.double())


def _lengths(batch: StepBatch) -> np.ndarray:
    return np.bincount(batch.traj_ids.numpy(), minlength=batch.num_trajs)


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("norm", ["mean_norm", "mean_std_norm"])
def test_rows_centre_each_group_over_its_rows(seed, norm):
    b = _double(make_step_batch(8, 4, steps=(1, 9), response_len=1, seed=seed))
    config = AdvantageConfig(norm=norm, episode_weighting="rows")
    episode = ops.get_adv_estimator("grpo")(b, config)
    torch.testing.assert_close(_group_sums(episode, b), torch.zeros(b.num_groups, dtype=torch.float64))
    # The same statistics as (S1)-(S3) over the group's rows, computed here with numpy row by row.
    scores, groups = b.episode_scores.numpy(), b.group_ids.numpy()
    want = np.empty_like(scores)
    for g in range(b.num_groups):
        x = scores[groups == g]
        centred = x - x.mean()
        std = x.std(ddof=1)
        want[groups == g] = centred if norm == "mean_norm" or std == 0 else centred / (std + 1e-6)
    np.testing.assert_allclose(episode.numpy(), want, rtol=1e-12, atol=1e-12)
    # The default (E1) leaves a nonzero row sum in some group (so the identity above can fail).
    default = ops.get_adv_estimator("grpo")(b, AdvantageConfig(norm=norm))
    assert float(_group_sums(default, b).abs().max()) > 0.1


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("norm", ["mean_norm", "mean_std_norm"])
def test_inverse_length_gives_every_episode_the_same_total_weight(seed, norm):
    b = _double(make_step_batch(8, 4, steps=(1, 9), response_len=1, seed=seed))
    per_episode = ops.get_adv_estimator("grpo")(b, AdvantageConfig(norm=norm))
    weighted = ops.get_adv_estimator("grpo")(b, AdvantageConfig(norm=norm, episode_weighting="inverse_length"))
    torch.testing.assert_close(_group_sums(weighted, b), torch.zeros(b.num_groups, dtype=torch.float64))
    # Weights from the lengths, by hand: n̄_g / n_τ; each episode's rows sum to n̄_g.
    length = _lengths(b)
    traj_group = b.traj_group.numpy()
    mean_length = {g: length[traj_group == g].mean() for g in range(b.num_groups)}
    traj = b.traj_ids.numpy()
    weight = np.array([mean_length[traj_group[t]] / length[t] for t in traj])
    np.testing.assert_allclose(weighted.numpy(), weight * per_episode.numpy(), rtol=1e-12, atol=1e-12)
    total = np.bincount(traj, weights=weight, minlength=b.num_trajs)
    np.testing.assert_allclose(total, [mean_length[g] for g in traj_group], rtol=1e-12)
    weights = ops.advantages.inverse_length_weights(b.traj_group, b.traj_ids, b.num_groups)
    np.testing.assert_allclose(weights.numpy(), weight, rtol=1e-12)


@pytest.mark.parametrize("weighting", ["rows", "inverse_length"])
@pytest.mark.parametrize("combine", ["sum", "blend"])
def test_gigpo_rows_sum_to_zero_per_group_under_both_options(weighting, combine):
    # A^S sums to 0 over every anchor group, so over every task group: the weighting of A^E carries over to A.
    b = _double(make_step_batch(8, 4, steps=(1, 9), response_len=1, seed=4))
    blend = {"combine": "blend", "alpha": 0.6} if combine == "blend" else {"step_weight": 0.7}
    config = AdvantageConfig(episode_weighting=weighting, **blend)
    advantages = ops.get_adv_estimator("gigpo")(b, config)
    torch.testing.assert_close(_group_sums(advantages, b), torch.zeros(b.num_groups, dtype=torch.float64))


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("norm", ["mean_norm", "mean_std_norm"])
def test_episode_is_todays_computation_exactly(seed, norm):
    b = make_step_batch(6, 4, steps=(1, 9), response_len=8, seed=seed)
    scale = {"norm": norm}
    # Today's path: the trajectories' scores normalised per group, given to each row, plus ω times A^S.
    episode = ops.group_normalize(b.traj_score, b.traj_group, b.num_groups, **scale)[b.traj_ids]
    returns = ops.discounted_returns(b.rewards, traj_ids=b.traj_ids, step_ids=b.step_ids, gamma=0.9)
    step = ops.group_normalize(returns, b.state_ids, b.num_states, **scale)
    for config in (
        AdvantageConfig(gamma=0.9, norm=norm, step_weight=0.7),
        AdvantageConfig(gamma=0.9, norm=norm, step_weight=0.7, episode_weighting="episode", combine="sum"),
    ):
        torch.testing.assert_close(ops.get_adv_estimator("grpo")(b, config), episode, rtol=0, atol=0)
        torch.testing.assert_close(ops.get_adv_estimator("gigpo")(b, config), episode + 0.7 * step, rtol=0, atol=0)


@pytest.mark.parametrize("weighting", WEIGHTINGS)
def test_blend_at_alpha_one_is_the_episode_level_and_at_zero_the_step_level(weighting):
    b = make_step_batch(6, 4, steps=(1, 9), response_len=8, seed=5)
    gigpo = ops.get_adv_estimator("gigpo")
    episode = ops.get_adv_estimator("grpo")(b, AdvantageConfig(episode_weighting=weighting))
    returns = ops.discounted_returns(b.rewards, traj_ids=b.traj_ids, step_ids=b.step_ids, gamma=0.95)
    step = ops.group_normalize(returns, b.state_ids, b.num_states)

    def blend(alpha: float) -> torch.Tensor:
        return gigpo(b, AdvantageConfig(episode_weighting=weighting, combine="blend", alpha=alpha))

    torch.testing.assert_close(blend(1.0), episode, rtol=0, atol=0)
    torch.testing.assert_close(blend(0.0), step, rtol=0, atol=0)
    torch.testing.assert_close(blend(0.3), 0.3 * episode + 0.7 * step)
    assert not torch.equal(episode, step)


@pytest.mark.parametrize("weighting", WEIGHTINGS)
def test_public_ops_take_the_same_options(weighting):
    b = make_step_batch(5, 4, steps=(1, 7), response_len=4, seed=6)
    ids = {"group_ids": b.group_ids, "traj_ids": b.traj_ids}
    returns = ops.discounted_returns(b.rewards, traj_ids=b.traj_ids, step_ids=b.step_ids, gamma=0.95)
    config = AdvantageConfig(episode_weighting=weighting, combine="blend", alpha=0.4)
    torch.testing.assert_close(
        ops.grpo_advantage(b.episode_scores, **ids, episode_weighting=weighting),
        ops.get_adv_estimator("grpo")(b, AdvantageConfig(episode_weighting=weighting)),
        rtol=0,
        atol=0,
    )
    torch.testing.assert_close(
        ops.gigpo_advantage(
            b.episode_scores,
            returns,
            **ids,
            anchor_ids=b.anchor_ids,
            episode_weighting=weighting,
            combine="blend",
            alpha=0.4,
        ),
        ops.get_adv_estimator("gigpo")(b, config),
        rtol=0,
        atol=0,
    )


@pytest.mark.parametrize("rollouts", [4, 1])
def test_rows_with_raw_singletons_is_verl_agents_gigpo(rollouts):
    # The loop oracle written from verl-agent's behaviour (row statistics (D1), raw lone rows (D2), float32).
    b = make_step_batch(6, rollouts, steps=(1, 4), response_len=1, seed=7)
    returns = ops.discounted_returns(b.rewards, traj_ids=b.traj_ids, step_ids=b.step_ids, gamma=0.95)
    config = AdvantageConfig(norm="mean_norm", episode_singleton="raw", episode_weighting="rows", step_weight=0.6)
    got = ops.get_adv_estimator("gigpo")(b, config)
    want = loop_oracle.gigpo_outcome_advantage(
        b.episode_scores[:, None],
        returns,
        torch.ones(b.num_rows, 1),
        b.anchor_ids.numpy(),
        b.group_ids.numpy(),
        step_weight=0.6,
        mode="mean_norm",
    )[:, 0]
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("weighting", WEIGHTINGS)
def test_options_on_cuda_match_cpu_and_capture_in_a_cuda_graph(weighting):
    # (E3)'s weights count with index_add (no bincount), so nothing reads back to the host.
    b = make_step_batch(16, 8, steps=(2, 30), seed=11)
    fields = ("rewards", "episode_scores", "group_ids", "traj_ids", "step_ids", "anchor_ids")
    on_gpu = StepBatch(**{f: getattr(b, f).cuda() for f in fields})
    for name, config in [
        ("grpo", AdvantageConfig(episode_weighting=weighting)),
        ("gigpo", AdvantageConfig(episode_weighting=weighting, combine="blend", alpha=0.6)),
    ]:
        estimator = ops.get_adv_estimator(name)
        eager = estimator(on_gpu, config)
        torch.testing.assert_close(eager.cpu(), estimator(b, config), rtol=1e-5, atol=1e-6)
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            estimator(on_gpu, config)  # warm-up outside the capture
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            captured = estimator(on_gpu, config)
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(captured, eager)


# ---- refusals --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"episode_weighting": "tokens"}, "^episode_weighting must be one of"),
        ({"combine": "mix"}, "^combine must be 'sum' or 'blend'"),
        ({"combine": "blend"}, "^alpha: combine='blend' needs alpha"),
        ({"combine": "blend", "alpha": 1.5}, "^alpha must lie in"),
        ({"combine": "blend", "alpha": float("nan")}, "^alpha must lie in"),
        ({"alpha": 0.5}, "^alpha is the weight of combine='blend'"),
        ({"combine": "blend", "alpha": 0.5, "step_weight": 0.5}, "^step_weight is the ω of combine='sum'"),
    ],
)
def test_advantage_config_refuses_settings_it_would_not_read(kwargs, match):
    with pytest.raises(ValueError, match=match):
        AdvantageConfig(**kwargs)


@pytest.mark.parametrize(
    ("name", "kwargs", "match"),
    [
        ("gagpo", {"episode_weighting": "rows"}, "^episode_weighting='rows' .* gagpo has no episode level"),
        ("gagpo", {"episode_weighting": "inverse_length"}, "^episode_weighting='inverse_length'"),
        ("gagpo", {"combine": "blend", "alpha": 0.5}, "^combine='blend' .* gagpo does not have them"),
        ("grpo", {"combine": "blend", "alpha": 0.5}, "^combine='blend' .* grpo does not have them"),
    ],
)
def test_estimators_refuse_options_that_do_not_apply(name, kwargs, match):
    with pytest.raises(ValueError, match=match):
        ops.get_adv_estimator(name)(make_step_batch(2, 2, steps=2, response_len=1), AdvantageConfig(**kwargs))


def test_public_ops_refuse_bad_options():
    b = make_step_batch(2, 2, steps=2, response_len=1)
    ids = {"group_ids": b.group_ids, "traj_ids": b.traj_ids}
    with pytest.raises(ValueError, match="episode_weighting"):
        ops.grpo_advantage(b.episode_scores, **ids, episode_weighting="tokens")
    with pytest.raises(ValueError, match="alpha"):
        ops.gigpo_advantage(b.episode_scores, b.rewards, **ids, anchor_ids=b.anchor_ids, combine="blend")


# ---- the training config ---------------------------------------------------------------------------------------

ALPHA = "algorithm.alpha={schedule: linear, start: 0.8, end: 0.3, iterations: 2}"


@pytest.mark.parametrize(
    ("overrides", "key"),
    [
        (["algorithm.episode_weighting=tokens"], "algorithm.episode_weighting"),
        (["algorithm.combine=mix"], "algorithm.combine"),
        (["algorithm.combine=blend"], "algorithm.alpha"),  # a blend without its α
        ([ALPHA], "algorithm.alpha"),  # α given to the sum
        (["algorithm.combine=blend", ALPHA, "algorithm.alpha.end=1.5"], "algorithm.alpha.end"),
        (["algorithm.combine=blend", ALPHA, "algorithm.alpha.start=-0.1"], "algorithm.alpha.start"),
        (["algorithm.combine=blend", ALPHA, "algorithm.alpha.schedule=exp"], "algorithm.alpha.schedule"),
        (["algorithm.combine=blend", ALPHA, "algorithm.alpha.iterations=9"], "algorithm.alpha.iterations"),
        (["algorithm.combine=blend", ALPHA, "algorithm.step_weight.start=0.5"], "algorithm.step_weight"),
        (["algorithm.combine=blend", ALPHA, "algorithm.estimator=grpo"], "algorithm.combine"),
        (["algorithm.estimator=gagpo", "algorithm.episode_weighting=rows"], "algorithm.episode_weighting"),
    ],
)
def test_config_errors_name_the_key(overrides, key):
    with pytest.raises(ConfigError, match=f"^{key}[ :=]") as error:
        validate(load_config(TINY, overrides))
    assert "\n" not in str(error.value)


def test_the_recipe_loads_and_maps_to_the_estimators_options():
    from pyagentrl.training.settings import advantage_config

    config = load_config(CONFIGS / "gigpo-recipe.yaml")
    validate(config)
    actor = config.actor
    recipe = (actor.lr, actor.betas, actor.kl.coef, actor.entropy_coef, actor.lora.rank)
    assert recipe == (5e-6, [0.9, 0.99], 0.1, 0.05, 32)
    first, last = advantage_config(config, 0), advantage_config(config, config.iterations - 1)
    assert (first.combine, first.alpha, first.step_weight) == ("blend", 0.8, 1.0)
    assert last.alpha == pytest.approx(0.3)
    # Every other config keeps the sum and no α.
    default = advantage_config(load_config(CONFIGS / "default.yaml"), 0)
    assert (default.combine, default.alpha, default.episode_weighting) == ("sum", None, "episode")
    rows = advantage_config(load_config(TINY, ["algorithm.episode_weighting=inverse_length"]), 0)
    assert rows.episode_weighting == "inverse_length"
