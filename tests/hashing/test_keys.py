"""Exact keys: XXH3 of UTF-8 text / bytes; arrays keyed by dtype, shape and values."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from testkit.hashing import unicode_text
from testkit.peers import import_peer

from pyagentrl.hashing import array_keys, bytes_keys, keys, text_keys


@settings(max_examples=60, deadline=None)
@given(st.lists(unicode_text, max_size=20), st.integers(0, 2**64 - 1))
def test_text_keys_equal_xxh3_of_utf8(texts: list[str], seed: int) -> None:
    xxhash = import_peer("xxhash")
    k64 = text_keys(texts, seed=seed)
    k128 = text_keys(texts, 128, seed=seed)
    assert k64.dtype == np.uint64 and k64.shape == (len(texts),)
    assert k128.dtype == np.uint64 and k128.shape == (len(texts), 2)
    for i, t in enumerate(texts):
        data = t.encode("utf-8")
        assert int(k64[i]) == xxhash.xxh3_64_intdigest(data, seed)
        assert int(k128[i, 0]) | int(k128[i, 1]) << 64 == xxhash.xxh3_128_intdigest(data, seed)
    np.testing.assert_array_equal(bytes_keys([t.encode() for t in texts], seed=seed), k64)


def test_empty_and_megabyte_texts() -> None:
    big = "You see a cabinet 1. ✓ " * 50_000  # > 1 MB of UTF-8
    assert len(big.encode()) >= 1 << 20
    k = text_keys(["", big, big[:-1], big])
    assert int(k[0]) == 0x2D06800538D394C2  # XXH3-64 of the empty input (xxHash test vector)
    assert k[1] == k[3] != k[2]
    np.testing.assert_array_equal(bytes_keys([b"", big.encode()]), k[:2])
    assert text_keys([]).shape == (0,)
    assert keys([], 128).shape == (0, 2)


DTYPES = ["bool", "int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64", "float16", "float32",
          "float64", "complex64", "complex128", "datetime64[ns]", "timedelta64[s]", "<U4", "S3"]  # fmt: skip


@pytest.mark.parametrize("dtype", DTYPES)
def test_array_keys_cover_dtype_shape_and_values(dtype: str) -> None:
    rng = np.random.default_rng(0)
    base = rng.integers(0, 100, size=12).astype(dtype)
    variants = [base, base.reshape(3, 4), base.reshape(4, 3), base[:6], base.copy()]
    k = array_keys(variants)
    assert k.dtype == np.uint64
    assert len({int(x) for x in k[:4]}) == 4  # shape is part of the key
    assert k[4] == k[0]  # equal values, equal key
    if dtype != "bool":
        changed = base.copy()
        changed[5] = changed[6]
        if not np.array_equal(changed, base):
            assert array_keys([changed])[0] != k[0]


def test_array_keys_ignore_layout_and_byte_order() -> None:
    a = np.arange(24, dtype=np.float32).reshape(4, 6)
    big_endian = a.astype(">f4")
    fortran = np.asfortranarray(a)
    strided = np.arange(48, dtype=np.float32).reshape(4, 12)[:, ::2]
    expect = array_keys([np.ascontiguousarray(strided)])[0]
    k = array_keys([a, big_endian, fortran, strided])
    assert k[0] == k[1] == k[2]
    assert k[3] == expect
    # Same bytes, different dtype: different key.
    assert array_keys([a.view(np.int32)])[0] != k[0]
    assert keys([a], 128).shape == (1, 2)
    # 0-d and empty arrays are keyed too.
    assert len(set(array_keys([np.array(1.0, dtype=np.float32), np.zeros((0, 3)), np.zeros((3, 0))]).tolist())) == 3


def test_structured_arrays_keep_field_names() -> None:
    a = np.zeros(3, dtype=[("x", "<i4"), ("y", "<f4")])
    b = np.zeros(3, dtype=[("u", "<i4"), ("v", "<f4")])
    assert array_keys([a])[0] != array_keys([b])[0]


def test_structured_arrays_ignore_byte_order_and_padding() -> None:
    fields = [("x", "<i4"), ("y", "<f8"), ("z", "<u2", (2,)), ("s", [("a", "<i2"), ("b", "u1")])]
    packed = np.zeros(4, dtype=fields)
    packed["x"], packed["y"], packed["z"] = [1, 2, 3, 4], [0.5, -1.0, 2.5, 1e300], [[1, 2], [3, 4], [5, 6], [7, 8]]
    packed["s"]["a"], packed["s"]["b"] = [-1, 2, -3, 4], [9, 8, 7, 6]
    big = packed.astype([("x", ">i4"), ("y", ">f8"), ("z", ">u2", (2,)), ("s", [("a", ">i2"), ("b", "u1")])])
    aligned = packed.astype(np.dtype(fields, align=True))
    assert aligned.dtype.itemsize > packed.dtype.itemsize  # it has padding
    # Same values, padding bytes filled with different garbage.
    noisy = []
    for garbage in (0x00, 0xAB):
        arr = np.full(aligned.nbytes, garbage, dtype=np.uint8).view(aligned.dtype)
        for name in aligned.dtype.names:
            arr[name] = aligned[name]
        noisy.append(arr)
    assert noisy[0].tobytes() != noisy[1].tobytes()
    offsets = np.dtype({"names": ["x", "y"], "formats": ["<i4", "<f8"], "offsets": [8, 16], "itemsize": 32})
    spread = np.zeros(4, dtype=offsets)
    spread["x"], spread["y"] = packed["x"], packed["y"]
    k = array_keys([packed, big, aligned, *noisy, packed[::-1][::-1]])
    assert len(set(k.tolist())) == 1
    assert array_keys([spread])[0] == array_keys([packed[["x", "y"]]])[0]
    # Values still count: one changed field value changes the key.
    changed = packed.copy()
    changed["s"]["b"][2] = 0
    assert array_keys([changed])[0] != k[0]


def test_bad_input_is_named() -> None:
    with pytest.raises(TypeError, match="texts"):
        text_keys(["a", None])  # type: ignore[list-item]
    with pytest.raises(TypeError, match="texts"):
        text_keys("abc")
    with pytest.raises(TypeError, match="values"):
        keys(["a", b"b"])  # type: ignore[list-item]
    with pytest.raises(TypeError, match="values"):
        keys([b"a", "b"])  # type: ignore[list-item]
    with pytest.raises(TypeError, match=r"values\[1\]"):
        keys([np.zeros(2), [1, 2]])  # type: ignore[list-item]
    with pytest.raises(TypeError, match=r"values\[0\]"):
        keys([[1, 2], [3]])  # type: ignore[list-item]
    with pytest.raises(TypeError, match="object"):
        keys([np.array([1, "a"], dtype=object)])
    with pytest.raises(TypeError, match="values"):
        keys(None)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"texts must be encodable as UTF-8: texts\[1\] holds a lone surrogate"):
        text_keys(["a", "\ud800"])
    with pytest.raises(ValueError, match=r"values\[1\] holds a lone surrogate"):
        keys(["a", "\ud800"])
    with pytest.raises(ValueError, match="bits"):
        keys(["a"], 32)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"texts\[1\] is NoneType, not str"):
        text_keys(["a", None])  # type: ignore[list-item]
    with pytest.raises(TypeError, match=r"values\[1\] is str, not bytes"):
        bytes_keys([b"a", "b"])  # type: ignore[list-item]
    for seed in (-1, 2**64):
        with pytest.raises(ValueError, match=r"seed must be in 0\.\.2\*\*"):
            text_keys(["a"], seed=seed)
        with pytest.raises(ValueError, match="seed"):
            keys([np.zeros(2)], seed=seed)
    with pytest.raises(TypeError, match="seed must be an int"):
        bytes_keys([b"a"], seed=None)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="num_threads"):
        text_keys(["a"], num_threads=True)
