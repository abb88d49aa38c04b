"""Which collections of own documents a caller may see (search, research, MCP, uploads,
``GET /v1/collections``). Decided where the key is checked, carried with the request, and
applied where the backends are planned: the store knows nothing of keys.

With ``auth.enabled`` off every caller sees every collection (whoever reaches the server
could run the CLI). With it on, a key sees the collections listed for it
(``searcher keys create --collections a,b``; ``*`` for all); a key with no list sees
``corpus.default_access`` (empty by default: none), so a key made before collections
existed is given nothing it was not meant to have.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from searcher.errors import InvalidRequest

EVERY_COLLECTION = "*"
# As store.check_collection_name: letters, digits, '_', '.', '-'; at most 64.
_COLLECTION_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")


@dataclass(frozen=True)
class CollectionAccess:
    """The collections a caller may see: every one (``allowed`` None), or those listed."""

    allowed: frozenset[str] | None = None

    def allows(self, collection: str) -> bool:
        return self.allowed is None or collection in self.allowed

    def allows_all(self, collections: Iterable[str]) -> bool:
        return all(self.allows(c) for c in collections)

    def label(self) -> str:
        """A stable text of the set (the result cache keeps answers apart by it)."""
        return EVERY_COLLECTION if self.allowed is None else ",".join(sorted(self.allowed))


EVERY = CollectionAccess(None)


def parse_collections(values: Iterable[str], field: str) -> tuple[str, ...]:
    """Collection names as given to ``--collections`` or configured (comma-separated
    entries allowed; ``*`` means all), each checked; ``InvalidRequest`` naming ``field``."""
    names: list[str] = []
    for value in values:
        for name in (part.strip() for part in value.split(",")):
            if name != EVERY_COLLECTION and not _COLLECTION_NAME.fullmatch(name):
                raise InvalidRequest(
                    field,
                    f"{name!r} is not a collection name (letters, digits, '_', '.', '-'; "
                    "starting with a letter or digit; at most 64), nor '*' for all",
                )
            names.append(name)
    return tuple(dict.fromkeys(names))


def access_of(collections: Sequence[str] | None, default: Sequence[str]) -> CollectionAccess:
    """What a key with ``collections`` listed (None: no list of its own, so ``default``,
    ``corpus.default_access``) may see."""
    listed = default if collections is None else collections
    if EVERY_COLLECTION in listed:
        return EVERY
    return CollectionAccess(frozenset(listed))
