"""One request in, one UCP-1 response out.

``SearchService.search`` is the list of the pipeline's stages (``searcher/pipeline/``),
each taking and returning data; the ``RequestContext`` carries the deadline, budget,
timings, errors and the optional parts of ``meta``, and builds the response.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import replace

from searcher.auth.access import EVERY, CollectionAccess
from searcher.backends.local import collection_generations
from searcher.backends.policy import instance_collections
from searcher.cache.results import ResultCache, cache_policy, serve_cached
from searcher.config import Settings
from searcher.contract import Budget, RenderMode, SearchRequest, SearchResponse
from searcher.fetch.page_reader import PageOutcome, Progress
from searcher.pipeline.answer import answer
from searcher.pipeline.assemble import make_items, render_pack
from searcher.pipeline.budget import LimitedBudget, effective_budget, limited_budget
from searcher.pipeline.context import RequestContext
from searcher.pipeline.correct import correct
from searcher.pipeline.limits import extract_chars_within_limit, pages_within_limit
from searcher.pipeline.parts import Parts
from searcher.pipeline.plan import make_plan
from searcher.pipeline.rank import rank
from searcher.pipeline.read import read
from searcher.pipeline.resilience import Deadline
from searcher.pipeline.retrieve import retrieve
from searcher.pipeline.select import select
from searcher.recording.session_tape import record_shown, replayed_shown
from searcher.recording.tape import replaying
from searcher.state.sessions import SessionBook

BEYOND_PAGE_LIMIT = PageOutcome("skipped", "budget", "beyond limits.max_fetch_pages")


class SearchService:
    """Runs the pipeline; one instance serves every request of an app or CLI run."""

    def __init__(
        self,
        parts: Parts,
        results: ResultCache | None = None,
        sessions: SessionBook | None = None,
    ) -> None:
        self.parts = parts
        self.results = results  # the result cache (state store), None when off
        self.sessions = sessions  # what each constraints.session_id was shown

    @property
    def settings(self) -> Settings:
        return self.parts.settings

    async def search(
        self,
        request: SearchRequest,
        progress: Progress | None = None,
        client: str | None = None,
        access: CollectionAccess = EVERY,
        shown: frozenset[str] = frozenset(),
    ) -> SearchResponse:
        """Answer one search request with a UCP-1 response, from the result cache when it
        may (``meta.cache`` says so). ``shown``: page keys (``page_key``) the caller
        was shown before, demoted unless still the best (``ranking/novelty.py``); with
        ``constraints.session_id`` those of the session are added, and this answer's
        items are remembered for it. Raises ``AllBackendsFailed`` when no backend answered
        and no stale answer may stand in, ``InvalidRequest`` for a request the contract
        cannot express, ``AccessDenied`` for a ``local`` instance named whose collections
        ``access`` does not allow. ``client`` (an API key, a peer address): its share of
        the extraction workers, and whose cached answers it may be served
        (``cache.scope``)."""
        # Before the cache: a request over a ceiling is refused when limits.strict, cached
        # answer or not, and a cached answer carries this request's notes.
        limited = limited_budget(request.budget, self.settings)
        session = request.constraints.session_id
        if session is not None and self.sessions is not None:
            shown = shown | await _session_shown(self.sessions, client, session)
        response = await serve_cached(
            await self._results_for(request, shown),
            request,
            lambda waited_s: self.search_uncached(
                request, progress, client, limited.spent(waited_s), access, shown
            ),
            limited.lowered,
            limited.budget.max_total_time_ms / 1000,
            client,
            self._partition(access),
        )
        metrics, cache = self.parts.metrics, response.meta.cache
        if metrics and self.results and cache and cache_policy(request) == "use":
            metrics.cache_lookup("results", cache.kind or "exact", cache.hit)
        if session is not None and self.sessions is not None and not replaying():
            await self.sessions.add(client, session, [item.url for item in response.items or ()])
        return response

    async def _results_for(
        self, request: SearchRequest, shown: frozenset[str]
    ) -> ResultCache | None:
        """The result cache as ``request`` may use it: keyed also by the generations of
        the local collections it may search (none: the cache as it is; unknown: no
        cache) and by the pages shown before (which reorder the answer)."""
        if self.results is None:
            return None
        named = request.constraints.backend
        generations = await collection_generations(self.parts.pool.backends, named)
        if generations is None:
            return None
        results = self.results
        if generations:
            results = results.with_fingerprint(json.dumps(generations, sort_keys=True))
        if shown:
            digest = hashlib.sha256("\n".join(sorted(shown)).encode()).hexdigest()
            results = results.with_fingerprint(f"shown:{digest}")
        return results

    async def search_uncached(
        self,
        request: SearchRequest,
        progress: Progress | None = None,
        client: str | None = None,
        limited: LimitedBudget | None = None,
        access: CollectionAccess = EVERY,
        shown: frozenset[str] = frozenset(),
    ) -> SearchResponse:
        """Run the pipeline's stages for one request, calling the backends. ``client`` is
        who asks (an API key, a peer address): its share of the extraction workers;
        ``limited``: its budget, held to the server's limits already; ``access``: the
        collections of own documents it may search; ``shown``: pages to demote."""
        parts = self.parts
        ctx = RequestContext.start(request, parts, client, limited, access, shown)
        plan = await make_plan(ctx, parts)  # 1. rewrite, route, backends
        tagged = await retrieve(ctx, parts, plan)  # 2. search (perspectives at once)
        ranking = await rank(ctx, parts, plan, tagged)  # 3. fuse, dedup, score
        tagged, ranking = await correct(ctx, parts, plan, tagged, ranking)  # 4. CRAG
        chosen = await select(ctx, parts, plan, ranking.results)  # 5. filter, pick, cap
        pages = await read(ctx, parts, chosen.results, progress)  # 6. fetch and extract
        outcome = tagged.merged()
        items = make_items(ctx, plan, chosen.results, pages)  # 7. items and the pack
        pack = await render_pack(ctx, parts, plan, items, outcome.backend_used)
        written = await answer(ctx, plan.question, pack, items)  # 8. cited answer, check
        response = ctx.response(
            outcome, items, pack.text, pages, chosen.pick_ids, written.text, written.citations
        )
        if parts.metrics is not None:
            parts.metrics.observe_search(response)
        return response

    def _partition(self, access: CollectionAccess) -> str | None:
        """What keeps cached answers of callers who may see different collections apart:
        the set they may see, when a ``local`` instance is configured (an answer may hold
        its documents) and the caller does not see them all; else nothing, so that
        answers from the web alone stay shared as ``cache.scope`` says."""
        if access.allowed is None or not instance_collections(self.settings):
            return None
        return access.label()

    async def read_pages(
        self,
        urls: Sequence[str],
        max_chars: int | None = None,
        progress: Progress | None = None,
        client: str | None = None,
        render: RenderMode = "auto",
    ) -> list[PageOutcome]:
        """Read pages by URL (cache, guarded fetch, extraction) under the configured budget
        defaults: the one path for fetch_page, extract and loader endpoints. At most
        ``limits.max_fetch_pages`` are read; the rest are skipped (budget), or the call is
        refused (``InvalidRequest`` on ``urls``) when ``limits.strict``."""
        settings = self.parts.settings
        budget = effective_budget(Budget(), settings.budget)
        chars = budget.max_extract_chars_per_page if max_chars is None else max_chars
        chars = extract_chars_within_limit(chars, settings.limits)
        deadline = Deadline(budget.max_total_time_ms / 1000)
        read, beyond = pages_within_limit(urls, settings.limits)
        limits = replace(budget.fetch_limits(), render=render)
        outcomes = await self.parts.reader.read_all(read, limits, chars, deadline, progress, client)
        return outcomes + [BEYOND_PAGE_LIMIT] * len(beyond)


async def _session_shown(sessions: SessionBook, client: str | None, session: str) -> frozenset[str]:
    """The pages ``session`` was shown: from the recording when this is a replay of a
    search that read them, else from the session book (kept when recording)."""
    recorded = replayed_shown(session)
    if recorded is not None:
        return recorded
    seen = await sessions.shown(client, session)
    record_shown(session, seen)
    return seen
