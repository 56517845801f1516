"""EnvBatch and the TextEnv step rules, on a pure-Python environment (fast; every backend)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from functools import partial
from pathlib import Path

import numpy as np
import pytest
from testkit.envs import CounterEnv, make_broken, make_counter

from pyagentrl.envs import EnvBatch, make_env

BACKENDS = ["serial", "thread", "process"]


@pytest.mark.parametrize("backend", BACKENDS)
def test_groups_share_tasks_and_results_come_in_order(backend: str) -> None:
    with EnvBatch(make_counter, num_groups=3, group_size=4, workers=2, backend=backend) as batch:
        first = batch.reset([10, 20, 30])
        assert [r.observation for r in first] == ["value 10"] * 4 + ["value 20"] * 4 + ["value 30"] * 4
        assert batch.group_index == [0] * 4 + [1] * 4 + [2] * 4
        out = batch.step(["inc"] * 12)
        assert [r.observation for r in out] == ["value 11"] * 4 + ["value 21"] * 4 + ["value 31"] * 4


@pytest.mark.parametrize("backend", BACKENDS)
def test_error_ends_only_that_episode(backend: str) -> None:
    with EnvBatch(make_counter, num_groups=2, group_size=2, workers=2, backend=backend) as batch:
        batch.reset([0, 5])
        out = batch.step(["inc", "boom", "inc", "inc"])
        assert out[1].done and not out[1].won and "game crashed" in out[1].info["error"]
        assert out[1].observation == "value 0"  # last observation kept
        assert [r.done for r in (out[0], out[2], out[3])] == [False, False, False]
        out = batch.step(["inc", "inc", "inc", "inc"])
        assert out[1].done and out[1].reward == 0.0 and "error" in out[1].info
        assert out[0].observation == "value 2" and out[3].observation == "value 7"


@pytest.mark.parametrize("backend", BACKENDS)
def test_failed_reset_ends_that_episode(backend: str) -> None:
    with EnvBatch(make_counter, num_groups=2, group_size=1, backend=backend) as batch:
        out = batch.reset([-1, 1])
        assert out[0].done and "cannot load task -1" in out[0].info["error"]
        assert not out[1].done
        out = batch.step(["inc", "inc"])
        assert out[0].done and out[1].observation == "value 2"


def test_dead_worker_ends_its_shard_only() -> None:
    with EnvBatch(make_counter, num_groups=4, group_size=1, workers=2, backend="process") as batch:
        batch.reset([0, 0, 0, 0])
        out = batch.step(["die", "inc", "inc", "inc"])  # envs 0-1 live in worker 0
        assert out[0].done and out[1].done and "worker process died" in out[0].info["error"]
        assert not out[2].done and out[2].observation == "value 1"
        out = batch.step(["inc"] * 4)
        assert out[0].done and out[3].observation == "value 2"


@pytest.mark.parametrize("backend", BACKENDS)
def test_finished_envs_ignore_actions(backend: str) -> None:
    with EnvBatch(make_counter, num_groups=1, group_size=2, backend=backend) as batch:
        batch.reset([0])
        for _ in range(3):
            out = batch.step(["inc", "noop"])
        assert out[0].done and out[0].won and out[0].reward == 1.0
        out = batch.step(["inc", "noop"])
        assert out[0].observation == "value 3" and out[0].reward == 0.0 and out[0].done
        assert not out[1].done and not batch.all_done


def test_invalid_reply_leaves_state_and_is_flagged() -> None:
    env = CounterEnv()
    env.reset(0)
    env.step("inc")
    out = env.step("<action>fly</action>")
    assert not out.action_valid and out.observation == "value 1" and out.reward == 0.0 and not out.done
    assert env.step("<action>inc</action>").observation == "value 2"


def test_step_limit_truncates() -> None:
    env = CounterEnv(max_steps=2)
    env.reset(0)
    assert not env.step("noop").done
    out = env.step("noop")
    assert out.done and not out.won and out.info["truncated"]


def test_bad_arguments_name_the_argument() -> None:
    with pytest.raises(ValueError, match="task_seeds"), EnvBatch(make_counter, 2, 2, backend="serial") as b:
        b.reset([1])
    with pytest.raises(ValueError, match="actions"), EnvBatch(make_counter, 2, 2, backend="serial") as b:
        b.reset([1, 2])
        b.step(["inc"] * 3)
    with pytest.raises(ValueError, match="backend"):
        EnvBatch(make_counter, 1, 1, backend="gpu")
    with pytest.raises(ValueError, match="num_groups"):
        EnvBatch(make_counter, 0, 1)
    with pytest.raises(ValueError, match="workers"):
        EnvBatch(make_counter, 1, 1, workers=0)
    with pytest.raises(ValueError, match="unknown env name 'nope'"):
        make_env("nope")
    with pytest.raises(ValueError, match="max_steps"):
        CounterEnv(max_steps=0)
    with pytest.raises(RuntimeError, match="before reset"), EnvBatch(make_counter, 1, 1, backend="serial") as b:
        b.step(["inc"])


def test_make_fn_with_arguments_in_workers() -> None:
    with EnvBatch(partial(make_counter, max_steps=1), 1, 2, workers=2, backend="process") as batch:
        batch.reset([0])
        assert all(r.done and r.info.get("truncated") for r in batch.step(["noop", "noop"]))


def test_worker_that_cannot_build_reports_why() -> None:
    with EnvBatch(make_broken, num_groups=2, group_size=1, workers=2, backend="process") as batch:
        with pytest.raises(RuntimeError, match=r"every environment failed to reset.*no module named 'game_engine'"):
            batch.reset([0, 1])
        assert batch.all_done and all("game_engine" in r.info["error"] for r in batch.step(["inc", "inc"]))


@pytest.mark.parametrize("backend", BACKENDS)
def test_reset_raises_when_every_environment_fails(backend: str) -> None:
    with EnvBatch(make_counter, num_groups=2, group_size=2, workers=2, backend=backend) as batch:
        with pytest.raises(RuntimeError, match=r"every environment failed to reset.*cannot load task -1"):
            batch.reset([-1, -1])
        assert not batch.reset([-1, 0])[2].done  # one good group is enough


@pytest.mark.parametrize("backend", BACKENDS)
def test_numpy_integer_seeds(backend: str) -> None:
    with EnvBatch(make_counter, num_groups=2, group_size=2, workers=2, backend=backend) as batch:
        out = batch.reset(np.arange(10, 12))
        assert [r.observation for r in out] == ["value 10"] * 2 + ["value 11"] * 2
        assert not any(r.done for r in out)
    env = CounterEnv()
    assert env.reset(np.int32(4)).observation == "value 4"
    for bad in (True, 1.5, None):
        with pytest.raises(ValueError, match="integer seed or a game file path"):
            env.reset(bad)  # type: ignore[arg-type]


def test_dead_worker_is_replaced_at_next_reset() -> None:
    with EnvBatch(make_counter, num_groups=2, group_size=2, workers=2, backend="process") as batch:
        batch.reset([0, 5])
        out = batch.step(["inc", "die", "inc", "inc"])  # worker 0 (envs 0-1) exits mid-episode
        assert out[0].done and "worker process died (exit code 3)" in out[1].info["error"]
        out = batch.reset([1, 5])
        assert [r.observation for r in out] == ["value 1"] * 2 + ["value 5"] * 2
        assert not any(r.done for r in out)
        out = batch.step(["inc"] * 4)
        assert [r.observation for r in out] == ["value 2"] * 2 + ["value 6"] * 2 and not any(r.done for r in out)


def test_step_timeout_stops_a_hung_worker() -> None:
    with pytest.raises(ValueError, match="step_timeout"):
        EnvBatch(make_counter, 1, 1, backend="thread", step_timeout=1.0)
    with EnvBatch(make_counter, num_groups=2, group_size=2, workers=2, backend="process", step_timeout=2.0) as batch:
        batch.reset([0, 5])
        begin = time.monotonic()
        out = batch.step(["hang", "inc", "inc", "inc"])
        assert time.monotonic() - begin < 30
        assert out[0].done and out[1].done and "step_timeout=2.0" in out[0].info["error"]
        assert out[1].observation == "value 0"  # the shard's last observations are kept
        assert not out[2].done and out[2].observation == "value 6"
        out = batch.step(["inc"] * 4)
        assert not out[3].done
        assert "step_timeout=2.0" in out[0].info["error"]  # later steps keep the error the episode ended with
        out = batch.reset([0, 0])  # the stopped worker is replaced
        assert not any(r.done for r in out) and batch.step(["inc"] * 4)[0].observation == "value 1"


def test_process_backend_without_main_guard_explains_the_failure(tmp_path: Path) -> None:
    script = tmp_path / "no_guard.py"
    script.write_text(
        textwrap.dedent(
            """
            from testkit.envs import make_counter
            from pyagentrl.envs import EnvBatch

            batch = EnvBatch(make_counter, num_groups=1, group_size=2, workers=2, backend="process")
            batch.reset([0])
            """
        )
    )
    here = str(Path(__file__).parent)
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([here, str(Path(here).parent), os.environ.get("PYTHONPATH", "")]),
    }
    run = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=120)
    assert run.returncode != 0
    assert "every environment failed to reset" in run.stderr and 'if __name__ == "__main__"' in run.stderr
