"""Extreme ids (negative, INT64_MIN, INT64_MAX, values whose step + 1 or offset + step wraps int64) in every public op
that takes ids: the same one-line ValueError naming the argument whether the compiled kernel or the PyTorch
reference runs, or, for arguments that take any int64 (anchor keys, factorize_pairs), the same result as small
ids. The CPU kernel once added 1 to a step id near 2**63 and read the word before its own buffer; its error message
printed that heap word (issue 51)."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
import torch

from pyagentrl import ops
from pyagentrl.ops._dispatch import reference_ops
from pyagentrl.ops._library import has_kernel

P = torch.ops.pyagentrl
I64_MIN, I64_MAX = -(2**63), 2**63 - 1
# Step ids near 2**63; 2**61 - 1 and 2**62 - 1 are the ones whose 8-byte offset wraps to the word before a buffer.
HUGE = [I64_MAX, I64_MAX - 1, 2**62 - 1, 2**61 - 1, 2**40]
NEGATIVE = [-1, I64_MIN, I64_MIN + 1]
EXTREMES = HUGE + NEGATIVE

DEVICES = [
    "cpu",
    pytest.param("cuda", marks=[pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="no GPU")]),
]


@pytest.fixture(params=["kernel", "reference"])
def impl(request: pytest.FixtureRequest) -> Iterator[str]:
    """Runs the test body with the compiled kernels, then with the PyTorch references."""
    if request.param == "kernel":
        if not has_kernel("trajectory_gae", torch.device("cpu")):
            pytest.skip("built without the C++ extension")
        yield "kernel"
    else:
        with reference_ops():
            yield "reference"


def _batch(device: str) -> dict[str, torch.Tensor]:
    """Two task groups, three trajectories (of 2, 1 and 2 steps), rows shuffled."""
    t = {
        "rewards": [0.0, 1.0, 0.5, 0.0, 2.0],
        "scores": [1.0, 1.0, 0.5, 2.0, 2.0],
        "group_ids": [0, 0, 0, 1, 1],
        "traj_ids": [0, 0, 1, 2, 2],
        "step_ids": [1, 0, 0, 0, 1],
        "anchor_ids": [7, 8, 8, 7, 9],
    }
    return {k: torch.tensor(v, device=device) for k, v in t.items()}


def _with(t: torch.Tensor, row: int, value: int) -> torch.Tensor:
    out = t.clone()
    out[row] = value
    return out


# Every public op that takes ids, as (op, id argument): called on the batch with that argument replaced.
def _call(op: str, b: dict[str, torch.Tensor]) -> object:
    r, s, g, t = b["rewards"], b["scores"], b["group_ids"], b["traj_ids"]
    if op == "grouped_stats":
        return ops.grouped_stats(r, b["group_ids"])
    if op == "group_normalize":
        return ops.group_normalize(r, b["group_ids"])
    if op == "trajectory_gae":
        return ops.trajectory_gae(r, r, traj_ids=b["traj_ids"], step_ids=b["step_ids"], gamma=0.9, lam=0.8)
    if op == "discounted_returns":
        return ops.discounted_returns(r, traj_ids=b["traj_ids"], step_ids=b["step_ids"], gamma=0.9)
    if op == "grpo_advantage":
        return ops.grpo_advantage(s, group_ids=g, traj_ids=t)
    if op == "gigpo_advantage":
        return ops.gigpo_advantage(s, r, group_ids=g, traj_ids=t, anchor_ids=b["anchor_ids"])
    if op == "gagpo_advantage":
        return ops.gagpo_advantage(r, group_ids=g, traj_ids=t, step_ids=b["step_ids"], anchor_ids=b["anchor_ids"])
    if op == "StepBatch":
        return ops.StepBatch(r, s, group_ids=g, traj_ids=t, step_ids=b["step_ids"], anchor_ids=b["anchor_ids"])
    raise AssertionError(op)


REFUSED = [
    ("grouped_stats", "group_ids"),
    ("group_normalize", "group_ids"),
    ("trajectory_gae", "traj_ids"),
    ("trajectory_gae", "step_ids"),
    ("discounted_returns", "traj_ids"),
    ("discounted_returns", "step_ids"),
    ("grpo_advantage", "group_ids"),
    ("gigpo_advantage", "group_ids"),
    ("gagpo_advantage", "group_ids"),
    ("gagpo_advantage", "traj_ids"),
    ("gagpo_advantage", "step_ids"),
    ("StepBatch", "group_ids"),
    ("StepBatch", "traj_ids"),
    ("StepBatch", "step_ids"),
]


def _message(call: Callable[[], object]) -> str:
    with pytest.raises(ValueError) as err:  # the callers check the message
        call()
    return str(err.value)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(("op", "arg"), REFUSED)
@pytest.mark.parametrize("value", EXTREMES)
def test_extreme_ids_are_refused_alike_by_kernel_and_reference(op: str, arg: str, value: int, device: str) -> None:
    b = _batch(device)
    b[arg] = _with(b[arg], 4, value)
    with reference_ops():
        expected = _message(lambda: _call(op, b))
    got = _message(lambda: _call(op, b)) if has_kernel("trajectory_gae", torch.device(device)) else expected
    assert got == expected, "the kernel and the reference disagree"
    assert arg in got and "\n" not in got
    assert str(value) in got or "negative" in got  # names the offending id itself, nothing read from elsewhere


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("value", HUGE)
def test_a_huge_step_id_names_its_row(value: int, device: str, impl: str) -> None:
    # The reported case: trajectory 0 holds steps 1 and a huge one, so the row count matches and step + 1 wraps.
    traj = torch.tensor([0, 0], device=device)
    step = torch.tensor([1, value], device=device)
    rewards = torch.ones(2, device=device)
    message = _message(lambda: ops.discounted_returns(rewards, traj_ids=traj, step_ids=step, gamma=0.9))
    assert message == (
        f"step_ids[1] = {value} is outside [0, 2) (trajectory 0 has 2 rows): "
        "step_ids of each trajectory must be 0..n-1, each exactly once"
    )


@pytest.mark.parametrize("device", DEVICES)
def test_a_repeated_step_names_both_rows(device: str, impl: str) -> None:
    traj = torch.tensor([1, 0, 1, 1], device=device)
    step = torch.tensor([2, 0, 0, 0], device=device)
    message = _message(
        lambda: ops.trajectory_gae(torch.ones(4, device=device), None, traj_ids=traj, step_ids=step, gamma=1, lam=1)
    )
    assert message == (
        "step_ids: trajectory 1 has step 0 twice (rows 2 and 3): step_ids of each trajectory must be 0..n-1, "
        "each exactly once"
    )


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("value", EXTREMES)
def test_extreme_segment_ids_are_refused(value: int, device: str, impl: str) -> None:
    logp = torch.zeros(2, 3, device=device)
    mask = torch.ones(2, 3, device=device)
    seg = torch.zeros(2, 3, dtype=torch.int64, device=device)
    seg[1, 2] = value
    expected = "segment_ids on masked tokens must lie in [0, 3)"
    assert _message(lambda: ops.per_action_clipped_loss(logp, logp, logp, mask, seg)) == expected
    assert _message(lambda: ops.aggregate_loss(logp, mask, "segment-mean", seg)) == expected
    # Off the mask a segment id is never read: any value is fine.
    off = mask.clone()
    off[1, 2] = 0
    loss = ops.per_action_clipped_loss(logp, logp, torch.ones_like(logp), off, seg, loss_agg_mode="segment-mean")
    assert float(loss.loss) == -1.0  # ratio 1, advantage 1: every token's loss is -1


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("value", EXTREMES)
def test_keys_take_any_int64(value: int, device: str, impl: str) -> None:
    # Anchor keys, grpo's trajectory ids (pairs with the group) and factorize_pairs' inputs are keys, not indices:
    # an extreme key must give exactly what a small unused key gives in its place.
    b = _batch(device)
    extreme, small = dict(b), dict(b)
    extreme["anchor_ids"] = _with(b["anchor_ids"], 4, value)
    small["anchor_ids"] = _with(b["anchor_ids"], 4, 1000)
    for op in ("gigpo_advantage", "gagpo_advantage"):
        torch.testing.assert_close(_call(op, extreme), _call(op, small), rtol=0, atol=0)
    states = [ops.StepBatch(**_step_batch_args(b)).state_ids for b in (extreme, small)]
    assert torch.equal(*states)
    a = torch.tensor([value, 0, value, I64_MIN, I64_MAX, value], device=device)
    dense, num = ops.factorize_pairs(a, a.flip(0))
    first: dict[tuple[int, int], int] = {}  # numbered by first appearance, in plain Python
    expected = [first.setdefault(pair, len(first)) for pair in zip(a.tolist(), a.flip(0).tolist(), strict=True)]
    assert dense.tolist() == expected and num == len(first)
    if value >= 0:  # grpo's trajectory ids: any non-negative key, a trajectory being a (group, id) pair
        traj = torch.tensor([0, 0, value, 0, 0], device=device)
        dense_traj = torch.tensor([0, 0, 1, 0, 0], device=device)
        scores = torch.tensor([1.0, 1.0, 0.5, 2.0, 2.0], device=device)
        got = ops.grpo_advantage(scores, group_ids=b["group_ids"], traj_ids=traj)
        torch.testing.assert_close(got, ops.grpo_advantage(scores, group_ids=b["group_ids"], traj_ids=dense_traj))


def _step_batch_args(b: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {
        "rewards": b["rewards"],
        "episode_scores": b["scores"],
        "group_ids": b["group_ids"],
        "traj_ids": b["traj_ids"],
        "step_ids": b["step_ids"],
        "anchor_ids": b["anchor_ids"],
    }


def test_ids_beyond_the_rows_need_an_explicit_count(impl: str) -> None:
    # Without num_groups, ids index a table of max + 1 entries: an id past the rows is refused (a hash, say), and
    # an explicit count may leave ids unused but is bounded.
    x, g = torch.tensor([1.0, 2.0, 3.0]), torch.tensor([0, 0, 5])
    assert _message(lambda: ops.grouped_stats(x, g)) == (
        "group_ids has id 5, outside [0, 3): ids are dense, below the number of rows; pass num_groups, or number "
        "sparse keys with ops.factorize"
    )
    size, mean, _ = ops.grouped_stats(x, g, 6)
    assert size.tolist() == [2, 0, 0, 0, 0, 1] and mean.tolist() == [1.5, 0, 0, 0, 0, 3.0]
    assert _message(lambda: ops.grouped_stats(x, g, 2**62)) == "num_groups must be in 0..2**40, got 4611686018427387904"
    with pytest.raises(TypeError, match="num_groups must be an int, got float"):
        ops.grouped_stats(x, g, 6.0)  # type: ignore[arg-type]


# ---- the kernels called directly (torch.ops.pyagentrl.*): they check ranges themselves ----------------------------


@pytest.mark.skipif(not has_kernel("trajectory_gae", torch.device("cpu")), reason="built without the C++ extension")
@pytest.mark.parametrize("value", EXTREMES)
def test_cpu_kernels_check_id_ranges_themselves(value: int) -> None:
    r = torch.ones(3)
    traj, step = torch.tensor([0, 0, 1]), torch.tensor([1, 0, 0])
    with pytest.raises(ValueError, match=rf"^step_ids\[2\] = {value} is outside \[0, 1\) \(trajectory 1 has 1 rows\)"):
        P.trajectory_gae(r, None, traj, _with(step, 2, value), 2, 0.9, 1.0)
    with pytest.raises(ValueError, match=rf"^traj_ids\[1\] = {value} is outside \[0, 2\)$"):
        P.trajectory_gae(r, None, _with(traj, 1, value), step, 2, 0.9, 1.0)
    with pytest.raises(ValueError, match=rf"^group_ids\[0\] = {value} is outside \[0, 2\)$"):
        P.grouped_stats(r, _with(traj, 0, value), 2, True)
    with pytest.raises(ValueError, match=rf"^group_ids\[0\] = {value} is outside \[0, 2\)$"):
        P.group_normalize(r, _with(traj, 0, value), 2, True, True, 1e-6, False)
    seg = torch.zeros(1, 3, dtype=torch.int64)
    with pytest.raises(ValueError, match=rf"^segment_ids\[0, 2\] = {value} is outside \[0, 3\)$"):
        P.per_action_clipped_loss(r[None], r[None], r[None], r[None], _with(seg[0], 2, value)[None], 0.2, 0.2)
    # The id counts: never negative, never past 2**40 (num + 1 and the tables' byte sizes stay far from overflow).
    for bad in (value, I64_MAX):
        if 0 <= bad <= 2**40:
            continue
        with pytest.raises(ValueError, match=rf"^num_trajs must be in \[0, 2\^40\], got {bad}$"):
            P.trajectory_gae(r, None, traj, step, bad, 0.9, 1.0)
        with pytest.raises(ValueError, match=rf"^num_groups must be in \[0, 2\^40\], got {bad}$"):
            P.grouped_stats(r, traj, bad, True)
