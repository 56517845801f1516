"""The checkpoint directory's bookkeeping: the `latest` pointer and pruning, on directories made by hand."""

from __future__ import annotations

from pathlib import Path

import pytest

from pyagentrl.cache import atomic_write
from pyagentrl.training import checkpoint


def _make(root: Path, *iterations: int) -> None:
    for i in iterations:
        path = root / checkpoint.checkpoint_name(i)
        path.mkdir(parents=True)
        (path / "state.json").write_text("{}")


def test_latest_is_none_before_the_first_checkpoint_and_refuses_a_dangling_pointer(tmp_path):
    assert checkpoint.latest(tmp_path) is None
    _make(tmp_path, 2)
    atomic_write(tmp_path / "latest", "iter_000002\n")
    assert checkpoint.latest(tmp_path) == tmp_path / "iter_000002"
    atomic_write(tmp_path / "latest", "iter_000004\n")  # gone: resuming from 0 would lose the run
    with pytest.raises(FileNotFoundError, match="iter_000004, which is missing or incomplete"):
        checkpoint.latest(tmp_path)


def test_prune_keeps_the_newest_and_drops_stale_later_ones(tmp_path):
    _make(tmp_path, 2, 4, 6, 8)
    (tmp_path / ".iter_000010.tmp").mkdir()  # a save killed half-way is not a checkpoint
    checkpoint.prune(tmp_path, tmp_path / "iter_000006", keep=2)
    # iter 8 was written by a run killed before it moved `latest` to it: its iterations are being made again.
    assert sorted(p.name for p in tmp_path.glob("iter_*")) == ["iter_000004", "iter_000006"]
    checkpoint.prune(tmp_path, tmp_path / "iter_000006", keep=0)  # keep=0: all of them
    assert sorted(p.name for p in tmp_path.glob("iter_*")) == ["iter_000004", "iter_000006"]
    checkpoint.prune(tmp_path, tmp_path / "iter_000006", keep=1)
    assert sorted(p.name for p in tmp_path.glob("iter_*")) == ["iter_000006"]
