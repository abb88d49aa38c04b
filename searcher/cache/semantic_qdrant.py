"""The semantic result cache with its vectors in Qdrant (``state.qdrant_url``).

The same rule as ``semantic.py`` (cosine at or above the threshold, ``same_question``), but
the vectors live in a Qdrant collection that searches them itself, so no process mirrors
them in memory: for caches that outgrow an in-process scan, and shared by every replica
that points at the same Qdrant server. ``qdrant_url`` is a server (``http://host:6333``),
or Qdrant's embedded mode: ``:memory:`` or a directory (one process only).
"""

from __future__ import annotations

import logging
import time
import uuid
import warnings
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from searcher.cache.semantic import query_vector, same_question
from searcher.embedding.embedders import Embedder
from searcher.errors import StateUnavailable

if TYPE_CHECKING:
    from qdrant_client import AsyncQdrantClient

log = logging.getLogger(__name__)

COLLECTION = "searcher_semantic"
_CANDIDATES = 5
PRUNE_EVERY = 1000  # additions between two deletions of expired points


def _client(url: str, timeout_s: float) -> AsyncQdrantClient:
    try:
        from qdrant_client import AsyncQdrantClient  # only this engine needs it
    except ImportError as exc:
        raise StateUnavailable(
            "state.qdrant_url is set but qdrant-client is not installed "
            "(pip install 'searcher[qdrant]')"
        ) from exc
    if url.startswith(("http://", "https://")):
        # No version probe at construction: open_qdrant's first call says whether it answers.
        return AsyncQdrantClient(
            url=url, timeout=max(1, round(timeout_s)), check_compatibility=False
        )
    if url == ":memory:":
        return AsyncQdrantClient(location=":memory:")
    return AsyncQdrantClient(path=url)


async def open_qdrant(url: str, timeout_s: float = 5.0) -> AsyncQdrantClient:
    """A client of the Qdrant at ``url`` that answered; ``StateUnavailable`` if none did."""
    client = _client(url, timeout_s)
    try:
        await client.get_collections()
    except Exception as exc:  # the client raises many kinds (HTTP, gRPC, OS, a held lock)
        await client.close()
        raise StateUnavailable(f"Qdrant at {url} (state.qdrant_url): {exc}") from exc
    return client


async def clear_qdrant(url: str, timeout_s: float = 5.0) -> int:
    """Delete the semantic cache's collection from the Qdrant at ``url`` (``searcher cache
    clear``); how many vectors it held. ``StateUnavailable`` if that Qdrant cannot be used
    (an embedded directory is held by the one process that opened it)."""
    client = await open_qdrant(url, timeout_s)
    try:
        if not await client.collection_exists(COLLECTION):
            return 0
        held = (await client.count(COLLECTION)).count
        await client.delete_collection(COLLECTION)
        return held
    except Exception as exc:
        raise StateUnavailable(f"Qdrant at {url} (state.qdrant_url): {exc}") from exc
    finally:
        await client.close()


class QdrantSemanticCache:
    """Finds the cached answer of a query close to a new one, searching Qdrant
    (``SemanticMatcher``). A Qdrant that fails while serving costs the semantic hits,
    never a request: lookups miss and additions are skipped, with a warning."""

    def __init__(
        self,
        client: AsyncQdrantClient,
        embedder: Embedder,
        threshold: float,
        clock: Callable[[], float] = time.time,
    ) -> None:
        from qdrant_client import models  # installed: the client exists

        self._models = models
        self.client = client
        self.embedder = embedder
        self.threshold = threshold
        self._clock = clock
        self._size: int | None = None  # the collection's vector size, once known
        self._added = 0

    async def aclose(self) -> None:
        await self.client.close()

    async def find(self, query: str, scope: str) -> str | None:
        """The key of the cached answer to the closest query asking the same (``same_question``)."""
        vector = await self._embed(query)
        if vector is None or not await self._ready(len(vector), create=False):
            return None
        try:
            found = await self.client.query_points(
                COLLECTION,
                query=vector.tolist(),
                query_filter=self._live(scope),
                score_threshold=self.threshold,
                limit=_CANDIDATES,
                with_payload=True,
            )
        except Exception as exc:
            log.warning("semantic cache: Qdrant lookup failed (%s); exact matches only", exc)
            self._size = None  # the collection may be gone (cache clear): look again next time
            return None
        for point in found.points:  # best first
            payload = point.payload or {}
            if same_question(query, str(payload.get("query", ""))):
                return str(payload.get("key")) if payload.get("key") else None
        return None

    async def add(self, query: str, scope: str, key: str, ttl_s: float) -> None:
        vector = await self._embed(query)
        if vector is None or not await self._ready(len(vector), create=True):
            return
        payload = {"key": key, "query": query, "scope": scope, "expires_at": self._clock() + ttl_s}
        point_id = str(uuid.uuid5(uuid.NAMESPACE_URL, key))  # one point per cached answer
        try:
            await self.client.upsert(
                COLLECTION,
                points=[
                    self._models.PointStruct(id=point_id, vector=vector.tolist(), payload=payload)
                ],
            )
            self._added += 1
            if self._added % PRUNE_EVERY == 0:
                await self._prune()
        except Exception as exc:
            log.warning("semantic cache: Qdrant write failed (%s)", exc)
            self._size = None  # the collection may be gone (cache clear): look again next time

    def _live(self, scope: str) -> Any:
        models = self._models
        return models.Filter(
            must=[
                models.FieldCondition(key="scope", match=models.MatchValue(value=scope)),
                models.FieldCondition(key="expires_at", range=models.Range(gt=self._clock())),
            ]
        )

    async def _prune(self) -> None:
        """Delete expired points (lookups already skip them; this bounds the collection)."""
        models = self._models
        expired = models.Filter(
            must=[models.FieldCondition(key="expires_at", range=models.Range(lte=self._clock()))]
        )
        await self.client.delete(COLLECTION, points_selector=models.FilterSelector(filter=expired))

    async def _ready(self, size: int, create: bool) -> bool:
        """Whether the collection exists with vectors of ``size``, creating it if asked."""
        if self._size is not None:
            return self._size == size
        models = self._models
        try:
            if await self.client.collection_exists(COLLECTION):
                info = await self.client.get_collection(COLLECTION)
                params = info.config.params.vectors
                self._size = params.size if isinstance(params, models.VectorParams) else None
            elif create:
                await self.client.create_collection(
                    COLLECTION,
                    vectors_config=models.VectorParams(size=size, distance=models.Distance.COSINE),
                )
                with warnings.catch_warnings():  # embedded mode says it has no indexes
                    warnings.simplefilter("ignore", UserWarning)
                    await self.client.create_payload_index(
                        COLLECTION, "scope", field_schema=models.PayloadSchemaType.KEYWORD
                    )
                self._size = size
        except Exception as exc:
            log.warning("semantic cache: Qdrant collection unavailable (%s)", exc)
            return False
        if self._size is not None and self._size != size:
            log.warning(
                "semantic cache: Qdrant collection %s holds %s-d vectors, the embedder gives "
                "%s-d; semantic lookups are off (clear the collection after changing models)",
                COLLECTION, self._size, size,
            )  # fmt: skip
        return self._size == size

    async def _embed(self, query: str) -> np.ndarray | None:
        return await query_vector(self.embedder, query)
