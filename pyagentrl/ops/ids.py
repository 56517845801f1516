"""Dense ids: what the ops take for groups, trajectories and anchor states."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from pyagentrl.ops import _checks
from pyagentrl.ops._dispatch import run


def factorize_pairs(a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, int]:
    """Dense ids of the pairs (a_i, b_i), numbered in order of first appearance, and their count.

    This is how anchor-state groups are formed: pairs (task group, state key) never merge across
    task groups, whatever the keys are (GiGPO Eq. 6, docs/algorithms.md (G6)). Any int64 values are
    accepted (hashes too).
    """
    at = _checks.tensor(a, "a")
    if at.dtype != torch.int64 or at.dim() != 1:
        raise TypeError(f"a must be a 1-D int64 tensor, got {at.dtype} of shape {tuple(at.shape)}")
    bt = _checks.tensor(b, "b")
    if bt.dtype != torch.int64 or bt.shape != at.shape:
        raise ValueError(f"b must be int64 with shape {tuple(at.shape)}, got {bt.dtype} {tuple(bt.shape)}")
    _checks.same_device(bt, "b", at.device)
    return pair_ids(at, bt)


def pair_ids(a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, int]:
    """Unchecked core of :func:`factorize_pairs`, for ops that have validated ``a`` and ``b`` already."""
    dense, num = run("factorize_pairs", a.device, a, b)
    return dense, int(num)


def _hashable(x: Any) -> Any:
    """A dict key for one id: arrays key by shape, dtype and bytes; lists by their items."""
    if isinstance(x, np.ndarray):
        return ("ndarray", x.shape, x.dtype.str, x.tobytes())
    if isinstance(x, list):
        return tuple(_hashable(v) for v in x)
    if isinstance(x, np.generic):
        return x.item()
    return x


def factorize(values: np.ndarray | Sequence[Any] | torch.Tensor) -> tuple[torch.Tensor, int]:
    """Dense int64 ids (first-appearance order) for arbitrary ids such as verl's uid strings.

    Accepts a numpy array (object, str or numeric), a sequence, or a 1-D tensor; equal values get equal
    ids. Returns (ids [N] int64 on CPU, number of distinct values).
    """
    if isinstance(values, torch.Tensor):
        if values.dim() != 1:
            raise ValueError(f"values must be 1-D, got shape {tuple(values.shape)}")
        _, inverse = torch.unique(values, return_inverse=True)
        return factorize_pairs(torch.zeros_like(inverse), inverse)
    if isinstance(values, np.ndarray) and values.ndim != 1:
        raise ValueError(f"values must be 1-D, got shape {values.shape}")
    table: dict[Any, int] = {}
    try:
        dense = [table.setdefault(v, len(table)) for v in values]
    except TypeError:  # unhashable entries (arrays, lists): key them by content
        table.clear()
        dense = [table.setdefault(_hashable(v), len(table)) for v in values]
    return torch.tensor(dense, dtype=torch.int64), len(table)
