"""The actor's log-probs against a plain HF forward, and LoRA's merged weights against peft's own merge."""

from __future__ import annotations

import pytest
import torch
from testkit.peers import import_peer

from pyagentrl.rollout.models import tiny_model_path
from pyagentrl.training.actor import hf_weights, load_policy, token_logprobs
from pyagentrl.training.config import LoraSection


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
    model = load_policy(tiny_model_path(), LoraSection())
    ids, attention, mask = _batch()
    logp, _ = token_logprobs(model, ids, attention, mask)
    logp.sum().backward()
    assert model.model.layers[0].self_attn.q_proj.weight.grad.abs().sum() > 0


def test_lora_weights_are_peft_merged_weights():
    import_peer("peft")
    model = load_policy(tiny_model_path(), LoraSection(rank=4, alpha=8))
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


# ---- the distribution the engine samples from, the head's precision, models the learner cannot follow --------------


def _hf_warped_logprobs(logits: torch.Tensor, temperature: float, top_p: float) -> torch.Tensor:
    """log-probs under HF's own warpers (temperature, then top-p): the independent reference."""
    from transformers import TemperatureLogitsWarper, TopPLogitsWarper

    flat = TemperatureLogitsWarper(temperature)(None, logits.reshape(-1, logits.shape[-1]))
    if top_p < 1:
        flat = TopPLogitsWarper(top_p)(None, flat)
    return torch.log_softmax(flat, -1).reshape(logits.shape)


def _sampled_batch(model) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``_batch()`` with each masked token replaced by the model's most likely next token (always inside any
    nucleus, as a sampled token is)."""
    ids, attention, mask = _batch()
    with torch.no_grad():
        for j in range(1, ids.shape[1]):
            chosen = model(input_ids=ids[:, :j]).logits[:, -1].argmax(-1)
            ids[:, j] = torch.where(mask[:, j] != 0, chosen, ids[:, j])
    return ids, attention, mask


def test_token_logprobs_follow_the_sampling_temperature_and_top_p():
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_model_path(), dtype=torch.float32)
    ids, attention, mask = _sampled_batch(model)
    with torch.no_grad():
        full = model(input_ids=ids, attention_mask=attention).logits.float()
    on = mask != 0
    for temperature, top_p in ((0.5, 1.0), (0.7, 0.8), (1.3, 0.5)):
        with torch.no_grad():
            logp, entropy = token_logprobs(model, ids, attention, mask, True, temperature, top_p)
        reference = _hf_warped_logprobs(full, temperature, top_p)
        expected = torch.zeros(3, 12)
        expected[:, 1:] = reference[:, :-1].gather(-1, ids[:, 1:, None])[..., 0]
        assert torch.isfinite(expected[on]).all()
        torch.testing.assert_close(logp[on], expected[on], rtol=0, atol=1e-5)
        probs = reference[:, :-1].exp()
        expected_entropy = -(probs * reference[:, :-1].nan_to_num(neginf=0.0)).sum(-1)
        torch.testing.assert_close(entropy[:, 1:][on[:, 1:]], expected_entropy[on[:, 1:]], rtol=0, atol=1e-4)
        assert torch.isfinite(entropy).all()
    with torch.no_grad():  # and the raw distribution is not what T = 0.5 gives
        raw, _ = token_logprobs(model, ids, attention, mask)
        half, _ = token_logprobs(model, ids, attention, mask, temperature=0.5)
    assert (raw[on] - half[on]).abs().max() > 0.1


def test_the_lm_head_runs_in_float32_under_bf16_autocast():
    """Under CPU autocast the decoder computes in bf16, but the head (which sees only sampled positions) runs in
    float32: the log-probs equal a float32 head on the same hidden states, not a bf16 one (0.01-0.1 nats away)."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_model_path(), dtype=torch.float32)
    ids, attention, mask = _batch()
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        logp, _ = token_logprobs(model, ids, attention, mask)
        hidden = model.model(input_ids=ids, attention_mask=attention).last_hidden_state
        bf16_head = torch.log_softmax(model.lm_head(hidden).float(), -1)
    fp32_head = torch.log_softmax(hidden.float() @ model.lm_head.weight.float().T, -1)
    on = mask != 0
    expected = fp32_head[:, :-1].gather(-1, ids[:, 1:, None])[..., 0]
    torch.testing.assert_close(logp[:, 1:][on[:, 1:]], expected[on[:, 1:]], rtol=0, atol=2e-5)
    rounded = bf16_head[:, :-1].gather(-1, ids[:, 1:, None])[..., 0]
    assert (rounded[on[:, 1:]] - expected[on[:, 1:]]).abs().max() > 1e-3  # the test can tell the two apart


def _tiny_config(kind: str, **extra: object):
    from transformers import AutoConfig

    shape = dict(
        vocab_size=1000, hidden_size=64, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
        num_key_value_heads=1, head_dim=32, max_position_embeddings=64,
    )  # fmt: skip
    return AutoConfig.for_model(kind, **shape, **extra)


def test_models_that_change_their_logits_after_the_head_are_refused():
    from transformers import AutoModelForCausalLM

    from pyagentrl.training.actor import UnsupportedModel, check_logit_path

    check_logit_path(AutoModelForCausalLM.from_pretrained(tiny_model_path()))  # SmolLM2's shape: supported
    gemma2 = AutoModelForCausalLM.from_config(_tiny_config("gemma2", final_logit_softcapping=30.0))
    with pytest.raises(UnsupportedModel, match="final_logit_softcapping"):
        check_logit_path(gemma2)
    check_logit_path(AutoModelForCausalLM.from_config(_tiny_config("gemma2", final_logit_softcapping=None)))

    class Scaled(type(AutoModelForCausalLM.from_config(_tiny_config("llama")))):  # no config key says so
        def forward(self, *args, **kwargs):
            out = super().forward(*args, **kwargs)
            out.logits = out.logits * 2
            return out

    with pytest.raises(UnsupportedModel, match="max \\|difference\\|"):
        check_logit_path(Scaled(_tiny_config("llama")))


def test_a_shared_prefix_decoded_once_gives_the_same_logprobs_and_gradients():
    """The rows of a task group share their first prompt: decoding it once and continuing every row from its keys
    and values must give what a forward of every row whole gives, gradients included (right-padded rows too)."""
    from pyagentrl.training.actor import shared_prefix_length

    ids, attention, mask = _batch()
    ids[:, :7] = ids[0, :7]  # seven tokens in common
    # float64: the two paths sum in different orders, and float32's rounding of that (up to ~4e-5 relative, with
    # the size depending on the thread count) would hide a real error behind a loose tolerance.
    model = load_policy(tiny_model_path(), LoraSection()).double()
    assert shared_prefix_length(ids, attention) == 7
    results = []
    for prefix in (0, 7):
        model.zero_grad(set_to_none=True)
        logp, entropy = token_logprobs(model, ids, attention, mask, True, shared_prefix=prefix)
        (logp.sum() + entropy.sum()).backward()
        grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
        results.append((logp.detach(), entropy.detach(), grads))
    (logp_a, ent_a, grad_a), (logp_b, ent_b, grad_b) = results
    torch.testing.assert_close(logp_b, logp_a, rtol=0, atol=1e-5)
    torch.testing.assert_close(ent_b, ent_a, rtol=0, atol=1e-4)
    assert grad_a.keys() == grad_b.keys()
    for name in grad_a:  # measured: <= 2e-7 relative (the log-softmax runs in float32); a wrong prefix gives ~0.5
        error = float((grad_b[name] - grad_a[name]).norm() / grad_a[name].norm())
        assert error < 1e-5, (name, error)
    attention[1, 3] = 0  # a padded token inside the common part: nothing is shared past it
    assert shared_prefix_length(ids, attention) == 3
    assert shared_prefix_length(ids[:1], attention[:1]) == int(attention[0].sum()) - 1
