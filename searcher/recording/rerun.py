"""A recorded search run again (``searcher replay``): the same request through the
pipeline of any configuration, every backend answer, page and LLM reply taken from the
recording (nothing reaches the network), and what changed against the recorded response.

The replayed response is shown without what only measures the run (``meta.timing_ms``,
LLM latencies, the request id): the same recording under the same configuration then
gives the same bytes, every time, on any machine.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from typing import Any

from searcher.contract import SearchResponse
from searcher.pipeline.parts import Parts
from searcher.recording.book import Recording, recorded_request
from searcher.recording.session_tape import replayed_shown
from searcher.recording.tape import replay_tape, taping
from searcher.service import SearchService

# Lines of the pack's diff printed at most.
MAX_DIFF_LINES = 60


async def replay(parts: Parts, recording: Recording) -> SearchResponse:
    """Run the recorded request through ``parts`` (the replay's configuration) with the
    recording's tape at the edges; the result cache is neither read nor written."""
    request = recorded_request(recording)
    recorded_at = recording.response.get("created_utc")
    clock = recorded_at if isinstance(recorded_at, str) else None
    session = request.constraints.session_id
    with taping(replay_tape(recording.exchanges, clock)):
        # What the session had been shown when it was recorded (never the live session).
        shown = (replayed_shown(session) if session else None) or frozenset()
        return await SearchService(parts).search_uncached(request, shown=shown)


def names_state_store(tree: Mapping[str, Any]) -> bool:
    """Whether a configuration tree (the ``--config`` files given to a replay, without
    the environment) names a state store itself: ``state.dir`` or ``state.redis_url``.
    One that does not is read from the store the recordings were kept in, the one of the
    configuration and environment found without ``--config`` (docs/replay.md)."""
    state = tree.get("state")
    return isinstance(state, Mapping) and any(
        state.get(key) is not None for key in ("dir", "redis_url")
    )


def stable_view(wire: Mapping[str, Any]) -> dict[str, Any]:
    """A response's wire JSON without what only measures its run (see the module)."""
    view = dict(wire)
    meta = dict(view.get("meta") or {})
    meta.pop("timing_ms", None)
    meta.pop("request_id", None)
    meta["llm"] = [{k: v for k, v in c.items() if k != "latency_ms"} for c in meta.get("llm", [])]
    view["meta"] = meta
    return view


def _urls(wire: Mapping[str, Any]) -> list[str]:
    return [str(item["url"]) for item in wire.get("items") or []]


def item_changes(before: Mapping[str, Any], after: Mapping[str, Any]) -> list[str]:
    """What changed in the items: added, removed, moved (1-based ranks)."""
    old, new = _urls(before), _urls(after)
    if old == new:
        return [f"items: the same {len(new)}, in the same order"]
    lines = [f"items: {len(old)} -> {len(new)}"]
    old_rank = {url: i for i, url in enumerate(old, 1)}
    new_rank = {url: i for i, url in enumerate(new, 1)}
    for url in new:
        if url not in old_rank:
            lines.append(f"  + {new_rank[url]}. {url}")
        elif old_rank[url] != new_rank[url]:
            lines.append(f"  ~ {old_rank[url]} -> {new_rank[url]}. {url}")
    lines += [f"  - {old_rank[url]}. {url}" for url in old if url not in new_rank]
    return lines


def pack_changes(before: Mapping[str, Any], after: Mapping[str, Any]) -> list[str]:
    """Whether the context pack changed, and how (a unified diff, cut short)."""
    old, new = str(before.get("rendered_text") or ""), str(after.get("rendered_text") or "")
    if old == new:
        return [f"pack: the same ({len(new)} characters)"]
    diff = list(
        difflib.unified_diff(
            old.splitlines(), new.splitlines(), "recorded", "replayed", n=1, lineterm=""
        )
    )
    shown = diff[:MAX_DIFF_LINES]
    more = [f"  … {len(diff) - len(shown)} more diff lines"] if len(diff) > len(shown) else []
    return [f"pack: {len(old)} -> {len(new)} characters", *(f"  {d}" for d in shown), *more]


def changes(before: Mapping[str, Any], after: Mapping[str, Any]) -> list[str]:
    """What a replay changed against the recorded response: items, order, pack, answer."""
    lines = item_changes(before, after) + pack_changes(before, after)
    if before.get("answer") != after.get("answer"):
        lines.append("answer: changed")
    return lines
