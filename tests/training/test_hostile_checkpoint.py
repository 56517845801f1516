"""Crafted checkpoints: a planted pickle and a model that ships its own code. `train --resume`, `eval` and `export`
must not run them (the file they would write does not appear) unless the user's own command line vouches for the
checkpoint or the model, which shows that each plant would have run."""

from __future__ import annotations

import json
import os
import random
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from testkit.training import TINY, cli, run_dir_of

pytestmark = pytest.mark.slow  # trains a tiny run, then resumes, evaluates and exports it

EVIL_MODULE = """
from pathlib import Path
Path({marker!r}).write_text("remote code ran")
from transformers import LlamaConfig, LlamaForCausalLM
class EvilConfig(LlamaConfig):
    model_type = "llama"
class EvilModel(LlamaForCausalLM):
    config_class = EvilConfig
"""


class _Payload:
    """Unpickling this runs a shell command: what a crafted DeepSpeed state file can do."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    """A tiny run of one iteration, to copy: each test tampers with its own copy."""
    out = cli("train", str(TINY), f"output_dir={tmp_path_factory.mktemp('runs')}", "iterations=1")
    return run_dir_of(out.stdout)


@pytest.fixture
def run(trained, tmp_path) -> Path:
    copy = tmp_path / "run"
    shutil.copytree(trained, copy)
    return copy


def _env(tmp_path: Path) -> dict[str, str]:
    return {"HF_HOME": str(tmp_path / "hf"), "HF_HUB_OFFLINE": "1"}


def test_a_planted_pickle_does_not_run_on_resume(run, tmp_path):
    ckpt = run / "checkpoints" / "iter_000001"
    marker = tmp_path / "pwned"
    states = sorted((ckpt / "deepspeed").rglob("*.pt"))
    assert states, "DeepSpeed wrote no state files"
    torch.save(_Payload(marker), states[0])
    out = cli("train", "--resume", str(run), "iterations=2", check=False, env=_env(tmp_path))
    assert out.returncode == 2 and "changed after the checkpoint was saved" in out.stderr
    assert not marker.exists()

    # Vouched for on the command line, the checkpoint's pickles are loaded: the plant runs (so this test can fail).
    cli("train", "--resume", str(run), "iterations=2", "--trust-checkpoint", check=False, env=_env(tmp_path))
    assert marker.exists()


def test_a_planted_rng_pickle_is_refused(run, tmp_path):
    """The RNG states' old pickled name, planted beside the JSON ones: a file the manifest does not list."""
    marker = tmp_path / "pwned"
    torch.save(_Payload(marker), run / "checkpoints" / "iter_000001" / "rng" / "rank0.pt")
    out = cli("train", "--resume", str(run), "iterations=2", check=False, env=_env(tmp_path))
    assert out.returncode == 2 and "rng/rank0.pt was added after the checkpoint was saved" in out.stderr
    assert not marker.exists()


def test_a_checkpoint_from_before_manifests_resumes_only_when_vouched_for(run, tmp_path):
    """Today's checkpoints carry a signed manifest and JSON RNG states; one written before them (pickled RNG states,
    no manifest) is refused with the way out, and resumes to completion with it."""
    ckpt = run / "checkpoints" / "iter_000001"
    state = json.loads((ckpt / "rng" / "rank0.json").read_text())
    version, words, gauss = state["python"]
    kind, keys, pos, has_gauss, cached = state["numpy"]
    random.setstate((version, tuple(words), gauss))
    np.random.set_state((kind, np.asarray(keys, dtype=np.uint32), pos, has_gauss, cached))
    legacy = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}
    torch.save(legacy, ckpt / "rng" / "rank0.pt")  # as the earlier trainer wrote it
    (ckpt / "rng" / "rank0.json").unlink()
    (ckpt / "manifest.json").unlink()
    out = cli("train", "--resume", str(run), "iterations=2", check=False, env=_env(tmp_path))
    assert out.returncode == 2 and "has no manifest.json" in out.stderr and "--trust-checkpoint" in out.stderr
    out = cli("train", "--resume", str(run), "iterations=2", "--trust-checkpoint", env=_env(tmp_path))
    assert "Resumed from" in out.stdout
    new = run / "checkpoints" / "iter_000002"
    assert (new / "manifest.json").is_file() and (new / "rng" / "rank0.json").is_file()
    assert not list((new / "rng").glob("*.pt"))


def _plant_remote_code(ckpt: Path, marker: Path) -> None:
    model = ckpt / "model"
    config = json.loads((model / "config.json").read_text())
    config["auto_map"] = {"AutoConfig": "evil.EvilConfig", "AutoModelForCausalLM": "evil.EvilModel"}
    (model / "config.json").write_text(json.dumps(config))
    (model / "evil.py").write_text(EVIL_MODULE.format(marker=str(marker)))


@pytest.mark.parametrize("engine", ["hf", "vllm"])
def test_eval_does_not_run_a_checkpoints_code_or_take_its_trust_setting(run, tmp_path, engine):
    ckpt = run / "checkpoints" / "iter_000001"
    marker = tmp_path / "pwned"
    _plant_remote_code(ckpt, marker)
    stored = (ckpt / "config.yaml").read_text()
    assert "engine_options: {}" in stored
    (ckpt / "config.yaml").write_text(
        stored.replace("engine_options: {}", "engine_options: {trust_remote_code: true}")
        .replace("trust_remote_code: false", "trust_remote_code: true")
        .replace("engine: hf", f"engine: {engine}")
    )
    out = cli("eval", str(ckpt), "--tasks", "2", check=False, env=_env(tmp_path))
    assert out.returncode == 2 and "rollout.engine_options.trust_remote_code: not an engine option" in out.stderr
    assert not marker.exists()
    # Without the engine option, the stored config's top-level trust_remote_code: true is ignored.
    (ckpt / "config.yaml").write_text(
        stored.replace("trust_remote_code: false", "trust_remote_code: true").replace("engine: hf", f"engine: {engine}")
    )
    cli("eval", str(ckpt), "--tasks", "2", "--temperature", "0", env=_env(tmp_path))
    assert not marker.exists()


def test_export_does_not_run_a_checkpoints_code_unless_asked(run, tmp_path):
    ckpt = run / "checkpoints" / "iter_000001"
    marker = tmp_path / "pwned"
    _plant_remote_code(ckpt, marker)
    cli("export", str(ckpt), str(tmp_path / "plain"), env=_env(tmp_path))
    assert not marker.exists()
    # The user's own --trust-remote-code runs the model's code: the plant is real.
    cli("export", str(ckpt), str(tmp_path / "trusted"), "--trust-remote-code", env=_env(tmp_path))
    assert marker.exists()


def test_pickled_weights_in_a_checkpoints_model_are_refused(run, tmp_path):
    ckpt = run / "checkpoints" / "iter_000001"
    marker = tmp_path / "pwned"
    torch.save(_Payload(marker), ckpt / "model" / "pytorch_model.bin")
    for args in (["eval", str(ckpt), "--tasks", "2"], ["export", str(ckpt), str(tmp_path / "out")]):
        out = cli(*args, check=False, env=_env(tmp_path))
        assert out.returncode == 2 and "pytorch_model.bin, a pickled weight file" in out.stderr, out.stderr
    assert not marker.exists()
