"""Argument checks of the hashing API: each parameter is checked once, at the door, naming it.

Public functions (and ``StateKeyer`` at construction) check their arguments with the helpers
below, then call unchecked internals; nothing downstream checks again, and the extension
``pyagentrl_hash`` (rust_hash/bindings) converts its arguments without re-checking any (its core's
preconditions are the domains let through here, so the two sides agree). Where each is checked:

- ``bits`` (64 or 128): :func:`key_bits`.
- key ``seed`` (0..2**64 - 1): :func:`seed64`.
- ``num_perm`` (>= 1), MinHash ``seed`` (0..2**32 - 1, numpy's ``RandomState``) and ``scheme``:
  :func:`pyagentrl.hashing.minhash.permutations`, which draws from them (and caches the draw).
- ``shingle`` and ``n`` / ``ngram`` (>= 1): :func:`shingling`; ``lowercase``: :func:`flag`.
- ``threshold``: :func:`unit_threshold`, (0, 1] for grouping and ``StateKeyer``, [0, 1] (datasketch's
  domain, which the extension's optimiser shares) for ``lsh_params``.
- ``bands`` and ``rows_per_band`` (>= 1, product at most num_perm): :func:`banding`.
- LSH ``weights``: :func:`lsh_weights`.
- ``k`` (0..63): :func:`hamming_k`.
- ``num_threads`` (None, or 1..4 x the cores): :func:`threads`.
- ``group_ids`` (integers, one per row): :func:`group_id_array`; keys, signatures and
  fingerprints: the grouping functions that take them.
- Items (str, bytes, token lists): converted by the extension; on the error path only,
  :func:`native_call` finds the offending item and restates the error naming it (row and item).

On the Rust side (rust_hash/core/src/lib.rs) the core takes ``bits``, ``scheme`` and ``shingle`` as
types, whose conversions fail with the messages above for callers that bypass this package, and
states every numeric domain as a precondition; the bindings check nothing.
"""

from __future__ import annotations

import numbers
import os
from collections.abc import Callable, Sequence
from typing import Any, TypeVar, cast

import numpy as np
import numpy.typing as npt

T = TypeVar("T")


def sequence(value: Any, name: str) -> Sequence[Any]:
    """``value`` as a sequence of items; a lone str/bytes or a non-sequence is a TypeError."""
    if isinstance(value, (str, bytes)) or not isinstance(value, (Sequence, np.ndarray)):
        raise TypeError(f"{name} must be a sequence (list, tuple or 1-D array), got {type(value).__name__}")
    if isinstance(value, np.ndarray):
        if value.ndim != 1:
            raise ValueError(f"{name} must be 1-D, got an array of shape {value.shape}")
        return cast(Sequence[Any], value)
    return value


def _utf8_problem(text: str) -> str | None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as err:
        return f"holds a lone surrogate at position {err.start}, which UTF-8 cannot encode"
    return None


def _first_bad(
    values: Sequence[Any] | np.ndarray[Any, Any], kind: type | tuple[type, ...]
) -> tuple[int, type[Exception], str] | None:
    """(index, exception type, what is wrong) of the first item that is not a valid ``kind``."""
    expected = "bytes" if kind == (bytes, bytearray) else getattr(kind, "__name__", str(kind))
    for i, value in enumerate(values):
        if not isinstance(value, kind):
            return i, TypeError, f"is {type(value).__name__}, not {expected}"
        problem = _utf8_problem(value) if isinstance(value, str) else None
        if problem:
            return i, ValueError, problem
    return None


def item_problem(values: Sequence[Any], name: str, kind: type | tuple[type, ...]) -> tuple[type[Exception], str] | None:
    """The first item of ``values`` that is not a ``kind`` (str, or bytes/bytearray), or a str not
    encodable as UTF-8."""
    found = _first_bad(values, kind)
    if found is None:
        return None
    i, exc, problem = found
    return exc, f"{name}[{i}] {problem}"


def token_list_problem(token_lists: Sequence[Any], name: str) -> tuple[type[Exception], str] | None:
    """The first row of ``token_lists`` that is not a sequence of str, naming the row and the item."""
    for i, row in enumerate(token_lists):
        if isinstance(row, (str, bytes)) or not isinstance(row, (Sequence, np.ndarray)):
            return TypeError, f"{name}[{i}] (row {i}) is {type(row).__name__}, not a list of str"
        found = _first_bad(row, str)
        if found:
            j, exc, problem = found
            return exc, f"{name}[{i}][{j}] (row {i}, item {j}) {problem}"
    return None


def native_call(
    name: str,
    expected: str,
    fn: Callable[..., T],
    *args: Any,
    locate: Callable[[], tuple[type[Exception], str] | None] | None = None,
    **kwargs: Any,
) -> T:
    """Calls into the extension; an element error is restated naming the argument and the item.

    ``locate`` (called on the error path only) finds the offending item in Python, so the message
    can name its index; without it, or when it finds nothing, the extension's message is kept.
    """
    try:
        return fn(*args, **kwargs)
    except (TypeError, UnicodeEncodeError) as err:
        found = locate() if locate is not None else None
        if found is not None:
            exc, message = found
            what = expected if exc is TypeError else "encodable as UTF-8"
            raise exc(f"{name} must be {what}: {message}") from None
        if isinstance(err, UnicodeEncodeError):  # lone surrogates have no UTF-8 form
            raise ValueError(f"{name} must be encodable as UTF-8: {err}") from None
        raise TypeError(f"{name} must be {expected}: {err}") from None


def integer(value: Any, name: str, low: int, high: int | None = None) -> int:
    """``value`` as an int in ``low..=high`` (bool is not an int here)."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    value = int(value)
    if value < low or (high is not None and value > high):
        top = f"2**{high.bit_length()} - 1" if high is not None and high > 2**16 and high & (high + 1) == 0 else high
        bounds = f">= {low}" if high is None else f"in {low}..{top}"
        raise ValueError(f"{name} must be {bounds}, got {value}")
    return value


def count(value: Any, name: str, low: int, high: int | None = None) -> int:
    """A count-like setting (threads, permutations, n, k) as an int in ``low..=high``; anything else,
    a bool too, is a ValueError that states the range."""
    is_int = isinstance(value, (int, np.integer)) and not isinstance(value, bool)
    if is_int and value >= low and (high is None or value <= high):
        return int(value)
    what = f"an int in {low}..{high}" if high is not None else "a positive int" if low == 1 else f"an int >= {low}"
    raise ValueError(f"{name} must be {what}, got {value!r}")


def key_bits(bits: Any) -> int:
    """A key width: 64 or 128."""
    if isinstance(bits, bool) or bits not in (64, 128):
        raise ValueError(f"bits must be 64 or 128, got {bits!r}")
    return int(bits)


def flag(value: Any, name: str) -> bool:
    """A bool setting."""
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be a bool, got {type(value).__name__}")
    return value


SHINGLES = ("word", "word_ngram", "char_ngram")


def shingling(shingle: Any, n: Any, n_name: str = "n") -> tuple[str, int]:
    """A shingling choice: one of :data:`SHINGLES` and a run length ``n >= 1``."""
    if shingle not in SHINGLES:
        raise ValueError(f"shingle must be one of {', '.join(map(repr, SHINGLES))}, got {shingle!r}")
    return str(shingle), count(n, n_name, 1)


def hamming_k(k: Any) -> int:
    """A SimHash distance: an int in 0..63."""
    return count(k, "k", 0, 63)


def banding(bands: Any, rows_per_band: Any, num_perm: int) -> tuple[int, int]:
    """An LSH banding: ints >= 1 whose product is at most ``num_perm``."""
    bands, rows_per_band = integer(bands, "bands", 1), integer(rows_per_band, "rows_per_band", 1)
    if bands * rows_per_band > num_perm:
        raise ValueError(f"bands * rows_per_band must be at most num_perm = {num_perm}, got {bands} * {rows_per_band}")
    return bands, rows_per_band


def lsh_weights(weights: Any) -> tuple[float, float]:
    """datasketch's LSH weights: (false-positive weight, false-negative weight) in [0, 1], summing to 1."""
    message = f"weights must be two numbers in [0, 1] summing to 1, got {weights!r}"
    try:
        fp, fn = weights
        fp, fn = float(fp), float(fn)
    except TypeError:
        raise TypeError(message) from None
    except ValueError:
        raise ValueError(message) from None
    if not (0.0 <= fp <= 1.0 and 0.0 <= fn <= 1.0 and abs(fp + fn - 1.0) < 1e-9):
        raise ValueError(message)
    return fp, fn


def seed64(seed: Any) -> int:
    """A key seed: an int in 0..2**64 - 1."""
    return integer(seed, "seed", 0, 2**64 - 1)


def unit_threshold(threshold: Any, *, zero: bool = False) -> float:
    """A Jaccard threshold: a real number in (0, 1], or in [0, 1] with ``zero``.

    Grouping takes (0, 1] (at 0 every pair that shares a band would join); ``lsh_params`` takes
    datasketch's [0, 1], as ``MinHashLSH`` does, and so does the extension's banding optimiser.
    """
    low = "[0" if zero else "(0"
    if isinstance(threshold, bool) or not isinstance(threshold, numbers.Real):
        raise TypeError(f"threshold must be a number in {low}, 1], got {type(threshold).__name__}")
    value = float(threshold)
    if not ((value >= 0.0 if zero else value > 0.0) and value <= 1.0):
        raise ValueError(f"threshold must be in {low}, 1], got {threshold!r}")
    return value


def array(value: Any, name: str) -> np.ndarray[Any, Any]:
    """``np.asarray(value)``, with ragged or otherwise unconvertible input named in the error."""
    try:
        return np.asarray(value)
    except (ValueError, TypeError) as err:
        raise ValueError(f"{name} must be a rectangular array: {err}") from None


def group_id_array(group_ids: Any, n: int) -> npt.NDArray[np.int64]:
    """Task-group ids as a contiguous int64 array of length ``n``."""
    ids = array(group_ids, "group_ids")
    if ids.shape == (0,) and n == 0:
        return np.empty(0, dtype=np.int64)
    if ids.dtype.kind not in "iub":
        raise TypeError(f"group_ids must be integers, got dtype {ids.dtype}")
    if ids.shape != (n,):
        raise ValueError(f"group_ids must have shape ({n},) to match the rows, got {ids.shape}")
    if ids.dtype == np.uint64 and n and int(ids.max()) > np.iinfo(np.int64).max:
        raise ValueError("group_ids must fit in int64")
    return np.ascontiguousarray(ids, dtype=np.int64)


# Threads per core that num_threads may ask for. Hashing is CPU-bound, so threads beyond the cores only take turns;
# 4x leaves room for hyperthreads and deliberate oversubscription. Each distinct size starts a pool of that many OS
# threads (the extension keeps a few pools, by size), so an unbounded count (100,000) would hang the process.
THREADS_PER_CORE = 4


def max_threads() -> int:
    """The largest ``num_threads`` accepted: :data:`THREADS_PER_CORE` x this machine's cores."""
    return THREADS_PER_CORE * (os.cpu_count() or 1)


def threads(num_threads: int | None) -> int:
    """The extension's thread count: 0 = rayon's global pool (RAYON_NUM_THREADS or all cores)."""
    if num_threads is None:
        return 0
    cap = max_threads()
    value = count(num_threads, "num_threads", 1)
    if value > cap:
        raise ValueError(
            f"num_threads must be at most {cap} ({THREADS_PER_CORE} x the {os.cpu_count() or 1} cores: more threads "
            f"cannot hash faster), got {value}; None uses all cores"
        )
    return value
