"""Where generated games and models are kept: outside the repository, shared by every process of a run."""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import shutil
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

# Striped: a bounded set of locks however many games a run sees; two paths may share one, which only
# serialises their generation.
_LOCKS = [threading.Lock() for _ in range(64)]


def cache_root(override: str | os.PathLike[str] | None = None) -> Path:
    """`override`, else ``$PYAGENTRL_CACHE``, else ``~/.cache/pyagentrl``."""
    root = override or os.environ.get("PYAGENTRL_CACHE") or Path.home() / ".cache" / "pyagentrl"
    return Path(root)


def config_dir(family: str, config: dict[str, Any], root: str | os.PathLike[str] | None = None) -> Path:
    """A directory per (family, generator settings): games made with other settings never collide."""
    digest = hashlib.sha256(json.dumps(config, sort_keys=True, default=str).encode()).hexdigest()[:12]
    path = cache_root(root) / family / digest
    path.mkdir(parents=True, exist_ok=True)
    return path


def path_lock(path: Path) -> threading.Lock:
    """The lock of a cache path in this process: the threads that want the same game generate it once.

    Processes do not share it; they may generate the same game concurrently, each in private temporary files,
    and `atomic_write` makes the last identical copy win.
    """
    return _LOCKS[hash(str(Path(path).absolute())) % len(_LOCKS)]


def generate_once(path: Path, generate: Callable[[Path], object]) -> Path:
    """`path`, after `generate(path)` has made it unless it already exists. The threads of this process that
    ask for the same path at once wait for one of them (`path_lock`); `generate` must put the file in place
    atomically, as its existence marks the game ready."""
    if path.exists():
        return path
    with path_lock(path):
        if not path.exists():
            generate(path)
    return path


def private_file(path: Path, suffix: str = "") -> Path:
    """A new empty file next to `path` that no other thread or process is given (``mkstemp``'s random name).

    No dot precedes the random part: textworld picks its game backend with ``re.search(r"\\.z[1-8]", path)``
    anywhere in the path, so a random ".z3..." would make a PDDL trial load as a Z-machine game.
    """
    fd, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.stem}-", suffix=suffix)
    os.close(fd)
    return Path(name)


def atomic_write(path: Path, text: str) -> None:
    """Write `text` so that readers see the whole file or none, even after a crash or power loss.

    Concurrent writers (group members generating the same game) each write their own temporary file, and the
    last rename wins. The data is flushed to disk before the rename, so a crash cannot leave a renamed but empty
    file (a checkpoint's ``latest`` pointing nowhere). The file gets the usual mode for new files (``0o666`` less
    the umask), not `mkstemp`'s private ``0o600``.
    """
    # Like mkstemp (a fresh name, O_EXCL) but created 0o666, which the kernel reduces by the umask.
    tmp = path.parent / f".{path.name}-{secrets.token_hex(8)}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def models_dir() -> Path:
    """``<cache>/models``: ``$PYAGENTRL_CACHE`` or ``~/.cache/pyagentrl``, never the repository."""
    return cache_root() / "models"


def build_dir_once(path: Path, build: Callable[[Path], None]) -> Path:
    """`path`, after ``build(tmp)`` has filled a fresh temporary directory that is then renamed to `path`, unless
    `path` already exists.

    The threads of this process wait for one another (`generate_once`), processes for a file lock next to `path`;
    temporary directories left by a killed builder are removed by the next lock holder (only the holder makes one).
    """

    def locked_build(path: Path) -> None:
        from filelock import FileLock  # a dependency of torch and of huggingface_hub

        path.parent.mkdir(parents=True, exist_ok=True)
        with FileLock(str(path.parent / f".{path.name}.lock")):
            if path.exists():  # another process built it while we waited
                return
            for stale in path.parent.glob(f".{path.name}-tmp-*"):
                shutil.rmtree(stale, ignore_errors=True)
            # Not mkdtemp: its 0o700 would make the cache private; mkdir's 0o777 is reduced by the umask.
            tmp = path.parent / f".{path.name}-tmp-{secrets.token_hex(8)}"
            tmp.mkdir(0o777)
            try:
                build(tmp)
                os.rename(tmp, path)
            except BaseException:
                shutil.rmtree(tmp, ignore_errors=True)
                raise

    return generate_once(path, locked_build)
