"""Whitespace of extracted plain text made regular: one space for a run of spaces and
tabs, trimmed lines, at most one blank line.

A module of its own, apart from ``fetch/extract.py``: the corpus readers of Markdown,
plain text and reStructuredText, and the PDF reader, need only this, and importing
``extract`` loads trafilatura and lxml (~0.5 s of CPU at every ``searcher index add``)."""

from __future__ import annotations

import re

_SPACES = re.compile(r"[^\S\n]+")
_BLANK_LINES = re.compile(r"\n{3,}")


def normalise_plain_text(text: str) -> str:
    """Runs of spaces and tabs become one space, lines are trimmed, at most one blank line."""
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    lines = (_SPACES.sub(" ", line).strip() for line in text.split("\n"))
    return _BLANK_LINES.sub("\n\n", "\n".join(lines)).strip()
