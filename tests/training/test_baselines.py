"""`pyagentrl baselines`: each baseline against a reference computed another way (exact enumeration of a random
mover's outcomes, maps read from gymnasium's own generator, a scripted policy replayed by hand), the refusal of a
blind sequence chosen on the tasks it is scored on, and the study report that renders them."""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from testkit.envs import need
from testkit.training import TINY

from pyagentrl.cli import main as cli_main
from pyagentrl.envs import env_factory
from pyagentrl.rollout import Generation, RolloutEngine, SamplingConfig, make_engine
from pyagentrl.training.baselines import blind_sequence, compute_baselines, format_table, random_mover, untrained_policy
from pyagentrl.training.config import TrainConfig, load_config
from pyagentrl.training.evaluate import score_policy
from pyagentrl.training.seeding import held_out_seeds
from pyagentrl.training.stats import wilson_interval

need("gymnasium")


def _config(*overrides: str) -> TrainConfig:
    return load_config(TINY, ["env.backend=serial", *overrides])


def _exact_win_probability(options: dict, task: int) -> float:
    """Every sequence of moves over the whole episode, each replayed from a fresh reset: a uniform random mover wins
    with the share of sequences that win (a sequence that wins early stands for all its continuations)."""
    factory = env_factory("frozenlake", **options)
    steps = options["max_steps"]
    wins = 0
    for sequence in itertools.product(("up", "down", "left", "right"), repeat=steps):
        env = factory()
        result = env.reset(task)
        for action in sequence:
            if result.done:
                break
            result = env.step(action)
        wins += result.won
    return wins / 4**steps


def test_the_random_mover_wins_as_often_as_exact_enumeration_says() -> None:
    options = {"size": 3, "p_frozen": 0.8, "max_steps": 4, "random_start_goal": True}
    config = _config(f"env.options={json.dumps(options)}")
    tasks = [11, 12, 13, 14, 15]
    exact = [_exact_win_probability(options, t) for t in tasks]
    assert any(0.05 < p < 0.95 for p in exact)  # the maps are neither hopeless nor trivial for a random mover
    repeats = 1000
    result = random_mover(config, tasks, repeats=repeats, seed=3)
    for p, rate in zip(exact, result["task_win_rate"], strict=True):
        assert abs(rate - p) <= 4.5 * math.sqrt(p * (1 - p) / repeats) + 1e-12, (rate, p)
    pooled = sum(sum(row) for row in result["won_by_repeat"])
    assert result["pooled_successes"] == pooled == sum(result["successes_per_pass"])
    assert result["episodes"] == repeats * len(tasks) and result["tasks"] == len(tasks)
    assert result["successes"] == pytest.approx(pooled / repeats)
    assert result["success_rate"] == pytest.approx(result["successes"] / result["tasks"])
    assert result["ci95"] == list(wilson_interval(pooled, repeats * len(tasks)))


def test_a_tasks_random_moves_do_not_depend_on_the_other_tasks() -> None:
    config = _config('env.options={"size": 4, "p_frozen": 0.8, "max_steps": 15, "random_start_goal": true}')
    alone = random_mover(config, [7], repeats=8, seed=1)
    beside = random_mover(config, [5, 7, 9], repeats=8, seed=1)
    assert [row[1] for row in beside["won_by_repeat"]] == [row[0] for row in alone["won_by_repeat"]]
    assert random_mover(config, [5, 7, 9], repeats=8, seed=1) == beside  # seeded
    with pytest.raises(ValueError, match="repeats"):
        random_mover(config, [7], repeats=0)


def test_a_blind_sequence_chosen_on_the_held_out_tasks_is_refused() -> None:
    config = _config()
    with pytest.raises(ValueError, match=r"share 2 task.*overstates"):
        blind_sequence(config, [1, 2, 3], selection=[3, 4, 5, 1])
    with pytest.raises(ValueError, match="share 1 task"):
        blind_sequence(config, held_out_seeds(4), selection=[0, 1, held_out_seeds(4)[2]])


def test_the_only_winning_sequence_is_found_and_scored_on_the_held_out_maps() -> None:
    from gymnasium.envs.toy_text.frozen_lake import generate_random_map

    # 2x2 lakes, start top-left, goal bottom-right. On "SF/HG" only right-then-down wins within two moves (down
    # falls in the hole). Chosen on such maps alone, the sequence is that one; on the held-out maps it wins exactly
    # on those whose top-right cell is ice (the goal is then one move down from it).
    options = {"size": 2, "p_frozen": 0.5, "max_steps": 2}
    config = _config(f"env.options={json.dumps(options)}")
    maps = {seed: generate_random_map(size=2, p=0.5, seed=seed) for seed in range(200)}
    selection = [seed for seed in range(100) if maps[seed] == ["SF", "HG"]]
    held_out = list(range(100, 200))
    result = blind_sequence(config, held_out, selection=selection, length=8)
    assert result["sequence"] == ["right", "down"] and result["length"] == 2  # capped by the 2-step episodes
    assert result["selection_wins"] == len(selection) == result["selection_tasks"]
    expected = [int(maps[seed][0][1] == "F") for seed in held_out]
    assert result["won"] == expected and result["successes"] == sum(expected) and result["tasks"] == 100
    assert 0 < sum(expected) < 100


class _Scripted(RolloutEngine):
    """A policy that always answers one action (SmolLM2's tokenizer, for the prompts)."""

    def __init__(self, action: str) -> None:
        from transformers import AutoTokenizer

        from pyagentrl.rollout.models import resolve_model

        self.tokenizer = AutoTokenizer.from_pretrained(resolve_model("tiny"))
        self.max_context = 8192
        self.reply = f"<action>{action}</action>"
        self.token = self.tokenizer(self.reply, add_special_tokens=False)["input_ids"]

    def generate(self, prompts: Sequence[Sequence[int]], sampling: SamplingConfig) -> list[Generation]:
        return [Generation(list(self.token), [0.0] * len(self.token), self.reply, "stop") for _ in prompts]

    def update_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]]) -> None:
        raise NotImplementedError


def test_score_policy_scores_the_engines_policy_on_the_held_out_tasks() -> None:
    # Scored by score_policy and replayed here by hand, task by task, on the held-out seeds: the same outcomes.
    options = {"size": 3, "p_frozen": 0.8, "max_steps": 6, "random_start_goal": True}
    config = _config(f"env.options={json.dumps(options)}")
    result = score_policy(_Scripted("right"), config, 16, temperature=0.0)
    factory = env_factory("frozenlake", **options)
    replayed = []
    for task in range(2**30, 2**30 + 16):  # the documented held-out seeds, not the function under test
        env = factory()
        step = env.reset(task)
        while not step.done:
            step = env.step("right")
        replayed.append(int(step.won))
    assert result["won"] == replayed and 0 < sum(replayed) < 16
    assert result["successes"] == sum(replayed) and result["tasks"] == 16 and result["temperature"] == 0.0
    assert result["success_rate"] == sum(replayed) / 16 and result["ci95"] == list(wilson_interval(sum(replayed), 16))


def test_the_untrained_tiny_model_is_scored_consistently() -> None:
    config = _config('env.options={"size": 3, "max_steps": 3}')
    engine = make_engine("hf", "tiny")
    try:
        result = untrained_policy(config, 6, sampling_seeds=[0, 5], engine=engine)
        again = score_policy(engine, replace(config, seed=5), 6)
        greedy = score_policy(engine, config, 6, temperature=0.0)
    finally:
        engine.close()
    sampled = result["sampled"]
    assert sampled["sampling_seeds"] == [0, 5] and sampled["temperature"] == config.rollout.temperature
    assert sampled["successes_per_pass"] == [sum(w) for w in sampled["won_by_seed"]]
    assert sampled["won_by_seed"][1] == again["won"]  # the same sampling seed samples the same episodes
    assert result["greedy"]["won"] == greedy["won"] and result["greedy"]["temperature"] == 0.0
    for score in (again, greedy, result["greedy"]):
        assert score["successes"] == sum(score["won"]) and len(score["won"]) == score["tasks"] == 6


def test_the_command_writes_its_table_and_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "baselines.json"
    out.write_text('{"other": {"kept": true}}')
    args = ["baselines", str(TINY), 'env.options={"size": 3, "max_steps": 4}', "--tasks", "6", "--no-policy"]
    cli_main([*args, "--selection-tasks", "20", "--repeats", "3", "--out", str(out), "--key", "lake"])
    printed = capsys.readouterr().out
    stored = json.loads(out.read_text())
    assert stored["other"] == {"kept": True} and "untrained_policy" not in stored["lake"]
    record = stored["lake"]
    assert record["held_out"] == {"first": 2**30, "tasks": 6} and record["random_mover"]["repeats"] == 3
    assert record["blind_sequence"]["selection_range"] == [0, 19] and len(record["blind_sequence"]["won"]) == 6
    assert format_table(record) in printed and "random mover" in printed
    assert compute_baselines(load_config(TINY, args[2:3]), 6, 20, 3, policy=False) == record  # seeded: repeatable


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (['env.options={"size": 3, "bogus": 1}'], "pyagentrl baselines: env.options.bogus: unknown option of"),
        (["rollout.engine=nope"], "pyagentrl baselines: rollout.engine: unknown engine"),
        (["--key", "x"], "pyagentrl baselines: --key needs --out"),
        (["--tasks", "0"], "--tasks: must be >= 1"),
    ],
)
def test_bad_input_is_one_line_and_exit_code_2(
    extra: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        cli_main(["baselines", str(TINY), "--no-policy", *extra])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def _study(tmp_path: Path) -> Path:
    spec = {
        "name": "tiny",
        "config": str(TINY),
        "seeds": [1],
        "eval_tasks": 3,
        "families": {"lake": {"env.options": {"size": 3, "max_steps": 4}, "env.backend": "serial"}},
        "arms": {"grpo": {"algorithm.estimator": "grpo"}},
    }
    path = tmp_path / "spec.yaml"
    path.write_text(json.dumps(spec))
    return path


def test_the_report_renders_stored_baselines_and_computes_missing_ones(tmp_path: Path) -> None:
    from pyagentrl.training.study import load_spec, write_report

    spec = load_spec(_study(tmp_path), output=tmp_path / "runs")
    write_report(spec, tmp_path / "r")
    computed = (tmp_path / "r" / "README.md").read_text()
    assert "computed for this report; not in baselines.json, so without the untrained policy" in computed
    assert "Uniform random mover over the admissible actions, up to 4 steps" in computed
    assert "chosen on the task seeds 0..199" in computed and "Untrained policy (tiny" not in computed

    # A stored record for this family's settings is rendered as stored, the untrained policy included.
    config = load_config(TINY, ["env.backend=serial", 'env.options={"size": 3, "max_steps": 4}'])
    record = compute_baselines(config, tasks=3, selection_tasks=10, repeats=2, policy=False)
    greedy = {"tasks": 3, "successes": 1, "success_rate": 1 / 3, "ci95": [0.06, 0.79], "won": [0, 1, 0]}
    sampled = {
        "tasks": 3, "successes": 0.5, "success_rate": 0.5 / 3, "ci95": [0.03, 0.56], "passes": 2, "episodes": 6,
        "pooled_successes": 1, "successes_per_pass": [1, 0], "temperature": 1.0, "sampling_seeds": [1, 2],
    }  # fmt: skip
    record["untrained_policy"] = {"model": "tiny", "engine": "hf", "sampled": sampled, "greedy": greedy}
    (tmp_path / "r" / "baselines.json").write_text(json.dumps({"lake": record}))
    write_report(spec, tmp_path / "r")
    shown = (tmp_path / "r" / "README.md").read_text()
    assert "([baselines.json](baselines.json))" in shown and "chosen on the task seeds 0..9" in shown
    assert (
        "Untrained policy (tiny, hf) at temperature 1, sampling seeds 1, 2: 0.5/3 a pass, mean of 2 "
        "(1/6 episodes, 0.167, Wilson 95 % 0.030-0.560); greedy: 1/3 (0.333, Wilson 95 % 0.060-0.790)." in shown
    )

    # Made for other settings (here other held-out tasks), it is not shown as this family's.
    record["held_out"]["tasks"] = 64
    (tmp_path / "r" / "baselines.json").write_text(json.dumps({"lake": record}))
    write_report(spec, tmp_path / "r")
    assert "computed for this report" in (tmp_path / "r" / "README.md").read_text()


def test_the_end_of_run_verdict_places_the_trained_interval_against_each_baseline() -> None:
    """`eval_summary` on a record shaped like the main job's: above the untrained policy and the random mover, below
    a blind route at temperature 1 and level with it greedily (the pinned map's honest reading)."""
    from pyagentrl.training.evaluate import baselines_line, eval_summary

    def score(successes: float, tasks: int = 64, **extra: object) -> dict:
        low, high = wilson_interval(round(successes), tasks)
        return {"successes": successes, "tasks": tasks, "success_rate": successes / tasks, "ci95": [low, high], **extra}

    record = {
        "tasks_are": "frozenlake with its map pinned",
        "untrained": score(3, temperature=1.0, greedy=score(0)),
        "trained": score(46, temperature=1.0, greedy=score(64)),
        "baselines": {
            "random_mover": score(2.0),
            "blind_sequence": score(64, sequence=["right", "up"], selection_range=[0, 199]),
        },
    }
    text = eval_summary(record)
    assert "lies above the untrained one's" in text
    assert "a uniform random mover, 2/64: the trained policy's interval lies above its interval (greedy: above)" in text
    assert "seeds 0..199 (right, up), 64/64: the trained policy's interval lies below its interval " in text
    assert "(greedy: not apart from)" in text
    assert "blind sequence" in baselines_line(record["baselines"])
    record["trained"] = score(3, temperature=1.0, greedy=score(0))  # no better than the random mover
    assert "random mover, 2/64: the trained policy's interval overlaps its interval (greedy: not apart from)" in (
        eval_summary(record)
    )
    record["baselines"]["blind_sequence"] = {"none": "hidden state"}  # a game no fixed sequence is scored on
    assert "blind" not in eval_summary(record) and "blind" not in baselines_line(record["baselines"])
    del record["baselines"]
    assert "Against" not in eval_summary(record)


def test_model_free_baselines_are_the_commands_random_mover_and_blind_sequence() -> None:
    from pyagentrl.training.baselines import model_free_baselines

    config = _config()
    record = compute_baselines(config, tasks=6, selection_tasks=20, repeats=2, policy=False)
    assert model_free_baselines(config, held_out_seeds(6), 20, 2) == {
        k: record[k] for k in ("random_mover", "blind_sequence")
    }
