"""The policy update: a DeepSpeed engine around the policy, old (and reference) log-probs recomputed by the actor,
and PPO epochs of clipped-loss minibatches with gradient accumulation over micro-batches.

Every rank holds the whole gathered batch. Each minibatch (a shuffled share of the rows, the same on every rank) is
split between the ranks, and each rank's share into micro-batches; every micro-batch's loss is its sum over the
loss's units (tokens, rows or actions, as ``loss_agg_mode`` averages) divided by the minibatch's count of units over
all ranks, times the world size (DeepSpeed averages gradients over ranks). The gradient of a minibatch is therefore
the gradient of the one-process loss on the same rows, whatever the number of ranks and micro-batches (tested).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from pyagentrl.ops import LossConfig, get_policy_loss
from pyagentrl.ops.policy_loss import loss_units, reduce_token_loss
from pyagentrl.rollout import TokenBatch
from pyagentrl.training import actor as actor_lib
from pyagentrl.training.config import ActorConfig
from pyagentrl.training.distributed import World


@dataclass
class UpdateStats:
    loss: float
    clip_fraction: float
    kl: float  # to the reference model (0 without one)
    entropy: float
    policy_drift: float  # mean old − current log-prob over the tokens of each micro-batch (verl's ppo_kl)
    grad_norm: float  # mean over optimizer steps, before clipping
    optimizer_steps: int


def cpu_has_bf16() -> bool:
    """Whether this CPU multiplies bf16 natively (AMX or AVX512-BF16), where autocast to bf16 pays off."""
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    return "amx_bf16" in flags or "avx512_bf16" in flags


def use_bf16(actor: ActorConfig) -> bool:
    if actor.bf16 != "auto":
        return actor.bf16 == "true"
    return torch.cuda.is_bf16_supported() if torch.cuda.is_available() else cpu_has_bf16()


def deepspeed_config(actor: ActorConfig, world: World) -> dict[str, Any]:
    """The ZeRO JSON of ``actor.deepspeed`` with what the trainer decides filled in (batch sizes, clipping, bf16:
    DeepSpeed's bf16 mode on GPUs; on CPUs the learner autocasts instead)."""
    config: dict[str, Any] = json.loads(Path(actor.deepspeed).read_text())
    bf16 = use_bf16(actor) and torch.cuda.is_available()
    config.update(
        train_micro_batch_size_per_gpu=actor.micro_batch_size,
        gradient_accumulation_steps=1,  # micro-batches per minibatch vary; the boundary is set by hand
        train_batch_size=actor.micro_batch_size * world.size,
        gradient_clipping=actor.max_grad_norm,
        steps_per_print=10**9,
    )
    config["bf16"] = {"enabled": bf16}
    return config


class Learner:
    """The DeepSpeed engine around the policy, and the frozen reference model when the KL term is on."""

    def __init__(self, model_path: Path, actor: ActorConfig, world: World, ds_config: dict[str, Any]) -> None:
        import deepspeed

        self.config, self.world, self.ds_config = actor, world, ds_config
        model = actor_lib.load_policy(model_path, actor.lora, actor.gradient_checkpointing)
        trainable = [p for p in model.parameters() if p.requires_grad]
        optimizer = torch.optim.AdamW(  # a torch optimizer: DeepSpeed's own compiles a C++ op for minutes on CPU
            trainable, lr=actor.lr, betas=(actor.betas[0], actor.betas[1]), weight_decay=actor.weight_decay
        )
        self.engine, *_ = deepspeed.initialize(model=model, optimizer=optimizer, config=ds_config)
        self.reference = None
        if actor.kl.coef > 0 and not actor_lib.is_lora(model):
            self.reference = actor_lib.load_reference(model_path).to(self.engine.device)
        # On CPUs bf16 is torch.autocast around every forward (old log-probs and update alike, so the ratio starts
        # at exactly 1); on GPUs it is DeepSpeed's bf16 mode, set in the DeepSpeed config.
        self.autocast = use_bf16(actor) and not torch.cuda.is_available()
        self.loss_fn = get_policy_loss(actor.policy_loss)
        self.loss_config = LossConfig(actor.clip_low, actor.clip_high, actor.loss_agg_mode)

    @property
    def model(self) -> Any:
        return self.engine.module

    def _dtype(self) -> torch.dtype:
        return next(self.model.parameters()).dtype

    def weights(self) -> list[tuple[str, torch.Tensor]]:
        """The policy's weights in HF names (LoRA merged), in float32, for the rollout engine."""
        return [(name, t.float()) for name, t in actor_lib.hf_weights(self.model)]

    def score(self, tokens: TokenBatch) -> tuple[torch.Tensor, torch.Tensor | None]:
        """[B, T] old log-probs of every row under the current policy (and the reference's, with the KL term on):
        each rank scores every world-size-th row, then the ranks exchange them."""
        rows = torch.arange(self.world.rank, tokens.input_ids.shape[0], self.world.size)
        parts = self.world.all_gather_object(self._score_rows(tokens, rows))
        old = torch.zeros(tokens.input_ids.shape)
        ref = torch.zeros_like(old) if self.config.kl.coef > 0 else None
        for rank, (part_old, part_ref) in enumerate(parts):
            old[rank :: self.world.size] = part_old
            if ref is not None:
                ref[rank :: self.world.size] = part_ref
        return old, ref

    @torch.no_grad()
    def _score_rows(self, tokens: TokenBatch, rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        self.model.eval()
        old = torch.zeros(len(rows), tokens.input_ids.shape[1])
        ref = torch.zeros_like(old) if self.config.kl.coef > 0 else None
        for start in range(0, len(rows), self.config.micro_batch_size):
            chunk = rows[start : start + self.config.micro_batch_size]
            ids, attention, mask, width = self._rows(tokens, chunk)
            with self._precision():
                old[start : start + len(chunk), :width] = self._logprobs(self.model, ids, attention, mask).cpu()
                if ref is not None:
                    if self.reference is None:  # LoRA: the base model is the reference
                        with self.model.disable_adapter():
                            lp = self._logprobs(self.model, ids, attention, mask)
                    else:
                        lp = self._logprobs(self.reference, ids, attention, mask)
                    ref[start : start + len(chunk), :width] = lp.cpu()
        return old, ref

    def _precision(self) -> Any:
        return torch.autocast("cpu", dtype=torch.bfloat16, enabled=self.autocast)

    @staticmethod
    def _logprobs(model: Any, ids: torch.Tensor, attention: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return actor_lib.token_logprobs(model, ids, attention, mask)[0]

    def _rows(self, tokens: TokenBatch, rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, int]:
        """The rows' input ids, attention and response mask on the engine's device, trimmed to their longest row."""
        attention = tokens.attention_mask[rows]
        width = max(int(attention.sum(1).max()), 2)
        device = self.engine.device
        return (
            tokens.input_ids[rows, :width].to(device),
            attention[:, :width].to(device),
            tokens.response_mask[rows, :width].to(device),
            width,
        )

    def update(
        self,
        tokens: TokenBatch,
        advantages: torch.Tensor,
        old_logprobs: torch.Tensor,
        ref_logprobs: torch.Tensor | None,
        generator: torch.Generator,
    ) -> UpdateStats:
        """PPO epochs over the batch: ``advantages``, ``old_logprobs`` and ``ref_logprobs`` are [B, T] like
        ``tokens``; ``generator`` shuffles the rows (the same on every rank)."""
        cfg, world = self.config, self.world
        self.model.train()
        mode = cfg.loss_agg_mode
        num_rows = tokens.input_ids.shape[0]
        sums = dict.fromkeys(("loss", "clipped", "kl", "entropy", "drift", "tokens"), 0.0)
        grad_norms: list[float] = []
        steps_before = self.engine.global_steps
        for _ in range(cfg.ppo_epochs):
            order = torch.randperm(num_rows, generator=generator)
            for minibatch in torch.tensor_split(order, cfg.minibatches):
                if len(minibatch) == 0:  # fewer rows than minibatches (dynamic sampling dropped groups)
                    continue
                units = float(loss_units(tokens.response_mask[minibatch], mode, tokens.segment_ids[minibatch]))
                mine = minibatch[world.rank :: world.size]
                count = math.ceil(math.ceil(len(minibatch) / world.size) / cfg.micro_batch_size)
                for i, micro in enumerate(torch.tensor_split(mine, count)):
                    weight = 1.0
                    if len(micro) == 0:  # every rank must run as many micro-batches (the gradient reduction)
                        micro, weight = minibatch[:1], 0.0
                    loss, stats = self._micro_loss(tokens, micro, advantages, old_logprobs, ref_logprobs)
                    boundary = i == count - 1
                    self.engine.set_gradient_accumulation_boundary(boundary)
                    self.engine.backward(loss * (weight * world.size / max(units, 1.0)))
                    if boundary and self.engine.zero_optimization_stage() == 0:
                        # ZeRO-0 keeps whole gradients and records no norm: measure it before the step clips it.
                        grads = [p.grad for p in self.model.parameters() if p.grad is not None]
                        grad_norms.append(float(torch.nn.utils.get_total_norm(grads)))
                    self.engine.step()
                    for key, value in stats.items():
                        sums[key] += weight * value
                if self.engine.zero_optimization_stage() > 0:
                    norm = self.engine.get_global_grad_norm()
                    grad_norms.append(float("nan") if norm is None else float(norm))
        totals = world.all_reduce_sums(sums)
        tokens_seen = max(totals["tokens"], 1.0)
        return UpdateStats(
            loss=totals["loss"] / tokens_seen,
            clip_fraction=totals["clipped"] / tokens_seen,
            kl=totals["kl"] / tokens_seen,
            entropy=totals["entropy"] / tokens_seen,
            policy_drift=totals["drift"] / tokens_seen,
            grad_norm=sum(grad_norms) / max(len(grad_norms), 1),
            optimizer_steps=self.engine.global_steps - steps_before,  # as DeepSpeed counts them
        )

    def _micro_loss(
        self,
        tokens: TokenBatch,
        rows: torch.Tensor,
        advantages: torch.Tensor,
        old_logprobs: torch.Tensor,
        ref_logprobs: torch.Tensor | None,
    ) -> tuple[torch.Tensor, dict[str, float]]:
        """The micro-batch's loss summed over its units (see the module docstring) and token-weighted stats."""
        cfg = self.config
        ids, attention, mask, width = self._rows(tokens, rows)
        with self._precision():  # entropy: logged every iteration; its gradient is used only with entropy_coef > 0
            logp, entropy = actor_lib.token_logprobs(self.model, ids, attention, mask, with_entropy=True)
        device, dtype = logp.device, logp.dtype
        mask = mask.to(dtype)
        seg = tokens.segment_ids[rows, :width].to(device)
        old = old_logprobs[rows, :width].to(device, dtype)
        adv = advantages[rows, :width].to(device, dtype)
        out = self.loss_fn(logp, old, adv, mask, seg, self.loss_config)
        mode = cfg.loss_agg_mode
        units = loss_units(mask, mode, seg)
        # The loss as a sum over the mode's units, from the per-token loss and the real action segments (the
        # "token" loss's own reduction would count every token as a segment).
        total = reduce_token_loss(out.token_loss, mask, mode, seg) * units
        n_tokens = float(mask.sum())
        kl_mean = 0.0
        if ref_logprobs is not None:
            log_ratio = ref_logprobs[rows, :width].to(device, dtype) - logp
            kl = -log_ratio if cfg.kl.estimator == "k1" else torch.exp(log_ratio) - log_ratio - 1
            total = total + cfg.kl.coef * reduce_token_loss(kl, mask, mode, seg) * units
            kl_mean = float((kl.detach() * mask).sum())
        assert entropy is not None
        if cfg.entropy_coef > 0:
            total = total - cfg.entropy_coef * reduce_token_loss(entropy, mask, mode, seg) * units
        stats = {
            "loss": float((out.token_loss.detach() * mask).sum()),
            "clipped": float(out.clip_fraction) * n_tokens,
            "kl": kl_mean,
            "entropy": float((entropy.detach() * mask).sum()),
            "drift": float(((old - logp.detach()) * mask).sum()),
            "tokens": n_tokens,
        }
        return total, stats
