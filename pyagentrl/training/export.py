"""``pyagentrl export CHECKPOINT OUT_DIR``: a checkpoint's policy as a plain HF model directory, for serving or
sharing without pyagentrl.

``OUT_DIR`` gets ``config.json``, the weights as safetensors (a LoRA adapter merged into the base model's weights by
peft's ``merge_and_unload``, so the directory holds no adapter), ``generation_config.json``, the tokenizer with its
chat template (the checkpoint's own copy, else the run's base model's) and ``pyagentrl_export.json`` (where it came
from). ``transformers.AutoModelForCausalLM.from_pretrained(OUT_DIR)``, ``AutoTokenizer.from_pretrained(OUT_DIR)`` and
``vllm.LLM(OUT_DIR)`` load it as it is. The weights keep the dtype they were saved in.

Both arguments are checked before any model is loaded, and a bad one stops the command in one line naming it. The
directory is written under a temporary name beside ``OUT_DIR`` and renamed when complete: a crash leaves no
half-written export.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
from pathlib import Path
from typing import Any

from pyagentrl.training.checkpoint import ResumeError, check_policy_files, is_lora_checkpoint, load_checkpoint_policy


class ExportError(ValueError):
    """An export refused before any work (the message names the argument)."""


def check_checkpoint(checkpoint: Path) -> bool:
    """Raises :class:`ExportError` unless ``checkpoint`` is a checkpoint directory holding a policy; returns whether
    that policy is a LoRA adapter."""
    if not checkpoint.exists():
        raise ExportError(f"CHECKPOINT {checkpoint}: no such directory")
    if not (checkpoint / "state.json").is_file() or not (checkpoint / "config.yaml").is_file():
        raise ExportError(
            f"CHECKPOINT {checkpoint} is not a checkpoint directory (<run>/checkpoints/iter_NNNNNN): it lacks "
            "state.json or config.yaml"
        )
    try:
        lora = is_lora_checkpoint(checkpoint)
    except (OSError, ValueError) as exc:
        raise ExportError(f"CHECKPOINT {checkpoint}: unreadable state.json ({exc})") from None
    try:
        check_policy_files(checkpoint)
    except ResumeError as exc:
        raise ExportError(f"CHECKPOINT {exc}") from None
    expected = "adapter_config.json" if lora else "config.json"
    if not (checkpoint / "model" / expected).is_file():
        what = "LoRA adapter" if lora else "model"
        raise ExportError(
            f"CHECKPOINT {checkpoint} holds no policy: its state.json names a {what}, but model/{expected} is missing"
        )
    if lora:
        import importlib.util

        if importlib.util.find_spec("peft") is None:
            raise ExportError(
                f"CHECKPOINT {checkpoint} holds a LoRA adapter: merging it needs peft (pip install 'pyagentrl[train]')"
            )
        from pyagentrl.training.config import load_stored_config

        base = load_stored_config(checkpoint / "config.yaml").model
        if base not in ("embedded", "tiny") and not Path(base).expanduser().is_dir():
            raise ExportError(
                f"CHECKPOINT {checkpoint} holds a LoRA adapter on the base model {base!r} (its config's model), "
                "which is not a directory here"
            )
    return lora


def check_out_dir(out_dir: Path) -> None:
    """Raises :class:`ExportError` when ``out_dir`` exists and is not an empty directory."""
    if out_dir.is_dir():
        if any(out_dir.iterdir()):
            raise ExportError(f"OUT_DIR {out_dir} exists and is not empty: give a new or empty directory")
    elif out_dir.exists():
        raise ExportError(f"OUT_DIR {out_dir} exists and is not a directory: give a new or empty directory")


def export_checkpoint(
    checkpoint: str | os.PathLike[str], out_dir: str | os.PathLike[str], trust_remote_code: bool = False
) -> Path:
    """Writes the policy of ``checkpoint`` (``<run>/checkpoints/iter_NNNNNN``) to ``out_dir`` as a plain HF model
    directory (LoRA merged, with the tokenizer) and returns ``out_dir``. ``out_dir`` must be new or empty; both are
    checked before any work (:class:`ExportError`, naming the argument). The model's own code runs only with
    ``trust_remote_code`` (this call's, never the checkpoint's)."""
    source, out = Path(checkpoint).expanduser(), Path(out_dir).expanduser()
    lora = check_checkpoint(source)
    check_out_dir(out)

    final = out.resolve()  # a name to put the temporary directory beside, whatever `out` looks like ("." too)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = final.parent / f".{final.name}-export-{secrets.token_hex(4)}"
    tmp.mkdir()
    try:
        summary = _write(source, lora, tmp, trust_remote_code)
        os.replace(tmp, final)  # replaces an empty directory; fails if one appeared with files in it meanwhile
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    files = ", ".join(sorted(p.name for p in out.iterdir()))
    print(f"Exported {source} to {out}: {summary}. Files: {files}")
    return out


def _write(checkpoint: Path, lora: bool, out: Path, trust_remote_code: bool) -> str:
    """Fills ``out``; returns what it wrote, in words."""
    import torch

    policy = load_checkpoint_policy(checkpoint, trust_remote_code)
    if lora:
        adapter = json.loads((checkpoint / "model" / "adapter_config.json").read_text())
        rank, alpha, base = adapter.get("r"), adapter.get("lora_alpha"), _base_model(checkpoint)
        model: Any = policy.merge_and_unload()
        what = f"LoRA adapter (rank {rank}, alpha {alpha:g}) merged into {base}"
    else:
        model, rank, alpha, base = policy, None, None, None
        what = "full weights"
    model.config.use_cache = True  # a run with gradient checkpointing saved it off; inference wants the KV cache
    model.save_pretrained(out)
    _save_tokenizer(checkpoint, out, trust_remote_code)
    params = sum(p.numel() for p in model.parameters())
    dtypes = sorted({str(p.dtype).removeprefix("torch.") for p in model.parameters()})
    state = json.loads((checkpoint / "state.json").read_text())
    provenance = {
        "checkpoint": str(checkpoint.resolve()),
        "iterations_done": state.get("next_iteration"),
        "lora": {"rank": rank, "alpha": alpha, "base_model": base} if lora else None,
        "parameters": params,
        "dtype": dtypes[0] if len(dtypes) == 1 else dtypes,
        "torch": torch.__version__,
    }
    (out / "pyagentrl_export.json").write_text(json.dumps(provenance, indent=2) + "\n")
    return f"{what}; {params:,} parameters, {'/'.join(dtypes)}"


def _base_model(checkpoint: Path) -> str:
    from pyagentrl.rollout.models import resolve_model
    from pyagentrl.training.config import load_stored_config

    return str(resolve_model(load_stored_config(checkpoint / "config.yaml").model))


def _save_tokenizer(checkpoint: Path, out: Path, trust_remote_code: bool) -> None:
    """The tokenizer the checkpoint stores (the trainer saves it beside the policy), else the run's base model's."""
    from transformers import AutoTokenizer

    own = checkpoint / "model"
    source = own if (own / "tokenizer_config.json").is_file() else Path(_base_model(checkpoint))
    AutoTokenizer.from_pretrained(source, trust_remote_code=trust_remote_code).save_pretrained(out)
