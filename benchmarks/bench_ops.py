"""Benchmark of the advantage ops against per-row Python loops that compute the same thing, timed and checked
in the same run.

Batch: tasks × 8 rollouts × 50 steps (one row per step, rows shuffled), 64 response tokens per row,
about 30% of rows in anchor groups of size ≥ 2. One thread (torch and OpenMP pinned).

Each timed pyagentrl call is paired with a loop that computes the same thing from the same inputs (the same
statistics, singleton rule and anchors), and the run checks that their outputs agree before it reports a
speed-up (a failed check raises, so the script exits non-zero):

    returns     ops.discounted_returns                  loop_oracle.discounted_returns (quadratic search)
    gigpo       ops.gigpo_advantage (pyagentrl's        loop_gigpo below: the same conventions, per row
                conventions: dense ids, statistics
                per trajectory, lone groups 0)
    verl_gigpo  adapters.verl.compute_gigpo_outcome_    loop_oracle.gigpo_outcome_advantage (verl-agent's
                advantage (text anchors, statistics     conventions, the same text anchors)
                per row, lone uids keep their score)
    gagpo       ops.gagpo_advantage                     loop_oracle.gagpo_advantage

The loops are written here (tests/testkit/loop_oracle.py, and loop_gigpo below on its normalisation) in the
style of the public reference, verl-agent's gigpo/core_gigpo.py; they are not the public code itself.

    python benchmarks/bench_ops.py                       # prints a markdown table
    python benchmarks/bench_ops.py --tasks 4 --repeats 3 # a quick run at a small size
    python benchmarks/bench_ops.py --write               # also replaces the section in RESULTS.md

Peak extra memory is measured in a fresh subprocess per op: VmHWM (the kernel's peak-RSS counter,
reset through /proc/self/clear_refs) after the call minus RSS before it, against the inputs' bytes;
freed heap is trimmed first and large buffers are mmapped, so earlier garbage cannot absorb the call.
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse
import ctypes
import datetime
import importlib.metadata
import importlib.util
import json
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from machine import cpu_model  # benchmarks/machine.py (the script's folder is on sys.path)
from results import Headline, write_section  # benchmarks/results.py

from pyagentrl import ops
from pyagentrl.adapters import verl as verl_adapter
from pyagentrl.synthetic import StepBatch, make_step_batch

# The baseline is the tests' loop oracle (tests/testkit): tests/ only, never the repository root, which would put the
# source tree (without the compiled ops) before the installed pyagentrl.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from testkit import loop_oracle

ROLLOUTS, STEPS, TOKENS, SHARED = 8, 50, 64, 0.4
GAMMA, LAM = 0.95, 0.95
# Outputs are float32 of magnitude up to a few units: 1e-5 is a few tens of float32 ulps.
RTOL = ATOL = 1e-5
SECTION = "## Advantage ops"
# The computations, in table order: (key, label). Each has a pyagentrl workload and a loop.
COMPUTATIONS = [
    ("returns", "discounted returns"),
    ("gigpo", "GiGPO, pyagentrl conventions"),
    ("verl_gigpo", "GiGPO, verl-agent conventions (adapter)"),
    ("gagpo", "GAGPO"),
]


def timed(fn: Callable[[], Any], repeats: int) -> tuple[float, Any]:
    """Median seconds of ``repeats`` calls after one warm-up call, and the last call's result."""
    result = fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times), result


def timed_once(fn: Callable[[], Any]) -> tuple[float, Any]:
    """Seconds of one call (the loops take seconds; their warm-up is the float64 check run), and its result."""
    start = time.perf_counter()
    result = fn()
    return time.perf_counter() - start, result


def anchor_texts(batch: StepBatch) -> np.ndarray:
    """ALFWorld-like observations of ~300 characters, one text per distinct anchor id."""
    body = (
        "You are in the middle of a room. Looking quickly around you, you see a cabinet 4, a cabinet 3, "
        "a cabinet 2, a cabinet 1, a coffeemachine 1, a countertop 3, a countertop 2, a countertop 1, "
        "a drawer 3, a drawer 2, a drawer 1, a fridge 1, a garbagecan 1, a microwave 1, a shelf 3, a sink 1. "
        "You arrive at location "
    )
    return np.array([body + str(a) for a in batch.anchor_ids.tolist()], dtype=object)


def verl_inputs(batch: StepBatch) -> dict[str, Any]:
    """verl-agent's arguments: the episode score on one token of each row, the step returns, text anchors, uids."""
    token_rewards = torch.zeros(batch.num_rows, TOKENS)
    token_rewards[:, 0] = batch.episode_scores
    returns = ops.discounted_returns(batch.rewards, traj_ids=batch.traj_ids, step_ids=batch.step_ids, gamma=GAMMA)
    return {
        "token_level_rewards": token_rewards,
        "step_rewards": returns,
        "response_mask": batch.response_mask,
        "anchor_obs": anchor_texts(batch),
        "index": np.array([f"uid-{g}" for g in batch.group_ids.tolist()], dtype=object),
        "traj_index": np.array([f"traj-{t}" for t in batch.traj_ids.tolist()], dtype=object),
        "mode": "mean_std_norm",
    }


def workloads(batch: StepBatch, kwargs: dict[str, Any] | None = None) -> dict[str, Callable[[], torch.Tensor]]:
    """The timed pyagentrl calls. GiGPO gets the step returns precomputed, as its loop does; ``returns_gigpo``
    (returns included) is timed for the issue's target only."""
    b = batch
    kwargs = verl_inputs(b) if kwargs is None else kwargs

    def returns() -> torch.Tensor:
        return ops.discounted_returns(b.rewards, traj_ids=b.traj_ids, step_ids=b.step_ids, gamma=GAMMA)

    def gigpo(step_returns: torch.Tensor) -> torch.Tensor:
        return ops.gigpo_advantage(
            b.episode_scores, step_returns, group_ids=b.group_ids, anchor_ids=b.anchor_ids, traj_ids=b.traj_ids
        )

    def gagpo() -> torch.Tensor:
        return ops.gagpo_advantage(
            b.rewards,
            group_ids=b.group_ids,
            traj_ids=b.traj_ids,
            step_ids=b.step_ids,
            anchor_ids=b.anchor_ids,
            gamma=GAMMA,
            lam=LAM,
        )

    return {
        "returns": returns,
        "gigpo": lambda: gigpo(kwargs["step_rewards"]),
        "returns_gigpo": lambda: gigpo(returns()),
        "verl_gigpo": lambda: verl_adapter.compute_gigpo_outcome_advantage(**kwargs)[0],
        "gagpo": gagpo,
    }


def loop_gigpo(
    episode_scores: torch.Tensor,
    step_returns: torch.Tensor,
    group_ids: Sequence[int],
    anchor_ids: Sequence[int],
    traj_ids: Sequence[int],
    eps: float = 1e-6,
) -> torch.Tensor:
    """GiGPO with pyagentrl's conventions (``ops.gigpo_advantage``'s defaults), per row in the reference's style.

    Episode level: one score per trajectory (a (task group, traj id) pair), normalised over the trajectories of
    its task group; step level: the returns normalised over the rows of one (task group, anchor id); mean_std_norm,
    unbiased std, a lone trajectory or step group gets 0. Written here on loop_oracle's per-key normalisation
    (dicts of lists, scalar tensor ops, statistics in the inputs' dtype).
    """
    normalize = loop_oracle._normalize_by_key  # the reference-style loop's normalisation, shared on purpose
    first_row: dict[tuple[int, int], int] = {}
    for i in range(len(traj_ids)):
        first_row.setdefault((group_ids[i], traj_ids[i]), i)
    trajectories = list(first_row)
    traj_scores = torch.stack([episode_scores[i] for i in first_row.values()])
    per_traj = normalize(traj_scores, [g for g, _ in trajectories], eps, remove_std=False, lone_raw=False)
    episode_of = dict(zip(trajectories, per_traj, strict=True))
    episode = torch.stack([episode_of[(group_ids[i], traj_ids[i])] for i in range(len(traj_ids))])
    states = [(group_ids[i], anchor_ids[i]) for i in range(len(group_ids))]
    step = normalize(step_returns, states, eps, remove_std=False, lone_raw=False)
    return episode + step


def loops(batch: StepBatch, kwargs: dict[str, Any]) -> dict[str, Callable[[torch.dtype], torch.Tensor]]:
    """The loop of each computation, on the same inputs as the workload cast to a dtype: float32 (timed, as the
    reference gets them) or float64 (the check run)."""
    b = batch
    group, traj, step, anchor = (x.numpy() for x in (b.group_ids, b.traj_ids, b.step_ids, b.anchor_ids))
    group_list, traj_list, anchor_list = b.group_ids.tolist(), b.traj_ids.tolist(), b.anchor_ids.tolist()
    step_returns = kwargs["step_rewards"]

    def gagpo(dtype: torch.dtype) -> torch.Tensor:
        rewards = b.rewards.to(dtype)
        returns = ops.discounted_returns(rewards, traj_ids=b.traj_ids, step_ids=b.step_ids, gamma=GAMMA)
        return loop_oracle.gagpo_advantage(rewards, group, traj, step, anchor, returns, GAMMA, LAM)

    return {
        "returns": lambda dtype: loop_oracle.discounted_returns(b.rewards.to(dtype), traj, step, GAMMA),
        "gigpo": lambda dtype: loop_gigpo(
            b.episode_scores.to(dtype), step_returns.to(dtype), group_list, anchor_list, traj_list
        ),
        "verl_gigpo": lambda dtype: loop_oracle.gigpo_outcome_advantage(
            kwargs["token_level_rewards"].to(dtype),
            step_returns.to(dtype),
            kwargs["response_mask"].to(dtype),
            kwargs["anchor_obs"],
            kwargs["index"],
            mode="mean_std_norm",
        ),
        "gagpo": gagpo,
    }


def dense_ids(*columns: Sequence[Any]) -> np.ndarray:
    """Dense ids of the rows' key tuples, numbered by a dict (independent of the library's factorize)."""
    seen: dict[tuple[Any, ...], int] = {}
    keys = zip(*columns, strict=True)
    return np.fromiter((seen.setdefault(k, len(seen)) for k in keys), dtype=np.int64, count=len(columns[0]))


def tied_rows(keys: np.ndarray, values: torch.Tensor) -> np.ndarray:
    """Rows of groups of two or more members whose values all tie.

    There the reference-style loop's float32 mean can miss the shared value by an ulp, and (x − mean) / (std + ε)
    then gives ±0.1–0.5 where pyagentrl gives exactly 0 (docs/algorithms.md (S4), (D5)); in float64 the loop is
    exact.
    """
    _, inverse, counts = np.unique(keys, return_inverse=True, return_counts=True)
    v = values.detach().double().numpy()
    low = np.full(len(counts), np.inf)
    high = np.full(len(counts), -np.inf)
    np.minimum.at(low, inverse, v)
    np.maximum.at(high, inverse, v)
    return ((counts >= 2) & (low == high))[inverse]


def tied_rows_of(key: str, batch: StepBatch, kwargs: dict[str, Any], loop64: torch.Tensor) -> np.ndarray:
    """The rows a computation's float32 loop gives a nonzero value by design: those in tied groups."""
    b = batch
    if key == "gigpo":  # trajectory scores all equal in a task group, or returns in a (task group, anchor) state
        groups = b.group_ids.numpy()
        states = dense_ids(b.group_ids.tolist(), b.anchor_ids.tolist())
        return tied_rows(groups, b.episode_scores) | tied_rows(states, kwargs["step_rewards"])
    if key == "verl_gigpo":  # row scores all equal in a uid, or returns in a (uid, anchor text) state
        uids = dense_ids(kwargs["index"])
        states = dense_ids(kwargs["index"], kwargs["anchor_obs"])
        scores = kwargs["token_level_rewards"].sum(dim=-1)
        return tied_rows(uids, scores) | tied_rows(states, kwargs["step_rewards"])
    if key == "gagpo":  # a task group whose advantages tie: the float64 loop gives all of its rows exactly 0
        return tied_rows(b.group_ids.numpy(), loop64)
    return np.zeros(b.num_rows, dtype=bool)  # returns: no statistics


def walked_returns(batch: StepBatch) -> torch.Tensor:
    """G_t = r_t + γ G_{t+1}, walking each trajectory backwards in float64: the returns' check at sizes where the
    quadratic loop is not run."""
    traj, step, rewards = batch.traj_ids.numpy(), batch.step_ids.numpy(), batch.rewards.double().tolist()
    out = [0.0] * len(rewards)
    running, current = 0.0, -1
    for i in np.lexsort((-step, traj)).tolist():  # by trajectory, last step first
        if traj[i] != current:
            running, current = 0.0, traj[i]
        running = rewards[i] + GAMMA * running
        out[i] = running
    return torch.tensor(out, dtype=torch.float64)


def check(name: str, ours: torch.Tensor, reference: torch.Tensor, rows: np.ndarray | None = None) -> None:
    """torch.testing.assert_close within RTOL/ATOL on ``rows`` (all rows when None); raises on a mismatch."""
    keep = slice(None) if rows is None else torch.from_numpy(rows)
    torch.testing.assert_close(
        ours[keep],
        reference.to(ours.dtype)[keep],
        rtol=RTOL,
        atol=ATOL,
        msg=lambda m: f"bench_ops check failed: {name}: {m}",
    )


def run_size(tasks: int, repeats: int, loop_returns_max: int) -> dict[str, Any]:
    """Times, and checks, every computation at one batch size."""
    batch = make_step_batch(tasks, ROLLOUTS, STEPS, TOKENS, shared_fraction=SHARED)
    states, _ = ops.factorize_pairs(batch.group_ids, batch.anchor_ids)
    shared = float((torch.bincount(states)[states] >= 2).double().mean())
    kwargs = verl_inputs(batch)
    ours, loop = workloads(batch, kwargs), loops(batch, kwargs)
    few = max(1, repeats // 3)
    r: dict[str, Any] = {"tasks": tasks, "rows": batch.num_rows, "shared": shared}
    for key, _ in COMPUTATIONS:
        r[key], out = timed(ours[key], few if key == "verl_gigpo" else repeats)
        if key == "returns" and tasks > loop_returns_max:
            check("returns vs a backward walk (float64)", out, walked_returns(batch))
            continue
        loop64 = None if key == "returns" else loop[key](torch.float64)  # the check run, and the loop's warm-up
        r[f"loop_{key}"], loop32 = timed_once(lambda key=key: loop[key](torch.float32))
        tied = tied_rows_of(key, batch, kwargs, loop64)
        if loop64 is not None:
            check(f"{key} vs the loop in float64, every row", out, loop64)
        check(f"{key} vs the timed float32 loop, rows outside tied groups", out, loop32, ~tied)
        r[f"tied_{key}"] = int(tied.sum())
    r["returns_gigpo"], combined = timed(ours["returns_gigpo"], repeats)
    if not torch.equal(combined, ours["gigpo"]()):
        raise AssertionError("bench_ops check failed: returns + GiGPO differs from GiGPO on the same returns")
    return r


def input_bytes(batch: StepBatch, op: str) -> int:
    b = batch
    dense = [b.rewards, b.episode_scores, b.group_ids, b.traj_ids, b.step_ids, b.anchor_ids]
    if op == "verl_gigpo":  # tensors plus the text anchors and uid strings
        kwargs = verl_inputs(b)
        strings = sum(sys.getsizeof(s) for key in ("anchor_obs", "index", "traj_index") for s in kwargs[key])
        tensors = [kwargs["token_level_rewards"], kwargs["step_rewards"], kwargs["response_mask"]]
        return strings + sum(t.numel() * t.element_size() for t in tensors)
    return sum(t.numel() * t.element_size() for t in dense)


def _proc_kb(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"{field} not in /proc/self/status")


def memory_probe(op: str, tasks: int) -> dict[str, float]:
    """Run in a subprocess: peak RSS growth of one call of ``op``, in bytes, and the input bytes."""
    workloads(make_step_batch(2, ROLLOUTS, STEPS, TOKENS))[op]()  # lazy initialisation is not the op's memory
    batch = make_step_batch(tasks, ROLLOUTS, STEPS, TOKENS, shared_fraction=SHARED)
    fn = workloads(batch)[op]
    ctypes.CDLL("libc.so.6").malloc_trim(0)  # hand freed heap back, so the call cannot hide in it
    Path("/proc/self/clear_refs").write_text("5")  # reset VmHWM to the current RSS
    before = _proc_kb("VmRSS")
    result = fn()
    peak = _proc_kb("VmHWM")
    del result
    return {"extra": (peak - before) * 1024.0, "inputs": float(input_bytes(batch, op))}


def measure_memory(op: str, tasks: int) -> dict[str, float]:
    # A fixed mmap threshold makes every large buffer its own mapping, returned to the OS when freed.
    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "65536"}
    out = subprocess.run(
        [sys.executable, __file__, "--memory-probe", op, "--tasks", str(tasks)],
        check=True,
        capture_output=True,
        text=True,
        env=env,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def public_reference_note() -> str:
    """Whether the public GiGPO code is here: it is never timed by this script."""
    try:
        verl = f"verl {importlib.metadata.version('verl')} is installed, with GRPO but no GiGPO"
    except importlib.metadata.PackageNotFoundError:
        verl = "nor is verl"
    if importlib.util.find_spec("gigpo") is None:
        return f"verl-agent (its gigpo/core_gigpo.py) is not installed here ({verl}), so no public GiGPO code is timed."
    return f"A `gigpo` package is importable here ({verl}), but this script does not time it."


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", type=int, nargs="+", default=[16, 128, 512])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument(
        "--loop-discount-max-tasks",
        type=int,
        default=128,
        help="the quadratic loop discounting runs up to this size (720 s at 512 tasks); above it the returns are "
        "checked against a linear backward walk",
    )
    parser.add_argument("--write", action="store_true", help="replace this section of benchmarks/RESULTS.md")
    parser.add_argument("--memory-probe", help=argparse.SUPPRESS)
    args = parser.parse_args()
    torch.set_num_threads(1)
    if args.memory_probe:
        print(json.dumps(memory_probe(args.memory_probe, args.tasks[0])))
        return

    rows = []
    for tasks in args.tasks:
        r = run_size(tasks, args.repeats, args.loop_discount_max_tasks)
        rows.append(r)
        print(json.dumps(r), flush=True)

    largest = max(args.tasks)
    memory = {op: measure_memory(op, largest) for op in ("returns_gigpo", "gagpo", "verl_gigpo")}
    machine, date = f"{cpu_model()}, {os.cpu_count()} cores (one thread used)", datetime.date.today().isoformat()
    report = render(rows, memory, largest, args.loop_discount_max_tasks, " ".join(sys.argv[1:]), machine, date)
    print(f"{SECTION}\n\n{report}")
    if args.write:
        write_section(SECTION, report, headlines=headlines(rows, largest, machine, date))


def duration(s: float) -> str:
    return f"{s * 1e3:.2f} ms" if s < 1e-3 else f"{s * 1e3:.1f} ms" if s < 1 else f"{s:.2f} s"


def headlines(rows: list[dict[str, Any]], largest: int, machine: str, date: str) -> list[Headline]:
    """The summary's lines: each advantage at the largest size against its loop, with the figures of the table."""
    big = next(r for r in rows if r["tasks"] == largest)
    return [
        (
            f"{label}, {largest} tasks ({big['rows']:,} rows)",
            f"{duration(big[key])}, {big[f'loop_{key}'] / big[key]:,.0f}× faster",
            f"per-row Python loop in verl-agent's style, {duration(big[f'loop_{key}'])}",
            machine,
            date,
        )
        for key, label in COMPUTATIONS
        if key != "returns" and f"loop_{key}" in big
    ]


def render(
    rows: list[dict[str, Any]],
    memory: dict[str, dict[str, float]],
    largest: int,
    loop_returns_max: int,
    argv: str,
    machine: str,
    date: str,
) -> str:
    """The section's body (below its heading)."""
    shared = ", ".join(f"{r['shared']:.0%} ({r['tasks']} tasks)" for r in rows)
    lines = [
        f"Command: `OMP_NUM_THREADS=1 python benchmarks/bench_ops.py {argv}`  ",
        f"Machine: {machine}, torch {torch.__version__}, Python {platform.python_version()}  ",
        f"Date: {date}",
        "",
        "Batch: tasks × 8 rollouts × 50 steps, rows shuffled, 64 response tokens per row; rows in anchor groups "
        f"of ≥ 2: {shared}. Times are medians (pyagentrl: of the repeats after a warm-up call; loops: one call).",
        "",
        "Each speed-up compares two implementations of one computation on the same inputs, and the run checks "
        "that their outputs agree before reporting it:",
        "",
        "- **discounted returns**: G_t = r_t + γ G_{t+1}, γ = 0.95, rows in any order. pyagentrl: "
        "`ops.discounted_returns`. Loop: `loop_oracle.discounted_returns`, a search over the batch for each row's "
        "later steps (quadratic, as in the public reference: docs/algorithms.md (D7)), run up to "
        f"{loop_returns_max} tasks.",
        "- **GiGPO, pyagentrl conventions**: dense int64 ids, step returns given; episode statistics once per "
        "trajectory over its task group, step statistics over the rows of one (task group, anchor id), a lone "
        "group gets 0; mean_std_norm. pyagentrl: `ops.gigpo_advantage`. Loop: `loop_gigpo` in "
        "benchmarks/bench_ops.py, the same definition per row, on loop_oracle's normalisation.",
        "- **GiGPO, verl-agent conventions (adapter)**: ~300-character text anchors and uid strings, step returns "
        "given; episode statistics over all step rows of a uid (a lone uid keeps its raw score), step statistics "
        "over the rows of one (uid, anchor text) (a lone one gets 0); mean_std_norm; [rows, 64] token advantages. "
        "pyagentrl: `adapters.verl.compute_gigpo_outcome_advantage`. Loop: `loop_oracle.gigpo_outcome_advantage`.",
        "- **GAGPO**: from the rewards; value proxy = mean return of each (task group, anchor id), GAE with "
        "γ = λ = 0.95, normalised over the rows of each task group. pyagentrl: `ops.gagpo_advantage`. Loop: "
        "`loop_oracle.gagpo_advantage`, given returns from `ops.discounted_returns` inside its time.",
        "",
        "Baselines: every loop is written here, in the style of the public reference, verl-agent's "
        "gigpo/core_gigpo.py (dicts of lists, scalar tensor ops, float32 statistics), and is not the public code "
        "itself: tests/testkit/loop_oracle.py is written from the reference's published behaviour "
        "(docs/algorithms.md §7), and `loop_gigpo` applies its normalisation with pyagentrl's conventions. "
        + public_reference_note(),
        "",
        "Checks, at every size (`torch.testing.assert_close`, rtol = atol = 1e-5; a failure stops the run): "
        "pyagentrl's output against the loop run once more in float64 (untimed; it is also the loop's warm-up) on "
        "every row, and against the timed float32 loop on every row outside groups whose values all tie. In such a "
        "group the float32 loop's mean can miss the shared value by an ulp, giving ±0.1–0.5 where pyagentrl gives "
        "exactly 0 (docs/algorithms.md (S4), (D5)); the last column counts the rows left out for that reason. The "
        "returns have no statistics, so every row is checked against the float32 loop; where that loop is not run, "
        "against a linear backward walk over each trajectory in float64. Returns + GiGPO (timed for the target) must "
        "equal GiGPO on the same returns.",
        "",
        "| tasks | rows | computation | pyagentrl | loop | speed-up | rows left out of the float32 check |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        for key, label in COMPUTATIONS:
            loop = r.get(f"loop_{key}")
            cells = (
                [duration(loop), f"{loop / r[key]:,.0f}×", f"{r[f'tied_{key}']:,}"]
                if loop is not None
                else ["not run (quadratic)", "–", "– (checked against a backward walk)"]
            )
            lines.append(f"| {r['tasks']} | {r['rows']:,} | {label} | {duration(r[key])} | " + " | ".join(cells) + " |")
        target = f"returns + GiGPO (for the target) | {duration(r['returns_gigpo'])} | – | – | –"
        lines.append(f"| {r['tasks']} | {r['rows']:,} | {target} |")
    big = next(r for r in rows if r["tasks"] == largest)
    speedups = [
        f"{label}: {big[f'loop_{key}'] / big[key]:,.0f}×" for key, label in COMPUTATIONS if f"loop_{key}" in big
    ]
    lines += [
        "",
        f"Speed-up at {largest} tasks, each against a loop written here that computes the same thing: "
        + "; ".join(speedups)
        + ".",
        "",
        f"Peak extra memory at {largest} tasks (VmHWM growth during one call, fresh process):",
        "",
        "| call | inputs | peak extra | ratio |",
        "|---|---|---|---|",
    ]
    names = {"returns_gigpo": "returns + GiGPO", "gagpo": "GAGPO", "verl_gigpo": "verl-agent adapter"}
    for op, m in memory.items():
        lines.append(
            f"| {names[op]} | {m['inputs'] / 2**20:.1f} MiB | {m['extra'] / 2**20:.1f} MiB | "
            f"{m['extra'] / m['inputs']:.2f}× |"
        )
    targets = [
        ("returns + GiGPO ≤ 20 ms", big["returns_gigpo"] <= 0.020),
        ("GAGPO ≤ 30 ms", big["gagpo"] <= 0.030),
        ("verl-agent adapter ≤ 0.5 s", big["verl_gigpo"] <= 0.5),
        ("peak extra memory ≤ 2× inputs", all(m["extra"] <= 2 * m["inputs"] for m in memory.values())),
    ]
    lines += [
        "",
        f"Targets at {largest} tasks (stated for 512), one core: "
        + "; ".join(f"{t}: {'met' if ok else 'MISSED'}" for t, ok in targets),
    ]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
