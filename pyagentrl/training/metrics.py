"""Per-iteration metrics: what a rollout measured (success, lengths, anchor groups and their purity), one JSON
object per line in ``metrics.jsonl`` (flushed and synced each iteration), TensorBoard scalars, optionally a Weights &
Biases run (``logging.wandb``), and a live display on the terminal.

On resume the log is cut back to the iterations before the checkpoint (they will be made again, identically), and
TensorBoard purges its later events: no line is lost or written twice. W&B's history cannot be cut back: a resumed
W&B run keeps the steps it already holds (see :class:`WandbRun`); ``metrics.jsonl`` is the record.
"""

from __future__ import annotations

import json
import math
import os
import secrets
import string
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from pyagentrl.cache import atomic_write
from pyagentrl.hashing import StateKeyer
from pyagentrl.ops import factorize_pairs

if TYPE_CHECKING:
    from pyagentrl.rollout import Rollout
    from pyagentrl.training.config import TrainConfig

METRICS_FILE = "metrics.jsonl"
WANDB_ID_FILE = "wandb_id"  # the run's W&B id, made once: --resume continues the same W&B run


def read_metrics(run_dir: Path) -> list[dict[str, Any]]:
    """The complete lines of a run's metrics (a line cut short by a kill is skipped)."""
    path = Path(run_dir) / METRICS_FILE
    if not path.is_file():
        return []
    rows = []
    for line in path.read_text().splitlines():
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return rows


def scalars(metrics: dict[str, Any]) -> dict[str, float]:
    """The numbers of an iteration's metrics under their logger keys (``seconds_update`` as ``seconds/update``): what
    TensorBoard and W&B get. The iteration itself is their step, not a value."""
    return {
        key.replace("seconds_", "seconds/"): value
        for key, value in metrics.items()
        if key != "iteration" and isinstance(value, (int, float)) and not isinstance(value, bool)
    }


class WandbRun:
    """A Weights & Biases run for a training run (rank 0): the run's config, then each iteration's :func:`scalars`
    at step = iteration. ``wandb`` is imported here only, so nothing imports it while ``logging.wandb`` is off.

    W&B writes its files under ``<run_dir>/wandb/`` (offline runs in ``offline-run-*``, for `wandb sync`). The W&B id
    is kept in ``<run_dir>/wandb_id`` and the run opened with ``resume="allow"``, so that a resumed training run
    continues the same W&B run. W&B's steps only go forward: an online W&B run resumes after the last step it holds,
    which after a kill may be past the checkpoint. The iterations made again below that step go to ``metrics.jsonl``
    and TensorBoard only (W&B would drop them with a warning each), and W&B keeps the values logged before the kill.
    """

    def __init__(self, run_dir: Path, config: TrainConfig) -> None:
        import wandb

        from pyagentrl.training.config import ConfigError, to_dict

        id_file = run_dir / WANDB_ID_FILE
        if id_file.is_file():
            run_id = id_file.read_text().strip()
        else:  # W&B's own form: 8 characters of a-z and 0-9
            run_id = "".join(secrets.choice(string.ascii_lowercase + string.digits) for _ in range(8))
            atomic_write(id_file, run_id + "\n")
        section = config.logging
        try:
            self.run = wandb.init(
                project=section.wandb_project,
                entity=section.wandb_entity,
                mode=None if section.wandb_mode is None else str(section.wandb_mode),  # type: ignore[arg-type]
                name=run_dir.name,
                dir=str(run_dir),
                id=run_id,
                resume="allow",
                tags=list(section.wandb_tags) or None,
                config=to_dict(config),
                reinit="create_new",  # this object's run, not wandb's global one
            )
        except wandb.errors.Error as exc:  # no login, an unknown entity, ...: one line, as a bad setting gets
            raise ConfigError(f"logging.wandb: W&B could not start a run: {' '.join(str(exc).split())}") from None
        self.first_step = int(self.run.starting_step)  # 0, or after the steps a resumed online W&B run holds
        self.skipped = False

    def write(self, metrics: dict[str, Any]) -> None:
        step = int(metrics["iteration"])
        if step < self.first_step:
            if not self.skipped:
                print(
                    f"W&B run {self.run.id} already holds steps up to {self.first_step - 1}: iterations before "
                    f"{self.first_step} go to metrics.jsonl and TensorBoard only",
                    flush=True,
                )
                self.skipped = True
            return
        self.run.log(scalars(metrics), step=step)

    def close(self, exit_code: int = 0) -> None:
        self.run.finish(exit_code=exit_code)


class MetricsLog:
    """Writes metrics from rank 0; ``start`` is the first iteration this process will make. ``wandb``, when given,
    also gets each iteration's metrics, and is finished by :meth:`close`."""

    def __init__(self, run_dir: Path, start: int, wandb: WandbRun | None = None) -> None:
        self.path = run_dir / METRICS_FILE
        kept = [row for row in read_metrics(run_dir) if row.get("iteration", math.inf) < start]
        atomic_write(self.path, "".join(json.dumps(row) + "\n" for row in kept))
        self.file = open(self.path, "a")  # noqa: SIM115 - open for the life of the run
        self.wandb = wandb
        self.writer = None
        try:
            from torch.utils.tensorboard import SummaryWriter

            self.writer = SummaryWriter(log_dir=str(run_dir / "tensorboard"), purge_step=start)
        except ImportError:
            print("tensorboard is not installed: metrics go to metrics.jsonl only (pip install 'pyagentrl[train]')")

    def write(self, metrics: dict[str, Any]) -> None:
        self.file.write(json.dumps(metrics) + "\n")
        self.file.flush()
        os.fsync(self.file.fileno())
        if self.writer is not None:
            step = int(metrics["iteration"])
            for key, value in scalars(metrics).items():
                self.writer.add_scalar(key, value, step)
            self.writer.flush()
        if self.wandb is not None:
            self.wandb.write(metrics)

    def close(self, exit_code: int = 0) -> None:
        """``exit_code``: W&B's, for the run's state there (0: finished; otherwise failed)."""
        self.file.close()
        if self.writer is not None:
            self.writer.close()
        if self.wandb is not None:
            self.wandb.close(exit_code)


class Display:
    """A progress bar over the iterations and one summary line per iteration (rich when installed)."""

    COLUMNS = (
        ("success_rate", "success", "{:.2f}"),
        ("mean_score", "score", "{:.3f}"),
        ("episode_length", "length", "{:.1f}"),
        ("invalid_action_rate", "invalid", "{:.2f}"),
        ("clip_fraction", "clip", "{:.3f}"),
        ("entropy", "entropy", "{:.3f}"),
        ("grad_norm", "grad", "{:.3f}"),
        ("seconds_iteration", "s", "{:.1f}"),
    )

    #: Iterations in a row with every advantage 0 after which the note says the run looks stuck.
    STUCK_AFTER = 3

    def __init__(self, total: int, start: int) -> None:
        self.progress: Any = None
        self.flat = 0  # iterations in a row whose batch gave every step an advantage of 0
        try:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
        except ImportError:
            return
        self.progress = Progress(
            TextColumn("[bold]iterations"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), transient=False
        )
        self.task = self.progress.add_task("train", total=total, completed=start)
        self.progress.start()

    def show(self, metrics: dict[str, Any]) -> None:
        parts = [f"iter {metrics['iteration']:>4}"]
        for key, label, fmt in self.COLUMNS:
            value = metrics.get(key)
            parts.append(f"{label} " + ("-" if value is None else fmt.format(value)))
        line = "  ".join(parts)
        note = self._flat_note(metrics)
        if note is not None:
            line += "\n" + note
        if self.progress is None:
            print(line, flush=True)
            return
        self.progress.console.print(line, soft_wrap=True)
        self.progress.advance(self.task)

    def _flat_note(self, metrics: dict[str, Any]) -> str | None:
        """A line under an iteration whose batch had nothing to learn from: every group's episodes returned the same,
        so every advantage is 0 and the clipped loss has no gradient. A run that stays there does not leave by
        itself unless a later batch differs by chance (a policy that lost the answer format: invalid replies near 1)."""
        if metrics.get("advantage_zero_share") != 1.0:
            self.flat = 0
            return None
        self.flat += 1
        invalid = metrics.get("invalid_action_rate")
        note = "  every advantage was 0: each task group's episodes returned the same"
        if invalid is not None:
            note += f" (invalid replies {invalid:.2f})"
        if self.flat >= self.STUCK_AFTER:
            note += f"; {self.flat} iterations in a row: the policy looks stuck and learns nothing from its samples"
        return note

    def close(self) -> None:
        if self.progress is not None:
            self.progress.stop()


def anchor_purity(rollout: Rollout) -> float:
    """The share of rows whose anchor group's most common exact state is their own (1 for exact anchors)."""
    s = rollout.steps
    exact = torch.from_numpy(StateKeyer().assign(rollout.anchors, s.group_ids.numpy()))
    pair_of_row, num_pairs = factorize_pairs(s.state_ids, exact)  # (anchor group, exact state)
    pair_count = torch.bincount(pair_of_row, minlength=num_pairs)
    largest = torch.zeros(s.num_states, dtype=torch.long).scatter_reduce(
        0, s.state_ids, pair_count[pair_of_row], reduce="amax"
    )
    return float(largest.sum() / s.num_rows)


def rollout_metrics(rollout: Rollout) -> dict[str, float]:
    """What the iteration's episodes measured: success, score, length, invalid replies, anchor groups."""
    s = rollout.steps
    won = torch.zeros(s.num_trajs, dtype=torch.bool).index_put_((s.traj_ids,), rollout.won)
    length = torch.bincount(s.traj_ids, minlength=s.num_trajs).double()
    state_size = torch.bincount(s.state_ids, minlength=s.num_states)
    return {
        "episodes": s.num_trajs,
        "rows": s.num_rows,
        "success_rate": float(won.double().mean()),
        "mean_score": float(s.traj_score.double().mean()),
        "episode_length": float(length.mean()),
        "invalid_action_rate": rollout.invalid_rate,
        "anchor_rows_in_groups": float((state_size[s.state_ids] >= 2).double().mean()),
        "anchor_mean_group_size": s.num_rows / s.num_states,
        "anchor_purity": anchor_purity(rollout),
        "generated_tokens": rollout.generated_tokens,
    }
