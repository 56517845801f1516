"""Anchor grouping against brute-force oracles: exact, MinHash-LSH and SimHash components."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from testkit.hashing import assert_dense, components, partition

from pyagentrl.hashing import group_exact, group_minhash, group_simhash, hamming, lsh_params
from pyagentrl.hashing._native import native


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 5)), max_size=40))
def test_exact_groups_equal_keys_within_task_groups(rows: list[tuple[int, int]]) -> None:
    groups = np.array([g for g, _ in rows], dtype=np.int64)
    keys = np.array([k for _, k in rows], dtype=np.uint64)
    ids = group_exact(keys, groups)
    assert_dense(ids, len(rows))
    assert partition(ids) == partition([hash(r) for r in rows])


def test_exact_accepts_wide_keys_and_signed_ids() -> None:
    keys = np.array([[1, 2], [1, 3], [1, 2]], dtype=np.uint64)
    assert group_exact(keys, np.array([-5, -5, -5], dtype=np.int32)).tolist() == [0, 1, 0]
    assert group_exact(keys.view(np.int64), [0, 0, 1]).tolist() == [0, 1, 2]
    assert group_exact(np.empty(0, np.uint64), []).shape == (0,)


def planted_fingerprints(rng: np.random.Generator, n: int, flips: int) -> np.ndarray:
    """Fingerprints in a few families: each a random base with up to `flips` random bits flipped."""
    bases = rng.integers(0, 2**63, size=max(1, n // 6), dtype=np.uint64) * np.uint64(2) + np.uint64(1)
    fps = bases[rng.integers(0, len(bases), size=n)]
    for i in range(n):
        for bit in rng.choice(64, size=rng.integers(0, flips + 1), replace=False):
            fps[i] ^= np.uint64(1) << np.uint64(bit)
    return fps


@pytest.mark.parametrize("k", [0, 1, 3, 6])
@pytest.mark.parametrize("seed", range(5))
def test_simhash_is_components_of_distance_graph(k: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = 80
    fps = planted_fingerprints(rng, n, flips=4)
    groups = rng.integers(0, 3, size=n)
    ids = group_simhash(fps, groups, k)
    assert_dense(ids, n)
    edges = [
        (i, j)
        for i in range(n)
        for j in range(i)
        if groups[i] == groups[j] and bin(int(fps[i]) ^ int(fps[j])).count("1") <= k
    ]
    assert partition(ids) == components(n, edges)


def planted_signatures(rng: np.random.Generator, n: int, num_perm: int) -> np.ndarray:
    """Signatures in families: each row copies a family base and redraws a random share of lanes."""
    bases = rng.integers(0, 1000, size=(max(1, n // 5), num_perm), dtype=np.uint32)
    sigs = bases[rng.integers(0, len(bases), size=n)].copy()
    for row in sigs:
        redraw = rng.random(num_perm) < rng.choice([0.0, 0.05, 0.2, 0.5])
        row[redraw] = rng.integers(0, 1000, size=int(redraw.sum()), dtype=np.uint32)
    return sigs


@pytest.mark.parametrize("threshold", [0.5, 0.8, 0.95])
@pytest.mark.parametrize("seed", range(4))
def test_minhash_is_components_of_confirmed_band_matches(threshold: float, seed: int) -> None:
    rng = np.random.default_rng(seed)
    n, num_perm = 60, 32
    sigs = planted_signatures(rng, n, num_perm)
    groups = rng.integers(0, 2, size=n)
    bands, rows = lsh_params(threshold, num_perm)
    ids = group_minhash(sigs, groups, threshold)
    assert_dense(ids, n)

    def candidate(i: int, j: int) -> bool:
        return any(
            np.array_equal(sigs[i, b * rows : (b + 1) * rows], sigs[j, b * rows : (b + 1) * rows]) for b in range(bands)
        )

    edges = [
        (i, j)
        for i in range(n)
        for j in range(i)
        if groups[i] == groups[j] and candidate(i, j) and np.mean(sigs[i] == sigs[j]) >= threshold
    ]
    assert partition(ids) == components(n, edges)


def components_of_matrix(adjacent: np.ndarray) -> set[frozenset[int]]:
    """Connected components of a boolean adjacency matrix (all pairs considered)."""
    i, j = np.nonzero(np.triu(adjacent, 1))
    return components(len(adjacent), list(zip(i.tolist(), j.tolist(), strict=True)))


@pytest.mark.parametrize("seed", range(6))
def test_large_buckets_equal_all_pairs_components(seed: int) -> None:
    # Few families over a 3-letter lane alphabet: LSH bands and SimHash blocks collide across most
    # of the batch, so buckets hold hundreds of rows in several components (the path that tests a
    # member against each component until its first match).
    rng = np.random.default_rng(100 + seed)
    n, num_perm, threshold = 400, 32, [0.5, 0.7, 0.9][seed % 3]
    bases = rng.integers(0, 3, size=(int(rng.integers(1, 5)), num_perm), dtype=np.uint32)
    sigs = bases[rng.integers(0, len(bases), size=n)].copy()
    redraw = rng.random((n, num_perm)) < rng.choice([0.0, 0.05, 0.2, 0.5], size=(n, 1))
    sigs[redraw] = rng.integers(0, 4, size=int(redraw.sum()), dtype=np.uint32)
    groups = rng.integers(0, 2, size=n)
    same_group = groups[:, None] == groups[None, :]

    bands, rows = lsh_params(threshold, num_perm)
    banded = sigs[:, : bands * rows].reshape(n, bands, rows)
    candidate = (banded[:, None] == banded[None, :]).all(axis=3).any(axis=2)
    estimate = (sigs[:, None] == sigs[None, :]).mean(axis=2)
    expect = components_of_matrix(same_group & candidate & (estimate >= threshold))
    assert partition(group_minhash(sigs, groups, threshold)) == expect

    k = [1, 3, 6][seed % 3]
    fam = rng.integers(0, 2**16, size=int(rng.integers(1, 6)), dtype=np.uint64) << np.uint64(24)
    fps = fam[rng.integers(0, len(fam), size=n)]
    for _ in range(2 * k + 1):
        flip = rng.random(n) < 0.5
        fps[flip] ^= np.uint64(1) << rng.integers(0, 64, size=int(flip.sum())).astype(np.uint64)
    distance = hamming(fps[:, None], fps[None, :])
    expect = components_of_matrix(same_group & (distance <= k))
    assert partition(group_simhash(fps, groups, k)) == expect


@pytest.mark.parametrize("seed", range(5))
def test_partitions_do_not_depend_on_row_order(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = 120
    sigs = planted_signatures(rng, n, 64)
    fps = planted_fingerprints(rng, n, flips=3)
    groups = rng.integers(0, 4, size=n)
    perm = rng.permutation(n)
    inverse = np.argsort(perm)
    for group in (
        lambda s, f, g: group_minhash(s, g, 0.7),
        lambda s, f, g: group_simhash(f, g, 3),
        lambda s, f, g: group_exact(f, g),
    ):
        ids = group(sigs, fps, groups)
        shuffled = group(sigs[perm], fps[perm], groups[perm])
        assert partition(ids) == partition(shuffled[inverse])
        assert_dense(shuffled, n)


def test_groups_never_cross_task_groups() -> None:
    fps = np.zeros(6, dtype=np.uint64)
    sigs = np.zeros((6, 16), dtype=np.uint64)
    groups = [0, 1, 2, 0, 1, 2]
    for ids in (group_simhash(fps, groups, 5), group_minhash(sigs, groups, 0.5), group_exact(fps, groups)):
        assert ids.tolist() == [0, 1, 2, 0, 1, 2]


def test_bad_input_is_named() -> None:
    fps = np.zeros(3, dtype=np.uint64)
    with pytest.raises(ValueError, match="group_ids"):
        group_simhash(fps, [0, 0], 1)
    with pytest.raises(TypeError, match="group_ids"):
        group_simhash(fps, [0.5, 1.0, 2.0], 1)
    with pytest.raises(ValueError, match="group_ids"):
        group_exact(fps, [[0], [1], [2]])
    with pytest.raises(ValueError, match="k must"):
        group_simhash(fps, [0, 0, 0], 64)
    with pytest.raises(TypeError, match="fingerprints"):
        group_simhash(fps.astype(np.float64), [0, 0, 0], 1)
    with pytest.raises(TypeError, match="signatures"):
        group_minhash(np.zeros((3, 8), dtype=np.int16), [0, 0, 0])
    with pytest.raises(ValueError, match="threshold"):
        group_minhash(np.zeros((3, 8), dtype=np.uint32), [0, 0, 0], threshold=0.0)
    with pytest.raises(ValueError, match="bands"):
        group_minhash(np.zeros((3, 8), dtype=np.uint32), [0, 0, 0], bands=2)
    with pytest.raises(ValueError, match="bands"):
        group_minhash(np.zeros((3, 8), dtype=np.uint32), [0, 0, 0], bands=3, rows_per_band=3)
    with pytest.raises(TypeError, match="keys"):
        group_exact(np.zeros(3, dtype=np.uint32), [0, 0, 0])
    with pytest.raises(ValueError, match="keys"):
        group_exact([[1, 2], [3]], [0, 0])
    with pytest.raises(ValueError, match="group_ids"):
        group_exact(fps, [[0, 1], [2], 3])
    sigs = np.zeros((2, 8), dtype=np.uint32)
    with pytest.raises(TypeError, match="threshold must be a number"):
        group_minhash(sigs, [0, 0], None)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="bands must be >= 1, got -1"):
        group_minhash(sigs, [0, 0], bands=-1, rows_per_band=2)
    with pytest.raises(ValueError, match="rows_per_band must be >= 1"):
        group_minhash(sigs, [0, 0], bands=2, rows_per_band=0)
    with pytest.raises(TypeError, match="bands must be an int"):
        group_minhash(sigs, [0, 0], bands=2.0, rows_per_band=2)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="signatures must have at least one lane"):
        group_minhash(np.zeros((2, 0), dtype=np.uint32), [0, 0])
    with pytest.raises(ValueError, match="k must"):
        group_simhash(fps, [0, 0, 0], True)


def test_threshold_domains_agree_with_the_extension() -> None:
    # lsh_params takes datasketch's [0, 1], and the extension's optimiser answers at both ends;
    # grouping takes (0, 1], checked once in Python, and its upper end reaches the extension.
    assert lsh_params(0.0, 16) == native.lsh_params(0.0, 16, 0.5, 0.5) == (16, 1)
    assert lsh_params(1.0, 16) == native.lsh_params(1.0, 16, 0.5, 0.5) == (1, 16)
    sigs = np.array([[1, 2, 3, 4], [1, 2, 3, 4], [1, 2, 3, 5]], dtype=np.uint32)
    assert group_minhash(sigs, [0, 0, 0], 1.0).tolist() == [0, 0, 1]
    assert group_minhash(sigs, [0, 0, 0], 0.75, bands=4, rows_per_band=1).tolist() == [0, 0, 0]
    with pytest.raises(ValueError, match=r"threshold must be in \(0, 1\], got 0\.0"):
        group_minhash(sigs, [0, 0, 0], 0.0)
    for bad in (-0.1, 1.5):
        with pytest.raises(ValueError, match=r"threshold must be in \[0, 1\], got"):
            lsh_params(bad)
    with pytest.raises(TypeError, match=r"threshold must be a number in \[0, 1\], got NoneType"):
        lsh_params(None)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="weights"):
        lsh_params(0.5, 16, (0.5, 0.6))


def test_extension_converts_names_as_python_checks_them() -> None:
    # The extension checks no parameter; what it converts (names, widths) fails with the message
    # the public functions give, for callers that reach it directly.
    with pytest.raises(ValueError, match="bits must be 64 or 128, got 32"):
        native.text_keys(["a"], 32, 0)
    a = b = np.ones(4, dtype=np.uint64)
    with pytest.raises(ValueError, match="scheme must be 'affine32' or 'legacy'"):
        native.minhash_texts(["a"], "affine64", a, b, "word", 1, False)
    with pytest.raises(ValueError, match="shingle must be 'word', 'word_ngram' or 'char_ngram'"):
        native.shingles("a", "lines", 1, False)
