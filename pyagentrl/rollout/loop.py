"""The multi-turn agent loop: task groups of environments, prompts, generation, environment steps, state keys, and
the flat training batch (one row per environment step) in the layout the trainer wants.

Two ways to prompt:
- ``"window"`` (verl-agent's, what the GiGPO paper trains on): each turn is one self-contained prompt with a window of
  the last ``history_length`` (observation, action) pairs (:class:`pyagentrl.envs.PromptBuilder`).
- ``"conversation"``: one growing chat per episode; turn t's prompt is turn t−1's prompt, its sampled reply and the
  template's tokens for the next observation, token for token, so a whole trajectory is one row whose log-probs
  agree with the engine's (what GAGPO's per-action ratio over a conversation needs).

Two layouts of the token batch (:meth:`Rollout.tokens`): ``"step"``, one row per step with its own prompt, and
``"trajectory"`` (conversation prompting only), one row per trajectory with ``segment_ids`` naming each turn's action.
Token ids are always the engine's own samples, never re-encoded from text.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

import numpy as np
import torch

from pyagentrl.envs import EnvBatch, PromptBuilder
from pyagentrl.envs.base import StepResult, Task
from pyagentrl.envs.parsing import ActionParser
from pyagentrl.envs.prompts import apply_chat_template, build_messages, check_answer_format, render_prompt
from pyagentrl.hashing import StateKeyer
from pyagentrl.ops import StepBatch, factorize_pairs
from pyagentrl.rollout.engine import Generation, RolloutEngine, SamplingConfig

Prompting = Literal["window", "conversation"]
Layout = Literal["step", "trajectory"]


@dataclass(frozen=True)
class RolloutConfig:
    prompting: Prompting = "window"
    history_length: int = 2  # window prompting: (observation, action) pairs shown
    invalid_action_penalty: float = 0.1  # subtracted from the step reward of a reply that is no admissible action
    sampling: SamplingConfig = field(default_factory=SamplingConfig)
    system_prompt: str | None = None
    chat_template_kwargs: dict[str, Any] = field(default_factory=dict)
    answer_format: str = "reason"  # the prompts' closing instruction: "reason" (<think> then <action>) or "direct"
    # Conversation prompting: each later user turn holds the full prompt ("full") or only the step, observation and
    # admissible actions ("compact": about half the tokens on FrozenLake; the first turn states task and format).
    turn_format: Literal["full", "compact"] = "full"
    # Text the assistant's turn starts with, given to the engine as part of the prompt (not sampled, not trained);
    # the environment receives it followed by the sampled text. E.g. "<action>" with stop ("</action>",).
    response_prefix: str = ""
    # Key anchor states per turn: rows share an anchor only when they were taken at the same step of their
    # episodes. Under a time limit with per-turn costs the return from a state depends on the turns left,
    # which the observation does not show (docs/algorithms.md, (G9)).
    time_aware_anchors: bool = False

    def __post_init__(self) -> None:
        check_answer_format(self.answer_format)
        if self.prompting not in ("window", "conversation"):
            raise ValueError(f"prompting must be 'window' or 'conversation', got {self.prompting!r}")
        if self.history_length < 0:
            raise ValueError(f"history_length must be >= 0, got {self.history_length}")
        if self.turn_format not in ("full", "compact"):
            raise ValueError(f"turn_format must be 'full' or 'compact', got {self.turn_format!r}")
        if not (self.invalid_action_penalty >= 0 and np.isfinite(self.invalid_action_penalty)):
            raise ValueError(f"invalid_action_penalty must be finite and >= 0, got {self.invalid_action_penalty}")
        if not isinstance(self.time_aware_anchors, bool):  # a truthy string such as "no" would turn it on
            raise TypeError(f"time_aware_anchors must be a bool, got {self.time_aware_anchors!r}")


@dataclass
class TokenBatch:
    """Right-padded token rows for the actor. ``response_mask`` marks the engine's sampled tokens, ``old_logprobs``
    their engine log-probs (0 elsewhere), ``action_mask`` the sampled tokens that spell the action (the diagnostics'
    action entropy), ``segment_ids`` the step of each sampled token within its trajectory (``"trajectory"`` layout)
    or 0 (``"step"``); ``step_rows[r]`` is the row that holds step row r's action."""

    input_ids: torch.Tensor  # int64 [B, T]
    attention_mask: torch.Tensor  # int64 [B, T]
    response_mask: torch.Tensor  # float32 [B, T]
    old_logprobs: torch.Tensor  # float32 [B, T]
    action_mask: torch.Tensor  # float32 [B, T]
    segment_ids: torch.Tensor  # int64 [B, T]
    step_rows: torch.Tensor  # int64 [R]
    layout: Layout

    def token_advantages(self, step_advantages: torch.Tensor, steps: StepBatch) -> torch.Tensor:
        """[B, T]: each sampled token gets the advantage of the step whose action it belongs to."""
        if step_advantages.shape != (steps.num_rows,):
            raise ValueError(f"step_advantages must be [{steps.num_rows}], got {tuple(step_advantages.shape)}")
        mask = self.response_mask.to(step_advantages.device, step_advantages.dtype)
        if self.layout == "step":
            return step_advantages[:, None] * mask
        # Trajectory rows: (row, segment) = (trajectory, step) picks the step row.
        if self.input_ids.shape[0] != steps.num_trajs:
            raise ValueError(f"{self.input_ids.shape[0]} trajectory rows for a batch of {steps.num_trajs} trajectories")
        width = max(int(steps.step_ids.max()), int(self.segment_ids.max())) + 1
        index = torch.full((steps.num_trajs, width), -1, dtype=torch.int64)
        index[steps.traj_ids, steps.step_ids] = torch.arange(steps.num_rows)
        step_of_token = index.gather(1, self.segment_ids)
        active = self.response_mask != 0
        if bool((step_of_token[active] < 0).any()):
            raise ValueError("a sampled token names a step its trajectory does not have")
        rows = step_of_token.clamp(min=0).to(step_advantages.device)
        return step_advantages[rows] * mask


@dataclass
class Rollout:
    """One rollout of ``num_groups`` task groups × ``group_size`` episodes, one entry per environment step."""

    steps: StepBatch  # rewards (penalised), episode scores, group / trajectory / step / anchor ids
    won: torch.Tensor  # bool [R]: the row's episode was won
    action_valid: torch.Tensor  # bool [R]
    prompt_ids: list[list[int]]  # per row: the prompt the engine was given
    response_ids: list[list[int]]  # per row: the sampled tokens
    response_logprobs: list[list[float]]
    action_tokens: list[list[bool]]  # per row: which sampled tokens spell the action (action_token_mask)
    replies: list[str]  # per row: the decoded reply the environment received
    anchors: list[str]  # per row: canonical text of the state the action was taken from
    conversation_ids: list[list[int]] | None  # conversation prompting: per trajectory, the whole chat
    conversation_sampled: list[list[int]] | None  # per trajectory token: step index of a sampled token, else -1
    conversation_logprobs: list[list[float]] | None
    seconds: dict[str, float]  # time per phase: generate, environment, keys, prompts
    generated_tokens: int
    pad_token_id: int

    @property
    def invalid_rate(self) -> float:
        return float((~self.action_valid).double().mean())

    def tokens(self, layout: Layout = "step") -> TokenBatch:
        if layout == "step":
            rows = [p + r for p, r in zip(self.prompt_ids, self.response_ids, strict=True)]
            sampled = [[-1] * len(p) + [0] * len(r) for p, r in zip(self.prompt_ids, self.response_ids, strict=True)]
            logps = [[0.0] * len(p) + lp for p, lp in zip(self.prompt_ids, self.response_logprobs, strict=True)]
            actions = [[False] * len(p) + a for p, a in zip(self.prompt_ids, self.action_tokens, strict=True)]
            step_rows = torch.arange(self.steps.num_rows)
        elif layout == "trajectory":
            if self.conversation_ids is None or self.conversation_sampled is None or self.conversation_logprobs is None:
                raise ValueError("layout 'trajectory' needs prompting='conversation' (window prompts do not chain)")
            rows, sampled, logps = self.conversation_ids, self.conversation_sampled, self.conversation_logprobs
            actions = self._conversation_actions()
            step_rows = self.steps.traj_ids.clone()
        else:
            raise ValueError(f"layout must be 'step' or 'trajectory', got {layout!r}")
        width = max(len(r) for r in rows)
        input_ids = torch.full((len(rows), width), self.pad_token_id, dtype=torch.int64)
        attention = torch.zeros((len(rows), width), dtype=torch.int64)
        segments = torch.full((len(rows), width), -1, dtype=torch.int64)
        old = torch.zeros((len(rows), width), dtype=torch.float32)
        action = torch.zeros((len(rows), width), dtype=torch.float32)
        for i, (ids, seg, lp, act) in enumerate(zip(rows, sampled, logps, actions, strict=True)):
            input_ids[i, : len(ids)] = torch.tensor(ids)
            attention[i, : len(ids)] = 1
            segments[i, : len(ids)] = torch.tensor(seg)
            old[i, : len(ids)] = torch.tensor(lp)
            action[i, : len(ids)] = torch.tensor(act, dtype=torch.float32)
        mask = (segments >= 0).float()
        return TokenBatch(input_ids, attention, mask, old, action, segments.clamp(min=0), step_rows, layout)

    def _conversation_actions(self) -> list[list[bool]]:
        """Per trajectory token: whether it spells its step's action (the step rows' masks, in conversation order)."""
        assert self.conversation_sampled is not None
        pairs = zip(self.steps.traj_ids.tolist(), self.steps.step_ids.tolist(), strict=True)
        row_of = {pair: r for r, pair in enumerate(pairs)}
        out = []
        for t, sampled in enumerate(self.conversation_sampled):
            seen: dict[int, int] = {}
            marks = []
            for step in sampled:
                if step < 0:
                    marks.append(False)
                    continue
                k = seen.get(step, 0)
                seen[step] = k + 1
                marks.append(self.action_tokens[row_of[t, step]][k])
            out.append(marks)
        return out

    def select_groups(self, keep: torch.Tensor) -> Rollout:
        """The rollout of the task groups where ``keep`` (bool [num_groups]) holds, ids made dense again."""
        if keep.dtype != torch.bool or keep.shape != (self.steps.num_groups,):
            raise ValueError(f"keep must be bool [{self.steps.num_groups}], got {keep.dtype} {tuple(keep.shape)}")
        if not bool(keep.any()):
            raise ValueError("keep drops every task group")
        rows = keep[self.steps.group_ids].nonzero().flatten()
        trajs = keep[self.steps.traj_group].nonzero().flatten()
        return _subset(self, rows, trajs)


def merge_rollouts(parts: Sequence[Rollout]) -> Rollout:
    """One rollout from several (the ranks' shares of an iteration, in rank order): task groups and trajectories
    are numbered on, so groups stay whole and distinct. Phase times are the slowest part's (ranks run at once)."""
    if not parts:
        raise ValueError("no rollouts to merge")
    if len(parts) == 1:
        return parts[0]
    group_offsets = np.cumsum([0] + [p.steps.num_groups for p in parts])
    traj_offsets = np.cumsum([0] + [p.steps.num_trajs for p in parts])

    def cat(name: str) -> torch.Tensor:
        return torch.cat([getattr(p.steps, name) for p in parts])

    def lists(name: str) -> Any:
        values = [getattr(p, name) for p in parts]
        return None if values[0] is None else [x for v in values for x in v]

    steps = StepBatch(
        rewards=cat("rewards"),
        episode_scores=cat("episode_scores"),
        group_ids=torch.cat([p.steps.group_ids + int(o) for p, o in zip(parts, group_offsets, strict=False)]),
        traj_ids=torch.cat([p.steps.traj_ids + int(o) for p, o in zip(parts, traj_offsets, strict=False)]),
        step_ids=cat("step_ids"),
        anchor_ids=cat("anchor_ids"),
    )
    return Rollout(
        steps=steps,
        won=torch.cat([p.won for p in parts]),
        action_valid=torch.cat([p.action_valid for p in parts]),
        prompt_ids=lists("prompt_ids"),
        response_ids=lists("response_ids"),
        response_logprobs=lists("response_logprobs"),
        action_tokens=lists("action_tokens"),
        replies=lists("replies"),
        anchors=lists("anchors"),
        conversation_ids=lists("conversation_ids"),
        conversation_sampled=lists("conversation_sampled"),
        conversation_logprobs=lists("conversation_logprobs"),
        seconds={k: max(p.seconds[k] for p in parts) for k in parts[0].seconds},
        generated_tokens=sum(p.generated_tokens for p in parts),
        pad_token_id=parts[0].pad_token_id,
    )


def _subset(rollout: Rollout, rows: torch.Tensor, trajs: torch.Tensor) -> Rollout:
    """The given rows and trajectories (whole trajectories, in order), with dense group and trajectory ids."""
    s = rollout.steps
    _, group_ids = torch.unique(s.group_ids[rows], return_inverse=True)
    _, traj_ids = torch.unique(s.traj_ids[rows], return_inverse=True)
    steps = StepBatch(
        rewards=s.rewards[rows],
        episode_scores=s.episode_scores[rows],
        group_ids=group_ids,
        traj_ids=traj_ids,
        step_ids=s.step_ids[rows],
        anchor_ids=s.anchor_ids[rows],
    )
    r, t = rows.tolist(), trajs.tolist()

    def pick(values: Any, index: list[int]) -> Any:
        return None if values is None else [values[i] for i in index]

    return replace(
        rollout,
        steps=steps,
        won=rollout.won[rows],
        action_valid=rollout.action_valid[rows],
        prompt_ids=pick(rollout.prompt_ids, r),
        response_ids=pick(rollout.response_ids, r),
        response_logprobs=pick(rollout.response_logprobs, r),
        action_tokens=pick(rollout.action_tokens, r),
        replies=pick(rollout.replies, r),
        anchors=pick(rollout.anchors, r),
        conversation_ids=pick(rollout.conversation_ids, t),
        conversation_sampled=pick(rollout.conversation_sampled, t),
        conversation_logprobs=pick(rollout.conversation_logprobs, t),
    )


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
    conversation = _Conversation(tokenizer, family, config, results) if config.prompting == "conversation" else None

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


_PARSER = ActionParser()


def action_token_mask(tokenizer: Any, generation: Generation, reply: str) -> list[bool]:
    """Which of a reply's sampled tokens spell its action: those whose text overlaps the candidate action of
    :class:`ActionParser` (the last ``<action>`` tag's content). ``reply`` is what the environment received: the
    response prefix, then the generation's text. Offsets come from each token decoded alone, so a character split
    across tokens may shift the range by one token."""
    pieces = tokenizer.batch_decode([[t] for t in generation.token_ids], skip_special_tokens=True)
    prefix = reply[: len(reply) - len(generation.text)]
    span = _PARSER.span(prefix + "".join(pieces))
    if span is None:
        return [False] * len(pieces)
    start, end, marks, at = span[0] - len(prefix), span[1] - len(prefix), [], 0
    for piece in pieces:
        marks.append(bool(piece) and at < end and at + len(piece) > start)
        at += len(piece)
    return marks


@dataclass(frozen=True)
class _Step:
    prompt_ids: list[int]
    generation: Generation
    reply: str  # the response prefix and the generation's text: what the environment received
    reward: float  # the environment's reward less the invalid-action penalty
    valid: bool
    anchor: str  # the state the action was taken from


class _Conversation:
    """Growing chats, kept as token ids: sampled tokens as sampled, the template's tokens between them encoded."""

    def __init__(self, tokenizer: Any, family: str, config: RolloutConfig, results: Sequence[StepResult]) -> None:
        self.tokenizer, self.family, self.config = tokenizer, family, config
        self.prefix = config.response_prefix
        self.messages = [
            build_messages(
                render_prompt(family, r, history_length=0, answer_format=config.answer_format), config.system_prompt
            )
            for r in results
        ]
        self.ids = [self._encode(self._template(m, True) + self.prefix) for m in self.messages]
        self.special_ids = set(tokenizer.all_special_ids)
        self.sampled: list[list[int]] = [[-1] * len(ids) for ids in self.ids]
        self.logprobs: list[list[float]] = [[0.0] * len(ids) for ids in self.ids]

    def _template(self, messages: list[dict[str, str]], generation_prompt: bool) -> str:
        return apply_chat_template(messages, self.tokenizer, generation_prompt, **self.config.chat_template_kwargs)

    def _encode(self, text: str) -> list[int]:
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def extend(self, i: int, g: Generation, result: StepResult, step_count: int, *, more: bool) -> None:
        """Append env i's sampled reply and, while the episode goes on, the next user turn's template tokens."""
        step = step_count - 1
        self.ids[i] += g.token_ids
        self.sampled[i] += [step] * len(g.token_ids)
        self.logprobs[i] += g.logprobs
        if not more:
            return
        before = self._template(self.messages[i], True) + self.prefix
        self.messages[i] = [*self.messages[i], {"role": "assistant", "content": self.prefix + g.text}]
        closed = self._template(self.messages[i], False)
        if not closed.startswith(before + g.text):
            raise ValueError(
                "the model's chat template does not render a conversation as a prefix of its continuation; "
                "use prompting='window'"
            )
        closing = closed[len(before) + len(g.text) :]  # e.g. "<|im_end|>\n"
        if g.finish_reason == "stop" and g.token_ids and g.token_ids[-1] in self.special_ids:
            # The model sampled its turn's end itself (EOS, or another stop token such as Gemma's <end_of_turn>).
            closing = closing.removeprefix(self.tokenizer.decode(g.token_ids[-1:], skip_special_tokens=False))
        turn = render_prompt(
            self.family,
            result,
            step_count=step_count,
            history_length=0,
            intro=False,
            answer_format=self.config.answer_format,
            compact=self.config.turn_format == "compact",
        )
        self.messages[i] = [*self.messages[i], {"role": "user", "content": turn}]
        following = self._template(self.messages[i], True)
        if not following.startswith(closed):  # e.g. Qwen3's template drops earlier turns' <think> blocks
            raise ValueError(
                "the model's chat template does not render a conversation as a prefix of its continuation; "
                "use prompting='window'"
            )
        between = self._encode(closing + following[len(closed) :] + self.prefix)
        self.ids[i] += between
        self.sampled[i] += [-1] * len(between)
        self.logprobs[i] += [0.0] * len(between)


def _assemble(
    episodes: list[list[_Step]],
    won: list[bool],
    group_size: int,
    keyer: StateKeyer,
    time_aware: bool,
    conversation: _Conversation | None,
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
