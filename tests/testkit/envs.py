"""Test helpers: optional-package imports, and a pure-Python environment for driver tests (module-level so
that spawned workers can unpickle it)."""

from __future__ import annotations

import os
import shutil
import time

import pytest

from pyagentrl.envs.base import StepResult, Task, TextEnv
from testkit.peers import import_peer

need = import_peer  # skip without the package, except under CI, where it must be installed


def need_program(name: str) -> None:
    """Skip the module when program `name` is not on PATH, except under CI (CI set), where that fails."""
    if shutil.which(name) is None:
        if os.environ.get("CI"):
            pytest.fail(f"{name} is not installed (scripts/setup_envs.sh installs it)", pytrace=False)
        pytest.skip(f"{name} is not installed", allow_module_level=True)


class CounterEnv(TextEnv):
    """Counts up from the seed; ``inc`` adds one, ``boom`` raises, ``die`` kills the process, ``hang`` blocks;
    won at seed+3."""

    def __init__(self, max_steps: int = 10) -> None:
        super().__init__(max_steps=max_steps)
        self.value = 0
        self.goal = 0

    def _result(self, reward: float = 0.0) -> StepResult:
        text = f"value {self.value}"
        won = self.value >= self.goal
        return StepResult(text, text, reward, won, won, ("inc", "boom", "die", "hang", "noop"), task="count")

    def _reset(self, task: Task) -> StepResult:
        if task == -1:
            raise RuntimeError("cannot load task -1")
        assert isinstance(task, int)
        self.value, self.goal = task, task + 3
        return self._result()

    def _step(self, action: str) -> StepResult:
        if action == "boom":
            raise RuntimeError("game crashed")
        if action == "die":
            os._exit(3)
        if action == "hang":
            time.sleep(3600)
        if action == "inc":
            self.value += 1
        return self._result(1.0 if self.value >= self.goal else 0.0)


def make_counter(max_steps: int = 10) -> TextEnv:
    return CounterEnv(max_steps=max_steps)


def make_broken() -> TextEnv:
    raise ImportError("no module named 'game_engine'")
