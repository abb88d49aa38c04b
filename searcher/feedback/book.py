"""The feedback book: a small record of each search (query, route, preset, its results'
ids and URLs), the outcomes callers report for those results, and per route and preset
counts of how often results were used.

Bounded in age and size: every entry expires after ``feedback.ttl_s``, and the records
sit in a ring of ``feedback.max_searches`` slots — a new search takes the next slot and the
record that held it (with its feedback) goes. The ring is also how ``searcher judge
--from-feedback`` finds every record: the state store has no listing of keys.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from searcher.config import FeedbackSettings
from searcher.contract import FeedbackOutcome as Outcome
from searcher.contract import ResearchResult
from searcher.errors import InvalidRequest, UnknownRequest
from searcher.llm.answer import CITED
from searcher.pipeline.judge import fits_a_qrels_field
from searcher.state.base import StateStore, get_json, set_json
from searcher.state.ring import Ring

PREFIX = "feedback:"
MAX_QUERY_CHARS = 2_000
MAX_URL_CHARS = 2_000


# The relevance grade each outcome stands for in qrels (``searcher judge --from-feedback``).
GRADES: dict[Outcome, int] = {Outcome.cited: 2, Outcome.used: 1, Outcome.not_relevant: 0}


@dataclass(frozen=True)
class SearchRecord:
    """What feedback needs to know of one search."""

    request_id: str
    query: str
    route: str  # the engine group the search was routed to
    preset: str  # the search mode (``simple``, ``full``) or the research preset
    items: dict[str, str]  # item id -> URL
    # The id of the API key that made the search: only that key gives feedback on it and
    # counts it in its route stats. None: keys off (or MCP over stdio).
    key: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "request_id": self.request_id, "query": self.query, "route": self.route,
            "preset": self.preset, "items": self.items, "key": self.key,
        }  # fmt: skip

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> SearchRecord:
        key = data.get("key")
        return cls(
            data["request_id"], data["query"], data["route"], data["preset"], data["items"],
            key if isinstance(key, str) else None,
        )  # fmt: skip


@dataclass(frozen=True)
class RouteStats:
    """How the results of one route and preset fared."""

    route: str
    preset: str
    searches: int
    with_feedback: int  # searches some feedback was given for
    used: int  # results reported used or cited
    cited: int
    not_relevant: int
    used_searches: int  # searches given feedback that had a result used or cited

    @property
    def used_rate(self) -> float:
        """Share of the searches given feedback that had a result used or cited."""
        return self.used_searches / self.with_feedback if self.with_feedback else 0.0


class FeedbackBook:
    """Search records and feedback in the state store (see the module)."""

    def __init__(self, store: StateStore, settings: FeedbackSettings) -> None:
        self.store = store
        self.settings = settings

    async def record_search(self, record: SearchRecord) -> SearchRecord:
        """Keep ``record`` in the next slot of the ring, dropping the record it held; the
        record as kept (its first ``feedback.max_items`` items)."""
        ttl = self.settings.ttl_s
        entry = _entry(record.request_id, record.key)
        evicted = await self._ring().put(entry)
        if evicted is not None:
            await self.store.delete(f"{PREFIX}search:{evicted}")
            await self.store.delete(f"{PREFIX}given:{evicted}")
        # A request id used again names the new search: the outcomes given for the one it
        # named before are not this one's (they stay counted in the route's figures).
        await self.store.delete(f"{PREFIX}given:{entry}")
        kept = list(record.items.items())[: self.settings.max_items]
        record = SearchRecord(
            record.request_id, record.query[:MAX_QUERY_CHARS], record.route, record.preset,
            {item_id: url[:MAX_URL_CHARS] for item_id, url in kept}, record.key,
        )  # fmt: skip
        await set_json(self.store, f"{PREFIX}search:{entry}", record.to_json(), ttl)
        await self._count(record, "searches")
        return record

    def _ring(self) -> Ring:
        return Ring(self.store, PREFIX, self.settings.max_searches, self.settings.ttl_s)

    async def search(self, request_id: str, key: str | None = None) -> SearchRecord:
        """The record of a search made with ``key``; ``UnknownRequest`` when none is kept
        (to another key a search does not exist)."""
        data = await get_json(self.store, f"{PREFIX}search:{_entry(request_id, key)}")
        if not isinstance(data, dict):
            raise UnknownRequest(request_id, self.settings.ttl_s)
        record = SearchRecord.from_json(data)
        if record.key != key:
            raise UnknownRequest(request_id, self.settings.ttl_s)
        return record

    async def give(
        self, request_id: str, outcomes: Mapping[str, Outcome], key: str | None = None
    ) -> dict[str, Outcome]:
        """Record ``outcomes`` for results of a search made with ``key`` (a later outcome
        for an item replaces an earlier one); every outcome given so far. ``InvalidRequest``
        naming ``items.<id>`` for an id the search did not return."""
        record = await self.search(request_id, key)
        for item_id in outcomes:
            if item_id not in record.items:
                full = len(record.items) >= self.settings.max_items
                raise InvalidRequest(
                    f"items.{item_id}",
                    f"request {request_id!r} returned no item with this id "
                    + (f"among its first {len(record.items)}, those kept (feedback.max_items) "
                       if full else "")
                    + f"(its items: {', '.join(list(record.items)[:20])})",
                )  # fmt: skip
        where = f"{PREFIX}given:{_entry(request_id, key)}"
        before = {i: Outcome(o) for i, o in (await get_json(self.store, where) or {}).items()}
        given = {**before, **outcomes}
        kept = {i: o.value for i, o in given.items()}
        await set_json(self.store, where, kept, self.settings.ttl_s)
        await self._count_changes(record, before, given)
        return given

    async def _count_changes(
        self, record: SearchRecord, before: Mapping[str, Outcome], after: Mapping[str, Outcome]
    ) -> None:
        """Route counters follow the outcomes now held (a changed outcome moves its count)."""
        if not before:
            await self._count(record, "with_feedback")
        if _used(after) != _used(before):  # a search's last use taken back counts too
            await self._count(record, "used_searches", 1 if _used(after) else -1)
        for item_id, outcome in after.items():
            if before.get(item_id) != outcome:
                if item_id in before:
                    await self._count(record, before[item_id].value, -1)
                await self._count(record, outcome.value)

    async def _count(self, record: SearchRecord, what: str, amount: int = 1) -> None:
        await self.store.incr(_stat_key(record.key, record.route, record.preset, what), amount)

    async def records(self) -> list[tuple[SearchRecord, dict[str, Outcome]]]:
        """Every kept search that has feedback, with its outcomes (oldest slot first)."""
        out = []
        for rid in await self._ring().ids():
            given = await get_json(self.store, f"{PREFIX}given:{rid}")
            data = await get_json(self.store, f"{PREFIX}search:{rid}")
            if isinstance(given, dict) and given and isinstance(data, dict):
                out.append(
                    (SearchRecord.from_json(data), {i: Outcome(o) for i, o in given.items()})
                )
        return out

    async def route_stats(
        self, routes: Sequence[str], presets: Sequence[str], key: str | None = None
    ) -> list[RouteStats]:
        """Counts of the searches made with ``key`` per route and preset, for the pairs
        that saw one (the counters are few, one per key, route, preset and outcome, and
        are kept)."""
        rows = []
        for route in routes:
            for preset in presets:
                if not await self.store.incr(_stat_key(key, route, preset, "searches"), 0):
                    continue
                n = {
                    what: await self.store.incr(_stat_key(key, route, preset, what), 0)
                    for what in ("searches", "with_feedback", "used_searches", *GRADE_NAMES)
                }
                rows.append(RouteStats(
                    route, preset, n["searches"], n["with_feedback"],
                    n["used"] + n["cited"], n["cited"], n["not_relevant"], n["used_searches"],
                ))  # fmt: skip
        return rows


GRADE_NAMES = tuple(o.value for o in Outcome)


def _entry(request_id: str, key: str | None) -> str:
    """Where a search's record and outcomes are kept: its request id, under its key's id
    when keys are on. A client chooses its request id (``X-Request-ID``); kept by id
    alone, another key's search with the same id replaced the record, and the first key's
    feedback on its own search was refused as unknown."""
    return request_id if key is None else f"key:{key}\x1f{request_id}"


def _stat_key(key: str | None, route: str, preset: str, what: str) -> str:
    # Keys off: the counters as they always were named.
    owner = "" if key is None else f"key:{key}\x1f"
    return f"{PREFIX}stats:{owner}{route}\x1f{preset}\x1f{what}"


def _used(outcomes: Mapping[str, Outcome]) -> bool:
    return any(o in (Outcome.used, Outcome.cited) for o in outcomes.values())


RESEARCH_ROUTE = "research"


def research_record(
    job_id: str, result: ResearchResult, key: str | None = None
) -> tuple[SearchRecord, dict[str, Outcome]] | None:
    """A finished research job as a search record (its evidence passages are its items,
    ids ``"1"``, ``"2"``... as the report cites them) and the passages its report cited;
    None when the job kept no evidence to name."""
    if not result.evidence:
        return None
    items = {str(p.n): p.url for p in result.evidence}
    cited = {
        n.strip() for m in re.finditer(CITED, result.report or "") for n in m.group(1).split(",")
    }
    record = SearchRecord(
        job_id, result.question, RESEARCH_ROUTE, f"research:{result.preset}", items, key
    )
    return record, {n: Outcome.cited for n in sorted(cited) if n in items}


def feedback_qrels(
    records: Sequence[tuple[SearchRecord, Mapping[str, Outcome]]],
) -> tuple[dict[str, str], dict[str, dict[str, int]]]:
    """Queries (qid -> text) and qrels (qid -> URL -> grade) from feedback: one query id
    per distinct query text; the same page judged twice for a query keeps the higher grade."""
    queries: dict[str, str] = {}
    qids: dict[str, str] = {}
    qrels: dict[str, dict[str, int]] = {}
    for record, outcomes in records:
        qid = qids.setdefault(record.query, f"f{len(qids) + 1}")
        queries[qid] = record.query
        judged = qrels.setdefault(qid, {})
        for item_id, outcome in outcomes.items():
            url = record.items.get(item_id)
            if url is not None and fits_a_qrels_field(url):
                judged[url] = max(GRADES[outcome], judged.get(url, 0))
    return queries, {q: d for q, d in qrels.items() if d}
