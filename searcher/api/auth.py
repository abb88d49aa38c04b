"""API keys and rate limits on every route (``auth.enabled``): a pure ASGI middleware.

A request must carry ``Authorization: Bearer <key>`` of an active key; each key has a
token bucket (``rate``, shared through the state store, so across workers and replicas)
and a fixed-window quota. Refusals are JSON: 401 for a missing, unknown or revoked key, 429
with ``Retry-After`` over a limit. Answers carry ``RateLimit-Limit``, ``-Remaining`` and
``-Reset`` of the rate; a refusal for the quota, of the quota. The quota is checked before
a rate token is taken, and refused requests count against neither; ``/v1/usage`` does
not count against the quota, so that a key over it can still see its usage.

Each process trusts its last check of a key for ``auth.key_check_s`` (5 s): that is the
promise that a revoked key is refused within it. While the state store cannot be reached,
a key checked within that window still works; one checked longer ago gets 503, as does an
unknown one. Trusting an older check would keep a key revoked just before the outage
working for the whole outage, and a worker cannot learn of a revocation any other way
(it is written to the store); an operator who prefers availability over a prompt
revocation raises ``auth.key_check_s``.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from searcher.api.errors import error_response, in_route_shape
from searcher.auth.access import EVERY, CollectionAccess, access_of
from searcher.auth.keys import ApiKey, KeyBook, hash_secret
from searcher.auth.rates import Rate
from searcher.config import AuthSettings
from searcher.errors import AccessDenied
from searcher.state.base import StateStore
from searcher.state.failsoft import FailSoftStore

USAGE_KEEP_S = 8 * 86_400  # a week of daily usage counters, and a day of slack
USAGE_PATH = "/v1/usage"  # outside the quota: a key over it can still see its usage
Clock = Callable[[], float]


def bearer(scope: Scope) -> str | None:
    """The bearer token of the request's one ``Authorization`` header; None when there is
    none, it is not a bearer token, or there are several (which one counts would be a
    proxy's guess: none does)."""
    values = [value for name, value in scope.get("headers", ()) if name == b"authorization"]
    if len(values) != 1:
        return None
    scheme, _, token = values[0].decode("latin-1").partition(" ")
    return token.strip() if scheme.lower() == "bearer" and token.strip() else None


def key_of(scope: Scope) -> str | None:
    """The id of the API key the request was let in with; None when keys are off (or the
    path is open). What a key owns (its research jobs) is looked up by this."""
    key_id = scope.get("state", {}).get("key_id")
    return key_id if isinstance(key_id, str) else None


def require_operator(scope: Scope) -> None:
    """Refuse (``AccessDenied``) a request let in with a key that is not an operator's: the
    route acts on the whole server, which one tenant must not do to the others. Keys off
    (or the path open): nobody to tell apart, let through."""
    key = scope.get("state", {}).get("api_key")
    if isinstance(key, ApiKey) and not key.operator:
        raise AccessDenied(
            "Authorization",
            "this route acts on the whole server: it needs a key created with "
            "`searcher keys create --operator`",
        )


def collection_access(scope: Scope) -> CollectionAccess:
    """The collections the request may see: what its key was given when keys are on (set
    by ``AuthMiddleware`` on every request it lets through), every one when they are off."""
    access = scope.get("state", {}).get("collections")
    return access if isinstance(access, CollectionAccess) else EVERY


def quota_window(quota: Rate, now: float) -> tuple[int, float]:
    """The quota's current window number and the seconds until the next one."""
    window = int(now // quota.per_s)
    return window, (window + 1) * quota.per_s - now


class AuthMiddleware:
    def __init__(
        self,
        app: ASGIApp,
        settings: AuthSettings,
        clock: Clock = time.time,
        default_access: tuple[str, ...] = (),
    ) -> None:
        self.app = app
        self.settings = settings
        # What a key with no collections of its own (or a request on an open path) sees.
        self.default_access = default_access
        self.open = set(settings.open_paths)
        self.default_rate = Rate.parse(settings.default_rate) if settings.default_rate else None
        self.clock = clock
        self.key_check_s = settings.key_check_s
        self._seen: dict[str, tuple[ApiKey | None, float]] = {}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if scope.get("path") in self.open:
            scope.setdefault("state", {})["collections"] = access_of(None, self.default_access)
            await self.app(scope, receive, send)
            return
        store: FailSoftStore | None = scope["app"].state.runtime.state
        if store is None:  # no state store: no keys can be known
            await self._refuse(scope, receive, send, 503, "unavailable", "no key store")
            return
        secret = bearer(scope)
        if secret is None:
            message = "an API key is required: one Authorization: Bearer <key>"
            await self._refuse(scope, receive, send, 401, "unauthorized", message)
            return
        key, known = await self._lookup(store, secret)
        if not known:
            message = "the key store cannot be reached; retry shortly"
            await self._refuse(scope, receive, send, 503, "unavailable", message, retry=5)
            return
        if key is None or key.revoked:
            await self._refuse(scope, receive, send, 401, "unauthorized",
                               "unknown or revoked API key")  # fmt: skip
            return
        state = scope.setdefault("state", {})
        state["key_id"], state["api_key"] = key.id, key
        state["collections"] = access_of(key.collections, self.default_access)
        quota = None if scope.get("path") == USAGE_PATH else key.quota
        refused, extra = await self._limits(store, key, quota)
        if refused is not None:
            message, retry = refused
            await self._refuse(scope, receive, send, 429, "rate_limited", message, retry, extra)
            return
        await store.incr(usage_counter(key, self.clock()), 1, USAGE_KEEP_S)

        async def send_with_limits(message: Message) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", ()), *extra]}
            await send(message)

        await self.app(scope, receive, send_with_limits)

    async def _lookup(self, store: FailSoftStore, secret: str) -> tuple[ApiKey | None, bool]:
        """The key (None if unknown) and whether the answer can be trusted."""
        digest = hash_secret(secret)
        now = time.monotonic()
        cached = self._seen.get(digest)
        if cached is not None and now - cached[1] < self.key_check_s:
            return cached[0], True
        key = await KeyBook(store).lookup(secret)
        if key is None and not store.ok:
            # The store cannot say, and this process's last word on the key is older than
            # the promise allows (it may have been revoked since): nobody is let in.
            return None, False
        if len(self._seen) > 10_000:
            self._seen.clear()
        self._seen[digest] = (key, now)
        return key, True

    async def _limits(
        self, store: FailSoftStore, key: ApiKey, quota: Rate | None
    ) -> tuple[tuple[str, int] | None, list[tuple[bytes, bytes]]]:
        """(refusal message and Retry-After, or None; the RateLimit headers). The quota
        is checked first, and counts the request only once the rate lets it through."""
        counter = ""
        if quota is not None:
            window, left_s = quota_window(quota, self.clock())
            counter = f"auth:quota:{key.id}:{window}"
            if await store.incr(counter, 0, quota.per_s + 60) >= quota.count:
                return _quota_refusal(quota, left_s)
        rate = key.rate or self.default_rate
        headers: list[tuple[bytes, bytes]] = []
        if rate is not None:
            grant = await store.take(f"auth:rate:{key.id}", rate.count / rate.per_s, rate.count)
            reset = math.ceil((rate.count - grant.remaining) * rate.per_s / rate.count)
            headers = _limit_headers(rate.count, math.floor(grant.remaining), reset)
            if not grant.allowed:
                retry = max(1, math.ceil(grant.retry_after_s))
                return (f"rate limit {rate} exceeded", retry), headers
        if quota is not None and await store.incr(counter, 1, quota.per_s + 60) > quota.count:
            await store.incr(counter, -1, quota.per_s + 60)  # another request took the last
            return _quota_refusal(quota, left_s)
        return None, headers

    async def _refuse(
        self, scope: Scope, receive: Receive, send: Send, status: int, kind: str, message: str,
        retry: int | None = None, headers: list[tuple[bytes, bytes]] | None = None,
    ) -> None:  # fmt: skip
        response = error_response(status, kind, message)
        if retry is not None:
            response.headers["Retry-After"] = str(retry)
        if status == 401:
            response.headers["WWW-Authenticate"] = 'Bearer realm="searcher"'
        for name, value in headers or []:
            response.headers[name.decode()] = value.decode()
        await in_route_shape(scope, response)(scope, receive, send)


def _limit_headers(limit: int, remaining: int, reset_s: int) -> list[tuple[bytes, bytes]]:
    return [
        (b"ratelimit-limit", str(limit).encode()),
        (b"ratelimit-remaining", str(max(0, remaining)).encode()),
        (b"ratelimit-reset", str(max(0, reset_s)).encode()),
    ]


def _quota_refusal(quota: Rate, left_s: float) -> tuple[tuple[str, int], list[tuple[bytes, bytes]]]:
    """The 429 for a used-up quota: its headers describe the quota, not the rate."""
    retry = max(1, math.ceil(left_s))
    return (f"quota {quota} used up", retry), _limit_headers(quota.count, 0, retry)


def usage_counter(key: ApiKey, now: float) -> str:
    """The counter of the key's requests on the (UTC) day of ``now``."""
    return f"auth:usage:{key.id}:{int(now // 86_400)}"


async def read_counter(store: StateStore, name: str) -> int:
    """A counter's value (adding nothing; counters are not key/value entries). One that
    does not exist is created at 0, expiring like the usage counters."""
    return await store.incr(name, 0, USAGE_KEEP_S)


def usage_report(
    key: ApiKey, requests_today: int, quota_used: int, now: float, default_rate: Rate | None
) -> dict[str, Any]:
    """``GET /v1/usage`` for the caller's key; its ``rate`` the one applied (a key made
    without one is held to ``auth.default_rate``; null: no limit)."""
    public = key.public()
    if key.rate is None and default_rate is not None:
        public["rate"] = str(default_rate)
    report: dict[str, Any] = {"key": public, "requests_today": requests_today}
    if key.quota is not None:
        _, left_s = quota_window(key.quota, now)
        report["quota"] = {"limit": key.quota.count, "used": quota_used,
                           "reset_s": math.ceil(left_s)}  # fmt: skip
    return report
