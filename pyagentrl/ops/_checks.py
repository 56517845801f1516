"""Argument checks of the public ops: each names the argument and the problem, so bad input fails at
the call instead of deep inside a kernel or, worse, as a silently wrong advantage."""

from __future__ import annotations

import math
import numbers

import torch

FLOAT_DTYPES = (torch.float32, torch.float64)
NORM_MODES = ("mean_std_norm", "mean_norm")


def tensor(x: object, name: str) -> torch.Tensor:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if x.device.type == "meta":
        raise ValueError(f"{name} is a meta tensor; the ops read the data (trace them with FakeTensor instead)")
    return x


def float_values(x: object, name: str, *, dim: int = 1) -> torch.Tensor:
    """A float32/float64 tensor of ``dim`` dimensions, at least one row, whose entries are all finite."""
    t = tensor(x, name)
    if t.dtype not in FLOAT_DTYPES:
        raise TypeError(f"{name} must be float32 or float64, got {t.dtype}")
    if t.dim() != dim:
        raise ValueError(f"{name} must be {dim}-D, got shape {tuple(t.shape)}")
    if t.shape[0] == 0:
        raise ValueError(f"{name} is empty: a batch needs at least one row")
    if t.numel() and not bool(torch.isfinite(t).all()):
        bad = int((~torch.isfinite(t)).nonzero()[0, 0]) if dim == 1 else None
        where = f" (first at row {bad})" if bad is not None else ""
        raise ValueError(f"{name} contains NaN or inf{where}")
    return t


def ids(x: object, name: str, n: int, device: torch.device) -> torch.Tensor:
    """A 1-D int64 id tensor of ``n`` rows on ``device`` with no negative entry."""
    t = ids_any_value(x, name, n, device)
    if n and int(t.min()) < 0:
        raise ValueError(f"{name} has a negative id ({int(t.min())})")
    return t


def ids_any_value(x: object, name: str, n: int, device: torch.device) -> torch.Tensor:
    """A 1-D int64 tensor of ``n`` rows on ``device``; any values (keys such as hashes may be negative)."""
    t = tensor(x, name)
    if t.dtype != torch.int64:
        raise TypeError(f"{name} must be int64, got {t.dtype}")
    if t.dim() != 1 or t.numel() != n:
        raise ValueError(f"{name} must be 1-D with {n} rows, got shape {tuple(t.shape)}")
    same_device(t, name, device)
    return t


def same_device(t: torch.Tensor, name: str, device: torch.device) -> None:
    if t.device != device:
        raise ValueError(f"{name} is on {t.device}, expected {device}")


# The largest id range (num_groups, num_trajs) an op accepts, as csrc/checks.h's kMaxIds: an op keeps a table entry
# per id, and 2**40 entries (8 TiB of counts) is more than any machine holds, so a larger range is a hash or a
# careless count, refused before anything is allocated or overflows int64.
MAX_IDS = 2**40


def num_ids(t: torch.Tensor, name: str, given: int | None, num_name: str | None = None) -> int:
    """The number of dense ids in ``t`` (non-negative, checked by :func:`ids`): ``given`` if set (an int in
    0..MAX_IDS, checked against the data), else max + 1, which may not exceed the number of rows: without a count,
    ids index per-id tables, so an id of 2**62 (a hash, say) would ask for a table of 2**62 entries.
    ``num_name`` names the count argument of the op, if it has one."""
    observed = int(t.max()) + 1 if t.numel() else 0
    if given is None:
        rows = t.numel()
        if observed > rows:
            count_hint = f"pass {num_name}, or " if num_name else ""
            raise ValueError(
                f"{name} has id {observed - 1}, outside [0, {rows}): ids are dense, below the number of rows; "
                f"{count_hint}number sparse keys with ops.factorize"
            )
        return observed
    label = num_name or "the number of ids"
    if isinstance(given, bool) or not isinstance(given, numbers.Integral):
        raise TypeError(f"{label} must be an int, got {type(given).__name__}")
    given = int(given)
    if not 0 <= given <= MAX_IDS:
        raise ValueError(f"{label} must be in 0..2**40, got {given}")
    if given < observed:
        raise ValueError(f"{name} has id {observed - 1}, outside [0, {given})")
    return given


def norm_mode(mode: str, allowed: tuple[str, ...] = NORM_MODES) -> bool:
    """Checks ``mode`` and returns whether it divides by the std."""
    if mode not in allowed:
        raise ValueError(f"norm must be one of {allowed}, got {mode!r}")
    return mode == "mean_std_norm"


def singleton_rule(rule: str) -> bool:
    """Checks a singleton rule and returns whether a lone member keeps its raw score."""
    if rule not in ("zero", "raw"):
        raise ValueError(f"singleton must be 'zero' or 'raw', got {rule!r}")
    return rule == "raw"


def finite_mask(mask: torch.Tensor, name: str) -> None:
    """A response mask: finite and non-negative (0 = not a response token). One min/max pass over the
    mask (NaN propagates into both), as masks are the largest inputs of the ops."""
    if mask.dtype == torch.bool or mask.numel() == 0:
        return
    low, high = (float(v) for v in torch.aminmax(mask))
    if math.isnan(low) or math.isinf(low) or math.isinf(high):
        raise ValueError(f"{name} contains NaN or inf")
    if low < 0:
        raise ValueError(f"{name} has a negative entry; a mask holds 0 (not a response token) or 1")


def finite(value: float, name: str) -> float:
    if not math.isfinite(value):
        raise ValueError(f"{name} must be finite, got {value}")
    return float(value)


def non_negative(value: float, name: str) -> float:
    if not value >= 0:  # also catches NaN
        raise ValueError(f"{name} must be >= 0, got {value}")
    return float(value)


def unit_interval(value: float, name: str) -> float:
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"{name} must lie in [0, 1], got {value}")
    return float(value)
