"""Bad input raises ValueError/TypeError naming the argument; nothing is silently broadcast."""

import contextlib
from collections.abc import Callable

import numpy as np
import pytest
import torch

from pyagentrl import ops

R = torch.tensor([1.0, 0.0, 1.0])
G = torch.tensor([0, 0, 1])
T = torch.tensor([0, 1, 2])
S = torch.tensor([0, 0, 0])
A = torch.tensor([4, 4, 9])


@pytest.mark.parametrize(
    ("call", "error", "name"),
    [
        (lambda: ops.group_normalize(R[:2], G), ValueError, "group_ids"),
        (lambda: ops.group_normalize(R, G.int()), TypeError, "group_ids"),
        (lambda: ops.group_normalize(R.long(), G), TypeError, "values"),
        (lambda: ops.group_normalize([1.0, 2.0], G), TypeError, "values"),
        (lambda: ops.group_normalize(torch.tensor([1.0, float("nan"), 0.0]), G), ValueError, "values contains NaN"),
        (
            lambda: ops.group_normalize(torch.tensor([1.0, float("inf"), 0.0]), G),
            ValueError,
            "values contains NaN or inf",
        ),
        (lambda: ops.group_normalize(R, torch.tensor([0, -1, 0])), ValueError, "negative"),
        (lambda: ops.group_normalize(R, G, 1), ValueError, "outside"),
        (lambda: ops.group_normalize(R, G, norm="std"), ValueError, "norm"),
        (lambda: ops.group_normalize(R[None], G), ValueError, "values must be 1-D"),
        (lambda: ops.grouped_stats(R, G[None]), ValueError, "group_ids"),
        (lambda: ops.discounted_returns(R, traj_ids=T, step_ids=S, gamma=1.5), ValueError, "gamma"),
        (lambda: ops.trajectory_gae(R, R.double(), traj_ids=T, step_ids=S, gamma=0.9, lam=0.9), ValueError, "values"),
        (lambda: ops.trajectory_gae(R, None, traj_ids=T, step_ids=S, gamma=0.9, lam=-0.1), ValueError, "lam"),
        (lambda: ops.gigpo_advantage(R, R[:2], group_ids=G, anchor_ids=A, traj_ids=T), ValueError, "step_returns"),
        (lambda: ops.gigpo_advantage(R, R, group_ids=G, anchor_ids=A.float(), traj_ids=T), TypeError, "anchor_ids"),
        (
            lambda: ops.gagpo_advantage(R, group_ids=G, traj_ids=T, step_ids=S, anchor_ids=A, norm="z"),
            ValueError,
            "norm",
        ),
        (lambda: ops.gagpo_advantage(R, group_ids=G, traj_ids=T[:2], step_ids=S, anchor_ids=A), ValueError, "traj_ids"),
        (lambda: ops.grpo_advantage(R, group_ids=G, traj_ids=T, singleton="one"), ValueError, "singleton"),
        (
            lambda: ops.gigpo_advantage(R, R.double(), group_ids=G, anchor_ids=A, traj_ids=T),
            TypeError,
            "step_returns is torch.float64",
        ),
        (
            lambda: ops.gigpo_advantage(R, R, group_ids=G, anchor_ids=A, traj_ids=T, step_weight=float("nan")),
            ValueError,
            "step_weight",
        ),
        (
            lambda: ops.gagpo_advantage(R, group_ids=G, traj_ids=T, step_ids=S, anchor_ids=A, norm_over="steps"),
            ValueError,
            "norm_over",
        ),
        (lambda: ops.factorize(np.zeros((2, 2))), ValueError, "1-D"),
        (lambda: ops.group_normalize(R.to("meta"), G.to("meta")), ValueError, "values is a meta tensor"),
        (
            lambda: ops.broadcast_to_tokens(R, torch.full((3, 2), float("nan"))),
            ValueError,
            "response_mask contains NaN",
        ),
        (lambda: ops.broadcast_to_tokens(R, -torch.ones(3, 2)), ValueError, "response_mask has a negative"),
        (lambda: _loss(mask=torch.tensor([[1.0, float("nan")]])), ValueError, "response_mask contains NaN"),
        (lambda: _loss(mask=torch.tensor([[1.0, -1.0]])), ValueError, "response_mask has a negative"),
        (lambda: _loss(clip_low=1.0), ValueError, "clip_low must be < 1"),
    ],
)
def test_bad_input(call, error, name):
    with pytest.raises(error, match=name):
        call()


def _loss(mask: torch.Tensor | None = None, clip_low: float = 0.2) -> object:
    logp = torch.zeros(1, 2)
    return ops.per_action_clipped_loss(
        logp, logp, torch.ones(1, 2), torch.ones(1, 2) if mask is None else mask, clip_low=clip_low
    )


@pytest.mark.parametrize(
    ("call", "name"),
    [
        (lambda e, i: ops.group_normalize(e, i), "values is empty"),
        (lambda e, i: ops.grouped_stats(e, i), "values is empty"),
        (lambda e, i: ops.grpo_advantage(e, group_ids=i, traj_ids=i), "scores is empty"),
        (lambda e, i: ops.gigpo_advantage(e, e, group_ids=i, anchor_ids=i, traj_ids=i), "scores is empty"),
        (lambda e, i: ops.gagpo_advantage(e, group_ids=i, traj_ids=i, step_ids=i, anchor_ids=i), "rewards is empty"),
        (lambda e, i: ops.discounted_returns(e, traj_ids=i, step_ids=i, gamma=0.9), "rewards is empty"),
        (lambda e, i: ops.broadcast_to_tokens(e, torch.ones(0, 3)), "row_values is empty"),
        (lambda e, i: ops.per_action_clipped_loss(*[torch.zeros(0, 3)] * 4), "logp is empty"),
    ],
)
def test_empty_batches_raise(call, name):
    with pytest.raises(ValueError, match=name):
        call(torch.empty(0), torch.empty(0, dtype=torch.int64))


def test_zero_length_responses_are_fine():
    # Rows without response tokens are a batch, unlike a batch without rows.
    out = ops.per_action_clipped_loss(*[torch.zeros(2, 0)] * 4)
    assert out.token_loss.shape == (2, 0)


def test_the_reference_path_checks_step_ids_too():
    # The CPU kernel checks step ids itself; under the references (forced, or a build without the extension) the
    # Python side must, or a repeated step id gives a silently wrong recursion.
    from pyagentrl.ops._dispatch import reference_ops

    traj, step = torch.tensor([0, 0]), torch.tensor([0, 0])
    with reference_ops(), pytest.raises(ValueError, match=r"step_ids of each trajectory must be 0\.\.n-1"):
        ops.trajectory_gae(torch.ones(2), None, traj_ids=traj, step_ids=step, gamma=0.9, lam=0.9)


def test_aggregate_loss_refuses_a_mask_of_another_shape() -> None:
    # torch would broadcast the [3] mask over the [2, 3] loss and return 2.0: a silently wrong loss.
    with pytest.raises(ValueError, match=r"^mask has shape \(3,\), expected \(2, 3\) \(token_loss's\)$"):
        ops.aggregate_loss(torch.ones(2, 3), torch.ones(3))
    # Matching shapes still give the mean over the masked tokens (by hand: (1 + 2 + 4) / 3).
    loss, mask = torch.tensor([[1.0, 2.0, 9.0], [4.0, 9.0, 9.0]]), torch.tensor([[1, 1, 0], [1, 0, 0]])
    assert ops.aggregate_loss(loss, mask).item() == pytest.approx(7 / 3)


def _loss_with(
    old_logp: torch.Tensor | None = None,
    advantages: torch.Tensor | None = None,
    response_mask: torch.Tensor | None = None,
    segment_ids: torch.Tensor | None = None,
) -> ops.PolicyLoss:
    """A [2, 3] loss call with one argument replaced."""
    x = torch.zeros(2, 3)
    return ops.per_action_clipped_loss(
        x,
        x if old_logp is None else old_logp,
        x if advantages is None else advantages,
        torch.ones(2, 3) if response_mask is None else response_mask,
        segment_ids,
    )


def _step_batch(episode_scores: torch.Tensor = R, step_ids: torch.Tensor = S) -> ops.StepBatch:
    return ops.StepBatch(R, episode_scores, group_ids=G, traj_ids=T, step_ids=step_ids, anchor_ids=A)


SEG_3x2 = torch.zeros(3, 2, dtype=torch.int64)
# One mismatched shape per public op: (call, the argument named).
MISMATCHED_SHAPES = [
    (lambda: ops.grouped_stats(R, G[:2]), "group_ids"),
    (lambda: ops.group_normalize(R, G[:, None]), "group_ids"),
    (lambda: ops.factorize_pairs(A, A[:2]), "b"),
    (lambda: ops.factorize(torch.zeros(2, 2, dtype=torch.int64)), "values"),
    (lambda: ops.trajectory_gae(R, R[:2], traj_ids=T, step_ids=S, gamma=0.9, lam=0.9), "values"),
    (lambda: ops.discounted_returns(R, traj_ids=T, step_ids=S[:2], gamma=0.9), "step_ids"),
    (lambda: ops.grpo_advantage(R, group_ids=G, traj_ids=T[:2]), "traj_ids"),
    (lambda: ops.gigpo_advantage(R, R, group_ids=G, anchor_ids=A[:2], traj_ids=T), "anchor_ids"),
    (lambda: ops.gagpo_advantage(R, group_ids=G[:2], traj_ids=T, step_ids=S, anchor_ids=A), "group_ids"),
    (lambda: ops.broadcast_to_tokens(R, torch.ones(2, 4)), "response_mask"),
    (lambda: _loss_with(old_logp=torch.zeros(2, 2)), "old_logp"),
    (lambda: _loss_with(advantages=torch.zeros(3)), "advantages"),
    (lambda: _loss_with(response_mask=torch.ones(3)), "response_mask"),
    (lambda: _loss_with(segment_ids=SEG_3x2), "segment_ids"),
    (lambda: ops.aggregate_loss(torch.ones(2, 3), torch.ones(2, 3), "segment-mean", SEG_3x2), "segment_ids"),
    (lambda: ops.aggregate_loss(torch.ones(3), torch.ones(3)), "token_loss"),
    (lambda: ops.kl_penalty(torch.zeros(2, 3), torch.zeros(3)), "ref_logp"),
    (lambda: _step_batch(episode_scores=R[:2]), "episode_scores"),
    (lambda: _step_batch(step_ids=S[:2]), "step_ids"),
]


@pytest.mark.parametrize("impl", ["kernel", "reference"])
@pytest.mark.parametrize(("call", "name"), MISMATCHED_SHAPES)
def test_every_public_op_refuses_a_mismatched_shape(call: Callable[[], object], name: str, impl: str) -> None:
    from pyagentrl.ops._dispatch import reference_ops

    with reference_ops() if impl == "reference" else contextlib.nullcontext(), pytest.raises(ValueError) as err:
        call()
    message = str(err.value)
    assert message.startswith(f"{name} ") and "\n" not in message, message


def test_kl_penalty_refuses_other_dtypes_and_devices() -> None:
    with pytest.raises(TypeError, match=r"ref_logp must be a float tensor, got torch\.int64"):
        ops.kl_penalty(torch.zeros(3), torch.zeros(3, dtype=torch.int64))
    with pytest.raises(ValueError, match=r"^ref_logp is a meta tensor"):
        ops.kl_penalty(torch.zeros(3), torch.zeros(3, device="meta"))
