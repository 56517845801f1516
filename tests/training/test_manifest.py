"""Signed checkpoint manifests (pyagentrl.training.manifest): what lets a resume unpickle DeepSpeed's states."""

from __future__ import annotations

import hashlib
import hmac
import json
import stat
from pathlib import Path

import pytest

from pyagentrl.training import manifest


@pytest.fixture(autouse=True)
def _own_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("PYAGENTRL_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv(manifest.KEY_ENV, raising=False)


def _checkpoint(root: Path) -> Path:
    (root / "deepspeed").mkdir(parents=True)
    (root / "deepspeed" / "mp_rank_00_model_states.pt").write_bytes(b"pickle bytes")
    (root / "rng").mkdir()
    (root / "rng" / "rank0.json").write_text("{}")
    (root / "state.json").write_text('{"next_iteration": 2}')
    return root


def test_a_sealed_checkpoint_verifies_and_its_key_is_private(tmp_path):
    root = _checkpoint(tmp_path / "ckpt")
    manifest.seal(root)
    manifest.verify(root)
    record = json.loads((root / manifest.MANIFEST).read_text())
    content = (root / "rng" / "rank0.json").read_bytes()
    assert record["files"]["rng/rank0.json"] == hashlib.sha256(content).hexdigest()  # an independent digest
    assert stat.S_IMODE(manifest.key_path().stat().st_mode) == 0o600
    (root / "eval.json").write_text("{}")  # eval writes its score into a checkpoint later: allowed
    manifest.verify(root)


@pytest.mark.parametrize(
    "tamper, problem",
    [
        (lambda r: (r / "deepspeed" / "mp_rank_00_model_states.pt").write_bytes(b"evil"), "changed after"),
        (lambda r: (r / "rng" / "rank0.pt").write_bytes(b"evil"), "rng/rank0.pt was added after"),
        (lambda r: (r / "deepspeed" / "extra.pt").write_bytes(b"evil"), "deepspeed/extra.pt was added after"),
        (lambda r: (r / "state.json").unlink(), "state.json, listed in its manifest, is missing"),
        (lambda r: (r / manifest.MANIFEST).unlink(), "has no manifest.json"),
        (lambda r: (r / manifest.MANIFEST).write_text("{"), "is malformed"),
    ],
)
def test_a_changed_checkpoint_is_refused(tmp_path, tamper, problem):
    root = _checkpoint(tmp_path / "ckpt")
    manifest.seal(root)
    tamper(root)
    with pytest.raises(manifest.ManifestError, match=problem) as info:
        manifest.verify(root)
    assert "--trust-checkpoint" in str(info.value) and "\n" not in str(info.value)


def test_a_manifest_made_anew_without_this_machines_key_is_refused(tmp_path, monkeypatch):
    """An attacker who swaps a pickle and rewrites the hashes cannot sign them: the key never left this machine."""
    root = _checkpoint(tmp_path / "ckpt")
    manifest.seal(root)
    (root / "deepspeed" / "mp_rank_00_model_states.pt").write_bytes(b"evil")
    record = json.loads((root / manifest.MANIFEST).read_text())
    record["files"]["deepspeed/mp_rank_00_model_states.pt"] = hashlib.sha256(b"evil").hexdigest()
    message = json.dumps(record["files"], sort_keys=True, separators=(",", ":")).encode()
    record["hmac_sha256"] = hmac.new(b"another key", message, hashlib.sha256).hexdigest()
    (root / manifest.MANIFEST).write_text(json.dumps(record))
    with pytest.raises(manifest.ManifestError, match="is not signed with this machine's checkpoint key"):
        manifest.verify(root)


def test_nodes_that_share_a_key_verify_each_others_checkpoints(tmp_path, monkeypatch):
    root = _checkpoint(tmp_path / "ckpt")
    monkeypatch.setenv(manifest.KEY_ENV, "ab" * 32)
    manifest.seal(root)
    monkeypatch.setenv("PYAGENTRL_CACHE", str(tmp_path / "other-node"))
    manifest.verify(root)  # the same key from the environment, another cache
    monkeypatch.setenv(manifest.KEY_ENV, "cd" * 32)
    with pytest.raises(manifest.ManifestError, match="not signed"):
        manifest.verify(root)
    for bad, problem in (("xyz", "must be a hex string"), ("abcd", "at least 16 bytes")):
        monkeypatch.setenv(manifest.KEY_ENV, bad)
        with pytest.raises(manifest.ManifestError, match=problem):
            manifest.verify(root)
