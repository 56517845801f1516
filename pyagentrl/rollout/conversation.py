"""Conversation prompting (``RolloutConfig.prompting="conversation"``): each episode's growing chat as token ids,
built from the first observation and extended by every sampled reply and the template's tokens for the next turn."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pyagentrl.envs.base import StepResult
from pyagentrl.envs.prompts import apply_chat_template, build_messages, render_prompt
from pyagentrl.rollout.config import RolloutConfig
from pyagentrl.rollout.engine import Generation


class Conversations:
    """Growing chats, kept as token ids: sampled tokens as sampled, the template's tokens between them encoded."""

    def __init__(self, tokenizer: Any, family: str, config: RolloutConfig, results: Sequence[StepResult]) -> None:
        self.tokenizer, self.family, self.config = tokenizer, family, config
        self.prefix = config.response_prefix
        self.messages = [
            build_messages(
                render_prompt(family, r, history_length=0, answer_format=config.answer_format), config.system_prompt
            )
            for r in results
        ]
        self.ids = [self._encode(self._template(m, True) + self.prefix) for m in self.messages]
        self.special_ids = set(tokenizer.all_special_ids)
        self.sampled: list[list[int]] = [[-1] * len(ids) for ids in self.ids]
        self.logprobs: list[list[float]] = [[0.0] * len(ids) for ids in self.ids]

    def _template(self, messages: list[dict[str, str]], generation_prompt: bool) -> str:
        return apply_chat_template(messages, self.tokenizer, generation_prompt, **self.config.chat_template_kwargs)

    def _encode(self, text: str) -> list[int]:
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def extend(self, i: int, g: Generation, result: StepResult, step_count: int, *, more: bool) -> None:
        """Append env i's sampled reply and, while the episode goes on, the next user turn's template tokens."""
        step = step_count - 1
        self.ids[i] += g.token_ids
        self.sampled[i] += [step] * len(g.token_ids)
        self.logprobs[i] += g.logprobs
        if not more:
            return
        before = self._template(self.messages[i], True) + self.prefix
        self.messages[i] = [*self.messages[i], {"role": "assistant", "content": self.prefix + g.text}]
        closed = self._template(self.messages[i], False)
        if not closed.startswith(before + g.text):
            raise ValueError(
                "the model's chat template does not render a conversation as a prefix of its continuation; "
                "use prompting='window'"
            )
        closing = closed[len(before) + len(g.text) :]  # e.g. "<|im_end|>\n"
        if g.finish_reason == "stop" and g.token_ids and g.token_ids[-1] in self.special_ids:
            # The model sampled its turn's end itself (EOS, or another stop token such as Gemma's <end_of_turn>).
            closing = closing.removeprefix(self.tokenizer.decode(g.token_ids[-1:], skip_special_tokens=False))
        turn = render_prompt(
            self.family,
            result,
            step_count=step_count,
            history_length=0,
            intro=False,
            answer_format=self.config.answer_format,
            compact=self.config.turn_format == "compact",
        )
        self.messages[i] = [*self.messages[i], {"role": "user", "content": turn}]
        following = self._template(self.messages[i], True)
        if not following.startswith(closed):  # e.g. Qwen3's template drops earlier turns' <think> blocks
            raise ValueError(
                "the model's chat template does not render a conversation as a prefix of its continuation; "
                "use prompting='window'"
            )
        between = self._encode(closing + following[len(closed) :] + self.prefix)
        self.ids[i] += between
        self.sampled[i] += [-1] * len(between)
        self.logprobs[i] += [0.0] * len(between)
