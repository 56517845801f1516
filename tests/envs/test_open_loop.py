"""The best open-loop sequence against brute force: every sequence replayed from a fresh reset, no tables."""

from __future__ import annotations

import itertools

import pytest
from testkit.envs import need

from pyagentrl.envs import env_factory
from pyagentrl.envs.open_loop import best_open_loop, play

need("gymnasium")

GAMES = [
    ("frozenlake", {"size": 3, "p_frozen": 0.8, "max_steps": 15}),
    ("sokoban", {"dim_room": [6, 6], "num_boxes": 1, "max_steps": 10}),
]


def _replayed_wins(factory, tasks: list[int], sequence: tuple[str, ...]) -> int:
    wins = 0
    for task in tasks:
        env = factory()
        result = env.reset(task)
        for action in sequence:
            if result.done:
                break
            result = env.step(action)
        wins += bool(result.won)
    return wins


@pytest.mark.parametrize(("name", "options"), GAMES)
def test_best_open_loop_matches_brute_force(name: str, options: dict) -> None:
    factory = env_factory(name, **options)
    tasks = list(range(100, 112))
    best = best_open_loop(factory, tasks, 4)
    actions = factory().reset(tasks[0]).admissible_actions
    by_length = {
        size: max(_replayed_wins(factory, tasks, seq) for seq in itertools.product(actions, repeat=size))
        for size in range(1, 5)
    }
    assert best.wins == by_length[4] and best.tasks == len(tasks)
    assert _replayed_wins(factory, tasks, best.actions) == best.wins  # the sequence it names scores what it says
    env = factory()
    for sequence in [best.actions, tuple(reversed(best.actions))]:  # play() against the replay here
        assert sum(play(env, task, sequence) for task in tasks) == _replayed_wins(factory, tasks, sequence)
    assert len(best.actions) == min(size for size, wins in by_length.items() if wins == best.wins)  # the shortest


def test_a_blind_sequence_solves_an_open_lake() -> None:
    # With no holes, any sequence of two rights and two downs reaches the goal of every 3x3 map in four moves.
    best = best_open_loop(env_factory("frozenlake", size=3, p_frozen=1.0, max_steps=10), list(range(20)), 6)
    assert best.wins == 20 and len(best.actions) == 4 and sorted(best.actions) == ["down", "down", "right", "right"]


def test_games_it_cannot_score_are_refused() -> None:
    with pytest.raises(ValueError, match="anchor_is_state"):
        best_open_loop(env_factory("frozenlake", size=3, slippery=True), [1], 3)
    with pytest.raises(ValueError, match="longer than the episodes"):
        best_open_loop(env_factory("frozenlake", size=3, max_steps=3), [1], 4)
    with pytest.raises(ValueError, match="length must be >= 1"):
        best_open_loop(env_factory("frozenlake", size=3), [1], 0)
    with pytest.raises(ValueError, match="at least one task"):
        best_open_loop(env_factory("frozenlake", size=3), [], 3)
    with pytest.raises(ValueError, match="sequences"):
        best_open_loop(env_factory("frozenlake", size=3, max_steps=20), [1], 11)
