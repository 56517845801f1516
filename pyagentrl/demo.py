"""`make demo`: the advantage ops on a synthetic multi-turn batch, with the advantages and timings.

pyagentrl demo [--tasks 128]
"""

from __future__ import annotations

import argparse
import random
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import torch

from pyagentrl import ops
from pyagentrl.synthetic import make_step_batch

T = TypeVar("T")


def timed(label: str, fn: Callable[[], T]) -> T:
    fn()  # warm-up
    start = time.perf_counter()
    out = fn()
    print(f"  {label:<44} {(time.perf_counter() - start) * 1e3:8.2f} ms")
    return out


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="pyagentrl demo", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--tasks", type=int, default=128)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)

    b = make_step_batch(args.tasks, rollouts=8, steps=(10, 50), response_len=64, shared_fraction=0.4, seed=0)
    states, num_states = ops.factorize_pairs(b.group_ids, b.anchor_ids)
    in_groups = float((torch.bincount(states)[states] >= 2).double().mean())
    print(
        f"Synthetic batch: {args.tasks} tasks x 8 rollouts, {b.num_rows:,} step rows (shuffled), "
        f"{num_states:,} anchor states, {in_groups:.0%} of rows in anchor groups of size >= 2\n"
    )
    print("Timings (one thread):")
    returns = timed(
        "discounted returns (gamma 0.95)",
        lambda: ops.discounted_returns(b.rewards, traj_ids=b.traj_ids, step_ids=b.step_ids, gamma=0.95),
    )
    grpo = timed(
        "GRPO episode advantage",
        lambda: ops.grpo_advantage(b.episode_scores, group_ids=b.group_ids, traj_ids=b.traj_ids),
    )
    gigpo = timed(
        "GiGPO advantage (episode + step, w = 1)",
        lambda: ops.gigpo_advantage(
            b.episode_scores, returns, group_ids=b.group_ids, anchor_ids=b.anchor_ids, traj_ids=b.traj_ids
        ),
    )
    gagpo = timed(
        "GAGPO advantage (lambda 0.95)",
        lambda: ops.gagpo_advantage(
            b.rewards, group_ids=b.group_ids, traj_ids=b.traj_ids, step_ids=b.step_ids, anchor_ids=b.anchor_ids
        ),
    )
    mask = b.response_mask
    assert mask is not None  # make_step_batch gives every row response tokens
    tokens = timed("broadcast GiGPO advantage to tokens", lambda: ops.broadcast_to_tokens(gigpo, mask))
    logp = (-torch.rand(mask.shape)).requires_grad_()
    old = logp.detach() + 0.05 * torch.randn(mask.shape)

    def loss_step() -> torch.Tensor:
        out = ops.per_action_clipped_loss(logp, old, tokens, mask, clip_low=0.2, clip_high=0.28)
        out.loss.backward()
        return out.loss

    loss = timed("per-action clipped loss, forward + backward", loss_step)

    # One trajectory of a successful rollout, in step order.
    traj = int(b.traj_ids[b.episode_scores > 0][0])
    rows = (b.traj_ids == traj).nonzero().flatten()
    rows = rows[torch.argsort(b.step_ids[rows])][:8]
    print(
        f"\nFirst steps of trajectory {traj} (task {int(b.group_ids[rows[0]])}, episode score "
        f"{float(b.episode_scores[rows[0]]):.0f}):"
    )
    print(f"  {'step':>4} {'state':>6} {'reward':>7} {'return':>7} {'GRPO':>7} {'GiGPO':>7} {'GAGPO':>7}")
    for i in rows.tolist():
        size = int(torch.bincount(states)[states[i]])
        state = f"{int(states[i])}" + ("*" if size > 1 else "")
        print(
            f"  {int(b.step_ids[i]):>4} {state:>6} {float(b.rewards[i]):>7.2f} {float(returns[i]):>7.3f} "
            f"{float(grpo[i]):>7.3f} {float(gigpo[i]):>7.3f} {float(gagpo[i]):>7.3f}"
        )
    print("  (* = a state other rollouts of the task also visited: GiGPO's step term is non-zero there)")
    print(f"\nPolicy loss on the batch: {float(loss.detach()):.4f}")
    real_rollouts()


def real_rollouts(tasks: int = 8, group_size: int = 8, seed: int = 0) -> None:
    """Random-policy rollouts on seeded FrozenLake maps; one row per step, anchors = the grid text."""
    from pyagentrl.envs import EnvBatch, env_factory
    from pyagentrl.hashing import StateKeyer

    rng = random.Random(seed)
    rows: dict[str, list[Any]] = {k: [] for k in ("group", "traj", "step", "anchor", "reward")}
    won = [False] * (tasks * group_size)
    with EnvBatch(env_factory("frozenlake", max_steps=20), tasks, group_size, backend="serial") as batch:
        results = batch.reset(task_seeds=list(range(tasks)))
        step = 0
        while not batch.all_done:
            replies = [f"<action>{rng.choice(r.admissible_actions)}</action>" if not r.done else "" for r in results]
            nxt = batch.step(replies)
            for i, (before, after) in enumerate(zip(results, nxt, strict=True)):
                if before.done:
                    continue
                rows["group"].append(batch.group_index[i])
                rows["traj"].append(i)
                rows["step"].append(step)
                rows["anchor"].append(before.anchor)  # the state the action was taken from
                rows["reward"].append(after.reward)
                won[i] = won[i] or after.won
            results, step = nxt, step + 1

    group_ids = torch.tensor(rows["group"])
    traj_ids = torch.tensor(rows["traj"])
    anchor_ids = torch.from_numpy(StateKeyer(mode="exact").assign(rows["anchor"], group_ids.numpy()))
    rewards = torch.tensor(rows["reward"], dtype=torch.float32)
    returns = ops.discounted_returns(rewards, traj_ids=traj_ids, step_ids=torch.tensor(rows["step"]), gamma=0.95)
    scores = torch.tensor([float(won[t]) for t in rows["traj"]])
    gigpo = ops.gigpo_advantage(
        scores, returns, group_ids=group_ids, anchor_ids=anchor_ids, traj_ids=traj_ids, norm="mean_norm"
    )
    shared = float((torch.bincount(anchor_ids)[anchor_ids] >= 2).double().mean())
    print(
        f"\nReal rollouts: FrozenLake, {tasks} seeded maps x {group_size} random-policy rollouts: "
        f"{len(rewards)} steps, {sum(won)} wins, {int(anchor_ids.max()) + 1} anchor states, "
        f"{shared:.0%} of steps in anchor groups of size >= 2"
    )
    shown = won.index(True) if any(won) else 0
    first = (traj_ids == shown).nonzero().flatten()[:4].tolist()
    print(f"GiGPO advantages (mean_norm) of rollout {shown} ({'won' if won[shown] else 'lost'}), first steps:")
    for i in first:
        print(f"  step {rows['step'][i]}  advantage {float(gigpo[i]):+.3f}  anchor state {int(anchor_ids[i])}")
        print("    " + rows["anchor"][i].replace("\n", "\n    "))


if __name__ == "__main__":
    main()
