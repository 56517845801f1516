"""The `pyagentrl` command (also `python -m pyagentrl`).

pyagentrl train CONFIG [key=value ...]       train from a YAML config (train/configs/), with overrides
pyagentrl train --resume RUN_DIR [key=value ...]
pyagentrl eval CHECKPOINT [--tasks N]        success rate on held-out tasks, with a 95 % interval
pyagentrl export CHECKPOINT OUT_DIR          the checkpoint's policy as a plain HF model directory (LoRA merged,
                                             with the tokenizer): transformers and vLLM load it as it is
pyagentrl plot RUN_DIR                       the run's curves as a PNG
pyagentrl study SPEC [--report-only]         every arm x seed x family of a study, resumable, then its report
pyagentrl baselines CONFIG [key=value ...]   a random mover, the best blind sequence and the untrained policy on the
                                             config's held-out tasks: what a trained policy must beat
pyagentrl testbed SPEC [--out DIR]           the LLM-free credit-assignment testbed: every arm x seed of a spec
                                             (resumable), then its report
pyagentrl demo                               the ops on a synthetic batch, then real FrozenLake rollouts
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

_TRUST_REMOTE_CODE = (
    "let the model's own Python code run (HF's trust_remote_code; never taken from the checkpoint): only for a "
    "model you trust"
)


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
    train.add_argument(
        "--trust-checkpoint",
        action="store_true",
        help="resume a checkpoint this machine did not sign (written elsewhere or by an older pyagentrl): its "
        "DeepSpeed states are pickles, which can run code; only for a checkpoint you trust",
    )
    evaluate = commands.add_parser("eval", help="score a checkpoint on held-out tasks")
    evaluate.add_argument("checkpoint", help="a checkpoint directory: <run>/checkpoints/iter_NNNNNN")
    evaluate.add_argument(
        "--tasks", type=_positive_int, default=32, help="held-out tasks, one episode each (default 32)"
    )
    evaluate.add_argument("--engine", choices=("vllm", "hf"), help="the rollout engine (default: the run's)")
    evaluate.add_argument("--temperature", type=float, help="sampling temperature (default: the run's; 0: greedy)")
    evaluate.add_argument("--trust-remote-code", action="store_true", help=_TRUST_REMOTE_CODE)
    export = commands.add_parser(
        "export", help="write a checkpoint's policy as a plain HF model directory (LoRA merged, with the tokenizer)"
    )
    export.add_argument(
        "checkpoint", metavar="CHECKPOINT", help="a checkpoint directory: <run>/checkpoints/iter_NNNNNN"
    )
    export.add_argument(
        "out_dir", metavar="OUT_DIR", help="a new or empty directory for config.json, the safetensors and the tokenizer"
    )
    export.add_argument("--trust-remote-code", action="store_true", help=_TRUST_REMOTE_CODE)
    plot = commands.add_parser("plot", help="draw a run's curves as a PNG")
    plot.add_argument("run_dir")
    study = commands.add_parser("study", help="train and evaluate every arm of a study spec (resumable), then report")
    study.add_argument("spec", help="a study spec, e.g. train/studies/estimators.yaml")
    study.add_argument("--output", help="where the runs go (default runs/study-<name>)")
    study.add_argument("--report", help="where the report goes (default docs/study/<name>)")
    study.add_argument("--report-only", action="store_true", help="rebuild the report from finished runs only")
    baselines = commands.add_parser("baselines", help="baselines on a config's held-out tasks, to compare runs with")
    baselines.add_argument("config", help="a YAML config, e.g. train/configs/default.yaml")
    baselines.add_argument("overrides", nargs="*", help="key=value overrides, e.g. env.name=sokoban seed=1")
    baselines.add_argument(
        "--tasks", type=_positive_int, default=64, help="held-out tasks, from seed 2^30 on (default 64)"
    )
    baselines.add_argument(
        "--selection-tasks",
        type=_positive_int,
        default=200,
        help="task seeds 0..N-1 the blind sequence is chosen on (default 200)",
    )
    baselines.add_argument(
        "--repeats", type=_positive_int, default=5, help="episodes a task for the random mover (default 5)"
    )
    baselines.add_argument(
        "--length", type=_positive_int, default=8, help="longest blind sequence (default 8; capped by the episodes)"
    )
    baselines.add_argument(
        "--policy-repeats",
        type=_positive_int,
        default=1,
        help="sampling seeds seed..seed+N-1 for the untrained policy at the config's temperature (default 1)",
    )
    baselines.add_argument("--no-policy", action="store_true", help="skip the untrained policy (no model is loaded)")
    baselines.add_argument("--out", help="write the JSON here (default: print it on one line after the table)")
    baselines.add_argument(
        "--key", help="store the result under this key of --out's JSON object, keeping its other keys (e.g. a family)"
    )
    testbed = commands.add_parser(
        "testbed", help="compare estimators and anchors with a tabular policy on real episodes (no LLM), then report"
    )
    testbed.add_argument("spec", help="a testbed spec, e.g. train/testbed/credit.yaml")
    testbed.add_argument("--out", help="records, figures and README go here (default runs/testbed-<name>)")
    testbed.add_argument("--workers", type=_positive_int, default=2, help="worker processes (default 2)")
    testbed.add_argument("--report-only", action="store_true", help="rebuild the report from the records only")
    args, rest = parser.parse_known_args(argv)

    if args.command == "demo":
        from pyagentrl import demo

        demo.main(rest)
        return
    if args.command == "baselines":  # key=value after an option: argparse leaves them over
        args.overrides += [r for r in rest if "=" in r and not r.startswith("-")]
        rest = [r for r in rest if r not in args.overrides]
    if rest:
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    if args.command == "testbed":
        _testbed(args)
        return
    from pyagentrl.training.checkpoint import ResumeError
    from pyagentrl.training.config import ConfigError
    from pyagentrl.training.export import ExportError
    from pyagentrl.training.run_lock import RunLocked

    try:
        if args.command == "train":
            from pyagentrl.training.config import load_config, load_run_config
            from pyagentrl.training.trainer import train as run_training

            overrides = list(args.overrides)
            if args.resume is not None:
                if args.config is not None:  # argparse took the first override for CONFIG
                    overrides.insert(0, args.config)
                config = load_run_config(args.resume, overrides)
                run_training(config, resume=args.resume, trust_checkpoint=args.trust_checkpoint)
            else:
                if args.config is None:
                    train.error("give a CONFIG (e.g. train/configs/default.yaml) or --resume RUN_DIR")
                if args.trust_checkpoint:
                    train.error("--trust-checkpoint goes with --resume RUN_DIR")
                run_training(load_config(args.config, overrides))
        elif args.command == "eval":
            from pyagentrl.training.evaluate import evaluate_checkpoint

            _check_temperature(args.temperature)
            evaluate_checkpoint(
                args.checkpoint,
                tasks=args.tasks,
                engine=args.engine,
                temperature=args.temperature,
                trust_remote_code=args.trust_remote_code,
            )
        elif args.command == "export":
            from pyagentrl.training.export import export_checkpoint

            export_checkpoint(args.checkpoint, args.out_dir, trust_remote_code=args.trust_remote_code)
        elif args.command == "plot":
            from pyagentrl.training.plot import PlotError, plot_run

            try:
                print(plot_run(args.run_dir))
            except PlotError as exc:  # a run directory without metrics, or with a line that is not one
                raise ConfigError(str(exc)) from None
        elif args.command == "study":
            from pathlib import Path

            from pyagentrl.training.study import BrokenRecord, RunFailed, load_spec, run_study, write_report

            spec = load_spec(args.spec, args.output)
            report = args.report or Path("docs") / "study" / spec.name  # the CLI's default; the library has none
            try:
                print(write_report(spec, report) if args.report_only else run_study(spec, report))
            except (RunFailed, BrokenRecord) as exc:
                print(f"pyagentrl study: {exc}", file=sys.stderr)
                raise SystemExit(1) from None
        elif args.command == "baselines":
            _baselines(args)
    except (ConfigError, ResumeError, ExportError, RunLocked, FileNotFoundError) as exc:
        print(f"pyagentrl {args.command}: {exc}", file=sys.stderr)
        raise SystemExit(2) from None


def _check_temperature(temperature: float | None) -> None:
    """``eval --temperature``: refused in one line before the checkpoint's model loads."""
    import math

    from pyagentrl.training.config import ConfigError

    if temperature is not None and not (math.isfinite(temperature) and temperature >= 0):
        raise ConfigError(f"--temperature must be a finite number >= 0 (0: greedy), got {temperature}")


def _testbed(args: argparse.Namespace) -> None:
    """``pyagentrl testbed``: a bad spec stops with one line (exit 2) before any run."""
    import shlex
    from pathlib import Path

    from pyagentrl.testbed.report import write_report
    from pyagentrl.testbed.spec import SpecError, load_spec
    from pyagentrl.testbed.study import StudyError, run_study

    try:
        spec = load_spec(args.spec)
    except SpecError as exc:
        print(f"pyagentrl testbed: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    out = Path(args.out) if args.out is not None else Path("runs") / f"testbed-{spec.name}"
    if not args.report_only:
        try:
            run_study(spec, out, workers=args.workers)
        except StudyError as exc:
            print(f"pyagentrl testbed: {exc}", file=sys.stderr)
            raise SystemExit(1) from None
    elif not (out / "records").is_dir():
        print(f"pyagentrl testbed: no records in {out} to report on", file=sys.stderr)
        raise SystemExit(2)
    command = "pyagentrl testbed " + " ".join(shlex.quote(a) for a in [args.spec, "--out", str(out)])
    print(write_report(spec, out, command))


def _baselines(args: argparse.Namespace) -> None:
    """``pyagentrl baselines``: the table on the terminal, the JSON to ``--out`` (under ``--key`` when given)."""
    import json
    from pathlib import Path

    from pyagentrl.cache import atomic_write
    from pyagentrl.training.baselines import compute_baselines, format_table
    from pyagentrl.training.config import ConfigError, directory_problem, load_config, validate

    if args.key is not None and args.out is None:
        raise ConfigError("--key needs --out")
    out = Path(args.out) if args.out is not None else None
    if out is not None and out.is_dir():  # the JSON is written at the end: refused now, not after the work
        raise ConfigError(f"--out {out} is a directory; give the path of the JSON file to write")
    problem = None if out is None else directory_problem(out.parent)
    if problem is not None:
        raise ConfigError(f"--out {out}: cannot write there: {problem}")
    existing: dict = {}
    if out is not None and args.key is not None and out.is_file():  # read first: a bad file stops before any work
        try:
            existing = json.loads(out.read_text())
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise ConfigError(f"--out {out} is not JSON ({exc})") from None
        if not isinstance(existing, dict):
            raise ConfigError(f"--out {out} holds no JSON object to add --key {args.key!r} to")
    config = load_config(args.config, list(args.overrides))
    validate(config)
    try:
        record = compute_baselines(
            config,
            tasks=args.tasks,
            selection_tasks=args.selection_tasks,
            repeats=args.repeats,
            length=args.length,
            policy=not args.no_policy,
            policy_repeats=args.policy_repeats,
        )
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    print(format_table(record))
    if out is None:
        print(json.dumps(record))
        return
    out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(out, json.dumps(record if args.key is None else {**existing, args.key: record}, indent=2) + "\n")
    print(f"wrote {out}" + (f" (key {args.key!r})" if args.key is not None else ""))


if __name__ == "__main__":
    main()
