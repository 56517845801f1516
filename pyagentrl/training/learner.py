"""The policy update: a DeepSpeed engine around the policy, old (and reference) log-probs recomputed by the actor,
and PPO epochs of clipped-loss minibatches with gradient accumulation over micro-batches.

Old log-probs need no pass of their own where the update's forward can give them: the rows of the first minibatch
of the first epoch are scored by that forward (no weight has changed yet, so its log-probs are the old ones,
detached); only the other rows are scored before the update. With one minibatch and one epoch nothing is scored
apart. The learner's log-probs are those of the distribution the engine sampled from (temperature and top-p,
:func:`pyagentrl.training.actor.token_logprobs`); ``logprob_gap`` is their mean distance to the engine's own.

Every rank holds the whole gathered batch. Each minibatch (a shuffled share of the rows, the same on every rank) is
split between the ranks, and each rank's share into micro-batches; every micro-batch's loss is its sum over the
loss's units (tokens, rows or actions, as ``loss_agg_mode`` averages) divided by the minibatch's count of units over
all ranks, times the world size (DeepSpeed averages gradients over ranks). The gradient of a minibatch is therefore
the gradient of the one-process loss on the same rows, whatever the number of ranks and micro-batches (tested).
"""

from __future__ import annotations

import contextlib
import json
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from pyagentrl.ops import LossConfig, get_policy_loss
from pyagentrl.ops.policy_loss import kl_penalty, loss_units, reduce_token_loss
from pyagentrl.rollout import TokenBatch
from pyagentrl.training import actor as actor_lib
from pyagentrl.training.config import ActorSection, TrainConfig, derived_batch_settings, optimizer_steps
from pyagentrl.training.distributed import World


@dataclass
class UpdateStats:
    loss: float
    clip_fraction: float
    kl: float  # to the reference model (0 without one)
    entropy: float  # over every sampled token (mostly fixed format tokens)
    action_entropy: float | None  # over the tokens that name the action (None: no reply named one)
    policy_drift: float  # mean old − current log-prob over the tokens of each micro-batch (verl's ppo_kl)
    logprob_gap: float  # mean |engine − learner| old log-prob over sampled tokens: stale weights, engine precision
    grad_norm: float  # mean over optimizer steps, before clipping
    lr: float  # the learning rate of the iteration's last optimizer step
    optimizer_steps: int
    scored_rows: int  # rows whose old log-probs took a forward pass of their own
    seconds_scoring: float  # of those passes (and the reference's)


#: Tokens a shared prefix must save in a micro-batch before it is decoded apart (two decoder calls instead of one).
MIN_SHARED_TOKENS = 64


def prompt_order(tokens: TokenBatch) -> torch.Tensor:
    """int64 [B]: a key that puts rows with the same first prompt (the tokens before their first sampled token: the
    episodes of one task group) next to each other and, among those, longer rows first. Micro-batches cut from rows
    in this order share their prompt (decoded once) and waste little on padding."""
    first = tokens.response_mask.argmax(1).tolist()
    prompts: dict[tuple[int, ...], int] = {}
    ids = [
        prompts.setdefault(tuple(row[:n]), len(prompts))
        for row, n in zip(tokens.input_ids.tolist(), first, strict=True)
    ]
    length = tokens.attention_mask.sum(1)
    return torch.tensor(ids) * (tokens.input_ids.shape[1] + 1) + (tokens.input_ids.shape[1] - length)


def lr_factor(step: int, total: int, warmup: int, schedule: str, min_ratio: float) -> float:
    """The learning rate's multiplier at optimizer step ``step`` (0-based) of ``total``: a linear warmup over the
    first ``warmup`` steps (from 1/(warmup+1) up to 1), then constant, or a linear or cosine decay that reaches
    ``min_ratio`` at the last step."""
    if step < warmup:
        return (step + 1) / (warmup + 1)
    if schedule == "constant":
        return 1.0
    t = min((step - warmup) / max(total - 1 - warmup, 1), 1.0)
    if schedule == "linear":
        return 1.0 - (1.0 - min_ratio) * t
    return min_ratio + (1.0 - min_ratio) * (1 + math.cos(math.pi * t)) / 2


def cpu_has_bf16() -> bool:
    """Whether this CPU multiplies bf16 natively (AMX or AVX512-BF16), where autocast to bf16 pays off."""
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    return "amx_bf16" in flags or "avx512_bf16" in flags


def use_bf16(actor: ActorSection) -> bool:
    if actor.bf16 != "auto":
        return actor.bf16 == "true"
    return torch.cuda.is_bf16_supported() if torch.cuda.is_available() else cpu_has_bf16()


class PolicyScorer(torch.nn.Module):
    """The policy behind a forward that returns log-probs (:func:`pyagentrl.training.actor.token_logprobs`) instead
    of logits: the module DeepSpeed wraps, so that every forward of the policy goes through ``engine(...)``. DeepSpeed
    needs that: its forward counts micro-steps (ZeRO-3 accumulates a micro-batch's gradient only after a forward
    through the engine; without one, each micro-batch's gradient replaces the last) and, under ZeRO-3, gathers the
    weights a forward reads outside their own module (the LM head's, read by ``token_logprobs``).

    Under ZeRO-3 every forward is collective (each module's weights are gathered from all ranks as it runs): every
    rank must make the same forwards with the same decoder calls. ``split_shared_prefix=False`` keeps each forward one
    decoder call, whatever prompt the rows of a rank happen to share."""

    #: What DeepSpeed's checkpoints put before the policy's own parameter names.
    PREFIX = "policy."

    def __init__(self, policy: Any, temperature: float, top_p: float, split_shared_prefix: bool = True) -> None:
        super().__init__()
        self.policy = policy
        self.temperature, self.top_p = temperature, top_p
        self.split_shared_prefix = split_shared_prefix

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        response_mask: torch.Tensor,
        with_entropy: bool = False,
        base: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """``base``: the LoRA policy's base model (its adapter disabled), the reference of a LoRA run."""
        with self.policy.disable_adapter() if base else contextlib.nullcontext():
            return score_tokens(
                self.policy,
                input_ids,
                attention_mask,
                response_mask,
                with_entropy,
                self.temperature,
                self.top_p,
                self.split_shared_prefix,
            )


def score_tokens(
    model: Any,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    response_mask: torch.Tensor,
    with_entropy: bool,
    temperature: float,
    top_p: float,
    split_shared_prefix: bool = True,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """:func:`pyagentrl.training.actor.token_logprobs`, with a prompt the rows share (a task group's first turn)
    decoded once when that saves a forward's worth of tokens (and ``split_shared_prefix`` allows it)."""
    shared = actor_lib.shared_prefix_length(input_ids, attention_mask) if split_shared_prefix else 0
    shared = shared if shared * (input_ids.shape[0] - 1) >= MIN_SHARED_TOKENS else 0
    return actor_lib.token_logprobs(
        model, input_ids, attention_mask, response_mask, with_entropy, temperature, top_p, shared
    )


def deepspeed_config(actor: ActorSection, world: World) -> dict[str, Any]:
    """The ZeRO JSON of ``actor.deepspeed`` with what the trainer decides filled in (batch sizes, clipping, bf16:
    DeepSpeed's bf16 mode on GPUs; on CPUs the learner autocasts instead)."""
    config: dict[str, Any] = json.loads(Path(actor.deepspeed).read_text())
    bf16 = use_bf16(actor) and torch.cuda.is_available()
    config.update(derived_batch_settings(actor, world.size))
    config.update(gradient_clipping=actor.max_grad_norm, steps_per_print=10**9)
    config["bf16"] = {"enabled": bf16}
    return config


class Learner:
    """The DeepSpeed engine around the policy, and the frozen reference model when the KL term is on."""

    def __init__(
        self,
        model_path: Path,
        actor: ActorSection,
        world: World,
        ds_config: dict[str, Any],
        *,
        temperature: float = 1.0,
        top_p: float = 1.0,
        total_steps: int = 1,
        trust_remote_code: bool = False,
    ) -> None:
        """``temperature`` and ``top_p``: the engine's sampling settings, which the learner's log-probs follow;
        ``total_steps``: the run's optimizer steps, over which the learning-rate schedule runs;
        ``trust_remote_code``: let the model directory's own code run (only for a model you trust)."""
        import deepspeed

        self.config, self.world, self.ds_config = actor, world, ds_config
        self.temperature, self.top_p = temperature, top_p
        model = actor_lib.load_policy(model_path, actor.lora, actor.gradient_checkpointing, trust_remote_code)
        actor_lib.check_logit_path(model)
        trainable = [p for p in model.parameters() if p.requires_grad]
        optimizer = torch.optim.AdamW(  # a torch optimizer: DeepSpeed's own compiles a C++ op for minutes on CPU
            trainable, lr=actor.lr, betas=(actor.betas[0], actor.betas[1]), weight_decay=actor.weight_decay
        )
        schedule = torch.optim.lr_scheduler.LambdaLR(
            optimizer,
            lambda step: lr_factor(step, total_steps, actor.warmup_steps, actor.lr_schedule, actor.min_lr_ratio),
        )
        # DeepSpeed steps the schedule after each optimizer step and keeps its state in its checkpoints.
        self.stage = int(ds_config.get("zero_optimization", {}).get("stage", 0))
        self.zero3 = self.stage == 3
        scorer = PolicyScorer(model, temperature, top_p, split_shared_prefix=not self.zero3)
        self.engine, *_ = deepspeed.initialize(
            model=scorer, optimizer=optimizer, lr_scheduler=schedule, config=ds_config
        )
        self.reference = None
        if actor.kl.coef > 0 and not actor_lib.is_lora(model):
            # In the policy's compute dtype (bf16 under DeepSpeed's bf16 mode), so that the KL is 0 at the start.
            dtype = torch.bfloat16 if ds_config.get("bf16", {}).get("enabled") else torch.float32
            self.reference = actor_lib.load_reference(model_path, dtype, trust_remote_code).to(self.engine.device)
        # On CPUs bf16 is torch.autocast around every forward (old log-probs and update alike, so the ratio starts
        # at exactly 1); on GPUs it is DeepSpeed's bf16 mode, set in the DeepSpeed config.
        self.autocast = use_bf16(actor) and not torch.cuda.is_available()
        self.loss_fn = get_policy_loss(actor.policy_loss)
        self.loss_config = LossConfig(actor.clip_low, actor.clip_high, actor.loss_agg_mode)

    @classmethod
    def for_run(cls, config: TrainConfig, world: World, ds_config: dict[str, Any] | None = None) -> Learner:
        """The learner of ``config``: its model and update settings, the sampling settings its log-probs follow, the
        learning-rate schedule over the run's optimizer steps, and ``ds_config`` (default: :func:`deepspeed_config`
        of its settings)."""
        from pyagentrl.rollout.models import resolve_model

        return cls(
            resolve_model(config.model),
            config.actor,
            world,
            deepspeed_config(config.actor, world) if ds_config is None else ds_config,
            temperature=config.rollout.temperature,
            top_p=config.rollout.top_p,
            total_steps=optimizer_steps(config),
            trust_remote_code=config.trust_remote_code,
        )

    @property
    def model(self) -> Any:
        """The policy (a transformers model, or its peft wrapper); under ZeRO-3 its weights are partitioned."""
        return self.engine.module.policy

    def weights(self) -> list[tuple[str, torch.Tensor]]:
        """The policy's weights in HF names (LoRA merged), in float32, for the rollout engine. A collective call
        under ZeRO-3: every rank gathers them, one at a time, as every rank's engine holds the whole policy."""
        if not self.zero3:
            return [(name, t.float()) for name, t in actor_lib.hf_weights(self.model)]
        import deepspeed

        def whole(params: list[Any]) -> Any:
            return deepspeed.zero.GatheredParameters(params, modifier_rank=None)

        # Copied inside each gather: the gathered storage is released when its context ends.
        return [(name, t.to(torch.float32, copy=True)) for name, t in actor_lib.hf_weights(self.model, whole)]

    def gathered_state_dict(self) -> dict[str, torch.Tensor] | None:
        """Under ZeRO-3, the policy's state dict (the trainable weights only for LoRA) gathered onto rank 0 one module
        at a time, as transformers' Trainer does, for the checkpoint's HF directory: a collective call, None on the
        other ranks. Without ZeRO-3, None: the policy's own ``state_dict`` is whole."""
        if not self.zero3:
            return None
        gathered = self.engine._zero3_consolidated_16bit_state_dict(  # in the weights' own dtype, despite the name
            exclude_frozen_parameters=actor_lib.is_lora(self.model)
        )
        if gathered is None:
            return None
        return {key.removeprefix(PolicyScorer.PREFIX): value for key, value in gathered.items()}

    def score(
        self, tokens: TokenBatch, rows: torch.Tensor | None = None, *, policy: bool = True, reference: bool = True
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """[B, T] log-probs of ``rows`` (default: all) under the current policy and, with the KL term on, under the
        reference (0 in the other rows; either pass can be left out): each rank scores every world-size-th of the
        rows, then the ranks exchange them."""
        rows = torch.arange(tokens.input_ids.shape[0]) if rows is None else rows
        with_ref = reference and self.config.kl.coef > 0
        mine = rows[self.world.rank :: self.world.size]
        # Under ZeRO-3 forwards are collective: every rank makes as many as the rank with the most rows.
        most = math.ceil(len(rows) / self.world.size) if self.zero3 else len(mine)
        forwards = math.ceil(most / self.config.micro_batch_size)
        parts = self.world.all_gather_object(self._score_rows(tokens, mine, forwards, policy, with_ref))
        old = torch.zeros(tokens.input_ids.shape)
        ref = torch.zeros_like(old) if with_ref else None
        for rank, (part_old, part_ref) in enumerate(parts):
            theirs = rows[rank :: self.world.size]
            old[theirs] = part_old
            if ref is not None:
                ref[theirs] = part_ref
        return old, ref

    @torch.no_grad()
    def _score_rows(
        self, tokens: TokenBatch, rows: torch.Tensor, forwards: int, policy: bool, with_ref: bool
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """``rows``' log-probs in ``forwards`` forwards (under ZeRO-3 the forwards past this rank's own rows score
        row 0 of the batch, and their result is dropped)."""
        self.engine.eval()
        old = torch.zeros(len(rows), tokens.input_ids.shape[1])
        ref = torch.zeros_like(old) if with_ref else None
        size = self.config.micro_batch_size
        for start in range(0, forwards * size, size):
            chunk = rows[start : start + size]
            keep = len(chunk) > 0
            ids, attention, mask, width = self._rows(tokens, chunk if keep else torch.zeros(1, dtype=torch.long))
            with self._precision():
                if policy:
                    lp = self.engine(ids, attention, mask)[0]
                    if keep:
                        old[start : start + len(chunk), :width] = lp.cpu()
                if ref is not None:
                    if self.reference is None:  # LoRA: the base model is the reference
                        lp = self.engine(ids, attention, mask, base=True)[0]
                    else:
                        lp = score_tokens(self.reference, ids, attention, mask, False, self.temperature, self.top_p)[0]
                    if keep:
                        ref[start : start + len(chunk), :width] = lp.cpu()
        return old, ref

    def _precision(self) -> Any:
        return torch.autocast("cpu", dtype=torch.bfloat16, enabled=self.autocast)

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

    def update(self, tokens: TokenBatch, advantages: torch.Tensor, generator: torch.Generator) -> UpdateStats:
        """PPO epochs over the batch: ``advantages`` is [B, T] like ``tokens``; ``generator`` shuffles the rows (the
        same on every rank). Old log-probs are the first minibatch's own (with one epoch) and a scoring pass's for
        the other rows (see the module docstring)."""
        cfg, world = self.config, self.world
        num_rows = tokens.input_ids.shape[0]
        plan = [
            [m for m in torch.tensor_split(torch.randperm(num_rows, generator=generator), cfg.minibatches) if len(m)]
            for _ in range(cfg.ppo_epochs)
        ]  # a minibatch is empty only when there are fewer rows than minibatches (dynamic sampling dropped groups)
        fused = cfg.ppo_epochs == 1 and not cfg.score_every_row
        own = plan[0][0] if fused else torch.empty(0, dtype=torch.long)
        scored = torch.ones(num_rows, dtype=torch.bool).index_fill_(0, own, False).nonzero().flatten()
        clock = time.perf_counter()
        old = self.score(tokens, scored, reference=False)[0] if len(scored) else torch.zeros(tokens.input_ids.shape)
        ref = self.score(tokens, policy=False)[1]
        scoring_seconds = time.perf_counter() - clock

        self.engine.train()
        mode = cfg.loss_agg_mode
        order = prompt_order(tokens)
        sums = dict.fromkeys(
            ("loss", "clipped", "kl", "entropy", "action_entropy", "action_tokens", "drift", "gap", "tokens"), 0.0
        )
        grad_norms: list[float] = []
        steps_before = self.engine.global_steps
        last_lr = float(self.engine.get_lr()[0])
        for epoch, minibatches in enumerate(plan):
            for index, minibatch in enumerate(minibatches):
                units = float(loss_units(tokens.response_mask[minibatch], mode, tokens.segment_ids[minibatch]))
                mine = minibatch[world.rank :: world.size]
                # Rows with one prompt, then of like length, share a micro-batch (the gradient is a sum over
                # micro-batches: their order and makeup change only its rounding).
                mine = mine[torch.argsort(order[mine], stable=True)]
                count = math.ceil(math.ceil(len(minibatch) / world.size) / cfg.micro_batch_size)
                on_policy = epoch == 0 and index == 0 and len(own) > 0
                for i, micro in enumerate(torch.tensor_split(mine, count)):
                    weight = 1.0
                    if len(micro) == 0:  # every rank must run as many micro-batches (the gradient reduction)
                        micro, weight = minibatch[:1], 0.0
                    loss, stats = self._micro_loss(tokens, micro, advantages, old, ref, on_policy, first=epoch == 0)
                    boundary = i == count - 1
                    self.engine.set_gradient_accumulation_boundary(boundary)
                    self.engine.backward(loss * (weight * world.size / max(units, 1.0)))
                    if boundary:
                        last_lr = float(self.engine.get_lr()[0])  # the rate this optimizer step uses
                    if boundary and self.stage == 0:
                        # ZeRO-0 keeps whole gradients and records no norm: measure it before the step clips it.
                        grads = [p.grad for p in self.model.parameters() if p.grad is not None]
                        grad_norms.append(float(torch.nn.utils.get_total_norm(grads)))
                    self.engine.step()
                    for key, value in stats.items():
                        sums[key] += weight * value
                if self.stage > 0:
                    norm = self.engine.get_global_grad_norm()
                    grad_norms.append(float("nan") if norm is None else float(norm))
        totals = world.all_reduce_sums(sums)
        tokens_seen = max(totals["tokens"], 1.0)
        first_epoch_tokens = max(float(tokens.response_mask.sum()), 1.0)
        return UpdateStats(
            loss=totals["loss"] / tokens_seen,
            clip_fraction=totals["clipped"] / tokens_seen,
            kl=totals["kl"] / tokens_seen,
            entropy=totals["entropy"] / tokens_seen,
            action_entropy=totals["action_entropy"] / totals["action_tokens"] if totals["action_tokens"] else None,
            policy_drift=totals["drift"] / tokens_seen,
            logprob_gap=totals["gap"] / first_epoch_tokens,
            grad_norm=sum(grad_norms) / max(len(grad_norms), 1),
            lr=last_lr,
            optimizer_steps=self.engine.global_steps - steps_before,  # as DeepSpeed counts them
            scored_rows=len(scored),
            seconds_scoring=scoring_seconds,
        )

    def _micro_loss(
        self,
        tokens: TokenBatch,
        rows: torch.Tensor,
        advantages: torch.Tensor,
        old_logprobs: torch.Tensor,
        ref_logprobs: torch.Tensor | None,
        on_policy: bool,
        first: bool,
    ) -> tuple[torch.Tensor, dict[str, float]]:
        """The micro-batch's loss summed over its units (see the module docstring) and token-weighted stats.
        ``on_policy``: no weight has changed since the rollout, so this forward's log-probs are the old ones (they
        are written into ``old_logprobs`` for the record). ``first``: the rows' first visit (the log-prob gap is
        counted once per row)."""
        cfg = self.config
        ids, attention, mask, width = self._rows(tokens, rows)
        with self._precision():  # entropy: logged every iteration; its gradient is used only with entropy_coef > 0
            logp, entropy = self.engine(ids, attention, mask, with_entropy=True)
        device, dtype = logp.device, logp.dtype
        mask = mask.to(dtype)
        if on_policy:
            old_logprobs[rows, :width] = logp.detach().cpu() * mask.cpu()
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
        kl_sum = 0.0
        if ref_logprobs is not None:
            kl = kl_penalty(logp, ref_logprobs[rows, :width].to(device, dtype), cfg.kl.estimator)
            total = total + cfg.kl.coef * reduce_token_loss(kl, mask, mode, seg) * units
            kl_sum = float((kl.detach() * mask).sum())
        assert entropy is not None
        if cfg.entropy_coef > 0:
            total = total - cfg.entropy_coef * reduce_token_loss(entropy, mask, mode, seg) * units
        action = tokens.action_mask[rows, :width].to(device, dtype) * mask
        engine_old = tokens.old_logprobs[rows, :width].to(device, dtype)
        stats = {
            "loss": float((out.token_loss.detach() * mask).sum()),
            "clipped": float(out.clip_fraction) * n_tokens,
            "kl": kl_sum,
            "entropy": float((entropy.detach() * mask).sum()),
            "action_entropy": float((entropy.detach() * action).sum()),
            "action_tokens": float(action.sum()),
            "drift": float(((old - logp.detach()) * mask).sum()),
            "gap": float(((engine_old - old).abs() * mask).sum()) if first else 0.0,
            "tokens": n_tokens,
        }
        return total, stats
