"""Clipped PPO loss with one importance ratio per action (GAGPO's per-action ratio, built as GSPO-token).

A row may be a single action or a whole multi-turn conversation: ``segment_ids`` mark which tokens
belong to which action, and every token of an action shares that action's ratio.
"""

from __future__ import annotations

from typing import Literal, NamedTuple

import torch

from pyagentrl.ops import _checks
from pyagentrl.ops._dispatch import run

LossAggMode = Literal[
    "token-mean", "token-sum", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm", "segment-mean"
]
LOSS_AGG_MODES: tuple[str, ...] = LossAggMode.__args__  # type: ignore[attr-defined]


class PolicyLoss(NamedTuple):
    loss: torch.Tensor  # scalar, differentiable w.r.t. logp
    token_loss: torch.Tensor  # [B, L], 0 off the mask
    ratio: torch.Tensor  # [B, L], the per-action ratio s of each token's action, 1 off the mask
    clip_fraction: torch.Tensor  # scalar: share of action tokens whose clipped term was taken


def per_action_clipped_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    segment_ids: torch.Tensor | None = None,
    *,
    clip_low: float = 0.2,
    clip_high: float | None = None,
    loss_agg_mode: LossAggMode = "token-mean",
) -> PolicyLoss:
    """Clipped surrogate with a per-action importance ratio (docs/algorithms.md (L1)–(L3)):

        s_a = exp( Σ_{j∈a} m_j (logp_j − old_j) / max(Σ_{j∈a} m_j, 1) )
        ratio_j = exp(logp_j − sg(logp_j) + sg(log s_a))   (value s_a, gradient s_a ∇logp_j)
        loss_j = max(−A_j ratio_j, −A_j clip(ratio_j, 1 − clip_low, 1 + clip_high))

    Args:
        logp, old_logp, advantages: float [B, L] (advantages per token, e.g. from broadcast_to_tokens).
        response_mask: [B, L] bool/int/float; tokens with 0 are not part of any action.
        segment_ids: int64 [B, L] or None. Tokens of one row with equal ids form one action; ids must
            lie in [0, L) on masked tokens. None: each row is one action (sequence-level, GSPO).
        clip_high: defaults to ``clip_low``.
        loss_agg_mode: verl's modes, plus "segment-mean" (token mean per action, then mean over actions).
    """
    lp = _checks.float_values(logp, "logp", dim=2)
    old = _token_like(old_logp, "old_logp", lp)
    adv = _token_like(advantages, "advantages", lp)
    mask_in = _checks.tensor(response_mask, "response_mask")
    if mask_in.shape != lp.shape:
        raise ValueError(f"response_mask has shape {tuple(mask_in.shape)}, expected {tuple(lp.shape)}")
    _checks.same_device(mask_in, "response_mask", lp.device)
    _checks.finite_mask(mask_in, "response_mask")
    mask = mask_in.to(lp.dtype)
    seg = None if segment_ids is None else _segments(segment_ids, mask != 0, lp)
    clip_low = _checks.non_negative(clip_low, "clip_low")
    if clip_low >= 1:
        raise ValueError(f"clip_low must be < 1 (the ratio's lower bound is 1 − clip_low), got {clip_low}")
    clip_high = clip_low if clip_high is None else _checks.non_negative(clip_high, "clip_high")
    check_loss_agg_mode(loss_agg_mode)

    return clipped_loss(lp, old, adv, mask, seg, clip_low, clip_high, loss_agg_mode)


def clipped_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    segment_ids: torch.Tensor | None,
    clip_low: float,
    clip_high: float,
    loss_agg_mode: str,
) -> PolicyLoss:
    """Unchecked core of :func:`per_action_clipped_loss` (docs/algorithms.md (L1)–(L3)): the trainer's hot path.

    Inputs as the public function leaves them (mask in the dtype of ``logp``, segment ids 0 off the mask). No
    host round trip and no data-dependent Python branch, so it compiles with ``torch.compile(fullgraph=True)``.
    """
    token_loss, ratio, dloss = run(
        "per_action_clipped_loss", logp.device, logp, old_logp, advantages, mask, segment_ids, clip_low, clip_high
    )
    active = mask != 0
    clipped = active & (advantages != 0) & (dloss == 0)
    clip_fraction = clipped.sum() / active.sum().clamp(min=1)
    loss = reduce_token_loss(token_loss, mask, loss_agg_mode, segment_ids)
    return PolicyLoss(loss, token_loss, ratio, clip_fraction.to(logp.dtype))


def aggregate_loss(
    token_loss: torch.Tensor,
    mask: torch.Tensor,
    mode: LossAggMode = "token-mean",
    segment_ids: torch.Tensor | None = None,
) -> torch.Tensor:
    """Reduces a [B, L] per-token loss to a scalar, as verl's ``agg_loss`` does on one rank (rows or
    segments without a masked token are left out of the means; "seq-mean-token-sum-norm" divides the
    seq-mean-token-sum by L). The modes: docs/algorithms.md (L4).

    Args:
        token_loss: float32/float64 [B, L] (may require grad).
        mask: [B, L] bool/int/float, on the device of ``token_loss``; finite and non-negative.
        segment_ids: int64 [B, L] or None; on masked tokens in [0, L) (read by "segment-mean").
    """
    loss = _checks.float_values(token_loss, "token_loss", dim=2)
    mask_in = _checks.tensor(mask, "mask")
    if mask_in.shape != loss.shape:
        raise ValueError(f"mask has shape {tuple(mask_in.shape)}, expected {tuple(loss.shape)} (token_loss's)")
    _checks.same_device(mask_in, "mask", loss.device)
    _checks.finite_mask(mask_in, "mask")
    weights = mask_in.to(loss.dtype)
    seg = None if segment_ids is None else _segments(segment_ids, weights != 0, loss)
    check_loss_agg_mode(mode)
    return reduce_token_loss(loss, weights, mode, seg)


def check_loss_agg_mode(mode: str) -> None:
    if mode not in LOSS_AGG_MODES:
        raise ValueError(f"loss_agg_mode must be one of {LOSS_AGG_MODES}, got {mode!r}")


def loss_units(mask: torch.Tensor, mode: str, segment_ids: torch.Tensor | None = None) -> torch.Tensor:
    """The count that ``mode`` averages over: masked tokens ("token-mean"), rows holding one ("seq-mean-*"),
    actions holding one ("segment-mean"), or 1 ("token-sum"). ``reduce_token_loss(x, mask, mode, seg) *
    loss_units(mask, mode, seg)`` is the loss as a sum, which a data-parallel trainer divides by the count over all
    ranks and micro-batches to get the loss of the whole batch."""
    if mode == "token-mean":
        return mask.sum()
    if mode == "token-sum":
        return torch.ones((), dtype=mask.dtype, device=mask.device)
    if mode == "segment-mean":
        rows, length = mask.shape
        seg = torch.zeros_like(mask, dtype=torch.long) if segment_ids is None else segment_ids
        flat = (torch.arange(rows, device=seg.device)[:, None] * length + seg.clamp(min=0)).flatten()
        tokens = mask.new_zeros(rows * length).index_add(0, flat, mask.flatten())
        return (tokens > 0).sum().to(mask.dtype)
    return (mask.sum(-1) > 0).sum().to(mask.dtype)


def reduce_token_loss(
    token_loss: torch.Tensor, mask: torch.Tensor, mode: str, segment_ids: torch.Tensor | None = None
) -> torch.Tensor:
    """Unchecked core of :func:`aggregate_loss` (``mode`` already checked)."""
    # Means over rows or segments that hold a masked token, by masked sums rather than boolean indexing: no
    # data-dependent shapes, so the loss path traces into one graph.
    weighted = token_loss * mask
    if mode == "token-mean":
        return weighted.sum() / mask.sum().clamp(min=1)
    if mode == "token-sum":
        return weighted.sum()
    if mode == "segment-mean":
        rows, length = token_loss.shape
        seg = torch.zeros_like(token_loss, dtype=torch.long) if segment_ids is None else segment_ids
        flat = (torch.arange(rows, device=seg.device)[:, None] * length + seg.clamp(min=0)).flatten()
        loss_sum = token_loss.new_zeros(rows * length).index_add(0, flat, weighted.flatten())
        tokens = mask.new_zeros(rows * length).index_add(0, flat, mask.flatten())
        used = tokens > 0
        return torch.where(used, loss_sum / tokens.clamp(min=1), 0).sum() / used.sum().clamp(min=1)
    per_row = weighted.sum(-1)
    tokens = mask.sum(-1)
    if mode == "seq-mean-token-mean":
        per_row = per_row / tokens.clamp(min=1)
    has_tokens = tokens > 0
    loss = torch.where(has_tokens, per_row, 0).sum() / has_tokens.sum().clamp(min=1)
    return loss / mask.shape[-1] if mode == "seq-mean-token-sum-norm" else loss


KL_ESTIMATORS: tuple[str, ...] = ("k1", "k3")


def kl_penalty(logp: torch.Tensor, ref_logp: torch.Tensor, estimator: str = "k3") -> torch.Tensor:
    """Per-token estimate of KL(π_θ ‖ π_ref) at sampled tokens (docs/algorithms.md (L7)), as verl computes it:

        k1 = log π_θ − log π_ref
        k3 = r − log r − 1,  log r = clamp(log π_ref − log π_θ, −20, 20),  then k3 clamped to [−10, 10]

    k3 (Schulman's low-variance estimator, verl's "low_var_kl") is ≥ 0 and unbiased in expectation, but its
    gradient 1 − r grows as e^{log r} for tokens the policy has made much rarer than the reference: the clamps bound
    it (a token past them adds a constant and no gradient).

    ``logp`` and ``ref_logp``: float tensors of one shape on one device (no broadcasting). The checks read shapes
    only, never values: the trainer calls this in its loss path."""
    lp = _checks.tensor(logp, "logp")
    ref = _checks.tensor(ref_logp, "ref_logp")
    for t, name in ((lp, "logp"), (ref, "ref_logp")):
        if not t.dtype.is_floating_point:
            raise TypeError(f"{name} must be a float tensor, got {t.dtype}")
    if ref.shape != lp.shape:
        raise ValueError(f"ref_logp has shape {tuple(ref.shape)}, expected {tuple(lp.shape)} (logp's)")
    _checks.same_device(ref, "ref_logp", lp.device)
    if estimator == "k1":
        return logp - ref_logp
    if estimator != "k3":
        raise ValueError(f"estimator must be one of {KL_ESTIMATORS}, got {estimator!r}")
    log_ratio = (ref_logp - logp).clamp(-20.0, 20.0)
    return (torch.exp(log_ratio) - log_ratio - 1).clamp(-10.0, 10.0)


def _token_like(x: object, name: str, like: torch.Tensor) -> torch.Tensor:
    t = _checks.tensor(x, name)
    if t.shape != like.shape or t.dtype != like.dtype:
        raise ValueError(f"{name} must be {like.dtype} {tuple(like.shape)}, got {t.dtype} {tuple(t.shape)}")
    _checks.same_device(t, name, like.device)
    if not bool(torch.isfinite(t).all()):
        raise ValueError(f"{name} contains NaN or inf")
    return t.detach()


def _segments(segment_ids: object, active: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    seg = _checks.tensor(segment_ids, "segment_ids")
    if seg.dtype != torch.int64 or seg.shape != like.shape:
        raise ValueError(f"segment_ids must be int64 {tuple(like.shape)}, got {seg.dtype} {tuple(seg.shape)}")
    _checks.same_device(seg, "segment_ids", like.device)
    on_mask = seg[active]
    if on_mask.numel() and (int(on_mask.min()) < 0 or int(on_mask.max()) >= like.shape[1]):
        raise ValueError(f"segment_ids on masked tokens must lie in [0, {like.shape[1]})")
    return torch.where(active, seg, torch.zeros_like(seg))
