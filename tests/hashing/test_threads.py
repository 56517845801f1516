"""Batches larger than one task (1,024 rows): one thread and two give the reference's results.

With two threads every batch call splits into several blocks run in parallel (each with its own
memo), so these tests cover the multi-block paths that small batches never reach.
"""

from __future__ import annotations

import os
import random
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from testkit.hashing import partition
from testkit.peers import import_peer

from pyagentrl.hashing import (
    StateKeyer,
    array_keys,
    bytes_keys,
    group_exact,
    group_minhash,
    group_simhash,
    keys,
    minhash_from_tokens,
    minhash_texts,
    simhash,
    text_keys,
)
from pyagentrl.hashing._args import max_threads

datasketch = import_peer("datasketch")
simhash_pkg = import_peer("simhash")
xxhash = import_peer("xxhash")

ROWS = 3000  # about three 1,024-row tasks
THREADS = (1, 2)


def observations(n: int, seed: int = 0) -> list[str]:
    """ALFWorld-like observations: a few rooms and objects, some repeats, some non-ASCII text and
    whitespace (which the "alfworld" canonicaliser collapses)."""
    rng = random.Random(seed)
    rooms = ["kitchen", "bedroom", "bathroom", "living room", "Küche", "chambre à coucher"]
    things = ["cabinet", "drawer", "fridge", "countertop", "shelf", "armoire", "Schublade"]
    out = []
    for _ in range(n):
        seen = ", ".join(f"a {rng.choice(things)} {rng.randint(1, 4)}" for _ in range(rng.randint(2, 8)))
        space = rng.choice([" "] * 6 + ["  ", "\n", "\u00a0", "\u3000"])
        text = f"You are in the {rng.choice(rooms)}.{space}Looking quickly around you, you see {seen}."
        if rng.random() < 0.1:
            text += " Ο ΔΡΌΜΟΣ 🙂"  # capital sigma: the interpreter's own normalisation
        out.append(text)
    return out


TEXTS = observations(ROWS)


def word_ngrams(text: str, n: int = 3) -> list[str]:
    """Word n-gram shingling (n-grams of str.split() joined by one space, the whole text when shorter)
    written out here, so the comparison with datasketch does not take the library's shingles on trust."""
    words = text.split()
    k = min(n, len(words))
    return [" ".join(words[i : i + k]) for i in range(len(words) - k + 1)] if words else []


def datasketch_signature(tokens: list[str], scheme: str) -> np.ndarray:
    m = datasketch.MinHash(num_perm=128, seed=1, scheme=scheme)
    m.update_batch([t.encode("utf-8") for t in tokens])
    return m.hashvalues


@pytest.mark.parametrize("bits", [64, 128])
def test_text_keys(bits: int) -> None:
    runs = [text_keys(TEXTS, bits, seed=7, num_threads=t) for t in THREADS]  # type: ignore[arg-type]
    np.testing.assert_array_equal(runs[0], runs[1])
    digest = xxhash.xxh3_64_intdigest if bits == 64 else xxhash.xxh3_128_intdigest
    expect = [digest(t.encode("utf-8"), 7) for t in TEXTS]
    got = runs[0].tolist() if bits == 64 else [lo | hi << 64 for lo, hi in runs[0].tolist()]
    assert got == expect


@pytest.mark.parametrize("scheme", ["affine32", "legacy"])
def test_minhash(scheme: str) -> None:
    token_lists = [word_ngrams(t) for t in TEXTS]
    expect = np.stack([datasketch_signature(tokens, scheme) for tokens in token_lists])
    for t in THREADS:
        np.testing.assert_array_equal(minhash_texts(TEXTS, scheme=scheme, num_threads=t), expect)  # type: ignore[arg-type]
        np.testing.assert_array_equal(minhash_from_tokens(token_lists, scheme=scheme, num_threads=t), expect)  # type: ignore[arg-type]


def test_simhash() -> None:
    expect = [simhash_pkg.Simhash(t).value for t in TEXTS]
    for t in THREADS:
        assert simhash(TEXTS, num_threads=t).tolist() == expect


@pytest.mark.parametrize("mode", ["exact", "minhash", "simhash"])
def test_state_keyer(mode: str) -> None:
    groups = np.random.default_rng(0).integers(0, 3, size=ROWS)
    # Non-default settings, so that a keyer dropping one of them fails. The threshold is 96/128: some
    # pairs estimate exactly that, and must join (Jaccard >= threshold).
    options = {"canonicalize": "alfworld", "threshold": 0.75, "k": 4, "ngram": 2, "lowercase": True}
    runs = [StateKeyer(mode, **options, num_threads=t).assign(TEXTS, groups) for t in THREADS]  # type: ignore[arg-type]
    np.testing.assert_array_equal(runs[0], runs[1])
    # The same partition from the reference packages' sketches, grouped row by row. No text starts with
    # an echoed "> command" line, so canonicalising is collapsing whitespace runs to one space.
    canonical = [" ".join(t.split()) for t in TEXTS]
    if mode == "exact":
        reference = [hash((g, t)) for g, t in zip(groups.tolist(), canonical, strict=True)]
    elif mode == "minhash":
        sigs = np.stack([datasketch_signature(word_ngrams(t.lower(), 2), "affine32") for t in canonical])
        reference = group_minhash(sigs, groups, 0.75, num_threads=1).tolist()
    else:
        fps = np.array([simhash_pkg.Simhash(t).value for t in canonical], dtype=np.uint64)
        reference = group_simhash(fps, groups, 4, num_threads=1).tolist()
    assert partition(runs[0]) == partition(reference)


def test_batch_call_releases_the_gil() -> None:
    # Ordering, not timing: with a huge switch interval no thread is ever forced to give up the
    # GIL, so the main thread (woken by `entered`) can run before the worker has finished only if
    # the worker's batch call releases the GIL. The worker sets `done` right after the call, and
    # nothing between `entered.set()` and the call gives up the GIL voluntarily.
    texts = TEXTS * 10
    entered, state = threading.Event(), {"done": False}

    def worker() -> None:
        entered.set()
        minhash_texts(texts, num_threads=1)
        state["done"] = True

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1000.0)
    try:
        thread = threading.Thread(target=worker)
        thread.start()
        entered.wait()
        done_when_main_ran = state["done"]
        thread.join()
    finally:
        sys.setswitchinterval(interval)
    assert state["done"]
    assert not done_when_main_ran, "the main thread could not run while minhash_texts was running"


# ---- the bound on num_threads and the extension's pool cache -------------------------------------------------------

SIGS = minhash_texts(["a b c", "a b d"])
# Every public function that takes num_threads, called with it.
WITH_THREADS: list[Callable[[int], Any]] = [
    lambda t: text_keys(["a"], num_threads=t),
    lambda t: bytes_keys([b"a"], num_threads=t),
    lambda t: array_keys([np.zeros(2)], num_threads=t),
    lambda t: keys(["a"], num_threads=t),
    lambda t: minhash_from_tokens([["a"]], num_threads=t),
    lambda t: minhash_texts(["a"], num_threads=t),
    lambda t: simhash(["a"], num_threads=t),
    lambda t: group_exact(np.zeros(2, dtype=np.uint64), [0, 0], num_threads=t),
    lambda t: group_minhash(SIGS, [0, 0], 0.5, num_threads=t),
    lambda t: group_simhash(np.zeros(2, dtype=np.uint64), [0, 0], num_threads=t),
    lambda t: StateKeyer("exact", num_threads=t),
]


@pytest.mark.parametrize("call", WITH_THREADS)
def test_num_threads_above_the_cap_is_refused(call: Callable[[int], Any]) -> None:
    cores = os.cpu_count() or 1
    cap = max_threads()
    assert cap == 4 * cores
    for too_many in (cap + 1, 100_000, 2**62):  # 100,000 once hung the process, building a pool per size
        message = (
            f"num_threads must be at most {cap} (4 x the {cores} cores: more threads cannot hash faster), "
            f"got {too_many}; None uses all cores"
        )
        start = time.perf_counter()
        with pytest.raises(ValueError) as err:
            call(too_many)
        assert str(err.value) == message
        assert time.perf_counter() - start < 1.0  # refused before any pool is built
    call(cap)  # the cap itself is allowed


def _os_threads() -> int:
    return len(os.listdir("/proc/self/task"))


def _settle(bound: int, timeout: float = 10.0) -> int:
    """The process's thread count once it is at most ``bound``, or after ``timeout`` s (the threads of a dropped pool
    exit when they next wake, shortly after the pool is dropped)."""
    deadline = time.monotonic() + timeout
    while _os_threads() > bound and time.monotonic() < deadline:
        time.sleep(0.05)
    return _os_threads()


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="counts the process's threads in /proc")
def test_pools_are_shared_by_size_and_their_number_is_bounded() -> None:
    # A size asked for again reuses its pool: no new OS thread, however often.
    text_keys(["a"], num_threads=3)
    before = _os_threads()
    for _ in range(20):
        text_keys(["a"], num_threads=3)
    assert _os_threads() == before
    # Every allowed size, round after round: the extension keeps at most 4 pools (rust_hash/core/src/parallel.rs,
    # POOL_CACHE_SIZES), so at most the 4 largest sizes' threads stay alive. Keeping every size, as it once did,
    # leaves 1 + 2 + ... + cap threads (36 for the cap of 8 on 2 cores, against 26 for the 4 largest).
    sizes = list(range(1, max_threads() + 1))
    for _ in range(3):
        for t in sizes:
            text_keys(["a"], num_threads=t)
    # Before the rounds: the other threads of the process plus at most 4 pools, none larger than the cap.
    others = before - 3
    bound = others + sum(sorted(sizes)[-4:])
    assert _settle(bound) <= bound
