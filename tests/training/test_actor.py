"""The actor's log-probs against a plain HF forward, and LoRA's merged weights against peft's own merge."""

from __future__ import annotations

import torch
from testkit.peers import import_peer

from pyagentrl.rollout.models import tiny_model_path
from pyagentrl.training.actor import hf_weights, load_policy, token_logprobs
from pyagentrl.training.config import LoraConfig


def _batch() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, 1000, (3, 12), generator=g)
    attention = torch.ones_like(ids)
    attention[1, 9:] = 0  # right padding
    mask = torch.zeros(3, 12)
    mask[0, 6:] = 1
    mask[1, 5:9] = 1
    mask[2, [3, 4, 10]] = 1  # several actions in one row
    return ids, attention, mask


def test_token_logprobs_match_a_full_forward():
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_model_path(), dtype=torch.float32)
    ids, attention, mask = _batch()
    with torch.no_grad():
        logp, entropy = token_logprobs(model, ids, attention, mask, with_entropy=True)
        full = torch.log_softmax(model(input_ids=ids, attention_mask=attention).logits.float(), -1)
    expected = torch.zeros(3, 12)
    expected[:, 1:] = full[:, :-1].gather(-1, ids[:, 1:, None])[..., 0]
    expected_entropy = torch.zeros(3, 12)
    expected_entropy[:, 1:] = -(full[:, :-1].exp() * full[:, :-1]).sum(-1)
    on = mask != 0
    torch.testing.assert_close(logp[on], expected[on], rtol=0, atol=1e-5)
    torch.testing.assert_close(entropy[on], expected_entropy[on], rtol=0, atol=1e-4)
    assert torch.all(logp[~on] == 0) and torch.all(entropy[~on] == 0)


def test_token_logprobs_carry_gradients_to_the_model():
    model = load_policy(tiny_model_path(), LoraConfig())
    ids, attention, mask = _batch()
    logp, _ = token_logprobs(model, ids, attention, mask)
    logp.sum().backward()
    assert model.model.layers[0].self_attn.q_proj.weight.grad.abs().sum() > 0


def test_lora_weights_are_peft_merged_weights():
    import_peer("peft")
    model = load_policy(tiny_model_path(), LoraConfig(rank=4, alpha=8))
    with torch.no_grad():  # a non-zero adapter (peft starts B at zero)
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(std=0.1)
    ours = dict(hf_weights(model))
    merged = model.merge_and_unload()
    theirs = dict(merged.named_parameters())
    assert ours.keys() == theirs.keys()
    for name, weight in theirs.items():
        torch.testing.assert_close(ours[name], weight.detach(), rtol=0, atol=1e-6, msg=name)
