"""The evidence of a research job: every passage it has seen (page passages and result
snippets), scored against each sub-question across all sources at once, the coverage of
each sub-question, and the numbers and dates that sources state differently."""

from __future__ import annotations

import re
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Literal
from urllib.parse import urlsplit

from searcher.pack.passages import passage_bm25, passage_spans
from searcher.ranking.relevance import keyword_overlap
from searcher.research.links import linked, names, page_subject, sentences
from searcher.text import query_keywords, query_terms

PASSAGE_CHARS = 600
# A sub-question counts as covered when one passage holds this share of its keywords:
# all of them. Chosen on the first half of HotpotQA dev (bench/research_recall.py, the
# balanced preset; both supporting pages and the answer in the evidence): 0.6 -> 0.711,
# 0.8 -> 0.822, 0.9 -> 0.867, 1.0 -> 0.867, never covered -> 0.889. Lower values stop a
# multi-hop question after its first hop, whose page holds most of the question's words.
COVERED_AT = 1.0
_YEAR = re.compile(r"\b(1[5-9]\d\d|20\d\d)\b")
_NUMBER = re.compile(r"\b\d[\d,]*(?:\.\d+)?\s?(?:%|percent|million|billion|km|kg|m)?\b")

PassageKind = Literal["page", "snippet"]


@dataclass(frozen=True)
class Passage:
    url: str
    title: str
    text: str
    kind: PassageKind

    def scored_text(self) -> str:
        # The title names what the passage is about ("Arthur's Magazine"), often the very
        # entity a sub-question asks for.
        return f"{self.title}\n{self.text}"


@dataclass(frozen=True)
class ScoredPassage:
    """A passage of the pool (by index), its BM25 score for a question, and the share of
    the question's keywords it holds."""

    index: int  # into EvidencePool.passages
    score: float
    coverage: float


class EvidencePool:
    """Every passage a job has seen, each text once, in the order seen."""

    def __init__(self) -> None:
        self.passages: list[Passage] = []
        self._texts: set[str] = set()

    def add(self, passage: Passage) -> bool:
        """Keep ``passage`` unless its text is already here; True if it is new."""
        key = " ".join(passage.text.split()).lower()
        if not key or key in self._texts:
            return False
        self._texts.add(key)
        self.passages.append(passage)
        return True

    def add_page(self, url: str, title: str, content: str) -> int:
        """Add a page's passages; returns how many were new."""
        spans = passage_spans(content, PASSAGE_CHARS)
        return sum(self.add(Passage(url, title, content[s:e], "page")) for s, e in spans)

    def best(self, question: str, k: int) -> list[ScoredPassage]:
        """The ``k`` passages that answer ``question`` best (BM25 over every passage seen,
        so document frequencies come from all sources), best first; passages that match
        no term are left out."""
        if not self.passages or k <= 0:
            return []
        texts = [p.scored_text() for p in self.passages]
        # Each passage a page of one passage: statistics over all of them together.
        by_page = passage_bm25(question, texts, [[(0, len(text))] for text in texts])
        scores = [score for (score,) in by_page]
        order = sorted(range(len(scores)), key=lambda i: (-scores[i], i))
        keywords = query_keywords(question)
        found = []
        for i in order[:k]:
            if scores[i] <= 0:
                break
            p = self.passages[i]
            found.append(
                ScoredPassage(i, scores[i], keyword_overlap(keywords, p.title, p.text, ""))
            )
        return found


# How deep each question's ranking is looked at when the evidence is filled up.
FILL_DEPTH = 40
# Pages the question's best passage leads to (it names them, or they name it) whose
# passages come right after it: the second hop of a two-hop question.
LINKED_PAGES = 2


class _Filling:
    """The evidence as it is filled: chosen passages and the characters they use."""

    def __init__(self, pool: EvidencePool, max_chars: int) -> None:
        self.pool = pool
        self.max_chars = max_chars
        self.chosen: list[int] = []
        self.used = 0

    def take(self, index: int) -> None:
        """Add the passage unless it is in already or does not fit."""
        passage = self.pool.passages[index]
        cost = len(passage.title) + len(passage.url) + len(passage.text) + 8
        if index in self.chosen or self.used + cost > self.max_chars:
            return
        self.chosen.append(index)
        self.used += cost


def _superseded(pool: EvidencePool) -> set[int]:
    """The snippets of pages that were read: the page says what its snippet says, and more."""
    read = {p.url for p in pool.passages if p.kind == "page"}
    return {i for i, p in enumerate(pool.passages) if p.kind == "snippet" and p.url in read}


def _words_lacking(question: str, text: str) -> str:
    """The question's words whose terms ``text`` does not hold: what is left to find."""
    have = set(query_terms(text))
    return " ".join(w for w in question.split() if set(query_terms(w)) - have)


def bridge_terms(asked: set[str], said: Sequence[str], title: str) -> int:
    """How many of the question's terms (``asked``) the sentence of the best passage
    (``said``: its sentences) that names the page titled ``title`` holds (the best such
    sentence; the page's own name not counted); 0 when none names it. The entity a
    two-hop question asks through is named where the first page says what the question
    says ("designed to interact with the Front Row media program"), not in passing."""
    wanted = asked - set(query_terms(page_subject(title)))
    held = [len(wanted & set(query_terms(s))) for s in said if names(s, title)]
    return max(held, default=0)


def linked_passages(
    pool: EvidencePool, first: int, question: str, n: int, left_out: Collection[int] = ()
) -> list[int]:
    """The passages of (at most ``n``) other pages linked to passage ``first`` (one names
    the other's subject), one per page: the one holding most of what ``question`` asks
    that ``first`` lacks (BM25), else the page's first. Pages named where ``first`` says
    most of what the question says come first (``bridge_terms``), then those best for
    what it lacks, then in the order seen (the earlier a bridge's search, the better it
    ranked). ``left_out``: passages not to choose."""
    head = pool.passages[first]
    rest = _words_lacking(question, head.scored_text())
    score = {s.index: s.score for s in pool.best(rest, len(pool.passages))} if rest else {}
    best: dict[str, int] = {}
    for index, p in enumerate(pool.passages):
        if index in left_out or p.url == head.url:
            continue
        if not linked(head.title, head.text, p.title, p.text):
            continue
        known = best.get(p.url)
        if known is None or score.get(index, 0.0) > score.get(known, 0.0):
            best[p.url] = index
    asked, said = set(query_terms(question)), sentences(head.text)
    bridge = {i: bridge_terms(asked, said, pool.passages[i].title) for i in best.values()}
    ranked = sorted(best.values(), key=lambda i: (-bridge[i], -score.get(i, 0.0), i))
    return ranked[:n]


def choose_evidence(pool: EvidencePool, questions: Sequence[str], max_chars: int) -> list[int]:
    """The passages (indices into ``pool``) that make the evidence, in the order they are
    numbered, until ``max_chars``: the best passage for the question (``questions[0]``)
    and the passages of the pages it links to (the next hop), then every question's best
    passage, every question's second best, and so on. A result snippet is left out when
    its page was read (the page says it better); a passage that does not fit is passed
    over."""
    left_out = _superseded(pool)
    rankings = [
        [s.index for s in pool.best(q, FILL_DEPTH + len(left_out)) if s.index not in left_out]
        for q in questions
    ]
    filling = _Filling(pool, max_chars)
    if rankings and rankings[0]:
        first = rankings[0][0]
        filling.take(first)
        for index in linked_passages(pool, first, questions[0], LINKED_PAGES, left_out):
            filling.take(index)
    for depth in range(FILL_DEPTH):
        for ranking in rankings:
            if depth < len(ranking):
                filling.take(ranking[depth])
    return filling.chosen


def best_in_evidence(
    pool: EvidencePool,
    question: str,
    best: Sequence[ScoredPassage],
    numbers: dict[int, int],
    k: int,
) -> list[int]:
    """The numbers (``numbers``: pool index -> evidence number) of the ``k`` passages
    best for ``question`` among those in the evidence, ``best`` being its ``k`` best of
    the pool: one left out (a snippet whose page was read, a passage past the budget)
    gives its place to the next best, so a section still cites ``k`` sources when there
    are. The pool is ranked again only then."""
    if any(s.index not in numbers for s in best):
        best = pool.best(question, k + len(pool.passages) - len(numbers))  # k-th kept: no deeper
    return [numbers[s.index] for s in best if s.index in numbers][:k]


def covered(best: Sequence[ScoredPassage]) -> bool:
    """Whether a sub-question is answered: one of its passages holds most of its terms."""
    return any(s.coverage >= COVERED_AT for s in best)


def _host(url: str) -> str:
    return (urlsplit(url).hostname or url).removeprefix("www.")


@dataclass(frozen=True)
class Disagreement:
    what: Literal["numbers", "dates"]
    values: dict[str, list[str]]  # url -> values


_SENTENCE = re.compile(r"[^.!?\n]+[.!?]?")
_CHECKS: tuple[tuple[Literal["dates", "numbers"], re.Pattern[str]], ...] = (
    ("dates", _YEAR),
    ("numbers", _NUMBER),
)


def _stated(question: str, passage: Passage, pattern: re.Pattern[str]) -> set[str]:
    """The values a passage states in its sentences about the question (those holding at
    least half of its keywords)."""
    keywords = query_keywords(question)
    values: set[str] = set()
    for sentence in _SENTENCE.findall(passage.text):
        if keyword_overlap(keywords, "", sentence, "") >= 0.5:
            values |= {" ".join(v.split()) for v in pattern.findall(sentence)}
            if pattern is _NUMBER:
                values -= set(_YEAR.findall(sentence))  # years are dates, not amounts
    return values


def disagreements(question: str, passages: Sequence[Passage]) -> list[Disagreement]:
    """Dates, else numbers, that the best passages of different sites state about the
    question with no value in common — a sign that sources disagree (or speak of different
    things: shown, not judged). Passages of one site never disagree with each other."""
    for what, pattern in _CHECKS:
        by_site: dict[str, tuple[str, set[str]]] = {}
        for p in passages:
            values = _stated(question, p, pattern)
            if values:
                url, seen = by_site.get(_host(p.url), (p.url, set()))
                by_site[_host(p.url)] = (url, seen | values)
        if len(by_site) >= 2 and not set.intersection(*(v for _, v in by_site.values())):
            return [Disagreement(what, {url: sorted(v) for url, v in by_site.values()})]
    return []
