"""One writer per run directory (pyagentrl.training.run_lock)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from pyagentrl.training.run_lock import RunLock, RunLocked


def test_a_second_writer_is_refused_until_the_first_lets_go(tmp_path):
    first = RunLock(tmp_path)
    with pytest.raises(RunLocked, match=rf"{tmp_path} is being written by another process \(pid \d+\)"):
        RunLock(tmp_path)
    first.release()
    RunLock(tmp_path).release()


def test_a_process_that_dies_releases_the_lock(tmp_path):
    code = (
        "import os, pathlib; from pyagentrl.training.run_lock import RunLock; "
        f"RunLock(pathlib.Path({str(tmp_path)!r})); os._exit(9)"
    )
    assert subprocess.run([sys.executable, "-c", code], timeout=60).returncode == 9
    RunLock(tmp_path).release()


def test_train_resume_of_a_run_being_written_stops_in_one_line(tmp_path):
    from testkit.training import REPO, TINY, cli

    config = TINY.read_text().replace("deepspeed: zero2.json", f"deepspeed: {REPO / 'train/deepspeed/zero2.json'}")
    (tmp_path / "config.yaml").write_text(config)
    held = RunLock(tmp_path)
    try:
        out = cli("train", "--resume", str(tmp_path), check=False)
    finally:
        held.release()
    assert out.returncode == 2
    assert out.stderr.strip().splitlines() == [
        f"pyagentrl train: {tmp_path} is being written by another process (pid {os.getpid()}): wait for "
        "it to end or stop it, then resume"
    ]
