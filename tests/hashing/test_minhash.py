"""MinHash against datasketch 2.0 itself, lane for lane, and LSH banding against its optimiser."""

from __future__ import annotations

import unicodedata

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from testkit.hashing import tokens, unicode_text
from testkit.peers import import_peer

from pyagentrl.hashing import jaccard, lsh_params, minhash_from_tokens, minhash_texts, permutations, shingles

datasketch = import_peer("datasketch")
_optimal_param = import_peer("datasketch.lsh")._optimal_param

SCHEMES = ["affine32", "legacy"]


def reference(token_list: list[str], num_perm: int = 128, seed: int = 1, scheme: str = "affine32") -> np.ndarray:
    m = datasketch.MinHash(num_perm=num_perm, seed=seed, scheme=scheme)
    m.update_batch([t.encode("utf-8") for t in token_list])
    return m.hashvalues


@pytest.mark.parametrize("scheme", SCHEMES)
@settings(max_examples=40, deadline=None)
@given(token_lists=st.lists(tokens, min_size=1, max_size=4))
def test_random_unicode_tokens_match_datasketch(scheme: str, token_lists: list[list[str]]) -> None:
    sigs = minhash_from_tokens(token_lists, scheme=scheme)
    assert sigs.shape == (len(token_lists), 128)
    for row, token_list in zip(sigs, token_lists, strict=True):
        expect = reference(token_list, scheme=scheme)
        assert row.dtype == expect.dtype
        np.testing.assert_array_equal(row, expect)


@pytest.mark.parametrize("scheme", SCHEMES)
@pytest.mark.parametrize(("num_perm", "seed"), [(1, 1), (7, 0), (128, 42), (256, 1)])
def test_parameters_and_sizes_match_datasketch(scheme: str, num_perm: int, seed: int) -> None:
    a, b = permutations(num_perm, seed, scheme)  # type: ignore[arg-type]
    expect = datasketch.MinHash(num_perm=num_perm, seed=seed, scheme=scheme).permutations
    np.testing.assert_array_equal(a, expect[0])
    np.testing.assert_array_equal(b, expect[1])
    token_list = ["the", "cabinet", "1", "", "the", "äöü 🙂"]
    sig = minhash_from_tokens([token_list], num_perm, seed, scheme)  # type: ignore[arg-type]
    np.testing.assert_array_equal(sig[0], reference(token_list, num_perm, seed, scheme))


@pytest.mark.parametrize("scheme", SCHEMES)
def test_empty_sets_and_megabyte_tokens(scheme: str) -> None:
    big = "x" * (1 << 20) + "é"
    sigs = minhash_from_tokens([[], [big], [""]], scheme=scheme)  # type: ignore[arg-type]
    for row, token_list in zip(sigs, [[], [big], [""]], strict=True):
        np.testing.assert_array_equal(row, reference(token_list, scheme=scheme))
    assert (sigs[0] == 2**32 - 1).all()


def test_first_parameters_at_seed_1() -> None:
    assert (int(permutations(128, 1, "affine32")[0][0]), int(permutations(128, 1, "affine32")[1][0])) == (
        3582191691,
        214548472,
    )
    assert (int(permutations(128, 1, "legacy")[0][0]), int(permutations(128, 1, "legacy")[1][0])) == (
        775169054918279404,
        1758426461858698312,
    )


def test_shingles() -> None:
    assert shingles("You see  a cabinet 1") == ["You see a", "see a cabinet", "a cabinet 1"]
    assert shingles("a b") == ["a b"]
    assert shingles("   ") == []
    assert shingles("Ab Ab", "word", lowercase=True) == ["ab", "ab"]
    assert shingles("äbçd", "char_ngram", 3) == ["äbç", "bçd"]
    with pytest.raises(ValueError, match="shingle"):
        shingles("a", "lines")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="text"):
        shingles(None)  # type: ignore[arg-type]


# Every character str.isspace() accepts, and a few look-alikes it rejects (zero-width space,
# Mongolian vowel separator, BOM, NUL, information separator U+001B's neighbour ESC).
SEPARATORS = [" ", "\t", "\n", "\x0b", "\x0c", "\r", "\x1c", "\x1d", "\x1e", "\x1f", "\x85", "\xa0", "\u1680",
              "\u2000", "\u2005", "\u200a", "\u2028", "\u2029", "\u202f", "\u205f", "\u3000",
              "\u200b", "\u180e", "\ufeff", "\x00", "\x1b"]  # fmt: skip

# Texts that stress the rules: any code points, separators and look-alikes, short ASCII words between
# separators, and letters whose lowercase is special (final sigma, İ → two code points, ǅ, ẞ).
edge_text = st.lists(
    st.one_of(unicode_text, st.sampled_from(SEPARATORS), st.text("aB \x1c\x1f\t"), st.text("ΣσΑİǅẞ'. ", max_size=6)),
    max_size=12,
).map("".join)


def python_shingles(text: str, shingle: str, n: int, lowercase: bool = False) -> list[str]:
    """The documented shingling, written out independently of the library: text.lower() first when
    asked; "word": the words of str.split(); "word_ngram": runs of n words joined by one space;
    "char_ngram": runs of n code points. A text shorter than one n-gram is one shingle, a text
    without units (words, or for char n-grams characters) has none."""
    if lowercase:
        text = text.lower()
    if shingle == "word":
        return text.split()
    units, join = (text.split(), " ".join) if shingle == "word_ngram" else (list(text), "".join)
    k = min(n, len(units))
    return [join(units[i : i + k]) for i in range(len(units) - k + 1)] if units else []


def assigned(text: str) -> str:
    """text without the code points unassigned in this interpreter's Unicode database. The library
    lowercases with Rust's newer tables (Unicode 16), which give some of them (U+1C89, U+A7CB, ...)
    a lowercase; Python 3.11's str.lower() (Unicode 14) keeps them."""
    return "".join(c for c in text if unicodedata.category(c) != "Cn")


@pytest.mark.parametrize("scheme", SCHEMES)
@settings(max_examples=150, deadline=None)
@given(
    texts=st.lists(edge_text, min_size=1, max_size=4),
    shingle=st.sampled_from(["word", "word_ngram", "char_ngram"]),
    n=st.integers(1, 6),
    lowercase=st.booleans(),
)
def test_text_signatures_equal_datasketch_over_python_shingles(
    scheme: str, texts: list[str], shingle: str, n: int, lowercase: bool
) -> None:
    if lowercase:
        texts = [assigned(t) for t in texts]
    expect = [python_shingles(t, shingle, n, lowercase) for t in texts]
    assert [shingles(t, shingle, n, lowercase=lowercase) for t in texts] == expect  # type: ignore[arg-type]
    sigs = minhash_texts(texts, scheme=scheme, shingle=shingle, n=n, lowercase=lowercase)  # type: ignore[arg-type]
    for row, token_list in zip(sigs, expect, strict=True):
        np.testing.assert_array_equal(row, reference(token_list, scheme=scheme))


def test_word_boundaries_over_all_of_unicode() -> None:
    # Every code point between two letters: the ASCII path, then the Unicode path, against str.split.
    ascii_text = "x".join(map(chr, range(0x80))) + "x"
    assert shingles(ascii_text, "word") == ascii_text.split()
    text = "x".join(chr(c) for c in range(0x110000) if not 0xD800 <= c < 0xE000)
    assert shingles(text, "word") == text.split()


def test_megabyte_text() -> None:
    text = " ".join(f"w{i % 5000}" for i in range(200_000))
    assert len(text) >= 1 << 20
    np.testing.assert_array_equal(minhash_texts([text])[0], reference(python_shingles(text, "word_ngram", 3)))


def test_jaccard_matches_datasketch() -> None:
    a, b = ["a", "b", "c", "d"], ["a", "b", "c", "e"]
    sa, sb = minhash_from_tokens([a, b])
    ma, mb = datasketch.MinHash(), datasketch.MinHash()
    ma.update_batch([t.encode() for t in a])
    mb.update_batch([t.encode() for t in b])
    assert jaccard(sa, sb) == ma.jaccard(mb)


@pytest.mark.parametrize("num_perm", [16, 64, 128, 256])
def test_lsh_params_match_datasketch(num_perm: int) -> None:
    for threshold in [0.0, *np.round(np.arange(0.05, 1.0, 0.05), 2), 1.0]:  # both ends are valid
        for weights in [(0.5, 0.5), (0.2, 0.8)]:
            assert lsh_params(float(threshold), num_perm, weights) == _optimal_param(threshold, num_perm, *weights)
    assert lsh_params(np.float32(0.5), np.int64(num_perm)) == lsh_params(0.5, num_perm)  # numpy scalars are numbers


def test_bad_input_is_named() -> None:
    with pytest.raises(TypeError, match=r"token_lists\[0\]\[1\] \(row 0, item 1\) is NoneType, not str"):
        minhash_from_tokens([["a", None]])  # type: ignore[list-item]
    with pytest.raises(TypeError, match=r"token_lists\[2\]\[0\] \(row 2, item 0\) is bytes"):
        minhash_from_tokens([["a"], [], [b"a"]])  # type: ignore[list-item]
    with pytest.raises(TypeError, match=r"token_lists\[1\] \(row 1\) is str"):
        minhash_from_tokens([["a"], "b"])  # type: ignore[list-item]
    with pytest.raises(TypeError, match=r"token_lists\[0\] \(row 0\) is NoneType"):
        minhash_from_tokens([None])  # type: ignore[list-item]
    with pytest.raises(ValueError, match=r"token_lists\[1\]\[0\] \(row 1, item 0\) holds a lone surrogate"):
        minhash_from_tokens([["a"], ["\ud800"]])
    with pytest.raises(ValueError, match=r"texts\[1\] holds a lone surrogate"):
        minhash_texts(["a", "b\udfff"])
    with pytest.raises(ValueError, match=r"seed must be in 0\.\.2\*\*"):
        minhash_from_tokens([["a"]], seed=-1)
    with pytest.raises(TypeError, match="seed must be an int"):
        minhash_from_tokens([["a"]], seed=None)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="num_perm"):
        minhash_from_tokens([["a"]], num_perm=True)
    with pytest.raises(ValueError, match="shingle"):
        minhash_texts(["a"], shingle="lines")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="threshold"):
        lsh_params(None)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="token_lists"):
        minhash_from_tokens("abc")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="texts"):
        minhash_texts(["a", 3])  # type: ignore[list-item]
    with pytest.raises(ValueError, match="scheme"):
        minhash_from_tokens([["a"]], scheme="affine64")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="num_perm"):
        minhash_from_tokens([["a"]], num_perm=0)
    with pytest.raises(ValueError, match="n must"):
        minhash_texts(["a"], n=0)
    with pytest.raises(ValueError, match="threshold"):
        lsh_params(1.5)
