"""The credit-assignment testbed: GRPO, GiGPO, GAGPO (with every anchor mode) and a critic-based reference compared
on real rollouts of the project's environments with a tabular softmax policy over the true state, so that tens of
seeds run in minutes without an LLM (``pyagentrl testbed SPEC``; docs/testbed.md).

Depends on ops, hashing and envs (and the interval statistics of training.stats for its report); nothing depends
on it.
"""

from pyagentrl.testbed.arms import Arm, parse_arm
from pyagentrl.testbed.loop import RunSettings, TaskSpec, train_run
from pyagentrl.testbed.noise import NOISE_LEVELS, NoisyObservations
from pyagentrl.testbed.spec import Spec, SpecError, load_spec, parse_spec

__all__ = [
    "NOISE_LEVELS",
    "Arm",
    "NoisyObservations",
    "RunSettings",
    "Spec",
    "SpecError",
    "TaskSpec",
    "load_spec",
    "parse_arm",
    "parse_spec",
    "train_run",
]
