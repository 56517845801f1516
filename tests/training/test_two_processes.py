"""Two processes (torchrun): the rollouts split by task group and gathered, and the same update as one process on
the same data."""

from __future__ import annotations

import json
import os
import pickle
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from testkit.peers import import_peer
from testkit.training import REPO, TINY, cli, run_dir_of, untimed

from pyagentrl.envs import EnvBatch, env_factory
from pyagentrl.hashing import StateKeyer
from pyagentrl.rollout import RolloutConfig, SamplingConfig, collect, make_engine
from pyagentrl.training.metrics import read_metrics

pytestmark = pytest.mark.slow  # each test launches training processes

WORKER = Path(__file__).with_name("update_worker.py")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _launch_env() -> dict[str, str]:
    """This environment without a launcher's variables, with the tests' folder importable and one thread a rank."""
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_PORT")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO / "tests"), env.get("PYTHONPATH")]))
    env["OMP_NUM_THREADS"] = "1"
    return env


def _launch(nproc: int, *args: str) -> subprocess.CompletedProcess:
    env = _launch_env()
    launcher = (
        []
        if nproc == 1
        else ["-m", "torch.distributed.run", "--nproc_per_node", str(nproc), f"--master_port={_free_port()}"]
    )
    out = subprocess.run(
        [sys.executable, "-P", *launcher, *args], capture_output=True, text=True, timeout=600, env=env, cwd=REPO
    )
    if out.returncode != 0:
        raise AssertionError(f"{args} on {nproc} processes failed:\n{out.stdout[-3000:]}\n{out.stderr[-6000:]}")
    return out


def _launch_two_nodes(*args: str) -> list[str]:
    """Two torchrun launchers, one rank each, that act as two machines: they meet at a c10d rendezvous on the
    loopback address, as launchers on two nodes meet at one on the first node. Returns both launchers' stdout."""
    env = _launch_env()
    rendezvous = ["--rdzv_backend", "c10d", "--rdzv_endpoint", f"127.0.0.1:{_free_port()}", "--rdzv_id", "two-nodes"]
    launcher = [sys.executable, "-P", "-m", "torch.distributed.run", "--nnodes", "2", "--nproc_per_node", "1"]
    nodes = [
        subprocess.Popen(
            [*launcher, *rendezvous, *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            cwd=REPO,
        )
        for _ in range(2)
    ]
    outputs = [node.communicate(timeout=600) for node in nodes]
    for node, (stdout, stderr) in zip(nodes, outputs, strict=True):
        if node.returncode != 0:
            raise AssertionError(f"{args} on two nodes failed:\n{stdout[-3000:]}\n{stderr[-6000:]}")
    return [stdout for stdout, _ in outputs]


@pytest.fixture(scope="module")
def saved_rollout(tmp_path_factory) -> Path:
    engine = make_engine("hf", "tiny")
    config = RolloutConfig(
        answer_format="direct",
        response_prefix="<action>",
        sampling=SamplingConfig(temperature=1.0, max_new_tokens=6, stop=("</action>",), seed=7),
    )
    with EnvBatch(env_factory("frozenlake", size=4, max_steps=4), 4, 3, backend="serial") as envs:
        rollout = collect(engine, envs, "frozenlake", [11, 12, 13, 14], StateKeyer(), config)
    engine.close()
    path = tmp_path_factory.mktemp("rollout") / "rollout.pkl"
    path.write_bytes(pickle.dumps(rollout))
    return path


# fp32 compute: bf16 rounding depends on how rows are padded and grouped into micro-batches, which differs between
# the two runs by design (in bf16 the updates agree only to its rounding, which Adam's normalisation can amplify).
@pytest.mark.parametrize(
    "overrides",
    [
        ["actor.bf16=false", "actor.minibatches=2", "actor.micro_batch_size=3"],  # ZeRO-2, token-mean, uneven
        [
            "actor.bf16=false",
            "actor.deepspeed=zero0.json",
            "actor.loss_agg_mode=seq-mean-token-mean",
            "actor.micro_batch_size=2",
        ],
        # The per-token ratio's own reduction counts tokens as segments: the trainer must reduce by the real ones.
        ["actor.bf16=false", "actor.policy_loss=token", "actor.loss_agg_mode=segment-mean", "actor.micro_batch_size=3"],
    ],
)
def test_two_processes_make_the_same_update_as_one(tmp_path, saved_rollout, overrides):
    one, two = tmp_path / "one.pt", tmp_path / "two.pt"
    _launch(1, str(WORKER), str(saved_rollout), str(one), *overrides)
    _launch(2, str(WORKER), str(saved_rollout), str(two), *overrides)
    a, b = torch.load(one, weights_only=False), torch.load(two, weights_only=False)
    # The ranks' scored shares, reassembled. Micro-batches of other shapes sum in another order, so the log-probs
    # differ by rounding that grows with their size: float32's default rtol and atol (one machine measured 1.1e-5,
    # 2e-6 relative, over an atol of 1e-5 alone; an AMD EPYC without native bf16 1.6e-5 at one of 14,208 entries);
    # a row put in the wrong place differs by O(1).
    torch.testing.assert_close(a["old"], b["old"], rtol=1.3e-6, atol=3e-5)
    from safetensors.torch import load_file

    from pyagentrl.rollout.models import tiny_model_path

    initial = load_file(tiny_model_path() / "model.safetensors")
    moved = max(float((a["weights"][k] - initial[k]).abs().max()) for k in initial)
    assert moved > 1e-5  # the update did something (lr 1e-4 with Adam moves weights by about lr)
    _assert_same_update(a, b, ("loss", "clip_fraction", "entropy", "grad_norm"))


def test_two_nodes_on_loopback_make_the_update_of_two_ranks_on_one_node(tmp_path, saved_rollout):
    settings = ["actor.bf16=false", "actor.minibatches=2", "actor.micro_batch_size=3"]
    one_node, two_nodes = tmp_path / "one_node.pt", tmp_path / "two_nodes.pt"
    _launch(2, str(WORKER), str(saved_rollout), str(one_node), *settings)
    _launch_two_nodes(str(WORKER), str(saved_rollout), str(two_nodes), *settings)
    a, b = torch.load(one_node, weights_only=False), torch.load(two_nodes, weights_only=False)
    torch.testing.assert_close(a["old"], b["old"])
    _assert_same_update(a, b, ("loss", "clip_fraction", "entropy", "grad_norm"))


def test_pyagentrl_train_on_two_nodes_on_loopback(tmp_path):
    """The tiny config trained by two launchers (the layout of two machines, one rank each) into one output
    directory: both ranks' task groups in the batch, both ranks' states in the checkpoint."""
    outputs = _launch_two_nodes("-m", "pyagentrl", "train", str(TINY), "iterations=1", f"output_dir={tmp_path}")
    (run,) = [run_dir_of(out) for out in outputs if "Done: " in out]  # rank 0 reports, on whichever node it is
    (row,) = read_metrics(run)
    assert row["world_size"] == 2 and row["episodes"] == 2 * 4
    ranks = run / "checkpoints" / "iter_000001" / "rng"
    assert sorted(p.name for p in ranks.iterdir()) == ["rank0.json", "rank1.json"]


def _zero3_partitioning_everything(tmp_path: Path) -> Path:
    """train/deepspeed/zero3.json with every weight partitioned: by default ZeRO-3 keeps weights under 100k numbers
    whole on every rank, which would leave the tiny model's layers unpartitioned (only its embedding is larger)."""
    config = json.loads((REPO / "train" / "deepspeed" / "zero3.json").read_text())
    config["zero_optimization"]["stage3_param_persistence_threshold"] = 0
    path = tmp_path / "zero3_all.json"
    path.write_text(json.dumps(config))
    return path


# Seven minibatches of the rollout's 48 step rows and micro-batches of 4: the ranks hold different numbers of rows
# (4 and 3 of a minibatch of 7; 21 and 20 of the 41 rows scored apart), and under ZeRO-3 every forward is collective.
UNEVEN = ["actor.minibatches=7", "actor.micro_batch_size=4"]


@pytest.mark.parametrize(
    ("overrides", "zero3_only"),
    [
        (["actor.bf16=false", *UNEVEN], []),
        # LoRA (the base weights frozen and partitioned too) with the KL to the adapter-free base model.
        (["actor.bf16=false", *UNEVEN, "actor.lora.rank=8", "actor.lr=1e-3", "actor.kl.coef=0.1"], []),
        # Gradient checkpointing (ZeRO-3's runs only: the reference recomputes nothing). It turns the decoder's cache
        # off, so rows that share a prompt decode it each (the prefix's keys and values are that cache).
        (["actor.bf16=false", "actor.minibatches=2", "actor.micro_batch_size=3"], ["actor.gradient_checkpointing=1"]),
    ],
)
def test_zero3_makes_the_same_update_as_zero0_on_one_and_two_processes(tmp_path, saved_rollout, overrides, zero3_only):
    """ZeRO-3 partitions the weights, their gradients and the optimizer states; the update must not change. Every
    policy forward goes through the engine: called on the module directly, ZeRO-3 keeps only the last micro-batch's
    gradient of each optimizer step (measured: gradient norm 7.0 against 18.5, every weight off). With rows split
    unevenly every rank must still make the same forwards (measured before: gloo's 'collective mismatch')."""
    zero3 = [f"actor.deepspeed={_zero3_partitioning_everything(tmp_path)}", *zero3_only]
    runs = {name: tmp_path / f"{name}.pt" for name in ("zero0", "zero3_one", "zero3_two")}
    _launch(1, str(WORKER), str(saved_rollout), str(runs["zero0"]), *overrides, "actor.deepspeed=zero0.json")
    _launch(1, str(WORKER), str(saved_rollout), str(runs["zero3_one"]), *overrides, *zero3)
    _launch(2, str(WORKER), str(saved_rollout), str(runs["zero3_two"]), *overrides, *zero3)
    reference = torch.load(runs["zero0"], weights_only=False)
    for name in ("zero3_one", "zero3_two"):
        other = torch.load(runs[name], weights_only=False)
        torch.testing.assert_close(reference["old"], other["old"])
        _assert_same_update(reference, other, ("loss", "clip_fraction", "kl", "entropy", "grad_norm"))


def test_zero3_trains_checkpoints_and_resumes_on_two_processes(tmp_path):
    """The trainer under ZeRO-3 on two ranks: the engine sync and the checkpoint's model directory gather the
    partitioned weights (collectively: a gather on rank 0 alone would hang), and a resumed run makes the
    uninterrupted run's iteration and weights."""
    settings = [
        f"actor.deepspeed={_zero3_partitioning_everything(tmp_path)}",
        "checkpoint.every=1",
        "checkpoint.keep=0",
    ]
    whole = run_dir_of(
        _launch(
            2, "-m", "pyagentrl", "train", str(TINY), "iterations=2", f"output_dir={tmp_path / 'a'}", *settings
        ).stdout
    )
    part = run_dir_of(
        _launch(
            2, "-m", "pyagentrl", "train", str(TINY), "iterations=1", f"output_dir={tmp_path / 'b'}", *settings
        ).stdout
    )
    _launch(2, "-m", "pyagentrl", "train", "--resume", str(part), "iterations=2")
    assert [untimed(r) for r in read_metrics(whole)] == [untimed(r) for r in read_metrics(part)]
    from safetensors.torch import load_file

    from pyagentrl.rollout.models import tiny_model_path

    initial = load_file(tiny_model_path() / "model.safetensors")
    final = "checkpoints/iter_000002/model/model.safetensors"
    a, b = load_file(whole / final), load_file(part / final)
    assert {k: v.shape for k, v in a.items()} == {k: v.shape for k, v in initial.items()}  # whole, not rank 0's share
    assert all((a[k] == b[k]).all() for k in a)  # the same weights, bit for bit
    assert max(float((a[k] - initial[k]).abs().max()) for k in a) > 1e-5


def _assert_same_update(a: dict, b: dict, stats: tuple[str, ...]) -> None:
    total = far = 0
    for name, weight in a["weights"].items():
        # Same gradients up to summation order. Adam moves each weight by ~lr·g/(|g| + eps): where |g| is near eps
        # (1e-8) a rounding difference in g shows, so a handful of weights may differ by up to the step itself.
        diff = (weight - b["weights"][name]).abs()
        assert float(diff.max()) <= 2 * 1e-4, name  # never more than the two steps of lr 1e-4 can move a weight
        total, far = total + diff.numel(), far + int((diff > 2e-6).sum())
    assert far <= 1e-5 * total, f"{far} of {total} weights differ by more than 2e-6"
    # The loss is a mean of terms of order |advantage| ~ 1 that cancel to ~1e-4, so rounding differences of ~1e-6 in
    # the ratios show in it at that size (measured: 1.1e-6 between ZeRO-0 and ZeRO-3 on one machine, under 1e-6 on
    # another). A wrong update shows in the weights and the gradient norm above.
    absolute = {"loss": 1e-5}
    for key in stats:
        expected = pytest.approx(getattr(b["stats"], key), rel=1e-4, abs=absolute.get(key, 1e-6))
        assert getattr(a["stats"], key) == expected, key


def test_old_logprobs_from_the_update_forward_make_the_same_update_as_a_scoring_pass(tmp_path, saved_rollout):
    """The first minibatch's old log-probs taken from its own forward (no weight has changed yet) give the update a
    separate scoring pass of every row gives: the ratio is 1 either way, up to rounding."""
    common = ["actor.bf16=false", "actor.minibatches=2", "actor.micro_batch_size=3"]
    fused, scored = tmp_path / "fused.pt", tmp_path / "scored.pt"
    _launch(1, str(WORKER), str(saved_rollout), str(fused), *common)
    _launch(1, str(WORKER), str(saved_rollout), str(scored), *common, "actor.score_every_row=true")
    a, b = torch.load(fused, weights_only=False), torch.load(scored, weights_only=False)
    assert a["stats"].scored_rows < b["stats"].scored_rows == a["old"].shape[0]
    _assert_same_update(a, b, ("loss", "entropy", "grad_norm", "logprob_gap"))


@pytest.mark.parametrize("engine", ["hf", pytest.param("vllm", marks=pytest.mark.vllm)])
def test_pyagentrl_train_on_two_processes(tmp_path, engine):
    # vLLM: each rank's engine joins the process group DeepSpeed made (external_launcher).
    if engine == "vllm":
        import_peer("vllm")
    settings = [f"rollout.engine={engine}", "rollout.engine_options.kv_cache_gib=0.25"] if engine == "vllm" else []
    out = _launch(2, "-m", "pyagentrl", "train", str(TINY), "iterations=1", f"output_dir={tmp_path}", *settings)
    run = run_dir_of(out.stdout)
    (row,) = read_metrics(run)
    assert row["world_size"] == 2
    assert row["episodes"] == 2 * 4  # both ranks' task groups (one each), gathered whole
    assert (run / "checkpoints" / "iter_000001" / "rng" / "rank1.json").is_file()
    if engine == "hf":  # a run resumes only on as many processes as made it (ZeRO states, per-rank seeds)
        one = cli("train", "--resume", str(run), "iterations=2", check=False)
        assert one.returncode != 0 and "was saved by 2 process(es); resume it with 2" in one.stderr
