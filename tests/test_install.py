"""The environment the tests run in is one a new user gets: pyagentrl comes from its install, with the compiled ops;
no process of the venv sees the repository root on sys.path; the environment packages import; and a package whose
build starts a bare `python` (as fast-downward's, for alfworld, does) builds from the venv under pip's isolation."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from testkit.peers import import_peer

import pyagentrl
from pyagentrl.ops import _library

ROOT = Path(__file__).resolve().parents[1]


def run_in_venv(code: str, cwd: Path) -> str:
    out = subprocess.run([sys.executable, "-c", code], cwd=cwd, capture_output=True, text=True, check=True)
    return out.stdout


def test_the_installed_package_is_tested_with_its_compiled_ops() -> None:
    assert Path(pyagentrl.__file__).resolve().parent != ROOT / "pyagentrl"
    assert _library.HAVE_EXTENSION


def test_no_venv_process_has_the_repository_root_on_sys_path(tmp_path: Path) -> None:
    paths = json.loads(run_in_venv("import json, sys; print(json.dumps(sys.path))", cwd=tmp_path))
    assert str(ROOT) not in [os.path.normpath(p) for p in paths if p]


def test_environment_packages_import_from_the_venv(tmp_path: Path) -> None:
    modules = ["gymnasium", "textworld", "textworld_express", "alfworld", "fast_downward"]
    for name in modules:
        import_peer(name)  # skips outside CI when the environment packages are not installed
    # gym-sokoban's package __init__ needs the retired gym: only its room generator is loaded, as the library does.
    code = f"import {', '.join(modules)}; from pyagentrl.envs.sokoban import _generator; _generator()"
    run_in_venv(code, cwd=tmp_path)


# A PEP 517 backend in the project's own tree (nothing to fetch for the isolated build environment) that does what
# fast-downward's setup.py does while pip asks for its build requirements: start a bare `python`.
PROBE_BACKEND = """
import os, shutil, subprocess, sys, zipfile

def get_requires_for_build_wheel(config_settings=None):
    interpreters = {sys._base_executable, shutil.which("python") or sys._base_executable}
    for python in sorted(interpreters):
        subprocess.check_call([python, "-c", "import glob, traceback"])
    return []

def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    name = "probe-0.0.0-py3-none-any.whl"
    with zipfile.ZipFile(os.path.join(wheel_directory, name), "w") as wheel:
        wheel.writestr("probe-0.0.0.dist-info/METADATA", "Metadata-Version: 2.1\\nName: probe\\nVersion: 0.0.0\\n")
        wheel_file = "Wheel-Version: 1.0\\nRoot-Is-Purelib: true\\nTag: py3-none-any\\n"
        wheel.writestr("probe-0.0.0.dist-info/WHEEL", wheel_file)
        wheel.writestr("probe-0.0.0.dist-info/RECORD", "")
    return name
"""


def test_an_isolated_source_build_that_starts_a_bare_python_works_from_the_venv(tmp_path: Path) -> None:
    project = tmp_path / "probe"
    project.mkdir()
    (project / "probe_backend.py").write_text(textwrap.dedent(PROBE_BACKEND))
    (project / "pyproject.toml").write_text(
        '[build-system]\nrequires = []\nbuild-backend = "probe_backend"\nbackend-path = ["."]\n'
        '[project]\nname = "probe"\nversion = "0.0.0"\n'
    )
    build = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-cache-dir", "-w", str(tmp_path / "dist"), "."],
        cwd=project,
        capture_output=True,
        text=True,
    )
    assert build.returncode == 0, build.stdout + build.stderr
    assert (tmp_path / "dist" / "probe-0.0.0-py3-none-any.whl").is_file()


def test_the_pyagentrl_command_runs_its_subcommands(tmp_path: Path) -> None:
    command = Path(sys.executable).parent / "pyagentrl"  # the console script of the install
    shown = subprocess.run([str(command), "demo", "--help"], cwd=tmp_path, capture_output=True, text=True, check=True)
    assert "usage: pyagentrl demo" in shown.stdout and "--tasks" in shown.stdout
    module = subprocess.run(
        [sys.executable, "-m", "pyagentrl", "demo", "--help"], cwd=tmp_path, capture_output=True, text=True, check=True
    )
    assert module.stdout == shown.stdout
    unknown = subprocess.run([str(command), "no-such-command"], cwd=tmp_path, capture_output=True, text=True)
    assert unknown.returncode == 2 and "invalid choice: 'no-such-command'" in unknown.stderr
    for sub, words in [("train", "--resume"), ("eval", "--tasks"), ("plot", "run_dir")]:
        helped = subprocess.run([str(command), sub, "--help"], cwd=tmp_path, capture_output=True, text=True, check=True)
        assert f"usage: pyagentrl {sub}" in helped.stdout and words in helped.stdout
