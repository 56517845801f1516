"""`pyagentrl train` end to end on the tiny config (a random-weight model on real FrozenLake): every estimator, both
engines, LoRA with the KL and entropy terms, evaluation and plots, and resume after a kill."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from safetensors.torch import load_file
from testkit.peers import import_peer
from testkit.training import REPO, TINY, cli, run_dir_of, untimed

from pyagentrl.training.metrics import read_metrics
from pyagentrl.training.stats import wilson_interval

pytestmark = pytest.mark.slow  # each test trains a run in a subprocess


def _train(tmp_path: Path, *overrides: str) -> tuple[Path, str]:
    out = cli("train", str(TINY), f"output_dir={tmp_path}", *overrides)
    return run_dir_of(out.stdout), out.stdout


def _check_run(run: Path, iterations: int) -> list[dict]:
    rows = read_metrics(run)
    assert [r["iteration"] for r in rows] == list(range(iterations))
    for r in rows:
        assert r["episodes"] == 2 * 4 and r["rows"] >= 8  # every episode of every task group, at least one step
        assert 0 <= r["success_rate"] <= 1 and 0 <= r["invalid_action_rate"] <= 1
        assert r["optimizer_steps"] == 2 and r["grad_norm"] >= 0 and r["entropy"] > 0
        for phase in ("rollout", "keys", "advantages", "old_logprobs", "update", "weight_sync"):
            assert r[f"seconds_{phase}"] >= 0
    latest = (run / "checkpoints" / "latest").read_text().strip()
    assert latest == f"iter_{iterations:06d}"
    ckpt = run / "checkpoints" / latest
    assert (ckpt / "deepspeed").is_dir() and (ckpt / "model").is_dir() and (ckpt / "rng" / "rank0.json").is_file()
    assert json.loads((ckpt / "state.json").read_text())["next_iteration"] == iterations
    assert (run / "plots" / "curves.png").stat().st_size > 10_000
    assert any((run / "tensorboard").iterdir())
    assert "algorithm:" in (run / "config.yaml").read_text()
    return rows


@pytest.mark.parametrize("estimator", ["grpo", "gigpo", "gagpo"])
def test_each_estimator_trains_with_the_hf_engine(tmp_path, estimator):
    run, stdout = _train(tmp_path, "iterations=1", f"algorithm.estimator={estimator}")
    assert "Resolved config:" in stdout and f"estimator: {estimator}" in stdout
    (row,) = _check_run(run, 1)
    if estimator == "grpo" and row["success_rate"] == 0:
        # GRPO credits whole episodes by their score; when no episode of a random policy wins, every score is equal,
        # so every advantage and the gradient are exactly zero.
        assert row["advantage_zero_share"] == 1 and row["grad_norm"] == 0
        return
    # Step-level credit (the invalid-action penalty differs between steps): the update reached the model.
    assert row["grad_norm"] > 0
    from pyagentrl.rollout.models import tiny_model_path

    before = load_file(tiny_model_path() / "model.safetensors")
    after = load_file(run / "checkpoints" / "iter_000001" / "model" / "model.safetensors")
    assert any(not (before[k] == after[k]).all() for k in before)


@pytest.mark.vllm
def test_the_vllm_engine_trains(tmp_path):
    import_peer("vllm")
    run, _ = _train(tmp_path, "iterations=2", "rollout.engine=vllm", "rollout.engine_options.kv_cache_gib=0.25")
    _check_run(run, 2)


def test_lora_gagpo_time_aware_anchors_kl_entropy_conversation_rows_and_dynamic_sampling(tmp_path):
    import_peer("peft")
    run, _ = _train(
        tmp_path,
        "iterations=2",
        "algorithm.estimator=gagpo",
        "algorithm.dynamic_sampling=true",
        "anchors.time_aware=true",
        "rollout.prompting=conversation",
        "rollout.response_prefix=<action>",
        "rollout.answer_format=direct",
        "actor.layout=trajectory",
        "actor.policy_loss=token",
        "actor.loss_agg_mode=seq-mean-token-mean",
        "actor.lora.rank=4",
        "actor.kl.coef=0.1",
        "actor.kl.estimator=k1",
        "actor.entropy_coef=0.01",
        "actor.deepspeed=zero0.json",
        "actor.minibatches=1",
    )
    rows = read_metrics(run)
    assert [r["iteration"] for r in rows] == [0, 1]
    for r in rows:
        assert 0 <= r["dropped_group_share"] <= 1
        if r["dropped_group_share"] < 1:
            assert r["kl"] is not None and r["grad_norm"] > 0
    # The adapter alone is saved; evaluation merges it into the base model.
    model_dir = run / "checkpoints" / "iter_000002" / "model"
    assert (model_dir / "adapter_config.json").is_file() and not (model_dir / "model.safetensors").exists()
    out = cli("eval", str(model_dir.parent), "--tasks", "4", "--engine", "hf")
    result = json.loads((model_dir.parent / "eval.json").read_text())
    assert result["tasks"] == 4 and 0 <= result["success_rate"] <= 1
    assert "success rate" in out.stdout


def test_eval_reports_a_wilson_interval(tmp_path):
    run, _ = _train(tmp_path, "iterations=1")
    ckpt = run / "checkpoints" / "iter_000001"
    out = cli("eval", str(ckpt), "--tasks", "6", "--temperature", "0")
    result = json.loads((ckpt / "eval.json").read_text())
    assert result["tasks"] == 6 and result["temperature"] == 0
    assert result["ci95"] == list(wilson_interval(result["successes"], 6))
    assert len(result["won"]) == 6 and sum(result["won"]) == result["successes"]  # each task's outcome, in order
    assert "95 % CI" in out.stdout
    missing = cli("eval", str(run), check=False)
    assert missing.returncode == 2 and "is not a checkpoint directory" in missing.stderr
    none = cli("eval", str(ckpt), "--tasks", "0", check=False)
    assert none.returncode == 2 and "--tasks: must be >= 1, got 0" in none.stderr


def test_resume_after_a_kill_makes_the_uninterrupted_runs_iterations(tmp_path):
    # A warmup and a cosine schedule: the learning rate's state must come back from the checkpoint too.
    schedule = ["actor.warmup_steps=3", "actor.lr_schedule=cosine", "actor.min_lr_ratio=0.1"]
    settings = ["iterations=5", "checkpoint.every=2", "checkpoint.keep=0", *schedule]
    whole, _ = _train(tmp_path / "whole", *settings)
    expected = [untimed(r) for r in read_metrics(whole)]
    from pyagentrl.training.learner import lr_factor

    steps = [r["optimizer_steps"] for r in expected]
    last_step = [sum(steps[: i + 1]) - 1 for i in range(len(steps))]  # each iteration's last optimizer step
    assert [r["lr"] for r in expected] == pytest.approx([1e-4 * lr_factor(k, 10, 3, "cosine", 0.1) for k in last_step])

    # The same run, killed (SIGKILL: no clean-up) once its fourth metrics line is written: iteration 3 is done,
    # the last checkpoint is after iteration 2, so the resumed run must drop line 3 and make iterations 2.. again
    # (2 from the checkpoint after 2 iterations).
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    proc = subprocess.Popen(
        [sys.executable, "-P", "-m", "pyagentrl", "train", str(TINY), f"output_dir={tmp_path / 'killed'}", *settings],
        cwd=REPO,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.time() + 300
    while time.time() < deadline and proc.poll() is None:
        runs = list((tmp_path / "killed").glob("tiny-*"))
        if runs and len(read_metrics(runs[0])) >= 4:
            proc.send_signal(signal.SIGKILL)
            break
        time.sleep(0.02)
    assert proc.wait(timeout=60) == -signal.SIGKILL, "the run ended before it could be killed"
    (killed,) = list((tmp_path / "killed").glob("tiny-*"))
    assert (killed / "checkpoints" / "latest").read_text().strip() in ("iter_000002", "iter_000004")

    out = cli("train", "--resume", str(killed))
    assert run_dir_of(out.stdout) == killed
    resumed = [untimed(r) for r in read_metrics(killed)]
    assert [r["iteration"] for r in resumed] == list(range(5))  # none lost, none twice
    differ = [
        (r["iteration"], k, r[k], e.get(k))
        for r, e in zip(resumed, expected, strict=True)
        for k in r
        if r[k] != e.get(k)
    ]
    assert not differ, differ
    final = "checkpoints/iter_000005/model/model.safetensors"
    a, b = load_file(whole / final), load_file(killed / final)
    assert all((a[k] == b[k]).all() for k in a)  # the same weights, bit for bit


def test_embedding_anchors_train(tmp_path):
    from testkit.peers import require_embedding_model

    require_embedding_model()
    options = "anchors.options={threshold: 0.99, device: cpu}"
    run, _ = _train(tmp_path, "iterations=2", "anchors.mode=embedding", options)
    rows = _check_run(run, 2)
    assert rows[0]["anchor_cache_hit_rate"] == 0  # nothing was cached before the first batch
    for row in rows:
        assert 0 <= row["anchor_cache_hit_rate"] <= 1 and row["anchor_rows_in_groups"] > 0
