"""One interface for the rollout engines: generate from token-id prompts, return the sampled token ids with each
token's log-prob, and take new weights in memory.

Log-probs are those of the distribution each token was drawn from: the model's logits divided by the temperature,
then cut to the top-p nucleus and renormalised (:func:`warp_logits`, vLLM's and HF's rule). That is the behaviour
policy of the importance ratio, and the learner computes its own log-probs the same way, so the two agree up to
numerics (the trainer logs the gap as ``logprob_gap``). Greedy decoding (temperature 0) reports the raw log-probs.
"""

from __future__ import annotations

import abc
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch


@dataclass(frozen=True)
class SamplingConfig:
    temperature: float = 1.0  # 0: greedy
    top_p: float = 1.0
    max_new_tokens: int = 64
    stop: tuple[str, ...] = ()  # generation ends after the token that completes a stop string (kept in the reply)
    seed: int | None = None  # the same seed, prompts and weights give the same replies (each call on its own)

    def __post_init__(self) -> None:
        if not (self.temperature >= 0 and math.isfinite(self.temperature)):
            raise ValueError(f"temperature must be finite and >= 0, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must lie in (0, 1], got {self.top_p}")
        if self.max_new_tokens <= 0:
            raise ValueError(f"max_new_tokens must be positive, got {self.max_new_tokens}")
        if any(not isinstance(s, str) or not s for s in self.stop):
            raise ValueError(f"stop must hold non-empty strings, got {self.stop!r}")


def warp_logits(logits: torch.Tensor, temperature: float, top_p: float) -> torch.Tensor:
    """The float32 logits a token is sampled from: ``logits / temperature``, and with ``top_p < 1`` every token
    outside the nucleus set to -inf. The nucleus is vLLM's and HF's: sorted ascending, a token is dropped when the
    probability of it and every less likely token sums to at most ``1 - top_p`` (the most likely token always stays).
    Differentiable in the kept logits; the nucleus itself is chosen without gradient. ``temperature`` 0 means greedy
    decoding, whose reported log-probs are the raw ones."""
    warped = logits.float()
    if temperature > 0 and temperature != 1.0:
        warped = warped / temperature
    if top_p >= 1.0:
        return warped
    with torch.no_grad():
        ordered, order = warped.sort(dim=-1)
        dropped = ordered.softmax(dim=-1).cumsum(dim=-1) <= 1 - top_p
        dropped[..., -1] = False
        outside = torch.zeros_like(dropped).scatter_(-1, order, dropped)
    return warped.masked_fill(outside, -torch.inf)


def log_softmax_and_entropy(warped: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """log-probs of ``warped`` logits (-inf outside a nucleus) and each distribution's entropy (last dimension)."""
    log_probs = torch.log_softmax(warped, dim=-1)
    finite = torch.where(torch.isfinite(log_probs), log_probs, torch.zeros_like(log_probs))
    return log_probs, -(log_probs.exp() * finite).sum(-1)


@dataclass(frozen=True)
class Generation:
    """One sampled reply: ``token_ids`` exactly as sampled (never re-encoded from text), ``logprobs[j]`` the
    log-prob of ``token_ids[j]`` under the distribution it was drawn from (:func:`warp_logits`), ``text`` their
    decoding (what the environment receives)."""

    token_ids: list[int]
    logprobs: list[float]
    text: str
    finish_reason: str = field(default="length")  # "stop" (EOS or a stop string) or "length"


class RolloutEngine(abc.ABC):
    """A generation engine holding a copy of the policy's weights."""

    #: The tokenizer (a transformers tokenizer): chat templates, decoding.
    tokenizer: Any
    #: The longest prompt + reply the engine accepts, in tokens.
    max_context: int

    @abc.abstractmethod
    def generate(self, prompts: Sequence[Sequence[int]], sampling: SamplingConfig) -> list[Generation]:
        """One reply per prompt (token ids). Raises ValueError naming the prompt when one does not fit in
        ``max_context`` with ``sampling.max_new_tokens``."""

    @abc.abstractmethod
    def update_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]]) -> None:
        """Replace the engine's weights with these (HF parameter names), in memory; later generations use them."""

    def close(self) -> None:  # noqa: B027 - engines without resources need nothing here
        """Free the engine's resources."""

    def check_prompt_lengths(self, prompts: Sequence[Sequence[int]], max_new_tokens: int) -> None:
        for i, prompt in enumerate(prompts):
            if len(prompt) == 0:
                raise ValueError(f"prompt {i} is empty")
            if len(prompt) + max_new_tokens > self.max_context:
                raise ValueError(
                    f"prompt {i} has {len(prompt)} tokens; with max_new_tokens={max_new_tokens} it exceeds the "
                    f"engine's context of {self.max_context} tokens (shorten history_length or max_new_tokens)"
                )
