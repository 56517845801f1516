"""The one place that maps a :class:`TrainConfig` onto the library's own settings objects: the rollout's
:class:`RolloutConfig` and the estimators' :class:`AdvantageConfig` (which `validate` also builds, to check them)."""

from __future__ import annotations

from pyagentrl.ops import AdvantageConfig
from pyagentrl.rollout import RolloutConfig, SamplingConfig
from pyagentrl.training.config import TrainConfig


def rollout_config(config: TrainConfig, sampling_seed: int | None) -> RolloutConfig:
    """How `collect` plays episodes under ``config``, sampling with ``sampling_seed``."""
    r = config.rollout
    return RolloutConfig(
        prompting=r.prompting,  # type: ignore[arg-type]
        turn_format=r.turn_format,  # type: ignore[arg-type]
        history_length=r.history_length,
        invalid_action_penalty=r.invalid_action_penalty,
        sampling=SamplingConfig(r.temperature, r.top_p, r.max_new_tokens, tuple(r.stop), sampling_seed),
        system_prompt=r.system_prompt,
        answer_format=r.answer_format,
        response_prefix=r.response_prefix,
        time_aware_anchors=config.anchors.time_aware,
    )


def advantage_config(config: TrainConfig, iteration: int) -> AdvantageConfig:
    """The estimator's settings at ``iteration`` (GiGPO's ω and the blend's α follow their schedules)."""
    a = config.algorithm
    return AdvantageConfig(
        gamma=a.gamma,
        lam=a.lam,
        norm=a.norm,  # type: ignore[arg-type]
        eps=a.eps,
        unbiased=a.unbiased,
        step_weight=a.step_weight.at(iteration),
        episode_singleton=a.episode_singleton,  # type: ignore[arg-type]
        norm_over=a.norm_over,  # type: ignore[arg-type]
        episode_weighting=a.episode_weighting,  # type: ignore[arg-type]
        combine=a.combine,  # type: ignore[arg-type]
        alpha=None if a.alpha is None else a.alpha.at(iteration),
    )
