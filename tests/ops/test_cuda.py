"""The CUDA kernels (csrc/cuda) against the CPU kernels on fresh random batches of uneven groups and lengths:
equal within the stated tolerance, bitwise equal run to run, every output element written, the loss's gradient
checked by finite differences, bad input refused, and the advantage path captured in a CUDA graph (no host round
trip inside an op). Skipped on machines without a GPU; benchmarks/device_check.sh runs them on one.

Tolerances: both kernels accumulate in float64 but in different orders (a loop on the CPU, lane-strided sums and
a fixed tree on the GPU), so float64 results agree to ~1e-15 relative (tested at 1e-12) and float32 results, rounded
from those, to within one float32 ulp (tested at 2.5e-7 relative). Ids, counts and factorisations are exact.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

from pyagentrl import ops
from pyagentrl.ops import StepBatch, get_adv_estimator
from pyagentrl.ops._library import has_kernel
from pyagentrl.ops.estimators import AdvantageConfig
from pyagentrl.synthetic import make_step_batch

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

P = torch.ops.pyagentrl
OPS = ("grouped_stats", "group_normalize", "factorize_pairs", "trajectory_gae", "per_action_clipped_loss")
DTYPES = [torch.float32, torch.float64]


def _tol(dtype: torch.dtype) -> dict[str, float]:
    return {"rtol": 2.5e-7, "atol": 1e-7} if dtype == torch.float32 else {"rtol": 1e-12, "atol": 1e-12}


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def uneven_groups(n: int, num_groups: int, seed: int) -> torch.Tensor:
    """Group ids with a skewed size distribution: one group holds a third of the rows, many are singletons,
    some ids in [0, num_groups) are never used, and the rows come shuffled."""
    gen = _gen(seed)
    big = torch.zeros(n // 3, dtype=torch.int64)
    singles = torch.arange(1, 1 + min(n // 6, num_groups // 4))
    low = 1 + singles.numel()
    rest = torch.randint(low, max(low + 1, num_groups - 3), (n - big.numel() - singles.numel(),), generator=gen)
    ids = torch.cat([big, singles, rest])
    return ids[torch.randperm(n, generator=gen)]


def grouped_values(ids: torch.Tensor, dtype: torch.dtype, seed: int) -> torch.Tensor:
    """Random values, with every fifth group set to one constant (an all-equal group must normalise to 0)."""
    x = (torch.randn(ids.numel(), generator=_gen(seed), dtype=torch.float64) * 3 + 1).to(dtype)
    constant = ids % 5 == 2
    x[constant] = (ids[constant].to(dtype) * 0.37).to(dtype)
    return x


def poison_allocator() -> None:
    """Fills free memory of both pools of the caching allocator with all bits set (NaN in float32 and float64, -1 in
    int64), so an output element a kernel leaves unwritten reads as NaN (the inputs are finite)."""
    torch.cuda.synchronize()
    torch.cuda.empty_cache()  # cached blocks would otherwise keep earlier, valid-looking data
    blocks = [torch.full((256 * 1024 * 1024,), -1, dtype=torch.int32, device="cuda")]  # the large pool (> 1 MiB)
    sizes = (64, 1024, 16 * 1024, 256 * 1024)  # the small pool (<= 1 MiB a block)
    blocks += [torch.full((k,), -1, dtype=torch.int32, device="cuda") for k in sizes for _ in range(32)]
    del blocks


def cuda(*tensors):
    return tuple(t.cuda() if isinstance(t, torch.Tensor) else t for t in tensors)


def assert_all_written(*outputs: torch.Tensor) -> None:
    for out in outputs:
        if out.is_floating_point():
            assert not torch.isnan(out).any(), "an output element was never written"


def test_every_op_has_a_cuda_kernel():
    missing = [op for op in OPS if not has_kernel(op, torch.device("cuda"))]
    assert not missing, f"no CUDA kernel for {missing}: was the extension built with CUDA (PYAGENTRL_WITH_CUDA)?"


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("unbiased", [True, False])
@pytest.mark.parametrize(("n", "num_groups", "seed"), [(1, 1, 0), (37, 12, 1), (5000, 700, 2), (204_800, 30_000, 3)])
def test_grouped_stats_match_cpu(dtype, unbiased, n, num_groups, seed):
    ids = uneven_groups(n, num_groups, seed) if n > 1 else torch.zeros(1, dtype=torch.int64)
    x = grouped_values(ids, dtype, seed)
    want = P.grouped_stats(x, ids, num_groups, unbiased)
    poison_allocator()
    got = P.grouped_stats(*cuda(x, ids), num_groups, unbiased)
    assert_all_written(*got)
    assert torch.equal(got[0].cpu(), want[0])
    torch.testing.assert_close(got[1].cpu(), want[1], **_tol(dtype))
    torch.testing.assert_close(got[2].cpu(), want[2], **_tol(dtype))
    equal_groups = torch.unique(ids[ids % 5 == 2]).cuda()
    assert torch.all(got[2][equal_groups] == 0)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(
    ("scale", "singleton_raw", "eps"), [(True, False, 1e-6), (False, False, 1e-6), (True, True, 0.0)]
)
@pytest.mark.parametrize(("n", "num_groups", "seed"), [(37, 12, 4), (5000, 700, 5), (204_800, 30_000, 6)])
def test_group_normalize_matches_cpu(dtype, scale, singleton_raw, eps, n, num_groups, seed):
    ids = uneven_groups(n, num_groups, seed)
    x = grouped_values(ids, dtype, seed)
    want = P.group_normalize(x, ids, num_groups, scale, True, eps, singleton_raw)
    poison_allocator()
    got = P.group_normalize(*cuda(x, ids), num_groups, scale, True, eps, singleton_raw)
    assert_all_written(got)
    torch.testing.assert_close(got.cpu(), want, **_tol(dtype))
    counts = torch.bincount(ids, minlength=num_groups)
    exact_zero = (ids % 5 == 2) & ~(singleton_raw & (counts[ids] == 1))
    assert torch.all(got.cpu()[exact_zero] == 0), "an all-equal group must normalise to exactly 0"


@pytest.mark.parametrize(("n", "seed"), [(1, 0), (50, 1), (10_000, 2), (204_800, 3)])
def test_factorize_pairs_matches_cpu(n, seed):
    gen = _gen(seed)
    a = torch.randint(0, max(1, n // 50), (n,), generator=gen)
    # Anchor keys are hashes: any int64, negative included, with repeats.
    pool = torch.randint(-(2**62), 2**62, (max(1, n // 4),), generator=gen)
    b = pool[torch.randint(0, pool.numel(), (n,), generator=gen)]
    want_ids, want_count = P.factorize_pairs(a, b)
    got_ids, got_count = P.factorize_pairs(*cuda(a, b))
    assert got_count.device.type == "cuda" and got_count.dim() == 0
    assert torch.equal(got_ids.cpu(), want_ids) and int(got_count) == int(want_count)


def trajectories(num_trajs: int, seed: int, longest: int = 300) -> tuple[torch.Tensor, torch.Tensor]:
    """Shuffled rows of trajectories of 1 to ``longest`` steps (most short, a few long)."""
    gen = _gen(seed)
    lengths = torch.randint(1, 12, (num_trajs,), generator=gen)
    lengths[torch.randint(0, num_trajs, (max(1, num_trajs // 50),), generator=gen)] = longest
    traj = torch.repeat_interleave(torch.arange(num_trajs), lengths)
    step = torch.arange(traj.numel()) - (torch.cumsum(lengths, 0) - lengths)[traj]
    order = torch.randperm(traj.numel(), generator=gen)
    return traj[order], step[order]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("with_values", "gamma", "lam"), [(False, 0.95, 1.0), (True, 0.95, 0.9), (True, 1.0, 0.0)])
@pytest.mark.parametrize(("num_trajs", "seed"), [(1, 0), (40, 1), (20_000, 2)])
def test_trajectory_gae_matches_cpu(dtype, with_values, gamma, lam, num_trajs, seed):
    traj, step = trajectories(num_trajs, seed)
    gen = _gen(seed + 100)
    r = torch.randn(traj.numel(), generator=gen, dtype=torch.float64).to(dtype)
    v = torch.randn(traj.numel(), generator=gen, dtype=torch.float64).to(dtype) if with_values else None
    want = P.trajectory_gae(r, v, traj, step, num_trajs, gamma, lam)
    poison_allocator()
    got = P.trajectory_gae(*cuda(r, v, traj, step), num_trajs, gamma, lam)
    assert_all_written(got)
    torch.testing.assert_close(got.cpu(), want, **_tol(dtype))


def loss_case(rows: int, length: int, seed: int, dtype: torch.dtype, segments: str):
    gen = _gen(seed)
    logp = -torch.rand(rows, length, generator=gen, dtype=torch.float64).to(dtype) * 3
    old = logp + (0.3 * torch.randn(rows, length, generator=gen, dtype=torch.float64)).to(dtype)
    mask = (torch.rand(rows, length, generator=gen) < 0.8).to(dtype)
    mask[:, : length // 4] = 0  # the prompt
    mask[0] = 0  # a row without a response
    mask[1, -1] = 0.5  # a fractional weight
    seg = None
    if segments == "contiguous":  # actions as runs of tokens, as multi-turn rows have them
        seg = torch.sort(torch.randint(0, max(1, length // 40), (rows, length), generator=gen), dim=1).values
    elif segments == "scattered":  # any ids in [0, L): every id may appear anywhere in the row
        seg = torch.randint(0, length, (rows, length), generator=gen)
    adv = torch.randn(rows, length, generator=gen, dtype=torch.float64).to(dtype)
    return logp, old, adv, mask, seg


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("segments", ["none", "contiguous", "scattered"])
@pytest.mark.parametrize(
    ("rows", "length", "seed"),
    [(3, 7, 0), (64, 512, 1), (4, 3072, 2), (4, 3073, 3), (5, 4001, 4), (4200, 3100, 5)],
)
def test_per_action_loss_matches_cpu(dtype, segments, rows, length, seed):
    # With segment ids, rows of up to 3072 tokens keep their sums in shared memory; longer ones in global scratch,
    # 4096 rows at a time (4200 rows: some warps take a second row).
    args = loss_case(rows, length, seed, dtype, segments)
    want = P.per_action_clipped_loss(*args, 0.2, 0.28)
    poison_allocator()
    got = P.per_action_clipped_loss(*cuda(*args), 0.2, 0.28)
    assert_all_written(*got)
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g.cpu(), w, **_tol(dtype))


@pytest.mark.parametrize("seed", range(3))
def test_loss_gradient_by_finite_differences(seed):
    # As tests/ops/test_policy_loss.py on CPU: with one advantage per action, the segment-mean of the GSPO-token
    # loss is the sequence-level GSPO objective, a true function of logp, so gradcheck checks the backward.
    logp, old, _, mask, seg = loss_case(4, 9, seed, torch.float64, "contiguous")
    mask = (mask != 0).double()
    adv = torch.randn(4, 9, generator=_gen(seed + 7), dtype=torch.float64).gather(1, seg)
    logp, old, adv, mask, seg = cuda(logp, old, adv, mask, seg)

    def objective(x):
        return ops.per_action_clipped_loss(x, old, adv, mask, seg, clip_low=0.2, loss_agg_mode="segment-mean").loss

    assert torch.autograd.gradcheck(objective, (logp.clone().requires_grad_(),))


def test_empty_and_degenerate_inputs_match_cpu():
    x, ids = torch.randn(6, dtype=torch.float64), torch.zeros(6, dtype=torch.int64)
    empty_f, empty_i = x[:0], ids[:0]
    traj, step = torch.tensor([0, 0, 2, 2, 2]), torch.tensor([1, 0, 0, 2, 1])
    r = torch.randn(5, dtype=torch.float64)
    logp = -torch.rand(3, 5, dtype=torch.float64)
    calls = [
        lambda c: P.grouped_stats(*c(empty_f, empty_i), 3, True),  # no rows, three empty groups
        lambda c: P.group_normalize(*c(empty_f, empty_i), 0, True, True, 1e-6, False),
        lambda c: P.grouped_stats(*c(x, ids), 1, True),  # one group holds every row
        lambda c: P.group_normalize(*c(x, ids), 1, True, True, 1e-6, False),
        lambda c: P.factorize_pairs(*c(empty_i, empty_i)),
        lambda c: P.trajectory_gae(*c(empty_f, None, empty_i, empty_i), 0, 0.9, 1.0),
        lambda c: P.trajectory_gae(*c(r, r, traj, step), 4, 0.9, 0.8),  # trajectories 1 and 3 have no rows
        lambda c: P.per_action_clipped_loss(*c(logp[:0], logp[:0], logp[:0], logp[:0], None), 0.2, 0.2),
        lambda c: P.per_action_clipped_loss(*c(logp[:, :0], logp[:, :0], logp[:, :0], logp[:, :0], None), 0.2, 0.2),
        lambda c: P.per_action_clipped_loss(*c(logp, logp, logp, torch.zeros_like(logp), None), 0.2, 0.2),  # no action
    ]
    for call in calls:
        want, got = call(lambda *t: t), call(cuda)
        want = want if isinstance(want, tuple) else (want,)
        got = got if isinstance(got, tuple) else (got,)
        for g, w in zip(got, want, strict=True):
            assert g.shape == w.shape and g.dtype == w.dtype
            torch.testing.assert_close(g.cpu(), w, rtol=1e-12, atol=1e-12)


def test_outputs_are_bitwise_equal_run_to_run():
    ids = uneven_groups(204_800, 30_000, 7)
    x = grouped_values(ids, torch.float32, 7).cuda()
    ids = ids.cuda()
    traj, step = cuda(*trajectories(20_000, 7))
    r = torch.randn(traj.numel(), device="cuda")
    loss_args = cuda(*loss_case(256, 512, 7, torch.float32, "contiguous"))
    calls = [
        lambda: P.grouped_stats(x, ids, 30_000, True),
        lambda: P.group_normalize(x, ids, 30_000, True, True, 1e-6, False),
        lambda: P.factorize_pairs(ids // 7, ids % 7),
        lambda: P.trajectory_gae(r, r * 0.5, traj, step, 20_000, 0.95, 0.9),
        lambda: P.per_action_clipped_loss(*loss_args, 0.2, 0.28),
    ]
    for call in calls:
        first, second = call(), call()
        first = first if isinstance(first, tuple) else (first,)
        second = second if isinstance(second, tuple) else (second,)
        assert all(torch.equal(a, b) for a, b in zip(first, second, strict=True))


def batch_on_gpu(batch: StepBatch) -> StepBatch:
    return StepBatch(**{f.name: cuda(getattr(batch, f.name))[0] for f in dataclasses.fields(batch) if f.init})


def captured(fn):
    """fn's outputs as a replayed CUDA graph gives them (warm-up on a side stream, as torch.cuda.graph requires)."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        fn()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        outputs = fn()
    graph.replay()
    torch.cuda.synchronize()
    return outputs


@pytest.mark.parametrize("name", ["grpo", "gigpo", "gagpo"])
def test_estimators_on_cuda_match_cpu(name):
    batch = make_step_batch(64, 8, steps=(2, 40), seed=11)
    on_gpu = batch_on_gpu(batch)
    config = AdvantageConfig()
    estimator = get_adv_estimator(name)
    torch.testing.assert_close(estimator(on_gpu, config).cpu(), estimator(batch, config), rtol=1e-5, atol=1e-6)


def test_bad_input_is_refused_before_any_kernel():
    x = torch.randn(10, device="cuda")
    with pytest.raises(ValueError, match="group_ids has a negative id"):
        ops.grpo_advantage(x, group_ids=torch.full((10,), -1, device="cuda"), traj_ids=torch.arange(10, device="cuda"))
    with pytest.raises(ValueError, match="is on cpu, expected cuda"):
        ops.grpo_advantage(x, group_ids=torch.zeros(10, dtype=torch.int64), traj_ids=torch.arange(10, device="cuda"))
    with pytest.raises(ValueError, match="must be a CUDA tensor"):  # the kernel's own checks, called directly
        P.group_normalize(x, torch.zeros(10, dtype=torch.int64), 1, True, True, 1e-6, False)
    with pytest.raises(TypeError, match="int64"):
        P.trajectory_gae(x, None, torch.zeros(10, dtype=torch.int32, device="cuda"), x.long(), 1, 0.9, 1.0)


def test_advantage_and_loss_path_captures_in_a_cuda_graph():
    # No op synchronises with the host, so the GiGPO advantage (with the number of rows as the bound on the number
    # of anchor groups) and the loss replay from a graph and give the eager results.
    batch = make_step_batch(32, 8, steps=(2, 30), seed=12)
    r, g, traj, step, anchors = cuda(batch.rewards, batch.group_ids, batch.traj_ids, batch.step_ids, batch.anchor_ids)
    n, num_trajs, num_groups = r.numel(), batch.num_trajs, batch.num_groups
    loss_args = cuda(*loss_case(64, 128, 12, torch.float32, "contiguous"))

    def step_fn():
        returns = P.trajectory_gae(r, None, traj, step, num_trajs, 0.95, 1.0)
        episode = P.group_normalize(r, g, num_groups, True, True, 1e-6, False)
        states, _ = P.factorize_pairs(g, anchors)
        advantage = episode + P.group_normalize(returns, states, n, True, True, 1e-6, False)
        return advantage, P.per_action_clipped_loss(*loss_args, 0.2, 0.28)[0]

    eager = step_fn()
    for a, b in zip(captured(step_fn), eager, strict=True):
        assert torch.equal(a, b)


@pytest.mark.parametrize("name", ["grpo", "gigpo", "gagpo"])
def test_registered_estimators_capture_in_a_cuda_graph(name):
    # A StepBatch is validated once, when it is built; the estimators then call the ops unchecked, so nothing in
    # them reads back to the host.
    on_gpu = batch_on_gpu(make_step_batch(32, 8, steps=(2, 30), seed=13))
    estimator, config = get_adv_estimator(name), AdvantageConfig()
    assert torch.equal(captured(lambda: estimator(on_gpu, config)), estimator(on_gpu, config))
