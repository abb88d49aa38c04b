"""Issue 27, point 5: indexing inside the server (uploads) embeds off the event loop, so
searches go on being answered meanwhile; the vectors are the model's own."""

from __future__ import annotations

import asyncio

import numpy as np

from searcher.embedding.embedders import CachedEmbedder, StaticEmbedder
from searcher.embedding.off_loop import IndexingEmbedder, indexing_embedder
from tests.conftest import STATIC_MODEL

TEXTS = [f"Chunk {n}: the heron fishes at dawn by the reeds of pond {n}." for n in range(300)]


def loop_is_free_while_embedding(embedder: object) -> tuple[bool, np.ndarray]:
    """Whether the loop ran another step before ``embedder.embed`` was done. A step
    scheduled after the embedding started runs first only if the embedding waits on
    something outside the loop: inline, it runs to its end in its own step."""

    async def go() -> tuple[bool, np.ndarray]:
        task = asyncio.create_task(embedder.embed(TEXTS))  # type: ignore[attr-defined]
        await asyncio.sleep(0)  # one step: the task's first, then this one
        free = not task.done()
        return free, await task

    return asyncio.run(go())


def test_uploads_embed_in_a_worker_thread_with_the_models_vectors():
    served = CachedEmbedder(StaticEmbedder.load(str(STATIC_MODEL)), 64)
    off = indexing_embedder(served)
    assert isinstance(off, IndexingEmbedder) and off.name == served.name
    inline_free, inline = loop_is_free_while_embedding(served.inner)
    off_free, vectors = loop_is_free_while_embedding(off)
    assert (inline_free, off_free) == (False, True)
    assert np.array_equal(vectors, inline)
    assert served.misses == 0  # chunk texts do not go through the searches' cache
    off.close()


def test_an_embedder_with_nothing_to_compute_in_place_is_used_as_it_is():
    assert indexing_embedder(None) is None
