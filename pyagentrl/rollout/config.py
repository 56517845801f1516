"""The rollout's settings (:class:`RolloutConfig`): how each turn is prompted, sampled, penalised and keyed."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from pyagentrl.envs.prompts import check_answer_format
from pyagentrl.rollout.engine import SamplingConfig

Prompting = Literal["window", "conversation"]


@dataclass(frozen=True)
class RolloutConfig:
    """Two ways to prompt:

    - ``"window"`` (verl-agent's, what the GiGPO paper trains on): each turn is one self-contained prompt with a window
      of the last ``history_length`` (observation, action) pairs (:class:`pyagentrl.envs.PromptBuilder`).
    - ``"conversation"``: one growing chat per episode; turn t's prompt is turn t−1's prompt, its sampled reply and the
      template's tokens for the next observation, token for token, so a whole trajectory is one row whose log-probs
      agree with the engine's (what GAGPO's per-action ratio over a conversation needs).
    """

    prompting: Prompting = "window"
    history_length: int = 2  # window prompting: (observation, action) pairs shown
    invalid_action_penalty: float = 0.1  # subtracted from the step reward of a reply that is no admissible action
    sampling: SamplingConfig = field(default_factory=SamplingConfig)
    system_prompt: str | None = None
    chat_template_kwargs: dict[str, Any] = field(default_factory=dict)
    answer_format: str = "reason"  # the prompts' closing instruction: "reason" (<think> then <action>) or "direct"
    # Conversation prompting: each later user turn holds the full prompt ("full") or only the step, observation and
    # admissible actions ("compact": about half the tokens on FrozenLake; the first turn states task and format).
    turn_format: Literal["full", "compact"] = "full"
    # Text the assistant's turn starts with, given to the engine as part of the prompt (not sampled, not trained);
    # the environment receives it followed by the sampled text. E.g. "<action>" with stop ("</action>",).
    response_prefix: str = ""
    # Key anchor states per turn: rows share an anchor only when they were taken at the same step of their
    # episodes. Under a time limit with per-turn costs the return from a state depends on the turns left,
    # which the observation does not show (docs/algorithms.md, (G9)).
    time_aware_anchors: bool = False

    def __post_init__(self) -> None:
        check_answer_format(self.answer_format)
        if self.prompting not in ("window", "conversation"):
            raise ValueError(f"prompting must be 'window' or 'conversation', got {self.prompting!r}")
        if self.history_length < 0:
            raise ValueError(f"history_length must be >= 0, got {self.history_length}")
        if self.turn_format not in ("full", "compact"):
            raise ValueError(f"turn_format must be 'full' or 'compact', got {self.turn_format!r}")
        if not (self.invalid_action_penalty >= 0 and np.isfinite(self.invalid_action_penalty)):
            raise ValueError(f"invalid_action_penalty must be finite and >= 0, got {self.invalid_action_penalty}")
        if not isinstance(self.time_aware_anchors, bool):  # a truthy string such as "no" would turn it on
            raise TypeError(f"time_aware_anchors must be a bool, got {self.time_aware_anchors!r}")
