"""Critic-free advantage estimators on the flat layout (one row per environment step):
GRPO (episode level), GiGPO (episode + anchor-state step level) and GAGPO (grouped value proxy + GAE).
Equations: docs/algorithms.md; GiGPO = arXiv 2505.10978, GAGPO = arXiv 2605.13217.
"""

from __future__ import annotations

from typing import Literal

import torch

from pyagentrl.ops import _checks
from pyagentrl.ops._dispatch import run
from pyagentrl.ops.ids import pair_ids
from pyagentrl.ops.returns import check_steps_unless_kernel
from pyagentrl.ops.stats import NormMode, SingletonRule

EpisodeWeighting = Literal["episode", "rows", "inverse_length"]
EPISODE_WEIGHTINGS: tuple[str, ...] = ("episode", "rows", "inverse_length")
Combine = Literal["sum", "blend"]


def check_episode_weighting(weighting: str) -> str:
    """Checks how an episode's rows share its advantage (docs/algorithms.md (E1)–(E3))."""
    if weighting not in EPISODE_WEIGHTINGS:
        raise ValueError(f"episode_weighting must be one of {EPISODE_WEIGHTINGS}, got {weighting!r}")
    return weighting


def check_combine(combine: str, step_weight: float, alpha: float | None) -> None:
    """The two ways of adding GiGPO's levels (docs/algorithms.md (G8), (G10)); a setting the chosen way does not
    read is refused rather than ignored."""
    if combine not in ("sum", "blend"):
        raise ValueError(f"combine must be 'sum' or 'blend', got {combine!r}")
    if combine == "sum" and alpha is not None:
        raise ValueError(f"alpha is the weight of combine='blend' (docs/algorithms.md (G10)), got {alpha} with 'sum'")
    if combine == "blend":
        if alpha is None:
            raise ValueError("alpha: combine='blend' needs alpha in [0, 1] (A = alpha·A^E + (1 − alpha)·A^S)")
        _checks.unit_interval(alpha, "alpha")
        if step_weight != 1.0:
            raise ValueError(
                f"step_weight is the ω of combine='sum' (docs/algorithms.md (G8)); combine='blend' weighs the "
                f"levels by alpha alone: leave step_weight at 1, got {step_weight}"
            )


def grpo_advantage(
    scores: torch.Tensor,
    *,
    group_ids: torch.Tensor,
    traj_ids: torch.Tensor,
    norm: NormMode = "mean_std_norm",
    eps: float = 1e-6,
    unbiased: bool = True,
    singleton: SingletonRule = "zero",
    episode_weighting: EpisodeWeighting = "episode",
) -> torch.Tensor:
    """Episode-level relative advantage A^E_τ = (R_τ − mean_g R) / (std_g R + ε) (GiGPO Eq. 3;
    docs/algorithms.md (E1)), or
    R_τ − mean_g R with ``norm="mean_norm"``, given to every row of τ.

    ``episode_weighting`` sets how the episode's rows share it (docs/algorithms.md (E1)–(E3)):

    - ``"episode"`` (default, (E1)): statistics once per trajectory, whatever its length; under a token-mean loss
      a trajectory of n rows then weighs n times its advantage, so the rows of a group need not sum to 0.
    - ``"rows"`` ((E2), verl-agent's): statistics over the group's step rows, a trajectory counted once per row;
      the rows of each group sum to 0. The singleton rule then applies to a group of one row. The same as
      ``traj_ids=torch.arange(N)``, which also serves single-turn batches (a row is a trajectory).
    - ``"inverse_length"`` ((E3)): (E1)'s value times n̄_g / n_τ (n̄_g: the mean length of the group's
      trajectories), so every trajectory of a group carries the same total weight and the rows sum to 0.

    Args:
        scores: float [N], the episode score R_τ of each row's trajectory (equal on all rows of τ).
        group_ids: int64 [N], the task group (the N rollouts of one task).
        traj_ids: int64 [N], the trajectory of each row; a trajectory is a (group, traj id) pair, so
            ids may restart in every group.
        singleton: "zero" gives a lone trajectory 0; "raw" gives it its raw score (verl).
    """
    x = _checks.float_values(scores, "scores")
    g = _checks.ids(group_ids, "group_ids", x.numel(), x.device)
    t = _checks.ids(traj_ids, "traj_ids", x.numel(), x.device)
    scale = _checks.norm_mode(norm)
    singleton_raw = _checks.singleton_rule(singleton)
    eps = _checks.non_negative(eps, "eps")
    weighting = check_episode_weighting(episode_weighting)
    num_groups = _checks.num_ids(g, "group_ids", None)
    traj, num_trajs = pair_ids(g, t)
    lowest = torch.full((num_trajs,), float("inf"), dtype=x.dtype, device=x.device)
    traj_score = lowest.scatter_reduce(0, traj, x, "amin")
    highest = torch.full_like(traj_score, float("-inf")).scatter_reduce(0, traj, x, "amax")
    if bool((traj_score != highest).any()):
        bad = int((traj_score != highest).nonzero()[0, 0])
        row = int((traj == bad).nonzero()[0, 0])
        raise ValueError(f"scores differ within one trajectory (the one of row {row}); give each row its episode score")
    traj_group = torch.zeros_like(traj_score, dtype=torch.int64).scatter_(0, traj, g)
    return episode_advantage(traj_score, traj_group, traj, num_groups, scale, eps, unbiased, singleton_raw, weighting)


def episode_advantage(
    traj_score: torch.Tensor,
    traj_group: torch.Tensor,
    traj_ids: torch.Tensor,
    num_groups: int,
    scale: bool,
    eps: float,
    unbiased: bool,
    singleton_raw: bool,
    weighting: str = "episode",
) -> torch.Tensor:
    """Unchecked core of :func:`grpo_advantage` (docs/algorithms.md (E1)–(E3)): the trajectories' scores [T]
    normalised within their task groups, given to each row and weighted by ``weighting``. Arguments as validated by
    the public function or a StepBatch (dense trajectory ids)."""
    device = traj_score.device
    if weighting == "rows":  # (E2): each row a member of its group's statistics
        row_group = traj_group[traj_ids]
        row_score = traj_score[traj_ids]
        return run("group_normalize", device, row_score, row_group, num_groups, scale, unbiased, eps, singleton_raw)
    advantage = run("group_normalize", device, traj_score, traj_group, num_groups, scale, unbiased, eps, singleton_raw)
    if weighting == "inverse_length":  # (E3)
        weight = inverse_length_weights(traj_group, traj_ids, num_groups)
        return (advantage.double()[traj_ids] * weight).to(advantage.dtype)
    return advantage[traj_ids]


def inverse_length_weights(traj_group: torch.Tensor, traj_ids: torch.Tensor, num_groups: int) -> torch.Tensor:
    """float64 [R]: w_i = n̄_g / n_τ(i), the mean length of the trajectories of τ(i)'s group over τ(i)'s length
    (docs/algorithms.md (E3)). The rows of every trajectory of group g sum to n̄_g.

    Counts by index_add (no bincount), so nothing reads back to the host (CUDA graphs capture it)."""
    num_trajs = traj_group.numel()
    ones = torch.ones(traj_ids.numel(), dtype=torch.float64, device=traj_ids.device)
    length = torch.zeros(num_trajs, dtype=torch.float64, device=traj_ids.device).index_add_(0, traj_ids, ones)
    group_rows = torch.zeros(num_groups, dtype=torch.float64, device=traj_ids.device).index_add_(0, traj_group, length)
    # Trajectory ids without rows (possible only in an unchecked caller's sparse ids) are not counted.
    group_trajs = torch.zeros_like(group_rows).index_add_(0, traj_group, (length > 0).double())
    mean_length = group_rows / group_trajs.clamp_min(1)
    return (mean_length[traj_group] / length.clamp_min(1))[traj_ids]


def combine_levels(
    episode: torch.Tensor, step: torch.Tensor, combine: str, step_weight: float, alpha: float | None
) -> torch.Tensor:
    """GiGPO's two levels per row: A^E + ω·A^S (``"sum"``, docs/algorithms.md (G8)) or α·A^E + (1 − α)·A^S
    (``"blend"``, (G10)). Unchecked: see :func:`check_combine`."""
    if combine == "blend":
        assert alpha is not None
        return alpha * episode + (1.0 - alpha) * step
    return episode + step_weight * step


def gigpo_advantage(
    episode_scores: torch.Tensor,
    step_returns: torch.Tensor,
    *,
    group_ids: torch.Tensor,
    anchor_ids: torch.Tensor,
    traj_ids: torch.Tensor,
    step_weight: float = 1.0,
    norm: NormMode = "mean_std_norm",
    eps: float = 1e-6,
    unbiased: bool = True,
    episode_singleton: SingletonRule = "zero",
    episode_weighting: EpisodeWeighting = "episode",
    combine: Combine = "sum",
    alpha: float | None = None,
) -> torch.Tensor:
    """GiGPO advantage A_i = A^E_τ(i) + w · A^S_i (GiGPO Eq. 8; docs/algorithms.md (G3)–(G8)), or with
    ``combine="blend"`` A_i = α·A^E_τ(i) + (1 − α)·A^S_i ((G10); ``alpha`` required, ``step_weight`` left at 1).

    A^E is :func:`grpo_advantage` of ``episode_scores``, shared over the rows as ``episode_weighting`` says
    ((E1)–(E3); default once per trajectory). A^S normalises the
    discounted step returns G_i (Eq. 5: ``discounted_returns(rewards, traj_ids=, step_ids=, gamma=)``, where
    the discount γ enters) within anchor-state groups: rows of one task group whose ``anchor_ids`` are
    equal (Eq. 6, 7). A step group of one row gets A^S = 0, and so does an all-equal one.

    Args:
        step_returns: float [N], G_i, of the dtype of ``episode_scores``.
        anchor_ids: int64 [N] state keys (hashes or dense ids, e.g. from pyagentrl.hashing); only
            equality within a task group matters.
        traj_ids: as in :func:`grpo_advantage`.
    """
    weight = _checks.finite(step_weight, "step_weight")
    check_combine(combine, weight, alpha)
    episode = grpo_advantage(
        episode_scores,
        group_ids=group_ids,
        traj_ids=traj_ids,
        norm=norm,
        eps=eps,
        unbiased=unbiased,
        singleton=episode_singleton,
        episode_weighting=episode_weighting,
    )
    returns = _checks.float_values(step_returns, "step_returns")
    if returns.shape != episode.shape:
        raise ValueError(f"step_returns must have {episode.numel()} rows, got shape {tuple(returns.shape)}")
    if returns.dtype != episode.dtype:
        raise TypeError(f"step_returns is {returns.dtype} but episode_scores is {episode.dtype}; give both one dtype")
    _checks.same_device(returns, "step_returns", episode.device)
    anchors = _checks.ids_any_value(anchor_ids, "anchor_ids", returns.numel(), returns.device)
    state_ids, num_states = pair_ids(group_ids, anchors)
    step = step_advantage(returns, state_ids, num_states, norm == "mean_std_norm", eps, unbiased)
    return combine_levels(episode, step, combine, weight, alpha)


def step_advantage(
    step_returns: torch.Tensor, state_ids: torch.Tensor, num_states: int, scale: bool, eps: float, unbiased: bool
) -> torch.Tensor:
    """Unchecked core of GiGPO's step level (docs/algorithms.md (G7)): the returns normalised within anchor-state
    groups (dense (task group, state) ids); a lone or all-equal group gets 0."""
    device = step_returns.device
    return run("group_normalize", device, step_returns, state_ids, num_states, scale, unbiased, eps, False)


NormOver = Literal["rows", "trajectories"]


def gagpo_advantage(
    rewards: torch.Tensor,
    *,
    group_ids: torch.Tensor,
    traj_ids: torch.Tensor,
    step_ids: torch.Tensor,
    anchor_ids: torch.Tensor,
    gamma: float = 0.95,
    lam: float = 0.95,
    norm: NormMode | Literal["none"] = "mean_std_norm",
    norm_over: NormOver = "rows",
    eps: float = 1e-6,
    unbiased: bool = True,
) -> torch.Tensor:
    """GAGPO advantage (arXiv 2605.13217; docs/algorithms.md (V1)–(V6)):

    1. G_t = discounted return of each row (Eq. 5 of GiGPO).
    2. Grouped value proxy V̂(s) = mean of G over the rows of the same task group whose state key is
       s (every visit counts, also repeated visits within one trajectory); V̂(terminal) = 0.
    3. δ_t = r_t + γ V̂(s_{t+1}) − V̂(s_t);  Â_t = δ_t + γλ Â_{t+1}  (see :func:`trajectory_gae`).
    4. A = (Â − μ_g) / (σ_g + ε) within task group g (``norm="mean_norm"``: Â − μ_g; ``"none"``: Â).
       No episode-level term is added.

    Choices the paper leaves open, each an argument: whether μ_g, σ_g pool every step row of the group
    (``norm_over="rows"``, the default) or weigh each trajectory equally (``"trajectories"``: a row of
    a trajectory of n steps weighs 1/n, so long trajectories do not dominate; the unbiased std then
    scales the variance by m/(m − 1) for m ≥ 2 trajectories); ε = 1e-6; unbiased std; γ = 0.95 (the GiGPO
    authors' default); λ = 0.95. At λ = 1, Â_t = G_t − V̂(s_t); at λ = 0, Â_t = δ_t.

    Truncated trajectories: V after the last row is 0, so put a bootstrap value in the last reward.

    Args:
        traj_ids: int64 [N] dense trajectory ids, each within one task group; step_ids: 0..n−1 within
            each trajectory.
    """
    r = _checks.float_values(rewards, "rewards")
    n, device = r.numel(), r.device
    anchors = _checks.ids_any_value(anchor_ids, "anchor_ids", n, device)
    g = _checks.ids(group_ids, "group_ids", n, device)
    traj = _checks.ids(traj_ids, "traj_ids", n, device)
    step = _checks.ids(step_ids, "step_ids", n, device)
    _checks.norm_mode(norm, ("mean_std_norm", "mean_norm", "none"))
    if norm_over not in ("rows", "trajectories"):
        raise ValueError(f"norm_over must be 'rows' or 'trajectories', got {norm_over!r}")
    gamma = _checks.unit_interval(gamma, "gamma")
    lam = _checks.unit_interval(lam, "lam")
    eps = _checks.non_negative(eps, "eps")
    num_trajs = _checks.num_ids(traj, "traj_ids", None)
    num_groups = _checks.num_ids(g, "group_ids", None)
    check_steps_unless_kernel(traj, step, num_trajs)
    traj_group = _group_of_each_trajectory(g, traj, num_trajs)
    state_ids, num_states = pair_ids(g, anchors)
    return gae_advantage(
        r, g, traj, step, state_ids, traj_group, num_groups, num_trajs, num_states, gamma, lam, norm, norm_over, eps,
        unbiased,
    )  # fmt: skip


def gae_advantage(
    rewards: torch.Tensor,
    group_ids: torch.Tensor,
    traj_ids: torch.Tensor,
    step_ids: torch.Tensor,
    state_ids: torch.Tensor,
    traj_group: torch.Tensor,
    num_groups: int,
    num_trajs: int,
    num_states: int,
    gamma: float,
    lam: float,
    norm: str,
    norm_over: str,
    eps: float,
    unbiased: bool,
) -> torch.Tensor:
    """Unchecked core of :func:`gagpo_advantage` (docs/algorithms.md (V1)–(V4)), on validated dense ids."""
    device = rewards.device
    returns = run("trajectory_gae", device, rewards, None, traj_ids, step_ids, num_trajs, gamma, 1.0)
    value = run("grouped_stats", device, returns, state_ids, num_states, unbiased)[1][state_ids]
    advantage = run("trajectory_gae", device, rewards, value, traj_ids, step_ids, num_trajs, gamma, lam)
    if norm == "none":
        return advantage
    scale = norm == "mean_std_norm"
    if norm_over == "rows":
        return run("group_normalize", device, advantage, group_ids, num_groups, scale, unbiased, eps, False)
    return _normalize_trajectories_equally(
        advantage, group_ids, traj_ids, traj_group, num_groups, scale=scale, eps=eps, unbiased=unbiased
    )


def _group_of_each_trajectory(group_ids: torch.Tensor, traj_ids: torch.Tensor, num_trajs: int) -> torch.Tensor:
    """The task group of each trajectory id, checking that no trajectory has rows in two groups."""
    traj_group = torch.zeros(num_trajs, dtype=torch.int64, device=group_ids.device)
    traj_group.scatter_(0, traj_ids, group_ids)
    bad = traj_group[traj_ids] != group_ids
    if bool(bad.any()):
        row = int(bad.nonzero()[0, 0])
        traj = int(traj_ids[row])
        a, b = sorted((int(traj_group[traj]), int(group_ids[row])))
        raise ValueError(f"traj_ids: trajectory {traj} has rows in task groups {a} and {b}")
    return traj_group


def _normalize_trajectories_equally(
    x: torch.Tensor,
    group_ids: torch.Tensor,
    traj_ids: torch.Tensor,
    traj_group: torch.Tensor,
    num_groups: int,
    *,
    scale: bool,
    eps: float,
    unbiased: bool,
) -> torch.Tensor:
    """(x − μ_g) / (σ_g + ε) with μ_g, σ_g weighted so that each trajectory of g weighs 1 in all
    (docs/algorithms.md (V4), ``norm_over="trajectories"``)."""
    length = torch.bincount(traj_ids, minlength=traj_group.numel())
    w = 1.0 / length[traj_ids].double()
    xd = x.double()
    mass = torch.zeros(num_groups, dtype=torch.float64, device=x.device).index_add_(0, group_ids, w)
    mean = torch.zeros_like(mass).index_add_(0, group_ids, w * xd) / mass
    centered = xd - mean[group_ids]
    # A group whose values are all equal gets exactly 0, as in group_normalize (whose std is then exactly 0).
    all_equal = run("grouped_stats", x.device, x, group_ids, num_groups, True)[2] == 0
    centered = torch.where(all_equal[group_ids], torch.zeros_like(centered), centered)
    if not scale:
        return centered.to(x.dtype)
    variance = torch.zeros_like(mass).index_add_(0, group_ids, w * centered**2) / mass
    if unbiased:
        # Bessel's correction over the m trajectories of the group (none for a lone trajectory).
        m = torch.bincount(traj_group[length > 0], minlength=num_groups).double()
        variance = variance * m / (m - 1).clamp_min(1)
    std = variance.sqrt()
    return (centered / (std[group_ids] + eps)).to(x.dtype)


def broadcast_to_tokens(row_values: torch.Tensor, response_mask: torch.Tensor) -> torch.Tensor:
    """Gives each response token of row i the value of row i: out[i, j] = v_i · mask[i, j]."""
    v = _checks.float_values(row_values, "row_values")
    mask = _checks.tensor(response_mask, "response_mask")
    if mask.dim() != 2 or mask.shape[0] != v.numel():
        raise ValueError(f"response_mask must be [{v.numel()}, L], got shape {tuple(mask.shape)}")
    _checks.same_device(mask, "response_mask", v.device)
    _checks.finite_mask(mask, "response_mask")
    return v[:, None] * mask.to(v.dtype)
