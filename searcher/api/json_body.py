"""The JSON responses of the routes: orjson-encoded, written once for every router."""

from __future__ import annotations

from typing import Any

import orjson
from fastapi.responses import Response


def json_response(data: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    """``data`` (plain JSON types) as an ``application/json`` response."""
    return Response(
        orjson.dumps(data), status_code=status, media_type="application/json", headers=headers
    )
