"""The trainer optimizes reward: a real model (the embedded SmolLM2-135M-Instruct, vLLM) on a one-step task it solves
about half the time untrained (one FrozenLake map pinned, the goal one step to the right of the start) is trained a
few iterations and scored on held-out tasks before and after. A flipped loss sign would drive success down, and
weights that never reached the engine would leave it where it was: either fails the test."""

from __future__ import annotations

import json

import pytest
from testkit.peers import import_peer, require_embedded_model_packages
from testkit.training import CONFIGS, cli, run_dir_of

pytestmark = [pytest.mark.slow, pytest.mark.vllm]  # trains the embedded model on vLLM


def test_training_raises_held_out_success_on_a_one_step_task(tmp_path):
    import_peer("vllm")
    require_embedded_model_packages()
    out = cli(
        "train",
        str(CONFIGS / "fixed-task.yaml"),
        f"output_dir={tmp_path}",
        "iterations=6",
        "env.options.map_seed=2",  # start (3, 2), goal (3, 3): "right" wins at once
        "env.options.max_steps=1",
        "algorithm.estimator=grpo",
        "actor.lr=1e-5",
        "eval.tasks=32",
        "checkpoint.every=0",
        timeout=1200,
    )
    record = json.loads((run_dir_of(out.stdout) / "eval.json").read_text())
    untrained, trained = record["untrained"], record["trained"]
    assert untrained["tasks"] == trained["tasks"] == 32
    print(f"untrained {untrained['successes']}/32, trained {trained['successes']}/32")
    assert trained["success_rate"] >= 0.8
    assert trained["ci95"][0] > untrained["ci95"][1]  # the intervals lie apart
    mover = record["baselines"]["random_mover"]  # wins a quarter of one-step tasks
    assert trained["ci95"][0] > mover["ci95"][1] and "Against a uniform random mover" in out.stdout
    assert "map_seed 2" in record["tasks_are"] and "Learned?" in out.stdout
