"""Dense anchor ids from keys, MinHash signatures or SimHash fingerprints.

Rows get the same id when they are in the same task group and share a state:

- exact: equal keys;
- minhash: connected by a chain of pairs that share an LSH band (datasketch's banding for the
  threshold) and have an estimated Jaccard of at least ``threshold``;
- simhash: connected by a chain of pairs within Hamming distance ``k`` (found exhaustively with
  a k + 1 block pigeonhole index);
- embedding: connected by a chain of pairs whose embeddings have cosine similarity of at least
  ``threshold`` (all pairs of a task group tested, in blocks of a similarity matrix; the Rust core
  joins the pairs found).

Near-duplicate groups are connected components, not clusters around representatives: components
depend only on which rows are present, never on their order, so the same batch always yields
the same partition. The price is chaining (a ~ b ~ c joins a and c), kept in check by a strict
threshold. Ids are 0..K-1 numbered by first appearance, so shuffling rows only permutes ids.

Cost: within a bucket (LSH band or SimHash block) a row is tested against each component it is
not yet in, up to its first confirmed match, so a bucket of near-duplicates costs about one test
per row rather than all its pairs; a large SimHash bucket is split again on its remaining bits.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from ._args import array, banding, group_id_array, hamming_k, threads, unit_threshold
from ._native import native
from .minhash import lsh_params_unchecked

if TYPE_CHECKING:  # torch is imported where embeddings are grouped: the other modes do without it
    import torch

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


# float32 dot products of unit vectors carry rounding of a few 1e-7: pairs within this of the threshold join, so
# that at threshold 1.0 embeddings equal up to rounding (texts the tokenizer maps to the same tokens) share a state.
SIMILARITY_TOLERANCE = 1e-6
# Rows of a task group's similarity matrix computed at once: bounds the memory of a large task group.
_BLOCK_ROWS = 2048


def group_embeddings(
    embeddings: npt.ArrayLike | torch.Tensor,
    group_ids: npt.ArrayLike,
    threshold: float = 0.95,
    *,
    device: str | torch.device | None = None,
) -> AnchorIds:
    """Anchor ids of the components of rows whose embeddings (``[n, d]``, any norm) have cosine similarity
    ``>= threshold`` (in (0, 1]) within a task group, computed on ``device`` (default: the tensor's, or the CPU)."""
    import torch

    threshold = unit_threshold(threshold)
    if isinstance(embeddings, torch.Tensor):
        emb = embeddings.detach()
    else:
        host = array(embeddings, "embeddings")
        if host.dtype.kind == "f":  # native byte order, contiguous: what torch.from_numpy takes
            host = np.ascontiguousarray(host, dtype=host.dtype.newbyteorder("="))
        emb = torch.from_numpy(host) if host.dtype.kind == "f" and host.dtype.itemsize >= 2 else torch.as_tensor(host)
    if emb.ndim != 2 or not emb.is_floating_point() or emb.shape[1] == 0:
        raise TypeError(
            f"embeddings must be a 2-D float array with at least one column, got {emb.dtype} {tuple(emb.shape)}"
        )
    groups = group_id_array(group_ids, len(emb))
    emb = emb.to(device=device if device is not None else emb.device, dtype=torch.float32)
    if not bool(torch.isfinite(emb).all()):
        raise ValueError(f"embeddings must be finite: row {int((~torch.isfinite(emb)).any(1).nonzero()[0])} is not")
    norms = emb.norm(dim=1)
    if bool((norms == 0).any()):
        raise ValueError(
            f"embeddings[{int((norms == 0).nonzero()[0])}] is all zeros: its cosine similarity is undefined"
        )
    unit = emb / norms[:, None]
    host = unit.cpu().numpy()
    order_keys = native.bytes_keys([row.tobytes() for row in host], 128, 0, 0).view(np.uint64)
    return similar_components(unit, np.arange(len(groups)), groups, order_keys, threshold)


def similar_components(
    table: torch.Tensor,
    index: npt.NDArray[np.int64],
    groups: npt.NDArray[np.int64],
    order_keys: npt.NDArray[np.uint64],
    threshold: float,
) -> AnchorIds:
    """Unchecked core of :func:`group_embeddings`: row i's unit embedding is ``table[index[i]]``; ``order_keys``
    (``[n, 2]`` words, equal only for equal rows) fix the order in which each task group's rows are compared, so
    the similarity of a pair is computed the same way (bitwise) whatever the row order of the batch, and the
    partition with it."""
    import torch

    n = len(groups)
    order = np.lexsort((order_keys[:, 0], order_keys[:, 1], groups)) if n else np.empty(0, dtype=np.int64)
    sorted_groups = groups[order]
    starts = np.flatnonzero(np.diff(sorted_groups, prepend=sorted_groups[:1] - 1)) if n else np.empty(0, np.int64)
    bounds = np.append(starts, n)
    ordered = table[torch.from_numpy(index[order]).to(table.device)]  # one gather, in comparison order
    cut = threshold - SIMILARITY_TOLERANCE
    found: list[torch.Tensor] = []
    for start, end in zip(bounds[:-1].tolist(), bounds[1:].tolist(), strict=True):
        members = ordered[start:end]
        for top in range(0, end - start - 1, _BLOCK_ROWS):
            # Rows top.. against columns top..: local row r meets column r on the diagonal, so triu(1) keeps j > i.
            sims = members[top : top + _BLOCK_ROWS] @ members[top:].T
            pairs = torch.triu(sims >= cut, diagonal=1).nonzero()
            if len(pairs):
                found.append(pairs + (start + top))
    edges = torch.cat(found).cpu().numpy() if found else np.empty((0, 2), dtype=np.int64)
    rows = order[edges].astype(np.uint32)  # back to batch rows
    return native.group_edges(groups, np.ascontiguousarray(rows.reshape(-1, 2)))
