"""The `pyagentrl` command (also `python -m pyagentrl`).

pyagentrl train CONFIG [key=value ...]       train from a YAML config (train/configs/), with overrides
pyagentrl train --resume RUN_DIR [key=value ...]
pyagentrl eval CHECKPOINT [--tasks N]        success rate on held-out tasks, with a 95 % interval
pyagentrl plot RUN_DIR                       the run's curves as a PNG
pyagentrl study SPEC [--report-only]         every arm x seed x family of a study, resumable, then its report
pyagentrl demo                               the ops on a synthetic batch, then real FrozenLake rollouts
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="pyagentrl", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    commands.add_parser(
        "demo", add_help=False, help="the ops on a synthetic batch, then GiGPO advantages of real FrozenLake rollouts"
    )
    train = commands.add_parser("train", help="train (or resume) a run")
    train.add_argument("config", nargs="?", help="a YAML config, e.g. train/configs/default.yaml")
    train.add_argument("overrides", nargs="*", help="key=value overrides, e.g. iterations=5 actor.lr=1e-5")
    train.add_argument("--resume", metavar="RUN_DIR", help="continue this run from its latest checkpoint")
    evaluate = commands.add_parser("eval", help="score a checkpoint on held-out tasks")
    evaluate.add_argument("checkpoint", help="a checkpoint directory: <run>/checkpoints/iter_NNNNNN")
    evaluate.add_argument(
        "--tasks", type=_positive_int, default=32, help="held-out tasks, one episode each (default 32)"
    )
    evaluate.add_argument("--engine", choices=("vllm", "hf"), help="the rollout engine (default: the run's)")
    evaluate.add_argument("--temperature", type=float, help="sampling temperature (default: the run's; 0: greedy)")
    plot = commands.add_parser("plot", help="draw a run's curves as a PNG")
    plot.add_argument("run_dir")
    study = commands.add_parser("study", help="train and evaluate every arm of a study spec (resumable), then report")
    study.add_argument("spec", help="a study spec, e.g. train/studies/frozenlake.yaml")
    study.add_argument("--output", help="where the runs go (default runs/study-<name>)")
    study.add_argument("--report", help="where the report goes (default docs/study/<name>)")
    study.add_argument("--report-only", action="store_true", help="rebuild the report from finished runs only")
    args, rest = parser.parse_known_args(argv)

    if args.command == "demo":
        from pyagentrl import demo

        demo.main(rest)
        return
    if rest:
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    from pyagentrl.training.checkpoint import ResumeError
    from pyagentrl.training.config import ConfigError

    try:
        if args.command == "train":
            from pyagentrl.training.trainer import train as run_training

            overrides = list(args.overrides)
            if args.resume is not None:
                if args.config is not None:  # argparse took the first override for CONFIG
                    overrides.insert(0, args.config)
                run_training(None, overrides, resume=args.resume)
            else:
                if args.config is None:
                    train.error("give a CONFIG (e.g. train/configs/default.yaml) or --resume RUN_DIR")
                run_training(args.config, overrides)
        elif args.command == "eval":
            from pyagentrl.training.evaluate import evaluate_checkpoint

            evaluate_checkpoint(args.checkpoint, tasks=args.tasks, engine=args.engine, temperature=args.temperature)
        elif args.command == "plot":
            from pyagentrl.training.plot import plot_run

            print(plot_run(args.run_dir))
        elif args.command == "study":
            from pyagentrl.training.study import BrokenRecord, RunFailed, load_spec, run_study, write_report

            spec = load_spec(args.spec, args.output, args.report)
            try:
                print(write_report(spec) if args.report_only else run_study(spec))
            except (RunFailed, BrokenRecord) as exc:
                print(f"pyagentrl study: {exc}", file=sys.stderr)
                raise SystemExit(1) from None
    except (ConfigError, ResumeError, FileNotFoundError) as exc:
        print(f"pyagentrl {args.command}: {exc}", file=sys.stderr)
        raise SystemExit(2) from None


if __name__ == "__main__":
    main()
