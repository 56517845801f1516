"""HFEngine against HF transformers itself: log-probs equal a teacher-forced forward pass of the same weights, replies
are exactly the sampled tokens, cut where they end, reproducible; weight updates reach every parameter."""

from collections.abc import Sequence
from pathlib import Path

import pytest
import torch
from testkit.peers import require_embedded_model_packages

from pyagentrl.rollout.engine import Generation, SamplingConfig
from pyagentrl.rollout.hf_engine import HFEngine
from pyagentrl.rollout.models import tiny_model_path

# Largest |engine log-prob - forward log-prob| allowed. The two paths compute the same function in a different order
# (a KV-cached one-token step vs the whole sequence at once, padding masked vs absent), so they differ by rounding:
# - float64 weights: HF still hands float32 logits to the processors, so both sides round the same float64 logits to
#   float32: measured exactly 0. Any misalignment (wrong step, wrong position ids under left padding) would be O(1).
# - float32: measured max 2.2e-5 (mean 3e-6) on SmolLM2; on the tiny model, whose 0.3-std random weights make large
#   activations, max 5e-5 for these 20-token replies and up to 2.6e-4 for 64-token ones (mean 5e-6; the same at
#   batch 1, so not from padding).
# - bfloat16: the engine against its own bf16 weights' forward; activations round at different points: measured
#   max 0.07..0.27, mean 0.008..0.045 (tiny and SmolLM2).
FP64_TOL = 1e-5
FP32_TOL, FP32_MEAN_TOL = 5e-4, 2e-5
SMOLLM2_FP32_TOL = 1e-4
BF16_TOL, BF16_MEAN_TOL = 0.75, 0.1

GREEDY = SamplingConfig(temperature=0.0, max_new_tokens=20)
SAMPLINGS = [
    pytest.param(GREEDY, id="greedy"),
    pytest.param(SamplingConfig(temperature=1.0, max_new_tokens=20, seed=1), id="T=1"),
    pytest.param(SamplingConfig(temperature=0.7, top_p=0.8, max_new_tokens=20, seed=2), id="T=0.7,top_p=0.8"),
]
QUESTIONS = ["hi", "What is two plus two?", "Write a haiku about the sea, please.", "x", "Name three colours."]


@pytest.fixture(scope="module")
def tiny() -> Path:
    require_embedded_model_packages()
    return tiny_model_path()


@pytest.fixture(scope="module")
def engine(tiny: Path) -> HFEngine:
    """Shared by the tests that do not change weights; 2 prompts a batch, so 5 prompts take 3 chunks."""
    return HFEngine(tiny, max_batch_size=2)


def chat(engine: HFEngine, question: str) -> list[int]:
    ids = engine.tokenizer.apply_chat_template([{"role": "user", "content": question}], add_generation_prompt=True)
    return list(ids["input_ids"])


@pytest.fixture(scope="module")
def prompts(engine: HFEngine) -> list[list[int]]:
    out = [chat(engine, q) for q in QUESTIONS]
    assert len({len(p) for p in out}) > 1  # batches mix lengths: left padding is exercised
    return out


def hf_warped(logits: torch.Tensor, sampling: SamplingConfig | None) -> torch.Tensor:
    """The logits HF's own warpers sample from (temperature, then top-p): the independent reference."""
    if sampling is None or sampling.temperature == 0:
        return logits
    from transformers import TemperatureLogitsWarper, TopPLogitsWarper

    if sampling.temperature != 1.0:
        logits = TemperatureLogitsWarper(sampling.temperature)(None, logits)
    if sampling.top_p < 1.0:
        logits = TopPLogitsWarper(sampling.top_p)(None, logits)
    return logits


def forward_logprobs(
    model: torch.nn.Module, prompt: Sequence[int], reply: Sequence[int], sampling: SamplingConfig | None = None
) -> torch.Tensor:
    """log p(reply[j] | prompt, reply[:j]) from one unpadded forward pass of prompt + reply, under the distribution
    ``sampling`` draws from (HF's warpers; the raw one for None or greedy)."""
    ids = torch.tensor([[*prompt, *reply]], device=next(model.parameters()).device)
    with torch.no_grad():
        logits = model(ids).logits[0].float()
    logprobs = torch.log_softmax(hf_warped(logits[len(prompt) - 1 : -1], sampling), dim=-1)
    return logprobs.gather(1, torch.tensor(reply, device=ids.device)[:, None]).squeeze(1).cpu()


def logprob_errors(
    model: torch.nn.Module,
    prompts: Sequence[Sequence[int]],
    gens: Sequence[Generation],
    sampling: SamplingConfig | None = None,
) -> torch.Tensor:
    """|engine - forward| for every sampled token of every reply."""
    errors = []
    for prompt, gen in zip(prompts, gens, strict=True):
        assert len(gen.logprobs) == len(gen.token_ids) > 0
        errors.append((forward_logprobs(model, prompt, gen.token_ids, sampling) - torch.tensor(gen.logprobs)).abs())
    return torch.cat(errors)


def max_logprob_error(
    model: torch.nn.Module,
    prompts: Sequence[Sequence[int]],
    gens: Sequence[Generation],
    sampling: SamplingConfig | None = None,
) -> float:
    return logprob_errors(model, prompts, gens, sampling).max().item()


def perturb_every_parameter(model: torch.nn.Module, seed: int) -> None:
    """Change every parameter (the tied embedding/head once) by a seeded amount, as a training step would."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for _, p in sorted(model.named_parameters()):  # named_parameters lists the tied tensor once
            p.add_(0.05 * torch.randn(p.shape, generator=gen).to(p.dtype) * p.float().abs().mean().to(p.dtype))


# ---- log-probs -----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("sampling", SAMPLINGS)
def test_logprobs_match_forward_pass_fp32(engine: HFEngine, prompts: list[list[int]], sampling: SamplingConfig) -> None:
    gens = engine.generate(prompts, sampling)
    assert len(gens) == len(prompts)
    errors = logprob_errors(engine.model, prompts, gens, sampling)
    print(f"fp32 |logprob diff| max {errors.max():.3g} mean {errors.mean():.3g}")
    # The reference is the distribution HF's own warpers sample from (temperature, then top-p).
    assert errors.max() < FP32_TOL and errors.mean() < FP32_MEAN_TOL
    if sampling.temperature not in (0.0, 1.0):  # and not the raw one: the test can tell the two apart
        assert logprob_errors(engine.model, prompts, gens).max() > 100 * FP32_TOL


def test_logprobs_match_after_updating_every_parameter(tiny: Path, prompts: list[list[int]]) -> None:
    from transformers import AutoModelForCausalLM

    engine = HFEngine(tiny, max_batch_size=2)
    sampled = SamplingConfig(temperature=1.0, max_new_tokens=16, seed=5)
    before = engine.generate(prompts, sampled)
    original = {n: p.clone() for n, p in engine.model.named_parameters()}

    reference = AutoModelForCausalLM.from_pretrained(tiny).eval()
    perturb_every_parameter(reference, seed=0)
    state = reference.state_dict()
    assert {"lm_head.weight", "model.embed_tokens.weight"} <= state.keys()  # both names of the tied tensor sent
    engine.update_weights(state.items())

    changed = [n for n, p in engine.model.named_parameters() if not torch.equal(p, original[n])]
    assert sorted(changed) == sorted(original)  # every parameter, the tied embedding/head included
    assert torch.equal(engine.model.lm_head.weight, reference.lm_head.weight)
    after = engine.generate(prompts, sampled)
    assert [g.logprobs for g in after] != [g.logprobs for g in before]
    for sampling in (GREEDY, sampled):
        gens = engine.generate(prompts, sampling)
        error = max_logprob_error(reference, prompts, gens, sampling)  # loaded apart, perturbed the same way
        print(f"after update: fp32 max |logprob diff| {error:.3g}")
        assert error < FP32_TOL


def test_float64_logprobs_match_forward_pass_to_fp32_rounding(tiny: Path, prompts: list[list[int]]) -> None:
    """In float64 the rounding noise vanishes and what is left is exact agreement: the right token's log-prob at the
    right step and position, for left-padded rows too."""
    engine = HFEngine(tiny, dtype="float64", max_batch_size=3)
    for sampling in (GREEDY, SamplingConfig(temperature=0.8, top_p=0.9, max_new_tokens=20, seed=3)):
        error = max_logprob_error(engine.model, prompts, engine.generate(prompts, sampling), sampling)
        print(f"float64 max |logprob diff| {error:.3g}")
        assert error < FP64_TOL


def test_bf16_logprobs_match_own_bf16_forward(tiny: Path, prompts: list[list[int]]) -> None:
    engine = HFEngine(tiny, dtype="bfloat16")
    assert engine.model.dtype == torch.bfloat16
    for sampling in (GREEDY, SamplingConfig(temperature=1.0, max_new_tokens=20, seed=1)):
        errors = logprob_errors(engine.model, prompts, engine.generate(prompts, sampling), sampling)
        print(f"bf16 |logprob diff| max {errors.max():.3g} mean {errors.mean():.3g}")
        assert errors.max() < BF16_TOL and errors.mean() < BF16_MEAN_TOL


# ---- weights -------------------------------------------------------------------------------------------------------


def test_update_weights_tied_names_and_errors(tiny: Path) -> None:
    engine = HFEngine(tiny)
    embedding = engine.model.model.embed_tokens.weight
    for name in ("lm_head.weight", "model.embed_tokens.weight"):
        new = torch.randn(embedding.shape)
        engine.update_weights([(name, new)])
        assert torch.equal(engine.model.lm_head.weight, new)
        assert torch.equal(engine.model.model.embed_tokens.weight, new)  # still one tensor

    with pytest.raises(ValueError, match=r"'model.layers.7.mlp.up_proj.weight' is not a parameter"):
        engine.update_weights([("model.layers.7.mlp.up_proj.weight", torch.zeros(1))])
    norm = engine.model.model.norm.weight
    before = norm.clone()
    with pytest.raises(ValueError, match=rf"'model.norm.weight' has shape \(1,\), the model's is \({len(norm)},\)"):
        engine.update_weights([("model.norm.weight", torch.full((1,), 2.0))])  # copy_ would have broadcast it
    assert torch.equal(norm, before)


# ---- what a reply is -----------------------------------------------------------------------------------------------


def test_token_ids_are_exactly_what_hf_sampled(engine: HFEngine, prompts: list[list[int]]) -> None:
    """The same seed through plain ``model.generate`` (one batch, top_k off) samples the same tokens; the engine's
    reply is that sequence cut after its end, and its text is the decoding of those ids."""
    one_batch = HFEngine(engine.path, max_batch_size=len(prompts))
    sampling = SamplingConfig(temperature=0.9, top_p=0.95, max_new_tokens=12, seed=11)
    gens = one_batch.generate(prompts, sampling)

    width = max(map(len, prompts))
    ids = torch.tensor([[one_batch.pad_token_id] * (width - len(p)) + p for p in prompts])
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
    torch.manual_seed(11)
    with torch.no_grad():
        out = one_batch.model.generate(
            input_ids=ids, attention_mask=mask, do_sample=True, temperature=0.9, top_p=0.95, top_k=0,
            max_new_tokens=12, pad_token_id=one_batch.pad_token_id,
        )  # fmt: skip
    for gen, row in zip(gens, out[:, width:].tolist(), strict=True):
        assert gen.token_ids == row[: len(gen.token_ids)]
        assert all(isinstance(t, int) for t in gen.token_ids)
        assert gen.text == engine.tokenizer.decode(gen.token_ids, skip_special_tokens=True)
        if gen.finish_reason == "length":
            assert len(gen.token_ids) == 12
        else:
            assert gen.token_ids[-1] in one_batch.eos_token_ids


def test_greedy_follows_the_argmax_and_is_reproducible(engine: HFEngine, prompts: list[list[int]]) -> None:
    gens = engine.generate(prompts, GREEDY)
    assert engine.generate(prompts, GREEDY) == gens
    assert HFEngine(engine.path, max_batch_size=2).generate(prompts, GREEDY) == gens
    for prompt, gen in zip(prompts, gens, strict=True):
        ids = torch.tensor([[*prompt, *gen.token_ids]])
        with torch.no_grad():
            logits = engine.model(ids).logits[0, len(prompt) - 1 : -1]
        chosen = logits.gather(1, torch.tensor(gen.token_ids)[:, None]).squeeze(1)
        assert (logits.max(dim=1).values - chosen).max() < 1e-4  # the argmax, up to float ties


def test_seeded_sampling_is_reproducible_and_leaves_global_rng_alone(
    engine: HFEngine, prompts: list[list[int]]
) -> None:
    seeded = SamplingConfig(temperature=1.0, max_new_tokens=16, seed=123)
    state = torch.get_rng_state()
    gens = engine.generate(prompts, seeded)
    assert torch.equal(torch.get_rng_state(), state)
    assert engine.generate(prompts, seeded) == gens
    assert engine.generate(prompts, SamplingConfig(temperature=1.0, max_new_tokens=16, seed=124)) != gens

    # Unseeded: each engine continues its own stream, started from its construction seed.
    unseeded = SamplingConfig(temperature=1.0, max_new_tokens=16)
    a, b = HFEngine(engine.path, seed=7), HFEngine(engine.path, seed=7)
    first = a.generate(prompts, unseeded)
    assert a.generate(prompts, unseeded) != first  # the stream moved on
    assert b.generate(prompts, unseeded) == first
    assert torch.equal(torch.get_rng_state(), state)


def test_stop_string_ends_the_reply(engine: HFEngine, prompts: list[list[int]]) -> None:
    sampling = SamplingConfig(temperature=0.0, max_new_tokens=16)
    free = engine.generate(prompts, sampling)
    # A stop string that the first reply completes with its 4th token, picked from that token's own text.
    piece = engine.tokenizer.decode(free[0].token_ids[3:4]).strip()
    assert len(piece) >= 2, f"pick another token: {piece!r}"
    stop = piece[:2]
    gens = engine.generate(prompts, SamplingConfig(temperature=0.0, max_new_tokens=16, stop=(stop,)))
    for full, gen in zip(free, gens, strict=True):
        prefix_texts = [engine.tokenizer.decode(full.token_ids[: j + 1]) for j in range(len(full.token_ids))]
        ends = [j for j, text in enumerate(prefix_texts) if stop in text]
        if ends:  # cut right after the token that completes the stop string, which the reply keeps
            assert gen.finish_reason == "stop"
            assert gen.token_ids == full.token_ids[: ends[0] + 1]
            assert gen.logprobs == full.logprobs[: ends[0] + 1]  # the same computation, only cut
            assert stop in gen.text and stop not in engine.tokenizer.decode(gen.token_ids[:-1])
        else:  # rows of the batch that never meet it run on to max_new_tokens, unaffected
            assert gen == full
    assert gens[0].finish_reason == "stop" and len(gens[0].token_ids) <= 4


def test_eos_ends_the_reply(tiny: Path, prompts: list[list[int]]) -> None:
    engine = HFEngine(tiny, max_batch_size=8)
    free = engine.generate(prompts, GREEDY)
    # Declare the token the first reply produces third an EOS: rows cut after it, other rows unaffected.
    engine.eos_token_ids = [free[0].token_ids[2]]
    gens = engine.generate(prompts, GREEDY)
    for full, gen in zip(free, gens, strict=True):
        if engine.eos_token_ids[0] in full.token_ids:
            end = full.token_ids.index(engine.eos_token_ids[0]) + 1
            assert (gen.finish_reason, gen.token_ids) == ("stop", full.token_ids[:end])
        else:
            assert gen == full
    assert len(gens[0].token_ids) <= 3

    # The real EOS, which is also SmolLM2's padding token: make every position predict it (a dominant feature in
    # hidden dimension 0, positive for all tokens, larger for EOS in the tied head).
    engine.eos_token_ids = [engine.tokenizer.eos_token_id]
    assert engine.tokenizer.eos_token_id == engine.pad_token_id
    weight = engine.model.model.embed_tokens.weight.clone()
    weight[:, 0] = 1000.0  # dominates the pre-norm residual stream, so the final norm's dimension 0 is positive
    weight[engine.tokenizer.eos_token_id, 0] = 1200.0
    engine.update_weights([("lm_head.weight", weight)])
    gens = engine.generate(prompts, GREEDY)
    for prompt, gen in zip(prompts, gens, strict=True):
        assert (gen.token_ids, gen.text, gen.finish_reason) == ([engine.tokenizer.eos_token_id], "", "stop")
        assert gen.logprobs == pytest.approx(forward_logprobs(engine.model, prompt, gen.token_ids).tolist(), abs=1e-5)


def test_prompt_errors_name_the_prompt(engine: HFEngine, prompts: list[list[int]]) -> None:
    assert engine.max_context == 2048
    too_long = [1] * (engine.max_context - 10)
    with pytest.raises(ValueError, match=r"prompt 1 has 2038 tokens; with max_new_tokens=20 it exceeds"):
        engine.generate([prompts[0], too_long], GREEDY)
    with pytest.raises(ValueError, match="prompt 2 is empty"):
        engine.generate([prompts[0], prompts[1], []], GREEDY)
    with pytest.raises(ValueError, match=r"prompt 0 has token ids outside the vocabulary \[0, 49152\)"):
        engine.generate([[1, 49152]], GREEDY)
    assert engine.generate([], GREEDY) == []


def test_constructor_errors_name_the_setting(tiny: Path, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="dtype='fp8'"):
        HFEngine(tiny, dtype="fp8")
    with pytest.raises(FileNotFoundError, match="model="):
        HFEngine(tmp_path / "missing")


# ---- the real model ------------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_embedded_model_answers_a_chat_prompt() -> None:
    """SmolLM2-135M-Instruct (converted once, ~20 s; then a load takes ~1 s): a sensible answer, ended by EOS,
    whose log-probs match the forward pass."""
    require_embedded_model_packages()
    engine = HFEngine("embedded", max_batch_size=2)
    prompts = [chat(engine, "What is the capital of France?"), chat(engine, "Say hello.")]
    gens = engine.generate(prompts, SamplingConfig(temperature=0.0, max_new_tokens=24))
    assert all(g.text.strip() for g in gens)
    assert "Paris" in gens[0].text
    error = max_logprob_error(engine.model, prompts, gens)
    print(f"SmolLM2 fp32 max |logprob diff| {error:.3g}; replies {[g.text for g in gens]}")
    assert error < SMOLLM2_FP32_TOL
