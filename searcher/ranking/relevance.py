"""Heuristic relevance: cheap, deterministic, every component visible.

After fusion each result gets (all weights from ``ScoringSettings``)::

    fusion          its fused score scaled into [0, 0.9] against the best one
  + premium_domain  or trusted_domain: the site is on a curated list
  + category        the site's category is the query's route group (e.g. "academic")
  + multi_engine    a bonus per engine beyond the first that returned it

and ``relevance = min(1, sum)``. ``keyword_overlap`` (the share of the query's keywords the
result's title, snippet and URL contain) is not added: it is a filter. A result below
``min_keyword_overlap`` is marked ``kept=False``; ``apply_filter`` drops those unless that
would drop everything. No LLM, no I/O per call: domain lists are loaded once.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from types import MappingProxyType
from urllib.parse import unquote

from searcher.backends.base import Hit
from searcher.config import ScoringSettings
from searcher.errors import ConfigError
from searcher.fetch.urls import host_of
from searcher.ranking.tokens import KeywordSet, RequestTexts, keyword_set
from searcher.text import document_text, stem, words, words_stemming_to

# The seed's "base 0.0-0.9": the best fused result gets 0.9, leaving room for the boosts.
BASE_CEILING = 0.9

# --- domain lists -----------------------------------------------------------------------

Tier = tuple[str | None, str | None]


# Hosts whose tier a ``DomainLists`` remembers: results come from a few thousand sites at
# most in a while, and one look-up beats walking a host's suffixes (~1 us) per result.
_TIER_CACHE_SIZE = 4096


@dataclass(frozen=True)
class DomainLists:
    """Curated sites. ``trusted`` maps every listed domain to its category — premium
    domains too (premium is the stronger tier of the same list)."""

    premium: frozenset[str]
    trusted: Mapping[str, str]
    _tiers: dict[str, Tier] = field(default_factory=dict, init=False, repr=False, compare=False)

    def tier(self, host: str) -> Tier:
        """``("premium"|"trusted"|None, category|None)`` for a host.

        A host matches a listed domain and its subdomains (as ``urls.domain_matches``);
        the most specific listed domain decides, so ``health.harvard.edu`` can be
        "health" while ``harvard.edu`` is "academic". Remembered per host (the lists do
        not change)."""
        found = self._tiers.get(host)
        if found is None:
            found = self._walk(host)
            if len(self._tiers) >= _TIER_CACHE_SIZE:
                self._tiers.clear()  # rare, and cheaper than tracking recency
            self._tiers[host] = found
        return found

    def _walk(self, host: str) -> Tier:
        # Walking the host's suffixes is a few dict look-ups, not a scan of the lists.
        suffix = host.lower().rstrip(".")
        while True:
            if suffix in self.premium:
                return "premium", self.trusted.get(suffix)
            category = self.trusted.get(suffix)
            if category is not None:
                return "trusted", category
            dot = suffix.find(".")
            if dot < 0:
                return None, None
            suffix = suffix[dot + 1 :]  # the host less its first label


_DATA_DIR = ("data", "domains")
# A domain entry is a bare host name: a URL or "host:port" here is a mistake to report.
_BAD_DOMAIN = re.compile(r"[\s/:@?#]")


def normalise_domain(domain: str, where: str) -> str:
    """Lower-case, no leading dot or ``www.``; ``ConfigError`` if it is not a host name."""
    cleaned = domain.strip().lower().lstrip(".").rstrip(".")
    if cleaned.startswith("www."):
        cleaned = cleaned[4:]
    if not cleaned or _BAD_DOMAIN.search(cleaned):
        raise ConfigError(f"{where}: {domain!r} is not a domain name (e.g. 'example.org')")
    return cleaned


def parse_domain_file(text: str, where: str) -> list[tuple[str, str]]:
    """``domain category`` lines; ``#`` starts a comment; blank lines are skipped."""
    entries: list[tuple[str, str]] = []
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        fields = line.split()
        if len(fields) != 2:
            raise ConfigError(f"{where}:{number}: expected 'domain category', got {raw!r}")
        domain, category = fields
        entries.append((normalise_domain(domain, f"{where}:{number}"), category.lower()))
    return entries


@functools.cache
def _shipped(name: str) -> tuple[tuple[str, str], ...]:
    # Read and parsed once per process: scoring must never touch the disk per request.
    text = resources.files("searcher").joinpath(*_DATA_DIR, name).read_text(encoding="utf-8")
    return tuple(parse_domain_file(text, f"searcher/{'/'.join(_DATA_DIR)}/{name}"))


def load_domain_lists(settings: ScoringSettings) -> DomainLists:
    """The shipped lists (``searcher/data/domains/``) extended by the configuration.

    Configured trusted domains override a shipped category; a configured premium domain
    takes its category from the trusted entries (shipped or configured), if any."""
    premium_entries = _shipped("premium.txt")
    categories: dict[str, str] = dict(_shipped("trusted.txt"))
    categories.update(premium_entries)  # premium's own category beats a trusted one
    for category, domains in settings.trusted_domains.items():
        for index, domain in enumerate(domains):
            where = f"scoring.trusted_domains.{category}[{index}]"
            categories[normalise_domain(domain, where)] = category.lower()
    premium = {domain for domain, _ in premium_entries}
    premium.update(
        normalise_domain(domain, f"scoring.premium_domains[{index}]")
        for index, domain in enumerate(settings.premium_domains)
    )
    return DomainLists(frozenset(premium), MappingProxyType(categories))


# --- keywords ---------------------------------------------------------------------------


# What a result's keyword overlap reads of its URL (and of its title and snippet each, for
# compounds): results carry a few hundred characters; words are read from title + snippet
# as the hybrid stage and a reranker read them (``document_text``, 2,000 together). A
# backend sending megabytes made this the slowest step of a search (a 4 MB snippet full of
# words starting like a query word: 0.4 s).
MAX_RESULT_FIELD_CHARS = 2000


def _overlap(keywords: KeywordSet, title: str, snippet: str, url: str) -> float:
    if not keywords.total:
        return 1.0  # nothing to check against (a query of stop words): no evidence either way
    text = f"{title} {snippet} {unquote(url)}".lower()
    found = 0
    if keywords.stems:
        stems = set(map(stem, words_stemming_to(keywords.stems, text)))
        found += sum(1 for k in keywords.stems if k in stems)
    return (found + _phrases_found(keywords, text)) / keywords.total


def _phrases_found(keywords: KeywordSet, lowered: str) -> int:
    """How many of the compound and unspaced keywords lower-case ``lowered`` holds."""
    if not keywords.phrases and not keywords.substrings:
        return 0
    padded = f" {' '.join(words(lowered))} "
    return sum(1 for k in keywords.phrases if k in padded) + sum(
        1 for k in keywords.substrings if k in padded
    )


def _result_overlap(texts: RequestTexts, hit: Hit) -> float:
    """``keyword_overlap`` of a search result for ``texts``' query, its title and snippet
    read as the hybrid stage and near-duplicate removal read them (``document_text``,
    tokenised once per request), its URL apart."""
    keywords = texts.keywords
    if not keywords.total:
        return 1.0
    cap = MAX_RESULT_FIELD_CHARS
    url = unquote(hit.url[:cap]).lower()
    found = 0
    if keywords.stems:
        counts = texts.counts(document_text(hit.title, hit.snippet))
        in_url: set[str] = set()
        if any(k not in counts for k in keywords.stems):
            in_url = set(map(stem, words_stemming_to(keywords.stems, url)))
        found += sum(1 for k in keywords.stems if k in counts or k in in_url)
    if keywords.phrases or keywords.substrings:
        found += _phrases_found(keywords, f"{hit.title[:cap]} {hit.snippet[:cap]} {url}".lower())
    return found / keywords.total


def keyword_overlap(keywords: Sequence[str], title: str, snippet: str, url: str) -> float:
    """Share of ``keywords`` (from ``query_keywords``) found in title + snippet + URL.

    Words compare by stem; compounds as phrases. 1.0 when there are no keywords."""
    return _overlap(keyword_set(tuple(keywords)), title, snippet, url)


# --- scoring ----------------------------------------------------------------------------

COMPONENTS = (
    "fusion",
    "premium_domain",
    "trusted_domain",
    "category",
    "multi_engine",
    "keyword",
    "keyword_overlap",
)


@dataclass(frozen=True)
class Scored:
    """One result's relevance and how it was made.

    ``components`` always holds every key of ``COMPONENTS``; all but ``keyword_overlap``
    add up to the relevance before it is capped at 1."""

    index: int  # position in the input
    relevance: float  # in [0, 1]
    components: dict[str, float]
    kept: bool  # False when keyword_overlap is below min_keyword_overlap


def _finite_positive(value: float) -> float:
    return value if math.isfinite(value) and value > 0 else 0.0


def _host(url: str) -> str:
    try:
        return host_of(url)
    except ValueError:  # e.g. a broken IPv6 literal: no host, no domain boost
        return ""


def _score_one(
    index: int,
    item: tuple[Hit, float, int],
    best: float,
    texts: RequestTexts,
    route_group: str,
    lists: DomainLists,
    settings: ScoringSettings,
) -> tuple[float, Scored]:
    hit, base, engine_count = item
    tier, category = lists.tier(_host(hit.url))
    overlap = _result_overlap(texts, hit)
    fusion = BASE_CEILING * _finite_positive(base) / best if best > 0 else 0.0
    premium = settings.premium_boost if tier == "premium" else 0.0
    trusted = settings.trusted_boost if tier == "trusted" else 0.0
    category_boost = settings.category_boost if category == route_group.lower() else 0.0
    multi_engine = settings.multi_engine_bonus * max(0, engine_count - 1)
    keyword = settings.keyword_weight * overlap
    components = {
        "fusion": fusion,
        "premium_domain": premium,
        "trusted_domain": trusted,
        "category": category_boost,
        "multi_engine": multi_engine,
        "keyword": keyword,
        "keyword_overlap": overlap,
    }
    # Summed in the order of COMPONENTS, as the relevance always was.
    total = fusion + premium + trusted + category_boost + multi_engine + keyword
    relevance = min(1.0, max(0.0, total))
    kept = overlap >= settings.min_keyword_overlap
    return total, Scored(index, relevance, components, kept)


def score_results(
    items: Sequence[tuple[Hit, float, int]],
    query: str,
    route_group: str,
    lists: DomainLists,
    settings: ScoringSettings,
    texts: RequestTexts | None = None,
) -> list[Scored]:
    """Score fused results; best first.

    ``items`` are ``(hit, fused score, number of distinct engines that returned it)``.
    Sorted by the uncapped total, then input position: the order never contradicts
    ``relevance``, and results that all reach the cap of 1 keep the stronger evidence
    first instead of tying. ``texts`` (for ``query``) holds the results' texts as this
    request has read them, for the stages after this one too."""
    best = max((_finite_positive(base) for _, base, _ in items), default=0.0)
    if texts is None or texts.query != query:
        texts = RequestTexts(query)
    scored = [
        _score_one(i, item, best, texts, route_group, lists, settings)
        for i, item in enumerate(items)
    ]
    scored.sort(key=lambda pair: (-pair[0], pair[1].index))
    return [s for _, s in scored]


def apply_filter(scored: Iterable[Scored]) -> list[Scored]:
    """The kept results, in order — or all of them if none is kept.

    The keyword filter catches obvious mismatches; it is not a veto. When every result
    misses the query's words (another language, another spelling, a code written
    differently), dropping them all would answer nothing, so they all stay. A caller can
    tell that happened: no result in the output has ``kept``."""
    results = list(scored)
    kept = [s for s in results if s.kept]
    return kept if kept else results
