"""MinHash signatures equal, lane for lane, to datasketch 2.0, and datasketch's LSH banding.

``minhash_from_tokens(token_lists, num_perm, seed, scheme)[i]`` equals the ``hashvalues`` of
``datasketch.MinHash(num_perm=num_perm, seed=seed, scheme=scheme)`` after
``update_batch([t.encode("utf-8") for t in token_lists[i]])``, with datasketch's dtypes (uint32
for "affine32", uint64 for "legacy"). ``minhash_texts`` cuts texts into shingles first.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache, partial
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from ._args import (
    count,
    flag,
    integer,
    item_problem,
    lsh_weights,
    native_call,
    sequence,
    shingling,
    threads,
    token_list_problem,
    unit_threshold,
)
from ._native import native

Scheme = Literal["affine32", "legacy"]
Shingle = Literal["word", "word_ngram", "char_ngram"]
Signatures = npt.NDArray[np.uint32] | npt.NDArray[np.uint64]

_MERSENNE_61 = (1 << 61) - 1


@lru_cache(maxsize=16, typed=True)
def permutations(num_perm: int = 128, seed: int = 1, scheme: Scheme = "affine32") -> tuple[np.ndarray, np.ndarray]:
    """datasketch's permutation parameters (a, b) as uint64 arrays, drawn the way it draws them.

    The one check of ``num_perm``, the MinHash ``seed`` and ``scheme`` (the draw uses them).
    """
    count(num_perm, "num_perm", 1)
    integer(seed, "seed", 0, 2**32 - 1)  # numpy's RandomState seed range; None would draw a random seed
    gen = np.random.RandomState(seed)
    if scheme == "legacy":
        # One (a, b) pair per permutation, interleaved: the draw order is part of the spec.
        pairs = [
            (gen.randint(1, _MERSENNE_61, dtype=np.uint64), gen.randint(0, _MERSENNE_61, dtype=np.uint64))
            for _ in range(num_perm)
        ]
        a, b = np.array(pairs, dtype=np.uint64).T
    elif scheme == "affine32":
        # All of a (odd, so each map is a bijection on 32 bits), then all of b.
        a = gen.randint(0, 1 << 31, num_perm, dtype=np.uint32) * np.uint32(2) + np.uint32(1)
        b = gen.randint(0, 1 << 32, num_perm, dtype=np.uint32)
    else:
        raise ValueError(f"scheme must be 'affine32' or 'legacy', got {scheme!r}")
    a, b = np.ascontiguousarray(a, dtype=np.uint64), np.ascontiguousarray(b, dtype=np.uint64)
    a.flags.writeable = b.flags.writeable = False  # cached: shared by every caller
    return a, b


def minhash_from_tokens(
    token_lists: Sequence[Sequence[str]],
    num_perm: int = 128,
    seed: int = 1,
    scheme: Scheme = "affine32",
    *,
    num_threads: int | None = None,
) -> Signatures:
    """``[len(token_lists), num_perm]`` signatures of token sets (an empty set gives all 2^32 - 1)."""
    token_lists = sequence(token_lists, "token_lists")
    a, b = permutations(num_perm, seed, scheme)
    return native_call(
        "token_lists",
        "a sequence of lists of str",
        native.minhash_tokens,
        token_lists,
        scheme,
        a,
        b,
        threads(num_threads),
        locate=partial(token_list_problem, token_lists, "token_lists"),
    )


def shingles(text: str, shingle: Shingle = "word_ngram", n: int = 3, *, lowercase: bool = False) -> list[str]:
    """The set elements :func:`minhash_texts` hashes for ``text``, in text order.

    ``"word"``: the words of ``text.split()`` (words end exactly where ``str.split()`` ends them:
    Unicode White_Space and U+001C..U+001F); ``"word_ngram"``: runs of ``n`` words joined by one
    space; ``"char_ngram"``: runs of ``n`` characters. A text shorter than one n-gram gives one
    shingle (itself); a text without words gives none.
    """
    if not isinstance(text, str):
        raise TypeError(f"text must be str, got {type(text).__name__}")
    kind, n = shingling(shingle, n)
    return native.shingles(text, kind, n, flag(lowercase, "lowercase"))


def minhash_texts(
    texts: Sequence[str],
    num_perm: int = 128,
    seed: int = 1,
    scheme: Scheme = "affine32",
    *,
    shingle: Shingle = "word_ngram",
    n: int = 3,
    lowercase: bool = False,
    num_threads: int | None = None,
) -> Signatures:
    """Signatures of texts: equal to ``minhash_from_tokens([shingles(t, ...) for t in texts], ...)``."""
    texts = sequence(texts, "texts")
    kind, n = shingling(shingle, n)
    lowercase = flag(lowercase, "lowercase")
    perms = permutations(num_perm, seed, scheme)
    return minhash_texts_unchecked(texts, scheme, perms, kind, n, lowercase, threads(num_threads), "texts")


def minhash_texts_unchecked(
    texts: Sequence[Any],
    scheme: str,
    perms: tuple[np.ndarray, np.ndarray],
    shingle: str,
    n: int,
    lowercase: bool,
    n_threads: int,
    name: str,
) -> Signatures:
    """:func:`minhash_texts` of checked arguments (``perms`` from :func:`permutations`); errors name ``name``."""
    return native_call(
        name,
        "a sequence of str",
        native.minhash_texts,
        texts,
        scheme,
        *perms,
        shingle,
        n,
        lowercase,
        n_threads,
        locate=partial(item_problem, texts, name, str),
    )


def jaccard(sig_a: npt.ArrayLike, sig_b: npt.ArrayLike) -> float:
    """datasketch's Jaccard estimate: the share of equal lanes of two signatures."""
    a, b = np.asarray(sig_a), np.asarray(sig_b)
    if a.shape != b.shape or a.ndim != 1:
        raise ValueError(f"signatures must be 1-D of equal length, got shapes {a.shape} and {b.shape}")
    return float(np.count_nonzero(a == b)) / float(a.size)


def lsh_params(threshold: float, num_perm: int = 128, weights: tuple[float, float] = (0.5, 0.5)) -> tuple[int, int]:
    """(bands, rows per band) that ``datasketch.MinHashLSH(threshold, num_perm, weights)`` uses.

    ``threshold`` is in [0, 1], datasketch's domain (grouping takes (0, 1]).
    """
    threshold = unit_threshold(threshold, zero=True)
    return lsh_params_unchecked(threshold, count(num_perm, "num_perm", 1), *lsh_weights(weights))


@lru_cache(maxsize=64)
def lsh_params_unchecked(
    threshold: float, num_perm: int, fp_weight: float = 0.5, fn_weight: float = 0.5
) -> tuple[int, int]:
    """:func:`lsh_params` of checked arguments, cached (the optimisation takes milliseconds)."""
    bands, rows = native.lsh_params(threshold, num_perm, fp_weight, fn_weight)
    return int(bands), int(rows)
