"""Writing a section of RESULTS.md (imported from the scripts' own folder): a script owns one ``## `` section and
replaces it whole, or appends it when it is not there yet."""

from __future__ import annotations

import re
from pathlib import Path

RESULTS = Path(__file__).with_name("RESULTS.md")


def write_section(heading: str, body: str) -> None:
    """Replaces the section that starts with the line ``heading`` (up to the next ``## `` heading) with ``heading``
    and ``body``."""
    section = f"{heading}\n\n{body.strip()}\n"
    current = RESULTS.read_text()
    pattern = re.compile(re.escape(heading) + r"\n.*?(?=\n## |\Z)", re.DOTALL)
    if pattern.search(current):
        updated = pattern.sub(lambda _: section.rstrip("\n"), current)
    else:
        updated = current.rstrip("\n") + "\n\n" + section
    RESULTS.write_text(updated.rstrip("\n") + "\n")
