"""The flat training batch: :class:`Rollout` (one entry per environment step), its token rows for the actor
(:class:`TokenBatch`), merging and subsetting rollouts, and which sampled tokens spell the action. Token ids are always
the engine's own samples, never re-encoded from text."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

import numpy as np
import torch

from pyagentrl.envs.parsing import ActionParser
from pyagentrl.ops import StepBatch
from pyagentrl.rollout.engine import Generation

Layout = Literal["step", "trajectory"]


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
        """The token rows in one of two layouts: ``"step"``, one row per step with its own prompt, and
        ``"trajectory"`` (conversation prompting only), one row per trajectory with ``segment_ids`` naming each turn's
        action."""
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
