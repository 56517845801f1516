"""Multi-turn text environments behind one interface, stepped in task groups by `EnvBatch`.

A rollout, with ``generate`` standing for the model (replies are raw text; the environments parse them)::

    from pyagentrl.envs import EnvBatch, PromptBuilder, env_factory, prompt_family

    batch = EnvBatch(env_factory("alfworld_gen"), num_groups=16, group_size=8, backend="process")
    prompts = PromptBuilder(prompt_family("alfworld_gen"), history_length=2)
    results = batch.reset(task_seeds=list(range(16)))       # the 8 members of a group share a task
    prompts.reset(results)
    while not batch.all_done:
        replies = generate(prompts.messages(tokenizer))      # chat-template texts, one per environment
        results = batch.step(replies)                        # StepResult: observation, anchor, reward, ...
        prompts.record(replies, results)
    batch.close()

The process backend spawns its workers, and each imports the caller's main module: in a script, create the batch
under ``if __name__ == "__main__":`` (otherwise every worker dies at start, and `EnvBatch.reset` says so).

Families (`make_env` names): ``frozenlake``, ``sokoban``, ``textworld``, ``twx``, ``alfworld`` (real data under
``$ALFWORLD_DATA``) and ``alfworld_gen`` (tasks generated offline). A new family is one decorated definition::

    @register_env("maze", intro="You are an expert agent in a maze. Symbols: # wall, _ floor, P you, G goal.")
    class MazeEnv(TextEnv):
        ...  # _reset(task) and _step(action), each returning a StepResult

after which ``env_factory("maze", size=5)`` and ``prompt_family("maze")`` work like the built-in names.
"""

from pyagentrl.envs.base import StepResult, Task, TextEnv
from pyagentrl.envs.batch import EnvBatch
from pyagentrl.envs.parsing import ActionParser
from pyagentrl.envs.prompts import PromptBuilder, apply_chat_template, build_messages, render_prompt
from pyagentrl.envs.registry import (
    ENVS,
    EnvOptionError,
    check_env_options,
    env_factory,
    make_env,
    prompt_family,
    register_env,
)

__all__ = [
    "ENVS",
    "ActionParser",
    "EnvBatch",
    "EnvOptionError",
    "PromptBuilder",
    "StepResult",
    "Task",
    "TextEnv",
    "apply_chat_template",
    "build_messages",
    "check_env_options",
    "env_factory",
    "make_env",
    "prompt_family",
    "register_env",
    "render_prompt",
]
