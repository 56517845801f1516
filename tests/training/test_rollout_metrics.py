"""The trainer's rollout statistics against hand-counted batches."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from pyagentrl.training.metrics import anchor_purity


def _rollout(anchors: list[str], group_ids: list[int], state_ids: list[int]) -> SimpleNamespace:
    steps = SimpleNamespace(
        group_ids=torch.tensor(group_ids),
        state_ids=torch.tensor(state_ids),
        num_states=max(state_ids) + 1,
        num_rows=len(state_ids),
    )
    return SimpleNamespace(steps=steps, anchors=anchors)


def test_anchor_purity_counts_each_groups_most_common_exact_state() -> None:
    # Anchor group 0 merged the texts a, a, b (a is its most common: 2 rows), group 1 holds c alone (1 row), and
    # group 2 holds a from another task group, which is not the same exact state as task group 0's a (1 row).
    rollout = _rollout(["a", "a", "b", "c", "a"], [0, 0, 0, 0, 1], [0, 0, 0, 1, 2])
    assert anchor_purity(rollout) == pytest.approx(4 / 5)  # type: ignore[arg-type]
    # Exact anchors: every group is one state, purity 1.
    assert anchor_purity(_rollout(["a", "b", "a"], [0, 0, 0], [0, 1, 0])) == 1.0  # type: ignore[arg-type]
    # Everything merged into one group across two task groups: a (2 rows, task 0) is the most common pair.
    assert anchor_purity(_rollout(["a", "a", "b", "a"], [0, 0, 0, 1], [0, 0, 0, 0])) == pytest.approx(2 / 4)  # type: ignore[arg-type]
