"""The arms of a credit-assignment comparison, by name.

* ``grpo``: episode-level advantages only (anchors unused);
* ``gigpo-<anchors>`` and ``gagpo-<anchors>``: step-level credit over anchor-state groups, the anchors being
  ``oracle`` (the true state), ``exact``, ``minhash``, ``simhash`` or ``embedding`` keys of the observation text
  (:class:`~pyagentrl.hashing.StateKeyer`), or ``pooled``: every step of a task group in one anchor group, the
  step level with no state matching at all (GiGPO's step term is then the discounted return-to-go against the
  group's mean; GAGPO's value proxy one number per task group): what state matching adds is measured against it;
* ``critic``: the critic-based reference, a learned tabular value function of the true state with GAE
  (docs/algorithms.md (V2)-(V3) with a learned V instead of the grouped proxy): the line a critic-free estimator is
  measured against.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

ESTIMATORS = ("grpo", "gigpo", "gagpo", "critic")
STEP_ESTIMATORS = ("gigpo", "gagpo")
ANCHORS = ("oracle", "exact", "minhash", "simhash", "embedding", "pooled")
#: Anchor modes that read the observation text (noise reaches them); the oracle reads the true state.
TEXT_ANCHORS = ("exact", "minhash", "simhash", "embedding")


@dataclass(frozen=True)
class Arm:
    estimator: str
    anchors: str | None = None  # None for grpo and critic

    @property
    def name(self) -> str:
        return self.estimator if self.anchors is None else f"{self.estimator}-{self.anchors}"

    @property
    def reads_text(self) -> bool:
        """Whether observation noise can change this arm's run (its anchors are keys of the observation)."""
        return self.anchors in TEXT_ANCHORS


def all_arm_names() -> list[str]:
    return ["grpo", "critic"] + [f"{e}-{a}" for e in STEP_ESTIMATORS for a in ANCHORS]


def parse_arm(name: Any) -> Arm:
    """The arm named ``name`` (see the module doc); ValueError naming the valid names otherwise."""
    if isinstance(name, str):
        estimator, _, anchors = name.partition("-")
        if estimator in ("grpo", "critic") and not anchors:
            return Arm(estimator)
        if estimator in STEP_ESTIMATORS and anchors in ANCHORS:
            return Arm(estimator, anchors)
    raise ValueError(f"unknown arm {name!r}; expected one of {', '.join(all_arm_names())}")
