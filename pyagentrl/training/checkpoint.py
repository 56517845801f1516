"""Checkpoints: everything a run needs to continue as if it had never stopped.

``<run>/checkpoints/iter_000004/`` (after 4 iterations) holds ``deepspeed/`` (the engine's module and optimizer
states), ``model/`` (the policy as an HF directory: full weights, or the LoRA adapter), ``rng/rank<r>.json`` (each
rank's Python, NumPy and torch RNG states), ``config.yaml`` and ``deepspeed.json`` (the run's settings),
``state.json`` (the next iteration) and ``manifest.json`` (every file's hash, signed: `pyagentrl.training.manifest`).
It is written under a temporary name and renamed when complete, then ``checkpoints/latest`` is replaced
(atomically) with its name: a run killed while saving resumes from the previous checkpoint.

Nothing here unpickles: the RNG states are JSON, and DeepSpeed's states (pickles, loaded by DeepSpeed) are loaded only
from a checkpoint whose signed manifest checks out, or one the user vouches for (``trusted``). ``latest`` is followed
only to an ``iter_NNNNNN`` directory of its own folder, and pruning deletes only such directories.
"""

from __future__ import annotations

import base64
import json
import os
import random
import re
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import torch

from pyagentrl.cache import atomic_write
from pyagentrl.training import actor as actor_lib
from pyagentrl.training import manifest
from pyagentrl.training.config import TrainConfig, recorded_deepspeed, save_config
from pyagentrl.training.distributed import World

LATEST = "latest"
# What only resuming reads: DeepSpeed's states (and the conversion scripts DeepSpeed writes beside them), the RNGs
# and the manifest that vouches for them.
RESUME_ONLY = ("deepspeed", "rng", "zero_to_fp32.py", "zero_to_torch.py", manifest.MANIFEST)
_NAME = re.compile(r"iter_\d{6,}")  # what checkpoint_name makes; `latest` may name nothing else


class ResumeError(ValueError):
    """A run that cannot be resumed as asked (the message says why)."""


def checkpoint_name(iterations_done: int) -> str:
    return f"iter_{iterations_done:06d}"


def is_checkpoint_name(name: str) -> bool:
    return _NAME.fullmatch(name) is not None


def rng_state() -> dict[str, Any]:
    """This process's Python, NumPy and torch RNG states as plain JSON values."""
    version, words, gauss = random.getstate()
    kind, keys, pos, has_gauss, cached = np.random.get_state(legacy=True)
    return {
        "python": [version, list(words), gauss],
        "numpy": [kind, np.asarray(keys).tolist(), int(pos), int(has_gauss), float(cached)],
        "torch": base64.b64encode(torch.get_rng_state().numpy().tobytes()).decode(),
    }


def set_rng_state(state: dict[str, Any]) -> None:
    """Restores what :func:`rng_state` returned (also the tensors and tuples of the older pickled files)."""
    version, words, gauss = state["python"]
    random.setstate((version, tuple(words), gauss))
    kind, keys, pos, has_gauss, cached = state["numpy"]
    np.random.set_state((kind, np.asarray(keys, dtype=np.uint32), pos, has_gauss, cached))
    saved = state["torch"]
    if isinstance(saved, str):
        saved = torch.frombuffer(bytearray(base64.b64decode(saved)), dtype=torch.uint8)
    torch.set_rng_state(saved)


def save(
    root: Path, iterations_done: int, learner: Any, tokenizer: Any, config: TrainConfig, world: World, keep: int
) -> Path:
    """Writes the checkpoint after ``iterations_done`` iterations (a collective call: every rank calls it)."""
    final = root / checkpoint_name(iterations_done)
    tmp = root / f".{final.name}.tmp"
    if world.is_main:
        shutil.rmtree(tmp, ignore_errors=True)
        (tmp / "rng").mkdir(parents=True)
    world.barrier()
    lora = actor_lib.is_lora(learner.model)
    learner.engine.save_checkpoint(str(tmp), tag="deepspeed", save_latest=False, exclude_frozen_parameters=lora)
    (tmp / "rng" / f"rank{world.rank}.json").write_text(json.dumps(rng_state()) + "\n")
    state_dict = learner.gathered_state_dict()  # collective: gathered onto rank 0 under ZeRO-3
    if world.is_main:
        actor_lib.save_pretrained(learner.model, tokenizer, tmp / "model", state_dict)
        save_config(config, tmp / "config.yaml")  # its actor.deepspeed names the copy next to it
        (tmp / "deepspeed.json").write_text(json.dumps(recorded_deepspeed(learner.ds_config), indent=2) + "\n")
        state = {"next_iteration": iterations_done, "lora": lora, "world_size": world.size}
        (tmp / "state.json").write_text(json.dumps(state) + "\n")
    world.barrier()
    if world.is_main:
        manifest.seal(tmp)  # every rank's files are written: the manifest vouches for all of them
        shutil.rmtree(final, ignore_errors=True)
        os.replace(tmp, final)
        atomic_write(root / LATEST, final.name + "\n")
        prune(root, final, keep)
    world.barrier()
    return final


def prune(root: Path, current: Path, keep: int) -> None:
    """Removes the checkpoints after ``current`` (left by a run killed before it moved ``latest``; the iterations
    they hold are being made again) and all but the newest ``keep`` up to it (``current`` always stays). Only real
    ``iter_NNNNNN`` directories of ``root`` are removed (no link, nothing outside it), and none when ``current`` is
    not one of them."""
    if current.parent.resolve() != root.resolve() or not is_checkpoint_name(current.name):
        raise ValueError(f"prune: {current} is not a checkpoint of {root}")
    done = sorted(p for p in root.iterdir() if is_checkpoint_name(p.name) and p.is_dir() and not p.is_symlink())
    for stale in (p for p in done if p.name > current.name):
        shutil.rmtree(stale, ignore_errors=True)
    kept = [p for p in done if p.name <= current.name]
    if keep > 0:
        for old in kept[:-keep]:
            if old != current:
                shutil.rmtree(old, ignore_errors=True)


def keep_model_only(root: Path) -> Path:
    """Reduces the checkpoints under ``root`` to the latest one without what only resuming reads: its model, config,
    state and eval stay (to load or evaluate), and :func:`read_state` then refuses to resume it, by name."""
    last = latest(root)
    if last is None:
        raise FileNotFoundError(f"{root}: no checkpoint to keep")
    prune(root, last, keep=1)
    for name in RESUME_ONLY:
        path = last / name
        if path.is_dir():
            shutil.rmtree(path)
        elif path.exists():
            path.unlink()
    return last


def latest(root: Path) -> Path | None:
    """The checkpoint ``latest`` names; None when no checkpoint was completed yet. A pointer to a checkpoint that
    is gone raises: resuming from the start would silently discard the run's progress. So does a pointer that names
    anything but an ``iter_NNNNNN`` directory of ``root`` (a path elsewhere, ``..``, a link, another name)."""
    pointer = root / LATEST
    if not pointer.is_file():
        return None
    try:
        name = pointer.read_text().strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise ResumeError(f"{pointer} is unreadable ({exc})") from None
    if not is_checkpoint_name(name):
        raise ResumeError(
            f"{pointer} names {name[:80]!r}, not a checkpoint of this folder (iter_NNNNNN): refused, nothing resumed "
            "or deleted"
        )
    path = root / name
    if path.is_symlink():
        raise ResumeError(f"{pointer} names {name}, which is a link: refused, nothing resumed or deleted")
    if not (path / "state.json").is_file():
        raise FileNotFoundError(f"{pointer} names {path.name}, which is missing or incomplete")
    return path


def read_state(path: Path, world_size: int, trusted: bool = False) -> dict[str, Any]:
    """The checkpoint's ``state.json``, checked against the world that is to resume it and, unless ``trusted``,
    against its signed manifest (before any start-up: :func:`restore` unpickles DeepSpeed's states)."""
    try:
        state: dict[str, Any] = json.loads((path / "state.json").read_text())
        if not isinstance(state, dict):
            raise ValueError("not a JSON object")
        next_iteration, saved_world = state["next_iteration"], state.get("world_size", 1)
        if not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in (next_iteration, saved_world)):
            raise ValueError("next_iteration and world_size must be integers >= 0")
    except (OSError, UnicodeDecodeError, ValueError, KeyError) as exc:
        raise ResumeError(f"{path / 'state.json'} is malformed ({exc})") from None
    if not (path / "deepspeed").is_dir():
        raise ResumeError(
            f"{path} holds the model only (its optimizer states were removed, as `pyagentrl study` does once a run "
            "is scored with `keep: model`): it can be evaluated or loaded, not resumed"
        )
    if saved_world != world_size:
        raise ResumeError(
            f"{path} was saved by {saved_world} process(es); resume it with {saved_world} (ZeRO's optimizer states "
            f"and each rank's sampling seeds depend on the number of processes), not {world_size}"
        )
    if not trusted:
        try:
            manifest.verify(path)
        except manifest.ManifestError as exc:
            raise ResumeError(str(exc)) from None
    return state


def is_lora_checkpoint(path: Path) -> bool:
    """Whether the checkpoint at ``path`` holds a LoRA adapter (``model/`` in peft's format), not full weights."""
    return bool(json.loads((path / "state.json").read_text()).get("lora", False))


# Weight files that torch loads with pickle: a checkpoint's policy is safetensors, so one of these was put there.
PICKLED_WEIGHTS = ("*.bin", "*.pt", "*.pth", "*.pkl", "*.pickle", "*.ckpt")


def check_policy_files(path: Path) -> None:
    """Raises ResumeError when the checkpoint's ``model/`` holds pickled weights, which pyagentrl never writes
    (it saves safetensors) and which would run code if a loader fell back to them."""
    pickled = sorted(p.name for pattern in PICKLED_WEIGHTS for p in (path / "model").glob(pattern))
    if pickled:
        raise ResumeError(
            f"{path / 'model'} holds {pickled[0]}, a pickled weight file, which pyagentrl does not write (its "
            "checkpoints hold safetensors): refused, as loading it could run code"
        )


def load_checkpoint_policy(path: Path, trust_remote_code: bool = False) -> Any:
    """The policy of the checkpoint at ``path`` as a transformers causal LM, in the dtype it was saved in: the full
    weights of ``model/``, or for a LoRA run the run's base model (its config's ``model``) with the adapter of
    ``model/`` on it, unmerged (a peft model: ``actor.hf_weights`` or peft's ``merge_and_unload`` merge it). What
    `pyagentrl eval` and `pyagentrl export` load: safetensors only, and the model's own code runs only with
    ``trust_remote_code`` (the caller's setting, never the checkpoint's)."""
    from transformers import AutoModelForCausalLM

    from pyagentrl.rollout.models import resolve_model
    from pyagentrl.training.config import load_stored_config

    check_policy_files(path)
    options: dict[str, Any] = {"dtype": "auto", "use_safetensors": True, "trust_remote_code": trust_remote_code}
    if not is_lora_checkpoint(path):
        return AutoModelForCausalLM.from_pretrained(path / "model", **options)
    try:
        from peft import PeftModel
    except ImportError as exc:
        raise ImportError(
            f"{path} holds a LoRA adapter, which needs peft: pip install 'pyagentrl[train]' ({exc})"
        ) from exc
    base_path = resolve_model(load_stored_config(path / "config.yaml").model)
    base = AutoModelForCausalLM.from_pretrained(base_path, dtype="auto", trust_remote_code=trust_remote_code)
    return PeftModel.from_pretrained(base, path / "model")


def _load_module(src: dict[str, torch.Tensor], dst: torch.nn.Module) -> None:
    """DeepSpeed's module states into the learner's module: every trainable weight must be there (a LoRA run saves
    those alone). Checkpoints written before the policy was wrapped for the engine name its weights without the
    wrapper's prefix."""
    from pyagentrl.training.learner import PolicyScorer

    if src and not any(key.startswith(PolicyScorer.PREFIX) for key in src):
        src = {PolicyScorer.PREFIX + key: value for key, value in src.items()}
    missing = [name for name, param in dst.named_parameters() if param.requires_grad and name not in src]
    if missing:
        raise ResumeError(f"the checkpoint's module states lack {len(missing)} trainable weight(s): {missing[:3]}")
    dst.load_state_dict(src, strict=False)  # the frozen weights of a LoRA run are the base model's, not saved


def restore(path: Path, state: dict[str, Any], learner: Any, world: World) -> int:
    """Loads the checkpoint at ``path`` (``state`` from :func:`read_state`) into ``learner`` and this rank's RNGs
    (a collective call); returns the next iteration."""
    loaded, _ = learner.engine.load_checkpoint(
        str(path), tag="deepspeed", load_lr_scheduler_states=True, custom_load_fn=_load_module
    )
    if loaded is None:
        raise RuntimeError(f"DeepSpeed could not load the checkpoint in {path / 'deepspeed'}")
    rng = path / "rng" / f"rank{world.rank}.json"
    if rng.is_file():
        set_rng_state(json.loads(rng.read_text()))
    else:  # written before the RNG states were JSON: a pickle, loaded only from a checkpoint the user vouched for
        set_rng_state(torch.load(rng.with_suffix(".pt"), weights_only=False))
    return int(state["next_iteration"])
