"""FrozenLake (gymnasium) on seeded random maps, shown as a plain-text grid.

The seed picks the map (``generate_random_map(seed=)``) and, for the slippery variant, the transition noise, so
the members of a group see the same lake and, given the same actions, the same moves. gymnasium's maps put the
start top-left and the goal bottom-right, so on small maps one fixed sequence of moves wins most of them
(`pyagentrl.envs.open_loop`); ``random_start_goal`` draws both cells per seed, so that winning takes reading the
map. The grid is drawn from the map and the position, not from gymnasium's ANSI render, whose player marker is a
colour code. ``directions`` adds a line under the grid that says where the goal lies and what each move runs into,
so that a small model can act on the state without parsing the grid's layout.

Reward: 1.0 on reaching the goal (won), 0 otherwise; falling into a hole ends the episode.
"""

from __future__ import annotations

from collections import deque
from typing import Any

import numpy as np

from pyagentrl.envs.base import StepResult, Task, TextEnv
from pyagentrl.envs.parsing import ActionParser

ACTIONS = ("left", "down", "right", "up")  # gymnasium's action ids 0..3
SYMBOLS = {"S": "_", "F": "_", "H": "O", "G": "G"}  # start is plain ice once left
STEPS = ((0, -1), (1, 0), (0, 1), (-1, 0))  # (row, column) change of each action in ACTIONS
_TILES = {"S": "ice", "F": "ice", "H": "hole", "G": "goal"}  # what a move runs into, in words (``directions``)


def _connected(ice: np.ndarray, start: tuple[int, int], goal: tuple[int, int]) -> bool:
    """Whether moves over ice lead from ``start`` to ``goal`` (breadth first)."""
    seen, queue = {start}, deque([start])
    while queue:
        row, col = queue.popleft()
        if (row, col) == goal:
            return True
        for dr, dc in STEPS:
            nxt = (row + dr, col + dc)
            if 0 <= nxt[0] < ice.shape[0] and 0 <= nxt[1] < ice.shape[1] and ice[nxt] and nxt not in seen:
                seen.add(nxt)
                queue.append(nxt)
    return False


def random_start_goal_map(size: int, p_frozen: float, seed: int) -> list[str]:
    """A map in gymnasium's notation whose start and goal are two different ice cells drawn at random, with a path
    between them around the holes; drawn again until there is one (as ``generate_random_map`` does)."""
    rng = np.random.default_rng(seed)
    while True:
        ice = rng.random((size, size)) < p_frozen
        cells = np.flatnonzero(ice)
        if cells.size < 2:
            continue
        start, goal = (divmod(int(c), size) for c in rng.choice(cells, 2, replace=False))
        if _connected(ice, start, goal):
            rows = [["F" if frozen else "H" for frozen in line] for line in ice]
            rows[start[0]][start[1]], rows[goal[0]][goal[1]] = "S", "G"
            return ["".join(line) for line in rows]


class FrozenLakeEnv(TextEnv):
    """FrozenLake with a random ``size`` x ``size`` map per seed.

    Args:
        size: side of the square map.
        p_frozen: probability that a generated tile is ice (gymnasium's ``p``).
        slippery: gymnasium's ``is_slippery``.
        max_steps: turns before the episode is truncated.
        random_start_goal: draw the start and goal cells per seed instead of top-left and bottom-right.
        map_seed: pin the map: every task plays the map this seed draws (with ``random_start_goal``, its start and
            goal too), whatever the task seed; the task seed then only drives a slippery lake's noise. A task set
            that trains and tests one map measures learning that map, not reading maps.
        directions: add a line under the grid with the goal's offset and what each move runs into, e.g.
            ``Goal: 2 down, 1 left. up: ice, down: hole, left: edge, right: ice.`` The anchor stays the grid.
    """

    family = "frozenlake"

    def __init__(
        self,
        size: int = 4,
        p_frozen: float = 0.8,
        slippery: bool = False,
        max_steps: int = 30,
        random_start_goal: bool = False,
        map_seed: int | None = None,
        directions: bool = False,
        parser: ActionParser | None = None,
    ) -> None:
        super().__init__(max_steps=max_steps, parser=parser)
        if size < 2:
            raise ValueError(f"size must be at least 2, got {size}")
        if not 0.0 < p_frozen <= 1.0:
            raise ValueError(f"p_frozen must be in (0, 1], got {p_frozen}")
        if not isinstance(random_start_goal, bool):
            raise TypeError(f"random_start_goal must be a bool, got {random_start_goal!r}")
        self.size, self.p_frozen, self.slippery = size, p_frozen, slippery
        self.random_start_goal = random_start_goal
        if map_seed is not None and (isinstance(map_seed, bool) or not isinstance(map_seed, int) or map_seed < 0):
            raise ValueError(f"map_seed must be a non-negative integer or None, got {map_seed!r}")
        self.map_seed = map_seed
        if not isinstance(directions, bool):
            raise TypeError(f"directions must be a bool, got {directions!r}")
        self.directions = directions
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

    def _describe(self, state: int) -> str:
        """The goal's offset from the player and what each move runs into (``directions``)."""
        row, col = divmod(state, self.size)
        goal_row, goal_col = divmod("".join(self._desc).index("G"), self.size)
        down, right = goal_row - row, goal_col - col
        offsets = [
            f"{abs(d)} {name}"
            for d, name in ((down, "down" if down > 0 else "up"), (right, "right" if right > 0 else "left"))
            if d
        ]
        moves = []
        for name in ("up", "down", "left", "right"):
            dr, dc = STEPS[ACTIONS.index(name)]
            r, c = row + dr, col + dc
            moves.append(f"{name}: {_TILES[self._desc[r][c]] if 0 <= r < self.size and 0 <= c < self.size else 'edge'}")
        return f"Goal: {', '.join(offsets) or 'here'}. {', '.join(moves)}."

    def _result(self, state: int, reward: float, done: bool) -> StepResult:
        grid = self._render(state)
        return StepResult(
            observation=f"{grid}\n{self._describe(state)}" if self.directions else grid,
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
        map_seed = task if self.map_seed is None else self.map_seed
        if self.random_start_goal:
            self._desc = random_start_goal_map(self.size, self.p_frozen, map_seed)
        else:
            self._desc = generate_random_map(size=self.size, p=self.p_frozen, seed=map_seed)
        self._env = GymFrozenLake(desc=self._desc, is_slippery=self.slippery)
        state, _ = self._env.reset(seed=task)
        return self._result(int(state), 0.0, False)

    def _step(self, action: str) -> StepResult:
        assert self._env is not None
        state, reward, terminated, truncated, _ = self._env.step(ACTIONS.index(action))
        return self._result(int(state), float(reward), bool(terminated or truncated))
