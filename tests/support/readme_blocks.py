"""The fenced blocks of README.md and docs/*.md, as tests/test_readme_commands.py reads them:
each block's place, language, mark (the ``<!-- ... -->`` line before it) and commands.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
MARK = re.compile(
    r"^<!-- (not run: (?P<reason>.+?)|serves: (?P<service>agent|hub)"
    r"|run: one box per line|synopsis) -->$"
)
PLACEHOLDER = re.compile(r"\[|\||\b[A-Z][A-Z0-9_.-]*[A-Z]\b")


@dataclass(frozen=True)
class Block:
    """One fenced block: where it is, its language, its mark (the line before) and its text."""

    where: str
    lang: str
    mark: str
    text: str

    def lines(self) -> list[str]:
        """Return its commands: backslash continuations joined, blank and comment lines left out."""
        joined = self.text.replace("\\\n", " ")
        return [
            ln.strip()
            for ln in joined.splitlines()
            if ln.strip() and not ln.lstrip().startswith("#")
        ]


def blocks(path: Path) -> Iterator[Block]:
    """Yield every fenced block of ``path``."""
    lines = path.read_text(encoding="utf-8").splitlines()
    i = 0
    while i < len(lines):
        if lines[i].startswith("```"):
            start, lang = i, lines[i][3:].strip()
            end = next(j for j in range(i + 1, len(lines)) if lines[j].startswith("```"))
            mark = lines[start - 1].strip() if start and lines[start - 1].startswith("<!--") else ""
            where = f"{path.relative_to(ROOT)}:{start + 1}"
            yield Block(where, lang, mark, "\n".join(lines[start + 1 : end]) + "\n")
            i = end
        i += 1


def shell_blocks() -> list[Block]:
    """Return the blocks this test runs or says why not: ``sh`` and ``python``."""
    return [b for doc in DOCS for b in blocks(doc) if b.lang in ("sh", "python")]


def comment(line: str) -> str:
    """Return the ``# comment`` ending ``line`` (outside quotes), else ''."""
    quote = ""
    for i, ch in enumerate(line):
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and i and line[i - 1].isspace():
            return line[i + 1 :].strip()
    return ""
