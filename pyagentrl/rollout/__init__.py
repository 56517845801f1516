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

# The options each engine takes from a config's `rollout.engine_options` (its constructor's keywords and, for vLLM,
# the `vllm.LLM` settings that tune speed and memory). Closed lists: an option that loads or runs something else, such
# as `trust_remote_code` (the config's own top-level setting) or a custom loader, cannot ride in on a stored config.
ENGINE_OPTIONS: dict[str, frozenset[str]] = {
    "hf": frozenset({"dtype", "device", "seed", "max_batch_size"}),
    "vllm": frozenset(
        {
            "dtype",
            "kv_cache_gib",
            "max_model_len",
            "seed",
            "enforce_eager",
            "tensor_parallel_size",
            "distributed_executor_backend",
            "gpu_memory_utilization",
            "max_num_seqs",
            "max_num_batched_tokens",
            "enable_prefix_caching",
            "enable_chunked_prefill",
            "block_size",
            "max_logprobs",
            "disable_custom_all_reduce",
        }
    ),
}


def check_engine_options(name: str, options: dict[str, Any]) -> None:
    """Raises ValueError, naming the option, for a key that engine ``name`` does not take from a config."""
    known = ENGINE_OPTIONS.get(name)
    if known is None:
        raise ValueError(f"engine must be one of {ENGINES}, got {name!r}")
    for key in options:
        if key == "trust_remote_code":
            raise ValueError(
                "trust_remote_code: not an engine option; set the config's top-level trust_remote_code (or eval's "
                "--trust-remote-code) to run code shipped with a model, and only for a model you trust"
            )
        if key not in known:
            expected = ", ".join(sorted(known))
            raise ValueError(f"{key}: not an option of engine {str(name)!r}; expected one of {expected}")


def make_engine(name: str, model: str | Path, *, trust_remote_code: bool = False, **options: Any) -> RolloutEngine:
    """The engine ``name`` ("vllm" or "hf") holding ``model`` ("embedded", "tiny" or a model directory).
    ``trust_remote_code`` lets the model directory's own Python code run (HF's setting): only for a model you trust."""
    if name == "hf":
        from pyagentrl.rollout.hf_engine import HFEngine

        return HFEngine(model, trust_remote_code=trust_remote_code, **options)
    if name == "vllm":
        from pyagentrl.rollout.vllm_engine import VLLMEngine

        return VLLMEngine(model, trust_remote_code=trust_remote_code, **options)
    raise ValueError(f"engine must be one of {ENGINES}, got {name!r}")


__all__ = [
    "ENGINES",
    "ENGINE_OPTIONS",
    "Generation",
    "Rollout",
    "RolloutConfig",
    "RolloutEngine",
    "SamplingConfig",
    "TokenBatch",
    "check_engine_options",
    "collect",
    "make_engine",
    "merge_rollouts",
]
