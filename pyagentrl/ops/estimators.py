"""Advantage estimators and policy losses by name, each registry with one signature (verl's
``register_adv_est`` / ``register_policy_loss`` pattern): a trainer picks one by name, a user adds one without
touching the trainer.

    advantage estimator: fn(batch: StepBatch, config: AdvantageConfig) -> float [R], one advantage per row
    policy loss:         fn(logp, old_logp, advantages, response_mask, segment_ids, config: LossConfig) -> PolicyLoss

The batch and the configs are validated when they are built; the registered functions call the ops' unchecked
cores, so a training step makes no host round trip for checks.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal, TypeVar

import torch

from pyagentrl.ops import _checks
from pyagentrl.ops._dispatch import run
from pyagentrl.ops.advantages import (
    Combine,
    EpisodeWeighting,
    check_combine,
    check_episode_weighting,
    combine_levels,
    episode_advantage,
    gae_advantage,
    step_advantage,
)
from pyagentrl.ops.batch import StepBatch
from pyagentrl.ops.policy_loss import PolicyLoss, check_loss_agg_mode, clipped_loss


@dataclass(frozen=True)
class AdvantageConfig:
    """Settings of the estimators (docs/algorithms.md); each estimator reads those it needs."""

    gamma: float = 0.95  # discount (GiGPO's step returns, GAGPO)
    lam: float = 0.95  # GAE λ (GAGPO)
    norm: Literal["mean_std_norm", "mean_norm", "none"] = "mean_std_norm"  # "none": GAGPO only
    eps: float = 1e-6
    unbiased: bool = True
    step_weight: float = 1.0  # GiGPO's ω (combine="sum")
    episode_singleton: Literal["zero", "raw"] = "zero"
    norm_over: Literal["rows", "trajectories"] = "rows"  # GAGPO's final normalisation
    # How an episode's rows share A^E (GRPO, GiGPO): (E1) "episode", (E2) "rows" or (E3) "inverse_length".
    episode_weighting: EpisodeWeighting = "episode"
    combine: Combine = "sum"  # GiGPO's levels: (G8) A^E + ω·A^S, or (G10) "blend" α·A^E + (1 − α)·A^S
    alpha: float | None = None  # the blend's α, in [0, 1]; only with combine="blend"

    def __post_init__(self) -> None:
        _checks.unit_interval(self.gamma, "gamma")
        _checks.unit_interval(self.lam, "lam")
        _checks.norm_mode(self.norm, ("mean_std_norm", "mean_norm", "none"))
        _checks.non_negative(self.eps, "eps")
        _checks.finite(self.step_weight, "step_weight")
        _checks.singleton_rule(self.episode_singleton)
        if self.norm_over not in ("rows", "trajectories"):
            raise ValueError(f"norm_over must be 'rows' or 'trajectories', got {self.norm_over!r}")
        check_episode_weighting(self.episode_weighting)
        check_combine(self.combine, self.step_weight, self.alpha)


@dataclass(frozen=True)
class LossConfig:
    clip_low: float = 0.2
    clip_high: float | None = None  # defaults to clip_low
    loss_agg_mode: str = "token-mean"

    def __post_init__(self) -> None:
        _checks.non_negative(self.clip_low, "clip_low")
        if self.clip_low >= 1:
            raise ValueError(f"clip_low must be < 1 (the ratio's lower bound is 1 − clip_low), got {self.clip_low}")
        if self.clip_high is not None and not (self.clip_high >= 0 and math.isfinite(self.clip_high)):
            raise ValueError(f"clip_high must be finite and >= 0, got {self.clip_high}")
        check_loss_agg_mode(self.loss_agg_mode)


AdvantageEstimator = Callable[[StepBatch, AdvantageConfig], torch.Tensor]
PolicyLossFn = Callable[
    [torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor | None, LossConfig], PolicyLoss
]
ADV_ESTIMATORS: dict[str, AdvantageEstimator] = {}
POLICY_LOSSES: dict[str, PolicyLossFn] = {}
F = TypeVar("F", bound=Callable)


def _register(table: dict, kind: str, name: str) -> Callable[[F], F]:
    def decorator(fn: F) -> F:
        if name in table and table[name] is not fn:
            raise ValueError(f"{kind} {name!r} is already registered")
        table[name] = fn
        return fn

    return decorator


def _lookup(table: dict, kind: str, name: str) -> Callable:
    if name not in table:
        raise ValueError(f"unknown {kind} {name!r}; registered: {sorted(table)}")
    return table[name]


def register_adv_est(name: str) -> Callable[[F], F]:
    """Registers ``fn(batch, config) -> advantages [R]`` under ``name``."""
    return _register(ADV_ESTIMATORS, "advantage estimator", name)


def register_policy_loss(name: str) -> Callable[[F], F]:
    """Registers ``fn(logp, old_logp, advantages, response_mask, segment_ids, config) -> PolicyLoss``."""
    return _register(POLICY_LOSSES, "policy loss", name)


def get_adv_estimator(name: str) -> AdvantageEstimator:
    return _lookup(ADV_ESTIMATORS, "advantage estimator", name)


def get_policy_loss(name: str) -> PolicyLossFn:
    return _lookup(POLICY_LOSSES, "policy loss", name)


def _episode(batch: StepBatch, config: AdvantageConfig) -> torch.Tensor:
    return episode_advantage(
        batch.traj_score,
        batch.traj_group,
        batch.traj_ids,
        batch.num_groups,
        config.norm == "mean_std_norm",
        config.eps,
        config.unbiased,
        config.episode_singleton == "raw",
        config.episode_weighting,
    )


def _no_none_norm(config: AdvantageConfig, name: str) -> None:
    if config.norm == "none":
        raise ValueError(f"norm='none' is GAGPO's; {name} takes 'mean_std_norm' or 'mean_norm'")


def _no_blend(config: AdvantageConfig, name: str) -> None:
    if config.combine != "sum":
        raise ValueError(
            f"combine={config.combine!r} mixes GiGPO's two levels, A^E and A^S (docs/algorithms.md (G10)); "
            f"{name} does not have them"
        )


@register_adv_est("grpo")
def grpo(batch: StepBatch, config: AdvantageConfig) -> torch.Tensor:
    """Episode-level advantage, shared over the rows by ``config.episode_weighting`` (docs/algorithms.md
    (E1)–(E3))."""
    _no_none_norm(config, "grpo")
    _no_blend(config, "grpo")
    return _episode(batch, config)


@register_adv_est("gigpo")
def gigpo(batch: StepBatch, config: AdvantageConfig) -> torch.Tensor:
    """A^E + ω·A^S, or α·A^E + (1 − α)·A^S with ``combine="blend"``, over anchor-state groups of discounted step
    returns (docs/algorithms.md (G5)–(G8), (G10)); A^E shared over the rows by ``config.episode_weighting``
    ((E1)–(E3)), A^S as it is."""
    _no_none_norm(config, "gigpo")
    device = batch.rewards.device
    returns = run(
        "trajectory_gae",
        device,
        batch.rewards,
        None,
        batch.traj_ids,
        batch.step_ids,
        batch.num_trajs,
        config.gamma,
        1.0,
    )
    step = step_advantage(
        returns, batch.state_ids, batch.num_states, config.norm == "mean_std_norm", config.eps, config.unbiased
    )
    return combine_levels(_episode(batch, config), step, config.combine, config.step_weight, config.alpha)


@register_adv_est("gagpo")
def gagpo(batch: StepBatch, config: AdvantageConfig) -> torch.Tensor:
    """Grouped value proxy and GAE recursion, normalised per task group (docs/algorithms.md (V1)–(V4)).

    GAGPO has no episode level: ``episode_weighting`` other than "episode" is refused (its pool is ``norm_over``,
    "rows" already giving every task group's rows a zero sum), and so is ``combine="blend"``."""
    if config.episode_weighting != "episode":
        raise ValueError(
            f"episode_weighting={config.episode_weighting!r} shares GRPO's and GiGPO's episode advantage over its "
            "rows (docs/algorithms.md (E2)–(E3)); gagpo has no episode level: its pool is norm_over ('rows' or "
            "'trajectories', (V4))"
        )
    _no_blend(config, "gagpo")
    return gae_advantage(
        batch.rewards,
        batch.group_ids,
        batch.traj_ids,
        batch.step_ids,
        batch.state_ids,
        batch.traj_group,
        batch.num_groups,
        batch.num_trajs,
        batch.num_states,
        config.gamma,
        config.lam,
        config.norm,
        config.norm_over,
        config.eps,
        config.unbiased,
    )


@register_policy_loss("per_action")
def per_action_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    segment_ids: torch.Tensor | None,
    config: LossConfig,
) -> PolicyLoss:
    """One importance ratio per action: the tokens of one segment (one row when ``segment_ids`` is None) share
    exp(mean log-ratio) (docs/algorithms.md (L1)). ``response_mask`` in the dtype of ``logp``; segment ids 0 off
    the mask."""
    clip_high = config.clip_low if config.clip_high is None else config.clip_high
    return clipped_loss(
        logp, old_logp, advantages, response_mask, segment_ids, config.clip_low, clip_high, config.loss_agg_mode
    )


@register_policy_loss("token")
def token_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    segment_ids: torch.Tensor | None,
    config: LossConfig,
) -> PolicyLoss:
    """PPO's token-level ratio exp(logp_j − old_j): every token its own segment (``segment_ids`` is ignored)."""
    rows, length = logp.shape
    each_token = torch.arange(length, device=logp.device).expand(rows, length)
    return per_action_loss(logp, old_logp, advantages, response_mask, each_token, config)
