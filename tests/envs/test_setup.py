"""Packaging of the environment packages, and the game cache's files."""

from __future__ import annotations

import os
import re
import stat
import sys
from pathlib import Path

import pytest

from pyagentrl.cache import atomic_write, path_lock, private_file

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.skipif(sys.version_info < (3, 11), reason="tomllib")
def test_envs_extra_matches_what_the_setup_script_installs() -> None:
    import tomllib

    extra = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["envs"]
    lines = (ROOT / "requirements" / "envs.txt").read_text().splitlines()
    required = [line.strip() for line in lines if line.strip() and not line.startswith("#")]
    assert sorted(extra) == sorted(required)
    assert not any(r.startswith("gym-sokoban") or re.match(r"gym\b", r) for r in extra)  # it would pull retired gym
    assert 'pip install -q --no-deps "gym-sokoban==0.0.6"' in (ROOT / "scripts" / "setup_envs.sh").read_text()


def test_cache_files_get_the_usual_mode(tmp_path: Path) -> None:
    path = tmp_path / "game.json"
    atomic_write(path, "{}")
    umask = os.umask(0)
    os.umask(umask)
    assert path.read_text() == "{}" and stat.S_IMODE(path.stat().st_mode) == 0o666 & ~umask
    assert [p.name for p in tmp_path.iterdir()] == ["game.json"]


def test_path_lock_is_one_lock_per_path(tmp_path: Path) -> None:
    assert path_lock(tmp_path / "a") is path_lock(tmp_path / "." / "a")
    assert len({id(path_lock(tmp_path / f"game_{i}")) for i in range(10_000)}) <= 64  # bounded, however many


def test_trial_file_names_never_look_like_z_machine_games(tmp_path: Path) -> None:
    # textworld loads any path matching \.z[1-8] (anywhere) as a Z-machine game; with a dot before mkstemp's
    # random part, about 1 name in 170 did, and that trial failed with "Only .z[1-8] files are supported".
    game = tmp_path / "pick_and_place_simple-3.tw-pddl"
    names = [private_file(game, suffix=".tw-pddl").name for _ in range(2000)]
    assert not [n for n in names if re.search(r"\.z[1-8]", n)]
