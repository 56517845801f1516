"""The process group: one process per rank, started by the ``deepspeed`` launcher, ``torchrun`` or plainly.

A plain ``pyagentrl train`` is a world of one: the rendezvous variables the launchers set are filled in for it
(DeepSpeed otherwise looks for MPI). gloo on CPU, NCCL on GPU. Rollout data crosses ranks as pickled objects: it is
small (token ids and per-row numbers) next to the model.
"""

from __future__ import annotations

import hashlib
import os
import socket
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch


@dataclass(frozen=True)
class World:
    rank: int
    size: int
    local_rank: int
    device: torch.device

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def all_gather_object(self, obj: Any) -> list[Any]:
        if self.size == 1:
            return [obj]
        out: list[Any] = [None] * self.size
        torch.distributed.all_gather_object(out, obj)
        return out

    def broadcast_object(self, obj: Any) -> Any:
        """Rank 0's ``obj`` on every rank."""
        if self.size == 1:
            return obj
        box = [obj]
        torch.distributed.broadcast_object_list(box, src=0)
        return box[0]

    def all_reduce_sums(self, values: dict[str, float]) -> dict[str, float]:
        if self.size == 1:
            return dict(values)
        keys = sorted(values)
        t = torch.tensor([float(values[k]) for k in keys], dtype=torch.float64)
        if torch.distributed.get_backend() == "nccl":
            t = t.to(self.device)
        torch.distributed.all_reduce(t)
        return dict(zip(keys, t.cpu().tolist(), strict=True))

    def barrier(self) -> None:
        if self.size > 1:
            torch.distributed.barrier()

    def close(self) -> None:
        """Leaves the process group once every rank is done. A rank that exits with the group open can abort in its
        threads' teardown ("terminate called without an active exception", exit code -6, seen with 2 CPU ranks
        after their work was done). A world of one stays open: it lives in the caller's process, which may train
        again."""
        if self.size > 1 and torch.distributed.is_initialized():
            torch.distributed.barrier()
            torch.distributed.destroy_process_group()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# DeepSpeed's CPU backend compiles its shared-memory op on first use, behind torch's FileBaton: a `lock` file in the
# op's build directory. A process killed during that build leaves the file behind, and every later process waits on
# it forever, printing nothing.
_SHM_OP = "deepspeed_shm_comm"


def _own_extensions_dir() -> Path:
    """One build directory per Python environment: torch's default is one per Python version, shared by every
    environment, so two virtual environments rebuild each other's ops (and meet each other's locks)."""
    tag = hashlib.sha256(sys.prefix.encode()).hexdigest()[:16]
    return Path.home() / ".cache" / "pyagentrl" / "torch_extensions" / tag


def _build_deepspeed_ops() -> None:
    """Builds (or finds built) the op DeepSpeed's process group loads, one process at a time, under an ``flock`` that
    the kernel releases when its holder dies, and before any rendezvous: the ranks of one world must not wait on each
    other's lock while they wait for each other to join. In our own build directory every builder holds the flock,
    so a baton found there is a dead build's and is removed. A TORCH_EXTENSIONS_DIR the user set may be shared with
    other programs: there a baton is only reported, with the file to remove if no build is running."""
    import fcntl

    from deepspeed.comm.torch import build_shm_op

    chosen = os.environ.get("TORCH_EXTENSIONS_DIR")
    root = Path(chosen) if chosen else _own_extensions_dir()
    root.mkdir(parents=True, exist_ok=True)
    os.environ["TORCH_EXTENSIONS_DIR"] = str(root)
    with open(root / ".pyagentrl-build.lock", "w") as guard:
        fcntl.flock(guard, fcntl.LOCK_EX)
        baton = root / _SHM_OP / "lock"
        if baton.exists():
            if chosen:
                print(
                    f"[pyagentrl] waiting for {baton} (DeepSpeed builds {_SHM_OP} there); if no build is running, "
                    "a killed one left it: remove it",
                    file=sys.stderr,
                    flush=True,
                )
            else:
                baton.unlink()
        build_shm_op()  # None where the accelerator has no such op (GPUs); DeepSpeed's own call then finds it built


def init_world() -> World:
    """Joins (or, run plainly, creates) the process group; every rank calls it before anything collective."""
    import deepspeed

    if "RANK" not in os.environ:  # not started by a launcher: a world of one
        os.environ.update(RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1")
        os.environ.setdefault("MASTER_PORT", str(_free_port()))
    cuda = torch.cuda.is_available()
    if not torch.distributed.is_initialized():
        _build_deepspeed_ops()
        deepspeed.init_distributed(dist_backend="nccl" if cuda else "gloo")
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    device = torch.device("cuda", local_rank) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    return World(torch.distributed.get_rank(), torch.distributed.get_world_size(), local_rank, device)


def world_size_from_env() -> int:
    """The world size the launcher asked for (1 when run plainly), known before the process group exists."""
    return int(os.environ.get("WORLD_SIZE", "1"))
