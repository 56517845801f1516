"""FrozenLake (gymnasium) on seeded random maps, shown as a plain-text grid.

The seed picks the map (``generate_random_map(seed=)``) and, for the slippery variant, the transition noise, so
the members of a group see the same lake and, given the same actions, the same moves. The grid is drawn from
the map and the position, not from gymnasium's ANSI render, whose player marker is a colour code.

Reward: 1.0 on reaching the goal (won), 0 otherwise; falling into a hole ends the episode.
"""

from __future__ import annotations

from typing import Any

from pyagentrl.envs.base import StepResult, Task, TextEnv
from pyagentrl.envs.parsing import ActionParser

ACTIONS = ("left", "down", "right", "up")  # gymnasium's action ids 0..3
SYMBOLS = {"S": "_", "F": "_", "H": "O", "G": "G"}  # start is plain ice once left


class FrozenLakeEnv(TextEnv):
    """FrozenLake with a random ``size`` x ``size`` map per seed.

    Args:
        size: side of the square map.
        p_frozen: probability that a generated tile is ice (gymnasium's ``p``).
        slippery: gymnasium's ``is_slippery``.
        max_steps: turns before the episode is truncated.
    """

    family = "frozenlake"

    def __init__(
        self,
        size: int = 4,
        p_frozen: float = 0.8,
        slippery: bool = False,
        max_steps: int = 30,
        parser: ActionParser | None = None,
    ) -> None:
        super().__init__(max_steps=max_steps, parser=parser)
        if size < 2:
            raise ValueError(f"size must be at least 2, got {size}")
        if not 0.0 < p_frozen <= 1.0:
            raise ValueError(f"p_frozen must be in (0, 1], got {p_frozen}")
        self.size, self.p_frozen, self.slippery = size, p_frozen, slippery
        self._env: Any = None
        self._desc: list[str] = []

    @property
    def anchor_is_state(self) -> bool:
        return not self.slippery  # the grid shows the map and the player; a slippery lake moves at random

    def _render(self, state: int) -> str:
        row, col = divmod(state, self.size)
        lines = []
        for r, line in enumerate(self._desc):
            cells = [SYMBOLS[c] for c in line]
            if r == row:
                cells[col] = "P"
            lines.append(" ".join(cells))
        return "\n".join(lines)

    def _result(self, state: int, reward: float, done: bool) -> StepResult:
        grid = self._render(state)
        return StepResult(
            observation=grid,
            anchor=grid,
            reward=reward,
            done=done,
            won=reward > 0,
            admissible_actions=("up", "down", "left", "right"),
            info={"position": divmod(state, self.size)},
        )

    def _reset(self, task: Task) -> StepResult:
        from gymnasium.envs.toy_text.frozen_lake import FrozenLakeEnv as GymFrozenLake
        from gymnasium.envs.toy_text.frozen_lake import generate_random_map

        if not isinstance(task, int):
            raise ValueError(f"FrozenLake tasks are integer seeds, got {task!r}")
        self._desc = generate_random_map(size=self.size, p=self.p_frozen, seed=task)
        self._env = GymFrozenLake(desc=self._desc, is_slippery=self.slippery)
        state, _ = self._env.reset(seed=task)
        return self._result(int(state), 0.0, False)

    def _step(self, action: str) -> StepResult:
        assert self._env is not None
        state, reward, terminated, truncated, _ = self._env.step(ACTIONS.index(action))
        return self._result(int(state), float(reward), bool(terminated or truncated))
