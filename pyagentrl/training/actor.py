"""The policy being trained: an HF causal LM (full fine-tuning or a LoRA adapter), its token log-probs, and its
weights in the HF names the rollout engines take.

Log-probs are computed only where the batch has sampled tokens: the decoder's hidden states at the positions before
them go through the LM head, so the [tokens, vocabulary] logits are never built for the prompt (on a 49k-token
vocabulary that is most of the memory of a forward pass).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

from pyagentrl.training.config import LoraConfig


def load_policy(path: Path, lora: LoraConfig, gradient_checkpointing: bool = False) -> Any:
    """The model at ``path`` in float32 (DeepSpeed casts it when bf16 is on), trainable as ``lora`` says."""
    from transformers import AutoModelForCausalLM

    model: Any = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
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


def load_reference(path: Path) -> Any:
    """A frozen copy of the initial policy, for the KL term (LoRA uses the policy with its adapter disabled)."""
    from transformers import AutoModelForCausalLM

    model: Any = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
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
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """log π(x_j | x_<j) at each masked position j, as a [B, T] tensor (0 elsewhere), and, if asked, the entropy
    of the distribution at those positions (also [B, T]). Differentiable when gradients are enabled."""
    lm = _causal_lm(model)
    hidden = lm.get_decoder()(input_ids=input_ids, attention_mask=attention_mask, use_cache=False).last_hidden_state
    targets = response_mask[:, 1:] != 0  # position j is predicted by the hidden state at j - 1
    logits = lm.get_output_embeddings()(hidden[:, :-1][targets]).float()
    log_probs = torch.log_softmax(logits, dim=-1)
    picked = log_probs.gather(1, input_ids[:, 1:][targets].unsqueeze(1)).squeeze(1)
    logp = _scatter(picked, targets)
    if not with_entropy:
        return logp, None
    return logp, _scatter(-(log_probs.exp() * log_probs).sum(-1), targets)


def _scatter(values: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """[B, T]: ``values`` at the masked positions 1..T-1 (``targets`` is the mask shifted by one), 0 elsewhere."""
    grid = torch.zeros(targets.shape, dtype=values.dtype, device=values.device).masked_scatter(targets, values)
    return torch.cat([grid.new_zeros(grid.shape[0], 1), grid], dim=1)


def hf_weights(model: Any) -> Iterator[tuple[str, torch.Tensor]]:
    """The policy's weights under the base model's HF names, LoRA deltas merged (out of place: the adapter and the
    base weights are left untouched, so no drift builds up from merging and unmerging)."""
    if not is_lora(model):
        for name, param in model.named_parameters():
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
            if leaf == "weight":
                delta = sum(module.get_delta_weight(a) for a in module.active_adapters)
                yield hf_name, (param.detach() + delta.detach()).to(param.dtype)
            else:
                yield hf_name, param.detach()
        else:
            yield name.replace(".base_layer.", "."), param.detach()


def save_pretrained(model: Any, tokenizer: Any, out: Path) -> None:
    """The policy as an HF directory: full weights, or the LoRA adapter (peft's format) for full or LoRA runs."""
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
