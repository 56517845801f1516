"""`pyagentrl export`: a tiny run's checkpoint (full fine-tuning, and LoRA) as a plain HF directory that transformers
and the vLLM engine load as it is, with the checkpoint's log-probs; bad arguments refused in one line before any
work."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from testkit.peers import import_peer
from testkit.training import TINY, cli, run_dir_of

from pyagentrl.rollout.models import tiny_model_path
from pyagentrl.training.config import load_config
from pyagentrl.training.evaluate import checkpoint_engine
from pyagentrl.training.export import export_checkpoint

pytestmark = pytest.mark.slow  # the fixture trains two runs in subprocesses

CHAT = [{"role": "user", "content": "You stand on a frozen lake. Which way do you go?"}]
REPLY = "<action>left</action>"


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory) -> dict[str, Path]:
    import_peer("peft")
    root = tmp_path_factory.mktemp("runs")
    full = cli("train", str(TINY), f"output_dir={root / 'full'}", "iterations=1")
    # A larger step than the full run's, so that one iteration moves the adapter well past rounding.
    lora = cli(
        "train",
        str(TINY),
        f"output_dir={root / 'lora'}",
        "iterations=1",
        "actor.lora.rank=4",
        "actor.lr=1e-3",
        "actor.deepspeed=zero0.json",
    )
    runs = {"full": run_dir_of(full.stdout), "lora": run_dir_of(lora.stdout)}
    return {kind: run / "checkpoints" / "iter_000001" for kind, run in runs.items()}


@pytest.fixture(scope="module")
def exports(checkpoints, tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("exports")
    # The command on the LoRA checkpoint, into a new directory (its parent made too).
    out = cli("export", str(checkpoints["lora"]), str(root / "new" / "lora"))
    assert "LoRA adapter (rank 4, alpha 32) merged into" in out.stdout and "float32" in out.stdout
    # The Python API on the full one, into an empty directory that exists.
    (root / "full").mkdir()
    assert export_checkpoint(checkpoints["full"], root / "full") == root / "full"
    assert [p.name for p in root.iterdir() if p.name.startswith(".")] == []  # no temporary directory left
    return {"lora": root / "new" / "lora", "full": root / "full"}


def _sequence(tokenizer) -> tuple[list[int], list[int]]:
    prompt = tokenizer.apply_chat_template(CHAT, add_generation_prompt=True, tokenize=False)
    return (
        tokenizer(prompt, add_special_tokens=False)["input_ids"],
        tokenizer(REPLY + "<|im_end|>", add_special_tokens=False)["input_ids"],
    )


def _logprobs(model, prompt: list[int], reply: list[int]) -> torch.Tensor:
    """log p(reply[j] | prompt, reply[:j]) for each j, float32."""
    with torch.no_grad():
        logits = model(torch.tensor([prompt + reply])).logits[0, len(prompt) - 1 : -1].float()
    return torch.log_softmax(logits, -1).gather(1, torch.tensor(reply)[:, None])[:, 0]


def _checkpoint_logprobs(checkpoint: Path, prompt: list[int], reply: list[int]) -> torch.Tensor:
    """The checkpoint's policy as `pyagentrl eval` loads it: the HF engine (a LoRA adapter merged by the trainer's
    own `hf_weights`, not by peft)."""
    engine = checkpoint_engine(checkpoint, load_config(checkpoint / "config.yaml").model, "hf", {})
    try:
        return _logprobs(engine.model, prompt, reply)
    finally:
        engine.close()


@pytest.mark.parametrize("kind", ["full", "lora"])
def test_transformers_loads_the_export_with_the_checkpoints_logprobs(checkpoints, exports, kind):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    out, checkpoint = exports[kind], checkpoints[kind]
    names = {p.name for p in out.iterdir()}
    assert {"config.json", "model.safetensors", "generation_config.json", "tokenizer_config.json"} <= names
    assert "adapter_config.json" not in names and "adapter_model.safetensors" not in names
    # Plain HF names: the base model's tensors, none of peft's.
    base_weights = load_file(tiny_model_path() / "model.safetensors")
    exported_weights = load_file(out / "model.safetensors")
    assert exported_weights.keys() == base_weights.keys()
    assert any(not torch.equal(exported_weights[k], base_weights[k]) for k in base_weights)
    provenance = json.loads((out / "pyagentrl_export.json").read_text())
    assert provenance["iterations_done"] == 1 and (provenance["lora"] is not None) == (kind == "lora")

    tokenizer = AutoTokenizer.from_pretrained(out)
    prompt, reply = _sequence(tokenizer)
    assert (prompt, reply) == _sequence(AutoTokenizer.from_pretrained(tiny_model_path()))  # the chat template too
    model = AutoModelForCausalLM.from_pretrained(out)
    assert model.dtype == torch.float32
    exported = _logprobs(model, prompt, reply)
    policy = _checkpoint_logprobs(checkpoint, prompt, reply)
    assert float((exported - policy).abs().max()) < 1e-5
    # Training moved the policy: an export that dropped the adapter (or the update) would give the base model's.
    untrained = _logprobs(AutoModelForCausalLM.from_pretrained(tiny_model_path()), prompt, reply)
    assert float((exported - untrained).abs().max()) > 1e-3


_VLLM = """
import json, sys
from pyagentrl.rollout import SamplingConfig, make_engine

out, prompt, result = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3]
engine = make_engine("vllm", out, dtype="float32", kv_cache_gib=0.25)
(gen,) = engine.generate([prompt], SamplingConfig(temperature=1.0, max_new_tokens=24, seed=3))
with open(result, "w") as f:
    json.dump({"token_ids": gen.token_ids, "logprobs": gen.logprobs}, f)
engine.close()
"""


@pytest.mark.vllm
def test_the_vllm_engine_loads_the_lora_export_with_the_checkpoints_logprobs(checkpoints, exports, tmp_path):
    import_peer("vllm")
    from transformers import AutoModelForCausalLM, AutoTokenizer

    out = exports["lora"]
    prompt, _ = _sequence(AutoTokenizer.from_pretrained(out))
    result = tmp_path / "vllm.json"
    # Its own interpreter (one vLLM engine per process), on the installed package (-P, outside the repository).
    proc = subprocess.run(
        [sys.executable, "-P", "-c", _VLLM, str(out), json.dumps(prompt), str(result)],
        capture_output=True,
        text=True,
        timeout=600,
        cwd="/",
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    sampled = json.loads(result.read_text())
    reply = sampled["token_ids"]
    assert len(reply) > 0
    engine = torch.tensor(sampled["logprobs"])
    exported = _logprobs(AutoModelForCausalLM.from_pretrained(out), prompt, reply)
    assert float((engine - exported).abs().max()) < 1e-4
    assert float((engine - _checkpoint_logprobs(checkpoints["lora"], prompt, reply)).abs().max()) < 1e-4


def test_bad_arguments_are_refused_in_one_line_before_any_work(checkpoints, tmp_path):
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "mine.txt").write_text("keep me\n")
    out = cli("export", str(checkpoints["full"]), str(busy), check=False)
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.splitlines() == [
        f"pyagentrl export: OUT_DIR {busy} exists and is not empty: give a new or empty directory"
    ]
    assert [p.name for p in busy.iterdir()] == ["mine.txt"] and (busy / "mine.txt").read_text() == "keep me\n"

    run = checkpoints["full"].parents[1]
    for bad, why in [
        (run, "is not a checkpoint directory (<run>/checkpoints/iter_NNNNNN)"),
        (tmp_path / "nowhere", "no such directory"),
    ]:
        out = cli("export", str(bad), str(tmp_path / "new"), check=False)
        assert out.returncode == 2 and out.stdout == ""
        (line,) = out.stderr.splitlines()
        assert line.startswith(f"pyagentrl export: CHECKPOINT {bad}") and why in line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["busy"]  # nothing written beside it either


def test_a_failed_export_leaves_nothing(checkpoints, tmp_path, monkeypatch):
    from pyagentrl.training import export

    def broken(checkpoint: Path, out: Path, trust_remote_code: bool) -> None:
        raise RuntimeError("disk full")

    monkeypatch.setattr(export, "_save_tokenizer", broken)
    with pytest.raises(RuntimeError, match="disk full"):
        export.export_checkpoint(checkpoints["full"], tmp_path / "out")
    assert list(tmp_path.iterdir()) == []
