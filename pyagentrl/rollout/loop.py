"""The multi-turn agent loop (:func:`collect`): task groups of environments, prompts, generation, environment steps
and state keys, assembled into a :class:`~pyagentrl.rollout.batch.Rollout` (one row per environment step)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import torch

from pyagentrl.envs import EnvBatch, PromptBuilder
from pyagentrl.envs.base import Task
from pyagentrl.hashing import StateKeyer
from pyagentrl.ops import StepBatch, factorize_pairs
from pyagentrl.rollout.batch import Rollout, action_token_mask
from pyagentrl.rollout.config import RolloutConfig
from pyagentrl.rollout.conversation import Conversations
from pyagentrl.rollout.engine import Generation, RolloutEngine


def collect(
    engine: RolloutEngine,
    envs: EnvBatch,
    family: str,
    task_seeds: Sequence[Task],
    keyer: StateKeyer,
    config: RolloutConfig,
) -> Rollout:
    """Runs every episode of ``envs`` (reset to ``task_seeds``, one per task group) to its end or step limit.

    ``family`` names the prompt family (:func:`pyagentrl.envs.prompt_family`). Each action's state is keyed by its
    anchor text with ``keyer`` within its task group.
    """
    seconds = dict.fromkeys(("generate", "environment", "keys", "prompts"), 0.0)
    tokenizer: Any = engine.tokenizer
    clock = time.perf_counter()
    results = envs.reset(task_seeds)
    seconds["environment"] += time.perf_counter() - clock
    n = envs.num_envs
    window = PromptBuilder(family, config.history_length, config.system_prompt, config.answer_format)
    prefix = config.response_prefix
    window.reset(results)
    current = list(results)
    conversation = Conversations(tokenizer, family, config, results) if config.prompting == "conversation" else None

    episodes: list[list[_Step]] = [[] for _ in range(n)]
    won = [False] * n
    active = [not r.done for r in current]
    generated = 0
    turn = 0
    while any(active):
        clock = time.perf_counter()
        live = [i for i in range(n) if active[i]]
        if conversation is not None:
            prompts = [list(conversation.ids[i]) for i in live]
        else:
            texts = window.messages(tokenizer, **config.chat_template_kwargs)
            prompts = [tokenizer(str(texts[i]) + prefix, add_special_tokens=False)["input_ids"] for i in live]
        seconds["prompts"] += time.perf_counter() - clock

        clock = time.perf_counter()
        sampling = config.sampling
        if sampling.seed is not None:  # a fresh, reproducible stream every turn
            sampling = replace(sampling, seed=sampling.seed * 1_000_003 + turn)
        generations = engine.generate(prompts, sampling)
        turn += 1
        seconds["generate"] += time.perf_counter() - clock
        generated += sum(len(g.token_ids) for g in generations)

        replies = [""] * n
        for i, g in zip(live, generations, strict=True):
            replies[i] = prefix + g.text
        clock = time.perf_counter()
        new = envs.step(replies)
        seconds["environment"] += time.perf_counter() - clock

        clock = time.perf_counter()
        for i, prompt, g in zip(live, prompts, generations, strict=True):
            r = new[i]
            penalty = 0.0 if r.action_valid else config.invalid_action_penalty
            step = _Step(prompt, g, replies[i], r.reward - penalty, r.action_valid, current[i].anchor)
            episodes[i].append(step)
            won[i] = r.won
            if conversation is not None:
                conversation.extend(i, g, r, len(episodes[i]), more=not r.done)
        window.record(replies, new)
        current = list(new)
        active = [active[i] and not new[i].done for i in range(n)]
        seconds["prompts"] += time.perf_counter() - clock

    return _assemble(
        episodes, won, envs.group_size, keyer, config.time_aware_anchors, conversation, seconds, generated, tokenizer
    )


@dataclass(frozen=True)
class _Step:
    prompt_ids: list[int]
    generation: Generation
    reply: str  # the response prefix and the generation's text: what the environment received
    reward: float  # the environment's reward less the invalid-action penalty
    valid: bool
    anchor: str  # the state the action was taken from


def _assemble(
    episodes: list[list[_Step]],
    won: list[bool],
    group_size: int,
    keyer: StateKeyer,
    time_aware: bool,
    conversation: Conversations | None,
    seconds: dict[str, float],
    generated: int,
    tokenizer: Any,
) -> Rollout:
    """The flat batch: trajectories in environment order, each trajectory's steps in order."""
    kept = [i for i, steps in enumerate(episodes) if steps]  # an environment that failed at reset has no step
    if not kept:
        raise RuntimeError("no environment took a step: every episode ended at reset")
    rows = [(t, s, step) for t, i in enumerate(kept) for s, step in enumerate(episodes[i])]
    traj_ids = torch.tensor([t for t, _, _ in rows], dtype=torch.int64)
    group_of_traj = torch.tensor(kept, dtype=torch.int64) // group_size
    _, dense_groups = torch.unique(group_of_traj, return_inverse=True)  # a group whose every member failed drops out
    group_ids = dense_groups[traj_ids]
    rewards = torch.tensor([step.reward for _, _, step in rows], dtype=torch.float32)
    # The episode score is the return of the rewards trained on, penalties included: every estimator's outcome
    # term (GRPO's A^E too) then tells a reply that names no move from a move. Success is `won`, not this score.
    score_of_traj = torch.zeros(len(kept)).index_add_(0, traj_ids, rewards)
    step_ids = torch.tensor([s for _, s, _ in rows], dtype=torch.int64)
    anchors = [step.anchor for _, _, step in rows]
    # Rows may share an anchor within their task group, or with time-aware anchors within (task group, step).
    key_groups = factorize_pairs(group_ids, step_ids)[0] if time_aware else group_ids
    clock = time.perf_counter()
    anchor_ids = torch.from_numpy(np.asarray(keyer.assign(anchors, key_groups.numpy()), dtype=np.int64))
    seconds["keys"] += time.perf_counter() - clock
    steps = StepBatch(
        rewards=rewards,
        episode_scores=score_of_traj[traj_ids],
        group_ids=group_ids,
        traj_ids=traj_ids,
        step_ids=step_ids,
        anchor_ids=anchor_ids,
    )
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    return Rollout(
        steps=steps,
        won=torch.tensor([won[kept[t]] for t, _, _ in rows]),
        action_valid=torch.tensor([step.valid for _, _, step in rows]),
        prompt_ids=[step.prompt_ids for _, _, step in rows],
        response_ids=[step.generation.token_ids for _, _, step in rows],
        response_logprobs=[step.generation.logprobs for _, _, step in rows],
        action_tokens=[action_token_mask(tokenizer, step.generation, step.reply) for _, _, step in rows],
        replies=[step.reply for _, _, step in rows],
        anchors=anchors,
        conversation_ids=None if conversation is None else [conversation.ids[i] for i in kept],
        conversation_sampled=None if conversation is None else [conversation.sampled[i] for i in kept],
        conversation_logprobs=None if conversation is None else [conversation.logprobs[i] for i in kept],
        seconds=seconds,
        generated_tokens=generated,
        pad_token_id=int(pad),
    )
