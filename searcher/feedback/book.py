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
            await self._forget(evicted)
        # A request id used again names the new search: the outcomes given for the one it
        # named before are not this one's (they stay counted in the route's figures).
        await self._forget(entry)
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

    async def _forget(self, entry: str) -> None:
        """Drop the record kept at ``entry`` and every outcome given for it."""
        # Most searches get no feedback: their items' keys are not there to delete (once
        # the ring is full, each new search evicts one).
        if await self.store.get(f"{PREFIX}fed:{entry}") is not None:
            data = await get_json(self.store, f"{PREFIX}search:{entry}")
            items = data.get("items") if isinstance(data, dict) else None
            for item_id in items if isinstance(items, dict) else {}:
                await self.store.delete(_given_key(entry, item_id))
        for what in ("search", "given", "fed", "given_n", "used_n"):
            await self.store.delete(f"{PREFIX}{what}:{entry}")

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
        entry = _entry(request_id, key)
        for item_id, outcome in outcomes.items():
            # Each item's outcome is swapped in atomically: reports on one search arriving
            # at once (other workers, or this one's awaits) each see the outcome they
            # replace, so none is lost and every count moves once. (Read, merged and
            # written back as one value, 8 reports at once against Redis kept 4.)
            held = await self.store.swap(
                _given_key(entry, item_id), outcome.value.encode(), self.settings.ttl_s
            )
            await self._count_change(record, entry, _outcome(held), outcome)
        return await self._given(entry, record)

    async def _given(self, entry: str, record: SearchRecord) -> dict[str, Outcome]:
        """Every outcome given so far for the search kept at ``entry``."""
        # Outcomes a version before per-item keys kept, as one value, until they expire.
        legacy = await get_json(self.store, f"{PREFIX}given:{entry}")
        given = {
            i: o for i, raw in (legacy if isinstance(legacy, dict) else {}).items()
            if isinstance(raw, str) and (o := _outcome(raw.encode())) is not None
        }  # fmt: skip
        for item_id in record.items:
            outcome = _outcome(await self.store.get(_given_key(entry, item_id)))
            if outcome is not None:
                given[item_id] = outcome
        return given

    async def _count_change(
        self, record: SearchRecord, entry: str, before: Outcome | None, after: Outcome
    ) -> None:
        """Route counters follow one item's outcome (a changed outcome moves its count); a
        search counts once with feedback, and as used while any of its items is."""
        if before == after:
            return
        ttl = self.settings.ttl_s
        if before is None:
            if await self.store.incr(f"{PREFIX}given_n:{entry}", 1, ttl) == 1:
                await self.store.set(f"{PREFIX}fed:{entry}", b"1", ttl)
                await self._count(record, "with_feedback")
        else:
            await self._count(record, before.value, -1)
        await self._count(record, after.value)
        moved = _is_use(after) - _is_use(before)
        if moved:  # a search's last use taken back counts too
            users = await self.store.incr(f"{PREFIX}used_n:{entry}", moved, ttl)
            if users == (1 if moved > 0 else 0):
                await self._count(record, "used_searches", moved)

    async def _count(self, record: SearchRecord, what: str, amount: int = 1) -> None:
        await self.store.incr(_stat_key(record.key, record.route, record.preset, what), amount)

    async def records(self) -> list[tuple[SearchRecord, dict[str, Outcome]]]:
        """Every kept search that has feedback, with its outcomes (oldest slot first)."""
        out = []
        for rid in await self._ring().ids():
            fed = await self.store.get(f"{PREFIX}fed:{rid}")
            if fed is None and await self.store.get(f"{PREFIX}given:{rid}") is None:
                continue  # no feedback: its items are not read one by one
            data = await get_json(self.store, f"{PREFIX}search:{rid}")
            if isinstance(data, dict):
                record = SearchRecord.from_json(data)
                given = await self._given(rid, record)
                if given:
                    out.append((record, given))
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


def _given_key(entry: str, item_id: str) -> str:
    return f"{PREFIX}given:{entry}\x1f{item_id}"


def _outcome(raw: bytes | None) -> Outcome | None:
    """The outcome ``raw`` names; None for none (or a value no outcome has)."""
    try:
        return Outcome(raw.decode()) if raw is not None else None
    except (UnicodeDecodeError, ValueError):
        return None


def _is_use(outcome: Outcome | None) -> int:
    return 1 if outcome in (Outcome.used, Outcome.cited) else 0


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
