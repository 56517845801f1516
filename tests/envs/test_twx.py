"""TextWorldExpress through shared JVMs: gold paths win, seeds are reproducible, anchors."""

from __future__ import annotations

import numpy as np
import pytest
from testkit.envs import need, need_program

from pyagentrl.envs import EnvBatch, env_factory, make_env

need("textworld_express")
need_program("java")


def test_gold_path_wins() -> None:
    env = make_env("twx", game="coin")
    for seed in (1, 2):
        gold = env.gold_path(seed)
        first = env.reset(seed)
        assert first.task.startswith("Your task is to")
        for action in gold:
            out = env.step(action)
            assert out.action_valid
        assert out.done and out.won and out.reward > 0


def test_same_seed_same_observation_and_state_anchor() -> None:
    a = make_env("twx", game="cookingworld", game_params="numLocations=2,includeDoors=0", anchor="state")
    b = make_env("twx", game="cookingworld", game_params="numLocations=2,includeDoors=0", anchor="state")
    ra, rb = a.reset(5), b.reset(np.int64(5))
    assert ra.observation == rb.observation and ra.anchor == rb.anchor
    assert "Inventory" in ra.anchor
    look = a.step("look around")
    assert look.anchor == ra.anchor  # looking does not change the state


def test_thread_batch_groups_and_invalid_actions() -> None:
    with EnvBatch(env_factory("twx"), num_groups=2, group_size=3, workers=3, backend="thread") as batch:
        out = batch.reset([3, 4])
        assert len({r.observation for r in out[:3]}) == 1 and len({r.observation for r in out[3:]}) == 1
        out = batch.step(["look around", "<action>fly away</action>", "inventory"] * 2)
        assert [r.action_valid for r in out] == [True, False, True] * 2


def test_bad_game_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="game="):
        make_env("twx", game="no-such-game")
    with pytest.raises(ValueError, match="anchor"):
        make_env("twx", anchor="hash")


def test_closed_games_free_their_jvm_places() -> None:
    from pyagentrl.envs import twx

    before = len(twx._JVMS)
    for _ in range(3):  # 3 rounds of 4 games, 4 per JVM: at most one new JVM
        envs = [make_env("twx", envs_per_jvm=4) for _ in range(4)]
        assert envs[0].reset(1).observation == envs[3].reset(1).observation
        for env in envs:
            env.close()
    assert len(twx._JVMS) <= before + 1
