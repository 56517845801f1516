"""The reference rollout engine: HF transformers' ``generate`` (batched, left-padded, KV cache) on one device.

Slow next to vLLM/SGLang but exact and dependency-light: it runs on CPU, serves the tests, and is the yardstick the
faster engines' log-probs are compared with.

The sampling distribution is made by a logits processor of ours, not by HF's warpers: it divides each step's float32
logits by the temperature and cuts them to the top-p nucleus (:func:`warp_logits`, the same function the learner
uses), records the log-prob of the token drawn from them, and HF then samples from exactly those logits with its own
warpers off. It keeps only each sampled token's log-prob instead of the (steps x batch x vocab) logits, which would
take gigabytes for long replies. Where each reply ends is recorded by the stopping criterion that ends it, so a reply is
cut exactly after its EOS or stop-string-completing token, whatever the padding token is (SmolLM2 pads with EOS).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import torch

from pyagentrl.rollout.engine import Generation, RolloutEngine, SamplingConfig, warp_logits
from pyagentrl.rollout.models import resolve_model

# float64: for exactness checks only (HF still hands the logits to the processors in float32).
_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16, "float64": torch.float64}


class _SamplingLogprobs:
    """A logits processor that warps each step's logits for sampling (:func:`warp_logits`) and records the log-prob
    of the sampled token under them (greedy decoding: under the raw logits).

    Called at step t with the sequences so far and step t's logits, it learns step t-1's token from the sequences'
    last column; the last step's token is supplied by `finish`.
    """

    def __init__(self, temperature: float, top_p: float) -> None:
        self.temperature, self.top_p = temperature, top_p
        self.steps: list[torch.Tensor] = []  # (batch,) float32 per step
        self._pending: torch.Tensor | None = None  # log_softmax of the step whose token is not known yet

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        if self._pending is not None:
            self.steps.append(self._pending.gather(1, input_ids[:, -1:]).squeeze(1))
        warped = warp_logits(scores, self.temperature, self.top_p)
        self._pending = torch.log_softmax(warped, dim=-1)
        return warped

    def finish(self, generated: torch.Tensor) -> torch.Tensor:
        """(batch, steps) log-probs of `generated`, the (batch, steps) sampled tokens."""
        if self._pending is not None and generated.shape[1] > len(self.steps):
            self.steps.append(self._pending.gather(1, generated[:, len(self.steps) : len(self.steps) + 1]).squeeze(1))
        self._pending = None
        return torch.stack(self.steps, dim=1)[:, : generated.shape[1]]


class _FinishRecorder:
    """A stopping criterion: a reply ends with an EOS token or with the token completing a stop string (HF's
    `StopStringCriteria`, applied to the reply only, so a stop string is never completed by prompt text). It records
    the step at which each row ended (-1: still running)."""

    def __init__(self, prompt_width: int, batch: int, eos_ids: list[int], stop: Any, device: torch.device) -> None:
        self.prompt_width = prompt_width
        self.eos_ids = torch.tensor(eos_ids, dtype=torch.long, device=device)
        self.stop = stop  # a StopStringCriteria or None
        self.end_step = torch.full((batch,), -1, dtype=torch.long, device=device)

    def __call__(self, input_ids: torch.Tensor, scores: Any, **kwargs: Any) -> torch.Tensor:
        reply = input_ids[:, self.prompt_width :]
        done = torch.isin(reply[:, -1], self.eos_ids)
        if self.stop is not None:
            done |= self.stop(reply, scores)
        step = reply.shape[1] - 1
        self.end_step = torch.where(done & (self.end_step < 0), step, self.end_step)
        return done


class HFEngine(RolloutEngine):
    """`RolloutEngine` on HF transformers: ``model`` is "embedded", "tiny" or an HF model directory.

    Sampling randomness: with ``sampling.seed`` set, the global torch RNG is seeded with it inside
    ``torch.random.fork_rng`` (HF samples with ``torch.multinomial`` on the global generator), so the same prompts,
    weights and ``max_batch_size`` give the same replies and the caller's RNG state is untouched. Without a seed the
    engine continues its own RNG stream, started from ``seed`` at construction, also without touching the caller's.
    """

    tokenizer: Any  # a transformers tokenizer
    model: Any  # a transformers causal LM; None once closed

    def __init__(
        self,
        model: str | Path,
        dtype: str = "float32",
        device: str = "cpu",
        seed: int = 0,
        max_batch_size: int = 32,
        trust_remote_code: bool = False,
    ) -> None:
        try:
            from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig
        except ImportError as exc:
            raise ImportError(f"engine 'hf' needs transformers: pip install 'pyagentrl[rollout]' ({exc})") from exc

        if dtype not in _DTYPES:
            raise ValueError(f"dtype={dtype!r} is not one of {sorted(_DTYPES)}")
        if max_batch_size <= 0:
            raise ValueError(f"max_batch_size must be positive, got {max_batch_size}")
        self.path = resolve_model(str(model))
        self.device = torch.device(device)
        self.max_batch_size = max_batch_size
        self.tokenizer = AutoTokenizer.from_pretrained(self.path, trust_remote_code=trust_remote_code)
        loaded: Any = AutoModelForCausalLM.from_pretrained(
            self.path, dtype=_DTYPES[dtype], trust_remote_code=trust_remote_code
        )
        self.model = loaded.to(self.device)
        self.model.eval()
        self.model.requires_grad_(False)
        self.max_context = int(self.model.config.max_position_embeddings)
        self.vocab_size = int(self.model.get_input_embeddings().weight.shape[0])

        eos = self.model.generation_config.eos_token_id
        if eos is None:
            eos = self.tokenizer.eos_token_id
        self.eos_token_ids: list[int] = [] if eos is None else ([eos] if isinstance(eos, int) else list(eos))
        pad = self.tokenizer.pad_token_id
        self.pad_token_id: int = pad if pad is not None else (self.eos_token_ids or [0])[0]
        # A clean generation config: a checkpoint's own defaults (its temperature, top_k, repetition penalty...)
        # must not change what SamplingConfig asks for.
        self.model.generation_config = GenerationConfig(
            eos_token_id=self.eos_token_ids or None,
            pad_token_id=self.pad_token_id,
            bos_token_id=self.tokenizer.bos_token_id,
        )

        # Named parameters including both names of a tied one (lm_head.weight and model.embed_tokens.weight are
        # one tensor): updating either name updates both.
        self._params = dict(self.model.named_parameters(remove_duplicate=False))
        self._stop_criteria: dict[tuple[str, ...], Any] = {}
        with self._rng_fork():
            self._seed_rngs(seed)
            self._rng_state = self._get_rng_state()

    # ---- randomness -------------------------------------------------------------------------------------------

    def _rng_fork(self) -> contextlib.AbstractContextManager[None]:
        devices = [self.device.index or 0] if self.device.type == "cuda" else []
        return torch.random.fork_rng(devices=devices)

    def _seed_rngs(self, seed: int) -> None:
        torch.random.default_generator.manual_seed(seed)
        if self.device.type == "cuda":
            with torch.cuda.device(self.device):
                torch.cuda.manual_seed(seed)

    def _get_rng_state(self) -> list[torch.Tensor]:
        states = [torch.get_rng_state()]
        if self.device.type == "cuda":
            states.append(torch.cuda.get_rng_state(self.device))
        return states

    def _set_rng_state(self, states: list[torch.Tensor]) -> None:
        torch.set_rng_state(states[0])
        if self.device.type == "cuda":
            torch.cuda.set_rng_state(states[1], self.device)

    # ---- generation -------------------------------------------------------------------------------------------

    def generate(self, prompts: Sequence[Sequence[int]], sampling: SamplingConfig) -> list[Generation]:
        self.check_prompt_lengths(prompts, sampling.max_new_tokens)
        for i, prompt in enumerate(prompts):
            if prompt and not 0 <= min(prompt) <= max(prompt) < self.vocab_size:
                raise ValueError(
                    f"prompt {i} has token ids outside the vocabulary [0, {self.vocab_size}): "
                    f"min {min(prompt)}, max {max(prompt)}"
                )
        out: list[Generation] = []
        with torch.no_grad(), self._rng_fork():
            if sampling.seed is not None:
                self._seed_rngs(sampling.seed)
            else:
                self._set_rng_state(self._rng_state)
            for start in range(0, len(prompts), self.max_batch_size):
                out.extend(self._generate_batch(prompts[start : start + self.max_batch_size], sampling))
            if sampling.seed is None:
                self._rng_state = self._get_rng_state()
        return out

    def _stop_criterion(self, stop: tuple[str, ...]) -> Any:
        """HF's StopStringCriteria, built once per set of stop strings (it preprocesses the whole vocabulary)."""
        if not stop:
            return None
        if stop not in self._stop_criteria:
            from transformers import StopStringCriteria

            self._stop_criteria[stop] = StopStringCriteria(tokenizer=self.tokenizer, stop_strings=list(stop))
        return self._stop_criteria[stop]

    def _generate_batch(self, prompts: Sequence[Sequence[int]], sampling: SamplingConfig) -> Iterator[Generation]:
        from transformers import LogitsProcessorList, StoppingCriteriaList

        width = max(len(p) for p in prompts)
        input_ids = torch.full((len(prompts), width), self.pad_token_id, dtype=torch.long)
        attention_mask = torch.zeros((len(prompts), width), dtype=torch.long)
        for row, prompt in enumerate(prompts):  # left padding: every reply starts at column `width`
            input_ids[row, width - len(prompt) :] = torch.tensor(list(prompt), dtype=torch.long)
            attention_mask[row, width - len(prompt) :] = 1
        input_ids, attention_mask = input_ids.to(self.device), attention_mask.to(self.device)

        do_sample = sampling.temperature > 0
        logprobs = _SamplingLogprobs(sampling.temperature if do_sample else 1.0, sampling.top_p if do_sample else 1.0)
        finish = _FinishRecorder(
            width, len(prompts), self.eos_token_ids, self._stop_criterion(sampling.stop), self.device
        )
        # The processor has warped the logits already: HF samples from them as they are.
        knobs: dict[str, Any] = (
            {"do_sample": True, "temperature": 1.0, "top_p": 1.0, "top_k": 0} if do_sample else {"do_sample": False}
        )
        sequences = self.model.generate(
            input_ids=input_ids,
            attention_mask=attention_mask,
            max_new_tokens=sampling.max_new_tokens,
            pad_token_id=self.pad_token_id,
            eos_token_id=self.eos_token_ids or None,
            logits_processor=LogitsProcessorList([logprobs]),
            stopping_criteria=StoppingCriteriaList([finish]),
            **knobs,
        )
        generated = sequences[:, width:]
        token_logprobs = logprobs.finish(generated).cpu()
        generated, end_step = generated.cpu(), finish.end_step.cpu()
        for row in range(len(prompts)):
            stopped = bool(end_step[row] >= 0)
            length = int(end_step[row]) + 1 if stopped else min(generated.shape[1], sampling.max_new_tokens)
            token_ids = generated[row, :length].tolist()
            yield Generation(
                token_ids=token_ids,
                logprobs=token_logprobs[row, :length].tolist(),
                text=self.tokenizer.decode(token_ids, skip_special_tokens=True),
                finish_reason="stop" if stopped else "length",
            )

    # ---- weights ----------------------------------------------------------------------------------------------

    def update_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]]) -> None:
        """Copy each tensor into the parameter of that HF name (cast to the engine's dtype and device).

        Checked one at a time, so an iterator streaming the weights is never held whole: an unknown name or a
        shape mismatch raises ValueError after the tensors before it were applied.
        """
        with torch.no_grad():
            for name, tensor in named_tensors:
                param = self._params.get(name)
                if param is None:
                    raise ValueError(f"update_weights: {name!r} is not a parameter of the engine's model ({self.path})")
                if tuple(tensor.shape) != tuple(param.shape):
                    raise ValueError(
                        f"update_weights: {name!r} has shape {tuple(tensor.shape)}, the model's is {tuple(param.shape)}"
                    )
                param.copy_(tensor.detach())

    def close(self) -> None:
        """Drop the model so its memory can be freed."""
        self._params = {}
        self.model = None
        if self.device.type == "cuda":
            torch.cuda.empty_cache()
