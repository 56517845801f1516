"""One policy update on a saved rollout, for the test that 2 processes make the same update as 1.

python update_worker.py ROLLOUT OUT [key=value ...]   (plainly: 1 process; under torchrun: its world)
Rank 0 saves the updated weights (HF names) to OUT.
"""

from __future__ import annotations

import pickle
import sys

import torch
from testkit.training import TINY

from pyagentrl.ops import get_adv_estimator
from pyagentrl.rollout.models import resolve_model
from pyagentrl.training.config import load_config
from pyagentrl.training.distributed import init_world
from pyagentrl.training.learner import Learner, deepspeed_config
from pyagentrl.training.trainer import advantage_config


def main(rollout_path: str, out: str, overrides: list[str]) -> None:
    config = load_config(TINY, overrides)
    world = init_world()
    torch.set_num_threads(1)
    learner = Learner(
        resolve_model(config.model),
        config.actor,
        world,
        deepspeed_config(config.actor, world),
        temperature=config.rollout.temperature,
        top_p=config.rollout.top_p,
    )
    with open(rollout_path, "rb") as f:
        rollout = pickle.load(f)
    advantages = get_adv_estimator(config.algorithm.estimator)(rollout.steps, advantage_config(config, 0))
    tokens = rollout.tokens(config.actor.layout)
    old, _ = learner.score(tokens)  # the scoring pass alone, to compare the ranks' shares
    stats = learner.update(tokens, tokens.token_advantages(advantages, rollout.steps), torch.Generator().manual_seed(0))
    if world.is_main:
        torch.save({"weights": dict(learner.weights()), "old": old, "stats": stats}, out)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3:])
