"""TextWorld games generated offline: determinism, status-line stripping, walkthrough wins."""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from testkit.envs import need

from pyagentrl.envs import EnvBatch, env_factory, make_env
from pyagentrl.envs.textworld_env import clean_feedback, generate_game, task_text

need("textworld")


def test_same_seed_gives_byte_identical_game(tmp_path) -> None:
    a = generate_game(7, cache_dir=tmp_path / "a")
    b = generate_game(7, cache_dir=tmp_path / "b")
    assert hashlib.sha256(a.read_bytes()).digest() == hashlib.sha256(b.read_bytes()).digest()
    first_a = make_env("textworld", cache_dir=tmp_path / "a").reset(7)
    first_b = make_env("textworld", cache_dir=tmp_path / "b").reset(7)
    assert first_a.observation == first_b.observation and first_a.anchor == first_b.anchor


def test_walkthrough_wins_and_anchors_have_no_status_line() -> None:
    env = make_env("textworld")
    first = env.reset(1)
    assert first.task and first.admissible_actions
    assert "$$" not in first.observation  # banner removed
    anchors = [first.anchor]
    for command in env.walkthrough():
        out = env.step(f"<action>{command}</action>")
        assert out.action_valid, command
        anchors.append(out.anchor)
    assert out.done and out.won and out.reward > 0
    for anchor in anchors:
        assert not re.search(r"-=.*=-\s*\d+/\d+\s*$", anchor) and not anchor.rstrip().endswith(">")
    assert "The End" not in out.anchor and "RESTART" not in out.observation  # the end-of-game trailer is gone
    assert not first.task.lower().startswith(("welcome", "hey", "you are now playing", "i hope", "it's time"))
    assert "TextWorld" not in first.task and first.task in first.observation


def test_reset_to_another_game_and_back() -> None:
    env = make_env("textworld")
    first = env.reset(1)
    env.step(first.admissible_actions[0])
    assert env.reset(2).observation != first.observation
    assert env.reset(1).observation == first.observation


def test_clean_feedback_strips_status_line_and_trailer() -> None:
    raw = "\nYou take the key.\n\n\n\n>                                 -= Bedroom =-0/3"
    assert clean_feedback(raw) == "You take the key."
    end = (
        "You eat the meal.\n\nYour score has just gone up by one point.\n\n        *** The End ***\n\n"
        "You scored 1 out of a possible 1, in 4 turns.\n\nWould you like to RESTART, RESTORE a saved game, QUIT "
        "or UNDO the last command?\n>  -= Kitchen =-1/4"
    )
    assert clean_feedback(end) == "You eat the meal.\n\nYour score has just gone up by one point."


@pytest.mark.parametrize(
    ("objective", "task"),
    [
        ("Welcome to TextWorld! Your task for today is to go east.", "Your task for today is to go east."),
        (
            "Who's got a virtual machine and is about to play through an exciting round of TextWorld? You do! "
            "First off, go north. Then take the key.",
            "First off, go north. Then take the key.",
        ),
        (
            "I hope you're ready to go into rooms and interact with objects, because you've just entered TextWorld! "
            "Here is your task for today. First step, eat.",
            "First step, eat.",
        ),
        ("You are hungry! Let's cook a delicious meal.", "You are hungry! Let's cook a delicious meal."),
    ],
)
def test_task_text_drops_the_greeting(objective: str, task: str) -> None:
    assert task_text(objective) == task


def test_numpy_seed_is_a_seed() -> None:
    env = make_env("textworld")
    assert env.reset(np.int64(1)).observation == env.reset(1).observation


def test_game_path_is_a_task() -> None:
    # generate_game returns a Path, and a Path is as good a task as its str.
    env = make_env("textworld")
    path = generate_game(1)
    assert env.reset(path).observation == env.reset(str(path)).observation == env.reset(1).observation


_COOKING = """
import hashlib, json, sys
from pyagentrl.envs import make_env
from pyagentrl.envs.textworld_env import generate_game
settings = {"recipe": 2, "take": 1, "go": 6, "open": True, "cook": True}
out = {}
for seed in (2, 3):
    path = generate_game(seed, cache_dir=sys.argv[1], challenge="tw-cooking", challenge_settings=settings)
    env = make_env("textworld", cache_dir=sys.argv[1], challenge="tw-cooking", challenge_settings=settings)
    first = env.reset(seed)
    out[seed] = [hashlib.sha256(p.read_bytes()).hexdigest() for p in (path, path.with_suffix(".json"))]
    out[seed].append(first.observation)
print(json.dumps(out))
"""


@pytest.mark.slow
def test_cooking_games_are_identical_across_hash_seeds(tmp_path) -> None:
    runs = []
    for hash_seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": hash_seed}
        cmd = [sys.executable, "-c", textwrap.dedent(_COOKING), str(tmp_path / hash_seed)]
        run = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300, check=True)
        runs.append(json.loads(run.stdout.strip().splitlines()[-1]))
    assert runs[0] == runs[1]
    assert runs[0]["2"][0] != runs[0]["3"][0]  # the task seed changes the game


@pytest.mark.slow
def test_cooking_defaults_walkthrough_wins_and_recipe_follows_the_seed() -> None:
    env = make_env("textworld", challenge="tw-cooking")  # split and recipe_seed need not be given
    recipes = set()
    for seed in (1, 2):
        first = env.reset(seed)
        assert first.task.startswith("You are hungry")
        recipes.add(env.step("examine cookbook").observation)
        for command in env.walkthrough():
            out = env.step(command)
        assert out.done and out.won
    assert len(recipes) == 2


def test_group_members_identical_in_thread_batch() -> None:
    with EnvBatch(env_factory("textworld"), num_groups=1, group_size=3, workers=3, backend="thread") as batch:
        out = batch.reset([1])
        assert len({r.observation for r in out}) == 1
        out = batch.step(["look", "inventory", "<action>dance</action>"])
        assert out[0].action_valid and out[1].action_valid and not out[2].action_valid
        assert out[2].observation == batch.reset([1])[2].observation


def test_challenge_game_walkthrough_wins() -> None:
    env = make_env("textworld", challenge="tw-coin_collector", challenge_settings={"level": 3})
    first = env.reset(2)
    assert first.admissible_actions
    for command in env.walkthrough():
        out = env.step(command)
        assert out.action_valid, command
    assert out.done and out.won
    with pytest.raises(ValueError, match="challenge"):
        make_env("textworld", challenge="tw-chess").reset(0)


def test_cold_cache_thread_batch_generates_each_game_once(tmp_path) -> None:
    factory = env_factory("textworld", cache_dir=tmp_path)
    with EnvBatch(factory, num_groups=2, group_size=3, workers=6, backend="thread") as batch:
        out = batch.reset([3, 4])
        assert not any("error" in r.info for r in out), [r.info.get("error") for r in out]
        assert len({r.observation for r in out[:3]}) == 1 and len({r.observation for r in out[3:]}) == 1
    assert sorted(p.name for p in tmp_path.rglob("*") if p.is_file()) == [
        "game_3.json", "game_3.z8", "game_4.json", "game_4.z8",
    ]  # fmt: skip
