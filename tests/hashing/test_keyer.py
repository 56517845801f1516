"""StateKeyer (the ops' entry point) and the canonicalisation hooks."""

from __future__ import annotations

import ast
import inspect
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from testkit.hashing import assert_dense, partition
from testkit.peers import import_peer

from pyagentrl.hashing import (
    CANONICALIZERS,
    StateKeyer,
    compose,
    fingerprints,
    group_minhash,
    group_simhash,
    simhash,
    strip_ansi,
    strip_counters,
    strip_echo,
)
from pyagentrl.hashing._native import native

ROOM = "You are in the middle of a room. Looking quickly around you, you see a cabinet {}, a drawer 1, a fridge 1."
OBS = [
    ROOM.format(1),
    ROOM.format(2),  # one token away from row 0: a different state, yet near-identical text
    "On the countertop 1, you see a apple 1.",
    ROOM.format(1),
    "Nothing happens.",
    ROOM.format(1),
]
GROUPS = [0, 0, 0, 0, 0, 1]


def test_exact_mode() -> None:
    ids = StateKeyer().assign(OBS, GROUPS)
    assert ids.tolist() == [0, 1, 2, 0, 3, 4]
    assert StateKeyer(bits=128).assign(OBS, GROUPS).tolist() == ids.tolist()
    arrays = [np.zeros((2, 2)), np.ones((2, 2)), np.zeros((2, 2)), np.zeros(4)]
    assert StateKeyer().assign(arrays, [0, 0, 0, 0]).tolist() == [0, 1, 0, 2]
    assert StateKeyer().assign([b"a", b"b", b"a"], [0, 0, 0]).tolist() == [0, 1, 0]


@pytest.mark.parametrize("mode", ["minhash", "simhash"])
def test_approximate_modes_merge_near_duplicates(mode: str) -> None:
    # Loose settings merge the one-token variants (the hazard); the defaults keep them apart.
    loose = StateKeyer(mode, threshold=0.5, k=12).assign(OBS, GROUPS)  # type: ignore[arg-type]
    assert_dense(loose, len(OBS))
    assert loose.tolist() == [0, 0, 1, 0, 2, 3]
    assert StateKeyer(mode).assign(OBS, GROUPS).tolist() == [0, 1, 2, 0, 3, 4]  # type: ignore[arg-type]
    assert StateKeyer(mode).keys(OBS).shape[0] == len(OBS)  # type: ignore[arg-type]


@pytest.mark.parametrize("mode", ["minhash", "simhash"])
def test_deduplicated_path_equals_rowwise_grouping(mode: str) -> None:
    rng = np.random.default_rng(0)
    rooms = [ROOM.format(i) + f" You are carrying {j} items." for i in range(4) for j in range(3)]
    obs = [rooms[i] for i in rng.integers(0, len(rooms), size=200)]
    groups = rng.integers(0, 5, size=200)
    keyer = StateKeyer(mode, threshold=0.7, k=4)  # type: ignore[arg-type]
    ids = keyer.assign(obs, groups)
    sketches = keyer.keys(obs)
    rowwise = group_minhash(sketches, groups, 0.7) if mode == "minhash" else group_simhash(sketches, groups, 4)
    assert partition(ids) == partition(rowwise)
    assert_dense(ids, 200)


@pytest.mark.parametrize("mode", ["exact", "minhash", "simhash"])
def test_empty_batch_and_empty_texts(mode: str) -> None:
    keyer = StateKeyer(mode)  # type: ignore[arg-type]
    empty = keyer.assign([], np.empty(0, dtype=np.int64))
    assert empty.dtype == np.int64 and empty.shape == (0,)
    assert keyer.assign(["", "", "x"], [0, 1, 0]).tolist() == [0, 1, 2]


def test_canonicalisation_hooks() -> None:
    assert strip_ansi("\x1b[1;32mKitchen\x1b[0m\x1b]0;title\x07") == "Kitchen"
    assert strip_counters("-= Kitchen =-  Score: 3/10  Moves: 12").strip() == "-= Kitchen =-"
    assert strip_counters("Your score has just gone up by one point. Hi") == "Hi"
    assert strip_echo("> go north\nYou are in the hall.") == "You are in the hall."
    text = CANONICALIZERS["textworld"]("> open door\n\x1b[1mHall\x1b[0m\n\nScore: 1  Moves: 7\n")
    assert text == "Hall"
    assert compose(str.upper, str.strip)(" a ") == "A"
    a, b = "> look\nHall. Moves: 3", "> inventory\nHall. Moves: 9"
    keyer = StateKeyer(canonicalize="textworld")
    assert keyer.assign([a, b], [0, 0]).tolist() == [0, 0]
    assert StateKeyer().assign([a, b], [0, 0]).tolist() == [0, 1]
    assert StateKeyer(canonicalize=str.lower).assign(["A", "a"], [0, 0]).tolist() == [0, 0]


def test_bad_input_is_named() -> None:
    with pytest.raises(ValueError, match="mode"):
        StateKeyer("fuzzy")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="canonicalize"):
        StateKeyer(canonicalize="nethack")
    with pytest.raises(ValueError, match="threshold"):
        StateKeyer("minhash", threshold=2.0)
    with pytest.raises(ValueError, match="k must"):
        StateKeyer("simhash", k=-1)
    with pytest.raises(ValueError, match="group_ids"):
        StateKeyer().assign(["a", "b"], [0])
    with pytest.raises(TypeError, match="observations"):
        StateKeyer().assign(None, [])  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="observations"):
        StateKeyer("minhash").assign([np.zeros(2)], [0])
    with pytest.raises(TypeError, match=r"observations\[1\] is NoneType"):
        StateKeyer().assign(["a", None], [0, 0])
    with pytest.raises(TypeError, match=r"observations\[1\] is NoneType"):
        StateKeyer("minhash").assign(["a", None], [0, 0])
    with pytest.raises(TypeError, match=r"observations\[1\] is int"):
        StateKeyer("simhash").assign(["a", 1], [0, 0])
    # A str preset on bytes or arrays: named, not a regex error from inside the hook.
    with pytest.raises(TypeError, match=r"observations\[0\] is bytes.*'textworld' takes str"):
        StateKeyer(canonicalize="textworld").assign([b"a"], [0])
    with pytest.raises(TypeError, match=r"observations\[1\] is ndarray"):
        StateKeyer(canonicalize="ansi").assign(["a", np.zeros(2)], [0, 0])
    # A callable hook gets any observation.
    assert StateKeyer(canonicalize=bytes.lower).assign([b"A", b"a"], [0, 0]).tolist() == [0, 0]


@pytest.mark.parametrize(
    ("settings", "error", "match"),
    [
        ({"mode": "minhash", "threshold": 0.0}, ValueError, "threshold"),
        ({"mode": "minhash", "threshold": 1.5}, ValueError, "threshold"),
        ({"mode": "minhash", "threshold": "0.8"}, TypeError, "threshold"),
        ({"mode": "minhash", "ngram": 0}, ValueError, "ngram"),
        ({"mode": "minhash", "ngram": 2.0}, ValueError, "ngram"),
        ({"mode": "minhash", "shingle": "lines"}, ValueError, "shingle"),
        ({"mode": "minhash", "scheme": "x"}, ValueError, "scheme"),
        ({"mode": "minhash", "num_perm": 0}, ValueError, "num_perm"),
        ({"mode": "minhash", "seed": -1}, ValueError, "seed"),
        ({"mode": "minhash", "seed": None}, TypeError, "seed"),
        ({"mode": "minhash", "lowercase": "yes"}, TypeError, "lowercase"),
        ({"mode": "simhash", "k": 64}, ValueError, "k must"),
        ({"mode": "simhash", "k": True}, ValueError, "k must"),
        ({"bits": 32}, ValueError, "bits"),
        ({"num_threads": 0}, ValueError, "num_threads"),
        ({"num_threads": True}, ValueError, "num_threads"),
        ({"canonicalize": 3}, TypeError, "canonicalize"),
    ],
)
def test_settings_are_checked_at_construction(settings: dict[str, object], error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        StateKeyer(**settings)  # type: ignore[arg-type]


def test_threshold_defaults_per_mode() -> None:
    assert StateKeyer(mode="minhash").threshold == 0.8
    assert StateKeyer(mode="minhash", threshold=None).threshold == 0.8
    assert StateKeyer(mode="minhash", threshold=1).threshold == 1.0
    assert StateKeyer().threshold is None  # exact mode has none


def count_calls(monkeypatch: pytest.MonkeyPatch, target: Any, names: list[str]) -> list[str]:
    """Wraps ``target.<name>`` for each name; the returned list records the calls in order."""
    calls: list[str] = []

    def counted(name: str, original: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            calls.append(name)
            return original(*args, **kwargs)

        return call

    for name in names:
        monkeypatch.setattr(target, name, counted(name, getattr(target, name)))
    return calls


# What StateKeyer.assign may call.
EXTENSION = ["text_keys", "distinct_texts", "minhash_texts", "simhash_texts", "group_exact", "group_minhash",
             "group_simhash", "lsh_params"]  # fmt: skip


@pytest.mark.parametrize(
    ("mode", "expected"),
    [
        ("exact", ["text_keys", "group_exact"]),
        ("minhash", ["distinct_texts", "minhash_texts", "group_minhash"]),
        ("simhash", ["distinct_texts", "simhash_texts", "group_simhash"]),
    ],
)
def test_assign_calls_the_extension_once_per_step(
    monkeypatch: pytest.MonkeyPatch, mode: str, expected: list[str]
) -> None:
    # Settings are checked at construction and the batch at the door: assign then goes straight to
    # the extension, one call per step (the LSH banding is computed once per setting and cached).
    keyer = StateKeyer(mode, canonicalize="alfworld")  # type: ignore[arg-type]
    reference = keyer.assign(OBS, GROUPS)
    calls = count_calls(monkeypatch, native, EXTENSION)
    assert keyer.assign(OBS, GROUPS).tolist() == reference.tolist()
    assert calls == expected


def test_simhash_batch_is_one_call_with_at_most_two_callbacks(monkeypatch: pytest.MonkeyPatch) -> None:
    simhash_pkg = import_peer("simhash")
    calls = count_calls(monkeypatch, native, ["simhash_texts"])
    callbacks = count_calls(monkeypatch, fingerprints, ["normalize_each"])
    # A Yi syllable (a page no other test needs first), a capital sigma, ASCII.
    texts = ["\ua000\ua001 yi", "ΟΔΟΣ ΟΔΟΣ.", "You see a cabinet 1."]
    values = simhash(texts).tolist()
    assert values == [simhash_pkg.Simhash(t).value for t in texts]
    assert calls == ["simhash_texts"] and 1 <= len(callbacks) <= 2  # new pages (unless built), the sigma
    calls.clear()
    callbacks.clear()
    assert simhash(texts).tolist() == values
    assert (calls, callbacks) == (["simhash_texts"], ["normalize_each"])  # pages built: the sigma only
    callbacks.clear()
    simhash(["\ua000 é", "plain"])
    assert callbacks == []


def test_type_stubs_match_the_extension() -> None:
    # The wheel ships pyagentrl_hash.pyi (as __init__.pyi, with py.typed) so mypy checks the calls
    # into the extension: every function is stubbed, with the extension's parameters and defaults.
    stub = Path(native.__file__).with_name("__init__.pyi")
    assert stub.with_name("py.typed").exists()
    functions = [f for f in ast.parse(stub.read_text()).body if isinstance(f, ast.FunctionDef)]
    stubbed = {
        f.name: ([a.arg for a in f.args.args], [ast.literal_eval(d) for d in f.args.defaults]) for f in functions
    }
    public = {n: getattr(native, n) for n in dir(native) if not n.startswith("_") and callable(getattr(native, n))}
    assert stubbed.keys() == public.keys()
    for name, function in public.items():
        parameters = inspect.signature(function).parameters.values()
        defaults = [p.default for p in parameters if p.default is not inspect.Parameter.empty]
        assert stubbed[name] == ([p.name for p in parameters], defaults), name
