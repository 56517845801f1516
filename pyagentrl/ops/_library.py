"""Loads the compiled op library and adds what torch needs around it: fake (meta) implementations so
the ops trace under torch.compile, and the autograd formula of the per-action policy loss.

The ops are declared once in csrc/ops.cpp (``torch.ops.pyagentrl.*``), with CPU kernels in csrc/cpu and CUDA
kernels in csrc/cuda. Where no compiled kernel exists for a tensor's device (a CUDA tensor in a build without
nvcc, or a build without the extension), the public API runs the PyTorch reference in
:mod:`pyagentrl.ops.reference` instead.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import torch

try:
    from pyagentrl import _C  # type: ignore[attr-defined]  # noqa: F401  (importing registers the ops)

    HAVE_EXTENSION = True
except ImportError as exc:  # pragma: no cover - exercised only on broken installs
    HAVE_EXTENSION = False
    _package = Path(__file__).resolve().parents[1]
    _hint = (
        f" pyagentrl was imported from its source tree ({_package}), which holds no compiled extension: `python -m`"
        " and `python -c` put the working directory first on sys.path. Run from another directory, use the"
        " `pyagentrl` command or `python -P`, or reinstall the package (`make setup`)."
        if (_package.parent / "pyproject.toml").is_file()
        else ""
    )
    warnings.warn(f"pyagentrl._C could not be loaded ({exc}); using the PyTorch reference ops.{_hint}", stacklevel=2)


OP_NAMES = ("grouped_stats", "group_normalize", "factorize_pairs", "trajectory_gae", "per_action_clipped_loss")


def _lookup_kernel(op_name: str, device_type: str) -> bool:
    key = "CPU" if device_type == "cpu" else device_type.upper()
    return HAVE_EXTENSION and bool(torch._C._dispatch_has_kernel_for_dispatch_key(f"pyagentrl::{op_name}", key))


# Answered once per (op, device type) and kept in a plain dict: torch.compile traces a dict lookup, not the
# dispatcher query, so the ops' Python wrappers stay inside one graph.
_KERNELS = {(op, device): _lookup_kernel(op, device) for op in OP_NAMES for device in ("cpu", "cuda")}


def has_kernel(op_name: str, device: torch.device) -> bool:
    """Whether ``torch.ops.pyagentrl.<op_name>`` has a compiled kernel for ``device``."""
    found = _KERNELS.get((op_name, device.type))
    if found is None:
        found = _KERNELS[(op_name, device.type)] = _lookup_kernel(op_name, device.type)
    return found


if HAVE_EXTENSION:

    @torch.library.register_fake("pyagentrl::grouped_stats")
    def _grouped_stats_fake(
        values: torch.Tensor, group_ids: torch.Tensor, num_groups: int, unbiased: bool
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        return (
            group_ids.new_empty(num_groups),
            values.new_empty(num_groups),
            values.new_empty(num_groups),
        )

    @torch.library.register_fake("pyagentrl::group_normalize")
    def _group_normalize_fake(
        values: torch.Tensor,
        group_ids: torch.Tensor,
        num_groups: int,
        scale: bool,
        unbiased: bool,
        eps: float,
        singleton_raw: bool,
    ) -> torch.Tensor:
        return torch.empty_like(values)

    @torch.library.register_fake("pyagentrl::factorize_pairs")
    def _factorize_pairs_fake(a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.empty_like(a), a.new_empty(())

    @torch.library.register_fake("pyagentrl::trajectory_gae")
    def _trajectory_gae_fake(
        rewards: torch.Tensor,
        values: torch.Tensor | None,
        traj_ids: torch.Tensor,
        step_ids: torch.Tensor,
        num_trajs: int,
        gamma: float,
        lam: float,
    ) -> torch.Tensor:
        return torch.empty_like(rewards)

    @torch.library.register_fake("pyagentrl::per_action_clipped_loss")
    def _per_action_clipped_loss_fake(
        logp: torch.Tensor,
        old_logp: torch.Tensor,
        advantages: torch.Tensor,
        mask: torch.Tensor,
        segment_ids: torch.Tensor | None,
        clip_low: float,
        clip_high: float,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        return torch.empty_like(logp), torch.empty_like(logp), torch.empty_like(logp)

    def _loss_setup_context(ctx: torch.autograd.function.FunctionCtx, inputs: tuple, output: tuple) -> None:
        _, ratio, dloss_dlogp = output
        mask = inputs[3]
        ctx.save_for_backward(ratio, dloss_dlogp, mask)
        ctx.mark_non_differentiable(dloss_dlogp)

    def _loss_backward(
        ctx: torch.autograd.function.FunctionCtx,
        grad_loss: torch.Tensor,
        grad_ratio: torch.Tensor,
        grad_dloss: torch.Tensor,
    ) -> tuple[torch.Tensor | None, ...]:
        ratio, dloss_dlogp, mask = ctx.saved_tensors  # type: ignore[attr-defined]
        # GSPO-token: the surrogate ratio of token j has value s and gradient s * d(logp_j), so
        # d ratio_j / d logp_j = s on action tokens and 0 elsewhere; no gradient reaches other tokens.
        grad_logp = grad_loss * dloss_dlogp + grad_ratio * ratio * (mask != 0)
        return grad_logp, None, None, None, None, None, None

    torch.library.register_autograd(
        "pyagentrl::per_action_clipped_loss", _loss_backward, setup_context=_loss_setup_context
    )
