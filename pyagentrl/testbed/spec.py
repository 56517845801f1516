"""A testbed study spec: tasks, arms, noise levels, seeds and the shared run settings, checked before any run.

    name: credit
    seeds: 20                                  # seeds 0 .. 19 for every (task, noise, arm)
    settings: {iterations: 50, lr: 100}        # RunSettings fields
    tasks:
      frozenlake-8x8: {env: frozenlake, config: {size: 8, random_start_goal: true, max_steps: 30}, pool: 16}
    arms: [grpo, critic, gigpo-oracle, gigpo-exact]     # run without noise
    noise: {levels: [low, high], arms: [gigpo-exact]}   # also run at these levels (arms that read the text)
    anchors: {minhash: {threshold: 0.8}, simhash: {k: 3}}   # StateKeyer settings of the text anchors
    sweep: {iterations: 4, minhash: [0.6, 0.8], simhash: [1, 3], embedding: [0.95]}  # anchor quality, no training
    baselines: {blind_length: 8, selection_tasks: 200}

An unknown key, arm, anchor mode, environment or noise level stops the study before its first run, naming it.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pyagentrl.envs import EnvOptionError, check_env_options
from pyagentrl.testbed.arms import TEXT_ANCHORS, Arm, parse_arm
from pyagentrl.testbed.loop import RunSettings, TaskSpec, make_envs
from pyagentrl.testbed.noise import check_noise_level


class SpecError(ValueError):
    """A testbed spec that cannot run; the message names the key."""


@dataclass(frozen=True)
class Sweep:
    """Anchor quality of text anchors at several settings, on the random mover's episodes (no training)."""

    iterations: int = 4  # rollouts of groups x group_size episodes, per task and noise level
    minhash: tuple[float, ...] = ()  # thresholds (estimated Jaccard)
    simhash: tuple[int, ...] = ()  # Hamming distances k
    embedding: tuple[float, ...] = ()  # cosine thresholds


@dataclass(frozen=True)
class Spec:
    name: str
    seeds: int
    settings: RunSettings
    tasks: tuple[TaskSpec, ...]
    arms: tuple[Arm, ...]
    noise_levels: tuple[str, ...] = ()
    noise_arms: tuple[Arm, ...] = ()
    anchors: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    sweep: Sweep = Sweep()
    blind_length: int = 8
    selection_tasks: int = 200

    def runs(self) -> list[tuple[TaskSpec, str, Arm]]:
        """Every (task, noise level, arm) of the study, without seeds."""
        out = []
        for task in self.tasks:
            out += [(task, "none", arm) for arm in self.arms]
            out += [(task, level, arm) for level in self.noise_levels for arm in self.noise_arms]
        return out


def _mapping(value: Any, where: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise SpecError(f"{where} must be a mapping, got {type(value).__name__}")
    return dict(value)


def _known(mapping: Mapping[str, Any], allowed: set[str] | list[str], where: str) -> None:
    unknown = sorted(set(mapping) - set(allowed))
    if unknown:
        raise SpecError(f"{where}: unknown key {unknown[0]!r}; expected {', '.join(sorted(allowed))}")


def _count(value: Any, where: str, least: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise SpecError(f"{where} must be an integer >= {least}, got {value!r}")
    return value


def _arms(value: Any, where: str) -> tuple[Arm, ...]:
    if not isinstance(value, list) or not value:
        raise SpecError(f"{where} must be a non-empty list of arm names")
    try:
        arms = tuple(parse_arm(name) for name in value)
    except ValueError as exc:
        raise SpecError(f"{where}: {exc}") from None
    if len(set(arms)) != len(arms):
        raise SpecError(f"{where} names an arm twice")
    return arms


def _settings(value: Any) -> RunSettings:
    from pyagentrl.ops.estimators import AdvantageConfig, LossConfig

    body = _mapping(value, "settings")
    _known(body, {f.name for f in dataclasses.fields(RunSettings)}, "settings")
    for key in ("iterations", "groups", "group_size", "epochs"):
        if key in body:
            _count(body[key], f"settings.{key}")
    for key in ("lr", "clip", "gamma", "lam", "value_lr"):
        if key in body:
            v = body[key]
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
                raise SpecError(f"settings.{key} must be a finite number, got {v!r}")
            body[key] = float(v)
    settings = RunSettings(**body)
    if settings.lr <= 0:
        raise SpecError(f"settings.lr must be > 0, got {settings.lr}")
    if not 0 < settings.value_lr <= 1:
        raise SpecError(f"settings.value_lr is a share of the way to the target, in (0, 1]; got {settings.value_lr}")
    try:  # the estimators' and the loss's own checks, now rather than in a worker
        AdvantageConfig(gamma=settings.gamma, lam=settings.lam)
        LossConfig(clip_low=settings.clip)
    except ValueError as exc:
        raise SpecError(f"settings: {exc}") from None
    return settings


def _task(name: Any, value: Any) -> TaskSpec:
    # YAML reads a key such as 5 as an int: a name must be text all the same.
    if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", name) or ".." in name:
        raise SpecError(f"tasks: a task name names its record files: letters, digits, '.', '-' and '_', got {name!r}")
    body = _mapping(value, f"tasks.{name}")
    _known(body, {"env", "config", "pool"}, f"tasks.{name}")
    if "env" not in body:
        raise SpecError(f"tasks.{name}.env is missing (an environment family, e.g. frozenlake)")
    config = _mapping(body.get("config"), f"tasks.{name}.config")
    for key in ("dim_room",):
        if isinstance(config.get(key), list):
            config[key] = tuple(config[key])
    task = TaskSpec(name, body["env"], config, _count(body.get("pool", 16), f"tasks.{name}.pool"))
    try:  # each option against the family's constructor, named
        check_env_options(task.env, config)
    except EnvOptionError as exc:
        raise SpecError(f"tasks.{name}.config{'.' + exc.option if exc.option else ''}: {exc.problem}") from None
    except (TypeError, ValueError):  # an unknown family, said below
        pass
    try:  # builds one game: an unknown family, a bad option or a game whose anchor is not its state stops here
        (env,) = make_envs(task, 1, "none", seed=0)
    except (TypeError, ValueError) as exc:
        raise SpecError(f"tasks.{name}: {exc}") from None
    env.close()
    return task


def _anchors(value: Any) -> dict[str, dict[str, Any]]:
    from pyagentrl.testbed.loop import keyer_for

    anchors = _mapping(value, "anchors")
    _known(anchors, list(TEXT_ANCHORS), "anchors")
    out = {}
    for mode, options in anchors.items():
        out[mode] = _mapping(options, f"anchors.{mode}")
        try:
            keyer_for(mode, out[mode])
        except (TypeError, ValueError, ImportError, FileNotFoundError) as exc:
            raise SpecError(f"anchors.{mode}: {exc}") from None
    return out


def _sweep(value: Any) -> Sweep:
    body = _mapping(value, "sweep")
    _known(body, {f.name for f in dataclasses.fields(Sweep)}, "sweep")
    for key in ("minhash", "simhash", "embedding"):
        values = body.get(key, [])
        if not isinstance(values, list):
            raise SpecError(f"sweep.{key} must be a list")
        body[key] = tuple(values)
    for k in body["simhash"]:
        _count(k, "sweep.simhash", least=0)
    for key in ("minhash", "embedding"):
        for t in body[key]:
            if isinstance(t, bool) or not isinstance(t, (int, float)) or not 0 < t <= 1:
                raise SpecError(f"sweep.{key}: thresholds lie in (0, 1], got {t!r}")
    body["iterations"] = _count(body.get("iterations", 4), "sweep.iterations")
    return Sweep(**body)


def parse_spec(raw: Any) -> Spec:
    """A checked :class:`Spec` from a spec's parsed YAML; :class:`SpecError` names the first problem."""
    body = _mapping(raw, "the spec")
    _known(body, {"name", "seeds", "settings", "tasks", "arms", "noise", "anchors", "sweep", "baselines"}, "the spec")
    name = body.get("name")
    if not isinstance(name, str) or not name.replace("-", "").replace("_", "").isalnum():
        raise SpecError(f"name must be a word (letters, digits, - and _), got {name!r}")
    settings = _settings(body.get("settings"))
    tasks_body = _mapping(body.get("tasks"), "tasks")
    if not tasks_body:
        raise SpecError("tasks is missing: name at least one task")
    tasks = tuple(_task(task, value) for task, value in tasks_body.items())
    arms = _arms(body.get("arms"), "arms")
    noise = _mapping(body.get("noise"), "noise")
    _known(noise, {"levels", "arms"}, "noise")
    if noise and set(noise) != {"levels", "arms"}:
        raise SpecError("noise needs both levels (e.g. [low, high]) and arms (the arms to run at those levels)")
    levels = noise.get("levels", [])
    if not isinstance(levels, list) or not all(isinstance(v, str) for v in levels) or len(set(levels)) != len(levels):
        raise SpecError(f"noise.levels must be a list of distinct levels, got {levels!r}")
    levels = tuple(levels)
    for level in levels:
        try:
            check_noise_level(level)
        except ValueError as exc:
            raise SpecError(f"noise.levels: {exc}") from None
        if level == "none":
            raise SpecError("noise.levels: 'none' is where every arm runs already; list the noisy levels")
    noise_arms = _arms(noise["arms"], "noise.arms") if levels else ()
    for arm in noise_arms:
        if not arm.reads_text:
            raise SpecError(
                f"noise.arms: {arm.name} does not read the observation text, so noise cannot change its run; "
                "list it under arms only"
            )
    anchors = _anchors(body.get("anchors"))
    for arm in {*arms, *noise_arms}:
        if arm.reads_text and arm.anchors not in anchors:
            anchors[arm.anchors] = _anchors({arm.anchors: {}})[arm.anchors]  # type: ignore[index]
    sweep = _sweep(body.get("sweep"))
    if sweep.embedding:  # the encoder the sweep will load, checked now rather than after the baselines
        _anchors({"embedding": anchors.get("embedding", {})})
    baselines = _mapping(body.get("baselines"), "baselines")
    _known(baselines, {"blind_length", "selection_tasks"}, "baselines")
    return Spec(
        name=name,
        seeds=_count(body.get("seeds"), "seeds"),
        settings=settings,
        tasks=tasks,
        arms=arms,
        noise_levels=levels,
        noise_arms=noise_arms,
        anchors=anchors,
        sweep=sweep,
        blind_length=_count(baselines.get("blind_length", 8), "baselines.blind_length"),
        selection_tasks=_count(baselines.get("selection_tasks", 200), "baselines.selection_tasks"),
    )


def load_spec(path: str | Path) -> Spec:
    import yaml

    path = Path(path)
    if not path.is_file():
        raise SpecError(f"no spec at {path}")
    try:
        raw = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise SpecError(f"{path} is not valid YAML: {str(exc).splitlines()[0]}") from None
    except UnicodeDecodeError as exc:  # YAML files are UTF-8 text
        raise SpecError(f"{path} is not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    return parse_spec(raw)
