"""Embedding for indexing inside the server (uploads), off the event loop.

The static model computes in place (``StaticEmbedder.embed`` runs on the loop: right for
a page of snippets, a few milliseconds). An upload embeds every chunk of every file it
sends: on the loop, that stalled each search meanwhile (p50 27 -> 108 ms, bench/uploads.py).
``IndexingEmbedder`` runs it in one worker thread of its own instead, with a
``StaticEmbedder`` of its own over the same model arrays (its own tokenizer and word
memory: nothing the searches' embedder mutates is shared across threads). Nor does it go
through the request cache: chunk texts are asked once and would only push out the
queries and snippets that recur.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from searcher.embedding.embedders import CachedEmbedder, Embedder, StaticEmbedder
from searcher.embedding.onnx_embedder import OnnxEmbedder
from searcher.errors import EmbedderUnavailable


class IndexingEmbedder:
    """``inner``'s ``encode`` in one worker thread (one batch at a time: bounded)."""

    def __init__(self, inner: StaticEmbedder) -> None:
        self.name = inner.name
        self.inner = StaticEmbedder(inner.model, inner.name)
        self._worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="index-embed")

    async def embed(self, texts: Sequence[str]) -> np.ndarray:
        """The rows of ``texts``, computed in the worker thread; ``EmbedderUnavailable``
        on any failure, as ``StaticEmbedder.embed``."""
        loop = asyncio.get_running_loop()
        try:
            return await loop.run_in_executor(self._worker, self.inner.encode, list(texts))
        except Exception as exc:  # a tokenizer or model failure, whatever its type
            raise EmbedderUnavailable(f"{self.name}: {type(exc).__name__}: {exc}") from exc

    def close(self) -> None:
        """Let the worker thread go."""
        self._worker.shutdown(wait=False)


def indexing_embedder(embedder: Embedder | None) -> Embedder | None:
    """The embedder indexing in the server should use for ``embedder`` (the server's):
    an in-process static model in its own worker thread; an ONNX model (always off the
    loop) in a worker thread apart from the searches'; any other (an HTTP endpoint,
    whose waiting is not the loop's work) as it is, without the request cache."""
    inner = embedder.inner if isinstance(embedder, CachedEmbedder) else embedder
    if isinstance(inner, StaticEmbedder):
        return IndexingEmbedder(inner)
    if isinstance(inner, OnnxEmbedder):
        return inner.for_indexing()
    return inner
