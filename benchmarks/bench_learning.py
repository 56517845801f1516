"""Does the trainer optimize reward? `pyagentrl train train/configs/fixed-task.yaml` (one FrozenLake map pinned for
every task, the embedded SmolLM2-135M-Instruct, vLLM) once per estimator, each its own process, one after the
other. Each run scores the untrained policy before its first update and the trained policy after its last on the
same 64 held-out tasks (task seeds never trained on, the same map) at the run's temperature; this script adds a
greedy score of the final checkpoint and the wall time of the training iterations.

    python benchmarks/bench_learning.py [--estimators grpo gigpo gagpo] [--write] [--records DIR] [key=value ...]

``--write`` replaces the "## Learning on a fixed map" section of RESULTS.md; ``--records DIR`` keeps each run's
record (its resolved config.yaml, metrics.jsonl and eval.json) in DIR/<estimator>/ (docs/study/fixed-task).
"""

from __future__ import annotations

import argparse
import datetime
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from machine import cpu_model  # benchmarks/ is the script's folder, on sys.path
from results import Headline, write_section  # benchmarks/results.py

REPO = Path(__file__).resolve().parents[1]
CONFIG = REPO / "train/configs/fixed-task.yaml"
SECTION = "## Learning on a fixed map"


def _pyagentrl(*args: str) -> str:
    command = [sys.executable, "-P", "-m", "pyagentrl", *args]
    done = subprocess.run(command, capture_output=True, text=True, cwd=REPO)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed:\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}")
    return done.stdout


RECORDS = ("config.yaml", "metrics.jsonl", "eval.json")


def run(estimator: str, out: Path, overrides: list[str], records: Path | None) -> dict:
    clock = time.perf_counter()
    settings = [f"algorithm.estimator={estimator}", f"output_dir={out}", f"name={estimator}", *overrides]
    _pyagentrl("train", str(CONFIG), *settings)
    wall = time.perf_counter() - clock
    (run_dir,) = out.glob(f"{estimator}-*")
    record = json.loads((run_dir / "eval.json").read_text())
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    latest = (run_dir / "checkpoints" / "latest").read_text().strip()
    checkpoint = run_dir / "checkpoints" / latest
    _pyagentrl("eval", str(checkpoint), "--tasks", str(record["trained"]["tasks"]), "--temperature", "0")
    greedy = json.loads((checkpoint / "eval.json").read_text())
    if records is not None:
        (records / estimator).mkdir(parents=True, exist_ok=True)
        for name in RECORDS:
            shutil.copyfile(run_dir / name, records / estimator / name)
    return {
        "estimator": estimator,
        "untrained": record["untrained"],
        "trained": record["trained"],
        "greedy": greedy,
        "training_seconds": sum(r["seconds_iteration"] for r in rows),
        "iterations": len(rows),
        "episodes": sum(r["episodes"] for r in rows),
        "train_success": [r["success_rate"] for r in rows],
        "wall": wall,
        "baselines": record.get("baselines"),  # the random mover and the blind sequence, when the run scored them
    }


def _distinct(entry: dict) -> str:
    distinct = entry.get("distinct_tasks", entry["tasks"])
    return f"{distinct} distinct task{'s' if distinct != 1 else ''}"


def _score(entry: dict) -> str:
    if entry["ci95"] is None:  # one distinct task played greedily: one trial
        return f"{entry['successes']}/{entry['tasks']} (1 distinct task: one trial)"
    low, high = entry["ci95"]
    return f"{entry['successes']}/{entry['tasks']} ({low:.2f}-{high:.2f})"


def table(results: list[dict]) -> str:
    lines = [
        "| estimator | untrained, T=1 | untrained, greedy | trained, T=1 | trained, greedy | intervals | training | "
        "episodes | training success, first / last 3 iterations |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        ci_t, ci_u = r["trained"]["ci95"], r["untrained"]["ci95"]
        apart = ci_t is not None and ci_u is not None and ci_t[0] > ci_u[1]
        first, last = r["train_success"][:3], r["train_success"][-3:]
        lines.append(
            f"| {r['estimator']} | {_score(r['untrained'])} | {_score(r['untrained']['greedy'])} | "
            f"{_score(r['trained'])} | {_score(r['greedy'])} | "
            f"{'apart' if apart else 'overlap'} | {r['training_seconds'] / 60:.1f} min ({r['iterations']} it.) | "
            f"{r['episodes']} | {sum(first) / len(first):.2f} / {sum(last) / len(last):.2f} |"
        )
    return "\n".join(lines)


def baselines_text(results: list[dict]) -> str:
    """The model-free baselines the runs scored on their held-out tasks (the same tasks in every run)."""
    baselines = next((r["baselines"] for r in results if r["baselines"]), None)
    if not baselines:
        return "The runs scored no baselines (eval.baselines was off)."
    mover, blind = baselines["random_mover"], baselines["blind_sequence"]
    low, high = mover["ci95"]
    return (
        f"Baselines on the same {mover['tasks']} held-out task seeds ({_distinct(mover)}), scored by the runs: a "
        "uniform random mover "
        f"{mover['successes']:g}/{mover['tasks']} (mean of {mover['passes']} passes, 95 % CI {low:.2f}-{high:.2f}); "
        f"the best blind sequence of <= {blind['length']} moves chosen on task seeds {blind['selection_range'][0]}.."
        f"{blind['selection_range'][1]} ({', '.join(blind['sequence'])}) {_score(blind)}."
    )


def headlines(results: list[dict], machine: str, date: str) -> list[Headline]:
    """The summary's lines: each estimator's trained score against the untrained policy's and, when the run scored
    them, a random mover's and the best blind sequence's, with the figures of the table."""
    out = []
    for r in results:
        against = [f"untrained {_score(r['untrained'])} at T=1"]
        baselines = r["baselines"] or {}
        if "random_mover" in baselines:
            mover = baselines["random_mover"]
            against.append(f"random mover {mover['successes']:g}/{mover['tasks']}")
        blind = baselines.get("blind_sequence", {})
        if "successes" in blind:
            against.append(f"blind route {_score(blind)}")
        out.append(
            (
                f"held-out success on one pinned FrozenLake map, {r['estimator']} trained {r['iterations']} iterations",
                f"{_score(r['trained'])} at T=1, {_score(r['greedy'])} greedy",
                "; ".join(against),
                machine,
                date,
            )
        )
    return out


def write(results: list[dict], command: str) -> None:
    """Replaces the section of RESULTS.md with the runs' table, baselines and headlines."""
    text = table(results)
    machine, date = f"{cpu_model()}, 2 cores", datetime.date.today()
    write_section(
        SECTION,
        f"Command: `{command}`  \nMachine: {machine}, no GPU. Date: {date}.\n\n"
        "`pyagentrl train train/configs/fixed-task.yaml` once per estimator: FrozenLake 4x4 with one map pinned "
        "for every task (`map_seed: 12`, random start and goal), the embedded SmolLM2-135M-Instruct, vLLM engine "
        "in bf16, full fine-tuning, conversation prompting with compact later turns, one row per episode. Held-out "
        "score: 64 task seeds (2^30..), which are 1 distinct task (the pinned map, with its start and goal, is the "
        "task the runs trained on) x 64 samples, one episode each, before the first update (untrained) and after "
        "the last (trained), at the run's temperature 1 with Wilson 95 % intervals over the samples (that task's "
        "success probability), and greedy (the final checkpoint): 64 copies of one deterministic episode, one "
        "trial, no interval; 'apart' when the trained interval lies above the untrained one. 'training' sums the "
        "iterations' wall time (rollout, update, weight sync; not start-up or scoring).\n\n"
        f"{text}\n\n{baselines_text(results)}\n\nOne run (seed 0) per estimator: this shows that each of them "
        "raises the reward of the policy it trains, on the task it trains on, far above a random mover and up to "
        "the fixed route a blind search finds (equal to it greedily, not above it at temperature 1); not which is "
        "faster, and not map reading: the policy learned one map's route (docs/learning.md; docs/study/learn and "
        "docs/study/estimators have the random-map runs against honest baselines).",
        headlines=headlines(results, machine, date.isoformat()),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--estimators", nargs="+", default=["grpo", "gigpo", "gagpo"])
    parser.add_argument("--write", action="store_true")
    parser.add_argument("--records", type=Path, help="keep each run's config, metrics and eval.json here")
    parser.add_argument("overrides", nargs="*", help="key=value overrides of the config")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        results = [run(e, Path(tmp), args.overrides, args.records) for e in args.estimators]
    print(table(results))
    if args.write:
        records = f" --records {args.records}" if args.records else ""
        overrides = "".join(f" {o}" for o in args.overrides)
        write(results, f"python benchmarks/bench_learning.py --write{records}{overrides}")


if __name__ == "__main__":
    main()
