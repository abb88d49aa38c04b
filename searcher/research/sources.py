"""A report's Sources list, and its body fitted beside it within ``max_report_chars``.

The list is never cut: the body gives way instead, at a sentence or line boundary, and
only the sources its remaining citations name are listed. Each source (a URL) is listed
once, with the numbers of the evidence passages of it the body cites, so that every
``[n]`` in the body resolves to a listed source.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from searcher.llm.answer import CITED
from searcher.pack.neutralise import neutralise_markers
from searcher.research.evidence import Passage

SOURCES_HEADING = "## Sources"
_SEPARATOR = f"\n\n{SOURCES_HEADING}\n\n"
# Said where the body was shortened to leave room for its sources.
SHORTENED = "\n\n…"
# A title is a label: a very long one is shortened (never the URL, which is the source).
MAX_TITLE_CHARS = 120
# A sentence, a run of line breaks or stray punctuation: the pieces put back together are
# the text, so that the body is cut between two of them, never inside one.
PIECES = re.compile(r"[^.!?\n]+(?:[.!?]+|(?=\n)|$)|\n+|[.!?]+")
_CITATION = re.compile(CITED)
_LISTED = re.compile(r"^\[(\d+(?:, \d+)*)\] ")

SourceLines = Callable[[list[int]], list[str]]


@dataclass(frozen=True)
class Source:
    """One URL and the numbers (1-based) of its passages the body cites."""

    url: str
    title: str
    passages: tuple[int, ...]


def citations(text: str) -> list[int]:
    """The passage numbers ``text`` cites, in order of first use."""
    seen: dict[int, None] = {}
    for group in _CITATION.findall(text):
        for n in group.split(","):
            if len(n.strip()) <= 9:  # longer numbers cite nothing (and are no ints to Python)
                seen.setdefault(int(n), None)
    return list(seen)


def sources_of(cited: Sequence[int], passages: Sequence[Passage]) -> list[Source]:
    """One entry per URL among the ``cited`` passages, in order of its first passage."""
    by_url: dict[str, list[int]] = {}
    for n in sorted(set(cited)):
        if 1 <= n <= len(passages):
            by_url.setdefault(passages[n - 1].url, []).append(n)
    return [
        Source(url, passages[numbers[0] - 1].title, tuple(numbers))
        for url, numbers in by_url.items()
    ]


def source_line(source: Source) -> str:
    """``[1, 3] Title — URL``."""
    numbers = ", ".join(map(str, source.passages))
    title = uncited(" ".join(source.title.split()))
    if len(title) > MAX_TITLE_CHARS:
        title = title[: MAX_TITLE_CHARS - 1].rstrip() + "…"
    return neutralise_markers(f"[{numbers}] {title or source.url} — {source.url}")


def with_sources(body: str, passages: Sequence[Passage], max_chars: int) -> str:
    """``body`` and the Sources list of the passages it cites, within ``max_chars``: the
    body shortened as far as it must be; the list whole."""

    def lines(cited: list[int]) -> list[str]:
        return [source_line(s) for s in sources_of(cited, passages)]

    return _fitted(body, lines, max_chars)


def refit(report: str, max_chars: int) -> str:
    """A report made by ``with_sources`` within a smaller ``max_chars``: its body shortened
    again, its Sources list keeping the lines of the citations left."""
    body, _, listed = report.partition(_SEPARATOR)
    by_number: dict[int, str] = {}
    for line in listed.splitlines():
        if match := _LISTED.match(line):
            for n in match.group(1).split(", "):
                by_number.setdefault(int(n), line)

    def lines(cited: list[int]) -> list[str]:
        return list(dict.fromkeys(by_number[n] for n in cited if n in by_number))

    return _fitted(body, lines, max_chars)


def report_body(report: str) -> str:
    """A report made by ``with_sources`` without its Sources list (for a reader that lists
    the sources its own way)."""
    return report.partition(_SEPARATOR)[0]


def _fitted(body: str, lines: SourceLines, max_chars: int) -> str:
    """The longest head of ``body`` (whole pieces) that fits with its sources."""
    whole = _assemble(body, lines, shortened=False)
    if len(whole) <= max_chars:
        return whole
    pieces = PIECES.findall(body)
    # A longer head never cites fewer passages, so the length grows with the pieces kept:
    # the longest that fits is found by halving.
    fits, over = 0, len(pieces)
    while over - fits > 1:
        middle = (fits + over) // 2
        if len(_assemble("".join(pieces[:middle]), lines, shortened=True)) <= max_chars:
            fits = middle
        else:
            over = middle
    return _assemble("".join(pieces[:fits]), lines, shortened=fits > 0)


def _assemble(body: str, lines: SourceLines, shortened: bool) -> str:
    body = body.rstrip()
    listed = lines(citations(body))
    text = body + (SHORTENED if shortened and body else "")
    return text + _SEPARATOR + "\n".join(listed) if listed else text


def uncited(text: str) -> str:
    """``text`` with its bracketed numbers (a page's footnote marks, a question's "[99]")
    as ``(n)``, so that a report's citations are only its own."""
    return _CITATION.sub(lambda match: f"({match.group(1)})", text)
