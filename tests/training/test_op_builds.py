"""DeepSpeed's CPU op build behind torch's FileBaton: a build killed part way leaves a `lock` file that made every
later run wait forever, silently. In pyagentrl's own build directory it is now removed; in a directory the user chose,
the run says what it waits for."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from pyagentrl.training.distributed import _SHM_OP, _own_extensions_dir

_INIT = "from pyagentrl.training.distributed import init_world; print('world of', init_world().size, flush=True)"


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR")}
    env.pop("TORCH_EXTENSIONS_DIR", None)
    return {**env, **extra}


def test_a_killed_builds_lock_no_longer_hangs_the_next_run() -> None:
    baton = _own_extensions_dir() / _SHM_OP / "lock"
    baton.parent.mkdir(parents=True, exist_ok=True)
    baton.touch()  # what a build killed part way leaves
    # Before the fix this waited forever; a first build of the op takes about a minute on 2 cores.
    out = subprocess.run([sys.executable, "-P", "-c", _INIT], capture_output=True, text=True, timeout=900, env=_env())
    assert out.returncode == 0, out.stderr[-3000:]
    assert "world of 1" in out.stdout and not baton.exists()


def test_a_lock_in_a_chosen_directory_is_reported_not_removed(tmp_path: Path) -> None:
    baton = tmp_path / _SHM_OP / "lock"
    baton.parent.mkdir(parents=True)
    baton.touch()  # possibly another program's build: pyagentrl cannot tell, so it waits and says so
    log = tmp_path / "stderr.txt"
    with open(log, "w") as stderr:
        process = subprocess.Popen(
            [sys.executable, "-P", "-c", _INIT],
            stderr=stderr,
            stdout=subprocess.DEVNULL,
            env=_env(TORCH_EXTENSIONS_DIR=str(tmp_path)),
        )
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and "remove it" not in log.read_text():
            time.sleep(0.5)
        assert f"[pyagentrl] waiting for {baton}" in log.read_text() and "remove it" in log.read_text()
        assert baton.exists() and process.poll() is None  # still waiting, as torch does
    finally:
        process.kill()
        process.wait()
