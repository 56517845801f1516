"""Dense anchor ids from keys, MinHash signatures or SimHash fingerprints.

Rows get the same id when they are in the same task group and share a state:

- exact: equal keys;
- minhash: connected by a chain of pairs that share an LSH band (datasketch's banding for the
  threshold) and have an estimated Jaccard of at least ``threshold``;
- simhash: connected by a chain of pairs within Hamming distance ``k`` (found exhaustively with
  a k + 1 block pigeonhole index).

Near-duplicate groups are connected components, not clusters around representatives: components
depend only on which rows are present, never on their order, so the same batch always yields
the same partition. The price is chaining (a ~ b ~ c joins a and c), kept in check by a strict
threshold. Ids are 0..K-1 numbered by first appearance, so shuffling rows only permutes ids.

Cost: within a bucket (LSH band or SimHash block) a row is tested against each component it is
not yet in, up to its first confirmed match, so a bucket of near-duplicates costs about one test
per row rather than all its pairs; a large SimHash bucket is split again on its remaining bits.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from ._args import array, banding, group_id_array, hamming_k, threads, unit_threshold
from ._native import native
from .minhash import lsh_params_unchecked

AnchorIds = npt.NDArray[np.int64]


def group_exact(keys: npt.ArrayLike, group_ids: npt.ArrayLike, *, num_threads: int | None = None) -> AnchorIds:
    """Anchor ids of rows with equal keys (``[n]`` or ``[n, w]`` unsigned/signed 64-bit ints)."""
    k = array(keys, "keys")
    if k.dtype.kind not in "iu" or k.dtype.itemsize != 8 or k.ndim not in (1, 2):
        raise TypeError(f"keys must be a [n] or [n, w] array of 64-bit integers, got {k.dtype} of shape {k.shape}")
    rows = key_rows(k)
    return native.group_exact(group_id_array(group_ids, len(rows)), rows, threads(num_threads))


def key_rows(keys: np.ndarray) -> npt.NDArray[np.uint64]:
    """A checked ``[n]`` or ``[n, w]`` key array as the ``[n, w]`` uint64 rows the extension groups."""
    return np.ascontiguousarray(keys if keys.ndim == 2 else keys[:, None]).view(np.uint64)


def group_minhash(
    signatures: npt.ArrayLike,
    group_ids: npt.ArrayLike,
    threshold: float = 0.8,
    *,
    bands: int | None = None,
    rows_per_band: int | None = None,
    num_threads: int | None = None,
) -> AnchorIds:
    """Anchor ids of MinHash-LSH components; (bands, rows_per_band) default to datasketch's choice."""
    sigs = array(signatures, "signatures")
    if sigs.ndim != 2 or sigs.dtype not in (np.uint32, np.uint64):
        raise TypeError(f"signatures must be a 2-D uint32 or uint64 array, got {sigs.dtype} of shape {sigs.shape}")
    num_perm = sigs.shape[1]
    if num_perm == 0:
        raise ValueError("signatures must have at least one lane (column)")
    threshold = unit_threshold(threshold)
    if (bands is None) != (rows_per_band is None):
        raise ValueError("give both bands and rows_per_band, or neither")
    if bands is None or rows_per_band is None:
        bands, rows_per_band = lsh_params_unchecked(threshold, num_perm)
    else:
        bands, rows_per_band = banding(bands, rows_per_band, num_perm)
    groups = group_id_array(group_ids, len(sigs))
    return native.group_minhash(
        groups, np.ascontiguousarray(sigs), bands, rows_per_band, threshold, threads(num_threads)
    )


def group_simhash(
    fingerprints: npt.ArrayLike, group_ids: npt.ArrayLike, k: int = 3, *, num_threads: int | None = None
) -> AnchorIds:
    """Anchor ids of SimHash components within Hamming distance ``k`` (0..63)."""
    fps = array(fingerprints, "fingerprints")
    if fps.ndim != 1 or fps.dtype.kind not in "iu" or fps.dtype.itemsize != 8:
        raise TypeError(f"fingerprints must be a 1-D array of 64-bit integers, got {fps.dtype} of shape {fps.shape}")
    k = hamming_k(k)
    groups = group_id_array(group_ids, len(fps))
    return native.group_simhash(groups, np.ascontiguousarray(fps).view(np.uint64), k, threads(num_threads))
