"""State keys and anchor grouping for GiGPO/GAGPO (native core: the ``pyagentrl_hash`` extension).

Exact keys (:func:`keys`, :func:`text_keys`), MinHash equal to datasketch 2.0
(:func:`minhash_from_tokens`, :func:`minhash_texts`), SimHash equal to the ``simhash`` package
(:func:`simhash`, in module ``fingerprints``), grouping into dense anchor ids (:func:`group_exact`,
:func:`group_minhash`, :func:`group_simhash`, :func:`group_embeddings`), sentence embeddings of observations
(module ``embeddings``, an optional extra) and the one entry point the ops take: :class:`StateKeyer`.
"""

from .canonical import (
    CANONICALIZERS,
    Canonicalizer,
    collapse_whitespace,
    compose,
    strip_ansi,
    strip_counters,
    strip_echo,
)
from .fingerprints import hamming, simhash, simhash_weighted
from .grouping import AnchorIds, group_embeddings, group_exact, group_minhash, group_simhash
from .keyer import StateKeyer
from .keys import array_keys, bytes_keys, keys, text_keys
from .minhash import jaccard, lsh_params, minhash_from_tokens, minhash_texts, permutations, shingles

__all__ = [
    "CANONICALIZERS",
    "AnchorIds",
    "Canonicalizer",
    "StateKeyer",
    "array_keys",
    "bytes_keys",
    "collapse_whitespace",
    "compose",
    "group_embeddings",
    "group_exact",
    "group_minhash",
    "group_simhash",
    "hamming",
    "jaccard",
    "keys",
    "lsh_params",
    "minhash_from_tokens",
    "minhash_texts",
    "permutations",
    "shingles",
    "simhash",
    "simhash_weighted",
    "strip_ansi",
    "strip_counters",
    "strip_echo",
    "text_keys",
]
