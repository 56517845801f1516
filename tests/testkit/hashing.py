"""Strategies and oracles shared by the hashing tests."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from hypothesis import strategies as st

# Any code point Python can hold except surrogates, which cannot be encoded as UTF-8.
unicode_text = st.text(st.characters(exclude_categories=("Cs",)), max_size=60)
tokens = st.lists(unicode_text, max_size=12)


def partition(ids: Sequence[int] | np.ndarray) -> set[frozenset[int]]:
    """The partition of row indices that ids induce (labels forgotten)."""
    blocks: dict[int, set[int]] = {}
    for row, label in enumerate(np.asarray(ids).tolist()):
        blocks.setdefault(label, set()).add(row)
    return {frozenset(b) for b in blocks.values()}


def components(n: int, edges: list[tuple[int, int]]) -> set[frozenset[int]]:
    """Connected components of an undirected graph over 0..n-1 (independent oracle)."""
    parent = list(range(n))

    def find(x: int) -> int:
        while parent[x] != x:
            x = parent[x]
        return x

    for a, b in edges:
        parent[find(a)] = find(b)
    return partition([find(i) for i in range(n)])


def assert_dense(ids: np.ndarray, n: int) -> None:
    """Anchor ids are int64 of length n, numbered 0..K-1 by first appearance."""
    assert ids.dtype == np.int64 and ids.shape == (n,)
    seen: list[int] = []
    for label in ids.tolist():
        if label not in seen:
            assert label == len(seen)
            seen.append(label)
