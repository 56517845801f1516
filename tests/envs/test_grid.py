"""FrozenLake and Sokoban: seeding, group identity, text rendering, rewards, solvers."""

from __future__ import annotations

from collections import deque
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from testkit.envs import need

from pyagentrl.envs import EnvBatch, env_factory, make_env

need("gymnasium")


def _lake_path(grid: str) -> list[str]:
    """Breadth-first path from P to G avoiding holes on the text grid."""
    rows = [line.split(" ") for line in grid.splitlines()]
    start = next((r, c) for r, row in enumerate(rows) for c, ch in enumerate(row) if ch == "P")
    moves = {"up": (-1, 0), "down": (1, 0), "left": (0, -1), "right": (0, 1)}
    parent: dict[tuple[int, int], tuple[tuple[int, int], str] | None] = {start: None}
    queue = deque([start])
    while queue:
        cell = queue.popleft()
        if rows[cell[0]][cell[1]] == "G":
            path = []
            while (link := parent[cell]) is not None:
                cell, move = link
                path.append(move)
            return path[::-1]
        for move, (dr, dc) in moves.items():
            nxt = (cell[0] + dr, cell[1] + dc)
            inside = 0 <= nxt[0] < len(rows) and 0 <= nxt[1] < len(rows[0])
            if inside and nxt not in parent and rows[nxt[0]][nxt[1]] != "O":
                parent[nxt] = (cell, move)
                queue.append(nxt)
    raise AssertionError("generated map has no path")


@pytest.mark.parametrize("name", ["frozenlake", "sokoban"])
def test_same_seed_same_first_observation_across_constructions(name: str) -> None:
    firsts = [make_env(name).reset(seed).observation for seed in range(5)]
    again = [make_env(name).reset(seed).observation for seed in range(5)]
    assert firsts == again
    assert len(set(firsts)) > 1  # the seed does change the task


def test_frozenlake_plain_text_and_goal_reward() -> None:
    for seed in range(5):
        env = make_env("frozenlake", size=5)
        first = env.reset(seed)
        assert "\x1b" not in first.observation and first.observation.count("P") == 1
        assert first.admissible_actions == ("up", "down", "left", "right")
        for move in _lake_path(first.observation):
            out = env.step(f"<think>safe</think><action>{move}</action>")
        assert out.done and out.won and out.reward == 1.0


def test_frozenlake_random_start_goal_maps_are_solvable_and_vary() -> None:
    starts, goals = set(), set()
    for seed in range(40):
        env = make_env("frozenlake", size=4, random_start_goal=True)
        first = env.reset(seed)
        assert first.observation == make_env("frozenlake", size=4, random_start_goal=True).reset(seed).observation
        cells = [line.split(" ") for line in first.observation.splitlines()]
        starts.add(next((r, c) for r, row in enumerate(cells) for c, ch in enumerate(row) if ch == "P"))
        goals.add(next((r, c) for r, row in enumerate(cells) for c, ch in enumerate(row) if ch == "G"))
        assert first.observation.count("P") == 1 and first.observation.count("G") == 1
        for move in _lake_path(first.observation):  # an independent search finds a way, and it wins
            out = env.step(f"<action>{move}</action>")
        assert out.done and out.won and out.reward == 1.0
    assert len(starts) >= 8 and len(goals) >= 8  # gymnasium's own maps: always (0, 0) and (3, 3)
    with pytest.raises(TypeError, match="random_start_goal must be a bool"):
        make_env("frozenlake", random_start_goal="yes")


def test_frozenlake_map_seed_pins_the_map_of_every_task() -> None:
    from pyagentrl.envs.frozenlake import random_start_goal_map

    pinned = {make_env("frozenlake", size=4, map_seed=7).reset(seed).observation for seed in range(20)}
    assert len(pinned) == 1  # every task seed plays the same map
    free = {make_env("frozenlake", size=4).reset(seed).observation for seed in range(20)}
    assert len(free) > 1
    # The pinned map is the one the map seed draws as a task seed of its own.
    assert pinned == {make_env("frozenlake", size=4).reset(7).observation}
    env = make_env("frozenlake", size=4, random_start_goal=True, map_seed=3)
    env.reset(123)
    assert env._desc == random_start_goal_map(4, 0.8, 3)
    for bad in (-1, 1.5, True):
        with pytest.raises(ValueError, match="map_seed must be a non-negative integer"):
            make_env("frozenlake", map_seed=bad)


def test_frozenlake_directions_agree_with_the_grid_and_the_moves() -> None:
    """The directions line against the grid it sits under (goal offset) and against the lake's own transitions
    (what each move runs into: a hole ends the episode unrewarded, the goal wins, an edge leaves the player still)."""
    seen = set()
    for seed in range(30):
        env = make_env("frozenlake", size=4, random_start_goal=True, directions=True, max_steps=50)
        plain = make_env("frozenlake", size=4, random_start_goal=True)
        out, plain_out = env.reset(seed), plain.reset(seed)
        assert out.anchor == plain_out.observation == plain_out.anchor  # the anchor stays the grid
        for move in ["up", "left", "down", "right"] * 3:
            grid, line = out.observation.rsplit("\n", 1)
            cells = [row.split(" ") for row in grid.splitlines()]
            (pr, pc), (gr, gc) = (
                (r, c) for ch in "PG" for r, row in enumerate(cells) for c, x in enumerate(row) if x == ch
            )
            goal, moves = line.removeprefix("Goal: ").split(". ", 1)
            offset = {name: int(n) for n, name in (part.split(" ") for part in goal.split(", "))}
            assert offset.get("down", 0) - offset.get("up", 0) == gr - pr
            assert offset.get("right", 0) - offset.get("left", 0) == gc - pc
            ahead = dict(part.split(": ") for part in moves.rstrip(".").split(", "))
            assert list(ahead) == ["up", "down", "left", "right"]
            seen.add(ahead[move])
            nxt = env.step(f"<action>{move}</action>")
            if ahead[move] == "hole":
                assert nxt.done and not nxt.won
            elif ahead[move] == "goal":
                assert nxt.done and nxt.won
            elif ahead[move] == "edge":
                assert nxt.observation == out.observation and not nxt.done
            else:
                assert not nxt.done and "P" in nxt.observation and nxt.observation != out.observation
            if nxt.done:
                break
            out = nxt
    assert seen == {"ice", "hole", "goal", "edge"}
    first = make_env("frozenlake", size=4, map_seed=0, directions=True).reset(0).observation
    # gymnasium's map for seed 0: start top-left, goal bottom-right, a hole below the start
    assert (
        first
        == "P _ _ _\nO O _ _\n_ O O _\nO _ _ G\nGoal: 3 down, 3 right. up: edge, down: hole, left: edge, right: ice."
    )
    with pytest.raises(TypeError, match="directions must be a bool"):
        make_env("frozenlake", directions="yes")


def test_frozenlake_hole_ends_without_reward() -> None:
    env = make_env("frozenlake", size=4)
    for seed in range(20):
        first = env.reset(seed)
        rows = [line.split(" ") for line in first.observation.splitlines()]
        if rows[0][1] == "O":  # a hole right of the start
            out = env.step("right")
            assert out.done and not out.won and out.reward == 0.0
            return
    pytest.skip("no map with a hole next to the start among these seeds")


def test_sokoban_solver_wins_with_reference_rewards() -> None:
    from pyagentrl.envs.sokoban import solve

    for seed in range(6):
        env = make_env("sokoban", dim_room=(6, 6), num_boxes=2)
        env.reset(seed)
        plan = solve(env.fixed, env.state)
        assert plan, f"seed {seed} unsolved"
        before = int((env.state == 3).sum())  # boxes already on targets
        for move in plan:
            out = env.step(f"<action>{move}</action>")
            after = out.info["boxes_on_target"]
            expected = -0.1 + (after > before) - (after < before) + (10.0 if out.won else 0.0)
            assert out.reward == pytest.approx(expected)
            before = after
        assert out.done and out.won


def test_sokoban_wall_bump_keeps_state() -> None:
    env = make_env("sokoban")
    first = env.reset(0)
    rows = first.observation.splitlines()
    r = next(i for i, row in enumerate(rows) if "P" in row or "S" in row)
    c = rows[r].split(" ").index("P") if "P" in rows[r] else rows[r].split(" ").index("S")
    for move, (dr, dc) in {"up": (-1, 0), "down": (1, 0), "left": (0, -1), "right": (0, 1)}.items():
        if rows[r + dr].split(" ")[c + dc] == "#":
            out = env.step(move)
            assert out.observation == first.observation and out.reward == pytest.approx(-0.1)
            assert out.info["action_is_effective"] is False and out.action_valid
            return
    pytest.skip("player not next to a wall")


def test_sokoban_charges_a_turn_that_names_no_move() -> None:
    # gym-sokoban charges its no-op -0.1 like any step, and verl-agent plays an invalid reply as that no-op. A free
    # invalid reply would make ten replies of nonsense (0) score above ten wall bumps (-1): the policy learns to
    # stop answering. FrozenLake charges no turn, so its invalid reply stays at 0.
    env = make_env("sokoban", max_steps=3)
    first = env.reset(0)
    out = env.step("no move here")
    assert not out.action_valid and out.observation == first.observation and out.reward == pytest.approx(-0.1)
    lake = make_env("frozenlake", size=3)
    lake.reset(0)
    out = lake.step("no move here")
    assert not out.action_valid and out.reward == 0.0


def test_sokoban_seeding_is_thread_safe() -> None:
    from pyagentrl.envs.sokoban import generate

    serial = [generate(s, (7, 7), 2)[1].tobytes() for s in range(12)]
    with ThreadPoolExecutor(6) as pool:
        threaded = list(pool.map(lambda s: generate(s, (7, 7), 2)[1].tobytes(), range(12)))
    assert serial == threaded


def test_sokoban_generation_leaves_global_rngs_alone(monkeypatch) -> None:
    import random

    from pyagentrl.envs.sokoban import generate

    expected = [generate(s, (7, 7), 2)[1].tobytes() for s in range(4)]

    def forbidden(*args: object) -> None:
        raise AssertionError("the global RNG was touched")

    for target in (random, np.random):
        for name in ("seed", "getstate", "setstate", "get_state", "set_state"):
            if hasattr(target, name):
                monkeypatch.setattr(target, name, forbidden)
    assert [generate(s, (7, 7), 2)[1].tobytes() for s in range(4)] == expected


@pytest.mark.parametrize("name", ["frozenlake", "sokoban"])
@pytest.mark.parametrize("backend", ["serial", "process"])
def test_numpy_integer_seeds(name: str, backend: str) -> None:
    with EnvBatch(env_factory(name), num_groups=2, group_size=2, workers=2, backend=backend) as batch:
        out = batch.reset(np.arange(3, 5))
        assert [r.observation for r in out] == [make_env(name).reset(s).observation for s in (3, 3, 4, 4)]
    with pytest.raises(ValueError, match="integer seed"):
        make_env(name).reset(True)


@pytest.mark.parametrize("backend", ["thread", "process"])
def test_batch_groups_identical(backend: str) -> None:
    factory = env_factory("sokoban", dim_room=(6, 6), num_boxes=1)
    with EnvBatch(factory, num_groups=4, group_size=3, workers=2, backend=backend) as batch:
        out = batch.reset([0, 1, 2, 3])
        for g in range(4):
            assert len({r.observation for r in out[3 * g : 3 * g + 3]}) == 1
        out = batch.step(["up", "down", "left"] * 4)
        assert len(out) == 12 and all(r.action_valid for r in out)


def test_same_seed_same_task_in_a_fresh_interpreter() -> None:
    import subprocess
    import sys

    code = (
        "from pyagentrl.envs import make_env\n"
        "for name in ('frozenlake', 'sokoban'):\n"
        "    for seed in (3, 4):\n"
        "        print(repr(make_env(name).reset(seed).observation))\n"
    )
    here = [repr(make_env(n).reset(s).observation) for n in ("frozenlake", "sokoban") for s in (3, 4)]
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.splitlines() == here
