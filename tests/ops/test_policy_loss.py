"""Per-action ratio and clipped loss: kernel against the reference (values and gradients), the GSPO
sequence objective (gradcheck), and the identity that segments behave like separate rows."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from pyagentrl import ops
from pyagentrl.ops import reference


def _case(seed: int, rows: int = 4, length: int = 9, dtype=torch.float64, segments: bool = True):
    gen = torch.Generator().manual_seed(seed)
    logp = -torch.rand(rows, length, generator=gen, dtype=dtype) * 3
    old = logp + 0.3 * torch.randn(rows, length, generator=gen, dtype=dtype)
    mask = (torch.rand(rows, length, generator=gen) < 0.8).to(dtype)
    mask[0] = 0  # a row with no response tokens
    seg = torch.sort(torch.randint(0, 3, (rows, length), generator=gen), dim=1).values if segments else None
    # One advantage per action, as the estimators give.
    per_seg = torch.randn(rows, length, generator=gen, dtype=dtype)
    adv = per_seg.gather(1, seg) if seg is not None else per_seg[:, :1].expand(rows, length).contiguous()
    return logp, old, adv, mask, seg


@settings(max_examples=80, deadline=None)
@given(
    st.integers(0, 2**31 - 1),
    st.booleans(),
    st.sampled_from([torch.float32, torch.float64]),
    st.floats(0.0, 0.5),
    st.floats(0.0, 0.5),
)
def test_kernel_matches_reference_values_and_gradients(seed, segments, dtype, clip_low, clip_high):
    logp, old, adv, mask, seg = _case(seed, dtype=dtype, segments=segments)
    a = logp.clone().requires_grad_()
    b = logp.clone().requires_grad_()
    got = torch.ops.pyagentrl.per_action_clipped_loss(a, old, adv, mask, seg, clip_low, clip_high)
    want = reference.per_action_clipped_loss(b, old, adv, mask, seg, clip_low, clip_high)
    tol = 1e-5 if dtype == torch.float32 else 1e-10
    for x, y in zip(got, want, strict=True):
        torch.testing.assert_close(x.detach(), y.detach(), rtol=tol, atol=tol)
    weights = torch.rand_like(logp)
    ((got[0] * weights).sum() + got[1].sum()).backward()
    ((want[0] * weights).sum() + want[1].sum()).backward()
    torch.testing.assert_close(a.grad, b.grad, rtol=tol, atol=tol)


@pytest.mark.parametrize("seed", range(5))
def test_gradcheck_against_gspo_sequence_objective(seed):
    # With one advantage per action, the segment-mean of the GSPO-token loss equals the sequence-level
    # GSPO objective mean_a max(−A_a s_a, −A_a clip(s_a)), a true function of logp whose derivative is
    # s_a/|a|·Σ∇logp_j: gradcheck then checks the custom backward against finite differences.
    logp, old, adv, mask, seg = _case(seed)
    mask = (mask != 0).double()

    def objective(x):
        return ops.per_action_clipped_loss(
            x, old, adv, mask, seg, clip_low=0.2, clip_high=0.28, loss_agg_mode="segment-mean"
        ).loss

    assert torch.autograd.gradcheck(objective, (logp.clone().requires_grad_(),))


def test_segments_equal_separate_rows():
    logp, old, adv, mask, seg = _case(7, rows=1, length=12)
    mask = torch.ones_like(mask)
    joined = ops.per_action_clipped_loss(logp, old, adv, mask, seg)
    split_mask = torch.stack([(seg[0] == k).double() for k in range(3)])
    split = ops.per_action_clipped_loss(logp.expand(3, -1), old.expand(3, -1), adv.expand(3, -1), split_mask)
    torch.testing.assert_close(joined.ratio[0], (split.ratio * split_mask).sum(0) + (1 - split_mask.sum(0)))
    torch.testing.assert_close(joined.token_loss[0], (split.token_loss * split_mask).sum(0))


def test_on_policy_ratio_is_one_and_loss_is_minus_advantage():
    logp, _, adv, mask, seg = _case(3)
    out = ops.per_action_clipped_loss(logp, logp.clone(), adv, mask, seg)
    active = mask != 0
    assert torch.allclose(out.ratio[active], torch.ones(()).double())
    torch.testing.assert_close(out.loss, (-adv * mask).sum() / mask.sum())
    assert out.clip_fraction == 0


def test_clipping_and_clip_fraction():
    # One token per row: ratios e^0.5 ≈ 1.65 (A > 0, clipped at 1.2) and e^-0.5 ≈ 0.61 (A > 0, not clipped).
    logp = torch.tensor([[0.5], [-0.5]], dtype=torch.float64, requires_grad=True)
    old = torch.zeros(2, 1, dtype=torch.float64)
    adv = torch.ones(2, 1, dtype=torch.float64)
    out = ops.per_action_clipped_loss(
        logp, old, adv, torch.ones(2, 1), clip_low=0.2, clip_high=0.2, loss_agg_mode="seq-mean-token-sum"
    )
    torch.testing.assert_close(
        out.token_loss.detach(), torch.tensor([[-1.2], [-torch.exp(torch.tensor(-0.5)).item()]], dtype=torch.float64)
    )
    assert out.clip_fraction.item() == 0.5
    out.loss.backward()
    torch.testing.assert_close(
        logp.grad, torch.tensor([[0.0], [-torch.exp(torch.tensor(-0.5)).item() / 2]], dtype=torch.float64)
    )


@pytest.mark.parametrize("mode", ops.LOSS_AGG_MODES)
def test_aggregation_modes(mode):
    loss = torch.tensor([[1.0, 2.0, 0.0], [4.0, 0.0, 0.0], [0.0, 0.0, 0.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, 0.0]])
    seg = torch.tensor([[0, 1, 0], [0, 0, 0], [0, 0, 0]])
    expected = {
        "token-mean": 7.0 / 3,
        "token-sum": 7.0,
        "seq-mean-token-sum": (3.0 + 4.0) / 2,
        "seq-mean-token-mean": (1.5 + 4.0) / 2,
        "seq-mean-token-sum-norm": (3.0 + 4.0) / 2 / 3,
        "segment-mean": (1.0 + 2.0 + 4.0) / 3,
    }[mode]
    assert ops.aggregate_loss(loss, mask, mode, seg).item() == pytest.approx(expected)


def test_bad_inputs_name_the_argument():
    logp, old, adv, mask, seg = _case(1)
    with pytest.raises(ValueError, match="old_logp"):
        ops.per_action_clipped_loss(logp, old[:, :3], adv, mask)
    with pytest.raises(ValueError, match="segment_ids"):
        ops.per_action_clipped_loss(logp, old, adv, mask, seg + 100)
    with pytest.raises(ValueError, match="advantages"):
        ops.per_action_clipped_loss(logp, old, adv.float(), mask)
    bad = adv.clone()
    bad[1, 1] = float("nan")
    with pytest.raises(ValueError, match="advantages contains NaN"):
        ops.per_action_clipped_loss(logp, old, bad, mask)
    with pytest.raises(ValueError, match="loss_agg_mode"):
        ops.per_action_clipped_loss(logp, old, adv, mask, loss_agg_mode="mean")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "mode", ["token-mean", "token-sum", "seq-mean-token-mean", "seq-mean-token-sum", "segment-mean"]
)
def test_loss_units_turn_each_mode_into_a_sum(mode):
    # The identity a data-parallel trainer relies on: mean × units = the sum the mode averages, computed by hand.
    from pyagentrl.ops.policy_loss import loss_units, reduce_token_loss

    g = torch.Generator().manual_seed(1)
    loss = torch.randn(4, 6, generator=g, dtype=torch.float64)
    mask = (torch.rand(4, 6, generator=g) > 0.3).double()
    mask[2] = 0  # a row without tokens
    seg = torch.randint(0, 3, (4, 6), generator=g)
    rows = [r for r in range(4) if mask[r].sum() > 0]
    if mode in ("token-mean", "token-sum"):
        expected_sum = float((loss * mask).sum())
    elif mode == "seq-mean-token-mean":
        expected_sum = sum(float((loss[r] * mask[r]).sum() / mask[r].sum()) for r in rows)
    elif mode == "seq-mean-token-sum":
        expected_sum = sum(float((loss[r] * mask[r]).sum()) for r in rows)
    else:
        expected_sum = 0.0
        for r in rows:
            for s in range(3):
                on = (seg[r] == s) & (mask[r] > 0)
                if on.any():
                    expected_sum += float(loss[r][on].mean())
    got = reduce_token_loss(loss, mask, mode, seg) * loss_units(mask, mode, seg)
    assert float(got) == pytest.approx(expected_sum, rel=1e-12)


# ---- the KL penalty against verl's -------------------------------------------------------------------------------


@pytest.mark.parametrize("estimator, verl_name", [("k1", "k1"), ("k3", "low_var_kl")])
def test_kl_penalty_matches_verl_and_bounds_the_gradient(estimator, verl_name):
    from testkit.peers import import_peer

    core_algos = import_peer("verl.trainer.ppo.core_algos")
    g = torch.Generator().manual_seed(0)
    ref = -torch.rand(64, generator=g, dtype=torch.float64) * 5
    # Ordinary tokens, and tokens the policy has made far rarer than the reference (k3's exp(ref - logp) explodes).
    noise = torch.randn(48, generator=g, dtype=torch.float64) * 0.5
    logp = torch.cat([ref[:48] + noise, ref[48:] - 40]).requires_grad_()
    ours = ops.kl_penalty(logp, ref, estimator)
    theirs = core_algos.kl_penalty(logp.detach(), ref, verl_name)
    torch.testing.assert_close(ours.detach(), theirs)
    ours.sum().backward()
    # k1's gradient is 1; k3's is 1 - r, and r − log r − 1 <= 10 keeps r below 13.
    assert torch.isfinite(logp.grad).all() and logp.grad.abs().max() <= 13
    if estimator == "k3":
        assert (ours >= 0).all() and float(ours.max()) == 10.0 and (logp.grad[48:] == 0).all()
        unclamped = torch.exp(ref[48:] - logp.detach()[48:])  # what an unclamped k3 would have given
        assert unclamped.min() > 1e15
    with pytest.raises(ValueError, match="estimator must be one of"):
        ops.kl_penalty(logp, ref, "k2")
