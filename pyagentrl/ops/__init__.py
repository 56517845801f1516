"""Critic-free advantage and loss ops for multi-turn agents (flat layout: one row per environment step).

Each op runs a compiled kernel (``torch.ops.pyagentrl.*``: C++ on CPU, CUDA on GPU) where one exists for the
tensors' device and the PyTorch reference in :mod:`pyagentrl.ops.reference` elsewhere.
"""

from pyagentrl.ops.advantages import (
    EPISODE_WEIGHTINGS,
    broadcast_to_tokens,
    gagpo_advantage,
    gigpo_advantage,
    grpo_advantage,
)
from pyagentrl.ops.batch import StepBatch
from pyagentrl.ops.estimators import (
    ADV_ESTIMATORS,
    POLICY_LOSSES,
    AdvantageConfig,
    LossConfig,
    get_adv_estimator,
    get_policy_loss,
    register_adv_est,
    register_policy_loss,
)
from pyagentrl.ops.ids import factorize, factorize_pairs
from pyagentrl.ops.policy_loss import (
    KL_ESTIMATORS,
    LOSS_AGG_MODES,
    PolicyLoss,
    aggregate_loss,
    kl_penalty,
    per_action_clipped_loss,
)
from pyagentrl.ops.returns import discounted_returns, trajectory_gae
from pyagentrl.ops.stats import GroupStats, group_normalize, grouped_stats

__all__ = [
    "ADV_ESTIMATORS",
    "EPISODE_WEIGHTINGS",
    "KL_ESTIMATORS",
    "LOSS_AGG_MODES",
    "POLICY_LOSSES",
    "AdvantageConfig",
    "GroupStats",
    "LossConfig",
    "PolicyLoss",
    "StepBatch",
    "aggregate_loss",
    "broadcast_to_tokens",
    "discounted_returns",
    "factorize",
    "factorize_pairs",
    "gagpo_advantage",
    "get_adv_estimator",
    "get_policy_loss",
    "gigpo_advantage",
    "group_normalize",
    "grouped_stats",
    "grpo_advantage",
    "kl_penalty",
    "per_action_clipped_loss",
    "register_adv_est",
    "register_policy_loss",
    "trajectory_gae",
]
