"""API keys: created with a name and optional limits, shown once, stored only as their
SHA-256 in the state store (SQLite or Redis), so every worker and replica knows them."""

from __future__ import annotations

import dataclasses
import hashlib
import re
import secrets
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import Any

from searcher.auth.rates import Rate
from searcher.errors import InvalidRequest, KeyNotFound
from searcher.state.base import StateStore, get_json, set_json

PREFIX = "sk-searcher-"
NAMESPACE = "auth:"
# Keys created before slots: one list, rewritten per key (two creates at once lost one).
_INDEX = NAMESPACE + "index"
# How many keys were ever created; each takes the next number (an atomic increment) and
# writes its hash into that slot alone, so creates at once lose none.
_CREATED = NAMESPACE + "created"
FOREVER_S = 100 * 365 * 86_400.0
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


@dataclass(frozen=True)
class ApiKey:
    id: str  # the first 12 hex digits of the hash: safe to log and show
    name: str
    rate: Rate | None
    quota: Rate | None
    created_utc: str
    revoked: bool = False
    # The collections of own documents it may see (``*``: all); None: no list of its own,
    # so ``corpus.default_access`` (see ``searcher.auth.access``).
    collections: tuple[str, ...] | None = None
    # May use the routes that act on the whole server (the extraction cache's statistics
    # and clearing): what one tenant must not do to the others.
    operator: bool = False

    def public(self) -> dict[str, Any]:
        return {
            "id": self.id, "name": self.name, "rate": str(self.rate) if self.rate else None,
            "quota": str(self.quota) if self.quota else None, "created_utc": self.created_utc,
            "revoked": self.revoked,
            "collections": list(self.collections) if self.collections is not None else None,
            "operator": self.operator,
        }  # fmt: skip


def hash_secret(secret: str) -> str:
    return hashlib.sha256(secret.encode("utf-8", "surrogatepass")).hexdigest()


def _record(key: ApiKey) -> dict[str, Any]:
    data = asdict(key)
    data["rate"] = asdict(key.rate) if key.rate else None
    data["quota"] = asdict(key.quota) if key.quota else None
    data["collections"] = list(key.collections) if key.collections is not None else None
    return data


def _key(data: Any) -> ApiKey | None:
    """The key a stored record describes; None for a record that does not decode."""
    try:
        rate, quota = data.get("rate"), data.get("quota")
        listed = data.get("collections")  # absent from keys made before collections
        collections = tuple(str(c) for c in listed) if isinstance(listed, list) else None
        return ApiKey(
            id=str(data["id"]), name=str(data["name"]),
            rate=Rate(int(rate["count"]), int(rate["per_s"])) if rate else None,
            quota=Rate(int(quota["count"]), int(quota["per_s"])) if quota else None,
            created_utc=str(data["created_utc"]), revoked=bool(data.get("revoked", False)),
            collections=collections, operator=data.get("operator") is True,
        )  # fmt: skip
    except (AttributeError, KeyError, TypeError, ValueError):
        return None


def _slot(number: int) -> str:
    return f"{NAMESPACE}slot:{number}"


class KeyBook:
    """Create, list, revoke and look up keys in a state store."""

    def __init__(self, store: StateStore) -> None:
        self._store = store

    async def _hashes(self) -> list[str]:
        index = await get_json(self._store, _INDEX)
        hashes = [h for h in index if isinstance(h, str)] if isinstance(index, list) else []
        created = await self._store.incr(_CREATED, 0, FOREVER_S)  # reads the count
        for number in range(1, created + 1):
            # A slot taken but not yet written (its create is still running) is skipped.
            digest = await get_json(self._store, _slot(number))
            if isinstance(digest, str):
                hashes.append(digest)
        return hashes

    async def create(
        self,
        name: str,
        rate: Rate | None = None,
        quota: Rate | None = None,
        collections: tuple[str, ...] | None = None,
        operator: bool = False,
    ) -> tuple[ApiKey, str]:
        """A new key and its secret (shown once: only its hash is kept); ``collections``:
        those it may see (checked by ``searcher.auth.access.parse_collections``);
        ``operator``: it may use the routes that act on the whole server."""
        if not _NAME.match(name):
            raise InvalidRequest("name", "1-64 letters, digits, '.', '_' or '-'")
        active = [k for k in await self.list() if not k.revoked]
        if any(k.name == name for k in active):
            raise InvalidRequest("name", f"an active key is already named {name!r}")
        if any(k.id == name for k in active):  # revoke NAME would not know which one
            raise InvalidRequest("name", f"{name!r} is the id of an active key")
        secret = PREFIX + secrets.token_urlsafe(24)
        digest = hash_secret(secret)
        created = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        key = ApiKey(
            digest[:12], name, rate, quota, created, collections=collections, operator=operator
        )
        await set_json(self._store, NAMESPACE + "key:" + digest, _record(key), FOREVER_S)
        number = await self._store.incr(_CREATED, 1, FOREVER_S)
        await set_json(self._store, _slot(number), digest, FOREVER_S)
        return key, secret

    async def list(self) -> list[ApiKey]:
        """Every key, active and revoked, oldest first."""
        keys = []
        for digest in await self._hashes():
            key = _key(await get_json(self._store, NAMESPACE + "key:" + digest))
            if key is not None:
                keys.append(key)
        return keys

    async def revoke(self, name_or_id: str) -> ApiKey:
        """Revoke the active key with that name or id (``KeyNotFound`` if none;
        ``InvalidRequest`` when it is one key's name and another's id)."""
        found = []
        for digest in await self._hashes():
            key = _key(await get_json(self._store, NAMESPACE + "key:" + digest))
            if key and not key.revoked and name_or_id in (key.name, key.id):
                found.append((digest, key))
        if not found:
            raise KeyNotFound(name_or_id)
        if len(found) > 1:
            named = ", ".join(f"{k.id} ({k.name})" for _, k in found)
            raise InvalidRequest("name_or_id", f"{name_or_id!r} names several keys: {named}")
        digest, key = found[0]
        revoked = dataclasses.replace(key, revoked=True)
        await set_json(self._store, NAMESPACE + "key:" + digest, _record(revoked), FOREVER_S)
        return revoked

    async def lookup(self, secret: str) -> ApiKey | None:
        """The key a request presents, or None if it is unknown."""
        if not secret.startswith(PREFIX) or len(secret) > 200:
            return None
        return _key(await get_json(self._store, NAMESPACE + "key:" + hash_secret(secret)))
