"""The policy being trained: an HF causal LM (full fine-tuning or a LoRA adapter), its token log-probs, and its
weights in the HF names the rollout engines take.

Log-probs are computed only where the batch has sampled tokens: the decoder's hidden states at the positions before
them go through the LM head, so the [tokens, vocabulary] logits are never built for the prompt (on a 49k-token
vocabulary that is most of the memory of a forward pass). The head runs in float32 whatever the autocast or weight
dtype (it sees only the sampled positions, so this is cheap, and bf16 logits would put up to ~0.06 nats of noise
into every ratio), and the logits are warped as the engine sampled them (temperature, top-p:
:func:`pyagentrl.rollout.engine.warp_logits`). Calling the decoder and the head directly skips whatever a model's
own ``forward`` does to its logits after the head (Gemma's soft-capping, Cohere's and Granite's scaling):
:func:`check_logit_path` refuses such a model before training.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import Any

import torch

from pyagentrl.rollout.engine import log_softmax_and_entropy, warp_logits
from pyagentrl.training.config import LoraSection


class UnsupportedModel(ValueError):
    """A model the learner cannot compute log-probs for as the rollout engine samples them."""


def load_policy(
    path: Path, lora: LoraSection, gradient_checkpointing: bool = False, trust_remote_code: bool = False
) -> Any:
    """The model at ``path`` in float32 (DeepSpeed casts it when bf16 is on), trainable as ``lora`` says."""
    from transformers import AutoModelForCausalLM

    model: Any = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32, trust_remote_code=trust_remote_code)
    if gradient_checkpointing:
        model.gradient_checkpointing_enable()
        model.config.use_cache = False
    if lora.rank > 0:
        try:
            from peft import LoraConfig as PeftLoraConfig
            from peft import get_peft_model
        except ImportError as exc:
            raise ImportError(f"actor.lora.rank > 0 needs peft: pip install 'pyagentrl[train]' ({exc})") from exc
        model = get_peft_model(
            model,
            PeftLoraConfig(
                r=lora.rank,
                lora_alpha=lora.alpha,  # type: ignore[arg-type]  # peft takes any number
                lora_dropout=lora.dropout,
                target_modules=list(lora.target_modules),
                task_type="CAUSAL_LM",
            ),
        )
    return model


def load_reference(path: Path, dtype: torch.dtype = torch.float32, trust_remote_code: bool = False) -> Any:
    """A frozen copy of the initial policy, for the KL term (LoRA uses the policy with its adapter disabled), in
    ``dtype``: the policy's compute dtype, so that the KL is exactly 0 before the first update."""
    from transformers import AutoModelForCausalLM

    model: Any = AutoModelForCausalLM.from_pretrained(path, dtype=dtype, trust_remote_code=trust_remote_code)
    model.eval()
    model.requires_grad_(False)
    return model


def is_lora(model: Any) -> bool:
    return hasattr(model, "peft_config")


def _causal_lm(model: Any) -> Any:
    """The transformers model inside a peft wrapper (with its LoRA layers in place), or the model itself."""
    return model.get_base_model() if is_lora(model) else model


def token_logprobs(
    model: Any,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    response_mask: torch.Tensor,
    with_entropy: bool = False,
    temperature: float = 1.0,
    top_p: float = 1.0,
    shared_prefix: int = 0,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """log π_T(x_j | x_<j) at each masked position j, as a [B, T] tensor (0 elsewhere), where π_T is the distribution
    the engine sampled from (logits / ``temperature``, cut to the ``top_p`` nucleus); and, if asked, the entropy of
    that distribution at those positions (also [B, T]). Differentiable when gradients are enabled.

    ``shared_prefix``: the number of leading tokens every row has in common (unpadded; :func:`shared_prefix_length`):
    they go through the decoder once and the rows continue from their keys and values (the episodes of a task group
    share their first prompt), with the same result and gradients as a forward of every row whole."""
    lm = _causal_lm(model)
    hidden = _decode(lm.get_decoder(), input_ids, attention_mask, shared_prefix)
    targets = response_mask[:, 1:] != 0  # position j is predicted by the hidden state at j - 1
    logits = warp_logits(_head_fp32(lm, hidden[:, :-1][targets]), temperature, top_p)
    log_probs, entropy = log_softmax_and_entropy(logits)
    picked = log_probs.gather(1, input_ids[:, 1:][targets].unsqueeze(1)).squeeze(1)
    logp = _scatter(picked, targets)
    return logp, (_scatter(entropy, targets) if with_entropy else None)


def shared_prefix_length(input_ids: torch.Tensor, attention_mask: torch.Tensor) -> int:
    """The number of leading tokens that every row of the batch has, equal and unpadded (at most each row's length
    less one, so every row keeps a token of its own)."""
    same = (input_ids == input_ids[:1]).all(0) & (attention_mask != 0).all(0)
    common = int(same.long().cumprod(0).sum())
    return max(0, min(common, int(attention_mask.sum(1).min()) - 1))


def _decode(decoder: Any, input_ids: torch.Tensor, attention_mask: torch.Tensor, shared_prefix: int) -> torch.Tensor:
    """[B, T, H] last hidden states; with a shared prefix of P tokens, the prefix is decoded once (its keys and values
    repeated for every row, differentiably) and only the rows' own tokens after it are decoded per row."""
    rows = input_ids.shape[0]
    # Gradient checkpointing turns the decoder's key-value cache off in training, and the prefix's keys are that cache.
    checkpointing = decoder.training and getattr(decoder, "gradient_checkpointing", False)
    if shared_prefix < 1 or rows < 2 or checkpointing:
        return decoder(input_ids=input_ids, attention_mask=attention_mask, use_cache=False).last_hidden_state
    p = shared_prefix
    head = decoder(input_ids=input_ids[:1, :p], attention_mask=attention_mask[:1, :p], use_cache=True)
    cache = head.past_key_values
    cache.batch_repeat_interleave(rows)
    tail = decoder(
        input_ids=input_ids[:, p:], attention_mask=attention_mask, past_key_values=cache, use_cache=True
    ).last_hidden_state
    return torch.cat([head.last_hidden_state.expand(rows, -1, -1), tail], dim=1)


def _head_fp32(lm: Any, hidden: torch.Tensor) -> torch.Tensor:
    """The LM head in float32, outside any autocast region (gradients still reach a bf16 weight through the cast)."""
    head = lm.get_output_embeddings()
    with torch.autocast(device_type=hidden.device.type, enabled=False):
        bias = None if head.bias is None else head.bias.float()
        return torch.nn.functional.linear(hidden.float(), head.weight.float(), bias)


#: Config keys of transformers models that change the logits after the LM head in ``forward``.
LOGIT_POSTPROCESSING = ("final_logit_softcapping", "logit_scale", "logits_scaling")


def check_logit_path(model: Any) -> None:
    """Raises :class:`UnsupportedModel` when the decoder + head path of :func:`token_logprobs` would not give the
    model's own logits: its config names a post-processing step (Gemma-2's final soft-capping, Cohere's and
    Granite's scaling), or a probe of a few tokens differs from ``forward``'s logits by more than rounding."""
    lm = _causal_lm(model)
    settings = {key: getattr(lm.config, key) for key in LOGIT_POSTPROCESSING if getattr(lm.config, key, None)}
    settings = {key: value for key, value in settings.items() if value != 1}
    gap = 0.0
    if not settings:
        vocab = int(lm.get_output_embeddings().weight.shape[0])
        ids = torch.arange(1, 9, device=lm.device).remainder(vocab).unsqueeze(0)
        with torch.no_grad(), torch.autocast(device_type=lm.device.type, enabled=False):
            own = lm(input_ids=ids, use_cache=False).logits.float()[0]
            ours = _head_fp32(lm, lm.get_decoder()(input_ids=ids, use_cache=False).last_hidden_state[0])
        gap = float((own - ours).abs().max())
        # Rounding of the logits themselves when the head runs in a 16-bit dtype in `forward`.
        relative = 1e-4 if lm.get_output_embeddings().weight.dtype == torch.float32 else 2e-2
        if gap <= relative * max(1.0, float(own.abs().max())):
            return
    raise UnsupportedModel(
        f"{type(lm).__name__} changes its logits after the LM head ({settings or f'max |difference| {gap:.3g}'}): "
        "the learner's log-probs would not be those of the policy the engine samples. Models with logit "
        "soft-capping or scaling are not supported by the learner yet."
    )


def _scatter(values: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """[B, T]: ``values`` at the masked positions 1..T-1 (``targets`` is the mask shifted by one), 0 elsewhere."""
    grid = torch.zeros(targets.shape, dtype=values.dtype, device=values.device).masked_scatter(targets, values)
    return torch.cat([grid.new_zeros(grid.shape[0], 1), grid], dim=1)


def hf_weights(
    model: Any, whole: Callable[[list[Any]], AbstractContextManager[Any]] | None = None
) -> Iterator[tuple[str, torch.Tensor]]:
    """The policy's weights under the base model's HF names, LoRA deltas merged (out of place: the adapter and the
    base weights are left untouched, so no drift builds up from merging and unmerging).

    ``whole``: for partitioned weights (ZeRO-3), a context in which the given parameters are whole; each weight is
    yielded inside it (the weight and, for a LoRA layer, its adapter), so a consumer copies it before the next."""
    whole = whole or (lambda params: nullcontext())
    if not is_lora(model):
        for name, param in model.named_parameters():
            with whole([param]):
                yield name, param.detach()
        return
    lm = _causal_lm(model)
    lora_modules = {name: m for name, m in lm.named_modules() if hasattr(m, "get_delta_weight") and m.merged is False}
    for name, param in lm.named_parameters():
        if "lora_" in name:
            continue
        owner, _, leaf = name.rpartition(".")
        if owner.endswith(".base_layer") and owner[: -len(".base_layer")] in lora_modules:
            module = lora_modules[owner[: -len(".base_layer")]]
            hf_name = f"{owner[: -len('.base_layer')]}.{leaf}"
            with whole(list(module.parameters())):
                if leaf == "weight":
                    delta = sum(module.get_delta_weight(a) for a in module.active_adapters)
                    yield hf_name, (param.detach() + delta.detach()).to(param.dtype)
                else:
                    yield hf_name, param.detach()
        else:
            with whole([param]):
                yield name.replace(".base_layer.", "."), param.detach()


def save_pretrained(model: Any, tokenizer: Any, out: Path, state_dict: dict[str, torch.Tensor] | None = None) -> None:
    """The policy as an HF directory: full weights, or the LoRA adapter (peft's format) for full or LoRA runs.
    ``state_dict``: the model's weights where its own are partitioned (ZeRO-3), under its ``state_dict`` names."""
    model.save_pretrained(out, state_dict=state_dict)
    tokenizer.save_pretrained(out)
