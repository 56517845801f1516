"""The main job's iteration, phase by phase: `pyagentrl train train/configs/default.yaml` run twice in the same
session, each as its own process, one after the other (no held-out scoring: `eval.tasks=0`).

    python benchmarks/bench_train.py [--compare learner|precision] [--iterations 4] [--write]

``--compare learner`` (default): the learner's cost per episode of the shipped config against the path earlier
versions took on the same task settings: window prompts (one row per step, each with its own prompt), two
minibatches of micro-batches of 8 rows and a scoring pass over every row for the old log-probs, both at a learning
rate too small to change the policy (equal episodes in expectation). Writes "## Learner cost per episode".

``--compare precision``: bf16 compute (the default on CPUs with AMX or AVX512-BF16) against fp32 compute. Writes
"## Training: seconds per phase".

Means are over the iterations after the first (the first includes one-time warm-ups).
"""

from __future__ import annotations

import argparse
import datetime
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from machine import cpu_model  # benchmarks/machine.py (the script's folder is on sys.path)
from results import write_section  # benchmarks/results.py

REPO = Path(__file__).resolve().parents[1]
PHASES = ("rollout", "keys", "advantages", "old_logprobs", "update", "weight_sync")
#: Earlier versions' learner path, on the shipped config's task settings.
WINDOW_STEP = [
    "rollout.prompting=window",
    "rollout.history_length=1",
    "actor.layout=step",
    "actor.minibatches=2",
    "actor.micro_batch_size=8",
    "actor.score_every_row=true",
]
#: The learner comparison runs every update in full but at a learning rate too small to change the policy: both paths
#: then play the untrained policy's episodes, of equal length in expectation (with learning on, each path's episodes
#: shorten as its policy improves, at its own pace, and the cost per episode measures that race, not the learner).
FROZEN = ["actor.lr=1e-12"]
COMPARISONS = {
    "learner": [
        ("window prompts, step rows, scoring pass (before)", [*WINDOW_STEP, *FROZEN]),
        ("shipped config", FROZEN),
    ],
    "precision": [("bf16 autocast", ["actor.bf16=true"]), ("fp32 (baseline)", ["actor.bf16=false"])],
}


def run(label: str, overrides: list[str], iterations: int, out: Path) -> dict:
    name = f"bench-{len(list(out.iterdir()))}"
    command = [
        sys.executable, "-P", "-m", "pyagentrl", "train", str(REPO / "train/configs/default.yaml"),
        f"iterations={iterations}", "eval.tasks=0", f"output_dir={out}", f"name={name}", *overrides,
    ]  # fmt: skip
    clock = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, cwd=REPO)
    wall = time.perf_counter() - clock
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed:\n{done.stderr[-4000:]}")
    (run_dir,) = out.glob(f"{name}-*")
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    steady = rows[1:] or rows

    def mean(key: str) -> float:
        return sum(r[key] for r in steady) / len(steady)

    learner = [r["seconds_old_logprobs"] + r["seconds_update"] for r in steady]
    return {
        "label": label,
        "overrides": overrides,
        "wall": wall,
        "phases": {p: mean(f"seconds_{p}") for p in PHASES},
        "iteration": mean("seconds_iteration"),
        "share": mean("keys_and_advantages_share"),
        "learner_per_episode": sum(learner) / sum(r["episodes"] for r in steady),
        "learner_per_row": sum(learner) / sum(r["rows"] for r in steady),
        "tokens_per_sampled": mean("learner_tokens_per_sampled_token"),
        "rows": rows,
    }


def _seconds(value: float) -> str:
    return f"{value:.2f} s" if value >= 0.1 else f"{value * 1e3:.2f} ms"


def table(results: list[dict]) -> str:
    head = "| path | " + " | ".join(PHASES) + " | iteration | learner s / episode | learner s / step | "
    head += "learner tokens / sampled token | whole command |"
    lines = [head, "|" + "---|" * (len(PHASES) + 6)]
    for r in results:
        cells = " | ".join(_seconds(r["phases"][p]) for p in PHASES)
        lines.append(
            f"| {r['label']} | {cells} | {r['iteration']:.1f} s | {r['learner_per_episode']:.2f} s | "
            f"{r['learner_per_row']:.2f} s | {r['tokens_per_sampled']:.1f} | {r['wall']:.0f} s |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--compare", choices=sorted(COMPARISONS), default="learner")
    parser.add_argument("--iterations", type=int, default=4)
    parser.add_argument("--write", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        results = [run(label, o, args.iterations, Path(tmp)) for label, o in COMPARISONS[args.compare]]
    text = table(results)
    per_iteration = "; ".join(
        f"{r['label']}: " + ", ".join(f"{x['episodes']} episodes / {x['rows']} steps" for x in r["rows"])
        for r in results
    )
    print(text)
    print(per_iteration)
    if not args.write:
        return
    command = f"python benchmarks/bench_train.py --compare {args.compare} --iterations {args.iterations} --write"
    where, date = f"{cpu_model()}, 2 cores", datetime.date.today().isoformat()
    machine = f"{where}, no GPU; {date}"
    if args.compare == "learner":
        before, after = results
        speedup = before["learner_per_episode"] / after["learner_per_episode"]
        write_section(
            "## Learner cost per episode",
            f"Command: `{command}`  \nMachine: {machine}.\n\n`pyagentrl train train/configs/default.yaml` on its own "
            "task settings, twice: as shipped, and with the learner path of earlier versions (overrides "
            f"`{' '.join(WINDOW_STEP)}`): a window prompt per step row, two minibatches, a scoring pass over every "
            "row for the old log-probs. Both at `actor.lr=1e-12`: every update runs in full, but the policy stays "
            "the untrained one, so both paths play episodes of the same length in expectation. Learner time is old "
            "log-probs + update; means over the iterations after the first. Learner tokens are the tokens forwarded "
            "per pass over the batch, per sampled token.\n\n"
            f"{text}\n\nLearner time per episode: {speedup:.1f}x less. Per iteration: {per_iteration}.",
            headlines=[
                (
                    "learner time (old log-probs + update) per episode, train/configs/default.yaml",
                    f"{after['learner_per_episode']:.2f} s, {speedup:.1f}x less",
                    f"{before['label']}, {before['learner_per_episode']:.2f} s",
                    where,
                    date,
                )
            ],
        )
    else:
        bf16, fp32 = results
        write_section(
            "## Training: seconds per phase",
            f"Command: `{command}`  \nMachine: {machine}.\n\n`pyagentrl train train/configs/default.yaml` with bf16 "
            "compute and with fp32 compute, each its own process. Mean seconds per phase over the iterations after "
            "the first; 'whole command' includes start-up (model load, vLLM start, DeepSpeed init) and the final "
            f"checkpoint.\n\n{text}\n\nPer iteration: {per_iteration}.",
            headlines=[
                (
                    f"training iteration of train/configs/default.yaml, {bf16['label']} compute",
                    f"{bf16['iteration']:.1f} s",
                    f"{fp32['label'].removesuffix(' (baseline)')} compute, {fp32['iteration']:.1f} s",
                    where,
                    date,
                )
            ],
        )


if __name__ == "__main__":
    main()
