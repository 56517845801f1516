"""SimHash fingerprints equal to the PyPI package ``simhash`` 2.1.2 with its defaults.

``simhash(texts)[i] == simhash.Simhash(texts[i]).value``. The package normalises a text with
``str.lower`` and the regular expression ``[\\w\\u4e00-\\u9fcc]``, both of which follow the running
interpreter's Unicode version. ASCII texts are normalised natively (there the rules reduce to
``[a-z0-9_]``). For other texts the extension applies a per-code-point table that it owns and
builds, page by page (4,096 code points) the first time a page occurs, from this interpreter's
normalisation of each character (:func:`normalize_each`, its callback). Texts holding a capital
sigma, whose lowercase depends on its neighbours, are normalised whole by the same callback. A
batch is one call into the extension, which calls back at most twice (new pages, capital sigmas).
"""

from __future__ import annotations

import bisect
import math
import numbers
import re
from collections.abc import Iterable, Mapping, Sequence
from functools import partial
from typing import Any

import numpy as np
import numpy.typing as npt

from ._args import item_problem, native_call, sequence, threads
from ._native import native

# The package's default `reg`: what counts as a letter.
_LETTERS = re.compile(r"[\w\u4e00-\u9fcc]+")
_NON_LETTER = re.compile(r"[^\w\u4e00-\u9fcc]")
_CAPITAL_SIGMA = "\u03a3"  # lowercases to "σ" or, ending a word, "ς" (str.lower's one context rule)

Features = Mapping[str, float] | Sequence[str | tuple[str, float]]


def _normalize(text: str) -> str:
    return "".join(_LETTERS.findall(text.lower()))


def normalize_each(texts: list[str]) -> list[str]:
    """The package's normalisation of each text, by this interpreter's rules (the extension's callback).

    The extension asks for whole texts (those holding a capital sigma) and for table pages, each
    character of a page as its own text; a page is normalised in one go, as a string, when every
    character lowercases to one (str.lower is context-free but for the capital sigma).
    """
    if texts and all(len(t) == 1 for t in texts):
        chars = "".join(texts)
        lowered = chars.lower()
        if len(lowered) == len(chars) and _CAPITAL_SIGMA not in chars:
            return ["" if c == "\0" else c for c in _NON_LETTER.sub("\0", lowered)]
    return [_normalize(t) for t in texts]


def simhash(texts: Sequence[str], *, num_threads: int | None = None) -> npt.NDArray[np.uint64]:
    """64-bit fingerprints of texts (character 4-grams of the lowercased letters, MD5-hashed)."""
    return simhash_unchecked(sequence(texts, "texts"), threads(num_threads), "texts")


def simhash_unchecked(texts: Sequence[Any], n_threads: int, name: str) -> npt.NDArray[np.uint64]:
    """:func:`simhash` of checked arguments (one call into the extension); errors name ``name``."""
    return native_call(
        name,
        "a sequence of str",
        native.simhash_texts,
        texts,
        normalize_each,
        n_threads,
        locate=partial(item_problem, texts, name, str),
    )


def simhash_weighted(documents: Sequence[Features]) -> npt.NDArray[np.uint64]:
    """Fingerprints of explicitly weighted features, as ``simhash.Simhash(features).value``.

    Each document is a ``{feature: weight}`` mapping, a list of ``(feature, weight)`` pairs or a
    list of features (weight 1). Weights must be finite and non-negative; results equal the
    package's for integer weights and any weights whose sums are exact in floating point.
    """
    documents = sequence(documents, "documents")
    features: list[str] = []
    weights: list[float] = []
    offsets = [0]
    for i, doc in enumerate(documents):
        is_mapping = isinstance(doc, Mapping)
        if not is_mapping and (isinstance(doc, (str, bytes)) or not isinstance(doc, Iterable)):
            raise TypeError(f"documents[{i}] is {type(doc).__name__}; pass a list of features or a mapping")
        items: Iterable[Any] = doc.items() if isinstance(doc, Mapping) else doc
        for j, item in enumerate(items):
            try:
                feature, weight = _feature(item)
            except (TypeError, ValueError) as err:  # named here, so the happy path formats nothing
                place = f"documents[{i}][{item[0]!r}]" if is_mapping else f"documents[{i}][{j}]"
                raise type(err)(f"{place}{err}") from None
            features.append(feature)
            weights.append(weight)
        if len(features) == offsets[-1]:
            raise ValueError(f"documents[{i}] has no features")
        offsets.append(len(features))
    w = np.asarray(weights, dtype=np.float64)
    try:
        return native.simhash_weighted(features, w, offsets)
    except UnicodeEncodeError:
        for k, feature in enumerate(features):
            try:
                feature.encode("utf-8")
            except UnicodeEncodeError as err:
                i = bisect.bisect_right(offsets, k) - 1
                doc, j = documents[i], k - offsets[i]
                key = list(doc)[j] if isinstance(doc, Mapping) else j
                raise ValueError(
                    f"documents[{i}][{key!r}]: the feature holds a lone surrogate at position {err.start}, "
                    "which UTF-8 cannot encode"
                ) from None
        raise


def _feature(item: Any) -> tuple[str, float]:
    """(feature, weight) of one list item or mapping entry; error messages continue the item's name."""
    if isinstance(item, str):
        feature, weight = item, 1.0
    elif isinstance(item, tuple | list) and len(item) == 2:
        feature, weight = item
    else:
        sized = isinstance(item, tuple | list)
        shape = f"a {type(item).__name__} of length {len(item)}" if sized else type(item).__name__
        raise TypeError(f" must be a feature str or a (feature, weight) pair, got {shape}")
    if not isinstance(feature, str):
        raise TypeError(f": the feature must be str, got {type(feature).__name__}")
    if isinstance(weight, bool) or not isinstance(weight, numbers.Real):
        raise TypeError(f": the weight must be a real number, got {type(weight).__name__}")
    weight = float(weight)
    if not (math.isfinite(weight) and weight >= 0):
        raise ValueError(f": weights must be finite and non-negative, got {weight!r}")
    return feature, weight


def hamming(a: npt.ArrayLike, b: npt.ArrayLike) -> npt.NDArray[np.uint8]:
    """Bitwise Hamming distance of (broadcast) uint64 fingerprints."""
    x = np.bitwise_xor(np.asarray(a, dtype=np.uint64), np.asarray(b, dtype=np.uint64))
    return np.bitwise_count(x)
