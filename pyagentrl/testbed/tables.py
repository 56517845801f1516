"""Tables over the true state: the testbed's softmax policy and its critic's value function.

The true state of a game whose anchor is its whole state (``TextEnv.anchor_is_state``: FrozenLake, Sokoban) is the
clean anchor text, so a table keyed by that text is a tabular function of the state. Rows are added the first time a
state is seen (logits 0: the uniform policy; value 0).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch


class StateTable:
    """A ``[states, width]`` float64 table whose rows are named by state texts, grown on demand.

    ``values`` is a leaf tensor with ``requires_grad``: gather rows with :meth:`rows`, backpropagate, then
    :meth:`sgd_step`.
    """

    def __init__(self, width: int, capacity: int = 1024) -> None:
        if width < 1 or capacity < 1:
            raise ValueError(f"width and capacity must be >= 1, got {width} and {capacity}")
        self.width = width
        self._index: dict[str, int] = {}
        self.values = torch.zeros(capacity, width, dtype=torch.float64, requires_grad=True)

    def __len__(self) -> int:
        return len(self._index)

    def index(self, states: Sequence[str]) -> torch.Tensor:
        """int64 row of each state, adding unseen states (with zero rows)."""
        out = []
        for state in states:
            row = self._index.get(state)
            if row is None:
                row = self._index[state] = len(self._index)
            out.append(row)
        if len(self._index) > self.values.shape[0]:
            self._grow(len(self._index))
        return torch.tensor(out, dtype=torch.int64)

    def _grow(self, needed: int) -> None:
        capacity = self.values.shape[0]
        while capacity < needed:
            capacity *= 2
        grown = torch.zeros(capacity, self.width, dtype=torch.float64)
        grown[: self.values.shape[0]] = self.values.detach()
        self.values = grown.requires_grad_(True)

    def rows(self, index: torch.Tensor) -> torch.Tensor:
        return self.values[index]

    @torch.no_grad()
    def sgd_step(self, lr: float) -> None:
        """values -= lr * grad, then the gradient is cleared."""
        if self.values.grad is not None:
            self.values -= lr * self.values.grad
            self.values.grad = None
