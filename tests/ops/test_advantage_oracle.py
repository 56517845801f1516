"""GRPO, GiGPO and GAGPO against a per-row loop oracle written from the equations (docs/algorithms.md),
on batches with uneven group sizes, uneven trajectory lengths, dense float rewards and rows in any order."""

import math
import random
from collections import defaultdict

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from pyagentrl import ops

EPS = 1e-6


def _batch(seed: int) -> dict[str, torch.Tensor]:
    rng = random.Random(seed)
    rows: list[tuple[int, int, int, int, float]] = []  # group, traj, step, anchor, reward
    traj = 0
    for group in range(rng.randint(1, 4)):
        for _ in range(rng.randint(1, 6)):  # rollouts per group vary
            for step in range(rng.randint(1, 8)):
                anchor = rng.randint(0, 3) if rng.random() < 0.6 else 1000 + len(rows)  # shared or own state
                reward = rng.choice([0.0, 1.0, 10.0, rng.uniform(-2, 2)])
                rows.append((group, traj, step, anchor, reward))
            traj += 1
    rng.shuffle(rows)
    g, t, s, a, r = zip(*rows, strict=True)
    return {
        "group": torch.tensor(g),
        "traj": torch.tensor(t),
        "step": torch.tensor(s),
        "anchor": torch.tensor(a),
        "reward": torch.tensor(r, dtype=torch.float64),
    }


def _normalized(values: list[float], scale: bool, weights: list[float] | None = None) -> list[float]:
    """(x − μ) / (σ + ε) of one group, σ unbiased; all-equal groups and groups of one give 0."""
    if len(values) < 2 or len(set(values)) == 1:
        return [0.0] * len(values)
    w = weights or [1.0] * len(values)
    mass = sum(w)
    mean = sum(wi * x for wi, x in zip(w, values, strict=True)) / mass
    if not scale:
        return [x - mean for x in values]
    count = round(mass)  # rows, or trajectories when each trajectory's rows weigh 1 in all
    var = sum(wi * (x - mean) ** 2 for wi, x in zip(w, values, strict=True)) / mass
    var *= count / (count - 1) if count > 1 else 1.0  # Bessel's correction; none for a lone trajectory
    return [(x - mean) / (math.sqrt(var) + EPS) for x in values]


def _by_key(keys: list, values: list[float], scale: bool, weights: list[float] | None = None) -> list[float]:
    members: dict = defaultdict(list)
    for i, k in enumerate(keys):
        members[k].append(i)
    out = [0.0] * len(values)
    for rows in members.values():
        w = None if weights is None else [weights[i] for i in rows]
        for i, v in zip(rows, _normalized([values[i] for i in rows], scale, w), strict=True):
            out[i] = v
    return out


def _returns(b: dict[str, torch.Tensor], gamma: float) -> list[float]:
    """G_t = r_t + γ G_{t+1} (GiGPO Eq. 5), walking each trajectory backwards."""
    steps: dict[int, list[int]] = defaultdict(list)
    for i, t in enumerate(b["traj"].tolist()):
        steps[t].append(i)
    out = [0.0] * len(b["traj"])
    for rows in steps.values():
        running = 0.0
        for i in sorted(rows, key=lambda i: -int(b["step"][i])):
            running = float(b["reward"][i]) + gamma * running
            out[i] = running
    return out


def _episode_oracle(b: dict[str, torch.Tensor], scale: bool) -> list[float]:
    """A^E: one score per trajectory (its return), normalised over the trajectories of the group (Eq. 3)."""
    score = defaultdict(float)
    group_of = {}
    for t, g, r in zip(b["traj"].tolist(), b["group"].tolist(), b["reward"].tolist(), strict=True):
        score[t] += r
        group_of[t] = g
    trajs = sorted(score)
    adv = dict(zip(trajs, _by_key([group_of[t] for t in trajs], [score[t] for t in trajs], scale), strict=True))
    return [adv[t] for t in b["traj"].tolist()]


def _episode_scores(b: dict[str, torch.Tensor]) -> torch.Tensor:
    totals = torch.zeros(int(b["traj"].max()) + 1, dtype=torch.float64).index_add_(0, b["traj"], b["reward"])
    return totals[b["traj"]]


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 2**31 - 1), st.sampled_from(["mean_std_norm", "mean_norm"]))
def test_grpo_and_gigpo_match_the_loop_oracle(seed, norm):
    b = _batch(seed)
    scale = norm == "mean_std_norm"
    episode = _episode_oracle(b, scale)
    grpo = ops.grpo_advantage(_episode_scores(b), group_ids=b["group"], traj_ids=b["traj"], norm=norm)
    torch.testing.assert_close(grpo, torch.tensor(episode, dtype=torch.float64), rtol=1e-9, atol=1e-9)

    g = _returns(b, 0.9)
    step = _by_key(list(zip(b["group"].tolist(), b["anchor"].tolist(), strict=True)), g, scale)  # Eq. 6, 7
    want = [e + 0.5 * s for e, s in zip(episode, step, strict=True)]  # Eq. 8
    returns = ops.discounted_returns(b["reward"], traj_ids=b["traj"], step_ids=b["step"], gamma=0.9)
    got = ops.gigpo_advantage(
        _episode_scores(b),
        returns,
        group_ids=b["group"],
        anchor_ids=b["anchor"],
        traj_ids=b["traj"],
        step_weight=0.5,
        norm=norm,
    )
    torch.testing.assert_close(got, torch.tensor(want, dtype=torch.float64), rtol=1e-9, atol=1e-9)


@settings(max_examples=60, deadline=None)
@given(
    st.integers(0, 2**31 - 1),
    st.floats(0.0, 1.0),
    st.sampled_from(["mean_std_norm", "mean_norm"]),
    st.sampled_from(["rows", "trajectories"]),
)
def test_gagpo_matches_the_loop_oracle(seed, lam, norm, norm_over):
    b = _batch(seed)
    gamma = 0.9
    g = _returns(b, gamma)
    state = list(zip(b["group"].tolist(), b["anchor"].tolist(), strict=True))
    visits: dict = defaultdict(list)
    for k, ret in zip(state, g, strict=True):
        visits[k].append(ret)
    value = [sum(visits[k]) / len(visits[k]) for k in state]  # V̂(s): mean G over the group's visits of s
    rows_of: dict[int, list[int]] = defaultdict(list)
    for i, t in enumerate(b["traj"].tolist()):
        rows_of[t].append(i)
    adv = [0.0] * len(g)
    for rows in rows_of.values():
        running, next_value = 0.0, 0.0  # V̂(terminal) = 0
        for i in sorted(rows, key=lambda i: -int(b["step"][i])):
            delta = float(b["reward"][i]) + gamma * next_value - value[i]
            running = delta + gamma * lam * running
            adv[i], next_value = running, value[i]
    weights = None
    if norm_over == "trajectories":
        weights = [1.0 / len(rows_of[t]) for t in b["traj"].tolist()]
    want = _by_key(b["group"].tolist(), adv, norm == "mean_std_norm", weights)
    got = ops.gagpo_advantage(
        b["reward"],
        group_ids=b["group"],
        traj_ids=b["traj"],
        step_ids=b["step"],
        anchor_ids=b["anchor"],
        gamma=gamma,
        lam=lam,
        norm=norm,
        norm_over=norm_over,
    )
    torch.testing.assert_close(got, torch.tensor(want, dtype=torch.float64), rtol=1e-9, atol=1e-9)


def test_trajectories_weigh_equally_with_norm_over_trajectories():
    # One long losing trajectory (4 rows) and one short winning one (1 row): pooled rows put the mean near the
    # long one's values; per-trajectory weights put it halfway, so the two trajectories get opposite signs.
    r = torch.tensor([0.0, 0.0, 0.0, -1.0, 1.0], dtype=torch.float64)
    groups, trajs = torch.zeros(5, dtype=torch.int64), torch.tensor([0, 0, 0, 0, 1])
    steps, anchors = torch.tensor([0, 1, 2, 3, 0]), torch.tensor([1, 2, 3, 4, 5])
    out = ops.gagpo_advantage(
        r,
        group_ids=groups,
        traj_ids=trajs,
        step_ids=steps,
        anchor_ids=anchors,
        gamma=1.0,
        lam=0.0,
        norm="mean_norm",
        norm_over="trajectories",
    )
    assert out[:4].mul(0.25).sum().item() == pytest.approx(-out[4].item())
