"""Turning a model's reply into an environment action.

Follows the public GiGPO reference (verl-agent): the action sits in ``<action>...</action>`` tags after the
reasoning; a reply without tags may also be a bare admissible command. The result must match an admissible
action (case and spacing ignored), otherwise the reply is invalid and the environment state is left unchanged.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

_TAG = re.compile(r"<action>(.*?)</action>", re.IGNORECASE | re.DOTALL)
_THINK = re.compile(r"<think>.*?</think>", re.IGNORECASE | re.DOTALL)
_SPACE = re.compile(r"\s+")
_WRAPPING = " '\"`*"  # quotes, backticks and markdown emphasis models put around an action


def normalize(text: str) -> str:
    """Trim, collapse inner whitespace and peel off wrapping quotes, backticks, markdown ``**`` and final periods
    (repeatedly: ``'look'.`` and ``**look**`` both give ``look``). Case is kept."""
    text = _SPACE.sub(" ", text).strip()
    previous = None
    while text != previous:
        previous = text
        text = text.strip(_WRAPPING).removesuffix(".")
    return text


@dataclass(frozen=True)
class ActionParser:
    """Extracts an admissible action from a reply.

    Args:
        require_tag: accept only replies with an ``<action>`` tag (a bare command is then invalid).
        last_tag: with several tags, use the last (models often restate the format before answering).
    """

    require_tag: bool = False
    last_tag: bool = True

    def extract(self, reply: str) -> str | None:
        """The candidate action text of `reply` (tag content or, when allowed, the whole reply).

        Closed ``<think>...</think>`` blocks are dropped first: an action named while reasoning is not the answer,
        and ``<think>...</think> go to fridge 1`` is a bare command.
        """
        answer = _THINK.sub(" ", reply)
        tags = _TAG.findall(answer)
        if tags:
            return normalize(tags[-1] if self.last_tag else tags[0])
        if self.require_tag or "<action>" in answer.lower():
            return None  # no tag, or an unclosed one: the model broke the format
        return normalize(answer)

    def span(self, reply: str) -> tuple[int, int] | None:
        """Where in `reply` the candidate action of :meth:`extract` is written, as a (start, end) character range:
        the content of the chosen ``<action>`` tag outside any closed ``<think>`` block (the whole reply for a bare
        command), surrounding whitespace left out; None when `extract` finds no candidate."""
        if self.extract(reply) is None:
            return None
        thinking = [m.span() for m in _THINK.finditer(reply)]
        tags = [m for m in _TAG.finditer(reply) if not any(a <= m.start() < b for a, b in thinking)]
        if tags:
            tag = tags[-1] if self.last_tag else tags[0]
            start, end = tag.span(1)
        else:
            start, end = (thinking[-1][1] if thinking else 0), len(reply)
        while start < end and reply[start].isspace():
            start += 1
        while end > start and reply[end - 1].isspace():
            end -= 1
        return start, end

    def parse(self, reply: str, admissible: Sequence[str]) -> str | None:
        """The admissible action (as the game spells it) that `reply` names, or None when it names none."""
        candidate = self.extract(reply)
        if not candidate:
            return None
        wanted = candidate.lower()
        for action in admissible:
            if normalize(action).lower() == wanted:
                return action
        return None
