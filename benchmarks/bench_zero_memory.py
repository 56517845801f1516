"""Memory per rank of one policy update under ZeRO-0, ZeRO-2 and ZeRO-3, at a config's settings (default: the main
job's, train/configs/default.yaml: full fine-tuning, one minibatch of micro-batches of 16 episode rows).

    python benchmarks/bench_zero_memory.py [--config train/configs/default.yaml] [--ranks 1 2] [--write]

One rollout is played at the config's settings with the HF engine and saved; then, for each ZeRO config and number
of ranks, a fresh `torchrun` world loads the policy into the trainer's learner and makes the trainer's update
(`update_on_rollout`) on that rollout, each rank reporting:

- the bytes of the training state it holds: its share of the weights (ZeRO-3 keeps 1/N of each partitioned weight),
  of the gradients (ZeRO-0 keeps whole ones) and of the optimizer states (partitioned from ZeRO-1), counted from
  the tensors themselves after the update;
- its peak resident memory (on CPU: everything, the whole model as loaded before DeepSpeed partitions it included)
  and, on GPUs, the peak bytes the CUDA allocator handed out.

The learner alone: no rollout engine, no reference model.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import pickle
import resource
import socket
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
STAGES = ("zero0.json", "zero2.json", "zero3.json")
GIB = 2**30
PARTS = ("weights", "gradients", "optimizer", "zero_buffers")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def save_rollout(config_path: Path, out: Path) -> int:
    """Plays the first iteration's task groups of the config with the HF engine; returns the episode count."""
    from pyagentrl.envs import EnvBatch, env_factory, prompt_family
    from pyagentrl.hashing import StateKeyer
    from pyagentrl.rollout import collect, make_engine
    from pyagentrl.rollout.models import resolve_model
    from pyagentrl.training.config import load_config
    from pyagentrl.training.seeding import task_seeds
    from pyagentrl.training.settings import rollout_config

    config = load_config(config_path)
    engine = make_engine("hf", resolve_model(config.model))
    env = config.env
    with EnvBatch(env_factory(env.name, **env.options), env.num_groups, env.group_size, backend="serial") as envs:
        rollout = collect(
            engine,
            envs,
            prompt_family(env.name),
            task_seeds(config.seed, 0, env.num_groups),
            StateKeyer(mode=config.anchors.mode, **config.anchors.options),  # type: ignore[arg-type]
            rollout_config(config, sampling_seed=config.seed),
        )
    engine.close()
    out.write_bytes(pickle.dumps(rollout))
    return env.num_groups * env.group_size


def _state_bytes(learner: Any) -> dict[str, int]:
    """The bytes of the training state this rank holds, each storage counted once, in this order: its weights (its
    partitions under ZeRO-3), the gradients on the weights, the torch AdamW's states, and every other tensor the ZeRO
    optimizer holds (its fp32 partitions of the weights, gradient partitions and buckets)."""
    import torch

    seen: set[int] = set()

    def size(tensors: Any) -> int:
        total = 0
        for t in tensors:
            if isinstance(t, torch.Tensor) and t.numel() and t.untyped_storage().data_ptr() not in seen:
                seen.add(t.untyped_storage().data_ptr())
                total += t.untyped_storage().nbytes()
        return total

    def reachable(obj: Any, depth: int = 0) -> Any:
        if isinstance(obj, torch.Tensor):
            yield obj
        elif depth < 4 and isinstance(obj, dict):
            for value in obj.values():
                yield from reachable(value, depth + 1)
        elif depth < 4 and isinstance(obj, list | tuple):
            for value in obj:
                yield from reachable(value, depth + 1)

    params = list(learner.model.parameters())
    optimizer = learner.engine.optimizer
    inner = getattr(optimizer, "optimizer", optimizer)  # ZeRO's wrapper around the torch AdamW
    return {
        "weights": size(getattr(p, "ds_tensor", p) for p in params),
        "gradients": size(g for p in params for g in (p.grad, getattr(p, "grad_accum", None))),
        "optimizer": size(reachable(inner.state)),
        "zero_buffers": size(reachable(vars(optimizer))) if optimizer is not inner else 0,
    }


def worker(rollout_path: str, out: str, config_path: str, deepspeed: str) -> None:
    import torch

    from pyagentrl.training.config import load_config
    from pyagentrl.training.distributed import init_world
    from pyagentrl.training.learner import Learner
    from pyagentrl.training.trainer import update_on_rollout

    config = load_config(Path(config_path), [f"actor.deepspeed={deepspeed}", "actor.kl.coef=0"])
    world = init_world()
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // world.size))
    learner = Learner.for_run(config, world)
    with open(rollout_path, "rb") as f:
        rollout = pickle.load(f)
    # The state just before an optimizer step, when gradients are whole and AdamW's states exist: the second
    # update's (AdamW makes its states at its first step).
    before_step: list[dict[str, int]] = []
    step = learner.engine.step

    def measured_step(*args: Any, **kwargs: Any) -> Any:
        if learner.engine.is_gradient_accumulation_boundary():
            before_step.append(_state_bytes(learner))
        return step(*args, **kwargs)

    learner.engine.step = measured_step
    for iteration in (0, 1):
        update_on_rollout(learner, config, rollout, iteration=iteration)
    record = {
        "rank": world.rank,
        **before_step[-1],
        "peak_rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,  # Linux reports KiB
        "peak_cuda": torch.cuda.max_memory_allocated() if torch.cuda.is_available() else None,
    }
    records = world.all_gather_object(record)
    if world.is_main:
        Path(out).write_text(json.dumps(records))


def measure(rollout: Path, config: Path, deepspeed: str, ranks: int, scratch: Path) -> list[dict[str, Any]]:
    out = scratch / f"{deepspeed}-{ranks}.json"
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_PORT")}
    launcher = [sys.executable, "-P", "-m", "torch.distributed.run", "--nproc_per_node", str(ranks)]
    launcher.append(f"--master_port={_free_port()}")
    args = [__file__, "--worker", str(rollout), str(out), str(config), deepspeed]
    done = subprocess.run([*launcher, *args], capture_output=True, text=True, env=env, cwd=REPO)
    if done.returncode != 0:
        raise SystemExit(f"{deepspeed} on {ranks} rank(s) failed:\n{done.stderr[-4000:]}")
    records: list[dict[str, Any]] = json.loads(out.read_text())
    return records


def state_bytes(record: dict[str, Any]) -> int:
    return sum(int(record[key]) for key in PARTS)


def table(results: list[tuple[str, int, list[dict[str, Any]]]]) -> str:
    lines = [
        "| ZeRO | ranks | weights | gradients | AdamW states | ZeRO's buffers | training state | peak RSS |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for deepspeed, ranks, records in results:
        worst = max(records, key=state_bytes)
        parts = " | ".join(f"{worst[key] / GIB:.2f}" for key in PARTS)
        rss = max(r["peak_rss"] for r in records)
        lines.append(
            f"| {deepspeed.removesuffix('.json')} | {ranks} | {parts} | {state_bytes(worst) / GIB:.2f} | "
            f"{rss / GIB:.2f} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", default="train/configs/default.yaml")
    parser.add_argument("--ranks", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--write", action="store_true", help="record the table in benchmarks/RESULTS.md")
    parser.add_argument("--worker", nargs=4, metavar=("ROLLOUT", "OUT", "CONFIG", "DEEPSPEED"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(*args.worker)
        return
    config = (REPO / args.config).resolve()
    with tempfile.TemporaryDirectory() as tmp:
        scratch = Path(tmp)
        episodes = save_rollout(config, scratch / "rollout.pkl")
        results = []
        for deepspeed in STAGES:
            for ranks in args.ranks:
                records = measure(scratch / "rollout.pkl", config, deepspeed, ranks, scratch)
                results.append((deepspeed, ranks, records))
                print(table(results[-1:]).splitlines()[-1], flush=True)
    text = table(results)
    print(text)
    if not args.write:
        return
    from machine import cpu_model  # benchmarks/machine.py (the script's folder is on sys.path)
    from results import write_section  # benchmarks/results.py

    ranks = " ".join(map(str, args.ranks))
    command = f"python benchmarks/bench_zero_memory.py --config {args.config} --ranks {ranks} --write"
    where, date = f"{cpu_model()}, {os.cpu_count()} cores", datetime.date.today().isoformat()
    by = {(d, n): max(state_bytes(r) for r in rs) for d, n, rs in results}
    most = max(args.ranks)
    write_section(
        "## Training: memory per rank under ZeRO-0, ZeRO-2 and ZeRO-3",
        f"Command: `{command}`  \nMachine: {where}, no GPU; {date}.\n\nOne update of the trainer's learner "
        f"(`update_on_rollout`, no rollout engine, no reference model) on one rollout of {args.config}'s settings "
        f"({episodes} episodes, played once with the HF engine), in a fresh `torchrun` world per row. GiB per rank "
        "(the rank holding the most): the training state is what the rank holds just before the second update's "
        "optimizer step, counted from its tensors (its share of the weights, the gradients, AdamW's states and the "
        "other buffers of DeepSpeed's ZeRO optimizer, all fp32 here); peak RSS is the process's whole peak, which on "
        "CPU includes the activations of a micro-batch and the model as loaded in full before DeepSpeed partitions "
        "it.\n\n"
        f"{text}\n\nThe training state per rank falls with ZeRO-3 as the parameter count over the ranks (AdamW's two "
        "states, the gradients and an fp32 copy of the weights, all partitioned); ZeRO-2 partitions all but the "
        "weights, and keeps an fp32 copy of its share beside them even when the weights are fp32. At this model's "
        "size (135M parameters) the peak is set by a micro-batch's activations (16 whole-episode rows per rank on "
        "one rank, 8 on two), not by the training state: ZeRO-3 does not lower it here. It is for models whose "
        "training state does not fit one device.",
        headlines=[
            (
                f"training state per rank, ZeRO-3 on {most} ranks, {args.config}",
                f"{by[('zero3.json', most)] / GIB:.2f} GiB",
                f"ZeRO-0, {by[('zero0.json', most)] / GIB:.2f} GiB; ZeRO-2, {by[('zero2.json', most)] / GIB:.2f} GiB",
                where,
                date,
            )
        ],
    )


if __name__ == "__main__":
    main()
