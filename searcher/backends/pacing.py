"""Pacing: searcher itself never asks a backend instance more often than its allowance
(``backends.<instance>.rate``, e.g. Brave's free tier: ``1/s``). The allowance is a token
bucket in the state store, shared by every worker and replica; a request over it waits
for its turn within its deadline instead of drawing a 429, and one whose deadline cannot
cover the wait is refused at once (``rate_limited``: no verdict on the backend).

The allowance belongs to the upstream, not to the instance's name: two instances of one
SearXNG, or of one Brave API key, draw on one allowance (the upstream counts their calls
together), at the strictest of their rates."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping

from searcher.auth.rates import Rate
from searcher.backends.instances import upstream_of
from searcher.config import Settings
from searcher.errors import BackendRateLimited
from searcher.pipeline.resilience import Deadline
from searcher.state.base import StateStore

NAMESPACE = "pace:"
MIN_CALL_S = 0.05  # the least time a call needs after its turn (runner.MIN_ATTEMPT_S)
MAX_TRIES = 20  # waits are computed from the bucket; this only bounds a pathological loop


def instance_rates(settings: Settings) -> dict[str, Rate]:
    """The instances that have a ``rate``, and their rates."""
    backends = settings.backends
    return {
        name: Rate.parse(rate, f"backends.{name}.rate")
        for name in backends.names
        if (rate := backends.get(name).rate)
    }


class Pacer:
    """The allowances of a pool's instances, kept in a state store."""

    def __init__(
        self, store: StateStore, rates: dict[str, Rate], keys: Mapping[str, str] | None = None
    ) -> None:
        self._store = store
        # Instance name -> its key in the store: one allowance per upstream (and API key),
        # whatever the names of the instances that use it (``registry.upstream_key``).
        self._keys = {name: upstream_of(key) for name, key in (keys or {}).items()}
        self._rates = _strictest(rates, self._keys)

    async def wait_turn(self, name: str, deadline: Deadline) -> None:
        """Return when ``name`` may be called; raise ``BackendRateLimited`` if that would
        be after the deadline."""
        rate = self._rates.get(name)
        if rate is None:
            return
        per_s = rate.count / rate.per_s
        key = NAMESPACE + self._keys.get(name, name)
        for _ in range(MAX_TRIES):
            grant = await self._store.take(key, per_s, float(rate.count))
            if grant.allowed:
                return
            # A turn must leave time for the call itself (else: a timeout, not pacing).
            if grant.retry_after_s + MIN_CALL_S >= deadline.remaining():
                raise BackendRateLimited(
                    name, f"paced at {rate}: the next turn is after the request deadline",
                    retry_after_s=grant.retry_after_s,
                )  # fmt: skip
            await asyncio.sleep(grant.retry_after_s)
        raise BackendRateLimited(name, f"paced at {rate}: no turn came")


def _strictest(rates: Mapping[str, Rate], keys: Mapping[str, str]) -> dict[str, Rate]:
    """Each instance's rate: the strictest of those of the instances sharing its
    upstream's allowance (also for an instance that has none: the upstream has one)."""
    by_key: dict[str, Rate] = {}
    for name, rate in rates.items():
        key = keys.get(name, name)
        known = by_key.get(key)
        if known is None or rate.count / rate.per_s < known.count / known.per_s:
            by_key[key] = rate
    names = set(rates) | set(keys)
    return {name: by_key[key] for name in names if (key := keys.get(name, name)) in by_key}
