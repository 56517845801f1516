"""Helpers for the training tests: the repository's configs and a way to run `pyagentrl train` as its own process
(each run owns its process group and, with vLLM, its one engine per process)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CONFIGS = REPO / "train" / "configs"
TINY = CONFIGS / "tiny.yaml"


def cli(*args: str, check: bool = True, timeout: float = 600, env: dict[str, str] | None = None):
    """`pyagentrl ARGS` in a fresh interpreter (the installed package, not the source tree: -P)."""
    environment = {**os.environ, **(env or {})}
    for launcher_var in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        environment.pop(launcher_var, None)
    out = subprocess.run(
        [sys.executable, "-P", "-m", "pyagentrl", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=environment,
        cwd=REPO,
    )
    if check and out.returncode != 0:
        raise AssertionError(
            f"pyagentrl {' '.join(args)} failed ({out.returncode}):\n{out.stdout[-3000:]}\n{out.stderr[-6000:]}"
        )
    return out


#: Metrics that measure time, and so differ between two runs that make the same iterations.
TIMING = ("seconds_", "tokens_per_second", "keys_and_advantages_share")


def untimed(row: dict) -> dict:
    """A metrics row without its timings."""
    return {k: v for k, v in row.items() if not k.startswith(TIMING)}


def run_dir_of(stdout: str) -> Path:
    for line in stdout.splitlines():
        if line.startswith("Done: "):
            return Path(line.removeprefix("Done: ").strip())
    raise AssertionError(f"no 'Done:' line in:\n{stdout[-3000:]}")
