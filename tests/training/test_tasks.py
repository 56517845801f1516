"""Tasks counted by content (pyagentrl.training.tasks) and scores whose intervals count them
(pyagentrl.training.evaluate.by_content)."""

from __future__ import annotations

import pytest
from testkit.training import CONFIGS, TINY

from pyagentrl.envs.frozenlake import random_start_goal_map
from pyagentrl.training.config import load_config
from pyagentrl.training.evaluate import by_content, describe_tasks, interval_text, score_line
from pyagentrl.training.seeding import held_out_seeds
from pyagentrl.training.stats import wilson_interval
from pyagentrl.training.tasks import TaskSet, trained_keys


def test_a_pinned_map_is_one_distinct_task_and_one_the_run_trained_on():
    config = load_config(CONFIGS / "default.yaml")
    held_out = TaskSet.of(config, held_out_seeds(64))
    assert held_out.distinct == 1 and len(held_out.keys) == 64
    assert set(held_out.keys) <= trained_keys(config)
    text = describe_tasks(config, held_out, 1)
    assert "1 distinct task x 64 samples" in text and "1 of 1 trained on" in text


def test_random_maps_are_distinct_by_their_map_start_and_goal():
    config = load_config(CONFIGS / "learn.yaml")
    assert config.env.options.get("random_start_goal") and config.env.options.get("map_seed") is None
    seeds = held_out_seeds(16)
    held_out = TaskSet.of(config, seeds)
    size, p = config.env.options["size"], config.env.options.get("p_frozen", 0.8)
    for key, seed in zip(held_out.keys, seeds, strict=True):  # the lake's own map, start (S, where P stands) and goal
        rows = random_start_goal_map(size, p, seed)
        cells = {"S": "P", "F": "_", "H": "O"}  # the start is where the player stands
        drawn = [" ".join(cells.get(c, c) for c in r) for r in rows]
        assert held_out.contents[key].splitlines()[:size] == drawn
    expected = len({tuple(random_start_goal_map(size, p, s)) for s in seeds})
    assert held_out.distinct == expected
    assert not set(held_out.keys) & trained_keys(config)  # held-out seeds give maps no training seed gave


def _entry(won: list[int], temperature: float) -> dict:
    return {
        "tasks": len(won),
        "successes": sum(won),
        "success_rate": sum(won) / len(won),
        "ci95": list(wilson_interval(sum(won), len(won))),
        "won": won,
        "temperature": temperature,
    }


def test_greedy_copies_of_one_task_are_one_trial_and_samples_keep_their_interval():
    one = TaskSet(["a"] * 8, {"a": "map"})
    greedy = by_content(_entry([1] * 8, 0.0), one, deterministic=True)
    assert greedy["ci95"] is None and greedy["distinct_tasks"] == 1
    assert "no interval: 8 greedy episodes of 1 distinct task are one trial" in score_line("trained", greedy)
    sampled = by_content(_entry([1, 0, 1, 1, 0, 1, 1, 1], 1.0), one, deterministic=False)
    assert sampled["ci95"] == list(wilson_interval(6, 8))
    assert interval_text(sampled).endswith("over 8 samples of 1 distinct task")


def test_greedy_copies_count_once_and_disagreeing_copies_are_not_deterministic():
    two = TaskSet(["a", "b", "a", "b", "a", "b"], {"a": "map a", "b": "map b"})
    greedy = by_content(_entry([1, 0, 1, 0, 1, 0], 0.0), two, deterministic=True)
    assert greedy["ci95"] == list(wilson_interval(1, 2))  # two distinct tasks, one won
    assert "over its 2 distinct tasks" in interval_text(greedy)
    slippery = by_content(_entry([1, 0, 0, 0, 1, 0], 0.0), two, deterministic=True)
    assert slippery["ci95"] == list(wilson_interval(2, 6))


@pytest.mark.parametrize("overrides", [[], ["env.options.map_seed=3"]])
def test_the_tiny_configs_tasks(overrides):
    config = load_config(TINY, overrides)
    held_out = TaskSet.of(config, held_out_seeds(8))
    assert held_out.distinct == 1 if overrides else held_out.distinct > 1
    assert all(len(k) == 16 for k in held_out.keys)
