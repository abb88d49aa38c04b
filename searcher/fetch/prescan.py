"""A cheap look at an HTML page's shape before the parser sees it.

Some pages under 2 MB take trafilatura minutes, because its cost grows with the square of
some structures: a table row of 150,000 cells took about 97 s of CPU, one element with
150,000 attributes 45 s, 150,000 paragraphs 54 s. One linear pass over the tags (a regular
expression, no tree) finds such pages in tens of milliseconds, so they are refused as
"page too complex" instead of holding a worker until its time limit kills it.

The limits sit far above real pages: the 242 pages of the extraction benchmarks have at
most 1,737 elements; a very long encyclopedia article has a few tens of thousands.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# A start or end tag: "/" for an end tag, the name, then the attributes up to ">".
_TAG = re.compile(rb"<(/?)([a-zA-Z][a-zA-Z0-9:-]*)([^>]*)>")
_ATTRIBUTE = re.compile(rb"[^\s=/]+\s*=")
# Containers a page closes explicitly; counting only these keeps unclosed <p> and <li>
# (legal HTML) from looking like deep nesting.
_CONTAINERS = frozenset(
    b"div span section article main aside nav header footer table ul ol dl blockquote form".split()
)
_CELLS = frozenset({b"td", b"th"})


@dataclass(frozen=True)
class ComplexityLimits:
    """How much structure a page may have before extraction is refused."""

    max_elements: int = 50_000  # 50,000 paragraphs: about 9 s of trafilatura
    max_depth: int = 2_000
    # Each element's depth, summed: what walking a deep tree costs, ancestors again and
    # again. 20 chains of 2,000 nested divs (40 million) took trafilatura 27 s; 20 of 500
    # (2.5 million) 2.8 s; the benchmark pages stay under 60,000.
    max_depth_sum: int = 5_000_000
    max_attributes: int = 1_000  # on one element
    max_row_cells: int = 2_000  # in one table row


def complexity_problem(body: bytes, limits: ComplexityLimits) -> str | None:
    """Why ``body`` is too complex to extract (the first limit it breaks), or ``None``."""
    elements = depth = deepest = row_cells = depth_sum = 0
    for match in _TAG.finditer(body):
        closing, name, rest = match.group(1), match.group(2).lower(), match.group(3)
        if closing:
            if name in _CONTAINERS:
                depth = max(0, depth - 1)
            if name == b"tr":
                row_cells = 0
            continue
        elements += 1
        if elements > limits.max_elements:
            return f"more than {limits.max_elements:,} elements"
        depth_sum += depth
        if depth_sum > limits.max_depth_sum:
            return f"elements nested deeper than {limits.max_depth_sum:,} levels in all"
        if rest.count(b"=") > limits.max_attributes and (
            sum(1 for _ in _ATTRIBUTE.finditer(rest)) > limits.max_attributes
        ):
            return f"an element with more than {limits.max_attributes:,} attributes"
        if name in _CONTAINERS and not rest.endswith(b"/"):
            depth += 1
            deepest = max(deepest, depth)
            if deepest > limits.max_depth:
                return f"elements nested more than {limits.max_depth:,} deep"
        if name == b"tr" or name == b"table":
            row_cells = 0
        elif name in _CELLS:
            row_cells += 1
            if row_cells > limits.max_row_cells:
                return f"a table row with more than {limits.max_row_cells:,} cells"
    return None
