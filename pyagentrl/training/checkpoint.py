"""Checkpoints: everything a run needs to continue as if it had never stopped.

``<run>/checkpoints/iter_000004/`` (after 4 iterations) holds ``deepspeed/`` (the engine's module and optimizer
states), ``model/`` (the policy as an HF directory: full weights, or the LoRA adapter), ``rng/rank<r>.pt`` (each
rank's Python, NumPy and torch RNG states), ``config.yaml`` and ``deepspeed.json`` (the run's settings) and
``state.json`` (the next iteration). It is written
under a temporary name and renamed when complete, then ``checkpoints/latest`` is replaced (atomically) with its
name: a run killed while saving resumes from the previous checkpoint.
"""

from __future__ import annotations

import json
import os
import random
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import torch

from pyagentrl.cache import atomic_write
from pyagentrl.training import actor as actor_lib
from pyagentrl.training.config import TrainConfig, recorded_deepspeed, save_config
from pyagentrl.training.distributed import World

LATEST = "latest"
# What only resuming reads: DeepSpeed's states (and the conversion scripts DeepSpeed writes beside them) and the RNGs.
RESUME_ONLY = ("deepspeed", "rng", "zero_to_fp32.py", "zero_to_torch.py")


class ResumeError(ValueError):
    """A run that cannot be resumed as asked (the message says why)."""


def checkpoint_name(iterations_done: int) -> str:
    return f"iter_{iterations_done:06d}"


def rng_state() -> dict[str, Any]:
    return {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}


def set_rng_state(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])


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
    torch.save(rng_state(), tmp / "rng" / f"rank{world.rank}.pt")
    state_dict = learner.gathered_state_dict()  # collective: gathered onto rank 0 under ZeRO-3
    if world.is_main:
        actor_lib.save_pretrained(learner.model, tokenizer, tmp / "model", state_dict)
        save_config(config, tmp / "config.yaml")  # its actor.deepspeed names the copy next to it
        (tmp / "deepspeed.json").write_text(json.dumps(recorded_deepspeed(learner.ds_config), indent=2) + "\n")
        state = {"next_iteration": iterations_done, "lora": lora, "world_size": world.size}
        (tmp / "state.json").write_text(json.dumps(state) + "\n")
    world.barrier()
    if world.is_main:
        shutil.rmtree(final, ignore_errors=True)
        os.replace(tmp, final)
        atomic_write(root / LATEST, final.name + "\n")
        prune(root, final, keep)
    world.barrier()
    return final


def prune(root: Path, current: Path, keep: int) -> None:
    """Removes the checkpoints after ``current`` (left by a run killed before it moved ``latest``; the iterations
    they hold are being made again) and all but the newest ``keep`` up to it (``current`` always stays)."""
    done = sorted(p for p in root.glob("iter_*") if p.is_dir())
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
    is gone raises: resuming from the start would silently discard the run's progress."""
    pointer = root / LATEST
    if not pointer.is_file():
        return None
    path = root / pointer.read_text().strip()
    if not (path / "state.json").is_file():
        raise FileNotFoundError(f"{pointer} names {path.name}, which is missing or incomplete")
    return path


def read_state(path: Path, world_size: int) -> dict[str, Any]:
    """The checkpoint's ``state.json``, checked against the world that is to resume it (before any start-up)."""
    state: dict[str, Any] = json.loads((path / "state.json").read_text())
    if not (path / "deepspeed").is_dir():
        raise ResumeError(
            f"{path} holds the model only (its optimizer states were removed, as `pyagentrl study` does once a run "
            "is scored with `keep: model`): it can be evaluated or loaded, not resumed"
        )
    saved_world = int(state.get("world_size", 1))
    if saved_world != world_size:
        raise ResumeError(
            f"{path} was saved by {saved_world} process(es); resume it with {saved_world} (ZeRO's optimizer states "
            f"and each rank's sampling seeds depend on the number of processes), not {world_size}"
        )
    return state


def is_lora_checkpoint(path: Path) -> bool:
    """Whether the checkpoint at ``path`` holds a LoRA adapter (``model/`` in peft's format), not full weights."""
    return bool(json.loads((path / "state.json").read_text()).get("lora", False))


def load_checkpoint_policy(path: Path) -> Any:
    """The policy of the checkpoint at ``path`` as a transformers causal LM, in the dtype it was saved in: the full
    weights of ``model/``, or for a LoRA run the run's base model (its config's ``model``) with the adapter of
    ``model/`` on it, unmerged (a peft model: ``actor.hf_weights`` or peft's ``merge_and_unload`` merge it). What
    `pyagentrl eval` and `pyagentrl export` load."""
    from transformers import AutoModelForCausalLM

    from pyagentrl.rollout.models import resolve_model
    from pyagentrl.training.config import load_config

    if not is_lora_checkpoint(path):
        return AutoModelForCausalLM.from_pretrained(path / "model", dtype="auto")
    try:
        from peft import PeftModel
    except ImportError as exc:
        raise ImportError(
            f"{path} holds a LoRA adapter, which needs peft: pip install 'pyagentrl[train]' ({exc})"
        ) from exc
    base_path = resolve_model(load_config(path / "config.yaml").model)
    return PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(base_path, dtype="auto"), path / "model")


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
    rng = path / "rng" / f"rank{world.rank}.pt"
    set_rng_state(torch.load(rng, weights_only=False))
    return int(state["next_iteration"])
