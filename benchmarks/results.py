"""Writing RESULTS.md, the one writer every benchmark script uses (imported from the scripts' own folder).

A script owns one ``## `` section and replaces it whole, or appends it when it is not there yet; every other section
is kept byte for byte. A section may carry headline lines, HTML comments invisible when rendered::

    <!-- headline: WHAT | FIGURE | BASELINE | MACHINE | DATE -->

and every write regenerates, from them, the summary table between the file's intro (the lines before the first
``## `` heading) and its first section, inside ``<!-- summary -->`` ... ``<!-- /summary -->``. The summary is not a
``## `` section (that would make it one more section to replace): a bold line, then the table.

    python benchmarks/results.py     # regenerates the summary from the sections as they stand
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from itertools import pairwise
from pathlib import Path

#: The file every function here reads and writes, looked up at each call (tests point it at a copy).
RESULTS = Path(__file__).with_name("RESULTS.md")

SUMMARY_START = "<!-- summary -->"
SUMMARY_END = "<!-- /summary -->"
SUMMARY_TITLE = (
    "**Summary** (generated from each section's headline lines by benchmarks/results.py; the figures are the "
    "sections' own)"
)
COLUMNS = ("section", "what", "figure", "baseline", "machine", "date")
_HEADING = re.compile(r"^## ", re.MULTILINE)
_HEADLINE = re.compile(r"^<!-- headline: (.*) -->[ \t]*$", re.MULTILINE)
_ANY_HEADING = re.compile(r"^(#{1,6}) +(.*?) *#* *$", re.MULTILINE)
_SUMMARY = re.compile(r"\n*" + re.escape(SUMMARY_START) + r".*?" + re.escape(SUMMARY_END) + r"\n*", re.DOTALL)

Headline = tuple[str, str, str, str, str]


def headline_line(headline: Sequence[str]) -> str:
    """The comment line of one headline: (what, figure, baseline, machine, date)."""
    if len(headline) != 5:
        raise ValueError(f"a headline has 5 fields (what, figure, baseline, machine, date), not {len(headline)}")
    for field in headline:
        if not field.strip() or "|" in field or "\n" in field or "-->" in field:
            raise ValueError(f"a headline field must be non-empty, on one line, without '|' or '-->': {field!r}")
    return "<!-- headline: " + " | ".join(field.strip() for field in headline) + " -->"


def parse_headlines(section: str) -> list[Headline]:
    """The headlines of a section's text, in order."""
    found = []
    for match in _HEADLINE.finditer(section):
        fields = [field.strip() for field in match.group(1).split("|")]
        if len(fields) != 5:
            raise ValueError(f"headline line with {len(fields)} fields, not 5: {match.group(0)!r}")
        found.append((fields[0], fields[1], fields[2], fields[3], fields[4]))
    return found


def split(text: str) -> tuple[str, list[str]]:
    """The intro (everything before the first ``## `` line) and each section's text, heading line included, up to
    the next ``## `` line: ``intro + "".join(sections) == text``."""
    starts = [m.start() for m in _HEADING.finditer(text)]
    if not starts:
        return text, []
    bounds = [*starts, len(text)]
    return text[: starts[0]], [text[a:b] for a, b in pairwise(bounds)]


def anchor(title: str) -> str:
    """GitHub's anchor of a heading: lowercase, punctuation other than '-' and '_' removed, spaces to '-'."""
    return re.sub(r"[^\w\- ]", "", title.strip().lower()).replace(" ", "-")


def section_anchors(text: str) -> list[str]:
    """The anchors of the ``## `` headings in order, numbered as GitHub numbers repeats ('-1', '-2') across all the
    document's headings."""
    seen: dict[str, int] = {}
    out = []
    for match in _ANY_HEADING.finditer(text):
        slug = anchor(match.group(2))
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        if len(match.group(1)) == 2:
            out.append(slug if count == 0 else f"{slug}-{count}")
    return out


def summary(sections: Sequence[str], anchors: Sequence[str]) -> str:
    """The summary block, markers included: one row per headline, in section order."""
    rows = []
    for section, slug in zip(sections, anchors, strict=True):
        title = section.split("\n", 1)[0].removeprefix("## ").strip()
        link = f"[{title}](#{slug})"
        headlines = parse_headlines(section)
        if not headlines:
            rows.append(f"| {link} | (no headline line in the section) | | | | |")
        rows.extend(f"| {link} | " + " | ".join(h) + " |" for h in headlines)
    table = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS), *rows]
    return "\n".join([SUMMARY_START, "", SUMMARY_TITLE, "", *table, "", SUMMARY_END])


def render(intro: str, sections: Sequence[str]) -> str:
    """The whole file: the intro without its old summary, the summary of ``sections``, then the sections, one blank
    line between sections that lack one."""
    kept = _SUMMARY.sub("\n\n", intro).strip("\n")
    chunks = [s if s.endswith("\n\n") else s.rstrip("\n") + "\n\n" for s in sections]
    if chunks:
        chunks[-1] = chunks[-1].rstrip("\n") + "\n"
    body = "".join(chunks)
    # The anchors count the intro's headings too (the file's '# ' title), as GitHub does.
    anchors = section_anchors(kept + "\n\n" + body)
    head = (kept + "\n\n" if kept else "") + summary(sections, anchors) + "\n"
    return head + ("\n" + body if body else "")


def write_section(heading: str, body: str, *, headlines: Sequence[Headline] = ()) -> None:
    """Replaces the section whose heading line is ``heading`` (up to the next ``## `` line) with ``heading``,
    ``body`` and a comment line per headline (what, figure, baseline, machine, date), or appends it when absent;
    then regenerates the summary."""
    if not heading.startswith("## ") or "\n" in heading:
        raise ValueError(f"a section heading is one line that starts with '## ': {heading!r}")
    section = f"{heading}\n\n{body.strip()}\n"
    if headlines:
        section += "\n" + "".join(headline_line(h) + "\n" for h in headlines)
    intro, sections = split(RESULTS.read_text())
    titles = [s.split("\n", 1)[0].rstrip() for s in sections]
    if heading.rstrip() in titles:
        sections[titles.index(heading.rstrip())] = section
    else:
        sections.append(section)
    RESULTS.write_text(render(intro, sections))


def refresh() -> str:
    """Regenerates the summary from the sections as they stand; returns the file's new text."""
    text = render(*split(RESULTS.read_text()))
    RESULTS.write_text(text)
    return text


def main() -> None:
    text = refresh()
    _, sections = split(text)
    count = sum(len(parse_headlines(s)) for s in sections)
    print(f"{RESULTS}: summary of {count} headline(s) from {len(sections)} section(s)")


if __name__ == "__main__":
    main()
