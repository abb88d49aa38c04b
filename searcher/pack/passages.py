"""Query-focused passages: a page cut into paragraph-sized passages, the best ones kept.

A page is split into passages (its paragraphs; long ones split at sentence boundaries,
tiny fragments such as headings merged into their neighbours). The passages are ranked by
BM25 over the page's own passages (``searcher.text``: its query terms, stemmer and BM25),
ties broken by position. :func:`select_passages` keeps the best ones that
fit a character budget, in document order, with ``…`` lines marking what was left out;
:func:`top_chunks` returns the best few (Tavily's ``chunks_per_source``).

Every passage is a slice of the page, so nothing is reworded. The work is bounded: at most
``MAX_PASSAGES`` passages are considered, and query terms are found by searching the
lower-cased page for the words that start like them (``searcher.text.stem_positions``)
rather than by tokenising all of it in Python.
"""

from __future__ import annotations

import re
from bisect import bisect_right, insort
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from searcher.text import bm25, query_terms, stem_positions

Span = tuple[int, int]  # [start, end) offsets of a passage in the page text

DEFAULT_MAX_CHARS = 500
# Passages considered per page (~1 MB of text at 500 characters each): bounds the work on a
# huge page; text beyond is never chosen.
MAX_PASSAGES = 2000
# A selection budget buys passages about half its size (at least this), so that even a
# small share holds two pieces of evidence rather than one cut paragraph.
_MIN_SELECT_SIZE = 160
ELISION = "…"
_GAP = f"\n\n{ELISION}\n\n"
_LEAD = f"{ELISION}\n\n"

_LINE = re.compile(r"[^\n]+")
# A sentence ends at . ! ? or … (maybe followed by closing quotes or brackets) and spaces.
_SENTENCE_END = re.compile(r"([.!?…][\"'”’)\]]*)\s+")


# --- splitting ----------------------------------------------------------------------------


def _trimmed(text: str, start: int, end: int) -> Span | None:
    """``[start, end)`` without leading and trailing whitespace; None when blank."""
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    return (start, end) if start < end else None


def _word_pieces(text: str, start: int, end: int, size: int) -> Iterator[Span]:
    """``[start, end)`` in pieces of at most ``size``, cut at spaces (hard without one)."""
    while end - start > size:
        window = (start + 1, start + size + 1)
        cut = max(text.rfind(" ", *window), text.rfind("\n", *window))
        if cut <= start:
            cut = start + size  # one long token: cut it hard
        piece = _trimmed(text, start, cut)
        if piece is not None:
            yield piece
        start = cut
        while start < end and text[start].isspace():
            start += 1
    if end > start:
        yield (start, end)


def _sentences(text: str, start: int, end: int) -> Iterator[Span]:
    """The sentences of ``[start, end)``."""
    for match in _SENTENCE_END.finditer(text, start, end):
        yield (start, match.end(1))
        start = match.end()
    if end > start:
        yield (start, end)


def _line_units(text: str, start: int, end: int, size: int) -> Iterator[Span]:
    """A line (maybe with short lines before it) as units of at most ``size``: whole, or
    its sentences packed greedily."""
    if end - start <= size:
        yield (start, end)
        return
    unit: Span | None = None
    for s, e in _sentences(text, start, end):
        if unit is not None and e - unit[0] <= size:
            unit = (unit[0], e)
            continue
        if unit is not None:
            yield unit
        unit = None
        if e - s <= size:
            unit = (s, e)
        else:
            yield from _word_pieces(text, s, e, size)
    if unit is not None:
        yield unit


def _units(text: str, size: int) -> Iterator[Span]:
    """The non-blank lines of ``text`` as units of at most ``size``, in order. A run of
    short lines (a heading) is split together with the line after it, so that it stays
    with the first sentences it introduces."""
    small = size // 4
    pending: int | None = None  # start of a run of short lines not yet given out
    end = 0
    for line in _LINE.finditer(text):
        span = _trimmed(text, line.start(), line.end())
        if span is None:
            continue
        start, end = (span[0] if pending is None else pending), span[1]
        if span[1] - span[0] < small and end - start < size:
            pending = start
            continue
        pending = None
        yield from _line_units(text, start, end, size)
    if pending is not None:
        yield (pending, end)


def passage_spans(text: str, max_chars: int = DEFAULT_MAX_CHARS) -> list[Span]:
    """The passages of ``text`` as spans, at most ``MAX_PASSAGES`` of them: units smaller
    than a quarter of ``max_chars`` (headings, list items, short lines) are merged with
    the units after them, a small last one with the one before, never beyond
    ``max_chars``."""
    if max_chars < 1:
        raise ValueError("max_chars must be at least 1")
    small = max_chars // 4
    spans: list[Span] = []
    current: Span | None = None
    for start, end in _units(text, max_chars):
        if (
            current is not None
            and current[1] - current[0] < small
            and end - current[0] <= max_chars
        ):
            current = (current[0], end)
            continue
        if current is not None:
            spans.append(current)
            if len(spans) >= MAX_PASSAGES:
                return spans
        current = (start, end)
    if current is not None:
        last = spans[-1] if spans else None
        if last and current[1] - current[0] < small and current[1] - last[0] <= max_chars:
            spans[-1] = (last[0], current[1])
        else:
            spans.append(current)
    return spans


def split_passages(text: str, max_chars: int = DEFAULT_MAX_CHARS) -> list[str]:
    """``text`` as passages of at most ``max_chars``: its paragraphs (lines), long ones
    split at sentence boundaries (at spaces for an over-long sentence), tiny fragments
    merged with their neighbours. Each passage is a slice of ``text``."""
    return [text[s:e] for s, e in passage_spans(text, max_chars)]


# --- scoring ------------------------------------------------------------------------------


def _lowered(text: str) -> str:
    """``text`` lower-cased with every offset kept: ``lower()`` never shrinks a character
    but may grow one ("İ"), which is then left as it was."""
    lowered = text.lower()
    if len(lowered) == len(text):
        return lowered
    return "".join(low if len(low := ch.lower()) == 1 else ch for ch in text)


def _term_counts(text: str, spans: Sequence[Span], terms: Sequence[str]) -> list[dict[str, int]]:
    """For each passage, how many of its words stem to each of ``terms`` (those it has)."""
    counts: list[dict[str, int]] = [{} for _ in spans]
    if not terms or not spans:
        return counts
    starts = [s for s, _ in spans]
    for at, term in stem_positions(tuple(terms), _lowered(text), spans[0][0], spans[-1][1]):
        index = bisect_right(starts, at) - 1
        if at < spans[index][1]:  # a word between passages (odd whitespace) counts for none
            row = counts[index]
            row[term] = row.get(term, 0) + 1
    return counts


def passage_bm25(
    query: str, texts: Sequence[str], spans: Sequence[Sequence[Span]]
) -> list[list[float]]:
    """BM25 of every passage of every page for ``query``, with document frequencies and
    the average length (in characters) taken over all the pages' passages together, so
    that scores compare across pages."""
    terms = query_terms(query)
    counts = [
        row
        for text, page in zip(texts, spans, strict=True)
        for row in _term_counts(text, page, terms)
    ]
    flat = bm25(terms, counts, [e - s for page in spans for s, e in page])
    scores, at = [], 0
    for page in spans:
        scores.append(flat[at : at + len(page)])
        at += len(page)
    return scores


def _ranked(scores: Sequence[float]) -> list[int]:
    """Passage indices, best score first, ties (and unmatched passages) by position."""
    return sorted(range(len(scores)), key=lambda i: (-scores[i], i))


# --- selecting ----------------------------------------------------------------------------


class _Selection:
    """Kept passages (by index) and the exact length of their assembled text."""

    def __init__(self, text: str, spans: Sequence[Span]) -> None:
        self.text = text
        self.spans = spans
        self.kept: list[int] = []
        self.length = 0

    def _join(self, a: int, b: int) -> str:
        """What stands between kept passages ``a`` < ``b``: the page's own break when they
        are neighbours, else an elision line."""
        if b != a + 1:
            return _GAP
        gap = self.text[self.spans[a][1] : self.spans[b][0]]
        newlines = gap.count("\n")
        return "\n\n" if newlines >= 2 else "\n" if newlines else " "

    def _lead(self, index: int) -> int:
        return 0 if index == 0 else len(_LEAD)

    def cost(self, index: int) -> int:
        """How much longer the assembled text gets by keeping passage ``index``."""
        s, e = self.spans[index]
        at = bisect_right(self.kept, index)
        before = self.kept[at - 1] if at > 0 else None
        after = self.kept[at] if at < len(self.kept) else None
        cost = e - s
        if before is None:
            cost += self._lead(index) - (self._lead(after) if after is not None else 0)
        else:
            cost += len(self._join(before, index))
        if after is not None:
            cost += len(self._join(index, after))
            if before is not None:
                cost -= len(self._join(before, after))
        return cost

    def keep(self, index: int, cost: int) -> None:
        insort(self.kept, index)
        self.length += cost

    def assemble(self) -> str:
        parts = [_LEAD] if self.kept and self.kept[0] != 0 else []
        for at, index in enumerate(self.kept):
            if at:
                parts.append(self._join(self.kept[at - 1], index))
            s, e = self.spans[index]
            parts.append(self.text[s:e])
        return "".join(parts)


def _cut(passage: str, room: int) -> str:
    """``passage`` in at most ``room`` characters, cut at a space and ended with ``…``."""
    if len(passage) <= room:
        return passage
    cut = passage.rfind(" ", 0, room)
    head = passage[: cut if cut > 0 else room - 1].rstrip()
    return head + ELISION if head else ""


def select_passages(query: str, text: str, budget: int) -> str:
    """The passages of ``text`` most relevant to ``query``, in document order, within
    ``budget`` characters (joins and ``…`` elision lines included). Matching passages are
    taken best first, skipping any that no longer fit; leftover room goes to the page's
    head. With no match at all, the head of the page is returned."""
    if budget <= 0:
        return ""
    if len(text) <= budget:
        return text
    size = min(DEFAULT_MAX_CHARS, max(_MIN_SELECT_SIZE, budget // 2))
    spans = passage_spans(text, size)
    if not spans:
        return ""
    scores = passage_bm25(query, [text], [spans])[0]
    selection = _Selection(text, spans)
    for index in _ranked(scores):
        cost = selection.cost(index)
        if selection.length + cost <= budget:
            selection.keep(index, cost)
        elif scores[index] == 0:
            break  # the unmatched rest is the page's head: keep it contiguous
    if not selection.kept:  # the best passage alone is too long: cut it
        best = _ranked(scores)[0]
        lead = _LEAD if best else ""
        s, e = spans[best]
        cut = _cut(text[s:e], budget - len(lead))
        return lead + cut if cut else ""
    return selection.assemble()


def top_chunks(query: str, text: str, n: int, max_chars: int = DEFAULT_MAX_CHARS) -> list[str]:
    """The ``n`` passages of ``text`` (each at most ``max_chars``) most relevant to
    ``query``, best first; unmatched passages follow in page order when fewer match."""
    if n <= 0:
        return []
    spans = passage_spans(text, max_chars)
    scores = passage_bm25(query, [text], [spans])[0]
    return [text[spans[i][0] : spans[i][1]] for i in _ranked(scores)[:n]]


# --- choosing across pages ------------------------------------------------------------------

# Passage size when the passages of several pages compete for one budget (tuned on the dev
# split of bench/answer_recall.py; see the README).
CROSS_PAGE_PASSAGE_CHARS = 600
# The best passage of each page is taken first, pages in rank order, while these floors
# use at most this share of the budget; the rest goes to the best passages overall.
CROSS_PAGE_FLOOR_SHARE = 0.25
# Weight of the passage-query cosine (when an embedder gave one) next to BM25 scaled to 1.
EMBEDDING_WEIGHT = 0.5


@dataclass(frozen=True)
class PageChoice:
    """What one page gave to a pack: the text shown, how many of its passages, and how
    many characters of the page those hold."""

    text: str
    passages: int
    chars: int


def page_passage_spans(texts: Sequence[str]) -> list[list[Span]]:
    """The passages each page is cut into when pages compete (what embeddings score)."""
    return [passage_spans(text, CROSS_PAGE_PASSAGE_CHARS) for text in texts]


def _combined(
    bm25: list[list[float]], similarity: Sequence[Sequence[float]] | None
) -> list[list[float]]:
    """BM25 scaled to [0, 1] over all passages, plus the weighted cosine when given."""
    top = max((s for page in bm25 for s in page), default=0.0) or 1.0
    if similarity is None:
        return [[s / top for s in page] for page in bm25]
    return [
        [s / top + EMBEDDING_WEIGHT * max(float(c), 0.0) for s, c in zip(page, sims, strict=True)]
        for page, sims in zip(bm25, similarity, strict=True)
    ]


def select_across_pages(
    query: str,
    texts: Sequence[str],
    budget: int,
    similarity: Sequence[Sequence[float]] | None = None,
    *,
    size: int = CROSS_PAGE_PASSAGE_CHARS,
    floor_share: float = CROSS_PAGE_FLOOR_SHARE,
) -> list[PageChoice]:
    """What each page shows when all of them share ``budget`` characters: the passages of
    every page ranked together (BM25 over all of them, plus ``similarity``, one cosine per
    passage of ``page_passage_spans``, when given; keep ``size`` as it is then). Each
    page's best passage is taken first while these floors use at most ``floor_share`` of
    the budget; the rest goes to the best passages overall; within a page, passages keep
    document order, with ``…`` lines for what was left out. Unmatched passages fill
    leftover room from the head of the best-ranked pages. Pages that all fit come whole."""
    if sum(len(t) for t in texts) <= budget:
        return [PageChoice(t, len(passage_spans(t, size)), len(t)) for t in texts]
    if budget <= 0:
        return [PageChoice("", 0, 0) for _ in texts]
    spans = [passage_spans(text, size) for text in texts]
    scores = _combined(passage_bm25(query, texts, spans), similarity)
    selections = [_Selection(t, s) for t, s in zip(texts, spans, strict=True)]
    used = 0

    def take(page: int, index: int) -> bool:
        nonlocal used
        cost = selections[page].cost(index)
        if used + cost > budget:
            return False
        selections[page].keep(index, cost)
        used += cost
        return True

    floor_room = int(budget * floor_share)
    for page, page_scores in enumerate(scores):
        if not page_scores or max(page_scores) <= 0:
            continue
        best = _ranked(page_scores)[0]
        if used + selections[page].cost(best) <= floor_room:
            take(page, best)
    order = sorted(
        ((p, i) for p, page in enumerate(scores) for i in range(len(page))),
        key=lambda pi: (-scores[pi[0]][pi[1]], pi[0], pi[1]),
    )
    for page, index in order:
        if index in selections[page].kept:
            continue
        if not take(page, index) and scores[page][index] == 0:
            break  # the unmatched rest is page heads: keep each contiguous
    matched = any(scores[p][i] > 0 for p, sel in enumerate(selections) for i in sel.kept)
    if not used or (not matched and order and scores[order[0][0]][order[0][1]] > 0):
        # The best passage alone is too long: cut it, rather than show only the scraps
        # (a heading, a short line) that fitted beside it.
        page, index = order[0] if order else (0, 0)
        if not spans or not spans[page]:
            return [PageChoice("", 0, 0) for _ in texts]
        lead = _LEAD if index else ""
        s, e = spans[page][index]
        cut = _cut(texts[page][s:e], budget - len(lead)) if budget > len(lead) + 1 else ""
        choices = [PageChoice("", 0, 0) for _ in texts]
        if cut:
            choices[page] = PageChoice(lead + cut, 1, len(cut))
        return choices
    return [
        PageChoice(
            sel.assemble(),
            len(sel.kept),
            sum(sel.spans[i][1] - sel.spans[i][0] for i in sel.kept),
        )
        for sel in selections
    ]


def top_chunks_across(
    query: str, texts: Sequence[str], n: int, max_chars: int = DEFAULT_MAX_CHARS
) -> list[list[str]]:
    """``chunks_per_source`` over several pages ranked together: the ``n`` × pages best
    passages overall (BM25 with statistics over all pages), at most ``n`` per page, and
    each page with text at least its own best (its head when nothing matches). Each
    page's chunks come best first; "" pages get none."""
    if n <= 0:
        return [[] for _ in texts]
    spans = [passage_spans(text, max_chars) for text in texts]
    scores = passage_bm25(query, texts, spans)
    slots = n * sum(1 for page in spans if page)
    order = sorted(
        ((p, i) for p, page in enumerate(scores) for i in range(len(page)) if page[i] > 0),
        key=lambda pi: (-scores[pi[0]][pi[1]], pi[0], pi[1]),
    )
    picked: list[list[int]] = [[] for _ in texts]
    for page, index in order[:slots]:
        if len(picked[page]) < n:
            picked[page].append(index)
    for page, page_scores in enumerate(scores):
        if not picked[page] and page_scores:
            picked[page].append(_ranked(page_scores)[0])
    return [
        [text[page_spans[i][0] : page_spans[i][1]] for i in chosen]
        for text, page_spans, chosen in zip(texts, spans, picked, strict=True)
    ]
