"""Benchmark of the advantage ops against per-row Python baselines, timed in the same run.

Batch: tasks × 8 rollouts × 50 steps (one row per step, rows shuffled), 64 response tokens per row,
about 30% of rows in anchor groups of size ≥ 2. One thread (torch and OpenMP pinned).

    python benchmarks/bench_ops.py                       # prints a markdown table
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
import json
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from pyagentrl import ops
from pyagentrl.adapters import verl as verl_adapter
from pyagentrl.synthetic import StepBatch, make_step_batch

# The baseline is the tests' loop oracle (tests/testkit): tests/ only, never the repository root, which would put the
# source tree (without the compiled ops) before the installed pyagentrl.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from testkit import loop_oracle

ROLLOUTS, STEPS, TOKENS, SHARED = 8, 50, 64, 0.4
GAMMA, LAM = 0.95, 0.95
RESULTS = Path(__file__).with_name("RESULTS.md")
SECTION = "## Advantage ops (issue 2)"


def timed(fn: Callable[[], Any], repeats: int) -> float:
    """Median seconds of ``repeats`` calls after one warm-up call."""
    fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


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


def workloads(batch: StepBatch) -> dict[str, Callable[[], Any]]:
    """The timed calls: ours, and the loop baselines."""
    b = batch

    def gigpo() -> torch.Tensor:
        returns = ops.discounted_returns(b.rewards, traj_ids=b.traj_ids, step_ids=b.step_ids, gamma=GAMMA)
        return ops.gigpo_advantage(
            b.episode_scores, returns, group_ids=b.group_ids, anchor_ids=b.anchor_ids, traj_ids=b.traj_ids
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

    kwargs = verl_inputs(b)
    traj_np, step_np = b.traj_ids.numpy(), b.step_ids.numpy()

    def loop_gigpo_advantage() -> torch.Tensor:
        return loop_oracle.gigpo_outcome_advantage(
            kwargs["token_level_rewards"],
            kwargs["step_rewards"],
            kwargs["response_mask"],
            kwargs["anchor_obs"],
            kwargs["index"],
            mode="mean_std_norm",
        )

    def loop_gagpo() -> torch.Tensor:
        returns = ops.discounted_returns(b.rewards, traj_ids=b.traj_ids, step_ids=b.step_ids, gamma=GAMMA)
        return loop_oracle.gagpo_advantage(
            b.rewards, b.group_ids.numpy(), traj_np, step_np, b.anchor_ids.numpy(), returns, GAMMA, LAM
        )

    return {
        "gigpo": gigpo,
        "gagpo": gagpo,
        "verl_adapter": lambda: verl_adapter.compute_gigpo_outcome_advantage(**kwargs),
        "loop_discount": lambda: loop_oracle.discounted_returns(b.rewards, traj_np, step_np, GAMMA),
        "loop_gigpo_advantage": loop_gigpo_advantage,
        "loop_gagpo": loop_gagpo,
    }


def input_bytes(batch: StepBatch, op: str) -> int:
    b = batch
    dense = [b.rewards, b.episode_scores, b.group_ids, b.traj_ids, b.step_ids, b.anchor_ids]
    if op == "verl_adapter":  # tensors plus the text anchors and uid strings
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


def cpu_name() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", type=int, nargs="+", default=[16, 128, 512])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument(
        "--loop-discount-max-tasks",
        type=int,
        default=128,
        help="the quadratic loop discounting runs up to this size (720 s at 512 tasks)",
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
        batch = make_step_batch(tasks, ROLLOUTS, STEPS, TOKENS, shared_fraction=SHARED)
        states, _ = ops.factorize_pairs(batch.group_ids, batch.anchor_ids)
        shared = float((torch.bincount(states)[states] >= 2).double().mean())
        work = workloads(batch)
        few = max(1, args.repeats // 3)
        r: dict[str, Any] = {"tasks": tasks, "rows": batch.num_rows, "shared": shared}
        r["gigpo"] = timed(work["gigpo"], args.repeats)
        r["gagpo"] = timed(work["gagpo"], args.repeats)
        r["verl_adapter"] = timed(work["verl_adapter"], few)
        r["loop_gigpo_advantage"] = timed(work["loop_gigpo_advantage"], 1)
        r["loop_gagpo"] = timed(work["loop_gagpo"], 1)
        if tasks <= args.loop_discount_max_tasks:
            r["loop_discount"] = timed(work["loop_discount"], 1)
        rows.append(r)
        print(json.dumps(r), flush=True)

    largest = max(args.tasks)
    memory = {op: measure_memory(op, largest) for op in ("gigpo", "gagpo", "verl_adapter")}
    report = render(rows, memory, largest, " ".join(sys.argv[1:]))
    print(report)
    if args.write:
        write_section(report)


def render(rows: list[dict[str, Any]], memory: dict[str, dict[str, float]], largest: int, argv: str) -> str:
    ms = lambda s: f"{s * 1e3:.1f} ms"  # noqa: E731
    sec = lambda s: f"{s:.2f} s"  # noqa: E731
    lines = [
        SECTION,
        "",
        f"Command: `OMP_NUM_THREADS=1 python benchmarks/bench_ops.py {argv}`  ",
        f"Machine: {cpu_name()}, {os.cpu_count()} cores (one thread used), torch {torch.__version__}, "
        f"Python {platform.python_version()}  ",
        f"Date: {datetime.date.today().isoformat()}",
        "",
        "Batch: tasks × 8 rollouts × 50 steps, rows shuffled, 64 response tokens per row. Times are medians.",
        '"loop" = the per-row Python baseline in tests/testkit/loop_oracle.py (the public reference\'s style).',
        "",
        "| tasks | rows | rows in anchor groups ≥ 2 | returns + GiGPO (dense ids) | GAGPO | verl-agent adapter "
        "(text anchors) | loop discounting | loop GiGPO advantage | loop GAGPO (returns given) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        loop_discount = sec(r["loop_discount"]) if "loop_discount" in r else "not run (quadratic)"
        lines.append(
            f"| {r['tasks']} | {r['rows']:,} | {r['shared']:.0%} | {ms(r['gigpo'])} | {ms(r['gagpo'])} | "
            f"{ms(r['verl_adapter'])} | {loop_discount} | {sec(r['loop_gigpo_advantage'])} | {sec(r['loop_gagpo'])} |"
        )
    big = next(r for r in rows if r["tasks"] == largest)
    lines += [
        "",
        f"Speed-up at {largest} tasks: GiGPO advantage {big['loop_gigpo_advantage'] / big['gigpo']:.0f}× "
        f"(returns included on our side), GAGPO {big['loop_gagpo'] / big['gagpo']:.0f}×, verl-agent adapter "
        f"{big['loop_gigpo_advantage'] / big['verl_adapter']:.0f}× the loop advantage alone.",
        "",
        f"Peak extra memory at {largest} tasks (VmHWM growth during one call, fresh process):",
        "",
        "| call | inputs | peak extra | ratio |",
        "|---|---|---|---|",
    ]
    for op, m in memory.items():
        lines.append(
            f"| {op} | {m['inputs'] / 2**20:.1f} MiB | {m['extra'] / 2**20:.1f} MiB | {m['extra'] / m['inputs']:.2f}× |"
        )
    targets = [
        ("returns + GiGPO ≤ 20 ms", big["gigpo"] <= 0.020),
        ("GAGPO ≤ 30 ms", big["gagpo"] <= 0.030),
        ("verl-agent adapter ≤ 0.5 s", big["verl_adapter"] <= 0.5),
        ("peak extra memory ≤ 2× inputs", all(m["extra"] <= 2 * m["inputs"] for m in memory.values())),
    ]
    lines += [
        "",
        "Targets at 512 tasks, one core: " + "; ".join(f"{t}: {'met' if ok else 'MISSED'}" for t, ok in targets),
    ]
    return "\n".join(lines) + "\n"


def write_section(report: str) -> None:
    text = RESULTS.read_text()
    start = text.index(SECTION)
    end = text.find("\n## ", start + len(SECTION))
    RESULTS.write_text(text[:start] + report + ("\n" + text[end + 1 :] if end != -1 else ""))


if __name__ == "__main__":
    main()
