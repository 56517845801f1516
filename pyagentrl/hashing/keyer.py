"""StateKeyer: observations and task-group ids in, anchor ids for the advantage ops out."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from ._args import (
    flag,
    group_id_array,
    hamming_k,
    item_problem,
    key_bits,
    native_call,
    sequence,
    shingling,
    threads,
    unit_threshold,
)
from ._native import native
from .canonical import Canonicalizer, resolve
from .fingerprints import simhash_unchecked
from .grouping import AnchorIds, key_rows
from .keys import Bits, keys_unchecked
from .minhash import Scheme, Shingle, lsh_params_unchecked, minhash_texts_unchecked, permutations

Mode = Literal["exact", "minhash", "simhash"]

NAME = "observations"


def _first_rows(ids: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
    """Row of each id's first appearance, for ids numbered by first appearance (0, 1, 2, ...)."""
    if ids.size == 0:
        return np.empty(0, dtype=np.int64)
    previous_max = np.maximum.accumulate(np.concatenate(([-1], ids[:-1])))
    return np.flatnonzero(ids > previous_max)


@dataclass(frozen=True)
class StateKeyer:
    """Groups the observations of each task group into states; ``assign`` gives anchor ids.

    ``mode="exact"`` keys str, bytes or numpy arrays (``bits`` 64 or 128). ``mode="minhash"``
    joins texts whose shingle sets (``shingle``, ``ngram``) have estimated Jaccard >= ``threshold``
    via LSH; ``mode="simhash"`` joins texts whose fingerprints are within ``k`` bits. Approximate
    modes trade more repeated states (denser step-level credit) for the risk of merging states
    that differ in one token ("cabinet 1" vs "cabinet 2"); measure both on your environment.

    ``canonicalize`` (a preset name from ``CANONICALIZERS`` or a ``str -> str`` callable) runs
    on every observation first. ``num_threads=None`` uses all cores (or RAYON_NUM_THREADS).

    Settings are checked once, here; ``assign`` checks its two arguments and calls the
    extension directly: three calls per batch in the approximate modes (distinct texts,
    sketches, grouping), two in exact mode (keys, grouping).
    """

    mode: Mode = "exact"
    canonicalize: str | Canonicalizer | None = None
    bits: Bits = 64
    threshold: float = 0.8
    num_perm: int = 128
    seed: int = 1
    scheme: Scheme = "affine32"
    shingle: Shingle = "word_ngram"
    ngram: int = 3
    lowercase: bool = False
    k: int = 3
    num_threads: int | None = None
    _hook: Canonicalizer | None = field(init=False, repr=False, compare=False)
    _threads: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.mode not in ("exact", "minhash", "simhash"):
            raise ValueError(f"mode must be 'exact', 'minhash' or 'simhash', got {self.mode!r}")
        key_bits(self.bits)
        object.__setattr__(self, "_threads", threads(self.num_threads))
        if self.mode == "minhash":
            permutations(self.num_perm, self.seed, self.scheme)  # checks num_perm, seed and scheme
            unit_threshold(self.threshold)
            shingling(self.shingle, self.ngram, "ngram")
            flag(self.lowercase, "lowercase")
        if self.mode == "simhash":
            hamming_k(self.k)
        object.__setattr__(self, "_hook", resolve(self.canonicalize))

    def canonical(self, observations: Sequence[Any]) -> Sequence[Any]:
        """Observations after the canonicalisation hook (unchanged without one).

        The presets take str only; a callable hook gets whatever the observations are.
        """
        observations = sequence(observations, NAME)
        if self._hook is None:
            return observations
        if isinstance(self.canonicalize, str):
            for i, o in enumerate(observations):
                if not isinstance(o, str):
                    raise TypeError(
                        f"observations[{i}] is {type(o).__name__}: the canonicalize preset "
                        f"{self.canonicalize!r} takes str (key bytes and arrays without canonicalize)"
                    )
        return [self._hook(o) for o in observations]

    def _sketch(self, texts: Sequence[Any]) -> np.ndarray:
        if self.mode == "minhash":
            perms = permutations(self.num_perm, self.seed, self.scheme)
            return minhash_texts_unchecked(
                texts, self.scheme, perms, self.shingle, self.ngram, self.lowercase, self._threads, NAME
            )
        return simhash_unchecked(texts, self._threads, NAME)

    def keys(self, observations: Sequence[Any]) -> np.ndarray:
        """Per-row keys (exact), MinHash signatures or SimHash fingerprints, after canonicalisation."""
        obs = self.canonical(observations)
        if self.mode == "exact":
            return keys_unchecked(obs, self.bits, 0, self._threads, NAME)
        self._check_texts(obs)
        return self._sketch(obs)

    def _check_texts(self, obs: Sequence[Any]) -> None:
        if len(obs) and not isinstance(obs[0], str):
            got = type(obs[0]).__name__
            raise TypeError(f"observations must be str in mode {self.mode!r}: observations[0] is {got}")

    def assign(self, observations: Sequence[Any], group_ids: npt.ArrayLike) -> AnchorIds:
        """Dense int64 anchor ids 0..K-1: equal ids within a task group mark one state."""
        obs = self.canonical(observations)
        groups = group_id_array(group_ids, len(obs))
        if self.mode == "exact":
            rows = key_rows(keys_unchecked(obs, self.bits, 0, self._threads, NAME))
            return native.group_exact(groups, rows, self._threads)
        self._check_texts(obs)
        # Equal texts always share a state, so sketch each distinct text once and cluster each
        # distinct (task group, text) pair once; rows then inherit their pair's id.
        locate = partial(item_problem, obs, NAME, str)
        pair, text = native_call(NAME, "all str", native.distinct_texts, obs, groups, self._threads, locate=locate)
        pair_rows, text_rows = _first_rows(pair), _first_rows(text)
        sketches = self._sketch([obs[i] for i in text_rows])[text[pair_rows]]
        if self.mode == "minhash":
            bands, width = lsh_params_unchecked(self.threshold, self.num_perm)
            labels = native.group_minhash(groups[pair_rows], sketches, bands, width, self.threshold, self._threads)
        else:
            labels = native.group_simhash(groups[pair_rows], sketches, self.k, self._threads)
        return labels[pair]
