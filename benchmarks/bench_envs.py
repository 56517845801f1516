"""Steps/s per environment family for a batch of 128 environments under a random-admissible-action policy,
serial vs thread vs process driver, in the same run.

    python benchmarks/bench_envs.py [--families ...] [--write]

``--write`` replaces the "## Environments" section of benchmarks/RESULTS.md. Games are generated
(and cached) before timing; resets and steps are timed separately. A step of an episode that already ended costs
nothing and is not counted.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import random
import sys
import time

from machine import cpu_model  # benchmarks/machine.py (the script's folder is on sys.path)
from results import Headline, write_section  # benchmarks/results.py

from pyagentrl.envs import EnvBatch, env_factory

#: family -> (config, timed batch steps). Few steps for the slow ALFWorld engine keep the run short.
FAMILIES: dict[str, tuple[dict[str, object], int]] = {
    "frozenlake": ({"size": 8, "max_steps": 200}, 40),
    "sokoban": ({"dim_room": (7, 7), "num_boxes": 2, "max_steps": 200}, 40),
    "textworld": ({"max_steps": 200}, 30),
    "twx": ({"game": "cookingworld", "game_params": "numLocations=3,includeDoors=0", "max_steps": 200}, 40),
    "alfworld_gen": ({"max_steps": 200}, 12),
}
NUM_GROUPS, GROUP_SIZE = 16, 8
SECTION = "## Environments"


def run(name: str, backend: str, workers: int, steps: int, windows: int = 3, warmup: int = 3) -> dict[str, float]:
    """Build, reset, `warmup` untimed steps, then `windows` timed windows of ``steps // windows`` batch steps;
    the best window's rate is kept (the machine is shared: the best window is the least disturbed)."""
    config, _ = FAMILIES[name]
    rng = random.Random(0)
    t0 = time.perf_counter()
    batch = EnvBatch(env_factory(name, **config), NUM_GROUPS, GROUP_SIZE, workers=workers, backend=backend)
    try:
        t1 = time.perf_counter()
        out = batch.reset(list(range(NUM_GROUPS)))
        t2 = time.perf_counter()

        def policy() -> list[str]:
            return [rng.choice(r.admissible_actions) if r.admissible_actions else "look" for r in out]

        for _ in range(warmup):
            out = batch.step(policy())
        total, best = 0, 0.0
        for _ in range(windows):
            active, start = 0, time.perf_counter()
            for _ in range(steps // windows):
                active += sum(not r.done for r in out)
                out = batch.step(policy())
            best = max(best, active / (time.perf_counter() - start))
            total += active
        errors = sum("error" in r.info for r in out)
    finally:
        batch.close()
    return {"make_s": t1 - t0, "reset_s": t2 - t1, "steps": total, "steps_per_s": best, "errors": errors}


def main() -> None:
    argv = sys.argv[1:]  # copied now: the ALFWorld planner rewrites sys.argv when it runs
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--families", nargs="+", default=list(FAMILIES), choices=list(FAMILIES))
    parser.add_argument("--thread-workers", type=int, default=16)
    parser.add_argument("--process-workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--write", action="store_true", help="update benchmarks/RESULTS.md")
    args = parser.parse_args()

    load_before = os.getloadavg()[0]
    for name in args.families:  # generate and cache the games outside the timings
        with EnvBatch(env_factory(name, **FAMILIES[name][0]), NUM_GROUPS, 1, backend="serial") as batch:
            batch.reset(list(range(NUM_GROUPS)))
    rows = []
    best: dict[str, tuple[str, float, float]] = {}  # family -> (best backend, its steps/s, serial steps/s)
    for name in args.families:
        steps = FAMILIES[name][1]
        results = {
            "serial": run(name, "serial", 1, steps),
            "thread": run(name, "thread", args.thread_workers, steps),
            "process": run(name, "process", args.process_workers, steps),
        }
        base = results["serial"]["steps_per_s"]
        cells = [f"{r['steps_per_s']:,.0f} ({r['steps_per_s'] / base:.2f}×)" for r in results.values()]
        resets = " / ".join(f"{r['reset_s']:.2f}" for r in results.values())
        errors = sum(int(r["errors"]) for r in results.values())
        top = max(results, key=lambda backend: results[backend]["steps_per_s"])
        best[name] = (top, results[top]["steps_per_s"], base)
        rows.append(f"| {name} | {int(results['serial']['steps'])} | {' | '.join(cells)} | {resets} | {errors} |")
        print(rows[-1], flush=True)

    command = "python benchmarks/bench_envs.py " + " ".join(argv)
    machine, now = f"{cpu_model()}, {os.cpu_count()} cores", datetime.datetime.now(datetime.timezone.utc)
    body = "\n".join(
        [
            f"Command: `{command.strip()}`  ",
            f"Machine: {machine}; Python {platform.python_version()}; "
            f"1-min load average {load_before:.1f} before / {os.getloadavg()[0]:.1f} after (a shared machine)  ",
            f"Date: {now:%Y-%m-%d %H:%M} UTC",
            "",
            f"Batch of {NUM_GROUPS * GROUP_SIZE} environments ({NUM_GROUPS} groups × {GROUP_SIZE}), random admissible "
            "action each step; steps/s counts steps of unfinished episodes (speed-up over serial in brackets). "
            f"Thread backend: {args.thread_workers} threads; process backend: {args.process_workers} spawned "
            "workers. Reset = seconds to reset all 128 (games already cached).",
            "",
            "| family | env-steps timed | serial steps/s | thread steps/s | process steps/s | reset s (ser/thr/proc) "
            "| errors |",
            "|---|---|---|---|---|---|---|",
            *rows,
            "",
            "Steps/s is the best of three timed windows after three warm-up steps. Other builds share these 2 "
            "cores, so figures move by tens of percent between runs. Serial and thread runs reuse the JVMs that "
            "earlier runs started in this process; process workers start their own, cold. ALFWorld's PDDL engine "
            "is not thread-safe (it runs under a lock), so only processes help it.",
            "",
        ]
    )
    print(f"{SECTION}\n\n{body}")
    if args.write:
        write_section(SECTION, body, headlines=headlines(best, machine, f"{now:%Y-%m-%d}"))


def headlines(best: dict[str, tuple[str, float, float]], machine: str, date: str) -> list[Headline]:
    """The summary's lines: the slowest and the fastest family, each at its best backend against the serial driver,
    with the figures of the table."""
    ranked = sorted(best, key=lambda name: best[name][1])
    out = []
    for name in dict.fromkeys([ranked[0], ranked[-1]]):  # one line when a single family ran
        backend, rate, serial = best[name]
        out.append(
            (
                f"{name}: env steps/s of a batch of {NUM_GROUPS * GROUP_SIZE}, best backend ({backend})",
                f"{rate:,.0f} steps/s ({rate / serial:.2f}×)",
                f"serial driver, {serial:,.0f} steps/s",
                machine,
                date,
            )
        )
    return out


if __name__ == "__main__":
    main()
