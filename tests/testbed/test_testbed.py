"""The credit-assignment testbed: its policy gradient against an exact one by enumeration, its anchors against the
true state, noise that leaves the state alone, learning by every arm, bad specs and resuming."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from testkit.envs import need
from testkit.peers import require_embedding_model

from pyagentrl.envs.frozenlake import FrozenLakeEnv
from pyagentrl.hashing import StateKeyer
from pyagentrl.ops import StepBatch
from pyagentrl.ops.estimators import LossConfig
from pyagentrl.testbed import NoisyObservations, RunSettings, SpecError, TaskSpec, parse_arm, parse_spec, train_run
from pyagentrl.testbed.arms import all_arm_names
from pyagentrl.testbed.loop import TASK_SEED_BASE, anchor_quality, make_envs, policy_loss, rollout
from pyagentrl.testbed.tables import StateTable

need("gymnasium")  # skip without it, except under CI, where it must be installed

# A 2x2 lake of ice, start and goal drawn by the seed, two moves: every trajectory can be listed.
TINY = TaskSpec("tiny", "frozenlake", {"size": 2, "p_frozen": 1.0, "random_start_goal": True, "max_steps": 2}, pool=1)
# A 3x3 lake of ice with slack in the step limit: every arm learns it (a limit of exactly the longest shortest path
# lets a policy turn deterministic on a wrong route before it first wins, and then nothing recovers it).
SMALL = TaskSpec("small", "frozenlake", {"size": 3, "p_frozen": 1.0, "random_start_goal": True, "max_steps": 8}, pool=4)


def _random_logits(policy: StateTable, states: list[str], rng: np.random.Generator) -> None:
    rows = policy.index(states)
    with torch.no_grad():
        policy.values[rows] = torch.from_numpy(1.5 * rng.normal(size=(len(states), policy.width)))


def _exact_gradient(policy: StateTable, actions: tuple[str, ...]) -> dict[str, np.ndarray]:
    """∇J = Σ_τ P(τ) R(τ) Σ_t (onehot(a_t) − π(s_t)), every trajectory of TINY enumerated from copies of the game."""
    grads: dict[str, np.ndarray] = {}

    def walk(env: FrozenLakeEnv, state: str, prob: float, visits: list[tuple[str, int]]) -> None:
        pi = torch.softmax(policy.rows(policy.index([state]))[0].detach(), -1).numpy()
        for a, name in enumerate(actions):
            game = copy.deepcopy(env)
            result = game.step(f"<action>{name}</action>")
            path = [*visits, (state, a)]
            if result.done:
                for s, taken in path:
                    p = torch.softmax(policy.rows(policy.index([s]))[0].detach(), -1).numpy()
                    grads.setdefault(s, np.zeros(len(actions)))
                    grads[s] += prob * pi[a] * result.reward * (np.eye(len(actions))[taken] - p)
            else:
                walk(game, result.anchor, prob * pi[a], path)

    env = FrozenLakeEnv(**TINY.config)
    first = env.reset(TASK_SEED_BASE)
    walk(env, first.anchor, 1.0, [])
    return grads


def test_the_policy_gradient_matches_the_exact_gradient_by_enumeration() -> None:
    episodes_wanted = 128 * 64
    envs = make_envs(TINY, episodes_wanted, "none", seed=0)
    actions = envs[0].reset(TASK_SEED_BASE).admissible_actions
    policy = StateTable(len(actions))
    probe = FrozenLakeEnv(**TINY.config)
    states = [probe.reset(TASK_SEED_BASE).anchor]
    for name in actions:  # every state two moves can be taken from
        game = copy.deepcopy(probe)
        states.append(game.step(f"<action>{name}</action>").anchor)
    _random_logits(policy, sorted(set(states)), np.random.default_rng(5))
    exact = _exact_gradient(policy, actions)

    episodes = rollout(envs, np.array([TASK_SEED_BASE]), episodes_wanted, policy, actions, np.random.default_rng(1))
    rows = policy.index(episodes.states)
    returns = torch.tensor(episodes.scores, dtype=torch.float64)[torch.tensor(episodes.traj_ids)]
    loss, _ = policy_loss(policy, rows, torch.tensor(episodes.actions), returns, None, LossConfig())
    loss.backward()
    assert policy.values.grad is not None
    # The loss is a mean over rows: −(R/E)·grad is the REINFORCE estimate (1/E) Σ_e R_e Σ_t ∇log π.
    estimate = -policy.values.grad.numpy()[: len(policy)] * len(rows) / episodes_wanted
    # Per-episode terms, built here without the loss, give the standard error of that mean.
    terms = np.zeros((episodes_wanted, len(policy), len(actions)))
    probs = torch.softmax(policy.values.detach(), -1).numpy()
    for row, a, traj, ret in zip(rows.tolist(), episodes.actions, episodes.traj_ids, returns.tolist(), strict=True):
        terms[traj, row] += ret * (np.eye(len(actions))[a] - probs[row])
    np.testing.assert_allclose(estimate, terms.mean(0), atol=1e-12)
    standard_error = terms.std(0) / np.sqrt(episodes_wanted)
    for state, grad in exact.items():
        row = int(policy.index([state])[0])
        assert np.all(np.abs(estimate[row] - grad) <= 4 * standard_error[row] + 1e-9), (state, estimate[row], grad)
    assert max(np.abs(g).max() for g in exact.values()) > 0.01  # the check is not vacuous


def test_exact_keys_without_noise_give_the_true_state_groups() -> None:
    envs = make_envs(SMALL, 32, "none", seed=0)
    actions = envs[0].reset(TASK_SEED_BASE).admissible_actions
    episodes = rollout(
        envs, TASK_SEED_BASE + np.arange(4), 8, StateTable(len(actions)), actions, np.random.default_rng(0)
    )
    group = np.asarray(episodes.group_ids)

    def batch(anchor_ids: np.ndarray) -> StepBatch:
        traj = torch.tensor(episodes.traj_ids)
        scores = torch.tensor(episodes.scores)[traj]
        return StepBatch(
            torch.tensor(episodes.rewards),
            scores,
            torch.from_numpy(group),
            traj,
            torch.tensor(episodes.step_ids),
            torch.from_numpy(anchor_ids),
        )

    # The oracle, built without hashing: (task group, the player's cell), the whole state of a lake of a task group.
    truth: dict[tuple[int, int], int] = {}
    cells = [state.replace("\n", " ").split(" ").index("P") for state in episodes.states]
    oracle = np.array([truth.setdefault((g, c), len(truth)) for g, c in zip(group.tolist(), cells, strict=True)])
    exact = StateKeyer(mode="exact").assign(episodes.texts, group)
    a, b = batch(exact).state_ids.numpy(), batch(oracle).state_ids.numpy()
    # The same partition of the rows: a one-to-one map between the two id sets.
    assert len(set(zip(a.tolist(), b.tolist(), strict=True))) == len(set(a.tolist())) == len(set(b.tolist()))
    assert anchor_quality(exact, oracle, group) == {**anchor_quality(oracle, oracle, group), "purity": 1.0}


@pytest.mark.parametrize("level", ["low", "high"])
def test_noise_changes_the_text_and_never_the_state(level: str) -> None:
    clean, noisy = (
        FrozenLakeEnv(size=4, random_start_goal=True),
        NoisyObservations(FrozenLakeEnv(size=4, random_start_goal=True), level, seed=5),
    )
    a, b = clean.reset(7), noisy.reset(7)
    texts = set()
    for move in ["up", "left", "down", "right", "right", "up"]:
        assert b.info["state"] == a.anchor and b.anchor != a.anchor and a.anchor in b.anchor
        assert b.reward == a.reward and b.done == a.done
        texts.add(b.anchor)
        if a.done:
            break
        a, b = clean.step(f"<action>{move}</action>"), noisy.step(f"<action>{move}</action>")
    assert len(texts) > 1
    with pytest.raises(ValueError, match="unknown noise level 'loud'"):
        NoisyObservations(clean, "loud", seed=0)


def test_high_noise_shuffles_the_lines_of_a_text_observation_and_keeps_them() -> None:
    from pyagentrl.testbed.noise import FLAVOUR

    noisy = NoisyObservations(FrozenLakeEnv(), "high", seed=1)
    text = "You see a drawer 1.\nYou see a mug 2.\nYou see a table 3.\nYou see a lamp 4."
    orders = set()
    for turn in range(20):
        turn_line, flavour, *body = noisy._noisy(text, turn).split("\n")
        assert turn_line == f"Turn {turn}." and flavour in FLAVOUR and sorted(body) == sorted(text.split("\n"))
        orders.add(tuple(body))
    assert len(orders) > 1
    grid = "_ P\n_ G"
    assert noisy._noisy(grid, 0).split("\n")[2:] == grid.split("\n")  # a grid keeps its rows in order


def test_noise_splits_exact_groups_and_the_oracle_does_not_move() -> None:
    grouped = {}
    for level in ("none", "low", "high"):
        record = train_run(SMALL, parse_arm("gigpo-exact"), level, 0, RunSettings(iterations=2, groups=4, group_size=8))
        grouped[level] = np.mean(record["grouped"])
        assert np.mean(record["purity"]) == 1.0  # exact keys never merge two states
    assert grouped["none"] > grouped["low"] > grouped["high"]
    oracle = [
        train_run(SMALL, parse_arm("gigpo-oracle"), level, 0, RunSettings(iterations=3)) for level in ("none", "high")
    ]
    assert oracle[0]["success"] == oracle[1]["success"]  # the policy and the oracle read the state, not the text


def test_anchor_quality_on_a_hand_example() -> None:
    # Task group 0: anchor 0 merges true states 0, 0, 1; anchor 1 is one row. Task group 1: anchor 0 again (another
    # group, so another anchor group) holds true state 0 twice, which is not the true state 0 of task group 0.
    groups = np.array([0, 0, 0, 0, 1, 1])
    quality = anchor_quality(np.array([0, 0, 0, 1, 0, 0]), np.array([0, 0, 1, 3, 0, 0]), groups)
    assert quality["purity"] == pytest.approx(4 / 5)
    assert quality["grouped"] == pytest.approx(5 / 6)
    assert quality["oracle_grouped"] == pytest.approx(4 / 6)
    # One anchor for a whole task group (pooled) is as impure as its states are many, whatever other groups hold.
    pooled = anchor_quality(np.zeros(6, dtype=np.int64), np.array([0, 1, 2, 3, 0, 0]), groups)
    assert pooled["purity"] == pytest.approx((1 + 2) / 6) and pooled["grouped"] == 1.0


def test_runs_are_exact_repeats() -> None:
    arm = parse_arm("gagpo-minhash")
    from pyagentrl.testbed.loop import keyer_for

    first, second = (
        train_run(SMALL, arm, "high", 3, RunSettings(iterations=3), keyer_for("minhash", {})) for _ in range(2)
    )
    first.pop("seconds"), second.pop("seconds")
    assert first == second


@pytest.mark.parametrize("arm", all_arm_names())
def test_every_arm_learns_a_trivially_learnable_task(arm: str) -> None:
    from pyagentrl.testbed.loop import keyer_for

    parsed = parse_arm(arm)
    if parsed.anchors == "embedding":
        require_embedding_model()
    options = {"device": "cpu"} if parsed.anchors == "embedding" else {}
    keyer = keyer_for(parsed.anchors, options) if parsed.reads_text else None  # type: ignore[arg-type]
    for seed in (0, 1):
        record = train_run(SMALL, parsed, "none", seed, RunSettings(iterations=15, groups=4, group_size=8), keyer)
        untrained, trained = record["success"][0], np.mean(record["success"][-3:])  # iteration 0: the uniform policy
        assert untrained < 0.6 and trained >= 0.9, (seed, record["success"])


SPEC = {
    "name": "t",
    "seeds": 1,
    "settings": {"iterations": 2, "groups": 2, "group_size": 4},
    "tasks": {"small": {"env": "frozenlake", "config": dict(SMALL.config), "pool": 2}},
    "arms": ["grpo", "gigpo-exact"],
    "noise": {"levels": ["low"], "arms": ["gigpo-exact"]},
    "baselines": {"blind_length": 2, "selection_tasks": 4},
}


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"arms": ["grpo", "gigpo-fuzzy"]}, "arms: unknown arm 'gigpo-fuzzy'"),
        ({"anchors": {"fuzzy": {}}}, "anchors: unknown key 'fuzzy'"),
        ({"anchors": {"minhash": {"threshold": 2}}}, "anchors.minhash: "),
        ({"tasks": {"x": {"env": "chess"}}}, "tasks.x: unknown env name 'chess'"),
        ({"tasks": {"x": {"env": "frozenlake", "config": {"slippery": True}}}}, "tasks.x: .*anchor_is_state is False"),
        ({"noise": {"levels": ["loud"], "arms": ["gigpo-exact"]}}, "noise.levels: unknown noise level 'loud'"),
        ({"noise": {"levels": ["low"], "arms": ["grpo"]}}, "noise.arms: grpo does not read the observation text"),
        ({"settings": {"lr_warmup": 2}}, "settings: unknown key 'lr_warmup'"),
        ({"seeds": 0}, "seeds must be an integer >= 1"),
        ({"colour": "red"}, "the spec: unknown key 'colour'"),
        ({"settings": {"lr": "100"}}, "settings.lr must be a finite number, got '100'"),
        ({"settings": {"groups": 0}}, "settings.groups must be an integer >= 1"),
        ({"settings": {"gamma": 1.5}}, "settings: gamma"),
        ({"settings": {"clip": 1.0}}, "settings: clip_low must be < 1"),
        ({"noise": {"levels": ["low"]}}, "noise needs both levels"),
        ({"noise": {"levels": "low", "arms": ["gigpo-exact"]}}, "noise.levels must be a list of distinct levels"),
        ({"tasks": {"../x": {"env": "frozenlake"}}}, "tasks: a task name names its record files"),
        ({"tasks": {"x": {"env": "frozenlake", "pool": 0}}}, "tasks.x.pool must be an integer >= 1"),
        # Issue 51: YAML reads `5:` as an int key and `[[low]]` as a list; each is one line, not a TypeError.
        ({"tasks": {5: {"env": "frozenlake"}}}, "^tasks: a task name names its record files: .*got 5$"),
        ({"noise": {"levels": [["low"]], "arms": ["gigpo-exact"]}}, r"^noise.levels must be a list of distinct levels"),
        ({"tasks": {"x": {"env": "frozenlake", "config": {"bogus": 1}}}}, "^tasks.x.config.bogus: unknown option of"),
        (
            {"tasks": {"x": {"env": "frozenlake", "config": {"size": "4"}}}},
            "^tasks.x.config.size: must be int, got '4'",
        ),
    ],
)
def test_a_bad_spec_names_its_key(change: dict, message: str) -> None:
    with pytest.raises(SpecError, match=message):
        parse_spec({**SPEC, **change})


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pyagentrl", "testbed", *args], capture_output=True, text=True, cwd=cwd, check=False
    )


def test_the_command_refuses_a_bad_spec_in_one_line(tmp_path: Path) -> None:
    import yaml

    spec = tmp_path / "bad.yaml"
    spec.write_text(yaml.safe_dump({**SPEC, "arms": ["grpo", "gigpo-fuzzy"]}))
    result = _cli(str(spec), cwd=tmp_path)
    assert result.returncode == 2 and not (tmp_path / "runs").exists() and "Traceback" not in result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("pyagentrl testbed:")]
    assert len(errors) == 1 and "arms: unknown arm 'gigpo-fuzzy'" in errors[0]
    spec.write_text("name: [unclosed")
    result = _cli(str(spec), cwd=tmp_path)
    assert result.returncode == 2 and "not valid YAML" in result.stderr and "Traceback" not in result.stderr


def test_a_killed_study_resumes_without_redoing_finished_seeds(tmp_path: Path) -> None:
    from pyagentrl.testbed.report import write_report
    from pyagentrl.testbed.study import StudyError, read_records, run_study

    out = tmp_path / "study"
    logs: list[str] = []
    run_study(parse_spec(SPEC), out, workers=1, log=logs.append)
    assert "0 of 3 runs recorded; 3 to go on 1 workers" in logs
    records = out / "records" / "small.jsonl"
    first = records.read_text().splitlines()
    assert len(first) == 3
    torn = json.loads(first[-1])
    records.write_text("\n".join(first[:-1]) + "\n" + first[-1][: len(first[-1]) // 2])  # killed while writing
    assert len(read_records(out, "small")) == 2 and records.read_text().endswith("\n")  # the torn line is gone
    logs.clear()
    run_study(parse_spec({**SPEC, "seeds": 2}), out, workers=1, log=logs.append)
    assert "2 of 6 runs recorded; 4 to go on 1 workers" in logs  # the torn run and seed 1's three
    kept = read_records(out, "small")
    keys = [(r["seed"], r["arm"], r["noise"]) for r in kept]
    assert len(kept) == 6 and len(set(keys)) == 6
    redone = next(r for r in kept if (r["seed"], r["arm"], r["noise"]) == (torn["seed"], torn["arm"], torn["noise"]))
    assert {**redone, "seconds": 0} == {**torn, "seconds": 0}  # an exact repeat
    readme = write_report(parse_spec({**SPEC, "seeds": 2}), out, "pyagentrl testbed spec.yaml")
    text = readme.read_text()
    assert "| `gigpo-exact` |" in text and "### Noise: low" in text and (out / "small.png").is_file()
    # A report of a smaller spec shows only its own runs.
    assert "1 seeds per arm" in write_report(parse_spec(SPEC), out, "x").read_text()
    # Records made with other settings are never mixed with new ones.
    with pytest.raises(StudyError, match="other settings"):
        run_study(parse_spec({**SPEC, "settings": {**SPEC["settings"], "lr": 10}}), out, workers=1, log=logs.append)


def test_report_statistics_on_hand_examples() -> None:
    from pyagentrl.testbed.report import _paired, budget_end, episodes_to, smooth, success_at

    curve = [0.0, 0.2, 0.4, 0.6, 0.8, 1.0, 1.0, 1.0]
    np.testing.assert_allclose(smooth(curve, 2), [0.0, 0.1, 0.3, 0.5, 0.7, 0.9, 1.0, 1.0])
    assert budget_end(50, 0.25) == 13 and budget_end(50, 0.5) == 25 and budget_end(8, 1.0) == 8
    assert success_at(curve, 1.0) == pytest.approx(np.mean([0.6, 0.8, 1.0, 1.0, 1.0]))
    # Whole windows of 5 only: iterations 1-5 average 0.4, 2-6 0.6, 3-7 0.76, 4-8 0.88.
    assert episodes_to(curve, 0.5, 10) == 60 and episodes_to(curve, 0.8, 10) == 80
    assert episodes_to(curve, 0.95, 10) is None and episodes_to([1.0] * 3, 0.5, 10) is None
    a = {0: {"success": [0.5] * 5}, 1: {"success": [0.7] * 5}, 2: {"success": [0.6] * 5}}
    b = {0: {"success": [0.4] * 5}, 1: {"success": [0.5] * 5}, 2: {"success": [0.6] * 5}, 3: {"success": [0.0] * 5}}
    # Differences 0.1, 0.2, 0.0 on the shared seeds: mean 0.1, sd 0.1, t(2) = 4.303, half-width 0.248.
    assert _paired(a, b) == "+10 [-15, +35]"


def test_the_critic_moves_each_state_value_towards_its_mean_return() -> None:
    from pyagentrl.testbed.loop import _critic_advantages

    # Two trajectories: A then B (reward 1 at the end), and A alone (reward 0); γ = 0.5, λ = 1: returns 0.5, 1, 0.
    batch = StepBatch(
        torch.tensor([0.0, 1.0, 0.0], dtype=torch.float64),
        torch.tensor([1.0, 1.0, 0.0], dtype=torch.float64),
        torch.tensor([0, 0, 0]),
        torch.tensor([0, 0, 1]),
        torch.tensor([0, 1, 0]),
        torch.tensor([0, 1, 0]),
    )
    values = StateTable(1)
    rows = values.index(["A", "B", "A"])
    settings = RunSettings(gamma=0.5, lam=1.0, value_lr=0.5)
    advantages = _critic_advantages(batch, values, rows, settings)
    # V = 0 before: the advantages are the returns, normalised over the batch.
    expected = torch.tensor([0.5, 1.0, 0.0], dtype=torch.float64)
    torch.testing.assert_close(advantages, (expected - expected.mean()) / (expected.std() + 1e-6))
    # V(A) moves half way to mean(0.5, 0) = 0.25, V(B) half way to 1.
    torch.testing.assert_close(values.values[:2, 0].detach(), torch.tensor([0.125, 0.5], dtype=torch.float64))
