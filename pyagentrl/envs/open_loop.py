"""The best open-loop policy of a task set: one fixed sequence of actions, played on every task without looking.

A held-out success rate shows that a policy reads its observations only where it beats every blind policy: on small
grids with a fixed start and goal, one sequence of moves solves many maps. This finds the sequence of at most
``length`` actions that wins the most tasks.

It needs games whose anchor is their whole state and whose moves are deterministic (`TextEnv.anchor_is_state`):
each task's moves are tabulated once per (state, action), breadth first, so each state's copy of the game is the one
reached in the fewest steps and the step limit never cuts a sequence short; every sequence is then scored by table
lookups. Winning a task at step d wins it for every sequence that starts with those d actions (the episode is over),
so each winning prefix adds one to a contiguous range of sequence indices (base-n digits, first action first).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from pyagentrl.envs.base import StepResult, Task, TextEnv

MAX_SEQUENCES = 1 << 20  # n_actions ** length: the score table's size


@dataclass(frozen=True)
class OpenLoopResult:
    actions: tuple[str, ...]  # the best sequence: the shortest, then the first in index order
    wins: int  # tasks it wins
    tasks: int


def _moves(env: TextEnv, first: StepResult, actions: tuple[str, ...], depth: int) -> dict[tuple[str, int], StepResult]:
    """The result of every action from every state reachable in fewer than ``depth`` steps, keyed (anchor, action)."""
    games = {first.anchor: env}
    frontier = [first.anchor]
    moves: dict[tuple[str, int], StepResult] = {}
    for _ in range(depth):
        reached = []
        for anchor in frontier:
            for i, action in enumerate(actions):
                game = copy.deepcopy(games[anchor])
                result = game.step(f"<action>{action}</action>")
                moves[anchor, i] = result
                if not result.done and result.anchor not in games:
                    games[result.anchor] = game
                    reached.append(result.anchor)
        frontier = reached
    return moves


def _winning_prefixes(
    moves: dict[tuple[str, int], StepResult], start: str, n: int, length: int
) -> list[tuple[int, int]]:
    """(index of the prefix, its length) of every action prefix that ends its episode in a win."""
    wins: list[tuple[int, int]] = []
    stack = [(start, 0, 0)]
    while stack:
        anchor, index, depth = stack.pop()
        for i in range(n):
            result, child = moves[anchor, i], index * n + i
            if result.done:
                if result.won:
                    wins.append((child, depth + 1))
            elif depth + 1 < length:
                stack.append((result.anchor, child, depth + 1))
    return wins


def play(env: TextEnv, task: Task, actions: Sequence[str]) -> bool:
    """Whether ``actions``, played in order on ``task`` without looking, win it (an episode that ends first keeps its
    outcome; one still running when the sequence ends is lost)."""
    result = env.reset(task)
    for action in actions:
        if result.done:
            break
        result = env.step(f"<action>{action}</action>")
    return bool(result.won)


def best_open_loop(factory: Callable[[], TextEnv], tasks: Sequence[Task], length: int) -> OpenLoopResult:
    """The sequence of at most ``length`` actions (the first task's admissible ones) that wins the most ``tasks``;
    the shortest such sequence, and the first in index order among those."""
    if not tasks:
        raise ValueError("best_open_loop needs at least one task")
    if length < 1:
        raise ValueError(f"length must be >= 1, got {length}")
    actions: tuple[str, ...] = ()
    prefixes: list[tuple[int, int]] = []  # (index, length) of every task's winning prefixes
    for task in tasks:
        env = factory()
        try:
            if not env.anchor_is_state:
                raise ValueError(
                    f"{type(env).__name__}: an open-loop score needs a game whose anchor is its whole state and whose "
                    "moves are deterministic (anchor_is_state)"
                )
            if length > env.max_steps:
                raise ValueError(f"length {length} is longer than the episodes ({env.max_steps} steps)")
            first = env.reset(task)
            if not actions:
                actions = tuple(first.admissible_actions)
                if not actions or len(actions) ** length > MAX_SEQUENCES:
                    raise ValueError(
                        f"{len(actions)} actions over {length} steps make {len(actions) ** length} sequences "
                        f"(at most {MAX_SEQUENCES})"
                    )
            elif tuple(first.admissible_actions) != actions:
                raise ValueError(f"task {task!r} has other actions than the first task: no fixed sequence fits both")
            if not first.done:
                moves = _moves(env, first, actions, length)
                prefixes += _winning_prefixes(moves, first.anchor, len(actions), length)
        finally:
            env.close()
    n = len(actions)
    best: tuple[int, int, int] = (-1, 0, 0)  # wins, length, index
    for size in range(1, length + 1):
        scores = np.zeros(n**size + 1, dtype=np.int64)  # differences: +1 where a prefix's range starts, -1 after
        for index, depth in prefixes:
            if depth <= size:
                span = n ** (size - depth)
                scores[index * span] += 1
                scores[(index + 1) * span] -= 1
        totals = np.cumsum(scores[:-1])
        top = int(totals.argmax())
        if totals[top] > best[0]:
            best = (int(totals[top]), size, top)
    wins, size, index = best
    digits = [(index // n ** (size - 1 - k)) % n for k in range(size)]
    return OpenLoopResult(tuple(actions[d] for d in digits), wins, len(tasks))
