"""SimHash against the simhash package itself (2.1.2, defaults)."""

from __future__ import annotations

import random
import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from testkit.hashing import unicode_text
from testkit.peers import import_peer

from pyagentrl.hashing import hamming, simhash, simhash_weighted
from pyagentrl.hashing._native import native

simhash_pkg = import_peer("simhash")

ascii_text = st.text(st.characters(max_codepoint=127), max_size=80)


@settings(max_examples=80, deadline=None)
@given(st.lists(st.one_of(unicode_text, ascii_text), max_size=8))
def test_random_text_matches_package(texts: list[str]) -> None:
    values = simhash(texts)
    assert values.dtype == np.uint64 and values.shape == (len(texts),)
    assert values.tolist() == [simhash_pkg.Simhash(t).value for t in texts]


@pytest.mark.parametrize(
    "text",
    [
        "",
        "a",
        "abc",
        "abcd",
        "ABCDE",
        "!!!",
        "İstanbul ΣΑΣ straße",
        "汉字测试文本",
        "ǅungla ⅷ ²³ ٣",
        "a\u0301b\u0301cd",
    ],
)
def test_edge_cases_match_package(text: str) -> None:
    assert int(simhash([text])[0]) == simhash_pkg.Simhash(text).value


def test_megabyte_text_matches_package() -> None:
    # Random letters: the package itself overflows (numpy 2, uint8) when one 4-gram occurs more
    # than 255 times, so the reference text must keep counts low; ours has no such limit.
    rng = random.Random(0)
    text = "".join(rng.choice("abcdefghijklmnopqrstuvwxyz  .,ÄÖ") for _ in range(1 << 20))
    assert int(simhash([text])[0]) == simhash_pkg.Simhash(text).value


def test_weighted_features_match_package() -> None:
    docs = [
        {"cabinet": 3, "drawer": 1, "apple": 7},
        [("x", 1), ("y", 2), ("z", 60)],  # weight above the package's batch cutoff
        ["plain", "features", "plain"],
        [("half", 0.5), ("quarter", 0.25), ("one", 1.0)],
    ]
    expect = [simhash_pkg.Simhash(d).value for d in docs]
    assert simhash_weighted(docs).tolist() == expect
    # Counting 4-grams by hand gives the text fingerprint.
    text = "abcdeabcd"
    grams: dict[str, int] = {}
    for i in range(len(text) - 3):
        grams[text[i : i + 4]] = grams.get(text[i : i + 4], 0) + 1
    assert simhash_weighted([grams])[0] == simhash([text])[0]


def test_hamming() -> None:
    a = simhash_pkg.Simhash("you see a cabinet 1 and a drawer")
    b = simhash_pkg.Simhash("you see a cabinet 2 and a drawer")
    assert int(hamming(a.value, b.value)) == a.distance(b)
    np.testing.assert_array_equal(hamming(np.array([0, 1, 3], np.uint64), 0), [0, 1, 2])


def test_bad_input_is_named() -> None:
    with pytest.raises(TypeError, match="texts"):
        simhash(["a", None])  # type: ignore[list-item]
    with pytest.raises(TypeError, match="texts"):
        simhash("abc")
    with pytest.raises(TypeError, match="texts"):
        simhash([b"abc"])  # type: ignore[list-item]
    with pytest.raises(ValueError, match="weights"):
        simhash_weighted([{"a": -1.0}])
    with pytest.raises(ValueError, match="no features"):
        simhash_weighted([{}])
    with pytest.raises(TypeError, match=r"documents\[0\]"):
        simhash_weighted(["abc"])  # type: ignore[list-item]
    with pytest.raises(TypeError, match=r"texts\[1\] is NoneType"):
        simhash(["é", None])  # type: ignore[list-item]
    with pytest.raises(ValueError, match=r"texts\[0\] holds a lone surrogate"):
        simhash(["\ud800"])
    with pytest.raises(TypeError, match=r"documents\[0\]\[0\] must be a feature str or a \(feature, weight\) pair"):
        simhash_weighted([[("a",)]])  # type: ignore[list-item]
    with pytest.raises(TypeError, match=r"documents\[1\]\[1\] must be a feature str .* got NoneType"):
        simhash_weighted([["a"], ["b", None]])  # type: ignore[list-item]
    with pytest.raises(TypeError, match=r"documents\[0\]\['a'\]: the weight must be a real number, got NoneType"):
        simhash_weighted([{"a": None}])  # type: ignore[dict-item]
    with pytest.raises(TypeError, match=r"documents\[0\]\[0\]: the weight must be a real number, got str"):
        simhash_weighted([[("a", "x")]])  # type: ignore[list-item]
    with pytest.raises(TypeError, match=r"documents\[0\]\[0\]: the feature must be str"):
        simhash_weighted([[(1, 1.0)]])  # type: ignore[list-item]
    with pytest.raises(ValueError, match=r"documents\[1\]\['b\\ud800'\]: the feature holds a lone surrogate"):
        simhash_weighted([{"a": 1}, {"ok": 1, "b\ud800": 1}])
    with pytest.raises(ValueError, match=r"documents\[0\]\[1\]: the feature holds a lone surrogate"):
        simhash_weighted([[("a", 1), ("\ud800", 2)]])


def package_normalize(text: str) -> str:
    """The package's normalisation, written out: lowercase, keep the matches of its `reg`."""
    return "".join(re.findall(r"[\w\u4e00-\u9fcc]+", text.lower()))


def test_every_code_point_normalises_as_the_interpreter() -> None:
    # Texts of three consecutive code points normalise to at most three characters, the whole
    # text is then the package's only feature, so any character the native table maps wrongly
    # changes its text's fingerprint. Covers every page of the table (built here on first use).
    cps = [c for c in range(0x80, 0x110000) if not 0xD800 <= c < 0xE000]
    texts = ["".join(map(chr, cps[i : i + 3])) for i in range(0, len(cps), 3)]
    expect = native.simhash_normalized([package_normalize(t) for t in texts])
    np.testing.assert_array_equal(simhash(texts), expect)
    assert simhash_pkg.Simhash(texts[0]).value == int(expect[0])


@pytest.mark.parametrize(
    "text", ["ΑΣ", "ΣΑ", "Σ", "ΟΔΟΣ ΟΔΟΣ.", "aΣ'b", "Σ\u0345a", "ßİΣ🙂", "x" * 10 + "ΣΣΣ" + "é" * 10]
)
def test_capital_sigma_follows_the_interpreter(text: str) -> None:
    # str.lower turns Σ into ς at the end of a word: the one rule that needs the interpreter.
    assert int(simhash([text, text.lower()])[0]) == simhash_pkg.Simhash(text).value
