"""One testbed run, top to bottom: seed, environments, then per iteration a rollout of real episodes, anchor keys,
advantages from the estimator registry, the clipped per-action loss, an SGD step on a tabular softmax policy.

The policy is a softmax over a table of logits indexed by the true state (the clean anchor text), so nothing but
the estimator separates two arms: the same seed draws the same tasks, and the runs of two arms differ only through
the advantages they compute. The LLM is gone; the environments, the ``StepBatch``, the estimators, the state keys and
the loss are the library's own.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from pyagentrl.envs.registry import make_env
from pyagentrl.hashing import StateKeyer
from pyagentrl.ops import StepBatch, group_normalize, trajectory_gae
from pyagentrl.ops.estimators import AdvantageConfig, LossConfig, get_adv_estimator, get_policy_loss
from pyagentrl.testbed.arms import Arm
from pyagentrl.testbed.noise import NoisyObservations
from pyagentrl.testbed.tables import StateTable

TASK_SEED_BASE = 1_000  # task seeds of a pool: TASK_SEED_BASE + 0 .. pool − 1
# Independent random streams of one run, by name: np.random.default_rng([seed, stream]).
STREAMS = {"tasks": 0, "actions": 1, "noise": 2, "random_mover": 7, "sweep": 8}


@dataclass(frozen=True)
class TaskSpec:
    """A task family: ``env`` and its ``config`` (``make_env``), trained on the task seeds of a pool of ``pool``."""

    name: str
    env: str
    config: Mapping[str, Any] = field(default_factory=dict)
    pool: int = 16


@dataclass(frozen=True)
class RunSettings:
    """What every arm of a comparison shares."""

    iterations: int = 40
    groups: int = 8  # task groups per iteration
    group_size: int = 8  # rollouts of each task
    # SGD step on the logits; the loss is a mean over rows, so a row moves its logits by lr / rows. 100 learned faster
    # than 20 in a probe on FrozenLake 8x8 (one seed per arm), and is what docs/study/credit ran.
    lr: float = 100.0
    epochs: int = 1  # passes over each batch (the clip acts from the second on)
    clip: float = 0.2
    gamma: float = 0.95
    lam: float = 0.95
    value_lr: float = 0.5  # the critic's step towards each state's mean λ-return


@dataclass
class Episodes:
    """The rows of one iteration's episodes in the flat layout (one row per step)."""

    states: list[str] = field(default_factory=list)  # true state the action was taken in (clean anchor)
    texts: list[str] = field(default_factory=list)  # anchor text as shown (with noise)
    actions: list[int] = field(default_factory=list)
    rewards: list[float] = field(default_factory=list)
    group_ids: list[int] = field(default_factory=list)
    traj_ids: list[int] = field(default_factory=list)
    step_ids: list[int] = field(default_factory=list)
    scores: list[float] = field(default_factory=list)  # per trajectory
    won: list[bool] = field(default_factory=list)  # per trajectory


def make_envs(task: TaskSpec, count: int, noise: str, seed: int) -> list[NoisyObservations]:
    envs = []
    for i in range(count):
        env = make_env(task.env, **dict(task.config))
        if not env.anchor_is_state:
            raise ValueError(
                f"task {task.name!r}: {task.env} with {dict(task.config)} has hidden state or random moves "
                "(anchor_is_state is False), so its anchor text is not its true state: the testbed needs it to be"
            )
        envs.append(
            NoisyObservations(
                env, noise, seed=int(np.random.SeedSequence([seed, STREAMS["noise"], i]).generate_state(1)[0])
            )
        )
    return envs


def rollout(
    envs: list[NoisyObservations],
    tasks: np.ndarray,
    group_size: int,
    policy: StateTable,
    actions: tuple[str, ...],
    rng: np.random.Generator,
) -> Episodes:
    """One episode per environment, environment i playing ``tasks[i // group_size]``, actions sampled from the
    policy's softmax in the true state."""
    results = [env.reset(int(tasks[i // group_size])) for i, env in enumerate(envs)]
    steps: list[list[tuple[str, str, int, float]]] = [[] for _ in envs]
    active = list(range(len(envs)))
    while active:
        states = [results[i].info["state"] for i in active]
        with torch.no_grad():
            probs = torch.softmax(policy.rows(policy.index(states)), dim=-1).numpy()
        picks = (rng.random((len(active), 1)) > probs.cumsum(axis=1)).sum(axis=1).clip(max=len(actions) - 1)
        still = []
        for i, state, a in zip(active, states, picks.tolist(), strict=True):
            text = results[i].anchor
            results[i] = envs[i].step(f"<action>{actions[a]}</action>")
            if results[i].admissible_actions != actions:
                raise ValueError(
                    f"the testbed's policy has one action set; the game offered {results[i].admissible_actions} "
                    f"after {actions}"
                )
            steps[i].append((state, text, a, results[i].reward))
            if not results[i].done:
                still.append(i)
        active = still
    out = Episodes()
    for traj, rows in enumerate(steps):
        for step, (state, text, action, reward) in enumerate(rows):
            out.states.append(state)
            out.texts.append(text)
            out.actions.append(action)
            out.rewards.append(reward)
            out.group_ids.append(traj // group_size)
            out.traj_ids.append(traj)
            out.step_ids.append(step)
        out.scores.append(sum(r[3] for r in rows))
        out.won.append(bool(results[traj].won))
    return out


def uniform_episodes(
    task: TaskSpec, settings: RunSettings, noise: str, iterations: int, seed: int, stream: str
) -> list[Episodes]:
    """``iterations`` batches of episodes of the uniform random mover (an untrained policy: all logits 0), tasks
    drawn from the pool as training draws them; tasks and actions both from the random stream ``STREAMS[stream]``."""
    envs = make_envs(task, settings.groups * settings.group_size, noise, seed)
    actions = envs[0].reset(TASK_SEED_BASE).admissible_actions
    uniform = StateTable(len(actions))
    rng = np.random.default_rng([seed, STREAMS[stream]])
    batches = []
    for _ in range(iterations):
        tasks = TASK_SEED_BASE + rng.integers(task.pool, size=settings.groups)
        batches.append(rollout(envs, tasks, settings.group_size, uniform, actions, rng))
    for env in envs:
        env.close()
    return batches


def _within_groups(ids: np.ndarray, group_ids: np.ndarray) -> np.ndarray:
    """Dense ids of the (task group, id) pairs: ids are only compared within a task group."""
    return np.unique(np.stack([group_ids, ids], axis=1), axis=0, return_inverse=True)[1].reshape(-1)


def anchor_quality(anchor_ids: np.ndarray, oracle_ids: np.ndarray, group_ids: np.ndarray) -> dict[str, float]:
    """How an arm's anchor groups compare with the true-state groups, both taken within each task group:

    ``purity``: of the rows in anchor groups of two or more, the share whose true state is their group's most common
    one (1: no group merges different states); ``grouped``: the share of rows in anchor groups of two or more (rows
    that get step-level credit); ``oracle_grouped``: the same for the true-state groups."""
    anchors, truth = _within_groups(anchor_ids, group_ids), _within_groups(oracle_ids, group_ids)
    sizes = np.bincount(anchors)
    pairs, counts = np.unique(np.stack([anchors, truth], axis=1), axis=0, return_counts=True)
    majority = np.zeros(sizes.size, dtype=np.int64)
    np.maximum.at(majority, pairs[:, 0], counts)
    multi = sizes >= 2
    truth_sizes = np.bincount(truth)
    return {
        "purity": float(majority[multi].sum() / sizes[multi].sum()) if multi.any() else 1.0,
        "grouped": float((sizes[anchors] >= 2).mean()),
        "oracle_grouped": float((truth_sizes[truth] >= 2).mean()),
    }


def keyer_for(anchors: str, settings: Mapping[str, Any]) -> StateKeyer:
    """The state keyer of a text-anchor mode; ``settings`` are StateKeyer keywords (threshold, k, num_perm, ...)."""
    return StateKeyer(mode=anchors, **dict(settings))  # type: ignore[arg-type]


def train_run(
    task: TaskSpec,
    arm: Arm,
    noise: str,
    seed: int,
    settings: RunSettings,
    keyer: StateKeyer | None = None,
) -> dict[str, Any]:
    """Trains a fresh policy with ``arm`` on ``task`` (text anchors keyed by ``keyer``, by default the StateKeyer
    defaults of the arm's mode) and returns its record: per iteration the success rate and
    mean score of the episodes sampled (each iteration's tasks are drawn afresh, so this is the policy's success on
    the pool, measured before its update), and for anchored arms the anchor quality (:func:`anchor_quality`)."""
    started = time.perf_counter()
    if arm.reads_text and keyer is None:
        keyer = keyer_for(arm.anchors, {})  # type: ignore[arg-type]
    torch.manual_seed(seed)
    task_rng = np.random.default_rng([seed, STREAMS["tasks"]])
    action_rng = np.random.default_rng([seed, STREAMS["actions"]])
    envs = make_envs(task, settings.groups * settings.group_size, noise, seed)
    actions = envs[0].reset(TASK_SEED_BASE).admissible_actions
    policy, values = StateTable(len(actions)), StateTable(1)
    oracle = StateKeyer(mode="exact")
    adv_config = AdvantageConfig(gamma=settings.gamma, lam=settings.lam)
    loss_config = LossConfig(clip_low=settings.clip)
    record: dict[str, Any] = {"success": [], "score": [], "rows": [], "purity": [], "grouped": [], "oracle_grouped": []}
    for _ in range(settings.iterations):
        tasks = TASK_SEED_BASE + task_rng.integers(task.pool, size=settings.groups)
        episodes = rollout(envs, tasks, settings.group_size, policy, actions, action_rng)
        group = np.asarray(episodes.group_ids, dtype=np.int64)
        oracle_ids = oracle.assign(episodes.states, group)
        if arm.anchors is None or arm.anchors == "oracle":
            anchor_ids = oracle_ids
        elif arm.anchors == "pooled":
            anchor_ids = group  # one anchor per task group: all of its steps
        else:
            assert keyer is not None  # made above for every arm whose anchors read the text
            anchor_ids = keyer.assign(episodes.texts, group)
        rewards = torch.tensor(episodes.rewards, dtype=torch.float64)
        traj = torch.tensor(episodes.traj_ids)
        scores = torch.tensor(episodes.scores, dtype=torch.float64)[traj]
        batch = StepBatch(
            rewards,
            scores,
            torch.from_numpy(group),
            traj,
            torch.tensor(episodes.step_ids),
            torch.from_numpy(anchor_ids),
        )
        rows = policy.index(episodes.states)
        if arm.estimator == "critic":
            advantages = _critic_advantages(batch, values, values.index(episodes.states), settings)
        else:
            advantages = get_adv_estimator(arm.estimator)(batch, adv_config)
        taken = torch.tensor(episodes.actions)
        old = None
        for _ in range(settings.epochs):
            loss, logp = policy_loss(policy, rows, taken, advantages, old, loss_config)
            old = logp.detach() if old is None else old
            loss.backward()
            policy.sgd_step(settings.lr)
        record["success"].append(float(np.mean(episodes.won)))
        record["score"].append(float(np.mean(episodes.scores)))
        record["rows"].append(len(rows))
        if arm.anchors is not None:
            for key, value in anchor_quality(anchor_ids, oracle_ids, group).items():
                record[key].append(value)
    for env in envs:
        env.close()
    record["states"] = len(policy)
    record["seconds"] = time.perf_counter() - started
    return record


def policy_loss(
    policy: StateTable,
    rows: torch.Tensor,
    taken: torch.Tensor,
    advantages: torch.Tensor,
    old: torch.Tensor | None,
    config: LossConfig,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The registered per-action clipped loss (docs/algorithms.md (L1)) of the actions ``taken`` in the states at
    table ``rows``, one action per row, a mean over rows; and the log-probs it used (``old=None``: on-policy, the
    ratio is 1). Its gradient is −(1/R) Σ_rows A ∇ log π(a|s) while no ratio is clipped."""
    logp = torch.log_softmax(policy.rows(rows), dim=-1).gather(1, taken.unsqueeze(1))
    old = logp.detach() if old is None else old
    mask = torch.ones_like(logp)
    adv = advantages.to(logp.dtype).unsqueeze(1)
    return get_policy_loss("per_action")(logp, old, adv, mask, None, config).loss, logp


def _critic_advantages(batch: StepBatch, values: StateTable, rows: torch.Tensor, settings: RunSettings) -> torch.Tensor:
    """GAE over the learned value table, normalised over the batch (PPO's practice); the table then moves each
    visited state's value ``value_lr`` of the way to the mean λ-return of its rows."""
    with torch.no_grad():
        value = values.rows(rows)[:, 0]
        gae = trajectory_gae(
            batch.rewards,
            value,
            traj_ids=batch.traj_ids,
            step_ids=batch.step_ids,
            gamma=settings.gamma,
            lam=settings.lam,
        )
        target = gae + value
        error = torch.zeros(values.values.shape[0], dtype=torch.float64).index_add_(0, rows, target - value)
        visits = torch.zeros_like(error).index_add_(0, rows, torch.ones_like(value))
        values.values[:, 0] += settings.value_lr * error / visits.clamp(min=1)
    return group_normalize(gae, torch.zeros_like(batch.traj_ids), 1)  # one group: the batch
