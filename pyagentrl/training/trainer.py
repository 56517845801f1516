"""``pyagentrl train``: the training loop, top to bottom (docs/architecture.md walks through one iteration).

    seed → world → learner (DeepSpeed) → rollout engine → environments
    per iteration: collect (this rank's task groups) → gather → [drop uniform groups] → advantages
                   → old log-probs → PPO epochs → push weights to the engine → metrics → [checkpoint]

Every random choice of iteration i comes from (seed, i): its task seeds, its sampling seed and its minibatch order.
A resumed run therefore makes exactly the iterations the uninterrupted run would have made.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np
import torch

from pyagentrl.envs import EnvBatch, env_factory, prompt_family
from pyagentrl.hashing import StateKeyer
from pyagentrl.ops import AdvantageConfig, StepBatch, factorize_pairs, get_adv_estimator
from pyagentrl.rollout import Rollout, RolloutConfig, SamplingConfig, collect, make_engine, merge_rollouts
from pyagentrl.rollout.models import resolve_model
from pyagentrl.training import checkpoint
from pyagentrl.training.config import TrainConfig, load_config, optimizer_steps, save_config, to_yaml, validate
from pyagentrl.training.distributed import World, init_world, world_size_from_env
from pyagentrl.training.metrics import Display, MetricsLog
from pyagentrl.training.plot import EVAL_FILE

#: Training draws task seeds below this; evaluation uses seeds from it on, so they are never trained on.
EVAL_SEED_BASE = 2**30


def iteration_seed(seed: int, iteration: int, stream: int, rank: int = 0) -> int:
    """An independent 31-bit seed for each (run seed, iteration, purpose, rank)."""
    return int(np.random.default_rng([seed, iteration, stream, rank]).integers(2**31))


def task_seeds(config: TrainConfig, iteration: int) -> list[int]:
    """The iteration's task seeds, one per task group, over all ranks."""
    rng = np.random.default_rng([config.seed, iteration, 0])
    return [int(s) for s in rng.integers(0, EVAL_SEED_BASE, size=config.env.num_groups)]


def rollout_config(config: TrainConfig, sampling_seed: int | None) -> RolloutConfig:
    r = config.rollout
    return RolloutConfig(
        prompting=r.prompting,  # type: ignore[arg-type]
        turn_format=r.turn_format,  # type: ignore[arg-type]
        history_length=r.history_length,
        invalid_action_penalty=r.invalid_action_penalty,
        sampling=SamplingConfig(r.temperature, r.top_p, r.max_new_tokens, tuple(r.stop), sampling_seed),
        system_prompt=r.system_prompt,
        answer_format=r.answer_format,
        response_prefix=r.response_prefix,
        time_aware_anchors=config.anchors.time_aware,
    )


def advantage_config(config: TrainConfig, iteration: int) -> AdvantageConfig:
    a = config.algorithm
    return AdvantageConfig(
        gamma=a.gamma,
        lam=a.lam,
        norm=a.norm,  # type: ignore[arg-type]
        eps=a.eps,
        unbiased=a.unbiased,
        step_weight=a.step_weight.at(iteration),
        episode_singleton=a.episode_singleton,  # type: ignore[arg-type]
        norm_over=a.norm_over,  # type: ignore[arg-type]
        episode_weighting=a.episode_weighting,  # type: ignore[arg-type]
        combine=a.combine,  # type: ignore[arg-type]
        alpha=None if a.alpha is None else a.alpha.at(iteration),
    )


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


def anchor_purity(rollout: Rollout) -> float:
    """The share of rows whose anchor group's most common exact state is their own (1 for exact anchors)."""
    s = rollout.steps
    exact = torch.from_numpy(StateKeyer().assign(rollout.anchors, s.group_ids.numpy()))
    pair_of_row, num_pairs = factorize_pairs(s.state_ids, exact)  # (anchor group, exact state)
    pair_count = torch.bincount(pair_of_row, minlength=num_pairs)
    largest = torch.zeros(s.num_states, dtype=torch.long).scatter_reduce(
        0, s.state_ids, pair_count[pair_of_row], reduce="amax"
    )
    return float(largest.sum() / s.num_rows)


def rollout_metrics(rollout: Rollout) -> dict[str, float]:
    s = rollout.steps
    won = torch.zeros(s.num_trajs, dtype=torch.bool).index_put_((s.traj_ids,), rollout.won)
    length = torch.bincount(s.traj_ids, minlength=s.num_trajs).double()
    state_size = torch.bincount(s.state_ids, minlength=s.num_states)
    return {
        "episodes": s.num_trajs,
        "rows": s.num_rows,
        "success_rate": float(won.double().mean()),
        "mean_score": float(s.traj_score.double().mean()),
        "episode_length": float(length.mean()),
        "invalid_action_rate": rollout.invalid_rate,
        "anchor_rows_in_groups": float((state_size[s.state_ids] >= 2).double().mean()),
        "anchor_mean_group_size": s.num_rows / s.num_states,
        "anchor_purity": anchor_purity(rollout),
        "generated_tokens": rollout.generated_tokens,
    }


def make_run_dir(config: TrainConfig) -> Path:
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    base = Path(config.output_dir) / f"{config.name}-{stamp}"
    path, n = base, 1
    while path.exists():
        path, n = base.with_name(f"{base.name}-{n}"), n + 1
    (path / "checkpoints").mkdir(parents=True)
    (path / "plots").mkdir()
    return path.resolve()


def train(config_path: str | None, overrides: list[str], resume: str | None = None) -> Path:
    """Runs (or resumes) a training run and returns its directory."""
    # ---- config: checked before any work ------------------------------------------------------------------------
    if resume is not None:
        run_dir = Path(resume).resolve()
        if not (run_dir / "config.yaml").is_file():
            raise FileNotFoundError(f"--resume {resume}: no config.yaml there (is it a run directory?)")
        config = load_config(run_dir / "config.yaml", overrides)
    else:
        assert config_path is not None
        config = load_config(config_path, overrides)
    validate(config, world_size_from_env())
    model_path = resolve_model(config.model)
    latest = checkpoint.latest(run_dir / "checkpoints") if resume is not None else None
    state = checkpoint.read_state(latest, world_size_from_env()) if latest is not None else None

    # ---- world, learner, engine (in this order: vLLM joins the process group DeepSpeed made) -------------------
    world = init_world()
    if config.threads is not None:
        torch.set_num_threads(config.threads)
    elif world.size > 1 and "OMP_NUM_THREADS" not in os.environ:  # ranks sharing a machine share its cores
        local = int(os.environ.get("LOCAL_WORLD_SIZE", world.size))
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // local))
    if world.is_main and resume is None:
        run_dir = make_run_dir(config)
    run_dir = Path(world.broadcast_object(str(run_dir) if world.is_main else None))
    from pyagentrl.training.learner import Learner, deepspeed_config

    ds_config = deepspeed_config(config.actor, world)
    if world.is_main and resume is None:
        (run_dir / "deepspeed.json").write_text(json.dumps(ds_config, indent=2) + "\n")
        config.actor.deepspeed = "deepspeed.json"  # the run directory keeps its own copy
        save_config(config, run_dir / "config.yaml")
        print(f"Run directory: {run_dir}\nResolved config:\n{to_yaml(config)}", flush=True)
    learner = Learner(
        model_path,
        config.actor,
        world,
        ds_config,
        temperature=config.rollout.temperature,
        top_p=config.rollout.top_p,
        total_steps=optimizer_steps(config),
    )
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")  # its per-update INFO lines would bury the progress display
    engine = make_engine(config.rollout.engine, model_path, **engine_options(config, world))

    start = 0
    if latest is not None and state is not None:
        start = checkpoint.restore(latest, state, learner, world)
        if world.is_main:
            checkpoint.prune(run_dir / "checkpoints", latest, config.checkpoint.keep)  # stale later ones go
            print(f"Resumed from {latest} at iteration {start}", flush=True)
    engine.update_weights(learner.weights())  # the same weights whether the run is new or resumed
    if config.eval.tasks > 0 and config.eval.untrained and start == 0:
        _score_and_record(run_dir, "untrained", engine, config, world)

    estimator = get_adv_estimator(config.algorithm.estimator)
    keyer = StateKeyer(mode=config.anchors.mode, **config.anchors.options)  # type: ignore[arg-type]
    family = prompt_family(config.env.name)
    groups_per_rank = config.env.num_groups // world.size
    log = MetricsLog(run_dir, start) if world.is_main else None
    display = Display(config.iterations, start) if world.is_main else None
    envs = EnvBatch(
        env_factory(config.env.name, **config.env.options),
        groups_per_rank,
        config.env.group_size,
        workers=config.env.workers,
        backend=config.env.backend,
    )
    try:
        for iteration in range(start, config.iterations):
            metrics = _iteration(
                iteration, config, world, learner, engine, envs, estimator, keyer, family, groups_per_rank
            )
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
    finally:
        envs.close()
        if display is not None:
            display.close()
        if log is not None:
            log.close()
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
    return run_dir


def _score_and_record(run_dir: Path, policy: str, engine: Any, config: TrainConfig, world: World) -> None:
    """Scores the weights the engine holds on the run's held-out tasks (rank 0; the others wait) and records them
    as entry ``policy`` of ``<run>/eval.json`` (written atomically: the untrained score survives a crash)."""
    if world.is_main:
        from pyagentrl.cache import atomic_write
        from pyagentrl.training.evaluate import held_out_seeds, score_policy

        clock = time.perf_counter()
        score = score_policy(engine, config, config.eval.tasks, config.eval.temperature)
        if config.eval.greedy and score["temperature"] != 0:
            score["greedy"] = score_policy(engine, config, config.eval.tasks, 0.0)
        score["seconds"] = time.perf_counter() - clock
        path = run_dir / EVAL_FILE
        record = json.loads(path.read_text()) if path.is_file() else {}
        seeds = held_out_seeds(config.eval.tasks)
        record.update(task_seeds=[seeds[0], seeds[-1]], tasks_are=describe_tasks(config))
        record[policy] = score
        if config.eval.baselines and "baselines" not in record:
            from pyagentrl.training.baselines import model_free_baselines

            record["baselines"] = model_free_baselines(config, seeds)
        atomic_write(path, json.dumps(record, indent=2) + "\n")
        for entry in (score, score.get("greedy")):
            if entry is not None:
                print(_score_line(f"{policy} policy", entry, f", temperature {entry['temperature']}"), flush=True)
        if policy == "untrained" and "baselines" in record:
            print(baselines_line(record["baselines"]), flush=True)
        if policy == "trained" and "untrained" in record:
            print(eval_summary(record), flush=True)
    world.barrier()


def describe_tasks(config: TrainConfig) -> str:
    """What the held-out tasks of ``config`` test, in words: one pinned map measures learning that map only."""
    pinned = config.env.options.get("map_seed")
    if pinned is not None:
        return (
            f"{config.env.name} with its map pinned (map_seed {pinned}): every task is the same map, so a gain "
            "shows the policy learned that map, not that it reads maps"
        )
    return f"{config.env.name} tasks drawn from held-out seeds, never trained on"


def _named_baselines(baselines: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    named = [("a uniform random mover", baselines["random_mover"])]
    blind = baselines["blind_sequence"]
    if "none" not in blind:
        first, last = blind["selection_range"]
        moves = ", ".join(blind["sequence"])
        named.append((f"the best blind sequence chosen on seeds {first}..{last} ({moves})", blind))
    return named


def _score_line(what: str, entry: dict[str, Any], detail: str = "") -> str:
    low, high = entry["ci95"]
    return (
        f"Held-out score, {what}: {entry['successes']:g}/{entry['tasks']} = {entry['success_rate']:.3f} "
        f"(95 % CI {low:.3f}-{high:.3f}{detail})"
    )


def baselines_line(baselines: dict[str, Any]) -> str:
    """The model-free baselines of ``eval.json`` in one line each (`pyagentrl.training.baselines`)."""
    return "\n".join(_score_line(name, b) for name, b in _named_baselines(baselines))


def _compare(trained: dict[str, Any], other: dict[str, Any]) -> str:
    if trained["ci95"][0] > other["ci95"][1]:
        return "above"
    if trained["ci95"][1] < other["ci95"][0]:
        return "below"
    return "not apart from"


def eval_summary(record: dict[str, Any]) -> str:
    """The verdict of ``eval.json``: the trained policy's Wilson interval against the untrained policy's and, when
    scored, the model-free baselines', on the same held-out tasks at the same temperature."""
    trained, untrained = record["trained"], record["untrained"]
    verdict = (
        "the trained policy's 95 % interval lies above the untrained one's"
        if _compare(trained, untrained) == "above"
        else "the intervals overlap: this run does not show that training helped"
    )
    greedy = ""
    if "greedy" in trained and "greedy" in untrained:
        greedy = f" (greedy: {untrained['greedy']['successes']} and {trained['greedy']['successes']})"
    lines = [
        f"Learned? untrained {untrained['successes']}/{untrained['tasks']}, trained {trained['successes']}/"
        f"{trained['tasks']} on the same held-out tasks at temperature {trained['temperature']}{greedy}: {verdict}."
    ]
    if "baselines" in record:
        for name, baseline in _named_baselines(record["baselines"]):
            place = _compare(trained, baseline)
            relation = "overlaps" if place == "not apart from" else f"lies {place}"
            greedy_place = f" (greedy: {_compare(trained['greedy'], baseline)})" if "greedy" in trained else ""
            lines.append(
                f"  Against {name}, {baseline['successes']:g}/{baseline['tasks']}: the trained policy's interval "
                f"{relation} its interval{greedy_place}."
            )
    lines.append(f"  Tasks: {record['tasks_are']}.")
    return "\n".join(lines)


def _iteration(
    iteration: int,
    config: TrainConfig,
    world: World,
    learner: Any,
    engine: Any,
    envs: EnvBatch,
    estimator: Any,
    keyer: StateKeyer,
    family: str,
    groups_per_rank: int,
) -> dict[str, Any]:
    started = time.perf_counter()
    torch.manual_seed(iteration_seed(config.seed, iteration, 3, world.rank))  # e.g. LoRA dropout
    seconds: dict[str, float] = {}

    # ---- rollout: this rank's task groups, then the whole batch on every rank ----------------------------------
    clock = time.perf_counter()
    seeds = task_seeds(config, iteration)[world.rank * groups_per_rank : (world.rank + 1) * groups_per_rank]
    sampling_seed = iteration_seed(config.seed, iteration, 1, world.rank)
    cache = keyer.embedding_cache if keyer.mode == "embedding" else None
    hits, lookups = (cache.hits, cache.lookups) if cache is not None else (0, 0)
    mine = collect(engine, envs, family, seeds, keyer, rollout_config(config, sampling_seed))
    rollout = merge_rollouts(world.all_gather_object(mine))
    seconds["keys"] = rollout.seconds["keys"]
    seconds["rollout"] = time.perf_counter() - clock - seconds["keys"]
    metrics: dict[str, Any] = {"iteration": iteration, **rollout_metrics(rollout)}
    if cache is not None:  # this rank's distinct observations whose embedding an earlier batch had computed
        looked_up = cache.lookups - lookups
        metrics["anchor_cache_hit_rate"] = (cache.hits - hits) / looked_up if looked_up else None
    generate_seconds = rollout.seconds["generate"]
    metrics["tokens_per_second"] = rollout.generated_tokens / generate_seconds if generate_seconds > 0 else None

    # ---- advantages on the gathered batch (task groups whole) ----------------------------------------------------
    clock = time.perf_counter()
    dropped = 0.0
    if config.algorithm.dynamic_sampling:
        uniform = uniform_groups(rollout.steps)
        dropped = float(uniform.double().mean())
        rollout = rollout.select_groups(~uniform) if not bool(uniform.all()) else rollout
    adv_config = advantage_config(config, iteration)
    advantages = estimator(rollout.steps, adv_config)
    seconds["advantages"] = time.perf_counter() - clock
    metrics.update(
        step_weight=adv_config.step_weight,
        alpha=adv_config.alpha,
        dropped_group_share=dropped,
        advantage_mean=float(advantages.mean()),
        advantage_std=float(advantages.std()) if advantages.numel() > 1 else 0.0,
        advantage_zero_share=float((advantages == 0).double().mean()),
    )

    # ---- old log-probs by the actor, PPO epochs, weights to the engine ------------------------------------------
    update = None
    if dropped < 1.0:
        tokens = rollout.tokens(config.actor.layout)  # type: ignore[arg-type]
        token_adv = tokens.token_advantages(advantages, rollout.steps)
        clock = time.perf_counter()
        generator = torch.Generator().manual_seed(iteration_seed(config.seed, iteration, 2))
        update = learner.update(tokens, token_adv, generator)
        seconds["old_logprobs"] = update.seconds_scoring
        seconds["update"] = time.perf_counter() - clock - update.seconds_scoring
        forwarded, sampled = int(tokens.attention_mask.sum()), float(tokens.response_mask.sum())
        metrics["learner_tokens"] = forwarded  # per pass over the batch
        metrics["learner_tokens_per_sampled_token"] = forwarded / max(sampled, 1.0)
        clock = time.perf_counter()
        engine.update_weights(learner.weights())
        seconds["weight_sync"] = time.perf_counter() - clock
    stats = asdict(update) if update is not None else {}
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
