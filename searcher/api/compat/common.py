"""What the compat routers share: the running service, JSON responses, bearer keys."""

from __future__ import annotations

import secrets

from fastapi import HTTPException, Request

from searcher.runtime import Runtime


def runtime_of(request: Request) -> Runtime:
    """The app's ``Runtime`` (built in its lifespan)."""
    runtime: Runtime = request.app.state.runtime
    return runtime


def bearer_token(authorization: str | None) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` header, else None."""
    if not authorization:
        return None
    scheme, _, token = authorization.strip().partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    return token.strip()


def check_bearer(request: Request, expected: str | None) -> None:
    """Refuse the request with 401 unless it carries ``expected`` as its bearer token;
    no check when ``expected`` is unset."""
    if not expected:
        return
    token = bearer_token(request.headers.get("authorization"))
    if token is None:
        raise HTTPException(401, "missing API key: send Authorization: Bearer <key>")
    # Constant-time comparison, so the key cannot be guessed from response times.
    if not secrets.compare_digest(token.encode(), expected.encode()):
        raise HTTPException(401, "invalid API key")
