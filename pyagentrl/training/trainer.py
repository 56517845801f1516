"""``pyagentrl train``: the training loop, top to bottom (docs/architecture.md walks through one iteration).

    seed → world → learner (DeepSpeed) → rollout engine → environments
    per iteration: collect (this rank's task groups) → gather → update_on_rollout ([drop uniform groups] →
                   advantages → old log-probs → PPO epochs) → push weights to the engine → metrics → [checkpoint]

Every random choice of iteration i comes from (seed, i) through `pyagentrl.training.seeding`: its task seeds, its
sampling seed and its minibatch order. A resumed run therefore makes exactly the iterations the uninterrupted run
would have made.

Python API: ``train(load_config("train/configs/default.yaml", ["iterations=5"]))`` returns the run directory;
``train(load_run_config(run_dir), resume=run_dir)`` continues a run. ``pyagentrl train`` does the same from the
command line.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from pyagentrl.envs import EnvBatch, env_factory, prompt_family
from pyagentrl.hashing import StateKeyer
from pyagentrl.ops import AdvantageConfig, StepBatch, get_adv_estimator
from pyagentrl.rollout import Rollout, RolloutEngine, collect, make_engine, merge_rollouts
from pyagentrl.rollout.models import resolve_model
from pyagentrl.training import checkpoint
from pyagentrl.training.config import TrainConfig, recorded_deepspeed, save_config, to_yaml, validate
from pyagentrl.training.distributed import World, init_world, world_size_from_env
from pyagentrl.training.evaluate import (
    baselines_line,
    by_content,
    describe_tasks,
    eval_summary,
    score_line,
    score_policy,
)
from pyagentrl.training.metrics import Display, MetricsLog, WandbRun, rollout_metrics
from pyagentrl.training.plot import EVAL_FILE
from pyagentrl.training.run_lock import RunLock
from pyagentrl.training.seeding import Stream, held_out_seeds, iteration_seed, task_seeds
from pyagentrl.training.settings import advantage_config, rollout_config
from pyagentrl.training.tasks import TaskSet, trained_keys

if TYPE_CHECKING:  # the learner imports DeepSpeed: at run time it is imported where the run builds it
    from pyagentrl.training.learner import Learner, UpdateStats


def engine_options(config: TrainConfig, world: World) -> dict[str, Any]:
    options = dict(config.rollout.engine_options)
    options.setdefault("seed", config.seed)
    if config.rollout.engine == "vllm" and world.size > 1:
        # Each rank's engine joins the trainer's process group (built after DeepSpeed's: the order matters).
        options.setdefault("distributed_executor_backend", "external_launcher")
    if config.rollout.engine == "hf":
        options.setdefault("device", str(world.device))
    return options


def uniform_groups(steps: StepBatch) -> torch.Tensor:
    """bool [num_groups]: the task groups whose episode scores are all equal (no episode-level signal)."""
    g = steps.num_groups
    high = torch.full((g,), -torch.inf, dtype=steps.traj_score.dtype).scatter_reduce(
        0, steps.traj_group, steps.traj_score, "amax"
    )
    low = torch.full((g,), torch.inf, dtype=steps.traj_score.dtype).scatter_reduce(
        0, steps.traj_group, steps.traj_score, "amin"
    )
    return high == low


def make_run_dir(config: TrainConfig) -> Path:
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    base = Path(config.output_dir) / f"{config.name}-{stamp}"
    path, n = base, 1
    while path.exists():
        path, n = base.with_name(f"{base.name}-{n}"), n + 1
    (path / "checkpoints").mkdir(parents=True)
    (path / "plots").mkdir()
    return path.resolve()


@dataclass
class RolloutUpdate:
    """What `update_on_rollout` did: the advantages it trained on and the learner's statistics."""

    advantage_config: AdvantageConfig
    advantages: torch.Tensor  # [rows] of the rollout that was trained on (after dynamic sampling's drop)
    dropped_group_share: float  # task groups dropped by dynamic sampling (1.0: no update was made)
    stats: UpdateStats | None  # None when every group was dropped
    seconds: dict[str, float]  # advantages, old_logprobs, update
    learner_tokens: int  # tokens the learner forwards per pass over the batch
    sampled_tokens: int  # of them, sampled by the engine (the ones with a gradient)


def update_on_rollout(learner: Learner, config: TrainConfig, rollout: Rollout, iteration: int) -> RolloutUpdate:
    """One iteration's update on a gathered rollout: dynamic sampling's drop (``algorithm.dynamic_sampling``), the
    estimator's advantages at ``iteration``, then the learner's PPO epochs (old log-probs included), with the
    minibatch order of (``config.seed``, ``iteration``). Every rank calls it with the same rollout."""
    clock = time.perf_counter()
    dropped = 0.0
    if config.algorithm.dynamic_sampling:
        uniform = uniform_groups(rollout.steps)
        dropped = float(uniform.double().mean())
        rollout = rollout.select_groups(~uniform) if not bool(uniform.all()) else rollout
    adv_config = advantage_config(config, iteration)
    advantages = get_adv_estimator(config.algorithm.estimator)(rollout.steps, adv_config)
    seconds = {"advantages": time.perf_counter() - clock}
    if dropped == 1.0:
        return RolloutUpdate(adv_config, advantages, dropped, None, seconds, 0, 0)
    tokens = rollout.tokens(config.actor.layout)  # type: ignore[arg-type]
    token_adv = tokens.token_advantages(advantages, rollout.steps)
    clock = time.perf_counter()
    generator = torch.Generator().manual_seed(iteration_seed(config.seed, iteration, Stream.MINIBATCHES))
    stats = learner.update(tokens, token_adv, generator)
    seconds["old_logprobs"] = stats.seconds_scoring
    seconds["update"] = time.perf_counter() - clock - stats.seconds_scoring
    forwarded, sampled = int(tokens.attention_mask.sum()), int(tokens.response_mask.sum())
    return RolloutUpdate(adv_config, advantages, dropped, stats, seconds, forwarded, sampled)


def train(config: TrainConfig, resume: str | Path | None = None, trust_checkpoint: bool = False) -> Path:
    """Trains ``config`` and returns the run directory. With ``resume`` (a run directory; load its config with
    `load_run_config`), continues that run from its latest checkpoint, which must carry this machine's signed
    manifest unless ``trust_checkpoint`` (`pyagentrl.training.manifest`). The config is checked before any work, and
    the run directory is held by this process alone (`pyagentrl.training.run_lock`)."""
    run_dir = Path(resume).resolve() if resume is not None else None
    main_rank = int(os.environ.get("RANK", "0")) == 0
    if run_dir is not None and not run_dir.is_dir():
        raise FileNotFoundError(f"--resume {resume}: no such run directory")
    lock = RunLock(run_dir) if run_dir is not None and main_rank else None
    latest = checkpoint.latest(run_dir / "checkpoints") if run_dir is not None else None
    # First: a run resumed on another number of processes would also fail the check of the batch sizes it recorded.
    state = checkpoint.read_state(latest, world_size_from_env(), trust_checkpoint) if latest is not None else None
    validate(config, world_size_from_env())
    model_path = resolve_model(config.model)

    # ---- world, learner, engine (in this order: vLLM joins the process group DeepSpeed made) -------------------
    world = init_world()
    if config.threads is not None:
        torch.set_num_threads(config.threads)
    elif world.size > 1 and "OMP_NUM_THREADS" not in os.environ:  # ranks sharing a machine share its cores
        local = int(os.environ.get("LOCAL_WORLD_SIZE", world.size))
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // local))
    if world.is_main and run_dir is None:
        run_dir = make_run_dir(config)
        lock = RunLock(run_dir)
    run_dir = Path(world.broadcast_object(str(run_dir) if world.is_main else None))
    from pyagentrl.training.learner import Learner, deepspeed_config

    ds_config = deepspeed_config(config.actor, world)
    if world.is_main and resume is None:
        (run_dir / "deepspeed.json").write_text(json.dumps(recorded_deepspeed(ds_config), indent=2) + "\n")
        config.actor.deepspeed = "deepspeed.json"  # the run directory keeps its own copy
        save_config(config, run_dir / "config.yaml")
        print(f"Run directory: {run_dir}\nResolved config:\n{to_yaml(config)}", flush=True)
    # Opened before the model loads, so that a W&B setting that cannot work (no login, an unknown entity) stops the
    # run in seconds; finished by the metrics log's close, or by wandb's exit hook if the set-up fails.
    wandb_run = WandbRun(run_dir, config) if world.is_main and config.logging.wandb else None
    learner = Learner.for_run(config, world, ds_config)
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")  # its per-update INFO lines would bury the progress display
    engine = make_engine(
        config.rollout.engine,
        model_path,
        trust_remote_code=config.trust_remote_code,
        **engine_options(config, world),
    )

    start = 0
    if latest is not None and state is not None:
        start = checkpoint.restore(latest, state, learner, world)
        if world.is_main:
            checkpoint.prune(run_dir / "checkpoints", latest, config.checkpoint.keep)  # stale later ones go
            print(f"Resumed from {latest} at iteration {start}", flush=True)
    engine.update_weights(learner.weights())  # the same weights whether the run is new or resumed
    if config.eval.tasks > 0 and config.eval.untrained and start == 0:
        _score_and_record(run_dir, "untrained", engine, config, world)

    log = MetricsLog(run_dir, start, wandb_run) if world.is_main else None
    display = Display(config.iterations, start) if world.is_main else None
    groups_per_rank = config.env.num_groups // world.size
    envs = EnvBatch(
        env_factory(config.env.name, **config.env.options),
        groups_per_rank,
        config.env.group_size,
        workers=config.env.workers,
        backend=config.env.backend,
    )
    run = _Run(config, world, learner, engine, envs, StateKeyer(mode=config.anchors.mode, **config.anchors.options))  # type: ignore[arg-type]
    failed = True  # until the loop ends: W&B marks the run failed otherwise
    try:
        for iteration in range(start, config.iterations):
            metrics = _iteration(run, iteration)
            if log is not None and display is not None:
                log.write(metrics)
                display.show(metrics)
            done = iteration + 1
            every = config.checkpoint.every
            if done == config.iterations or (every > 0 and done % every == 0):
                clock = time.perf_counter()
                saved = checkpoint.save(
                    run_dir / "checkpoints", done, learner, engine.tokenizer, config, world, config.checkpoint.keep
                )
                if world.is_main:
                    print(f"Checkpoint {saved} ({time.perf_counter() - clock:.1f} s)", flush=True)
        failed = False
    finally:
        envs.close()
        if display is not None:
            display.close()
        if log is not None:
            log.close(exit_code=1 if failed else 0)
    if config.eval.tasks > 0:
        _score_and_record(run_dir, "trained", engine, config, world)
    if world.is_main:
        from pyagentrl.training.plot import plot_run

        plot = plot_run(run_dir)
        scored = ""
        if (run_dir / EVAL_FILE).is_file():
            scored = f"\n  eval        {run_dir / EVAL_FILE}\n  learning    {plot.parent / 'learning.png'}"
        print(
            f"Done: {run_dir}\n  metrics     {run_dir / 'metrics.jsonl'}\n  tensorboard {run_dir / 'tensorboard'}\n"
            f"  plot        {plot}\n  checkpoint  {checkpoint.latest(run_dir / 'checkpoints')}{scored}",
            flush=True,
        )
    engine.close()
    world.close()
    if lock is not None:
        lock.release()
    return run_dir


def _score_and_record(run_dir: Path, policy: str, engine: RolloutEngine, config: TrainConfig, world: World) -> None:
    """Scores the weights the engine holds on the run's held-out tasks (rank 0; the others wait) and records them
    as entry ``policy`` of ``<run>/eval.json`` (written atomically: the untrained score survives a crash)."""
    if world.is_main:
        from pyagentrl.cache import atomic_write

        clock = time.perf_counter()
        seeds = held_out_seeds(config.eval.tasks)
        held_out = TaskSet.of(config, seeds)
        score = score_policy(engine, config, config.eval.tasks, config.eval.temperature, held_out)
        if config.eval.greedy and score["temperature"] != 0:
            score["greedy"] = score_policy(engine, config, config.eval.tasks, 0.0, held_out)
        score["seconds"] = time.perf_counter() - clock
        path = run_dir / EVAL_FILE
        record = json.loads(path.read_text()) if path.is_file() else {}
        # Held-out by seed is not held-out by content (a pinned map is one task whatever the seed): compared with
        # every task the run's iterations draw.
        trained_on = len(set(held_out.keys) & trained_keys(config))
        record.update(held_out.record())
        record.update(
            task_seeds=[seeds[0], seeds[-1]],
            held_out_trained_on=trained_on,
            tasks_are=describe_tasks(config, held_out, trained_on),
        )
        record[policy] = score
        if config.eval.baselines and "baselines" not in record:
            from pyagentrl.training.baselines import model_free_baselines

            record["baselines"] = model_free_baselines(config, seeds)
            by_content(record["baselines"]["random_mover"], held_out, deterministic=False)
            if "won" in record["baselines"]["blind_sequence"]:
                by_content(record["baselines"]["blind_sequence"], held_out, deterministic=True)
        atomic_write(path, json.dumps(record, indent=2) + "\n")
        for entry in (score, score.get("greedy")):
            if entry is not None:
                print(score_line(f"{policy} policy", entry, f", temperature {entry['temperature']}"), flush=True)
        if policy == "untrained" and "baselines" in record:
            print(baselines_line(record["baselines"]), flush=True)
        if policy == "trained" and "untrained" in record:
            print(eval_summary(record), flush=True)
    world.barrier()


@dataclass
class _Run:
    """What every iteration of a run works with."""

    config: TrainConfig
    world: World
    learner: Learner
    engine: RolloutEngine
    envs: EnvBatch  # this rank's task groups
    keyer: StateKeyer


def _iteration(run: _Run, iteration: int) -> dict[str, Any]:
    config, world = run.config, run.world
    started = time.perf_counter()
    torch.manual_seed(iteration_seed(config.seed, iteration, Stream.TORCH, world.rank))  # e.g. LoRA dropout
    seconds: dict[str, float] = {}

    # ---- rollout: this rank's task groups, then the whole batch on every rank ----------------------------------
    clock = time.perf_counter()
    per_rank = run.envs.num_groups
    seeds = task_seeds(config.seed, iteration, config.env.num_groups)[
        world.rank * per_rank : (world.rank + 1) * per_rank
    ]
    sampling_seed = iteration_seed(config.seed, iteration, Stream.SAMPLING, world.rank)
    cache = run.keyer.embedding_cache if run.keyer.mode == "embedding" else None
    hits, lookups = (cache.hits, cache.lookups) if cache is not None else (0, 0)
    settings = rollout_config(config, sampling_seed)
    mine = collect(run.engine, run.envs, prompt_family(config.env.name), seeds, run.keyer, settings)
    rollout = merge_rollouts(world.all_gather_object(mine))
    seconds["keys"] = rollout.seconds["keys"]
    seconds["rollout"] = time.perf_counter() - clock - seconds["keys"]
    metrics: dict[str, Any] = {"iteration": iteration, **rollout_metrics(rollout)}
    if cache is not None:  # this rank's distinct observations whose embedding an earlier batch had computed
        looked_up = cache.lookups - lookups
        metrics["anchor_cache_hit_rate"] = (cache.hits - hits) / looked_up if looked_up else None
    generate_seconds = rollout.seconds["generate"]
    metrics["tokens_per_second"] = rollout.generated_tokens / generate_seconds if generate_seconds > 0 else None

    # ---- advantages, old log-probs and PPO epochs on the gathered batch; weights to the engine ------------------
    update = update_on_rollout(run.learner, config, rollout, iteration)
    seconds.update(update.seconds)
    advantages = update.advantages
    metrics.update(
        step_weight=update.advantage_config.step_weight,
        alpha=update.advantage_config.alpha,
        dropped_group_share=update.dropped_group_share,
        advantage_mean=float(advantages.mean()),
        advantage_std=float(advantages.std()) if advantages.numel() > 1 else 0.0,
        advantage_zero_share=float((advantages == 0).double().mean()),
    )
    if update.stats is not None:
        metrics["learner_tokens"] = update.learner_tokens  # per pass over the batch
        metrics["learner_tokens_per_sampled_token"] = update.learner_tokens / max(update.sampled_tokens, 1)
        clock = time.perf_counter()
        run.engine.update_weights(run.learner.weights())
        seconds["weight_sync"] = time.perf_counter() - clock
    stats = asdict(update.stats) if update.stats is not None else {}
    for key in (
        "loss",
        "clip_fraction",
        "kl",
        "entropy",
        "action_entropy",
        "policy_drift",
        "logprob_gap",
        "grad_norm",
        "lr",
        "optimizer_steps",
        "scored_rows",
    ):
        metrics[key] = stats.get(key)
    total = time.perf_counter() - started
    for phase in ("rollout", "keys", "advantages", "old_logprobs", "update", "weight_sync"):
        metrics[f"seconds_{phase}"] = seconds.get(phase, 0.0)
    metrics["seconds_iteration"] = total
    metrics["keys_and_advantages_share"] = (seconds["keys"] + seconds["advantages"]) / total
    metrics["world_size"] = world.size
    return metrics
