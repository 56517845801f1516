"""The agent loop on FrozenLake with the embedded model (SmolLM2-135M-Instruct, fp32), vLLM vs HF generate in the same
run: generated tokens/s, environment steps/s, the time split (generate / environment / keys / prompts) and one
in-memory weight update of the whole model.

    python benchmarks/bench_rollout.py [--groups 16] [--group-size 8] [--max-steps 3] [--max-new-tokens 48] [--write]

``--write`` adds or replaces the "## Rollouts" section of benchmarks/RESULTS.md. Each engine first runs
one small untimed rollout (warm-up), then one timed rollout from the same task seeds and sampling seed. Engines run one
after the other, each closed before the next is built.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import sys
import time
from typing import Any

import torch
from machine import cpu_model  # benchmarks/machine.py (the script's folder is on sys.path)
from results import Headline, write_section  # benchmarks/results.py

from pyagentrl.envs import EnvBatch, env_factory, prompt_family
from pyagentrl.hashing import StateKeyer
from pyagentrl.rollout import RolloutConfig, SamplingConfig, collect, make_engine
from pyagentrl.rollout.models import embedded_model_path

SECTION = "## Rollouts"


def measure(spec: str, args: argparse.Namespace) -> dict[str, Any]:
    """``spec``: an engine name, optionally with the dtype it holds the weights in ("vllm:bfloat16")."""
    engine_name, _, dtype = spec.partition(":")
    clock = time.perf_counter()
    engine = make_engine(engine_name, embedded_model_path(), dtype=dtype or "float32")
    start = time.perf_counter() - clock
    config = RolloutConfig(
        sampling=SamplingConfig(temperature=1.0, top_p=1.0, max_new_tokens=args.max_new_tokens, seed=0)
    )
    factory = env_factory("frozenlake", max_steps=args.max_steps)
    keyer = StateKeyer(mode="exact")
    seeds = list(range(args.groups))
    with EnvBatch(factory, 2, args.group_size, backend="thread") as envs:  # warm-up, untimed
        collect(engine, envs, prompt_family("frozenlake"), seeds[:2], keyer, config)
    with EnvBatch(factory, args.groups, args.group_size, backend="thread") as envs:
        clock = time.perf_counter()
        rollout = collect(engine, envs, prompt_family("frozenlake"), seeds, keyer, config)
        wall = time.perf_counter() - clock
    from transformers import AutoModelForCausalLM

    weights = AutoModelForCausalLM.from_pretrained(embedded_model_path(), dtype=torch.float32).state_dict()
    clock = time.perf_counter()
    engine.update_weights(weights.items())
    update = time.perf_counter() - clock
    engine.close()
    return {
        "engine": f"{engine_name} ({dtype or 'float32'})",
        "start": start,
        "wall": wall,
        "rows": rollout.steps.num_rows,
        "tokens": rollout.generated_tokens,
        "invalid": rollout.invalid_rate,
        "seconds": rollout.seconds,
        "update": update,
    }


def table(results: list[dict[str, Any]]) -> list[str]:
    lines = [
        "| engine | start s | rollout s | generated tokens/s | env steps/s | generate | environment | keys | prompts "
        "| env + keys + prompts | weight update s |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        s = r["seconds"]
        share = {k: v / r["wall"] for k, v in s.items()}
        other = share["environment"] + share["keys"] + share["prompts"]
        lines.append(
            f"| {r['engine']} | {r['start']:.1f} | {r['wall']:.1f} | {r['tokens'] / r['wall']:.0f} "
            f"| {r['rows'] / r['wall']:.1f} | {share['generate']:.1%} | {share['environment']:.1%} "
            f"| {share['keys']:.2%} | {share['prompts']:.1%} | {other:.1%} | {r['update']:.2f} |"
        )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--groups", type=int, default=16)
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--max-steps", type=int, default=3)
    parser.add_argument("--max-new-tokens", type=int, default=48)
    parser.add_argument("--engines", nargs="+", default=["vllm:float32", "vllm:bfloat16", "hf:float32"])
    parser.add_argument("--write", action="store_true", help="update benchmarks/RESULTS.md")
    args = parser.parse_args()

    results = [measure(name, args) for name in args.engines]
    lines = table(results)
    rate = {r["engine"]: r["tokens"] / r["wall"] for r in results}
    hf = rate.get("hf (float32)")
    for name, value in rate.items():
        if hf and name.startswith("vllm"):
            lines.append(f"\n{name} loop / hf (float32) loop, generated tokens/s: {value / hf:.2f}x (target >= 2.5x).")
    print("\n".join(lines))
    if args.write:
        argv = " ".join(sys.argv[1:])
        machine, date = f"{cpu_model()}, {os.cpu_count()} cores", datetime.date.today().isoformat()
        section = [
            f"Command: `python benchmarks/bench_rollout.py {argv}`  ",
            f"Machine: {machine}, torch {torch.__version__}, Python {platform.python_version()}  ",
            f"Date: {date}",
            "",
            f"FrozenLake (seeded 4x4 maps, at most {args.max_steps} steps), {args.groups} task groups x "
            f"{args.group_size} rollouts, embedded SmolLM2-135M-Instruct (weights in the dtype shown), temperature "
            f"1, at most {args.max_new_tokens} new tokens per reply, window prompting, exact state keys, thread "
            "environment backend. One timed rollout per engine after an untimed warm-up (2 groups); the shares are "
            "of the rollout's wall time. Replies differ between engines (sampling), so tokens/s is the figure to "
            "compare. The weight update pushes all 135M parameters from an HF state dict.",
            "",
            *lines,
            "",
        ]
        write_section(SECTION, "\n".join(section), headlines=headlines(rate, args, machine, date))


def headlines(rate: dict[str, float], args: argparse.Namespace, machine: str, date: str) -> list[Headline]:
    """The summary's line: the fastest vLLM engine's generated tokens/s against HF generate in float32, with the
    figures of the table and the ratio line."""
    hf = rate.get("hf (float32)")
    vllm = [name for name in rate if name.startswith("vllm")]
    if not hf or not vllm:
        return []
    top = max(vllm, key=lambda name: rate[name])
    return [
        (
            f"generated tokens/s, {top} engine, FrozenLake rollout of {args.groups} x {args.group_size} episodes",
            f"{rate[top]:.0f} tokens/s, {rate[top] / hf:.2f}x",
            f"HF generate loop (float32), {hf:.0f} tokens/s",
            machine,
            date,
        )
    ]


if __name__ == "__main__":
    main()
