"""What the benchmark scripts record about the machine they ran on (imported from the scripts' own folder)."""

from __future__ import annotations

import platform
from pathlib import Path


def cpu_model() -> str:
    """The processor's model name, as /proc/cpuinfo gives it."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"
