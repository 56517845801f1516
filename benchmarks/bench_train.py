"""The main job's iteration, phase by phase: `pyagentrl train train/configs/default.yaml` (GiGPO on FrozenLake, the
embedded model, the vLLM engine) run twice in the same session, with bf16 compute (the default on CPUs with AMX or
AVX512-BF16) and with fp32 compute (the baseline), each as its own process.

    python benchmarks/bench_train.py [--iterations 3] [--write]

Reports the mean seconds per phase over the iterations after the first (the first includes one-time warm-ups),
the share of an iteration spent on state keys + advantages (the GiGPO paper reports < 0.002 % at its scale), and the
wall time of the whole command. ``--write`` adds or replaces the "## Training (issue 10)" section of RESULTS.md.
"""

from __future__ import annotations

import argparse
import datetime
import json
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from machine import cpu_model  # benchmarks/machine.py (the script's folder is on sys.path)

REPO = Path(__file__).resolve().parents[1]
SECTION = "## Training (issue 10)"
PHASES = ("rollout", "keys", "advantages", "old_logprobs", "update", "weight_sync")


def run(bf16: str, iterations: int, out: Path) -> dict:
    command = [
        sys.executable, "-P", "-m", "pyagentrl", "train", str(REPO / "train/configs/default.yaml"),
        f"iterations={iterations}", f"actor.bf16={bf16}", f"output_dir={out}", f"name=bench-{bf16}",
    ]  # fmt: skip
    clock = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, cwd=REPO)
    wall = time.perf_counter() - clock
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed:\n{done.stderr[-4000:]}")
    (run_dir,) = out.glob(f"bench-{bf16}-*")
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    steady = rows[1:] or rows
    mean = {p: sum(r[f"seconds_{p}"] for r in steady) / len(steady) for p in PHASES}
    iteration = sum(r["seconds_iteration"] for r in steady) / len(steady)
    share = sum(r["keys_and_advantages_share"] for r in steady) / len(steady)
    return {"bf16": bf16, "wall": wall, "phases": mean, "iteration": iteration, "share": share, "rows": rows}


def _seconds(value: float) -> str:
    return f"{value:.2f} s" if value >= 0.1 else f"{value * 1e3:.2f} ms"


def table(results: list[dict]) -> str:
    head = "| compute | " + " | ".join(PHASES) + " | iteration | keys + advantages | whole command |"
    lines = [head, "|" + "---|" * (len(PHASES) + 4)]
    for r in results:
        label = "bf16 autocast" if r["bf16"] == "true" else "fp32 (baseline)"
        cells = " | ".join(_seconds(r["phases"][p]) for p in PHASES)
        lines.append(f"| {label} | {cells} | {r['iteration']:.1f} s | {r['share'] * 100:.4f} % | {r['wall']:.0f} s |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--iterations", type=int, default=3)
    parser.add_argument("--write", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        results = [run(bf16, args.iterations, Path(tmp)) for bf16 in ("true", "false")]
    first = results[0]["rows"]
    text = table(results)
    rows_line = ", ".join(f"{r['rows']} rows / {r['generated_tokens']} tokens" for r in first)
    learned = ", ".join(f"{r['invalid_action_rate']:.2f}" for r in first)
    print(text)
    print(f"bf16 run per iteration: {rows_line}; invalid-action rate {learned}")
    if args.write:
        date = datetime.date.today().isoformat()
        section = (
            f"{SECTION}\n\n`python benchmarks/bench_train.py --iterations {args.iterations} --write` on {date}, "
            f"{cpu_model()} (2 cores, no GPU). `pyagentrl train train/configs/default.yaml` (GiGPO, FrozenLake 4x4, "
            "4 task groups x 4 rollouts, the embedded SmolLM2-135M-Instruct, vLLM engine in bf16, full fine-tuning "
            "with ZeRO-2, 2 minibatches of micro-batches of 8 rows) with bf16 compute and with fp32 compute, each its "
            "own process, one after the other. Mean seconds per phase over the iterations after the first; "
            "'whole command' includes start-up (model load, vLLM start, DeepSpeed init) and the final checkpoint.\n\n"
            f"{text}\n\nPer iteration of the bf16 run: {rows_line}; its invalid-action rate went {learned}.\n"
        )
        path = Path(__file__).with_name("RESULTS.md")
        current = path.read_text()
        pattern = re.compile(re.escape(SECTION) + r".*?(?=\n## |\Z)", re.DOTALL)
        updated = (
            pattern.sub(lambda _: section.rstrip("\n"), current)
            if SECTION in current
            else current.rstrip("\n") + "\n\n" + section
        )
        path.write_text(updated.rstrip("\n") + "\n")


if __name__ == "__main__":
    main()
