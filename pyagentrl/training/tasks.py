"""What makes a task distinct: its content, not its seed.

Two seeds can name the same task (FrozenLake with ``map_seed`` pinned plays one map, start and goal from every seed),
so a score over 64 seeds may be a score over one task played 64 times, and a "held-out" seed may name a task the
policy trained on. A task's content is the anchor text of its first state (the environment's canonical state:
FrozenLake's map with the start and the goal, Sokoban's room, a text game's first observation) and its task
description; its key is a digest of that. Scores count distinct keys (`pyagentrl.training.evaluate`), and the
held-out tasks are checked against every task the run trained on.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass

from pyagentrl.envs import EnvBatch, env_factory
from pyagentrl.envs.base import Task
from pyagentrl.training.config import TrainConfig
from pyagentrl.training.seeding import task_seeds


def task_contents(config: TrainConfig, tasks: Sequence[Task]) -> list[str]:
    """Each task's content: the anchor text of the state it resets to, then its task description, if any."""
    env = config.env
    factory = env_factory(env.name, **env.options)
    with EnvBatch(factory, len(tasks), 1, workers=env.workers, backend=env.backend) as envs:
        results = envs.reset(list(tasks))
    return [r.anchor + (f"\n{r.task}" if r.task else "") for r in results]


def content_key(content: str) -> str:
    return hashlib.sha256(content.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class TaskSet:
    """The tasks a score was measured on, by content."""

    keys: list[str]  # per task, in task order
    contents: dict[str, str]  # each distinct key's content

    @property
    def distinct(self) -> int:
        return len(self.contents)

    @classmethod
    def of(cls, config: TrainConfig, tasks: Sequence[Task]) -> TaskSet:
        contents = task_contents(config, tasks)
        keys = [content_key(c) for c in contents]
        return cls(keys, dict(zip(keys, contents, strict=True)))

    def record(self) -> dict[str, object]:
        """What ``eval.json`` keeps: the count, each task's key and each distinct content."""
        return {"distinct_tasks": self.distinct, "task_keys": self.keys, "task_contents": self.contents}


def trained_keys(config: TrainConfig) -> set[str]:
    """The content keys of every task the run's iterations draw (``seeding.task_seeds``), resets only."""
    seeds = sorted({s for i in range(config.iterations) for s in task_seeds(config.seed, i, config.env.num_groups)})
    return {content_key(c) for c in task_contents(config, seeds)}
