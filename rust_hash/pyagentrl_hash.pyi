"""Type stubs of the extension module ``pyagentrl_hash`` (rust_hash/bindings), shipped in its wheel.

Private: use it through ``pyagentrl.hashing``, which checks every parameter before calling in (the
extension converts its arguments and checks none; see ``pyagentrl/hashing/_args.py``).
``num_threads=0`` means rayon's global pool (RAYON_NUM_THREADS or all cores).
"""

from collections.abc import Callable, Sequence

import numpy as np
import numpy.typing as npt

def text_keys(texts: Sequence[str], bits: int, seed: int, num_threads: int = 0) -> npt.NDArray[np.uint64]:
    """XXH3 keys of the UTF-8 bytes of texts: ``[n]`` (bits=64) or ``[n, 2]`` (bits=128, low word first)."""

def bytes_keys(values: Sequence[bytes], bits: int, seed: int, num_threads: int = 0) -> npt.NDArray[np.uint64]:
    """XXH3 keys of bytes values, as :func:`text_keys`."""

def tagged_keys(
    items: Sequence[tuple[bytes, npt.NDArray[np.uint8]]], bits: int, seed: int, num_threads: int = 0
) -> npt.NDArray[np.uint64]:
    """Keys of (header, C-contiguous data) pairs: the header is length-prefixed, then the data follows."""

def minhash_tokens(
    token_lists: Sequence[Sequence[str]],
    scheme: str,
    a: npt.NDArray[np.uint64],
    b: npt.NDArray[np.uint64],
    num_threads: int = 0,
) -> npt.NDArray[np.uint32] | npt.NDArray[np.uint64]:
    """``[n, len(a)]`` datasketch signatures of token lists: uint32 for "affine32", uint64 for "legacy"."""

def minhash_texts(
    texts: Sequence[str],
    scheme: str,
    a: npt.NDArray[np.uint64],
    b: npt.NDArray[np.uint64],
    shingle: str,
    n: int,
    lowercase: bool,
    num_threads: int = 0,
) -> npt.NDArray[np.uint32] | npt.NDArray[np.uint64]:
    """Signatures of texts cut into shingles ("word", "word_ngram" or "char_ngram" of ``n >= 1``)."""

def shingles(text: str, shingle: str, n: int, lowercase: bool) -> list[str]:
    """The shingles :func:`minhash_texts` hashes for one text, in order (duplicates kept)."""

def simhash_texts(
    texts: Sequence[str], normalize: Callable[[list[str]], list[str]], num_threads: int = 0
) -> npt.NDArray[np.uint64]:
    """Fingerprints equal to ``simhash.Simhash(text).value``, in one call.

    ``normalize`` is the package's normalisation by the running interpreter (``str.lower``, then
    the matches of ``[\\w\\u4e00-\\u9fcc]`` joined), one string per text; the extension calls it
    for normalisation-table pages first met (each character as a text) and for texts holding a
    capital sigma, at most once each per call.
    """

def simhash_normalized(texts: Sequence[str], num_threads: int = 0) -> npt.NDArray[np.uint64]:
    """Fingerprints of texts already normalised (only word characters, lowercased)."""

def simhash_weighted(
    features: Sequence[str], weights: npt.NDArray[np.float64], offsets: Sequence[int]
) -> npt.NDArray[np.uint64]:
    """Fingerprints of weighted features: document i owns ``features[offsets[i]:offsets[i + 1]]``."""

def group_exact(
    group_ids: npt.NDArray[np.int64], keys: npt.NDArray[np.uint64], num_threads: int = 0
) -> npt.NDArray[np.int64]:
    """Dense ids of equal ``[n, w]`` key rows within each task group."""

def group_minhash(
    group_ids: npt.NDArray[np.int64],
    signatures: npt.NDArray[np.uint32] | npt.NDArray[np.uint64],
    bands: int,
    rows_per_band: int,
    threshold: float,
    num_threads: int = 0,
) -> npt.NDArray[np.int64]:
    """Dense ids of MinHash-LSH components (``1 <= bands * rows_per_band <= num_perm``)."""

def group_simhash(
    group_ids: npt.NDArray[np.int64], fingerprints: npt.NDArray[np.uint64], k: int, num_threads: int = 0
) -> npt.NDArray[np.int64]:
    """Dense ids of SimHash components: fingerprints within Hamming distance ``k`` (0..63), chained."""

def group_edges(group_ids: npt.NDArray[np.int64], edges: npt.NDArray[np.uint32]) -> npt.NDArray[np.int64]:
    """Dense ids of the connected components of ``[m, 2]`` row pairs, each pair within one task group."""

def distinct_texts(
    texts: Sequence[str], group_ids: npt.NDArray[np.int64], num_threads: int = 0
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """Dense ids of distinct (task group, text) pairs and of distinct texts (by 128-bit key), by first appearance."""

def lsh_params(threshold: float, num_perm: int, fp_weight: float, fn_weight: float) -> tuple[int, int]:
    """datasketch's MinHashLSH (bands, rows per band) for a threshold in (0, 1]."""
