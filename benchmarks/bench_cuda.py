"""The CUDA kernels on a GPU: each op, the GiGPO and GAGPO advantages and the loss forward+backward, timed against
the op's memory-bandwidth floor and against the PyTorch reference ops on the same GPU in the same run.

    python benchmarks/bench_cuda.py [--json OUT.json] [--bandwidth 4.8e12]

The floor of an op is the bytes its interface must move (every input read once, every output written once)
divided by the bandwidth (the H200's datasheet 4.8 TB/s unless --bandwidth gives a measured one; the script also
measures a device-to-device copy and reports it). Times are medians of CUDA-event timings after a warm-up. At
204,800 rows the inputs fit in L2 (about 1.6 MB a column), so that size is judged by its absolute time; at
16,777,216 rows they do not. The advantage paths run eagerly and as a replayed CUDA graph (their ops never
synchronise with the host; the graph removes the launch gaps between their dozen kernels). Every timed kernel
output is first checked against the reference, so a wrong kernel cannot report a time.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from typing import Any

import torch

from pyagentrl.ops import reference
from pyagentrl.ops._library import OP_NAMES as OPS
from pyagentrl.ops._library import has_kernel

P = torch.ops.pyagentrl
SIZES = (204_800, 16 * 1024 * 1024)
DEVICE = "cuda"  # --dry-run: "cpu", to check the script itself on a machine without a GPU


def median_ms(fn: Callable[[], Any], repeats: int = 30, warmup: int = 3) -> float:
    for _ in range(warmup):
        fn()
    if DEVICE == "cpu":
        return statistics.median(_cpu_ms(fn) for _ in range(min(repeats, 3)))
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def _cpu_ms(fn: Callable[[], Any]) -> float:
    start = time.perf_counter()
    fn()
    return (time.perf_counter() - start) * 1e3


def graph_of(fn: Callable[[], Any]) -> torch.cuda.CUDAGraph:
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    return graph


def copy_bandwidth() -> float:
    """Bytes/s of a 2 GiB device-to-device copy, counting bytes read plus bytes written."""
    src = torch.randn(256 * 1024 * 1024 if DEVICE == "cuda" else 1024 * 1024, device=DEVICE)
    dst = torch.empty_like(src)
    ms = median_ms(lambda: dst.copy_(src), repeats=10)
    return 2 * src.numel() * 4 / (ms / 1e3)


def batch(n: int, seed: int) -> dict[str, Any]:
    """n rows of shuffled trajectories of 2-40 steps, 8 per task group, with anchor keys shared by about a third
    of the rows of a group (as make_step_batch draws them, at GPU sizes)."""
    gen = torch.Generator(device=DEVICE).manual_seed(seed)
    lengths = torch.randint(2, 41, (n // 20,), device=DEVICE, generator=gen)
    lengths = lengths[: int((torch.cumsum(lengths, 0) <= n).sum())]
    num_trajs = lengths.numel()
    traj = torch.repeat_interleave(torch.arange(num_trajs, device=DEVICE), lengths)
    rows = traj.numel()
    step = torch.arange(rows, device=DEVICE) - (torch.cumsum(lengths, 0) - lengths)[traj]
    order = torch.randperm(rows, device=DEVICE, generator=gen)
    traj, step = traj[order], step[order]
    group = traj // 8
    shared = torch.rand(rows, device=DEVICE, generator=gen) < 0.4
    anchors = torch.where(shared, group * 1000 + step * 2 + (step % 2), torch.randint(0, 2**62, (rows,), device=DEVICE))
    rewards = torch.where(torch.rand(rows, device=DEVICE, generator=gen) < 0.05, 1.0, 0.0)
    return {
        "rows": rows,
        "num_trajs": num_trajs,
        "num_groups": int(group.max()) + 1,
        "traj": traj,
        "step": step,
        "group": group,
        "anchors": anchors,
        "rewards": rewards,
        "values": torch.randn(rows, device=DEVICE, generator=gen),
    }


def gigpo(b: dict[str, Any], ops: Any) -> torch.Tensor:
    """A^E + A^S (docs/algorithms.md (G5)-(G8)) from the ops alone; the number of rows bounds the anchor groups."""
    n = b["rows"]
    returns = ops.trajectory_gae(b["rewards"], None, b["traj"], b["step"], b["num_trajs"], 0.95, 1.0)
    states, _ = ops.factorize_pairs(b["group"], b["anchors"])
    episode = ops.group_normalize(b["rewards"], b["group"], b["num_groups"], True, True, 1e-6, False)
    return episode + ops.group_normalize(returns, states, n, True, True, 1e-6, False)


def gagpo(b: dict[str, Any], ops: Any) -> torch.Tensor:
    """(V1)-(V4) from the ops alone."""
    n = b["rows"]
    returns = ops.trajectory_gae(b["rewards"], None, b["traj"], b["step"], b["num_trajs"], 0.95, 1.0)
    states, _ = ops.factorize_pairs(b["group"], b["anchors"])
    value = ops.grouped_stats(returns, states, n, True)[1][states]
    advantage = ops.trajectory_gae(b["rewards"], value, b["traj"], b["step"], b["num_trajs"], 0.95, 0.95)
    return ops.group_normalize(advantage, b["group"], b["num_groups"], True, True, 1e-6, False)


def check(got: Any, want: Any, what: str) -> None:
    """The GPU result against the CPU kernels' (the same conventions; the PyTorch reference differs from both on
    all-equal float32 groups, docs/algorithms.md (D5))."""
    got = got if isinstance(got, tuple) else (got,)
    want = want if isinstance(want, tuple) else (want,)
    for g, w in zip(got, want, strict=True):
        if g.is_floating_point():
            torch.testing.assert_close(g.cpu(), w, rtol=1e-5, atol=1e-6, msg=lambda m: f"{what}: {m}")
        else:
            assert torch.equal(g.cpu(), w), f"{what}: ids differ from the CPU kernel's"


def on_cpu(b: dict[str, Any]) -> dict[str, Any]:
    return {k: v.cpu() if isinstance(v, torch.Tensor) else v for k, v in b.items()}


def op_cases(b: dict[str, Any]) -> list[tuple[str, Callable[[Any], Any], int]]:
    """(name, call given the op namespace, bytes its interface moves) for each op on batch b."""
    r, v, rows = b["rewards"], b["values"], b["rows"]
    groups = b["group"]
    states = P.factorize_pairs(b["group"], b["anchors"])[0]
    g, s = b["num_groups"], int(states.max()) + 1
    return [
        ("grouped_stats", lambda o: o.grouped_stats(r, states, s, True), rows * 12 + s * 24),
        ("group_normalize", lambda o: o.group_normalize(r, groups, g, True, True, 1e-6, False), rows * 16),
        ("factorize_pairs", lambda o: o.factorize_pairs(b["group"], b["anchors"]), rows * 24),
        (
            "discounted returns",
            lambda o: o.trajectory_gae(r, None, b["traj"], b["step"], b["num_trajs"], 0.95, 1.0),
            rows * 24,
        ),
        (
            "trajectory_gae",
            lambda o: o.trajectory_gae(r, v, b["traj"], b["step"], b["num_trajs"], 0.95, 0.95),
            rows * 28,
        ),
    ]


def loss_case(rows: int, length: int) -> tuple[Callable[[], Any], Callable[[], Any], int]:
    """Forward + backward of the per-action loss at rows x length float32 tokens (one action per row, the
    response in the last 3/4 of the row). Floor: forward reads 4 and writes 3 tensors, backward reads dloss_dlogp
    and writes the gradient: 36 bytes a token."""
    gen = torch.Generator(device=DEVICE).manual_seed(1)
    logp = -torch.rand(rows, length, device=DEVICE, generator=gen) * 3
    old = logp + 0.1 * torch.randn(rows, length, device=DEVICE, generator=gen)
    adv = torch.randn(rows, 1, device=DEVICE, generator=gen).expand(rows, length).contiguous()
    mask = torch.ones(rows, length, device=DEVICE)
    mask[:, : length // 4] = 0
    with torch.no_grad():  # the loss has no grouping: the float32 reference is a fair check
        got = P.per_action_clipped_loss(logp, old, adv, mask, None, 0.2, 0.28)
        want = reference.per_action_clipped_loss(logp, old, adv, mask, None, 0.2, 0.28)
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-6)
    x = logp.clone().requires_grad_()
    grad = torch.ones(rows, length, device=DEVICE)

    def kernel() -> Any:
        out = P.per_action_clipped_loss(x, old, adv, mask, None, 0.2, 0.28)
        torch.autograd.backward(out[0], grad)

    def ref() -> Any:
        out = reference.per_action_clipped_loss(x, old, adv, mask, None, 0.2, 0.28)
        torch.autograd.backward(out[0], grad)

    return kernel, ref, rows * length * 36


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", help="also write the figures here")
    parser.add_argument("--bandwidth", type=float, default=4.8e12, help="bytes/s of the floor (default 4.8e12)")
    parser.add_argument("--loss-rows", type=int, default=204_800)
    parser.add_argument("--loss-length", type=int, default=512)
    parser.add_argument("--dry-run", action="store_true", help="the whole script on CPU at small sizes (no figures)")
    args = parser.parse_args()
    global DEVICE, SIZES
    if args.dry_run:
        DEVICE, SIZES, args.loss_rows, args.loss_length = "cpu", (20_000, 100_000), 256, 128
    else:
        assert torch.cuda.is_available(), "needs a CUDA GPU (or --dry-run)"
        missing = [op for op in OPS if not has_kernel(op, torch.device("cuda"))]
        assert not missing, f"no CUDA kernels for {missing}: build with PYAGENTRL_WITH_CUDA"
    rows_out: list[dict[str, Any]] = []
    copy = copy_bandwidth()
    name = torch.cuda.get_device_name() if DEVICE == "cuda" else "CPU (dry run)"
    print(
        f"{name}: device-to-device copy {copy / 1e12:.2f} TB/s; floor at {args.bandwidth / 1e12:.2f} TB/s", flush=True
    )

    def record(name: str, n: int, kernel_ms: float, ref_ms: float | None, floor_bytes: int | None, note: str = ""):
        floor_ms = floor_bytes / args.bandwidth * 1e3 if floor_bytes else None
        row = {
            "case": name,
            "rows": n,
            "kernel_ms": kernel_ms,
            "reference_ms": ref_ms,
            "floor_ms": floor_ms,
            "x_floor": kernel_ms / floor_ms if floor_ms else None,
            "note": note,
        }
        rows_out.append(row)
        print(json.dumps(row), flush=True)

    for n in SIZES:
        b = batch(n, seed=n)
        cpu_cases = op_cases(on_cpu(b))
        for (name, call, nbytes), (_, cpu_call, _) in zip(op_cases(b), cpu_cases, strict=True):
            check(call(P), cpu_call(P), f"{name} at {n}")
            record(name, n, median_ms(lambda c=call: c(P)), median_ms(lambda c=call: c(reference), repeats=5), nbytes)
        for name, fn in (("GiGPO advantage", gigpo), ("GAGPO advantage", gagpo)):
            check(fn(b, P), fn(on_cpu(b), P), f"{name} at {n}")
            eager = median_ms(lambda f=fn, b=b: f(b, P))
            ref_ms = median_ms(lambda f=fn, b=b: f(b, reference), repeats=5)
            record(name, n, eager, ref_ms, None, "eager")
            if DEVICE == "cuda":
                graph = graph_of(lambda f=fn, b=b: f(b, P))
                record(name, n, median_ms(graph.replay), None, None, "CUDA graph")
    kernel, ref, nbytes = loss_case(args.loss_rows, args.loss_length)
    record(
        f"loss fwd+bwd x{args.loss_length}",
        args.loss_rows,
        median_ms(kernel, repeats=10),
        median_ms(ref, repeats=5),
        nbytes,
    )

    print("\n| case | rows | kernel µs | reference µs | floor µs | x floor | note |\n|---|---|---|---|---|---|---|")
    for r in rows_out:
        us = lambda v: "" if v is None else f"{v * 1e3:.1f}"  # noqa: E731
        ratio = "" if r["x_floor"] is None else f"{r['x_floor']:.1f}"
        print(
            f"| {r['case']} | {r['rows']:,} | {us(r['kernel_ms'])} | {us(r['reference_ms'])} | "
            f"{us(r['floor_ms'])} | {ratio} | {r['note']} |"
        )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(
                {"device": name, "copy_bytes_per_s": copy, "torch": torch.__version__, "rows": rows_out}, f, indent=2
            )


if __name__ == "__main__":
    main()
