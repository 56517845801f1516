"""Observation noise: irrelevant variation added to what an environment shows, with its state left unchanged.

Exact anchor keys stop matching when an observation carries anything volatile (a turn counter, a flavour line);
approximate keys (MinHash, SimHash, embeddings) are meant to see through it. :class:`NoisyObservations` wraps a
:class:`~pyagentrl.envs.base.TextEnv` and adds such variation at a named level:

* ``"none"``: the observation as the game draws it;
* ``"low"``: a turn counter line ("Turn 3."): the same state reached at different turns no longer gives equal text;
* ``"high"``: the turn counter and one flavour sentence drawn at random per turn (one of ``len(FLAVOUR)``), before
  the state; text games whose observation lists objects one per line also get those lines shuffled (a grid's rows
  are its picture, so grids keep their order).

Both the observation and the anchor text get the noise (anchors are what state keys read); the clean anchor, which
for games with ``anchor_is_state`` is the whole state, stays in ``info["state"]``. The noise has its own random
stream, so a noisy run takes the same actions as a clean one whenever the policy reads the true state.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from pyagentrl.envs.base import StepResult, Task, TextEnv

NOISE_LEVELS = ("none", "low", "high")

FLAVOUR = (
    "A cold wind blows across the lake.",
    "You hear a bird call in the distance.",
    "The light is fading.",
    "Somewhere a door creaks.",
    "Your boots are wet.",
    "It smells of rain.",
    "A cloud passes over the sun.",
    "You feel watched.",
    "Snow starts to fall softly.",
    "The ice groans under your feet.",
    "Far away a dog barks.",
    "Everything is quiet.",
)


def check_noise_level(level: str) -> str:
    if level not in NOISE_LEVELS:
        raise ValueError(f"unknown noise level {level!r}; expected one of {', '.join(NOISE_LEVELS)}")
    return level


def _is_grid(text: str) -> bool:
    """Rows of single-character cells separated by spaces, all of one width (FrozenLake's and Sokoban's drawing)."""
    rows = text.split("\n")
    widths = {len(row.split(" ")) for row in rows}
    return len(rows) > 1 and len(widths) == 1 and all(len(cell) == 1 for row in rows for cell in row.split(" "))


class NoisyObservations:
    """``env`` with noise of ``level`` added to every observation and anchor (see the module doc).

    Args:
        env: the game; its moves, rewards and step limit are untouched.
        level: one of :data:`NOISE_LEVELS`.
        seed: the noise's random stream (independent of the game's and the policy's).
    """

    def __init__(self, env: TextEnv, level: str, seed: int) -> None:
        self.env = env
        self.level = check_noise_level(level)
        self._rng = np.random.default_rng(seed)

    def _noisy(self, text: str, turn: int) -> str:
        if self.level == "none":
            return text
        lines = [f"Turn {turn}."]
        if self.level == "high":
            lines.append(FLAVOUR[int(self._rng.integers(len(FLAVOUR)))])
            if not _is_grid(text):
                body = text.split("\n")
                text = "\n".join(body[i] for i in self._rng.permutation(len(body)))
        return "\n".join([*lines, text])

    def _wrap(self, result: StepResult) -> StepResult:
        turn = self.env.steps_taken
        noisy_anchor = self._noisy(result.anchor, turn)
        # An observation that is the anchor text gets the same noise (one flavour draw, not two).
        observation = noisy_anchor if result.observation == result.anchor else self._noisy(result.observation, turn)
        return replace(
            result, observation=observation, anchor=noisy_anchor, info={**result.info, "state": result.anchor}
        )

    def reset(self, task: Task) -> StepResult:
        return self._wrap(self.env.reset(task))

    def step(self, reply: str) -> StepResult:
        return self._wrap(self.env.step(reply))

    @property
    def steps_taken(self) -> int:
        return self.env.steps_taken

    def close(self) -> None:
        self.env.close()
