"""The environment registry: ``@register_env(name, ...)`` adds an environment family and its prompts in one
definition; ``make_env(name, **config)`` is the one entry point to every family.

The built-in families are registered below on thin constructors that import their module on first use, so
``import pyagentrl.envs`` stays cheap and a missing optional package (textworld, alfworld, the JVM of TWX) only
matters for the family that needs it.
"""

from __future__ import annotations

import importlib
import inspect
import math
import os
import types
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import Any, Literal, TypeVar, Union, get_args, get_origin, get_type_hints

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


class EnvOptionError(ValueError):
    """An option an environment family refuses: ``option`` names it (None when the refusal names no one option)."""

    def __init__(self, option: str | None, problem: str) -> None:
        super().__init__(f"{option}: {problem}" if option else problem)
        self.option, self.problem = option, problem


def check_env_options(name: str, options: Mapping[str, Any]) -> None:
    """Raises `EnvOptionError` for an option family `name` would refuse, starting no game: a name its constructor
    does not take or a value of the wrong type (against the constructor's signature), then the family's own checks
    (`TextEnv.check_options`; a family registered as a plain function is built once and closed). Meant for a run's
    config check, before a model loads."""
    _check(name)
    make = ENVS[name][0]
    target: Any
    target, fixed = _BUILDS.get(make, (make, {}))
    if isinstance(target, tuple):  # a built-in family: its module is imported now, on first use
        target = getattr(importlib.import_module(target[0]), target[1])
    params = _check_signature(name, target, options, fixed)
    try:
        if isinstance(target, type) and issubclass(target, TextEnv):
            target.check_options(**fixed, **options)
        else:
            make(**options).close()
    except (TypeError, ValueError) as exc:
        if isinstance(exc, EnvOptionError):
            raise
        word, _, rest = str(exc).partition(" ")  # the constructors' messages start with the option's name
        option = word.rstrip(":")
        raise (EnvOptionError(option, rest) if option in params else EnvOptionError(None, str(exc))) from None


def _check_signature(
    name: str, make: Callable[..., Any], options: Mapping[str, Any], fixed: Mapping[str, Any]
) -> set[str]:
    """The option names ``make`` takes (less those the family fixes); raises `EnvOptionError` for another name, or a
    value its type hint does not admit. A constructor that takes ``**kwargs`` admits any name."""
    try:
        signature = inspect.signature(make)
        init = make.__init__ if isinstance(make, type) else make  # type: ignore[misc]  # a class: its constructor's
        hints = get_type_hints(init)
    except (TypeError, ValueError, NameError):  # no signature or unresolvable hints: the constructor decides
        return set(options)
    kinds = {p.kind for p in signature.parameters.values()}
    params = {p for p, v in signature.parameters.items() if v.kind not in (v.VAR_POSITIONAL, v.VAR_KEYWORD)}
    params -= set(fixed)
    for option, value in options.items():
        if option not in params and inspect.Parameter.VAR_KEYWORD not in kinds:
            raise EnvOptionError(str(option), f"unknown option of {name}; expected one of {', '.join(sorted(params))}")
        hint = hints.get(option, Any)
        if option in params and not _fits(value, hint):
            raise EnvOptionError(option, f"must be {_shown(hint)}, got {value!r}")
    return params


def _fits(value: Any, hint: Any) -> bool:
    """Whether a config value fits a constructor's type hint. YAML has no tuples, so a list fits a tuple; floats
    must be finite; a hint this does not know admits anything."""
    origin, args = get_origin(hint), get_args(hint)
    if hint is Any:
        return True
    if hint is None or hint is type(None):
        return value is None
    if origin in (Union, types.UnionType):
        return any(_fits(value, arm) for arm in args)
    if origin is Literal:
        return value in args
    if hint in (bool, int, float):
        number = isinstance(value, int | float) and not isinstance(value, bool)
        if hint is float:
            return number and math.isfinite(value)
        return isinstance(value, bool) if hint is bool else number and isinstance(value, int)
    if origin is tuple or origin in (list, Sequence):
        if not isinstance(value, list | tuple):
            return False
        if origin is tuple and not (len(args) == 2 and args[1] is Ellipsis):
            return len(value) == len(args) and all(_fits(v, a) for v, a in zip(value, args, strict=True))
        return all(_fits(v, args[0]) for v in value) if args else True
    if origin in (dict, Mapping):
        return isinstance(value, Mapping)
    if origin is os.PathLike or hint is os.PathLike:
        return isinstance(value, os.PathLike)
    return isinstance(value, hint) if isinstance(hint, type) else True


def _shown(hint: Any) -> str:
    """A type hint in words, for `_fits`'s refusals."""
    origin, args = get_origin(hint), get_args(hint)
    if origin in (Union, types.UnionType):
        return " or ".join(_shown(arm) for arm in args)
    if hint is None or hint is type(None):
        return "None"
    if hint is float:
        return "a finite number"
    if origin is tuple and not (len(args) == 2 and args[1] is Ellipsis):
        return f"a list [{', '.join(_shown(a) for a in args)}]"
    if origin in (tuple, list, Sequence):
        return f"a list of {_shown(args[0])}" if args else "a list"
    if origin in (dict, Mapping):
        return "a mapping"
    if origin is Literal:
        return "one of " + ", ".join(repr(a) for a in args)
    return getattr(hint, "__name__", str(hint))


#: A built-in family's thin constructor -> ((module, class) it builds, the arguments it fixes): what
#: `check_env_options` checks the options against without importing every family up front.
_BUILDS: dict[Callable[..., Any], tuple[Any, dict[str, Any]]] = {}


def _builds(module: str, cls: str, **fixed: Any) -> Callable[[E], E]:
    def decorator(make: E) -> E:
        _BUILDS[make] = ((module, cls), fixed)
        return make

    return decorator


# The built-in families.


@register_env(
    "frozenlake",
    intro=(
        "You are an expert agent crossing a frozen lake.\n"
        "Symbols: _ ice, O hole, G goal, P you. Reach G without stepping into a hole."
    ),
)
@_builds("pyagentrl.envs.frozenlake", "FrozenLakeEnv")
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
@_builds("pyagentrl.envs.sokoban", "SokobanEnv")
def _sokoban(**cfg: Any) -> TextEnv:
    from pyagentrl.envs.sokoban import SokobanEnv

    return SokobanEnv(**cfg)


@register_env("textworld", intro="You are an expert player of a text adventure game.")
@_builds("pyagentrl.envs.textworld_env", "TextWorldEnv")
def _textworld(**cfg: Any) -> TextEnv:
    from pyagentrl.envs.textworld_env import TextWorldEnv

    return TextWorldEnv(**cfg)


@register_env("twx", intro="You are an expert agent operating in a TextWorldExpress text environment.")
@_builds("pyagentrl.envs.twx", "TextWorldExpressEnv")
def _twx(**cfg: Any) -> TextEnv:
    from pyagentrl.envs.twx import TextWorldExpressEnv

    return TextWorldExpressEnv(**cfg)


@register_env("alfworld", intro="You are an expert agent operating in the ALFRED embodied household environment.")
@_builds("pyagentrl.envs.alfworld_env", "AlfworldEnv", source="data")
def _alfworld(**cfg: Any) -> TextEnv:
    """Real ALFWorld games under ``$ALFWORLD_DATA``."""
    from pyagentrl.envs.alfworld_env import AlfworldEnv

    return AlfworldEnv(source="data", **cfg)


@register_env("alfworld_gen", prompts="alfworld")
@_builds("pyagentrl.envs.alfworld_env", "AlfworldEnv", source="generated")
def _alfworld_gen(**cfg: Any) -> TextEnv:
    """ALFWorld-format tasks generated offline."""
    from pyagentrl.envs.alfworld_env import AlfworldEnv

    return AlfworldEnv(source="generated", **cfg)
