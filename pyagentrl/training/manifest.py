"""Signed manifests: what makes it safe to unpickle a checkpoint's DeepSpeed states on resume.

DeepSpeed saves its module and optimizer states with ``torch.save`` and loads them with pickle, which runs whatever
code a crafted file names. pyagentrl writes everything else of a checkpoint as JSON or safetensors, and seals each
checkpoint with ``manifest.json``: the SHA-256 of every file in it, signed with HMAC-SHA256 under a key that never
leaves this machine (``<cache>/checkpoint.key``, made on first use, readable by its owner only; or the hex key in
``$PYAGENTRL_CHECKPOINT_KEY``, for nodes that resume one another's runs). Resuming first checks that the manifest's
signature is this key's and that every file still has its recorded hash, and that the folders holding pickles
(``deepspeed/``, ``rng/``) hold no file the manifest does not list; only then is anything unpickled.

So a checkpoint this machine wrote resumes as before, while a file changed or added afterwards, a checkpoint made
elsewhere or one from before the manifests existed is refused unless the user vouches for it (``pyagentrl train
--resume RUN --trust-checkpoint``). Resume only checkpoints you trust: the signature proves where a checkpoint was
written, not that whoever could write to this machine's cache meant well.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
from pathlib import Path

from pyagentrl.cache import cache_root

MANIFEST = "manifest.json"
KEY_ENV = "PYAGENTRL_CHECKPOINT_KEY"
# Folders whose files are unpickled on resume: a file there that the manifest does not list is refused.
PICKLE_DIRS = ("deepspeed", "rng")
# Written into a checkpoint after it was sealed, and never loaded on resume.
UNSEALED = (MANIFEST, "eval.json")


class ManifestError(ValueError):
    """A checkpoint whose files do not match a manifest signed by this machine (the message says which)."""


def key_path() -> Path:
    return cache_root() / "checkpoint.key"


def signing_key() -> bytes:
    """``$PYAGENTRL_CHECKPOINT_KEY`` (hex), else this machine's key file, made (owner-only) on first use."""
    given = os.environ.get(KEY_ENV)
    if given:
        try:
            key = bytes.fromhex(given)
        except ValueError:
            raise ManifestError(f"${KEY_ENV} must be a hex string (e.g. from `openssl rand -hex 32`)") from None
        if len(key) < 16:
            raise ManifestError(f"${KEY_ENV} must hold at least 16 bytes (32 hex digits), got {len(key)}")
        return key
    path = key_path()
    if not path.is_file():
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}-{secrets.token_hex(8)}")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(secrets.token_hex(32) + "\n")
        try:
            os.link(tmp, path)  # fails if another process made the key meanwhile: theirs wins, as it may be in use
        except FileExistsError:
            pass
        finally:
            tmp.unlink()
    return bytes.fromhex(path.read_text().strip())


def _digest(path: Path) -> str:
    with path.open("rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def _files(root: Path) -> list[str]:
    """The sealed files under ``root``, as sorted POSIX paths relative to it."""
    names = []
    for path in root.rglob("*"):
        relative = path.relative_to(root).as_posix()
        if relative not in UNSEALED and (path.is_file() or path.is_symlink()):
            names.append(relative)
    return sorted(names)


def _signature(files: dict[str, str], key: bytes) -> str:
    message = json.dumps(files, sort_keys=True, separators=(",", ":")).encode()
    return hmac.new(key, message, hashlib.sha256).hexdigest()


def seal(root: Path) -> None:
    """Writes ``root/manifest.json``: every file's SHA-256, signed with :func:`signing_key`."""
    files = {name: _digest(root / name) for name in _files(root)}
    record = {"version": 1, "files": files, "hmac_sha256": _signature(files, signing_key())}
    (root / MANIFEST).write_text(json.dumps(record, indent=1) + "\n")


def verify(root: Path) -> None:
    """Raises :class:`ManifestError` unless ``root``'s manifest is signed with this machine's key, every file it
    lists has its recorded hash, and no file it does not list lies where pickles are loaded from."""
    path = root / MANIFEST
    trust = "resume only checkpoints you trust, and such a one with --trust-checkpoint"
    if not path.is_file():
        raise ManifestError(
            f"{root} has no {MANIFEST} (written before pyagentrl signed its checkpoints, or not by pyagentrl): its "
            f"DeepSpeed states are pickles, which can run code when loaded; {trust}"
        )
    try:
        record = json.loads(path.read_text())
        files, signature = record["files"], record["hmac_sha256"]
        if not isinstance(files, dict) or not all(isinstance(v, str) for v in files.values()):
            raise TypeError("files is not a mapping of names to hashes")
    except (ValueError, KeyError, TypeError) as exc:
        raise ManifestError(f"{path} is malformed ({exc}); {trust}") from None
    if not isinstance(signature, str) or not hmac.compare_digest(signature, _signature(files, signing_key())):
        raise ManifestError(
            f"{path} is not signed with this machine's checkpoint key ({key_path()} or ${KEY_ENV}): the checkpoint "
            f"was written elsewhere or its manifest was changed; {trust}"
        )
    for name, expected in files.items():
        file = root / name
        if not file.resolve().is_relative_to(root.resolve()) or not file.is_file():
            raise ManifestError(f"{root}: {name}, listed in its manifest, is missing; {trust}")
        if not hmac.compare_digest(_digest(file), expected):
            raise ManifestError(f"{root}: {name} changed after the checkpoint was saved; {trust}")
    unlisted = [name for name in _files(root) if name.split("/", 1)[0] in PICKLE_DIRS and name not in files]
    if unlisted:
        raise ManifestError(f"{root}: {unlisted[0]} was added after the checkpoint was saved; {trust}")
