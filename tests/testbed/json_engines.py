"""Search engines for a real SearXNG's ``json_engine``: ``GET /engine/NAME?q=..`` answers
``{"results": [{"url", "title", "content"}, ...]}``, best first.

What ranks is a function given to the app (the benchmark's BM25 / embedding engines, a
test's tiny collection), so one server can stand for several engines.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any
from urllib.parse import parse_qsl

import orjson

EngineResult = dict[str, str]  # {"url", "title", "content"}
Search = Callable[[str, str], Sequence[EngineResult]]  # (engine, query) -> results


class JsonEnginesApp:
    """ASGI app serving ``search(engine, query)`` at ``/engine/{engine}``."""

    def __init__(self, search: Search, engines: Sequence[str]) -> None:
        self.search = search
        self.engines = frozenset(engines)

    def url(self, base: str, engine: str) -> str:
        """The ``search_url`` SearXNG's ``json_engine`` is given for ``engine``."""
        return f"{base}/engine/{engine}?q={{query}}"

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        path: str = scope["path"]
        engine = path.removeprefix("/engine/")
        if not path.startswith("/engine/") or engine not in self.engines:
            status, body = 404, {"error": "no such engine"}
        else:
            params = dict(parse_qsl(scope.get("query_string", b"").decode("latin-1")))
            status, body = 200, {"results": list(self.search(engine, params.get("q", "")))}
        data = orjson.dumps(body)
        headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(data))]
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": data})
