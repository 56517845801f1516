"""The terminal display's note under iterations that had nothing to learn from (every advantage 0)."""

from __future__ import annotations

import sys

import pytest

from pyagentrl.training.metrics import Display


def _metrics(iteration: int, zero_share: float, invalid: float) -> dict[str, float]:
    return {"iteration": iteration, "advantage_zero_share": zero_share, "invalid_action_rate": invalid}


@pytest.mark.parametrize("rich", [True, False], ids=["rich", "plain"])
def test_flat_batches_are_noted_and_a_streak_is_called_stuck(
    rich: bool, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    if not rich:
        monkeypatch.setitem(sys.modules, "rich.progress", None)  # import fails: the plain print path
    display = Display(total=6, start=0)
    display.show(_metrics(0, 0.14, 0.41))  # a batch with something to learn: no note
    for iteration in range(1, 1 + Display.STUCK_AFTER):  # Sokoban seed 3's GRPO: every reply invalid
        display.show(_metrics(iteration, 1.0, 1.0))
    display.show(_metrics(4, 0.5, 0.9))  # the streak ends
    display.show(_metrics(5, 1.0, 0.99))  # and a new one starts at 1
    display.close()
    lines = capsys.readouterr().out.splitlines()
    notes = [line.strip() for line in lines if "every advantage was 0" in line]
    assert len(notes) == Display.STUCK_AFTER + 1
    assert all("invalid replies" in note for note in notes)
    stuck = [note for note in notes if "looks stuck" in note]
    assert len(stuck) == 1 and f"{Display.STUCK_AFTER} iterations in a row" in stuck[0]
    assert "(invalid replies 0.99)" in notes[-1] and "looks stuck" not in notes[-1]
    assert not any("every advantage" in line for line in lines if "iter    0" in line)
