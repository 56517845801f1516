"""Runs an op's compiled kernel where one exists for the tensors' device, else its reference."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any

import torch

from pyagentrl.ops import reference
from pyagentrl.ops._library import has_kernel

_state = threading.local()


@contextlib.contextmanager
def reference_ops() -> Iterator[None]:
    """Within this context (this thread only) the public API runs the PyTorch references."""
    previous = getattr(_state, "force_reference", False)
    _state.force_reference = True
    try:
        yield
    finally:
        _state.force_reference = previous


# The one op with a gradient; the others compute advantages, which are constants of the policy gradient.
_DIFFERENTIABLE = {"per_action_clipped_loss"}


def uses_kernel(op_name: str, device: torch.device) -> bool:
    """Whether :func:`run` takes the compiled kernel of ``op_name`` for ``device`` (else the reference)."""
    return not getattr(_state, "force_reference", False) and has_kernel(op_name, device)


def run(op_name: str, device: torch.device, *args: Any) -> Any:
    if op_name not in _DIFFERENTIABLE:
        # Without this, a kernel output would claim requires_grad and fail in backward, while the reference
        # path would silently differentiate: detached inputs make both paths constants.
        args = tuple(a.detach() if isinstance(a, torch.Tensor) else a for a in args)
    if uses_kernel(op_name, device):
        return getattr(torch.ops.pyagentrl, op_name)(*args)
    return getattr(reference, op_name)(*args)
