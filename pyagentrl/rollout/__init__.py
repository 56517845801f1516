"""Rollouts: generation engines (vLLM in process, HF generate) and the multi-turn agent loop that fills the flat
training batch."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pyagentrl.rollout.batch import Rollout, TokenBatch, merge_rollouts
from pyagentrl.rollout.config import RolloutConfig
from pyagentrl.rollout.engine import Generation, RolloutEngine, SamplingConfig
from pyagentrl.rollout.loop import collect

ENGINES = ("vllm", "hf")


def make_engine(name: str, model: str | Path, **options: Any) -> RolloutEngine:
    """The engine ``name`` ("vllm" or "hf") holding ``model`` ("embedded", "tiny" or a model directory)."""
    if name == "hf":
        from pyagentrl.rollout.hf_engine import HFEngine

        return HFEngine(model, **options)
    if name == "vllm":
        from pyagentrl.rollout.vllm_engine import VLLMEngine

        return VLLMEngine(model, **options)
    raise ValueError(f"engine must be one of {ENGINES}, got {name!r}")


__all__ = [
    "ENGINES",
    "Generation",
    "Rollout",
    "RolloutConfig",
    "RolloutEngine",
    "SamplingConfig",
    "TokenBatch",
    "collect",
    "make_engine",
    "merge_rollouts",
]
