"""Drop-in replacements for verl's GRPO and verl-agent's GiGPO estimators, and registration in verl.

The functions keep the originals' signatures and return values ``(advantages, returns)``, both
[B, L], and reproduce their numerics (statistics over step rows, unbiased std, ε added to σ, verl's
singleton rules) to float32 rounding, with one deliberate difference: a group whose scores are all
equal gets exactly 0 (the originals give ±0.3–0.5 there when the shared score is not exactly
representable, see docs/algorithms.md (S4), (D5); §7 there lists all the originals' conventions).

Wiring into verl: importing this module (or calling :func:`register_with_verl`) adds ``pyagentrl_grpo``,
``pyagentrl_gigpo`` and the policy loss ``pyagentrl_per_action`` to verl's registries when verl is
importable. verl's own dispatcher
(``compute_advantage`` in ``ray_trainer.py``) passes only ``token_level_rewards``, ``response_mask``,
``index`` and ``config``; GiGPO also needs ``step_rewards`` (discounted step returns), ``anchor_obs``
and ``traj_index``, which verl-agent keeps in ``data.batch["step_rewards"]`` and
``data.non_tensor_batch["anchor_obs"/"uid"/"traj_uid"]``. Pass them from there, exactly as verl-agent's
trainer calls its own ``core_gigpo.compute_gigpo_outcome_advantage``; the registered estimator raises
a clear error when they are missing. The policy loss gets no segment ids from verl, so there each row
is one action (sequence-level ratio); multi-action rows need :func:`pyagentrl.ops.per_action_clipped_loss`.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from pyagentrl.ops import _checks, broadcast_to_tokens, factorize, factorize_pairs, group_normalize
from pyagentrl.ops.policy_loss import per_action_clipped_loss, reduce_token_loss
from pyagentrl.ops.stats import NormMode

_MODES: dict[str, NormMode] = {"mean_std_norm": "mean_std_norm", "mean_norm": "mean_norm"}


def compute_grpo_outcome_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: np.ndarray,
    epsilon: float = 1e-6,
    norm_adv_by_std_in_grpo: bool = True,
    config: Any = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """verl's GRPO outcome advantage: score = sum of the row's token rewards, normalised within its
    ``index`` (uid) group; a group of one keeps its raw score. Returns (advantages, returns).
    docs/algorithms.md (S3) over rows, with (S5) "raw"."""
    scores = _row_scores(token_level_rewards, response_mask)
    group_ids = _group_ids(index, scores)
    norm: NormMode = "mean_std_norm" if norm_adv_by_std_in_grpo else "mean_norm"
    advantage = group_normalize(scores, group_ids, norm=norm, eps=epsilon, unbiased=True, singleton="raw")
    tokens = broadcast_to_tokens(advantage.to(response_mask.device), response_mask)
    return tokens, tokens


def compute_gigpo_outcome_advantage(
    token_level_rewards: torch.Tensor,
    step_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    anchor_obs: np.ndarray,
    index: np.ndarray,
    traj_index: np.ndarray,
    epsilon: float = 1e-6,
    step_advantage_w: float = 1.0,
    mode: str = "mean_norm",
    enable_similarity: bool = False,
    similarity_thresh: float = 0.95,
) -> tuple[torch.Tensor, torch.Tensor]:
    """verl-agent's GiGPO advantage (gigpo/core_gigpo.py), same arguments and results (docs/algorithms.md
    (G3)–(G8) with the conventions (D1)–(D4)).

    Episode level: row scores (sum of token rewards) normalised over all step rows of each ``index``
    group (a group of one keeps its raw score). Step level: ``step_rewards`` (the discounted step
    returns) normalised within rows of one ``index`` group whose ``anchor_obs`` are equal (a step
    group of one gets 0). ``enable_similarity`` groups near-identical text anchors instead, with
    MinHash (Jaccard ≥ ``similarity_thresh``) from :mod:`pyagentrl.hashing`: order-independent and
    linear-time, where the original's difflib first-fit clustering is neither, so the groups can differ.
    """
    if mode not in _MODES:
        raise ValueError(f"mode must be 'mean_std_norm' or 'mean_norm', got {mode!r}")
    scores = _row_scores(token_level_rewards, response_mask)
    n = scores.numel()
    group_ids = _group_ids(index, scores)
    _check_rows(traj_index, "traj_index", n)
    _check_rows(anchor_obs, "anchor_obs", n)
    if not isinstance(step_rewards, torch.Tensor) or step_rewards.shape != (n,):
        raise ValueError(
            f"step_rewards must be a tensor of shape ({n},), got {getattr(step_rewards, 'shape', type(step_rewards))}"
        )
    if not step_rewards.dtype.is_floating_point:
        raise TypeError(f"step_rewards must be a float tensor, got {step_rewards.dtype}")
    _checks.float_values(step_rewards.to(scores.dtype), "step_rewards")
    episode = group_normalize(scores, group_ids, norm=_MODES[mode], eps=epsilon, unbiased=True, singleton="raw")
    anchor_ids = _anchor_ids(anchor_obs, group_ids, enable_similarity, similarity_thresh)
    step_groups, num_step_groups = factorize_pairs(group_ids, anchor_ids)
    step = group_normalize(
        step_rewards.to(scores.dtype).cpu(), step_groups, num_step_groups, norm=_MODES[mode], eps=epsilon
    )
    advantage = episode + step_advantage_w * step
    tokens = broadcast_to_tokens(advantage.to(response_mask.device), response_mask)
    return tokens, tokens


def compute_policy_loss_per_action(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: str = "token-mean",
    config: Any = None,
    rollout_is_weights: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, Any]]:
    """verl's policy-loss signature over :func:`pyagentrl.ops.per_action_clipped_loss`, one action per
    row (the GSPO-token loss). Clip range from ``config.clip_ratio_low``/``clip_ratio_high`` (falling
    back to ``clip_ratio``, then 0.2). ``rollout_is_weights`` scale each token's loss. Inside verl
    (``config.global_batch_info`` set) the loss is aggregated by verl's own ``agg_loss``, so it stays
    invariant to data parallelism like verl's losses."""
    clip = _config_value(config, "clip_ratio", 0.2)
    clip_low = _config_value(config, "clip_ratio_low", clip)
    clip_high = _config_value(config, "clip_ratio_high", clip)
    mask = response_mask.to(log_prob.dtype)
    out = per_action_clipped_loss(
        log_prob,
        old_log_prob.to(log_prob.dtype),
        advantages.to(log_prob.dtype),
        mask,
        clip_low=clip_low,
        clip_high=clip_high,
        loss_agg_mode=loss_agg_mode,  # type: ignore[arg-type]
    )
    loss = out.loss
    token_loss = out.token_loss if rollout_is_weights is None else out.token_loss * rollout_is_weights
    batch_info = getattr(config, "global_batch_info", None)
    if batch_info:
        from verl.trainer.ppo.core_algos import agg_loss

        loss = agg_loss(loss_mat=token_loss, loss_mask=mask, loss_agg_mode=loss_agg_mode, **batch_info)
    elif rollout_is_weights is not None:
        loss = reduce_token_loss(token_loss, mask, loss_agg_mode)  # the mode was checked by per_action_clipped_loss
    active = response_mask != 0
    approx_kl = (old_log_prob - log_prob).detach()[active].mean() if bool(active.any()) else log_prob.new_zeros(())
    metrics = {
        "actor/pg_clipfrac": out.clip_fraction.item(),
        "actor/ppo_kl": approx_kl.item(),
        "actor/pg_clipfrac_lower": 0.0,  # verl's dual-clip metric; this loss has no dual clip
    }
    return loss, metrics


def register_with_verl() -> bool:
    """Registers the estimators and the loss in verl's registries; False when verl is not importable."""
    try:
        from verl.trainer.ppo import core_algos
    except ImportError:
        return False
    core_algos.register_adv_est("pyagentrl_grpo")(_grpo_from_verl_dispatcher)
    core_algos.register_adv_est("pyagentrl_gigpo")(_gigpo_from_verl_dispatcher)
    core_algos.register_policy_loss("pyagentrl_per_action")(compute_policy_loss_per_action)
    return True


def _grpo_from_verl_dispatcher(**kwargs: Any) -> tuple[torch.Tensor, torch.Tensor]:
    # verl's dispatcher adds ``reward_baselines`` when the batch has them; GRPO's baseline is the group mean.
    kwargs.pop("reward_baselines", None)
    return compute_grpo_outcome_advantage(**kwargs)


def _gigpo_from_verl_dispatcher(**kwargs: Any) -> tuple[torch.Tensor, torch.Tensor]:
    missing = [k for k in ("step_rewards", "anchor_obs", "traj_index") if k not in kwargs]
    if missing:
        raise ValueError(
            f"pyagentrl_gigpo needs {missing}, which verl's compute_advantage does not pass: call "
            "pyagentrl.adapters.verl.compute_gigpo_outcome_advantage with data.batch['step_rewards'] and "
            "data.non_tensor_batch['anchor_obs'/'uid'/'traj_uid'] (see this module's docstring)"
        )
    kwargs.pop("config", None)
    kwargs.pop("reward_baselines", None)
    return compute_gigpo_outcome_advantage(**kwargs)


def _row_scores(token_level_rewards: torch.Tensor, response_mask: torch.Tensor) -> torch.Tensor:
    """Each row's score, the sum of its token rewards, as float32 or float64 on the CPU (bf16/fp16 rewards,
    which verl accepts, are summed in float32)."""
    if not isinstance(token_level_rewards, torch.Tensor) or token_level_rewards.dim() != 2:
        raise ValueError("token_level_rewards must be a [B, L] tensor")
    if not token_level_rewards.dtype.is_floating_point:
        raise TypeError(f"token_level_rewards must be a float tensor, got {token_level_rewards.dtype}")
    if not isinstance(response_mask, torch.Tensor) or response_mask.shape != token_level_rewards.shape:
        raise ValueError(
            f"response_mask must have the shape of token_level_rewards {tuple(token_level_rewards.shape)}, "
            f"got {tuple(getattr(response_mask, 'shape', ()))}"
        )
    rewards = token_level_rewards if token_level_rewards.dtype == torch.float64 else token_level_rewards.float()
    # Checked under the caller's argument name, before the ops would report it under their own.
    return _checks.float_values(rewards.sum(dim=-1).cpu(), "token_level_rewards")


def _check_rows(values: Any, name: str, n: int) -> None:
    if values is None or len(values) != n:
        raise ValueError(f"{name} must have {n} rows, got {None if values is None else len(values)}")


def _group_ids(index: np.ndarray, scores: torch.Tensor) -> torch.Tensor:
    _check_rows(index, "index", scores.numel())
    return factorize(index)[0]


def _anchor_ids(anchor_obs: np.ndarray, group_ids: torch.Tensor, similar: bool, threshold: float) -> torch.Tensor:
    if not similar:
        return factorize(anchor_obs)[0]
    from pyagentrl.hashing import StateKeyer

    keyer = StateKeyer(mode="minhash", threshold=threshold)
    return torch.as_tensor(keyer.assign(list(anchor_obs), group_ids.numpy()), dtype=torch.int64)


def _config_value(config: Any, name: str, default: float) -> float:
    value = config.get(name) if isinstance(config, dict) else getattr(config, name, None)
    return float(default if value is None else value)


register_with_verl()
