"""The environment registry: ``@register_env(name, ...)`` adds an environment family and its prompts in one
definition; ``make_env(name, **config)`` is the one entry point to every family.

The built-in families are registered below on thin constructors that import their module on first use, so
``import pyagentrl.envs`` stays cheap and a missing optional package (textworld, alfworld, the JVM of TWX) only
matters for the family that needs it.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any, TypeVar

from pyagentrl.envs.base import TextEnv
from pyagentrl.envs.prompts import INTRO, add_prompt_family

#: name -> (constructor, prompt family); filled by `register_env`.
ENVS: dict[str, tuple[Callable[..., TextEnv], str]] = {}

E = TypeVar("E", bound=Callable[..., TextEnv])


def _where(make: Callable[..., Any]) -> tuple[str, str] | None:
    """Module and qualified name of a top-level definition (None for lambdas, local definitions, partials)."""
    module, qualname = getattr(make, "__module__", None), getattr(make, "__qualname__", None)
    if not isinstance(module, str) or not isinstance(qualname, str) or "<" in qualname:
        return None
    return module, qualname


def _same_definition(a: Callable[..., Any], b: Callable[..., Any]) -> bool:
    """`a` is `b`, or both are the same top-level definition run again (a module reloaded, a notebook cell rerun)."""
    return a is b or (_where(a) is not None and _where(a) == _where(b))


def register_env(name: str, *, prompts: str | None = None, intro: str | None = None) -> Callable[[E], E]:
    """Registers an environment class (or any ``constructor(**config) -> TextEnv``) as family `name` of
    `make_env`, `env_factory` and `prompt_family`; the decorated definition is returned unchanged.

    Args:
        name: the family's name.
        prompts: its prompt family (default: `name`).
        intro: the opening line of the family's prompts (who the agent is, how to read the observation); it
            registers prompt family `prompts`. Leave it out to reuse a registered family, e.g.
            ``prompts="alfworld"``.

    Raises ValueError when `name` is already registered to another definition (registering the same definition
    again, or a rerun of it, replaces the entry), when `prompts` is a registered family with another intro, and
    when `prompts` is not registered and no `intro` is given.
    """
    if not isinstance(name, str) or not name:
        raise ValueError(f"an environment name is a non-empty string, got {name!r}")
    family = name if prompts is None else prompts

    def decorator(make: E) -> E:
        old = ENVS.get(name)
        if old is not None and not _same_definition(old[0], make):
            raise ValueError(f"environment {name!r} is already registered (to {_describe(old[0])})")
        if intro is not None:
            add_prompt_family(family, intro, replace=old is not None)
        elif family not in INTRO:
            raise ValueError(
                f"environment {name!r}: prompt family {family!r} is not registered; give intro= (the opening line "
                f"of its prompts) or prompts= one of {sorted(INTRO)}"
            )
        ENVS[name] = (make, family)
        return make

    return decorator


def _describe(make: Callable[..., Any]) -> str:
    where = _where(make)
    return f"{where[0]}.{where[1]}" if where else repr(make)


def _check(name: str) -> None:
    if name not in ENVS:
        raise ValueError(f"unknown env name {name!r}; expected one of {sorted(ENVS)}")


def make_env(name: str, **config: Any) -> TextEnv:
    """A new environment of family `name` (see `ENVS`) built with `config`'s keyword arguments."""
    _check(name)
    return ENVS[name][0](**config)


def env_factory(name: str, **config: Any) -> Callable[[], TextEnv]:
    """A picklable zero-argument constructor for `EnvBatch` (checked now, not in a worker).

    It holds the family's constructor itself, not the name: a process worker unpickles it by importing the
    constructor's module, so a family registered in any importable module builds there too.
    """
    _check(name)
    return partial(ENVS[name][0], **config)


def prompt_family(name: str) -> str:
    """The `prompts` family of environment `name`."""
    _check(name)
    return ENVS[name][1]


# The built-in families.


@register_env(
    "frozenlake",
    intro=(
        "You are an expert agent crossing a frozen lake.\n"
        "Symbols: _ ice, O hole, G goal, P you. Reach G without stepping into a hole."
    ),
)
def _frozenlake(**cfg: Any) -> TextEnv:
    from pyagentrl.envs.frozenlake import FrozenLakeEnv

    return FrozenLakeEnv(**cfg)


@register_env(
    "sokoban",
    intro=(
        "You are an expert agent playing Sokoban.\n"
        "Symbols: # wall, _ floor, O target, X box, √ box on target, P you, S you on a target.\n"
        "Goal: push every box (X) onto a target (O). You can push boxes but never pull them, and a box pushed "
        "into a corner can no longer be moved."
    ),
)
def _sokoban(**cfg: Any) -> TextEnv:
    from pyagentrl.envs.sokoban import SokobanEnv

    return SokobanEnv(**cfg)


@register_env("textworld", intro="You are an expert player of a text adventure game.")
def _textworld(**cfg: Any) -> TextEnv:
    from pyagentrl.envs.textworld_env import TextWorldEnv

    return TextWorldEnv(**cfg)


@register_env("twx", intro="You are an expert agent operating in a TextWorldExpress text environment.")
def _twx(**cfg: Any) -> TextEnv:
    from pyagentrl.envs.twx import TextWorldExpressEnv

    return TextWorldExpressEnv(**cfg)


@register_env("alfworld", intro="You are an expert agent operating in the ALFRED embodied household environment.")
def _alfworld(**cfg: Any) -> TextEnv:
    """Real ALFWorld games under ``$ALFWORLD_DATA``."""
    from pyagentrl.envs.alfworld_env import AlfworldEnv

    return AlfworldEnv(source="data", **cfg)


@register_env("alfworld_gen", prompts="alfworld")
def _alfworld_gen(**cfg: Any) -> TextEnv:
    """ALFWorld-format tasks generated offline."""
    from pyagentrl.envs.alfworld_env import AlfworldEnv

    return AlfworldEnv(source="generated", **cfg)
