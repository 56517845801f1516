"""ALFWorld: tasks generated offline (every task type solved by the planner), and the real-data loader."""

from __future__ import annotations

import hashlib
import json
import os
import stat
from pathlib import Path

import numpy as np
import pytest
from testkit.envs import need

from pyagentrl.envs import EnvBatch, env_factory, make_env
from pyagentrl.envs.alfworld_gen import TASK_TYPES, generate_game

need("alfworld")


@pytest.mark.parametrize("seed", range(len(TASK_TYPES)))
def test_generated_task_is_won_by_its_plan(seed: int) -> None:
    env = make_env("alfworld_gen")
    first = env.reset(seed)
    assert TASK_TYPES[seed] in first.info["gamefile"]
    assert first.observation.startswith("-= Welcome to TextWorld, ALFRED! =-")
    assert first.task and first.task in first.observation and "help" not in first.admissible_actions
    plan = env.walkthrough()
    for command in plan:
        out = env.step(f"<think>plan</think><action>{command}</action>")
        assert out.action_valid, command
    assert out.done and out.won and out.reward == 10.0


def test_game_file_is_alfworld_format_and_deterministic(tmp_path: Path) -> None:
    a = generate_game(11, cache_dir=tmp_path / "a")
    b = generate_game(11, cache_dir=tmp_path / "b")
    assert hashlib.sha256(a.read_bytes()).digest() == hashlib.sha256(b.read_bytes()).digest()
    game = json.loads(a.read_text())
    assert {"pddl_domain", "grammar", "pddl_problem", "solvable"} <= set(game) and game["solvable"] is True
    assert "UNKNOWN GOAL" not in game["grammar"]


def test_engine_caches_change_nothing() -> None:
    from pyagentrl.envs import pddl_speedup

    def rollout(cached: bool) -> list[tuple[str, tuple[str, ...]]]:
        env = make_env("alfworld_gen")  # construction installs the caches
        if not cached:
            pddl_speedup.uninstall()
        trace = []
        for seed in (4, 4, 2):  # a repeated game exercises the translation cache
            out = env.reset(seed)
            trace.append((out.observation, out.admissible_actions))
            for k in range(8):
                out = env.step(out.admissible_actions[(7 * k) % len(out.admissible_actions)])
                trace.append((out.observation, out.admissible_actions))
        return trace

    try:
        assert rollout(cached=True) == rollout(cached=False)
    finally:
        pddl_speedup.install()


def test_reset_reuses_engine_across_games() -> None:
    env = make_env("alfworld_gen")
    first = env.reset(0)
    env.step("look")
    other = env.reset(1)
    assert other.observation != first.observation and other.task != first.task
    assert env.reset(0).observation == first.observation


def test_invalid_action_and_step_limit() -> None:
    env = make_env("alfworld_gen", max_steps=3)
    first = env.reset(0)
    out = env.step("<action>teleport home</action>")
    assert not out.action_valid and out.observation == first.observation and not out.done
    env.step("look")
    out = env.step("look")
    assert out.done and not out.won and out.reward == 0.0 and out.info["truncated"]


def _fake_data(root: Path, seeds: list[int]) -> Path:
    """An $ALFWORLD_DATA tree in ALFWorld's layout, made of generated games (plus entries the loader skips)."""
    for seed in seeds:
        game = generate_game(seed)
        task_type = json.loads(game.read_text())["pyagentrl"]["task_type"]
        trial = root / "json_2.1.1" / "train" / f"{task_type}-Obj-{seed}" / "trial_1"
        trial.mkdir(parents=True)
        (trial / "game.tw-pddl").write_text(game.read_text())
        (trial / "traj_data.json").write_text(json.dumps({"task_type": task_type}))
    skipped = root / "json_2.1.1" / "train" / "pick_and_place_simple-Obj-unsolvable" / "trial_1"
    skipped.mkdir(parents=True)
    (skipped / "game.tw-pddl").write_text(json.dumps({"solvable": False}))
    (skipped / "traj_data.json").write_text(json.dumps({"task_type": "pick_and_place_simple"}))
    return root


def test_real_data_loader_plays_games_from_alfworld_data(tmp_path: Path, monkeypatch) -> None:
    root = _fake_data(tmp_path / "alfworld", [0, 2])
    monkeypatch.setenv("ALFWORLD_DATA", str(root))
    env = make_env("alfworld", split="train")
    assert env.num_games == 2
    first = env.reset(1)  # second game in sorted order: the heat task of seed 2
    assert "pick_heat_then_place_in_recep" in first.info["gamefile"] and first.task
    assert env.reset(3).observation == first.observation  # seeds wrap around the split
    with pytest.raises(ValueError, match="split"):
        make_env("alfworld", split="test")
    monkeypatch.delenv("ALFWORLD_DATA")
    with pytest.raises(ValueError, match="ALFWORLD_DATA"):
        make_env("alfworld")


def test_thread_batch_group_members_identical() -> None:
    with EnvBatch(env_factory("alfworld_gen"), num_groups=2, group_size=2, workers=4, backend="thread") as batch:
        out = batch.reset([0, 1])
        assert out[0].observation == out[1].observation != out[2].observation == out[3].observation
        out = batch.step(["look", "inventory", "look", "<action>x</action>"])
        assert [r.action_valid for r in out] == [True, True, True, False]


def test_cold_cache_thread_batch_generates_each_game_once(tmp_path: Path, monkeypatch) -> None:
    # Group members ask for the same game at once; they used to share one trial file (and delete it under
    # each other's feet: "Unable to find game ...try-...").
    monkeypatch.setenv("PYAGENTRL_CACHE", str(tmp_path))
    with EnvBatch(env_factory("alfworld_gen"), num_groups=2, group_size=4, workers=8, backend="thread") as batch:
        out = batch.reset(np.array([3, 4]))
        assert not any("error" in r.info for r in out), [r.info.get("error") for r in out]
        assert len({r.observation for r in out[:4]}) == 1 and len({r.observation for r in out[4:]}) == 1
    files = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert sorted(p.name for p in files) == [
        "pick_cool_then_place_in_recep-3.tw-pddl",
        "pick_two_obj_and_place-4.tw-pddl",
    ]
    umask = os.umask(0)
    os.umask(umask)
    assert all(stat.S_IMODE(p.stat().st_mode) == 0o666 & ~umask for p in files)  # readable by others, like any file
