"""TextWorld games generated offline from a seed with the textworld package (custom games or its challenges:
coin collector, treasure hunter, cooking), played through ``textworld.start``.

The same seed and settings give a byte-identical game on any machine, compiled once into the cache
(``~/.cache/pyagentrl/textworld/<settings hash>/``). TextWorld's generators iterate over sets in places, so
their output depends on Python's string hashing: games are generated in a child interpreter with
``PYTHONHASHSEED=0`` (about 1.5 s more per game, once).

The game's feedback ends with a status line (``>  -= Room =-score/moves``) whose move counter would make every
state unique: it is stripped from both the observation and the anchor, as are the ASCII-art banner of the first
screen and the ``*** The End ***`` trailer (score summary, restart question) of the last one. The task shown in
prompts is the game's objective without its greeting ("Welcome to TextWorld! ...").

Reward: the game's score increase at each step (points for quest progress); ``won`` when the quest is complete.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import warnings
from pathlib import Path
from typing import Any

from pyagentrl.cache import config_dir, generate_once
from pyagentrl.envs.base import StepResult, Task, TextEnv
from pyagentrl.envs.parsing import ActionParser

_STATUS = re.compile(r"\n?>[^\n]*$")  # the prompt line: "> ... -= Room =-0/3"
_BANNER = re.compile(r"^[ _|\\/$<>-]+$", re.MULTILINE)  # the title's ASCII-art lines are made of these
_TRAILER = re.compile(
    r"\s*\*\*\*[^*\n]+\*\*\*.*\Z", re.DOTALL
)  # "*** The End ***", score, "Would you like to RESTART..."
_BLANKS = re.compile(r"\n{3,}")
# The greeting TextWorld's grammar puts before the instructions ("#welcome#! Here is your task for today. ...").
_GREETING = re.compile(
    r"^[^.!?]*\bTextWorld\b[^.!?]*[.!?]\s*(?:You do!\s*)?(?:Here is (?:your task for today|how to play)[.!]\s*)?"
)
# Jericho warns that TextWorld's games lack its score/move detection; TextWorld tracks those itself.
warnings.filterwarnings("ignore", message=r".*is not fully supported")
#: TextWorld parses game logic, PDDL and actions with shared module-level tatsu parsers that are not thread-safe
#: (concurrent loads fail with IndexError/FailedToken): loading games and ALFWorld's PDDL steps hold this.
#: Parallelism for these families comes from the process backend.
TEXTWORLD_LOCK = threading.RLock()


def clean_feedback(text: str) -> str:
    """Feedback without the status line, the banner, the end-of-game trailer and runs of blank lines."""
    text = _STATUS.sub("", text.rstrip())
    text = _TRAILER.sub("", text)
    text = _BANNER.sub("", text)
    return _BLANKS.sub("\n\n", text).strip()


def task_text(objective: str) -> str:
    """The game's objective without TextWorld's greeting sentence (the instructions are kept whole)."""
    objective = objective.strip()
    return _GREETING.sub("", objective, count=1).strip() or objective


def challenge_settings_for(challenge: str | None, settings: dict[str, Any] | None, seed: int) -> dict[str, Any]:
    """The settings a challenge is generated with: `settings`, plus what ``tw-cooking`` needs and does not default.

    ``tw-cooking`` gets ``split="train"`` (TextWorld's training foods and preparations) and, unless given, a
    ``recipe_seed`` derived from the task seed (``seed + 1`` when the ``take`` skill is on, which TextWorld needs
    to draw a new recipe; otherwise 0, and the recipe comes from the task seed's quest generator).
    """
    out = dict(settings or {})
    if challenge == "tw-cooking":
        out.setdefault("split", "train")
        out.setdefault("recipe_seed", seed + 1 if out.get("take") else 0)
    return out


def generate_game(
    seed: int,
    nb_rooms: int = 3,
    nb_objects: int = 6,
    quest_length: int = 3,
    cache_dir: str | os.PathLike[str] | None = None,
    challenge: str | None = None,
    challenge_settings: dict[str, Any] | None = None,
) -> Path:
    """Path of the compiled game for these settings, generating and compiling it on first use.

    Without `challenge`, a custom game of `nb_rooms` rooms, `nb_objects` objects and a quest of `quest_length`
    steps; with one of ``textworld.challenges.CHALLENGES`` (``tw-coin_collector``, ``tw-treasure_hunter``,
    ``tw-cooking``, ``tw-simple``), that challenge made with `challenge_settings` (e.g. ``{"level": 5}``; for
    ``tw-cooking`` the skills, e.g. ``{"recipe": 2, "take": 1, "go": 6, "open": True, "cook": True}``, completed by
    `challenge_settings_for`).
    """
    import textworld
    import textworld.challenges

    if challenge is not None and challenge not in textworld.challenges.CHALLENGES:
        raise ValueError(f"challenge must be one of {sorted(textworld.challenges.CHALLENGES)}, got {challenge!r}")
    settings: dict[str, Any] = {"tw": textworld.__version__, "hashseed": 0}
    if challenge is None:
        settings |= {"nb_rooms": nb_rooms, "nb_objects": nb_objects, "quest_length": quest_length}
    else:
        settings |= {"challenge": challenge, "settings": challenge_settings or {}}
    folder = config_dir("textworld", settings, cache_dir)
    request = {
        "seed": seed,
        "nb_rooms": nb_rooms,
        "nb_objects": nb_objects,
        "quest_length": quest_length,
        "challenge": challenge,
        "settings": challenge_settings_for(challenge, challenge_settings, seed),
    }
    # Group members ask for the same game at once: one thread makes it.
    return generate_once(folder / f"game_{seed}.z8", lambda path: _build(path, request))


def _build(path: Path, request: dict[str, Any]) -> None:
    """Generates the game in a private folder, then moves it to `path` (and its .json beside it)."""
    work = Path(tempfile.mkdtemp(dir=path.parent, prefix=".build-"))
    try:
        _run_generator({**request, "path": str(work / path.name)})
        # The .json (game metadata) must be in place before the .z8, whose presence marks the game ready.
        os.replace(work / path.with_suffix(".json").name, path.with_suffix(".json"))
        os.replace(work / path.name, path)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _run_generator(request: dict[str, Any]) -> None:
    """Generate and compile a game in a child interpreter with a fixed string-hash seed (see module doc)."""
    root = str(Path(__file__).resolve().parents[2])  # where pyagentrl is importable from, for the child
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p)
    code = "import sys; from pyagentrl.envs.textworld_env import _generate_here; _generate_here(sys.argv[1])"
    run = subprocess.run(
        [sys.executable, "-c", code, json.dumps(request)], env=env, capture_output=True, text=True, check=False
    )
    if run.returncode != 0:
        raise RuntimeError(f"generating TextWorld game {request['seed']} failed:\n{run.stderr[-2000:]}")


def _generate_here(request_json: str) -> None:
    """The child's side of `_run_generator`: make and compile the game described by `request_json`."""
    import textworld
    import textworld.challenges
    import textworld.generator

    request = json.loads(request_json)
    options = textworld.GameOptions()
    options.seeds = request["seed"]
    options.nb_rooms, options.nb_objects = request["nb_rooms"], request["nb_objects"]
    options.quest_length = request["quest_length"]
    options.path = request["path"]
    options.force_recompile = True
    if request["challenge"] is None:
        game = textworld.generator.make_game(options)
    else:
        game = textworld.challenges.CHALLENGES[request["challenge"]][1](request["settings"], options)
    textworld.generator.compile_game(game, options)


class TextWorldEnv(TextEnv):
    """A generated TextWorld game per integer seed (or a given ``.z8``/``.ulx`` path); see module doc.

    Args:
        nb_rooms, nb_objects, quest_length: custom-game generator settings.
        challenge, challenge_settings: a TextWorld challenge instead (see `generate_game`).
        cache_dir: where compiled games are kept (default ``~/.cache/pyagentrl``).
        max_steps: turns before truncation.
    """

    family = "textworld"

    def __init__(
        self,
        nb_rooms: int = 3,
        nb_objects: int = 6,
        quest_length: int = 3,
        challenge: str | None = None,
        challenge_settings: dict[str, Any] | None = None,
        cache_dir: str | os.PathLike[str] | None = None,
        max_steps: int = 50,
        parser: ActionParser | None = None,
    ) -> None:
        super().__init__(max_steps=max_steps, parser=parser)
        self.settings: dict[str, Any] = {
            "nb_rooms": nb_rooms,
            "nb_objects": nb_objects,
            "quest_length": quest_length,
            "challenge": challenge,
            "challenge_settings": challenge_settings,
        }
        self.cache_dir = cache_dir
        self._env: Any = None
        self._objective = ""

    def _result(self, state: Any, reward: float) -> StepResult:
        text = clean_feedback(state.feedback)
        done = bool(state.won or state.lost)
        return StepResult(
            observation=text,
            anchor=text,
            reward=reward,
            done=done,
            won=bool(state.won),
            admissible_actions=tuple(state.admissible_commands or ()),
            task=self._objective,
            info={"score": state.score, "max_score": state.max_score, "lost": bool(state.lost)},
        )

    def _reset(self, task: Task) -> StepResult:
        import textworld

        path = generate_game(task, **self.settings, cache_dir=self.cache_dir) if isinstance(task, int) else task
        infos = textworld.EnvInfos(
            admissible_commands=True, won=True, lost=True, objective=True, score=True, max_score=True
        )
        with TEXTWORLD_LOCK:
            if self._env is None:
                self._env = textworld.start(str(path), request_infos=infos)
            else:
                self._env.load(str(path))  # reuses the interpreter instead of loading another copy
            state = self._env.reset()
        self._objective = task_text(state.objective or "")
        self._score = state.score or 0
        return self._result(state, 0.0)

    def _step(self, action: str) -> StepResult:
        state, _, _ = self._env.step(action)
        reward = float((state.score or 0) - self._score)
        self._score = state.score or 0
        return self._result(state, reward)

    def walkthrough(self) -> list[str]:
        """The generator's winning command sequence for the current game (for tests and baselines)."""
        import textworld

        game = textworld.Game.load(str(Path(self._env.gamefile).with_suffix(".json")))
        walkthrough = game.metadata.get("walkthrough")
        return list(walkthrough) if walkthrough else [c for quest in game.quests for c in quest.commands]

    def close(self) -> None:
        if self._env is not None:
            self._env.close()
            self._env = None
