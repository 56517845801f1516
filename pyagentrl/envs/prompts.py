"""Chat prompts in the style of the public GiGPO reference (verl-agent).

Each turn is one self-contained prompt (not a growing chat): the task, how many steps were taken, a window of
the most recent (observation, action) pairs, the current observation, the admissible actions, and the output
format (reasoning in ``<think>``, the action in ``<action>``). This keeps prompts short on long episodes. As in
the reference's no-history template, the task line is left out while the observation itself states the task
(the first screen of ALFWorld and TextWorld).
`PromptBuilder` keeps the per-environment history of a batch; `apply_chat_template` turns messages into the
model's text with the tokenizer's own template.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pyagentrl.envs.base import StepResult
from pyagentrl.envs.parsing import ActionParser

_EXTRACT = ActionParser()

#: Opening line per prompt family: what the agent is and, for grid games, how to read the observation. Filled by
#: `add_prompt_family`, which `pyagentrl.envs.register_env` calls (the built-in families: `pyagentrl.envs.registry`).
INTRO: dict[str, str] = {}
FORMAT = (
    "Now it's your turn to take an action. First reason step by step about the current situation; this "
    "reasoning MUST be enclosed within <think> </think> tags. Then choose one admissible action for the "
    "current step and present it within <action> </action> tags."
)
# For small models, which rarely keep the reasoning format: the action alone (pair it with the rollout's
# response_prefix "<action>" and stop "</action>").
DIRECT_FORMAT = (
    "Now it's your turn to take an action: reply with one admissible action inside <action> </action> tags, "
    "for example <action>right</action>, and nothing else."
)
#: answer_format -> the closing instruction of every prompt.
ANSWER_FORMATS = {"reason": FORMAT, "direct": DIRECT_FORMAT}


def add_prompt_family(family: str, intro: str, *, replace: bool = False) -> None:
    """Adds prompt family `family`, whose prompts open with `intro` (an environment adds its own with
    ``@register_env(name, intro=...)``).

    Raises ValueError when `family` is registered already with another intro, unless `replace`.
    """
    if not isinstance(family, str) or not family:
        raise ValueError(f"a prompt family is a non-empty string, got {family!r}")
    if not isinstance(intro, str) or not intro.strip():
        raise ValueError(f"prompt family {family!r}: intro must be a non-empty string, got {intro!r}")
    if not replace and INTRO.get(family, intro) != intro:
        raise ValueError(f"prompt family {family!r} is already registered with another intro")
    INTRO[family] = intro


def render_prompt(
    family: str,
    current: StepResult,
    history: Sequence[tuple[str, str]] = (),
    step_count: int = 0,
    history_length: int = 2,
    intro: bool = True,
    answer_format: str = "reason",
    compact: bool = False,
) -> str:
    """The user prompt for one turn.

    Args:
        family: key of `INTRO`.
        current: the environment's latest result.
        history: all (observation, action) pairs of the episode so far, oldest first.
        step_count: steps taken so far.
        history_length: how many recent pairs to show.
        intro: start with the family's intro and the task; False for the later turns of a growing conversation,
            which already holds them.
        answer_format: "reason" (verl-agent's: reasoning in <think>, then the action) or "direct" (the action
            alone).
        compact: a later turn of a conversation (``intro=False``) that holds only the step, the observation and
            the admissible actions: the first turn has stated the task and the answer format already.
    """
    if family not in INTRO:
        raise ValueError(f"family must be one of {sorted(INTRO)}, got {family!r}")
    check_answer_format(answer_format)
    actions = ", ".join(f"'{a}'" for a in current.admissible_actions)
    if compact:
        if intro:
            raise ValueError("compact=True is for the later turns of a conversation (intro=False)")
        return f"Step {step_count + 1}:\n{current.observation}\n\nAdmissible actions: [{actions}]."
    parts = [INTRO[family]] if intro else []
    task = current.task
    if (
        intro and task and task not in current.observation
    ):  # ALFWorld's: the text after "Your task is to: "; TWX's: a sentence
        parts.append(task if task.lower().startswith("your task is") else f"Your task is to: {task}")
    recent = list(history)[-history_length:] if history_length > 0 else []
    if step_count and recent:
        first = step_count - len(recent) + 1
        lines = "\n".join(
            f"[Observation {first + k}: '{obs}', Action {first + k}: '{act}']" for k, (obs, act) in enumerate(recent)
        )
        parts.append(
            f"Prior to this step, you have already taken {step_count} step(s). Below are the most recent "
            f"{len(recent)} observations and the corresponding actions you took:\n{lines}"
        )
    parts.append(f"You are now at step {step_count + 1} and your current observation is:\n{current.observation}")
    parts.append(f"Your admissible actions of the current situation are: [{actions}].")
    parts.append(ANSWER_FORMATS[answer_format])
    return "\n\n".join(parts)


def check_answer_format(answer_format: str) -> None:
    if answer_format not in ANSWER_FORMATS:
        raise ValueError(f"answer_format must be one of {sorted(ANSWER_FORMATS)}, got {answer_format!r}")


def build_messages(prompt: str, system: str | None = None) -> list[dict[str, str]]:
    """Chat messages for one turn: an optional system message and the user prompt."""
    messages = [{"role": "system", "content": system}] if system else []
    return [*messages, {"role": "user", "content": prompt}]


def apply_chat_template(
    messages: list[dict[str, str]], tokenizer: Any, generation_prompt: bool = True, **template_kwargs: Any
) -> str:
    """The prompt text in the model's own chat format (a Hugging Face tokenizer's template), ready to generate
    (``generation_prompt=False``: the conversation as it stands, its last turn closed).

    `template_kwargs` go to the template, e.g. ``enable_thinking=False`` for Qwen3.
    """
    return str(
        tokenizer.apply_chat_template(
            messages, tokenize=False, add_generation_prompt=generation_prompt, **template_kwargs
        )
    )


class PromptBuilder:
    """Per-environment history for a batch, and the messages of every environment's next turn.

    Usage: ``pb.reset(results)`` after `EnvBatch.reset`, ``pb.messages()`` to prompt the model,
    ``pb.record(actions, results)`` after each `EnvBatch.step`.
    """

    def __init__(
        self, family: str, history_length: int = 2, system: str | None = None, answer_format: str = "reason"
    ) -> None:
        if family not in INTRO:
            raise ValueError(f"family must be one of {sorted(INTRO)}, got {family!r}")
        if history_length < 0:
            raise ValueError(f"history_length must be >= 0, got {history_length}")
        check_answer_format(answer_format)
        self.family, self.history_length, self.system = family, history_length, system
        self.answer_format = answer_format
        self.current: list[StepResult] = []
        self.history: list[list[tuple[str, str]]] = []

    def reset(self, results: Sequence[StepResult]) -> None:
        """Start every environment's history from its first result."""
        self.current = list(results)
        self.history = [[] for _ in results]

    def record(self, actions: Sequence[str], results: Sequence[StepResult]) -> None:
        """Append each environment's (previous observation, action); finished episodes stop recording.

        `actions` are the replies sent to `EnvBatch.step`; the history keeps the action the environment parsed
        from each (``info["action"]``), not the reasoning, or the reply's action text when it was invalid.
        """
        if len(actions) != len(self.current) or len(results) != len(self.current):
            raise ValueError(
                f"actions ({len(actions)}) and results ({len(results)}) must have one entry per environment "
                f"({len(self.current)})"
            )
        for i, (reply, result) in enumerate(zip(actions, results, strict=True)):
            if not self.current[i].done:
                action = result.info.get("action") or _EXTRACT.extract(reply) or reply.strip()
                self.history[i].append((self.current[i].observation, action[:200]))
                self.current[i] = result

    def messages(self, tokenizer: Any = None, **template_kwargs: Any) -> list[list[dict[str, str]]] | list[str]:
        """Messages per environment, or their chat-template texts when `tokenizer` is given (`template_kwargs`:
        see `apply_chat_template`)."""
        out = [
            build_messages(
                render_prompt(self.family, cur, hist, len(hist), self.history_length, answer_format=self.answer_format),
                self.system,
            )
            for cur, hist in zip(self.current, self.history, strict=True)
        ]
        if tokenizer is None:
            return out
        return [apply_chat_template(m, tokenizer, **template_kwargs) for m in out]
