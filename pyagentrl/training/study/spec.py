"""A study spec: the `StudySpec` dataclass and `load_spec`, which reads the YAML and checks every field, and every
family x arm train config, before any run starts."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pyagentrl.training.config import MAX_EVAL_TASKS, SEED_LIMIT, ConfigError, load_config, validate

_KEEP = ("model", "checkpoints")
_WORD = re.compile(r"[A-Za-z0-9_-]+")


@dataclass
class StudySpec:
    name: str
    config: Path
    seeds: list[int]
    eval_tasks: int
    keep: str  # what a scored run keeps: "model" or "checkpoints"
    families: dict[str, list[str]]  # family -> train overrides ("key=value")
    arms: dict[str, list[str]]  # arm -> train overrides
    output: Path
    source: Path  # the spec file


def _overrides(mapping: Any, where: str) -> list[str]:
    if mapping is None:
        return []
    if not isinstance(mapping, dict):
        raise ConfigError(f"{where} must be a mapping of config keys to values, got {type(mapping).__name__}")
    # Values as JSON, which is YAML flow text: lists and mappings survive the command line (OmegaConf parses them).
    return [f"{key}={json.dumps(value)}" for key, value in mapping.items()]


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)  # YAML's true is no seed


def _read(path: Path) -> dict[str, Any]:
    """The spec file's mapping; a file that is not UTF-8 YAML holding a mapping is refused in one line."""
    import yaml
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    try:
        raw = OmegaConf.to_container(OmegaConf.load(path))
    except yaml.YAMLError as exc:
        raise ConfigError(f"study spec {path} is not valid YAML: {' '.join(str(exc).split())}") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"study spec {path} is not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    except (OSError, OmegaConfBaseException) as exc:  # OmegaConf raises OSError for a file holding one scalar
        raise ConfigError(f"study spec {path}: {exc}") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"study spec {path}: expected a mapping")
    return {str(key): value for key, value in raw.items()}


def load_spec(path: str | Path, output: str | Path | None = None) -> StudySpec:
    """The spec at ``path``; every field is checked here, before any run starts."""
    spec_path = Path(path)
    if not spec_path.is_file():
        raise FileNotFoundError(f"study spec {path}: no such file")
    raw = _read(spec_path)
    unknown = set(raw) - {"name", "config", "seeds", "eval_tasks", "keep", "families", "arms"}
    if unknown:
        raise ConfigError(f"study spec {path}: unknown keys {sorted(unknown)}")
    name = raw.get("name")
    if not isinstance(name, str) or not _WORD.fullmatch(name):  # it names runs/study-<name> and the report's folder
        raise ConfigError(f"study spec: name must be a word (letters, digits, '-' or '_'), got {name!r}")
    config = (spec_path.parent / str(raw.get("config", ""))).resolve()
    if not config.is_file():
        raise ConfigError(f"study spec: config {raw.get('config')!r} is not a file (relative to {spec_path.parent})")
    seeds = raw.get("seeds")
    if (
        not isinstance(seeds, list)
        or not seeds
        or not all(_is_int(s) and 0 <= s < SEED_LIMIT for s in seeds)
        or len(set(seeds)) < len(seeds)
    ):
        raise ConfigError(
            f"study spec: seeds must be a non-empty list of distinct ints in [0, 2^32 - 1] (each a run's seed), "
            f"got {seeds!r}"
        )
    eval_tasks = raw.get("eval_tasks", 64)
    if not _is_int(eval_tasks) or not 1 <= eval_tasks <= MAX_EVAL_TASKS:
        raise ConfigError(f"study spec: eval_tasks must be an int in [1, 2^30], got {eval_tasks!r}")
    keep = raw.get("keep", "model")
    if keep not in _KEEP:
        raise ConfigError(f"study spec: keep must be one of {', '.join(_KEEP)}, got {keep!r}")
    sections = {}
    for key in ("families", "arms"):
        value = raw.get(key)
        if not isinstance(value, dict) or not value:
            raise ConfigError(f"study spec: {key} must be a non-empty mapping of names to overrides")
        for label in value:
            if not str(label).replace("-", "").replace("_", "").isalnum():
                raise ConfigError(f"study spec: {key} name {label!r} must be letters, digits, '-' or '_'")
        sections[key] = {str(k): _overrides(v, f"{key}.{k}") for k, v in value.items()}
    for family, family_overrides in sections["families"].items():  # every run's config, checked before any runs
        for arm, arm_overrides in sections["arms"].items():
            try:
                validate(load_config(config, [*family_overrides, *arm_overrides]))
            except ConfigError as exc:
                raise ConfigError(f"study spec: family {family!r}, arm {arm!r}: {exc}") from None
    return StudySpec(
        name=name,
        config=config,
        seeds=list(seeds),
        eval_tasks=eval_tasks,
        keep=keep,
        families=sections["families"],
        arms=sections["arms"],
        output=Path(output or Path("runs") / f"study-{name}").resolve(),
        source=spec_path.resolve(),
    )
