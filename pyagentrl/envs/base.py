"""The interface every text environment implements, and the record one step returns.

A rollout loop resets groups of environments to the same task (so GiGPO/GAGPO can compare steps of different
rollouts that pass through the same state), then feeds each environment the model's raw reply. `TextEnv.step`
parses the reply, leaves the state unchanged when it is not an admissible action (flagged, not penalised: the
trainer applies the penalty), and turns an exception raised by the game into the end of that episode.
"""

from __future__ import annotations

import abc
import operator
import os
from dataclasses import dataclass, field, replace
from typing import Any

from pyagentrl.envs.parsing import ActionParser

#: What a task is named by: an integer seed (the game is generated or picked from it) or a game file path.
Task = int | str


def as_task(task: object) -> Task:
    """`task` with any integer (a numpy integer too) turned into a plain ``int`` and a path (``Path``) into
    ``str``; strings pass unchanged.

    Raises ValueError for a bool (almost always a bug, not a seed) and for anything that is neither.
    """
    if isinstance(task, str):
        return task
    if isinstance(task, os.PathLike):
        return os.fspath(task)
    if not isinstance(task, bool):
        try:
            return operator.index(task)  # type: ignore[arg-type]
        except TypeError:
            pass
    raise ValueError(f"a task is an integer seed or a game file path, got {task!r} ({type(task).__name__})")


@dataclass(frozen=True)
class StepResult:
    """What an environment shows after a reset or a step.

    Attributes:
        observation: the text shown to the model (the game's feedback, plain text).
        anchor: canonical text of the state for anchor-state keys: the observation without volatile parts
            (move counters, status lines), so that the same state reached by two rollouts gives the same text.
        reward: reward of this step (each family documents its scheme).
        done: the episode is over (won, lost, step limit, or an error).
        won: the task was accomplished.
        admissible_actions: the commands accepted in this state, in the game's order.
        action_valid: the reply parsed to an admissible action (always True after a reset).
        task: the task description, for the prompt ("" when the observation carries it).
        info: extra data; ``info["error"]`` holds ``repr(exception)`` when the game raised.
    """

    observation: str
    anchor: str
    reward: float = 0.0
    done: bool = False
    won: bool = False
    admissible_actions: tuple[str, ...] = ()
    action_valid: bool = True
    task: str = ""
    info: dict[str, Any] = field(default_factory=dict)


class TextEnv(abc.ABC):
    """One multi-turn text environment.

    Subclasses implement `_reset` and `_step` on already-parsed actions; this class does the parsing, the
    invalid-action rule, the step limit, finished-episode handling and error capture, so every family behaves
    the same way towards the rollout loop.
    """

    def __init__(self, max_steps: int = 50, parser: ActionParser | None = None) -> None:
        if max_steps <= 0:
            raise ValueError(f"max_steps must be positive, got {max_steps}")
        self.max_steps = max_steps
        self.parser = parser or ActionParser()
        self._last: StepResult | None = None
        self._steps = 0

    @classmethod
    def check_options(cls, **options: Any) -> None:
        """Raises what the constructor would raise for ``options``, starting no game: `check_env_options` calls it
        before a run loads its model. This one builds an environment and closes it (constructors only keep and
        check their settings; games start in `reset`); a family whose constructor starts a process overrides it."""
        cls(**options).close()

    @abc.abstractmethod
    def _reset(self, task: Task) -> StepResult:
        """Start the episode named by `task`; equal tasks must give identical first results."""

    @abc.abstractmethod
    def _step(self, action: str) -> StepResult:
        """Apply one admissible action (as listed in the last result)."""

    def close(self) -> None:  # noqa: B027 - optional hook, most games hold nothing
        """Release processes or files held by the game (default: nothing)."""

    @property
    def idle_reward(self) -> float:
        """The reward of a turn whose reply names no admissible action: the game's price of a turn in which nothing
        happens (0 unless the game charges every turn; a game that does must charge this one too, or a reply that
        names no action would score better than a move)."""
        return 0.0

    @property
    def anchor_is_state(self) -> bool:
        """Whether the anchor text is the whole game state and the moves are deterministic, so that the same anchor
        and action always give the same result (grids drawn in full; not text games with hidden state)."""
        return False

    @property
    def steps_taken(self) -> int:
        """Number of step calls since the last reset (invalid replies count: they cost a turn)."""
        return self._steps

    def reset(self, task: Task) -> StepResult:
        """Reset to `task` (seed or game file). An error while resetting is raised: there is no episode to end.

        Any integer type is a seed (``numpy.int64`` from ``np.arange`` too); subclasses receive a plain ``int``.
        """
        self._steps = 0
        self._last = self._reset(as_task(task))
        return self._last

    def step(self, reply: str) -> StepResult:
        """Parse the model's `reply` and advance the game by one turn.

        A finished episode ignores the reply and returns its last result with zero reward. A reply that is not
        an admissible action returns the current observation unchanged with ``action_valid=False``. An
        exception from the game ends the episode: ``done=True`` and ``info["error"]``.
        """
        last = self._last
        if last is None:
            raise RuntimeError("step() called before reset()")
        if last.done:
            return replace(last, reward=0.0, action_valid=True)
        self._steps += 1
        action = self.parser.parse(reply, last.admissible_actions)
        try:
            if action is None:
                result = replace(last, reward=self.idle_reward, action_valid=False, info={**last.info, "action": None})
            else:
                result = self._step(action)
                result.info.setdefault("action", action)
        except Exception as exc:  # any failure of the game ends only this episode
            result = replace(last, reward=0.0, done=True, won=False, info={**last.info, "error": repr(exc)})
        if not result.done and self._steps >= self.max_steps:
            result = replace(result, done=True, info={**result.info, "truncated": True})
        self._last = result
        return result
