"""The shared state engine: Redis, so every worker and every replica sees the same state.

Every call has a timeout (``socket_timeout``); a Redis error becomes ``StateUnavailable``.
Expiry is Redis's own; token buckets run as one Lua script on the server's clock, so
replicas with drifting clocks still agree. Vector spaces are Redis streams: insertion
order and an opaque cursor (the entry id) come with them.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable
from typing import Any, TypeVar

import numpy as np
import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError, ResponseError

from searcher.errors import StateEntryUnusable, StateUnavailable
from searcher.fetch.urls import without_password
from searcher.state.base import StateEngine, StateStats, TokenGrant, VectorRow

T = TypeVar("T")

# KEYS[1] bucket; ARGV rate/s, burst, cost. The server's clock; the bucket expires once it
# would be full again anyway.
_TAKE = """
local rate, burst, cost = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1e6
local state = redis.call('HMGET', KEYS[1], 'tokens', 'at')
local tokens, at = tonumber(state[1]), tonumber(state[2])
if tokens == nil then tokens, at = burst, now end
tokens = math.min(burst, tokens + math.max(0, now - at) * rate)
local allowed, wait = 0, 0
if tokens >= cost then
  tokens = tokens - cost
  allowed = 1
elseif rate > 0 then
  wait = (cost - tokens) / rate
else
  wait = -1
end
redis.call('HSET', KEYS[1], 'tokens', tostring(tokens), 'at', tostring(now))
local idle = 86400
if rate > 0 then idle = math.ceil(burst / rate) + 1 end
redis.call('EXPIRE', KEYS[1], idle)
return {allowed, tostring(tokens), tostring(wait)}
"""
_VEC = "vec:"  # vector streams live under <prefix>vec:<space>


def _expiry(fields: dict[bytes, bytes]) -> float:
    """A vector row's expiry; a row without a readable one is gone (it cannot be read)."""
    try:
        return float(fields.get(b"exp", b"0"))
    except ValueError:
        return 0.0


class RedisStore:
    """``StateStore`` on Redis at ``url``; every key gets ``prefix``."""

    engine: StateEngine = "redis"

    def __init__(self, url: str, prefix: str = "searcher:", timeout_s: float = 0.5) -> None:
        self.location = without_password(url)
        self._prefix = prefix
        # Any: redis-py's annotations mix sync and async return types.
        self._redis: Any = aioredis.Redis.from_url(
            url,
            socket_timeout=timeout_s,
            socket_connect_timeout=timeout_s,
            health_check_interval=30,
            # A pooled connection that a Redis restart closed fails on its next use: one
            # retry at once, on a new connection, so a restart costs no request. Only
            # connection errors (a refused connect fails again at once); never a timeout,
            # which would double the wait on a Redis that hangs.
            retry=Retry(NoBackoff(), 1, (RedisConnectionError,)),
            retry_on_error=[RedisConnectionError],
        )
        self._take = self._redis.register_script(_TAKE)

    async def _call(self, op: Awaitable[T]) -> T:
        try:
            return await op
        except ResponseError as exc:
            if str(exc).startswith("WRONGTYPE"):
                raise StateEntryUnusable(f"Redis at {self.location}: {exc}") from exc
            raise StateUnavailable(f"Redis at {self.location}: ResponseError: {exc}") from exc
        except (RedisError, OSError, TimeoutError) as exc:
            raise StateUnavailable(
                f"Redis at {self.location}: {type(exc).__name__}: {exc}"
            ) from exc

    def _k(self, key: str) -> str:
        return self._prefix + key

    async def get(self, key: str) -> bytes | None:
        value: bytes | None = await self._call(self._redis.get(self._k(key)))
        return value

    async def set(self, key: str, value: bytes, ttl_s: float) -> None:
        if ttl_s <= 0:
            return
        await self._call(self._redis.set(self._k(key), value, px=max(1, int(ttl_s * 1000))))

    async def swap(self, key: str, value: bytes, ttl_s: float) -> bytes | None:
        held: bytes | None = await self._call(
            self._redis.set(self._k(key), value, px=max(1, int(ttl_s * 1000)), get=True)
        )
        return held

    async def delete(self, key: str) -> bool:
        removed: int = await self._call(self._redis.delete(self._k(key)))
        return removed > 0

    async def incr(self, key: str, amount: int = 1, ttl_s: float | None = None) -> int:
        async def run() -> int:
            async with self._redis.pipeline(transaction=True) as pipe:
                pipe.incrby(self._k(key), amount)
                if ttl_s is not None:
                    # NX: the window starts with the counter, later increments keep it.
                    pipe.pexpire(self._k(key), max(1, int(ttl_s * 1000)), nx=True)
                results = await pipe.execute()
            return int(results[0])

        return await self._call(run())

    async def take(
        self, key: str, rate_per_s: float, burst: float, cost: float = 1.0
    ) -> TokenGrant:
        reply = await self._call(self._take(keys=[self._k(key)], args=[rate_per_s, burst, cost]))
        allowed, tokens, wait = int(reply[0]), float(reply[1]), float(reply[2])
        return TokenGrant(bool(allowed), tokens, float("inf") if wait < 0 else wait)

    async def add_vector(
        self, space: str, item_id: str, vector: np.ndarray, meta: bytes, ttl_s: float
    ) -> None:
        fields: dict[Any, Any] = {
            "id": item_id,
            "v": np.asarray(vector, dtype=np.float32).tobytes(),
            "m": meta,
            "exp": repr(time.time() + ttl_s),
        }
        await self._call(self._redis.xadd(self._k(_VEC + space), fields))

    async def vectors_after(
        self, space: str, cursor: str | None, limit: int = 5000
    ) -> list[VectorRow]:
        start = f"({cursor}" if cursor else "-"
        entries = await self._call(
            self._redis.xrange(self._k(_VEC + space), min=start, max="+", count=limit)
        )
        rows = []
        for entry_id, fields in entries:
            try:
                rows.append(
                    VectorRow(
                        entry_id.decode(),
                        fields[b"id"].decode(),
                        np.frombuffer(fields[b"v"], dtype=np.float32),
                        bytes(fields[b"m"]),
                        float(fields[b"exp"]),
                    )
                )
            except (KeyError, ValueError, UnicodeDecodeError):
                continue  # a corrupt row is skipped, like a corrupt entry is a miss
        return rows

    async def _keys(self, pattern: str) -> list[bytes]:
        return [key async for key in self._redis.scan_iter(match=pattern, count=1000)]

    async def clear(self, prefix: str = "") -> int:
        async def run() -> int:
            removed = 0
            for pattern in (self._k(prefix) + "*", self._k(_VEC + prefix) + "*"):
                keys = await self._keys(pattern)
                for i in range(0, len(keys), 500):
                    removed += await self._redis.unlink(*keys[i : i + 500])
            return removed

        return await self._call(run())

    async def prune(self) -> int:
        """Redis expires keys itself; vector rows past their expiry are trimmed here."""

        async def run() -> int:
            removed, now = 0, time.time()
            for stream in await self._keys(self._k(_VEC) + "*"):
                expired = [
                    entry_id
                    for entry_id, fields in await self._redis.xrange(stream)
                    if _expiry(fields) <= now
                ]
                for i in range(0, len(expired), 500):
                    removed += await self._redis.xdel(stream, *expired[i : i + 500])
            return removed

        return await self._call(run())

    async def stats(self, prefix: str = "") -> StateStats:
        async def run() -> StateStats:
            keys = await self._keys(self._k(prefix) + "*")
            vec_prefix = self._k(_VEC).encode()
            entries = sum(1 for k in keys if not k.startswith(vec_prefix))
            vectors = 0
            for stream in await self._keys(self._k(_VEC + prefix) + "*"):
                vectors += await self._redis.xlen(stream)
            return StateStats(self.engine, self.location, entries, 0, vectors)

        return await self._call(run())

    async def ping(self) -> None:
        await self._call(self._redis.ping())

    async def aclose(self) -> None:
        await self._redis.aclose()
