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


def test_module_states_load_in_both_namings_and_refuse_missing_trainable_weights():
    """DeepSpeed's module states name the policy's weights after the engine's wrapper (PolicyScorer); checkpoints
    from before the wrapper lack its prefix and still load. A trainable weight absent from the states (a LoRA run
    saves its trainable weights alone, so a strict load cannot catch it) stops the resume."""
    import torch

    from pyagentrl.training.learner import PolicyScorer

    policy = torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.Linear(2, 2))
    policy[0].requires_grad_(False)  # a frozen base weight, left out of the states as a LoRA run leaves it
    saved = {k: torch.randn_like(v) for k, v in policy.state_dict().items() if k.startswith("1.")}
    for states in (saved, {PolicyScorer.PREFIX + k: v for k, v in saved.items()}):
        scorer = PolicyScorer(policy, temperature=1.0, top_p=1.0)
        checkpoint._load_module(states, scorer)
        assert torch.equal(policy[1].weight, saved["1.weight"]) and torch.equal(policy[1].bias, saved["1.bias"])
    with pytest.raises(checkpoint.ResumeError, match=r"lack 1 trainable weight\(s\): \['policy.1.bias'\]"):
        checkpoint._load_module({"1.weight": saved["1.weight"]}, PolicyScorer(policy, 1.0, 1.0))


@pytest.mark.parametrize(
    "pointer", ["../../elsewhere/x", "/tmp", "best", "iter_000002/../iter_000004", "iter_2", "iter_000002x", ""]
)
def test_latest_names_only_an_iter_directory_of_its_folder_and_nothing_is_deleted(tmp_path, pointer):
    """A pointer outside the folder, with `..` or with another name is refused before anything is read or pruned."""
    outside = tmp_path / "elsewhere" / "x"
    outside.mkdir(parents=True)
    (outside / "state.json").write_text("{}")
    root = tmp_path / "run" / "checkpoints"
    _make(root, 2, 4)
    (root / "best").mkdir()
    (root / "best" / "state.json").write_text("{}")
    atomic_write(root / "latest", pointer + "\n")
    with pytest.raises(checkpoint.ResumeError, match="not a checkpoint of this folder"):
        checkpoint.latest(root)
    assert sorted(p.name for p in root.iterdir()) == ["best", "iter_000002", "iter_000004", "latest"]
    assert (outside / "state.json").is_file()


def test_latest_refuses_a_link_and_prune_deletes_nothing_outside_its_folder(tmp_path):
    root = tmp_path / "checkpoints"
    _make(root, 2)
    outside = tmp_path / "precious"
    outside.mkdir()
    (outside / "state.json").write_text("{}")
    (root / "iter_000009").symlink_to(outside, target_is_directory=True)
    atomic_write(root / "latest", "iter_000009\n")
    with pytest.raises(checkpoint.ResumeError, match="is a link"):
        checkpoint.latest(root)
    # A link among the checkpoints, after the one resumed: prune leaves it and what it points to alone.
    checkpoint.prune(root, root / "iter_000002", keep=1)
    assert (outside / "state.json").is_file() and (root / "iter_000009").is_symlink()
    for current in (outside, tmp_path / "iter_000002", root / "best"):
        with pytest.raises(ValueError, match="is not a checkpoint of"):
            checkpoint.prune(root, current, keep=1)
    assert (root / "iter_000002" / "state.json").is_file()


@pytest.mark.parametrize(
    "text, problem",
    [
        ("{", "Expecting property name"),
        ("[]", "not a JSON object"),
        ("{}", "'next_iteration'"),
        ('{"next_iteration": "2"}', "must be integers"),
        ('{"next_iteration": 2, "world_size": -1}', "must be integers"),
        (b"\xff\xfe", "codec can't decode"),
    ],
)
def test_a_malformed_state_json_is_refused_in_one_line(tmp_path, text, problem):
    _make(tmp_path, 2)
    state = tmp_path / "iter_000002" / "state.json"
    state.write_bytes(text if isinstance(text, bytes) else text.encode())
    with pytest.raises(checkpoint.ResumeError, match=r"state\.json is malformed") as info:
        checkpoint.read_state(tmp_path / "iter_000002", world_size=1)
    assert problem in str(info.value) and "\n" not in str(info.value)


def test_rng_states_round_trip_through_json():
    """The RNG states are plain JSON (nothing to unpickle) and restore every generator exactly."""
    import json
    import random

    import numpy as np
    import torch

    random.random(), np.random.normal(), torch.randn(1)  # numpy's cached Gaussian is part of its state
    saved = json.loads(json.dumps(checkpoint.rng_state()))
    expected = (random.random(), np.random.normal(size=3).tolist(), torch.randn(3).tolist())
    random.seed(5), np.random.seed(5), torch.manual_seed(5)
    checkpoint.set_rng_state(saved)
    assert (random.random(), np.random.normal(size=3).tolist(), torch.randn(3).tolist()) == expected
