"""Benchmark of pyagentrl.hashing (state keys) against datasketch, simhash and Python hashing.

Run: .venv/bin/python benchmarks/bench_hashing.py [--write] [--tasks 512] [--subset 2000]

Every figure is measured in this run on the same texts: a synthetic ALFWorld-like batch of
204,800 observations (512 task groups x 8 rollouts x 50 steps; ``--tasks`` sets the groups). Ours
runs on one thread and on all cores (``num_threads``); the baselines are single-threaded Python.
Every timing is the best of 3-20 repeats (the machine is shared); slow baselines run on a subset
(``--subset`` texts) and are compared per text.

Every output of ours that is timed is checked in the run, on all of its inputs, against an
independent computation: keys against python-xxhash, MinHash against datasketch, SimHash against
the simhash package, grouping against connected components built from those. A failed check raises
CheckFailed, so the script exits non-zero.
``--write`` replaces the "State keys" section of benchmarks/RESULTS.md.
"""

from __future__ import annotations

import argparse
import difflib
import hashlib
import importlib.metadata
import importlib.util
import os
import platform
import random
import sys
import time
from collections.abc import Callable, Sequence
from datetime import datetime, timezone
from functools import partial
from typing import Any

import numpy as np
from machine import cpu_model  # benchmarks/machine.py (the script's folder is on sys.path)
from results import Headline, write_section  # benchmarks/results.py

from pyagentrl.hashing import StateKeyer, minhash_texts, simhash, text_keys

SECTION = "## State keys"
NUM_PERM = 128
MINHASH_THRESHOLDS = (0.9, 0.8)
SIMHASH_KS = (3, 6)

# ---------------------------------------------------------------- synthetic ALFWorld-like batch

# fmt: off
RECEPTACLES = ["cabinet", "drawer", "countertop", "shelf", "stoveburner", "sinkbasin", "fridge", "microwave",
               "garbagecan", "coffeemachine", "toaster", "diningtable", "sidetable", "dresser", "desk", "safe"]
OBJECTS = ["apple", "bread", "butterknife", "cellphone", "cup", "dishsponge", "egg", "fork", "kettle", "knife",
           "ladle", "lettuce", "mug", "pan", "peppershaker", "plate", "pot", "potato", "saltshaker", "soapbottle",
           "spatula", "spoon", "tomato", "book", "keychain", "pen", "pencil", "creditcard", "vase", "watch"]
# fmt: on
OPENABLE = {"cabinet", "drawer", "fridge", "microwave", "safe"}
SURFACES = {"countertop", "diningtable", "shelf", "sidetable", "desk"}


def listing(items: list[str]) -> str:
    if not items:
        return "nothing"
    named = [f"a {x}" for x in items]
    return named[0] if len(named) == 1 else ", ".join(named[:-1]) + ", and " + named[-1]


def task_layout(rng: random.Random) -> tuple[list[str], dict[str, list[str]], str]:
    """Receptacles (kind + index), their contents, and the task line of one ALFWorld-like task."""
    places = []
    for kind in rng.sample(RECEPTACLES, rng.randint(8, 13)):
        count = rng.randint(2, 9) if kind in ("cabinet", "drawer") else rng.randint(1, 3)
        places += [f"{kind} {i}" for i in range(1, count + 1)]
    surfaces = [p for p in places if p.split()[0] in SURFACES]
    contents: dict[str, list[str]] = {p: [] for p in places}
    for kind in rng.sample(OBJECTS, rng.randint(24, 30)):
        for i in range(1, rng.randint(2, 5) + 1):
            place = rng.choice(surfaces) if surfaces and rng.random() < 0.5 else rng.choice(places)
            contents[place].append(f"{kind} {i}")
    task = f"put a {rng.choice(OBJECTS)} in {rng.choice(places)}"
    return places, contents, task


def rollout(rng: random.Random, places: list[str], layout: dict[str, list[str]], task: str, steps: int) -> list[str]:
    """Observations of one random-policy episode: feedback plus the location's admissible actions.

    Half of the moves head for a surface (where the objects are), as a searching agent does.
    """
    surfaces = [p for p in places if p.split()[0] in SURFACES]
    contents = {p: list(v) for p, v in layout.items()}
    opened: set[str] = set()
    here: str | None = None
    held: str | None = None
    intro = f"You are in the middle of a room. Looking quickly around you, you see {listing(places)}."
    obs = [f"{intro}\n\nYour task is to: {task}."]
    for _ in range(steps - 1):
        r = rng.random()
        visible = here is not None and (here.split()[0] not in OPENABLE or here in opened)
        if r < 0.55 or here is None:
            here = rng.choice(surfaces) if surfaces and rng.random() < 0.5 else rng.choice(places)
            if here.split()[0] in OPENABLE and here not in opened:
                text = f"You arrive at {here}. The {here} is closed."
            elif here.split()[0] in OPENABLE:
                text = f"You arrive at {here}. The {here} is open. In it, you see {listing(contents[here])}."
            else:
                text = f"You arrive at {here}. On the {here}, you see {listing(contents[here])}."
        elif r < 0.65 and here.split()[0] in OPENABLE and here not in opened:
            opened.add(here)
            text = f"You open the {here}. The {here} is open. In it, you see {listing(contents[here])}."
        elif r < 0.75 and visible and held is None and contents[here]:
            held = rng.choice(contents[here])
            contents[here].remove(held)
            text = f"You pick up the {held} from the {here}."
        elif r < 0.80 and visible and held is not None:
            contents[here].append(held)
            text = f"You put the {held} in/on the {here}."
            held = None
        elif r < 0.85:
            text = f"You are facing the {here}. Next to it, you see nothing."
        else:
            text = "Nothing happens."
        visible = here.split()[0] not in OPENABLE or here in opened
        actions = [f"take {o} from {here}" for o in contents[here]] if visible and held is None else []
        if held is not None:
            actions.append(f"put {held} in/on {here}")
        if here.split()[0] in OPENABLE:
            actions.append(f"{'close' if here in opened else 'open'} {here}")
        actions += [f"examine {here}", "inventory", "look"]
        obs.append(text + "\nAdmissible actions: " + ", ".join(actions) + ".")
    return obs


Layout = tuple[list[str], dict[str, list[str]], str]


def alfworld_batch(
    tasks: int = 512, rollouts: int = 8, steps: int = 50, seed: int = 0, layouts: list[Layout] | None = None
) -> tuple[list[str], np.ndarray]:
    """The batch; each task's layout is appended to ``layouts`` when given (to play the same tasks again)."""
    rng = random.Random(seed)
    texts: list[str] = []
    groups: list[int] = []
    for t in range(tasks):
        places, layout, task = task_layout(rng)
        if layouts is not None:
            layouts.append((places, layout, task))
        for _ in range(rollouts):
            texts.extend(rollout(rng, places, layout, task, steps))
            groups.extend([t] * steps)
    return texts, np.asarray(groups, dtype=np.int64)


# ---------------------------------------------------------------- timing and checking helpers


def best(fn: Callable[[], Any], repeats: int = 3) -> tuple[float, Any]:
    """The fastest of ``repeats`` calls, in seconds, and the last call's result (which the run checks)."""
    times = []
    result = None
    for _ in range(repeats):
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
    return min(times), result


class CheckFailed(AssertionError):
    """An output of ours differs from its independent computation."""


def require(ok: bool, what: str) -> None:
    """Raises CheckFailed (a non-zero exit) unless ``ok``; not an ``assert``, so ``python -O`` keeps it."""
    if not ok:
        raise CheckFailed(f"bench_hashing check failed: {what}")


def differing(ours: np.ndarray, expected: np.ndarray) -> int:
    """Rows of ``ours`` that differ from ``expected`` (all rows when the shapes differ)."""
    if ours.shape != expected.shape:
        return len(expected)
    diff = ours != expected
    return int(diff.reshape(len(diff), -1).any(axis=1).sum())


def require_equal(ours: np.ndarray, expected: np.ndarray, what: str) -> None:
    n = differing(np.asarray(ours), np.asarray(expected))
    require(n == 0, f"{what}: {n:,} of {len(expected):,} rows differ")


def note(message: str) -> None:
    """Progress on stderr (the report goes to stdout)."""
    print(f"[bench_hashing] {message}", file=sys.stderr, flush=True)


def version(package: str) -> str:
    return importlib.metadata.version(package)


def word_3grams(text: str) -> list[bytes]:
    """What a datasketch user writes: Python shingling, UTF-8 encoding."""
    w = text.split()
    return [" ".join(w[i : i + 3]).encode() for i in range(max(1, len(w) - 2))] if w else []


def distinct_texts(texts: Sequence[str]) -> tuple[list[str], np.ndarray]:
    """The distinct texts in first-appearance order and each row's index among them: a reference package runs
    once per distinct text, and each row is checked against its text's result."""
    position: dict[str, int] = {}
    inverse = np.fromiter((position.setdefault(t, len(position)) for t in texts), dtype=np.int64, count=len(texts))
    return list(position), inverse


def first_appearance(keys: np.ndarray) -> np.ndarray:
    """Dense ids of equal keys, numbered by first appearance in row order (the numbering StateKeyer documents)."""
    _, first, inverse = np.unique(keys, return_index=True, return_inverse=True)
    rank = np.empty(len(first), dtype=np.int64)
    rank[np.argsort(first)] = np.arange(len(first))
    return rank[inverse.reshape(-1)]


def machine() -> str:
    return f"{cpu_model()}, {os.cpu_count()} cores, Python {platform.python_version()}, {platform.system()}"


def group_stats(ids: np.ndarray, exact: np.ndarray) -> tuple[float, float, int]:
    """Share of rows in groups of size >= 2, purity against exact ids, and number of groups."""
    sizes = np.bincount(ids)
    in_groups = float(np.mean(sizes[ids] >= 2))
    # Purity: each approximate group counts the rows of its largest exact state.
    pairs = np.unique(np.stack([ids, exact]), axis=1, return_counts=True)
    largest = np.zeros(len(sizes), dtype=np.int64)
    np.maximum.at(largest, pairs[0][0], pairs[1])
    return in_groups, float(largest.sum() / len(ids)), len(sizes)


# ---------------------------------------------------------------- the independent grouping


def reference_groupings(
    groups: np.ndarray, text_of_row: np.ndarray, signatures: np.ndarray, fingerprints: np.ndarray
) -> dict[tuple[str, float], np.ndarray]:
    """The anchor ids StateKeyer.assign must return, computed without the library, for every mode benchmarked.

    ``signatures`` (datasketch, affine32, seed 1) and ``fingerprints`` (the simhash package) are per distinct text.
    exact: rows of one task group with equal text. minhash, threshold t: connected components, within a task
    group, of the distinct texts joined when their signatures share one of the bands of datasketch's
    ``MinHashLSH(t, 128)`` (its b bands of r lanes) and agree on a share of at least t of their lanes.
    simhash, k: components of the texts whose fingerprints differ in at most k bits. All pairs of each task
    group's distinct texts are tested. Ids are numbered by first appearance in row order.
    """
    import datasketch
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import connected_components

    pair = first_appearance(groups * (int(text_of_row.max()) + 1) + text_of_row)  # (task group, text) pairs
    out: dict[tuple[str, float], np.ndarray] = {("exact", 0): pair}
    _, pair_row = np.unique(pair, return_index=True)
    pair_group, pair_text = groups[pair_row], text_of_row[pair_row]
    bands = {}  # threshold -> datasketch's (bands, lanes per band)
    for t in MINHASH_THRESHOLDS:
        lsh = datasketch.MinHashLSH(threshold=t, num_perm=NUM_PERM)
        bands[t] = (lsh.b, lsh.r)
    edges: dict[tuple[str, float], list[tuple[np.ndarray, np.ndarray]]] = {}
    by_group = np.argsort(pair_group, kind="stable")
    starts = np.flatnonzero(np.diff(pair_group[by_group], prepend=-1))
    for members in np.split(by_group, starts[1:]):
        sigs, fps = signatures[pair_text[members]], fingerprints[pair_text[members]]
        i, j = np.triu_indices(len(members), 1)
        equal_lanes = sigs[:, None, :] == sigs[None, :, :]
        jaccard = equal_lanes.sum(axis=-1)[i, j] / NUM_PERM
        for t, (b, r) in bands.items():
            share_band = equal_lanes[:, :, : b * r].reshape(len(members), len(members), b, r).all(-1).any(-1)[i, j]
            keep = share_band & (jaccard >= t)
            edges.setdefault(("minhash", t), []).append((members[i[keep]], members[j[keep]]))
        bits = np.bitwise_count(fps[:, None] ^ fps[None, :])[i, j]
        for k in SIMHASH_KS:
            keep = bits <= k
            edges.setdefault(("simhash", k), []).append((members[i[keep]], members[j[keep]]))
    n = len(pair_row)
    for mode, parts in edges.items():
        src, dst = np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])
        graph = coo_matrix((np.ones(len(src), dtype=np.int8), (src, dst)), shape=(n, n))
        _, component = connected_components(graph, directed=False)
        out[mode] = first_appearance(component[pair])
    return out


# ---------------------------------------------------------------- benchmark


def verdict(met: bool) -> str:
    return "met" if met else "**missed**"


def bench_keys(texts: list[str], cores: int, add: Callable[[str], None], heads: list[tuple[str, str, str]]) -> None:
    import xxhash  # the keys' check: required

    n, total = len(texts), sum(len(t.encode()) for t in texts)
    big = [f"You see a cabinet {i}. " * 50_000 for i in range(32)]
    big_total = sum(len(t) for t in big)
    # The baselines first: python-xxhash's keys are also the check of ours (the documented keying: XXH3-64 of the
    # text's UTF-8 bytes, seed 0).
    xx_t, xx = best(lambda: [xxhash.xxh3_64_intdigest(t.encode()) for t in texts])
    blake_t, _ = best(lambda: [hashlib.blake2b(t.encode(), digest_size=8).digest() for t in texts])
    expected = np.array(xx, dtype=np.uint64)
    # The same texts listed in a random order: each item's object is then far from the previous one in memory,
    # as when observations arrive from many environment workers.
    order = random.Random(0).sample(range(n), n)
    shuffled = [texts[i] for i in order]
    add("### Exact keys (XXH3-64 of UTF-8)")
    add("")
    add("| what | time | throughput |")
    add("|---|---|---|")
    one_core, one_core_s = [], []
    for label, batch, size, expect in [
        (f"{n:,} texts", texts, total, expected),
        (f"{n:,} texts, listed in random order", shuffled, total, expected[order]),
        (
            f"32 texts of {len(big[0]) / 1e6:.1f} MB",
            big,
            big_total,
            [xxhash.xxh3_64_intdigest(t.encode()) for t in big],
        ),
    ]:
        for threads in (1, cores):
            dt, keys = best(partial(text_keys, batch, num_threads=threads), 20)
            require_equal(keys, np.array(expect, dtype=np.uint64), f"text_keys, {label}, {threads} thread(s)")
            add(f"| ours, {threads} thread(s), {label} | {dt * 1e3:.1f} ms | {size / dt / 1e9:.2f} GB/s |")
            if threads == 1:
                one_core.append(size / dt / 1e9)
                one_core_s.append(dt)
    add(f"| python-xxhash loop, {n:,} texts | {xx_t * 1e3:.1f} ms | {total / xx_t / 1e9:.2f} GB/s |")
    heads.append(
        (
            f"exact keys (XXH3-64), {n:,} texts, one thread",
            f"{one_core[0]:.2f} GB/s ({one_core_s[0] * 1e3:.1f} ms)",
            f"python-xxhash loop, {total / xx_t / 1e9:.2f} GB/s ({xx_t * 1e3:.1f} ms)",
        )
    )
    add(f"| hashlib.blake2b(8) loop, {n:,} texts | {blake_t * 1e3:.1f} ms | {total / blake_t / 1e9:.2f} GB/s |")
    add("")
    add(
        f"Target >= 2 GB/s of text per core: {verdict(one_core[0] >= 2)} "
        f"({one_core[0]:.2f} GB/s on the batch as generated, "
        f"{one_core[1]:.2f} GB/s in random order). Reading each text's Python object under the GIL is a cache miss "
        f"that costs more than hashing it; the extension prefetches the objects a few items ahead."
    )
    add("")
    add(
        f"Checked: every key of every timed call of ours (all three inputs, 1 and {cores} threads) equals "
        f"python-xxhash {version('xxhash')}'s `xxh3_64_intdigest(text.encode())` of the same text, the library's "
        f"documented keying (XXH3-64 of the UTF-8 bytes, seed 0). The blake2b loop is shown for scale only."
    )
    add("")


def bench_minhash(
    texts: list[str],
    subset: list[str],
    distinct: list[str],
    text_of_row: np.ndarray,
    cores: int,
    add: Callable[[str], None],
    heads: list[tuple[str, str, str]],
) -> np.ndarray:
    """Times and checks MinHash; returns datasketch's affine32 signatures of the distinct texts (for grouping)."""
    import datasketch

    def reference(scheme: str) -> np.ndarray:
        """The issue's equivalence form: one MinHash per text, then update_batch."""
        out = []
        for t in subset:
            m = datasketch.MinHash(num_perm=NUM_PERM, scheme=scheme)
            m.update_batch(word_3grams(t))
            out.append(m.hashvalues)
        return np.stack(out)

    def reference_bulk(scheme: str, items: Sequence[str]) -> np.ndarray:
        """datasketch's batch path: MinHash.bulk reuses the permutations across texts."""
        found = datasketch.MinHash.bulk((word_3grams(t) for t in items), num_perm=NUM_PERM, scheme=scheme)
        return np.stack([m.hashvalues for m in found])

    ds = version("datasketch")
    add(f"### MinHash, 128 permutations, word 3-grams (vs datasketch {ds} on the same {len(subset):,} texts)")
    add("")
    add(
        "Two datasketch baselines, both with the same Python shingling: per text, `MinHash(...)` then "
        "`update_batch` (the form the issue states the equivalence in), and its batch path "
        "`MinHash.bulk(token_lists, num_perm=128, scheme=...)`, which reuses the permutations."
    )
    add("")
    add(
        "| scheme | datasketch, per text | datasketch, bulk | ours, 1 thread | ours, all cores | "
        "speed-up, 1 thread: vs per text / vs bulk | full batch, 1 / all |"
    )
    add("|---|---|---|---|---|---|---|")
    speedups, bulk_speedups, cells = [], [], []
    grouping_signatures = np.empty(0)
    for scheme in ("affine32", "legacy"):
        ref_t, expected = best(partial(reference, scheme))
        bulk_t, bulk = best(partial(reference_bulk, scheme, subset))
        require_equal(bulk, expected, f"datasketch's MinHash.bulk against its per-text MinHash ({scheme})")
        per_text = []
        for threads in (1, cores):
            dt, sigs = best(partial(minhash_texts, subset, scheme=scheme, num_threads=threads), 15)
            require_equal(sigs, expected, f"minhash_texts, {len(subset):,} texts, {scheme}, {threads} thread(s)")
            per_text.append(dt / len(subset))
        note(f"datasketch MinHash.bulk ({scheme}) on the {len(distinct):,} distinct texts of the full batch")
        full_expected = reference_bulk(scheme, distinct)
        full = []
        for threads in (1, cores):
            dt, sigs = best(partial(minhash_texts, texts, scheme=scheme, num_threads=threads))
            require_equal(sigs, full_expected[text_of_row], f"minhash_texts, full batch, {scheme}, {threads} thread(s)")
            full.append(dt)
        if scheme == "affine32":
            grouping_signatures = full_expected
        speedups.append(ref_t / len(subset) / per_text[0])
        bulk_speedups.append(bulk_t / len(subset) / per_text[0])
        cells.append((ref_t / len(subset) * 1e6, bulk_t / len(subset) * 1e6, per_text[0] * 1e6))
        add(
            f"| {scheme} | {ref_t / len(subset) * 1e6:.1f} µs/text | {bulk_t / len(subset) * 1e6:.1f} µs/text | "
            f"{per_text[0] * 1e6:.2f} µs/text | {per_text[1] * 1e6:.2f} µs/text | "
            f"{speedups[-1]:.0f}x / {bulk_speedups[-1]:.0f}x | {full[0]:.2f} s / {full[1]:.2f} s |"
        )
    add("")
    add(
        f"Target >= 50x datasketch, stated against its per-text form (default scheme, affine32): "
        f"{verdict(speedups[0] >= 50)} ({speedups[0]:.0f}x; legacy {speedups[1]:.0f}x). Against datasketch's "
        f"batch path `MinHash.bulk` the speed-up is {bulk_speedups[0]:.0f}x (legacy {bulk_speedups[1]:.0f}x)."
    )
    per_text_us, bulk_us, ours_us = cells[0]  # affine32, the default scheme
    heads.append(
        (
            f"MinHash signatures, {NUM_PERM} permutations (affine32), one thread",
            f"{ours_us:.2f} µs/text, {speedups[0]:.0f}x faster ({bulk_speedups[0]:.0f}x vs MinHash.bulk)",
            f"datasketch {ds} per text, {per_text_us:.1f} µs/text (MinHash.bulk {bulk_us:.1f} µs/text)",
        )
    )
    add("")
    add(
        f"Checked, both schemes: every signature of every timed call of ours equals datasketch's lane for lane: "
        f"the {len(subset):,} texts at 1 and {cores} threads (against both datasketch forms, which agree), and "
        f"all {len(texts):,} texts of the full batch at 1 and {cores} threads (against `MinHash.bulk` on its "
        f"{len(distinct):,} distinct texts, untimed)."
    )
    add("")
    return grouping_signatures


def bench_simhash(
    texts: list[str],
    subset: list[str],
    distinct: list[str],
    text_of_row: np.ndarray,
    cores: int,
    add: Callable[[str], None],
    heads: list[tuple[str, str, str]],
) -> np.ndarray:
    """Times and checks SimHash; returns the simhash package's fingerprints of the distinct texts (for grouping)."""
    import simhash as simhash_pkg

    def reference(items: Sequence[str]) -> np.ndarray:
        return np.array([simhash_pkg.Simhash(t).value for t in items], dtype=np.uint64)

    ref_t, expected = best(partial(reference, subset))
    per_text = []
    for threads in (1, cores):
        dt, fps = best(partial(simhash, subset, num_threads=threads), 15)
        require_equal(fps, expected, f"simhash, {len(subset):,} texts, {threads} thread(s)")
        per_text.append(dt / len(subset))
    note(f"the simhash package on the {len(distinct):,} distinct texts of the full batch")
    full_expected = reference(distinct)
    full = []
    for threads in (1, cores):
        dt, fps = best(partial(simhash, texts, num_threads=threads))
        require_equal(fps, full_expected[text_of_row], f"simhash, full batch, {threads} thread(s)")
        full.append(dt)
    add(f"### SimHash (vs the simhash package {version('simhash')} on the same {len(subset):,} texts)")
    add("")
    add("| simhash package | ours, 1 thread | ours, all cores | speed-up, 1 thread | full batch, 1 / all |")
    add("|---|---|---|---|---|")
    add(
        f"| {ref_t / len(subset) * 1e6:.0f} µs/text | {per_text[0] * 1e6:.2f} µs/text | "
        f"{per_text[1] * 1e6:.2f} µs/text | {ref_t / len(subset) / per_text[0]:.0f}x | "
        f"{full[0]:.2f} s / {full[1]:.2f} s |"
    )
    add("")
    speedup = ref_t / len(subset) / per_text[0]
    add(f"Target >= 100x the simhash package: {verdict(speedup >= 100)} ({speedup:.0f}x).")
    heads.append(
        (
            "SimHash fingerprints, one thread",
            f"{per_text[0] * 1e6:.2f} µs/text, {speedup:.0f}x faster",
            f"the simhash package {version('simhash')}, {ref_t / len(subset) * 1e6:.0f} µs/text",
        )
    )
    add("")
    add(
        f"Checked: every fingerprint of every timed call of ours equals the simhash package's `Simhash(text).value`: "
        f"the {len(subset):,} texts and all {len(texts):,} texts of the full batch (against the package on its "
        f"{len(distinct):,} distinct texts, untimed), each at 1 and {cores} threads."
    )
    add("")
    return full_expected


def bench_grouping(
    texts: list[str],
    groups: np.ndarray,
    text_of_row: np.ndarray,
    signatures: np.ndarray,
    fingerprints: np.ndarray,
    cores: int,
    add: Callable[[str], None],
    heads: list[tuple[str, str, str]],
) -> None:
    tasks = len(np.unique(groups))
    note("the independent grouping (all pairs of distinct texts within each task group)")
    expected = reference_groupings(groups, text_of_row, signatures, fingerprints)
    exact_ids = expected[("exact", 0)]
    add(f"### Anchor grouping of the {len(texts):,} observations, end to end from texts (`StateKeyer.assign`)")
    add("")
    add("| mode | 1 thread | all cores | rows in groups of size >= 2 | purity vs exact | groups |")
    add("|---|---|---|---|---|---|")
    slowest = 0.0
    modes: list[tuple[str, dict[str, Any], tuple[str, float]]] = [("exact", {}, ("exact", 0))]
    modes += [
        (f"minhash, Jaccard >= {t}", {"mode": "minhash", "threshold": t}, ("minhash", t)) for t in MINHASH_THRESHOLDS
    ]
    modes += [(f"simhash, k = {k}", {"mode": "simhash", "k": k}, ("simhash", k)) for k in SIMHASH_KS]
    for label, settings, key in modes:
        times = []
        for threads in (1, cores):
            keyer = StateKeyer(**settings, num_threads=threads)
            dt, ids = best(partial(keyer.assign, texts, groups))
            require_equal(
                ids,
                expected[key],
                f"StateKeyer({label}).assign, {threads} thread(s): ids against the independent grouping",
            )
            times.append(dt)
        in_groups, purity, count = group_stats(expected[key], exact_ids)
        add(f"| {label} | {times[0]:.2f} s | {times[1]:.2f} s | {in_groups:.3f} | {purity:.4f} | {count:,} |")
        if settings:
            slowest = max(slowest, times[0])
    add("")
    add(
        "Purity: the share of rows whose approximate group's most common exact state is their own state (1.0 = no "
        "two exact states merged). Groups: anchor groups over all task groups. Approximate grouping adds repeated "
        "states (denser step-level credit) at the price of merged states; the gap between columns is that trade."
    )
    add("")
    add(f"Target <= 1 s for approximate grouping: {verdict(slowest <= 1.0)} (slowest on one thread: {slowest:.2f} s).")
    add("")
    pairs = int(exact_ids.max()) + 1
    add(
        f"Checked: every timed `assign` (each mode, 1 and {cores} threads) returned exactly the ids of a grouping "
        f"of all {len(texts):,} rows computed here without the library, numbered by first appearance as documented: "
        f"exact, the rows of one task group with equal text; minhash, the connected components, within each task "
        f"group, of the distinct texts whose datasketch signatures share a band of `MinHashLSH(threshold, 128)`'s "
        f"(b, r) and agree on at least the threshold's share of their 128 lanes; simhash, those of the texts whose "
        f"simhash-package fingerprints differ in at most k bits. All pairs of distinct texts within each of the "
        f"{tasks:,} task groups were tested ({pairs:,} distinct (task group, text) pairs)."
    )
    add("")

    # The public reference's difflib grouping, on one task group: written here, not the reference's code.
    one_group = [t for t, g in zip(texts, groups.tolist(), strict=True) if g == 0]
    start = time.perf_counter()
    reps: list[str] = []
    for t in one_group:
        if not any(difflib.SequenceMatcher(None, t, r).ratio() >= 0.9 for r in reps):
            reps.append(t)
    dt = time.perf_counter() - start
    whole = dt * tasks
    estimate = f"{whole / 60:.0f} min" if whole >= 60 else f"{whole:.0f} s"
    installed = "is not installed here" if importlib.util.find_spec("gigpo") is None else "is not timed here"
    add(
        f"For scale: difflib grouping in the style of the public reference (greedy first-fit, "
        f"`SequenceMatcher.ratio() >= 0.9` against each cluster's first member; written here, not verl-agent's code, "
        f"which {installed}) took {dt:.1f} s for one task group ({len(one_group)} rows); all {tasks} task groups "
        f"would take about {estimate} at that rate (linear "
        f"extrapolation, within task groups only; the reference reports ~2 h for 204,800 rows of 1,000-character "
        f"text). It is not checked against ours: it is another grouping (difflib's ratio, order-dependent), shown "
        f"for its time only."
    )
    heads.append(
        (
            f"approximate anchor grouping (MinHash, SimHash) of {len(texts):,} texts, one thread",
            f"{slowest:.2f} s at most",
            f"difflib grouping in the reference's style, about {estimate} (extrapolated from one task group)",
        )
    )


def run(tasks: int, subset_size: int) -> tuple[str, list[Headline]]:
    """The section's body and its headlines."""
    cores = os.cpu_count() or 1
    load = os.getloadavg()
    texts, groups = alfworld_batch(tasks)
    n = len(texts)
    total = sum(len(t.encode()) for t in texts)
    rng = np.random.default_rng(0)
    subset = [texts[i] for i in rng.choice(n, size=min(subset_size, n), replace=False)]
    distinct, text_of_row = distinct_texts(texts)
    now = datetime.now(timezone.utc)
    lines: list[str] = []
    heads: list[tuple[str, str, str]] = []
    add = lines.append
    add(
        f"Machine: {machine()}. Date: {now:%Y-%m-%d %H:%M} UTC. Load average at start: "
        f"{load[0]:.2f} (a shared machine: other jobs may have run alongside)."
    )
    add("")
    add(
        f"Batch: {n:,} synthetic ALFWorld-like observations ({tasks} task groups x 8 rollouts x 50 random-policy "
        f"steps; feedback plus the location's admissible actions, which verl-agent's ALFWorld anchors leave out but "
        f"which bring the mean to ~300 characters), mean {total / n:.0f} bytes, {total / 1e6:.1f} MB in all, "
        f"{len(distinct):,} distinct texts. Timings: best of 3-20 runs; ours, one core `num_threads=1`, all cores "
        f"`num_threads={cores}`; baselines: single-threaded Python, best of 3. Every output of ours that is timed was "
        f"checked in the run, on all of its inputs, against an independent computation (python-xxhash, datasketch, "
        f"the simhash package, and a grouping built from them); a failed check stops the run with a non-zero exit. "
        f"What each section checked is stated under its table."
    )
    add("")
    note(f"{n:,} texts, {len(distinct):,} distinct; exact keys")
    bench_keys(texts, cores, add, heads)
    note("MinHash")
    signatures = bench_minhash(texts, subset, distinct, text_of_row, cores, add, heads)
    note("SimHash")
    fingerprints = bench_simhash(texts, subset, distinct, text_of_row, cores, add, heads)
    note("grouping")
    bench_grouping(texts, groups, text_of_row, signatures, fingerprints, cores, add, heads)
    where = f"{cpu_model()}, {cores} cores"
    return "\n".join(lines), [(what, figure, baseline, where, f"{now:%Y-%m-%d}") for what, figure, baseline in heads]


def command_line(script: str) -> str:
    """The body's first line: the command that wrote it, as run."""
    return "Command: `" + " ".join([f".venv/bin/python benchmarks/{script}", *sys.argv[1:]]) + "`"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--write", action="store_true", help='replace the "State keys" section of benchmarks/RESULTS.md'
    )
    parser.add_argument("--tasks", type=int, default=512, help="task groups of 8 x 50 observations (default 512)")
    parser.add_argument("--subset", type=int, default=2000, help="texts the slow baselines time (default 2000)")
    args = parser.parse_args()
    body, headlines = run(args.tasks, args.subset)
    print(body)
    if args.write:
        write_section(SECTION, f"{command_line('bench_hashing.py')}\n\n{body}", headlines=headlines)


if __name__ == "__main__":
    main()
