"""Exact state keys: XXH3 fingerprints of texts, bytes and numpy arrays.

A str is keyed by its UTF-8 bytes (equal to ``xxhash.xxh3_64_intdigest(text.encode())``). An
array is keyed by its dtype, its shape and its values' bytes, so ``zeros(4, int8)`` and
``zeros((2, 2), int8)`` differ; byte order and memory layout do not matter. Structured arrays are
keyed by field names, field types and values: each field is taken little-endian and the fields are
packed, so the padding of an aligned or offset dtype (whose bytes are arbitrary) is not hashed.
128-bit keys come as ``[n, 2]`` uint64 arrays, low word first.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from typing import Any, Literal

import numpy as np
import numpy.typing as npt
from numpy.lib.recfunctions import repack_fields

from ._args import item_problem, key_bits, native_call, seed64, sequence, threads
from ._native import native

Bits = Literal[64, 128]


def text_keys(
    texts: Sequence[str], bits: Bits = 64, *, seed: int = 0, num_threads: int | None = None
) -> npt.NDArray[np.uint64]:
    """Keys of texts: ``[n]`` uint64 for 64 bits, ``[n, 2]`` uint64 for 128 bits."""
    texts = sequence(texts, "texts")
    return str_keys(texts, key_bits(bits), seed64(seed), threads(num_threads), "texts", "a sequence of str")


def bytes_keys(
    values: Sequence[bytes], bits: Bits = 64, *, seed: int = 0, num_threads: int | None = None
) -> npt.NDArray[np.uint64]:
    """Keys of bytes values, as :func:`text_keys`."""
    values = sequence(values, "values")
    return _bytes_keys(values, key_bits(bits), seed64(seed), threads(num_threads), "values", "a sequence of bytes")


def array_keys(
    arrays: Sequence[np.ndarray[Any, Any]], bits: Bits = 64, *, seed: int = 0, num_threads: int | None = None
) -> npt.NDArray[np.uint64]:
    """Keys of numpy arrays (any shapes, any non-object dtypes); shape and dtype are part of the key."""
    arrays = sequence(arrays, "values")
    return _array_keys(arrays, key_bits(bits), seed64(seed), threads(num_threads), "values")


def keys(
    values: Sequence[str] | Sequence[bytes] | Sequence[np.ndarray[Any, Any]],
    bits: Bits = 64,
    *,
    seed: int = 0,
    num_threads: int | None = None,
) -> npt.NDArray[np.uint64]:
    """Keys of a homogeneous batch of str, bytes or numpy arrays (type of ``values[0]`` decides)."""
    values = sequence(values, "values")
    return keys_unchecked(values, key_bits(bits), seed64(seed), threads(num_threads), "values")


# Unchecked internals: arguments already checked at a public function (see ._args), errors name `name`.


def keys_unchecked(values: Sequence[Any], bits: int, seed: int, n_threads: int, name: str) -> npt.NDArray[np.uint64]:
    """:func:`keys` of checked arguments."""
    if len(values) == 0:
        return np.empty((0,) if bits == 64 else (0, 2), dtype=np.uint64)
    first = values[0]
    if isinstance(first, str):
        return str_keys(values, bits, seed, n_threads, name, "all str")
    if isinstance(first, (bytes, bytearray)):
        return _bytes_keys(values, bits, seed, n_threads, name, "all bytes")
    if isinstance(first, np.ndarray):
        return _array_keys(values, bits, seed, n_threads, name)
    raise TypeError(f"{name}[0] is {type(first).__name__}; expected str, bytes or numpy.ndarray")


def str_keys(
    texts: Sequence[Any], bits: int, seed: int, n_threads: int, name: str, expected: str
) -> npt.NDArray[np.uint64]:
    """Keys of str values, a bad item named in the error."""
    locate = partial(item_problem, texts, name, str)
    return native_call(name, expected, native.text_keys, texts, bits, seed, n_threads, locate=locate)


def _bytes_keys(
    values: Sequence[Any], bits: int, seed: int, n_threads: int, name: str, expected: str
) -> npt.NDArray[np.uint64]:
    locate = partial(item_problem, values, name, (bytes, bytearray))
    return native_call(name, expected, native.bytes_keys, values, bits, seed, n_threads, locate=locate)


def _canonical_dtype(dtype: np.dtype[Any]) -> np.dtype[Any]:
    """``dtype`` little-endian (every field of a structured dtype too) with its fields packed."""
    little = dtype.newbyteorder("<")  # recurses into fields and subarrays; no-op for 1-byte types
    return repack_fields(little, recurse=True) if little.names else little


def _array_header(array: np.ndarray[Any, Any], index: int, name: str) -> tuple[bytes, npt.NDArray[np.uint8]]:
    """(dtype-and-shape header, value bytes) of one array, independent of byte order and layout."""
    if array.dtype.hasobject:
        raise TypeError(f"{name}[{index}] has dtype {array.dtype}: object arrays have no byte representation to key")
    canonical = _canonical_dtype(array.dtype)
    if canonical != array.dtype:
        array = array.astype(canonical)
    dtype = repr(canonical.descr) if canonical.names else canonical.str
    data = np.ascontiguousarray(array).reshape(-1).view(np.uint8)
    return f"{dtype}|{array.shape}".encode(), data


def _array_keys(arrays: Sequence[Any], bits: int, seed: int, n_threads: int, name: str) -> npt.NDArray[np.uint64]:
    items = []
    for i, array in enumerate(arrays):
        if not isinstance(array, np.ndarray):
            raise TypeError(f"{name}[{i}] is {type(array).__name__}; expected numpy.ndarray")
        items.append(_array_header(array, i, name))
    return native.tagged_keys(items, bits, seed, n_threads)
