"""TextWorldExpress (Java, reached through py4j): fast household and puzzle games generated from a seed.

The package starts one JVM per ``TextWorldExpressEnv``; 128 of them would take minutes and several GB. Here the
environments of a process share a few JVMs (``envs_per_jvm`` games each, one ``PythonInterface`` object per
game); py4j serves every calling thread on its own connection, so a thread pool steps them concurrently.

Anchor: the observation by default (as the public reference anchors ALFWorld), or ``anchor="state"``: the
``look`` and ``inventory`` texts that TextWorldExpress returns with every step, a canonical description of the
state that does not depend on the last action's feedback.

Reward: the game's score increase (scores lie in [0, 1]); ``won`` on task success, ``done`` on success or failure.
"""

from __future__ import annotations

import inspect
import threading
from typing import Any

import orjson

from pyagentrl.envs.base import StepResult, Task, TextEnv
from pyagentrl.envs.parsing import ActionParser

_JVM_LOCK = threading.Lock()
_JVMS: list[list[Any]] = []  # [gateway, games it serves now]; a JVM lives until the process exits


def _new_game_server(envs_per_jvm: int) -> tuple[Any, list[Any]]:
    """A fresh ``PythonInterface`` in a JVM of this process that serves fewer than `envs_per_jvm` games,
    and that JVM's slot (hand it to `_release` when the game is closed, so the JVM can serve another)."""
    from py4j.java_gateway import GatewayParameters, JavaGateway, launch_gateway
    from textworld_express import textworld_express as twx

    with _JVM_LOCK:
        slot = next((s for s in _JVMS if s[1] < envs_per_jvm), None)
        if slot is None:
            port, proc = launch_gateway(
                classpath=twx.JAR_PATH,
                die_on_exit=True,
                cwd=twx.BASEPATH,
                javaopts=["-Xverify:none"],
                return_proc=True,
            )
            gateway = JavaGateway(gateway_parameters=GatewayParameters(auto_field=True, port=port), java_process=proc)
            slot = [gateway, 0]
            _JVMS.append(slot)
        slot[1] += 1
        return slot[0].jvm.textworldexpress.runtime.PythonInterface(), slot


def _release(slot: list[Any]) -> None:
    with _JVM_LOCK:
        slot[1] -= 1


def _check_settings(fold: str, anchor: str, envs_per_jvm: int) -> None:
    if anchor not in ("observation", "state"):
        raise ValueError(f"anchor must be 'observation' or 'state', got {anchor!r}")
    if fold not in ("train", "dev", "test"):
        raise ValueError(f"fold must be 'train', 'dev' or 'test', got {fold!r}")
    if envs_per_jvm < 1:
        raise ValueError(f"envs_per_jvm must be >= 1, got {envs_per_jvm}")


class TextWorldExpressEnv(TextEnv):
    """One TextWorldExpress game; an integer task is the game seed.

    Args:
        game: a TextWorldExpress game name (``coin``, ``cookingworld``, ``twc``, ``mapreader``, ``sorting``, ...).
        game_params: its generation parameters, e.g. ``"numLocations=3,includeDoors=0"``.
        fold: ``train``, ``dev`` or ``test`` seed fold.
        anchor: ``"observation"`` or ``"state"`` (see module doc).
        envs_per_jvm: games hosted per JVM.
        max_steps: turns before truncation.
    """

    family = "twx"

    def __init__(
        self,
        game: str = "coin",
        game_params: str = "numLocations=3,includeDoors=0",
        fold: str = "train",
        anchor: str = "observation",
        envs_per_jvm: int = 32,
        max_steps: int = 50,
        parser: ActionParser | None = None,
    ) -> None:
        super().__init__(max_steps=max_steps, parser=parser)
        _check_settings(fold, anchor, envs_per_jvm)
        self.game, self.game_params, self.fold, self.anchor_mode = game, game_params, fold, anchor
        self._server: Any
        self._slot: list[Any] | None
        self._server, self._slot = _new_game_server(envs_per_jvm)
        message = self._server.load(game, game_params)
        if message:
            raise ValueError(f"TextWorldExpress rejected game={game!r}, game_params={game_params!r}: {message}")
        self._score = 0.0
        self._task = ""

    @classmethod
    def check_options(cls, **options: Any) -> None:
        """The constructor's checks without starting a JVM (the game and its parameters are checked when the first
        game loads them)."""
        bound = inspect.signature(cls).bind(**options)
        bound.apply_defaults()
        given = bound.arguments
        TextEnv.__init__(object.__new__(cls), max_steps=given["max_steps"], parser=given["parser"])
        _check_settings(given["fold"], given["anchor"], given["envs_per_jvm"])

    def _result(self, infos: dict[str, Any], reward: float) -> StepResult:
        obs = infos["observation"].strip()
        state = f"{infos['look'].strip()}\n{infos['inventory'].strip()}"
        anchor = obs if self.anchor_mode == "observation" else state
        won = bool(infos["tasksuccess"])
        return StepResult(
            observation=obs,
            anchor=anchor,
            reward=reward,
            done=won or bool(infos["taskfailure"]),
            won=won,
            admissible_actions=tuple(infos["validActions"]),
            task=self._task,
            info={"score": infos["score"]},
        )

    def _reset(self, task: Task) -> StepResult:
        if not isinstance(task, int):
            raise ValueError(f"TextWorldExpress tasks are integer seeds, got {task!r}")
        infos = orjson.loads(self._server.generateNewGameJSON(task, self.fold, False))
        self._task = str(self._server.getTaskDescription())
        self._score = float(infos["score"])
        return self._result(infos, 0.0)

    def _step(self, action: str) -> StepResult:
        infos = orjson.loads(self._server.stepJSON(action))
        score = float(infos["score"])
        reward, self._score = score - self._score, score
        return self._result(infos, reward)

    def gold_path(self, seed: int) -> list[str]:
        """The game's gold action sequence for `seed` (regenerates the game: call before `reset`)."""
        self._server.generateNewGameJSON(seed, self.fold, True)
        return [str(a) for a in self._server.getGoldActionSequence()]

    def close(self) -> None:
        """Free this game's place in its JVM (the Java object is collected once unreferenced)."""
        if self._slot is not None:
            _release(self._slot)
            self._slot = None
            self._server = None
