"""ALFWorld-format tasks generated offline from the PDDL domain and text grammar shipped in the alfworld wheel.

The wheel carries ``alfred.pddl`` (the domain), ``alfred.twl2`` (the grammar that words observations) and the
goal library, but no tasks. A game file is JSON ``{pddl_domain, grammar, pddl_problem, solvable}``; this module
writes PDDL problems in the style of ALFWorld's generator (objects named ``Type_bar_N``, receptacles at their
own locations, type facts, affordances from ``alfworld.gen.constants``), takes goals and task wordings from
``alfworld.gen.goal_library``, and keeps a task only when the bundled Fast Downward planner finds a plan that,
replayed through the game, wins. Supported task types: pick-and-place, clean, heat, cool, two-object and
look-at-in-light (all the domain's non-slicing types).

Generation is deterministic in (seed, settings): the game file is byte-identical across runs and processes.
"""

from __future__ import annotations

import json
import os
import random
from collections.abc import Sequence
from functools import cache
from pathlib import Path
from typing import Any

from pyagentrl.cache import atomic_write, config_dir, generate_once, private_file
from pyagentrl.envs.textworld_env import TEXTWORLD_LOCK

TASK_TYPES = (
    "pick_and_place_simple",
    "pick_clean_then_place_in_recep",
    "pick_heat_then_place_in_recep",
    "pick_cool_then_place_in_recep",
    "pick_two_obj_and_place",
    "look_at_obj_in_light",
)
#: The receptacle whose action a task needs (CleanObject needs a SinkBasin, HeatObject a Microwave, ...).
TOOLS = {
    "pick_clean_then_place_in_recep": "SinkBasin",
    "pick_heat_then_place_in_recep": "Microwave",
    "pick_cool_then_place_in_recep": "Fridge",
}
RECEPTACLES = (
    "CounterTop", "DiningTable", "Fridge", "Microwave", "SinkBasin", "Cabinet", "Drawer",
    "Shelf", "GarbageCan", "StoveBurner", "SideTable", "Desk", "Dresser", "Safe",
)  # fmt: skip
REPEATABLE = ("Cabinet", "Drawer", "CounterTop", "Shelf", "StoveBurner")  # rooms often have several
LAMP_HOLDERS = ("Desk", "SideTable", "Dresser")
OBJECTS = (
    "Apple", "Bread", "Cup", "Egg", "Mug", "Plate", "Potato", "Tomato", "Lettuce", "Bowl", "Pan", "Pot",
    "Fork", "Spoon", "Knife", "ButterKnife", "Spatula", "DishSponge", "SoapBar", "Book", "CellPhone",
    "KeyChain", "CD", "Pen", "Pencil", "CreditCard", "AlarmClock", "Watch", "Vase", "TissueBox",
)  # fmt: skip


@cache
def _package_data() -> tuple[str, str]:
    """(domain, grammar) text shipped with alfworld."""
    import alfworld

    data = Path(alfworld.__file__).parent / "data"
    return (data / "alfred.pddl").read_text(), (data / "alfred.twl2").read_text()


def _ident(kind: str, n: int) -> str:
    """A PDDL name that ALFWorld's demangler reads as ``kind n`` (sink basins are ``Sink|..|SinkBasin``)."""
    return f"Sink_bar_{n}_bar_SinkBasin" if kind == "SinkBasin" else f"{kind}_bar_{n}"


def _fits(recep: str, obj: str) -> bool:
    from alfworld.gen import constants

    return obj in constants.VAL_RECEPTACLE_OBJECTS.get(recep, ())


def _affords(action: str, obj: str) -> bool:
    from alfworld.gen import constants

    return obj in constants.VAL_ACTION_OBJECTS[action]


def make_problem(seed: int, task_type: str, num_receptacles: int = 8, num_distractors: int = 4) -> dict[str, Any]:
    """A PDDL problem for `task_type`, drawn from `seed`; returns the problem text and the task's parameters."""
    from alfworld.gen import constants, goal_library

    rng = random.Random(f"{seed}:{task_type}")
    tool = TOOLS.get(task_type)
    need = {
        "pick_clean_then_place_in_recep": "Cleanable",
        "pick_heat_then_place_in_recep": "Heatable",
        "pick_cool_then_place_in_recep": "Coolable",
    }.get(task_type)
    light = task_type == "look_at_obj_in_light"
    candidates = [o for o in OBJECTS if need is None or _affords(need, o)]
    if light:
        candidates = [o for o in candidates if any(_fits(r, o) for r in LAMP_HOLDERS)]
    obj = rng.choice(candidates)
    goal_receps = [r for r in RECEPTACLES if _fits(r, obj) and r != tool and r != "StoveBurner"]
    recep = rng.choice(goal_receps)
    # Receptacle instances: the tool, the goal, a lamp holder, then random extras (some types repeat).
    kinds = [k for k in (tool, recep, rng.choice(LAMP_HOLDERS) if light else None) if k]
    holders = [r for r in RECEPTACLES if _fits(r, obj) and r not in kinds]
    kinds.append(rng.choice(holders))  # somewhere the target can start that is not the goal
    while len(kinds) < max(num_receptacles, len(kinds)):
        extra = rng.choice(RECEPTACLES)
        if extra not in kinds or extra in REPEATABLE:
            kinds.append(extra)
    rng.shuffle(kinds)
    receps = [(k, _ident(k, i + 1)) for i, k in enumerate(kinds)]
    # Objects: the target(s), the lamp, distractors; each in a receptacle that can hold it.
    n_targets = 2 if task_type == "pick_two_obj_and_place" else 1
    items = [obj] * n_targets + [o for o in rng.sample(OBJECTS, num_distractors) if o != obj]
    placed: list[tuple[str, str, str]] = []  # (type, name, receptacle name)
    for j, kind in enumerate(items):
        spots = [name for k, name in receps if _fits(k, kind) and not (kind == obj and k == recep)]
        if not spots:
            continue
        placed.append((kind, _ident(kind, 100 + j), rng.choice(spots)))
    if light:
        holder = next(name for k, name in receps if k in LAMP_HOLDERS)
        placed.append(("DeskLamp", _ident("DeskLamp", 99), holder))
    if sum(1 for p in placed if p[0] == obj) < n_targets:
        raise RuntimeError(f"no receptacle can hold {obj}")

    otypes = sorted({p[0] for p in placed})
    rtypes = sorted({k for k, _ in receps})
    lines = [f"(define (problem plan_{seed})", "(:domain alfred)", "(:objects", "agent1 - agent"]
    lines += [f"{t}Type - otype" for t in otypes] + [f"{t}Type - rtype" for t in rtypes]
    lines += [f"{name} - object" for _, name, _ in placed] + [f"{name} - receptacle" for _, name in receps]
    lines += [f"loc_bar_{i} - location" for i in range(len(receps) + 1)]
    init = ["(atLocation agent1 loc_bar_0)"]
    for i, (kind, name) in enumerate(receps):
        init.append(f"(receptacleType {name} {kind}Type)")
        init.append(f"(receptacleAtLocation {name} loc_bar_{i + 1})")
        if kind in constants.OPENABLE_CLASS_SET:
            init.append(f"(openable {name})")
    for kind, name, where in placed:
        init += [f"(objectType {name} {kind}Type)", f"(inReceptacle {name} {where})"]
        if kind == "DeskLamp":
            init.append(f"(toggleable {name})")
            continue
        init.append(f"(pickupable {name})")
        for action, fact in (("Cleanable", "cleanable"), ("Heatable", "heatable"), ("Coolable", "coolable")):
            if _affords(action, kind):
                init.append(f"({fact} {name})")
    init += [f"(canContain {r}Type {o}Type)" for r in rtypes for o in otypes if _fits(r, o)]
    goal = goal_library.gdict[task_type]["pddl"].format(obj=obj, recep=recep, toggle="DeskLamp", mrecep="")
    text = "\n".join([*lines, ")", "(:init", *init, ")", goal.replace("#", "-").strip()]) + "\n"
    template = rng.choice(goal_library.gdict[task_type]["templates"])
    desc = template.format(obj=obj.lower(), recep=recep.lower(), toggle="desklamp", mrecep="")
    return {
        "pddl_problem": text,
        "task_desc": desc,
        "task_type": task_type,
        "object": obj,
        "receptacle": recep,
    }


def plan_and_check(path: str | os.PathLike[str]) -> list[str] | None:
    """The bundled planner's plan for the game at `path` if replaying it wins the game, else None."""
    import textworld
    from alfworld.agents.environment.alfred_tw_env import AlfredDemangler, AlfredInfos

    infos = textworld.EnvInfos(won=True, admissible_commands=True, policy_commands=True)
    with TEXTWORLD_LOCK:  # the PDDL engine is not thread-safe (see textworld_env)
        env = textworld.start(str(path), request_infos=infos, wrappers=[AlfredDemangler(shuffle=False), AlfredInfos])
        try:
            state = env.reset()
            plan = list(state.policy_commands or [])
            for command in plan:
                if command not in state.admissible_commands:
                    return None
                state, _, done = env.step(command)
                if done:
                    break
            return plan if plan and state.won else None
        finally:
            env.close()


def generate_game(
    seed: int,
    task_types: Sequence[str] = TASK_TYPES,
    num_receptacles: int = 8,
    num_distractors: int = 4,
    cache_dir: str | os.PathLike[str] | None = None,
    max_tries: int = 20,
) -> Path:
    """Path of a solvable ALFWorld game for `seed` (task type ``task_types[seed % len]``), cached on first use."""
    unknown = [t for t in task_types if t not in TASK_TYPES]
    if not task_types or unknown:
        raise ValueError(f"task_types must be a non-empty subset of {TASK_TYPES}, got {list(task_types)}")
    task_type = task_types[seed % len(task_types)]
    settings = {"receptacles": num_receptacles, "distractors": num_distractors, "version": 1}
    folder = config_dir("alfworld_gen", settings, cache_dir)
    path = folder / f"{task_type}-{seed}.tw-pddl"
    # Group members ask for the same game at once: one thread makes it.
    return generate_once(path, lambda p: _generate(p, seed, task_type, num_receptacles, num_distractors, max_tries))


def _generate(
    path: Path, seed: int, task_type: str, num_receptacles: int, num_distractors: int, max_tries: int
) -> Path:
    domain, grammar = _package_data()
    for attempt in range(max_tries):
        try:
            spec = make_problem(seed * 1000 + attempt, task_type, num_receptacles, num_distractors)
        except RuntimeError:
            continue
        game = {
            "pddl_domain": domain,
            "grammar": grammar.replace("UNKNOWN GOAL", spec["task_desc"]),
            "pddl_problem": spec["pddl_problem"],
            "solvable": False,
        }
        trial = private_file(path, suffix=".tw-pddl")  # textworld dispatches on the suffix
        try:
            trial.write_text(json.dumps(game))
            plan = plan_and_check(trial)
        finally:
            trial.unlink(missing_ok=True)
        if plan is None:
            continue
        game["solvable"] = True
        game["pyagentrl"] = {"seed": seed, "attempt": attempt, "walkthrough": plan, **spec}
        del game["pyagentrl"]["pddl_problem"]
        atomic_write(path, json.dumps(game))
        return path
    raise RuntimeError(f"no solvable {task_type} task for seed {seed} in {max_tries} tries")
