"""One policy update on a saved rollout, by the trainer's own `update_on_rollout`, for the test that 2 processes
make the same update as 1.

python update_worker.py ROLLOUT OUT [key=value ...]   (plainly: 1 process; under torchrun: its world)
Rank 0 saves the updated weights (HF names) to OUT.
"""

from __future__ import annotations

import pickle
import sys

import torch
from testkit.training import TINY

from pyagentrl.training.config import load_config
from pyagentrl.training.distributed import init_world
from pyagentrl.training.learner import Learner
from pyagentrl.training.trainer import update_on_rollout


def main(rollout_path: str, out: str, overrides: list[str]) -> None:
    config = load_config(TINY, overrides)
    world = init_world()
    torch.set_num_threads(1)
    torch.manual_seed(0)  # LoRA's A matrices start random: the same start in every run
    learner = Learner.for_run(config, world)
    with open(rollout_path, "rb") as f:
        rollout = pickle.load(f)
    old, _ = learner.score(rollout.tokens(config.actor.layout))  # the scoring pass alone, to compare the ranks' shares
    stats = update_on_rollout(learner, config, rollout, iteration=0).stats  # the trainer's own update
    weights = dict(learner.weights())  # a collective call (ZeRO-3 gathers the weights on every rank)
    if world.is_main:
        torch.save({"weights": weights, "old": old, "stats": stats}, out)
    world.close()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3:])
