"""`register_env`: a new environment family, with its prompts, in one decorated definition."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from testkit.envs import CounterEnv

from pyagentrl.envs import (
    ENVS,
    EnvBatch,
    EnvOptionError,
    PromptBuilder,
    StepResult,
    Task,
    TextEnv,
    check_env_options,
    env_factory,
    make_env,
    prompt_family,
    register_env,
)
from pyagentrl.envs.prompts import INTRO

SWITCH_INTRO = "You are an expert agent in front of a light switch.\nReach the state 'light on'."


class _Switch(TextEnv):
    """A light that ``flip`` turns on and off; won when it is on."""

    def __init__(self, max_steps: int = 5, start_on: bool = False) -> None:
        super().__init__(max_steps=max_steps)
        self.start_on, self.on = start_on, start_on

    def _result(self, reward: float = 0.0) -> StepResult:
        text = f"light {'on' if self.on else 'off'}"
        return StepResult(text, text, reward, self.on, self.on, ("flip", "wait"))

    def _reset(self, task: Task) -> StepResult:
        self.on = self.start_on
        return self._result()

    def _step(self, action: str) -> StepResult:
        if action == "flip":
            self.on = not self.on
        return self._result(1.0 if self.on else 0.0)


@pytest.fixture
def registry() -> Iterator[None]:
    """Whatever a test registers is gone after it (the tables are module-level)."""
    envs, intro = dict(ENVS), dict(INTRO)
    yield
    ENVS.clear()
    ENVS.update(envs)
    INTRO.clear()
    INTRO.update(intro)


def _register_switch() -> type[_Switch]:
    @register_env("switch", intro=SWITCH_INTRO)
    class SwitchEnv(_Switch):
        pass

    return SwitchEnv


def test_registered_env_plays_through_batch_and_prompts(registry: None) -> None:
    switch = _register_switch()
    assert ENVS["switch"] == (switch, "switch") and prompt_family("switch") == "switch"
    assert isinstance(make_env("switch", start_on=True), switch)
    with EnvBatch(env_factory("switch", max_steps=3), num_groups=2, group_size=2, backend="serial") as batch:
        first = batch.reset([0, 1])
        prompts = PromptBuilder(prompt_family("switch"))
        prompts.reset(first)
        messages = prompts.messages()
        assert messages[0][-1]["content"].startswith(SWITCH_INTRO)
        assert "light off" in messages[0][-1]["content"]
        replies = ["<action>flip</action>", "wait", "<action>wait</action>", "flip"]
        out = batch.step(replies)
        prompts.record(replies, out)
    assert [r.observation for r in out] == ["light on", "light off", "light off", "light on"]
    assert [r.won for r in out] == [True, False, False, True] and all(r.action_valid for r in out)


def test_a_family_can_share_registered_prompts(registry: None) -> None:
    _register_switch()

    @register_env("switch_on", prompts="switch")
    def switch_on(**config: Any) -> TextEnv:
        return _Switch(start_on=True, **config)

    assert prompt_family("switch_on") == "switch" and make_env("switch_on").reset(0).won
    assert prompt_family("alfworld_gen") == "alfworld"  # the built-ins share theirs the same way


def test_duplicate_registration_is_refused(registry: None) -> None:
    switch = _register_switch()
    before, intro = dict(ENVS), dict(INTRO)
    with pytest.raises(ValueError, match="environment 'switch' is already registered"):
        register_env("switch", intro=SWITCH_INTRO)(_Switch)
    with pytest.raises(ValueError, match="environment 'frozenlake' is already registered"):
        register_env("frozenlake", intro="A lake.")(_Switch)
    # a prompt family keeps its intro, and a refused registration leaves both tables as they were
    with pytest.raises(ValueError, match="prompt family 'switch' is already registered with another intro"):
        register_env("switch_2", prompts="switch", intro="Another intro.")(_Switch)
    with pytest.raises(ValueError, match="prompt family 'switch_3' is not registered; give intro="):
        register_env("switch_3")(_Switch)
    assert before == ENVS and intro == INTRO
    assert register_env("switch", intro=SWITCH_INTRO)(switch) is switch  # the same definition again: a no-op
    assert before == ENVS


def test_a_rerun_definition_replaces_its_entry(registry: None) -> None:
    # a reloaded module or a rerun notebook cell: the same top-level definition, a new class object
    source = "from pyagentrl.envs import register_env\n@register_env('rerun', intro={intro!r})\ndef make(): pass\n"
    first, second = {"__name__": "some_module"}, {"__name__": "some_module"}
    exec(source.format(intro="First."), first)
    exec(source.format(intro="Second."), second)
    assert ENVS["rerun"] == (second["make"], "rerun") and INTRO["rerun"] == "Second."


def test_unknown_name_lists_the_known_ones(registry: None) -> None:
    _register_switch()
    known = sorted(ENVS)
    assert "switch" in known and "frozenlake" in known
    for lookup in (make_env, env_factory, prompt_family):
        with pytest.raises(ValueError, match="unknown env name 'nope'") as caught:
            lookup("nope")
        assert str(caught.value).endswith(f"expected one of {known}")


def test_factory_of_a_registered_env_builds_in_a_process_worker(registry: None) -> None:
    # the worker never registers "counter_registered": the factory carries the class, not the name
    register_env("counter_registered", intro="You are counting.")(CounterEnv)
    with EnvBatch(env_factory("counter_registered", max_steps=2), 1, 1, workers=1, backend="process") as batch:
        assert batch.reset([5])[0].observation == "value 5"
        assert batch.step(["inc"])[0].observation == "value 6"


def test_import_stays_lazy() -> None:
    code = (
        "import sys, pyagentrl.envs\n"
        "heavy = ['frozenlake', 'sokoban', 'textworld_env', 'twx', 'alfworld_env', 'alfworld_gen']\n"
        "loaded = [m for m in ['textworld', 'alfworld', 'py4j', 'gym_sokoban'] + ['pyagentrl.envs.' + h for h in heavy]"
        " if m in sys.modules]\n"
        "print(loaded)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


@pytest.mark.parametrize(
    ("name", "options", "option", "problem"),
    [
        ("frozenlake", {"bogus": 1}, "bogus", "unknown option of frozenlake; expected one of directions, map_seed"),
        ("frozenlake", {"size": "4"}, "size", "must be int, got '4'"),
        ("frozenlake", {"size": 4.5}, "size", "must be int, got 4.5"),
        ("frozenlake", {"slippery": "yes"}, "slippery", "must be bool, got 'yes'"),
        ("frozenlake", {"p_frozen": float("nan")}, "p_frozen", "must be a finite number, got nan"),
        ("frozenlake", {"size": 1}, "size", "must be at least 2, got 1"),  # the constructor's own check
        ("frozenlake", {"max_steps": 0}, "max_steps", "must be positive, got 0"),  # TextEnv's
        ("sokoban", {"dim_room": [6]}, "dim_room", "must be a list [int, int], got [6]"),
        ("sokoban", {"num_boxes": 0}, "num_boxes", "must be positive, got 0"),
        ("alfworld_gen", {"source": "data"}, "source", "unknown option of alfworld_gen"),  # the family fixes it
        ("alfworld_gen", {"task_types": "pick"}, "task_types", "must be a list of str, got 'pick'"),
        ("twx", {"fold": "valid"}, "fold", "must be 'train', 'dev' or 'test', got 'valid'"),
        ("twx", {"envs_per_jvm": 0}, "envs_per_jvm", "must be >= 1, got 0"),
    ],
)
def test_options_a_family_would_refuse_are_named(name: str, options: dict, option: str, problem: str) -> None:
    with pytest.raises(EnvOptionError) as caught:
        check_env_options(name, options)
    assert caught.value.option == option and caught.value.problem.startswith(problem)


def test_options_are_checked_without_starting_a_game(monkeypatch: pytest.MonkeyPatch) -> None:
    import pyagentrl.envs.twx as twx

    def no_jvm(envs_per_jvm: int) -> None:
        raise AssertionError("a JVM was started")

    monkeypatch.setattr(twx, "_new_game_server", no_jvm)
    check_env_options("twx", {"game": "coin", "anchor": "state", "max_steps": 5})
    check_env_options("frozenlake", {"size": 4, "max_steps": 4, "map_seed": 3})
    check_env_options("sokoban", {"dim_room": [6, 6], "num_boxes": 1})


def test_a_registered_family_is_checked_by_its_own_signature(registry: None) -> None:
    _register_switch()
    check_env_options("switch", {"start_on": True})
    with pytest.raises(
        EnvOptionError, match=r"^colour: unknown option of switch; expected one of max_steps, start_on$"
    ):
        check_env_options("switch", {"colour": "red"})

    @register_env("switch_fn", prompts="switch")
    def switch_fn(**config: Any) -> TextEnv:  # takes anything: the constructor itself decides
        return _Switch(**config)

    with pytest.raises(EnvOptionError, match="unexpected keyword argument 'colour'") as caught:
        check_env_options("switch_fn", {"colour": "red"})
    assert caught.value.option is None
