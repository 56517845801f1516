"""What a held-out success rate must beat before it says that a policy learned anything: three baselines, scored on
the same held-out tasks as the trained policy (``pyagentrl baselines CONFIG``).

- **A uniform random mover**: at each step one of the admissible actions, uniformly. It needs no model and reads
  nothing, so a policy at or below it has not learned to read the state (on small grids it wins a quarter of the
  tasks).
- **The best blind sequence**: the fixed sequence of at most ``length`` actions that wins the most tasks
  (`pyagentrl.envs.open_loop`), chosen on *selection* task seeds disjoint from the held-out ones, then played on the
  held-out tasks. Chosen on the held-out tasks themselves it is the best of 4^8 sequences on those very tasks, a
  selection bias: the estimator study's first report did that and credited it 28/64 held-out FrozenLake maps, where
  the same search on 200 other maps picks a sequence that wins 11/64.
- **The untrained policy**: the base model (``config.model``) through the config's engine, at the config's
  temperature and greedy; what training must improve on.

Every result is JSON-able and carries ``successes``, ``tasks``, ``success_rate`` (= successes / tasks) and ``ci95``
(Wilson). A baseline played several times (the random mover's repeats, the policy's sampling seeds) reports the mean
successes of one pass over the tasks, and the Wilson interval of all its episodes pooled.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from pyagentrl.envs import EnvBatch, Task, env_factory
from pyagentrl.envs.open_loop import best_open_loop
from pyagentrl.rollout import RolloutEngine, make_engine
from pyagentrl.training.config import TrainConfig
from pyagentrl.training.evaluate import score_policy
from pyagentrl.training.seeding import held_out_seeds
from pyagentrl.training.stats import wilson_interval

SELECTION_TASKS = 200  # default selection seeds of the blind sequence: 0 .. 199
BLIND_LENGTH = 8  # 4^8 sequences of a grid game's four moves
REPEATS = 5


def _score(successes: int, tasks: int, won: Sequence[bool] | None = None) -> dict[str, Any]:
    low, high = wilson_interval(successes, tasks)
    result: dict[str, Any] = {
        "tasks": tasks,
        "successes": successes,
        "success_rate": successes / tasks,
        "ci95": [low, high],
    }
    if won is not None:
        result["won"] = [int(w) for w in won]
    return result


def _pooled(wins_per_pass: Sequence[int], tasks: int) -> dict[str, Any]:
    """Several passes over the same ``tasks``: the mean successes of a pass, and the Wilson interval of the pooled
    episodes (conservative for the mean over these fixed tasks: repeats of one task vary less than a binomial)."""
    passes, pooled = len(wins_per_pass), sum(wins_per_pass)
    low, high = wilson_interval(pooled, tasks * passes)
    return {
        "tasks": tasks,
        "successes": pooled / passes,
        "success_rate": pooled / (tasks * passes),
        "ci95": [low, high],
        "passes": passes,
        "episodes": tasks * passes,
        "pooled_successes": pooled,
        "successes_per_pass": list(wins_per_pass),
    }


def _task_key(task: Task) -> int:
    """An integer that names ``task`` in a seed: the seed itself, or a checksum of a game file's path."""
    return task if isinstance(task, int) else zlib.crc32(str(task).encode())


def _factory(config: TrainConfig) -> Any:
    return env_factory(config.env.name, **config.env.options)


def random_mover(config: TrainConfig, tasks: Sequence[Task], repeats: int = REPEATS, seed: int = 0) -> dict[str, Any]:
    """A uniform random choice among each step's admissible actions, ``repeats`` episodes a task, up to the
    environment's step limit.

    Each episode draws from its own generator, seeded (``seed``, repeat, task), so a task's outcomes do not depend on
    which other tasks are scored with it. Returns the pooled score (`_pooled`: ``successes`` is the mean of a pass),
    ``task_win_rate`` (each task's share of won repeats, in task order) and ``won_by_repeat``.
    """
    if not tasks:
        raise ValueError("random_mover needs at least one task")
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")
    env = config.env
    n = len(tasks)
    # Environment i plays task i // repeats, repeat i % repeats (EnvBatch's task groups).
    rngs = [np.random.default_rng([seed, r, _task_key(t)]) for t in tasks for r in range(repeats)]
    with EnvBatch(_factory(config), n, repeats, workers=env.workers, backend=env.backend) as envs:
        results = envs.reset(list(tasks))
        while not envs.all_done:
            replies = []
            for rng, result in zip(rngs, results, strict=True):
                actions = result.admissible_actions
                if result.done or not actions:
                    replies.append("")  # a finished episode ignores it; a state without actions idles
                else:
                    replies.append(f"<action>{actions[int(rng.integers(len(actions)))]}</action>")
            results = envs.step(replies)
    won = [[bool(results[k * repeats + r].won) for k in range(n)] for r in range(repeats)]
    return {
        "baseline": "random_mover",
        **_pooled([sum(w) for w in won], n),
        "repeats": repeats,
        "seed": seed,
        "task_win_rate": [sum(won[r][k] for r in range(repeats)) / repeats for k in range(n)],
        "won_by_repeat": [[int(w) for w in row] for row in won],
    }


def play_sequence(config: TrainConfig, tasks: Sequence[Task], actions: Sequence[str]) -> list[bool]:
    """Each task's outcome when ``actions`` are played in order without looking; an episode still running when the
    sequence ends is lost."""
    env = config.env
    with EnvBatch(_factory(config), len(tasks), 1, workers=env.workers, backend=env.backend) as envs:
        results = envs.reset(list(tasks))
        for action in actions:
            if envs.all_done:
                break
            results = envs.step([f"<action>{action}</action>"] * len(tasks))  # finished episodes ignore it
    return [bool(r.won) for r in results]


def blind_sequence(
    config: TrainConfig,
    tasks: Sequence[Task],
    selection: Sequence[Task] | None = None,
    length: int = BLIND_LENGTH,
) -> dict[str, Any]:
    """The best fixed sequence of at most ``length`` actions (fewer where the episodes are shorter) chosen on the
    ``selection`` tasks (default: the seeds 0 .. 199), then played on the held-out ``tasks``.

    Raises ValueError when the two task sets share a task (choosing on the tasks it is scored on overstates the
    blind score), and for games `best_open_loop` cannot score (hidden state, random moves).
    """
    if not tasks:
        raise ValueError("blind_sequence needs at least one held-out task")
    chosen_on = list(range(SELECTION_TASKS)) if selection is None else list(selection)
    if not chosen_on:
        raise ValueError("blind_sequence needs at least one selection task")
    shared = sorted(set(chosen_on) & set(tasks), key=str)
    if shared:
        raise ValueError(
            f"the selection and held-out task sets share {len(shared)} task(s) (e.g. {shared[0]!r}): a sequence "
            "chosen on the tasks it is scored on overstates the blind score; choose it on other tasks"
        )
    if length < 1:
        raise ValueError(f"length must be >= 1, got {length}")
    factory = _factory(config)
    probe = factory()
    try:
        length = min(length, probe.max_steps)
    finally:
        probe.close()
    best = best_open_loop(factory, chosen_on, length)
    won = play_sequence(config, tasks, best.actions)
    return {
        "baseline": "blind_sequence",
        **_score(sum(won), len(tasks), won),
        "sequence": list(best.actions),
        "length": length,
        "selection_tasks": len(chosen_on),
        "selection_range": [chosen_on[0], chosen_on[-1]],
        "selection_wins": best.wins,
    }


def untrained_policy(
    config: TrainConfig,
    tasks: int,
    sampling_seeds: Sequence[int] | None = None,
    engine: RolloutEngine | None = None,
) -> dict[str, Any]:
    """The base model ``config.model`` (in ``engine``, or one built from the config's engine and options) on the first
    ``tasks`` held-out tasks (`score_policy`): at the config's temperature, once per sampling seed (default: the
    config's seed), pooled; and greedy (temperature 0, once: it does not depend on the seed)."""
    seeds = [config.seed] if sampling_seeds is None else list(sampling_seeds)
    if not seeds:
        raise ValueError("untrained_policy needs at least one sampling seed")
    own = engine is None
    policy = engine or make_engine(
        config.rollout.engine,
        config.model,
        trust_remote_code=config.trust_remote_code,
        **config.rollout.engine_options,
    )
    try:
        runs = [score_policy(policy, replace(config, seed=s), tasks) for s in seeds]
        temperature = config.rollout.temperature
        greedy = runs[0] if temperature == 0 and len(runs) == 1 else score_policy(policy, config, tasks, 0.0)
    finally:
        if own:
            policy.close()
    return {
        "baseline": "untrained_policy",
        "model": config.model,
        "engine": config.rollout.engine,
        "sampled": {
            **_pooled([r["successes"] for r in runs], tasks),
            "temperature": temperature,
            "sampling_seeds": seeds,
            "won_by_seed": [r["won"] for r in runs],
        },
        "greedy": greedy,
    }


def model_free_baselines(
    config: TrainConfig,
    tasks: Sequence[Task],
    selection_tasks: int = SELECTION_TASKS,
    repeats: int = REPEATS,
    length: int = BLIND_LENGTH,
) -> dict[str, Any]:
    """``random_mover`` and ``blind_sequence`` (chosen on the seeds 0 .. ``selection_tasks`` - 1) on ``tasks``; a game
    no fixed sequence can be scored on gets ``{"none": reason}`` for the blind sequence."""
    blind: dict[str, Any]
    try:
        blind = blind_sequence(config, tasks, list(range(selection_tasks)), length)
    except ValueError as exc:  # hidden state, random moves, ...
        blind = {"baseline": "blind_sequence", "none": str(exc)}
    return {"random_mover": random_mover(config, tasks, repeats, seed=config.seed), "blind_sequence": blind}


def compute_baselines(
    config: TrainConfig,
    tasks: int = 64,
    selection_tasks: int = SELECTION_TASKS,
    repeats: int = REPEATS,
    length: int = BLIND_LENGTH,
    policy: bool = True,
    policy_repeats: int = 1,
) -> dict[str, Any]:
    """All three baselines of ``config`` on its first ``tasks`` held-out tasks, as one JSON-able record.

    The random mover and the blind sequence (`model_free_baselines`), and the untrained policy, which samples with
    the seeds ``config.seed`` .. ``config.seed + policy_repeats - 1`` (``policy=False``: not scored, no model
    loaded).
    """
    for name, value in (
        ("tasks", tasks),
        ("selection_tasks", selection_tasks),
        ("repeats", repeats),
        ("length", length),
        ("policy_repeats", policy_repeats),
    ):
        if value < 1:
            raise ValueError(f"{name} must be >= 1, got {value}")
    try:  # options the environment refuses: one clear error before any work
        _factory(config)().close()
    except (TypeError, ValueError, ImportError) as exc:
        raise ValueError(f"env {config.env.name!r} with env.options {dict(config.env.options)}: {exc}") from None
    held_out = held_out_seeds(tasks)
    record: dict[str, Any] = {
        "settings": {
            "env": {"name": config.env.name, "options": dict(config.env.options)},
            "model": config.model,
            "engine": config.rollout.engine,
            "temperature": config.rollout.temperature,
            "seed": config.seed,
        },
        "held_out": {"first": held_out[0], "tasks": tasks},
        **model_free_baselines(config, held_out, selection_tasks, repeats, length),
    }
    if policy:
        seeds = [config.seed + k for k in range(policy_repeats)]
        record["untrained_policy"] = untrained_policy(config, tasks, seeds)
    return record


def _cell(result: dict[str, Any]) -> str:
    successes = result["successes"]
    count = f"{successes:g}" if isinstance(successes, int) or float(successes).is_integer() else f"{successes:.1f}"
    low, high = result["ci95"]
    return f"{count}/{result['tasks']:<4} {result['success_rate']:.3f}  {low:.3f}-{high:.3f}"


def _summary_rows(record: dict[str, Any]) -> list[tuple[str, str]]:
    """(what, score) lines of a `compute_baselines` record, in words, for the terminal table."""
    rows = []
    mover = record["random_mover"]
    rows.append(
        (f"random mover (uniform over the admissible actions, mean of {mover['repeats']} passes)", _cell(mover))
    )
    blind = record["blind_sequence"]
    if "none" in blind:
        rows.append(("blind sequence", f"none: {blind['none']}"))
    else:
        first, last = blind["selection_range"]
        rows.append(
            (
                f"blind sequence of <= {blind['length']} ({', '.join(blind['sequence'])}), chosen on seeds "
                f"{first}..{last} ({blind['selection_wins']}/{blind['selection_tasks']} there)",
                _cell(blind),
            )
        )
    policy = record.get("untrained_policy")
    if policy is not None:
        sampled = policy["sampled"]
        seeds = sampled["sampling_seeds"]
        rows.append(
            (
                f"untrained policy, temperature {sampled['temperature']:g} (sampling seed{'s' * (len(seeds) > 1)} "
                f"{', '.join(map(str, seeds))})",
                _cell(sampled),
            )
        )
        rows.append(("untrained policy, greedy", _cell(policy["greedy"])))
    return rows


def format_table(record: dict[str, Any]) -> str:
    """The record as a small table for the terminal."""
    rows = _summary_rows(record)
    width = max(len(what) for what, _ in rows)
    held = record["held_out"]
    head = (
        f"baselines on {held['tasks']} held-out tasks (seeds {held['first']}..{held['first'] + held['tasks'] - 1}), "
        f"{record['settings']['env']['name']} {record['settings']['env']['options']}"
    )
    lines = [head, f"{'baseline':<{width}}  successes  rate   95 % CI (Wilson)"]
    lines += [f"{what:<{width}}  {score}" for what, score in rows]
    return "\n".join(lines)
