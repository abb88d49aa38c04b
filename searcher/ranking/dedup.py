"""Near-duplicate removal: one page syndicated, mirrored or reprinted under several URLs
shows up once, at the best rank any copy had.

Fusion has already merged spellings of one URL; this step compares what the results
say (title + snippet) by embedding cosine, and merges only at or above the threshold,
and only texts that state the same numbers and share most of their words (a reprint does;
another page on the same subject does not).
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from searcher.embedding.embedders import Embedder, normalise_rows
from searcher.ranking.fusion import FusedHit, Source, representative
from searcher.ranking.tokens import RequestTexts
from searcher.text import document_text, words

_NUMBER = re.compile(r"\d+(?:[.,]\d+)*")
# A reprint repeats the words of what it copies: at least this share of the shorter text's
# distinct words (a site's name in the title or a snippet cut shorter barely move it).
# Distinct pages on one subject come as close in a static embedding and share far fewer:
# two reports under one title, a paper and its follow-up (bench/ranking_searxng.py: on
# Cranfield nearly every query merged such a pair at cosine 0.88-0.90, words shared 0.3-0.6).
MIN_SHARED_WORDS = 0.7


def _numbers(text: str) -> frozenset[str]:
    return frozenset(_NUMBER.findall(text))


def _may_be_one_page(texts: Sequence[str], request: RequestTexts) -> Callable[[int, int], bool]:
    """Whether two close texts (by index) may be one page: the same numbers, and most of
    the shorter one's words. Each text is read only once it is in a close pair (and then
    once per request: ``request``)."""
    numbers = functools.cache(lambda i: _numbers(texts[i]))
    bit_of: dict[str, int] = {}

    @functools.cache
    def words(i: int) -> int:
        # A text's distinct words as the bits of one int: a pair is then compared by one
        # AND, where sets cost a lookup a word (a page of 500 results all close to each
        # other is 125,000 pairs).
        found = {bit_of.setdefault(w, len(bit_of)) for w in request.read(texts[i]).distinct_words()}
        return sum(1 << bit for bit in found)

    def one_page(i: int, j: int) -> bool:
        if numbers(i) != numbers(j):
            return False
        a, b = words(i), words(j)
        return (a & b).bit_count() >= MIN_SHARED_WORDS * min(a.bit_count(), b.bit_count())

    return one_page


async def drop_near_duplicates(
    fused: Sequence[FusedHit],
    embedder: Embedder | None,
    threshold: float,
    time_left_s: float | None = None,
    request: RequestTexts | None = None,
) -> tuple[list[FusedHit], list[str]]:
    """Merge each hit whose title + snippet has cosine >= ``threshold`` with a better-ranked
    kept hit (earlier in ``fused``) into the first such one: sources merged, engines
    unioned, the richer title and snippet kept, the keeper's URL, key and score kept.
    Greedy in rank order; a hit is compared with kept hits only, so merges never chain.

    Returns ``(kept, notes)``; notes say in words why near-duplicate removal did not run
    (no embedder, or it failed), in which case ``fused`` comes back unchanged. The embedder
    gets at most ``time_left_s`` (what the request's deadline leaves); ``request`` keeps
    the texts as they are read, for the stages after this one."""
    kept = list(fused)
    if embedder is None:
        return kept, ["near-duplicate removal off: no embedder (URL dedup only)"]
    if len(kept) < 2:
        return kept, []
    # What is compared is the text the hybrid stage embeds too: one vector serves both.
    texts = [document_text(f.hit.title, f.hit.snippet) for f in kept]
    try:
        async with asyncio.timeout(time_left_s):
            vectors = await embedder.embed(texts)
    except TimeoutError:
        return kept, [f"near-duplicate removal skipped: the request deadline came first "
                      f"({embedder.name})"]  # fmt: skip
    except Exception as exc:  # optional step: any failure degrades to URL dedup, said so
        return kept, [f"near-duplicate removal skipped, embedder {embedder.name} failed: {exc}"]
    vectors = np.asarray(vectors)
    if vectors.ndim != 2 or vectors.shape[0] != len(kept):
        return kept, [
            f"near-duplicate removal skipped, embedder {embedder.name} gave shape "
            f"{vectors.shape} for {len(kept)} texts"
        ]
    vectors = normalise_rows(vectors)  # cheap, and cosines stay cosines whatever the embedder
    keeper = _keeper_of(
        vectors @ vectors.T, threshold, _may_be_one_page(texts, request or RequestTexts(""))
    )
    return _merge_groups(kept, keeper), []


def _keeper_of(
    similarity: np.ndarray, threshold: float, one_page: Callable[[int, int], bool]
) -> list[int]:
    """For each hit, the index of the hit it merges into (itself when kept): the first
    kept hit at ``threshold`` or closer that ``one_page`` allows. Embeddings alone are not
    enough: static ones barely see digits ("iPhone 14 review" and "iPhone 15 review"), and
    put pages on one subject as close as copies of one page."""
    close_pairs = similarity >= threshold
    # A hit is only ever compared with earlier ones, so the diagonal is never read; without
    # it, "nothing is close to anything else" (the usual page) is one array test.
    np.fill_diagonal(close_pairs, False)
    if not close_pairs.any():
        return list(range(len(close_pairs)))
    close = close_pairs.tolist()  # plain lists: fast to index in the loop
    keeper: list[int] = []
    kept: list[int] = []
    for j in range(len(close)):
        target = next((i for i in kept if close[i][j] and one_page(i, j)), j)
        if target == j:
            kept.append(j)
        keeper.append(target)
    return keeper


def _merge_groups(fused: list[FusedHit], keeper: list[int]) -> list[FusedHit]:
    if keeper == list(range(len(fused))):  # every hit kept as it is: nothing to merge
        return fused
    groups: dict[int, list[FusedHit]] = {}
    for index, target in enumerate(keeper):
        groups.setdefault(target, []).append(fused[index])
    return [_merged(group) for _, group in sorted(groups.items())]


def _merged(group: list[FusedHit]) -> FusedHit:
    """The first (best-ranked) hit, absorbing the rest."""
    first = group[0]
    if len(group) == 1:
        return first
    hit = representative([f.hit for f in group])  # the first's URL, the richest text
    sources = sorted({s for f in group for s in f.sources}, key=Source.sort_key)
    return dataclasses.replace(first, hit=hit, sources=tuple(sources))


@dataclass(frozen=True)
class TextSignature:
    """What near-duplicate removal compares of a whole text (a crawled page's): the
    numbers it states and its distinct words."""

    numbers: frozenset[str]
    words: frozenset[str]


def text_signature(text: str) -> TextSignature:
    """``text``'s signature (``TextSignature``)."""
    return TextSignature(_numbers(text), frozenset(words(text.lower())))


def same_text(a: TextSignature, b: TextSignature) -> bool:
    """Whether two texts are one page as ``drop_near_duplicates`` judges a close pair: the
    same numbers and at least ``MIN_SHARED_WORDS`` of the shorter one's words. Pages
    compared whole have no embedder's word first: their sizes must also be within a
    factor of two (a short page whose words a long one repeats is not its copy)."""
    if a.numbers != b.numbers or not a.words or not b.words:
        return a.words == b.words and a.numbers == b.numbers
    small, large = sorted((len(a.words), len(b.words)))
    if large > 2 * small:
        return False
    return len(a.words & b.words) >= MIN_SHARED_WORDS * small
