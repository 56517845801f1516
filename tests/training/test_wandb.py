"""Weights & Biases beside TensorBoard (`logging.wandb`): an offline W&B run inside the run directory whose history
holds each iteration's metrics at step = iteration and whose config is the run's; a missing wandb package stops
before any work with one line; with the setting off, nothing imports wandb.

The offline runs are read back from W&B's own transaction log (``run-<id>.wandb``: the records the SDK writes and
`wandb sync` uploads, in LevelDB's log format, each a ``wandb_internal_pb2.Record``), decoded with the SDK's
protobuf classes. Offline runs write no ``files/config.yaml`` or ``wandb-summary.json``, and wandb 0.31 ships no
reader of its own for the log (the old ``wandb.sdk.internal.datastore`` is gone), hence the small reader here.
"""

from __future__ import annotations

import json
import struct
import subprocess
import sys
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from testkit.peers import import_peer
from testkit.training import REPO, TINY, cli, run_dir_of

from pyagentrl.training.config import (
    ConfigError,
    LoggingSection,
    TrainConfig,
    WandbMode,
    load_config,
    to_dict,
    validate,
)
from pyagentrl.training.metrics import WANDB_ID_FILE, MetricsLog, WandbRun, read_metrics


@pytest.fixture
def wandb_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """Offline W&B with its settings, cache, logs and staging in tmp_path: nothing is uploaded or written to ~."""
    home = tmp_path / "wandb-home"
    env = {
        "WANDB_MODE": "offline",
        "WANDB_DIR": str(home / "dir"),
        "WANDB_CACHE_DIR": str(home / "cache"),
        "WANDB_CONFIG_DIR": str(home / "config"),
        "WANDB_DATA_DIR": str(home / "data"),
        "WANDB_ARTIFACT_DIR": str(home / "artifacts"),
        "WANDB_SILENT": "true",
    }
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    for key in ("WANDB_API_KEY", "WANDB_RUN_ID", "WANDB_PROJECT", "WANDB_ENTITY", "WANDB_RESUME", "WANDB_TAGS"):
        monkeypatch.delenv(key, raising=False)
    return env


# ---- reading an offline run back -------------------------------------------------------------------------------------

BLOCK = 32768  # LevelDB's log: 32 KiB blocks of records, each with a 7-byte header (crc32, length, type)
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4


@dataclass
class OfflineRun:
    id: str = ""
    project: str = ""
    name: str = ""
    tags: list[str] = field(default_factory=list)
    config: dict[str, Any] = field(default_factory=dict)
    history: dict[int, dict[str, Any]] = field(default_factory=dict)  # step -> the values logged at it
    exit_code: int | None = None


def _records(path: Path) -> list[Any]:
    """The ``Record`` messages of a W&B transaction log, in order."""
    from wandb.proto import wandb_internal_pb2

    data = path.read_bytes()
    ident, magic, _version = struct.unpack("<4sHB", data[:7])
    assert (ident, magic) == (b":W&B", 0xBEE1), f"{path} is not a W&B transaction log"
    records, pending, pos = [], b"", 7
    while pos + 7 <= len(data):
        if BLOCK - pos % BLOCK < 7:  # a block's tail too short for a header is padding
            pos += BLOCK - pos % BLOCK
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        pos += 7
        if kind == 0:  # zero padding at the end of a block
            pos += (BLOCK - pos % BLOCK) % BLOCK
            continue
        pending += data[pos : pos + length]
        pos += length
        if kind in (FULL, LAST):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pending)
            records.append(record)
            pending = b""
        else:
            assert kind in (FIRST, MIDDLE), f"unknown chunk type {kind} in {path}"
    return records


def _key(item: Any) -> str:
    return ".".join(item.nested_key) if item.nested_key else item.key


def read_offline_run(directory: Path) -> OfflineRun:
    (log,) = directory.glob("run-*.wandb")
    run = OfflineRun()
    for record in _records(log):
        kind = record.WhichOneof("record_type")
        if kind == "run":
            run.id, run.project, run.name = record.run.run_id, record.run.project, record.run.display_name
            run.tags = list(record.run.tags)
            run.config.update({_key(i): json.loads(i.value_json) for i in record.run.config.update})
        elif kind == "config":
            run.config.update({_key(i): json.loads(i.value_json) for i in record.config.update})
        elif kind == "history":
            values = {_key(i): json.loads(i.value_json) for i in record.history.item}
            run.history[record.history.step.num] = {k: v for k, v in values.items() if not k.startswith("_")}
        elif kind == "exit":
            run.exit_code = record.exit.exit_code
    run.config.pop("_wandb", None)  # W&B's own entry
    return run


def offline_runs(run_dir: Path) -> list[OfflineRun]:
    return [read_offline_run(d) for d in sorted((run_dir / "wandb").glob("offline-run-*"), key=lambda d: d.name)]


# ---- the logger ------------------------------------------------------------------------------------------------------


def _rows(iterations: range) -> list[dict[str, Any]]:
    """Made-up metrics lines: numbers, a boolean and a string (which the loggers leave out), a timing."""
    return [
        {
            "iteration": i,
            "episodes": 8,
            "success_rate": 0.125 * (i + 1),
            "loss": -0.5 / (i + 1),
            "seconds_update": 1.25 + i,
            "dropped": i % 2 == 0,
            "note": f"iteration {i}",
        }
        for i in iterations
    ]


def _expected(row: dict[str, Any]) -> dict[str, Any]:
    """What W&B should hold for a line: its numbers under TensorBoard's keys, written out here by hand."""
    return {
        "episodes": row["episodes"],
        "success_rate": row["success_rate"],
        "loss": row["loss"],
        "seconds/update": row["seconds_update"],
    }


def _log(run_dir: Path, config: TrainConfig, start: int, iterations: range) -> None:
    import wandb

    log = MetricsLog(run_dir, start, WandbRun(run_dir, config))
    for row in _rows(iterations):
        log.write(row)
    log.close()
    # finish() can return before wandb's service has written the run's last records to its file; the service
    # writes them all when it stops, as it does when a training process exits.
    wandb.teardown()


def test_metrics_and_config_reach_an_offline_wandb_run_in_the_run_directory(tmp_path, wandb_env):
    import_peer("wandb")
    run_dir = tmp_path / "unit-20261207-000000"
    run_dir.mkdir()
    config = TrainConfig(name="unit", logging=LoggingSection(wandb=True, wandb_project="proj", wandb_tags=["a", "b"]))
    _log(run_dir, config, 0, range(3))  # wandb_mode unset: WANDB_MODE=offline decides

    (run,) = offline_runs(run_dir)
    run_id = (run_dir / WANDB_ID_FILE).read_text().strip()
    assert (run.id, run.project, run.name, run.tags) == (run_id, "proj", run_dir.name, ["a", "b"])
    assert run.history == {r["iteration"]: _expected(r) for r in read_metrics(run_dir)}
    assert sorted(run.history) == [0, 1, 2]
    assert run.config == to_dict(config)
    assert run.config["logging"]["wandb"] is True and run.config["rollout"]["engine"] == "vllm"  # choices as names
    assert run.exit_code == 0
    assert not any(Path(wandb_env["WANDB_DIR"]).glob("**/offline-run-*"))  # the run directory, not WANDB_DIR

    # A resumed run (start=1) continues under the same W&B id; offline, in a directory of its own.
    _log(run_dir, config, 1, range(1, 3))
    first, second = offline_runs(run_dir)
    assert first == run and second.id == run_id
    assert second.history == {r["iteration"]: _expected(r) for r in _rows(range(1, 3))}
    assert [r["iteration"] for r in read_metrics(run_dir)] == [0, 1, 2]


def test_logging_wandb_mode_overrides_the_environment(tmp_path, wandb_env):
    import_peer("wandb")
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    config = TrainConfig(logging=LoggingSection(wandb=True, wandb_mode=WandbMode.disabled))
    _log(run_dir, config, 0, range(2))
    assert [r["iteration"] for r in read_metrics(run_dir)] == [0, 1]
    assert not (run_dir / "wandb").exists()  # disabled beats WANDB_MODE=offline: nothing written


def test_a_wandb_run_that_cannot_start_is_one_line_naming_the_setting(tmp_path, wandb_env, monkeypatch):
    """Online with no API key (none in the environment, W&B's settings or a netrc): wandb refuses before any
    network call, and the trainer, which opens the W&B run before loading the model, stops with one line."""
    import_peer("wandb")
    monkeypatch.setenv("NETRC", str(tmp_path / "no-netrc"))
    monkeypatch.delenv("WANDB_IDENTITY_TOKEN_FILE", raising=False)
    config = TrainConfig(logging=LoggingSection(wandb=True, wandb_mode=WandbMode.online))
    with pytest.raises(ConfigError, match=r"^logging\.wandb: W&B could not start a run: .*API key") as caught:
        WandbRun(tmp_path, config)
    assert "\n" not in str(caught.value)


def test_the_modes_are_wandbs():
    wandb = import_peer("wandb")
    modes = typing.get_args(typing.get_type_hints(wandb.init)["mode"])
    modes = {a for m in modes for a in (typing.get_args(m) or (m,))}
    assert {str(m) for m in WandbMode} <= modes


def test_a_config_logs_its_wandb_settings_from_yaml_and_overrides():
    config = load_config(TINY, ["logging.wandb=true", "logging.wandb_mode=offline", "logging.wandb_tags=[x, y]"])
    assert config.logging == LoggingSection(wandb=True, wandb_mode=WandbMode.offline, wandb_tags=["x", "y"])
    with pytest.raises(ConfigError, match=r"^logging\.wandb_mode: unknown wandb_mode 'cloud'; expected one of"):
        load_config(TINY, ["logging.wandb_mode=cloud"])


# ---- a missing package, and nothing imported when off ----------------------------------------------------------------


def test_a_missing_wandb_package_is_one_line_naming_the_setting(monkeypatch):
    monkeypatch.setitem(sys.modules, "wandb", None)  # what `import wandb` and find_spec see without the package
    config = load_config(TINY, ["logging.wandb=true"])
    with pytest.raises(ConfigError) as caught:
        validate(config)
    message = str(caught.value)
    assert message.startswith("logging.wandb: needs the wandb package: pip install") and "\n" not in message
    validate(load_config(TINY))  # off: not asked for


def test_the_command_without_wandb_stops_before_any_work(tmp_path):
    script = (
        "import sys; sys.modules['wandb'] = None\n"
        "from pyagentrl.cli import main\n"
        f"main(['train', {str(TINY)!r}, 'logging.wandb=true', 'output_dir={tmp_path / 'runs'}'])\n"
    )
    out = subprocess.run([sys.executable, "-P", "-c", script], capture_output=True, text=True, timeout=300, cwd=REPO)
    assert out.returncode == 2, out.stderr[-3000:]
    assert out.stderr.strip().splitlines() == [
        "pyagentrl train: logging.wandb: needs the wandb package: pip install 'pyagentrl[wandb]' (or pip install wandb)"
    ]
    assert not (tmp_path / "runs").exists()  # no run directory was made


def test_with_wandb_off_nothing_imports_it(tmp_path):
    script = (
        "import sys\n"
        "from pathlib import Path\n"
        "from pyagentrl.training.config import load_config, validate\n"
        "from pyagentrl.training.metrics import MetricsLog\n"
        "import pyagentrl.training.trainer\n"
        f"config = load_config({str(TINY)!r})\n"
        "validate(config)\n"
        f"log = MetricsLog(Path({str(tmp_path)!r}), 0)\n"
        "log.write({'iteration': 0, 'success_rate': 0.5})\n"
        "log.close()\n"
        "print(sorted(m for m in sys.modules if m == 'wandb' or m.startswith('wandb.')))\n"
    )
    out = subprocess.run([sys.executable, "-P", "-c", script], capture_output=True, text=True, timeout=300, cwd=REPO)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip().splitlines()[-1] == "[]"
    assert [r["iteration"] for r in read_metrics(tmp_path)] == [0]


# ---- end to end ------------------------------------------------------------------------------------------------------


@pytest.mark.slow  # trains the tiny config for 2 iterations in a subprocess
def test_a_training_run_logs_to_an_offline_wandb_run(tmp_path, wandb_env):
    import_peer("wandb")
    out = cli(
        "train", str(TINY), f"output_dir={tmp_path / 'runs'}", "iterations=2", "logging.wandb=true", env=wandb_env
    )
    run_dir = run_dir_of(out.stdout)
    rows = read_metrics(run_dir)
    assert [r["iteration"] for r in rows] == [0, 1]
    (run,) = offline_runs(run_dir)
    assert run.name == run_dir.name and run.exit_code == 0
    assert run.config == yaml.safe_load((run_dir / "config.yaml").read_text())
    assert sorted(run.history) == [0, 1]
    for row in rows:
        logged = run.history[row["iteration"]]
        numbers = {
            k.replace("seconds_", "seconds/"): v
            for k, v in row.items()
            if k != "iteration" and isinstance(v, (int, float)) and not isinstance(v, bool)
        }
        assert logged == pytest.approx(numbers)
        assert {"success_rate", "loss", "grad_norm", "seconds/update"} <= set(logged)
