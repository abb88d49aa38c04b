"""Text embedders: texts in, L2-normalised float32 rows out.

Two kinds: a static model2vec model in-process (a per-token lookup table, fast enough to
run inline on the request path) and any OpenAI-compatible ``/v1/embeddings`` endpoint
(Ollama's nomic-embed-text, vLLM, a hosted API). Either is wrapped in a ``CachedEmbedder``
(the ``embeddings.cache_size`` texts used last, across requests); within one request,
``RequestVectors`` makes sure a text is embedded once, whichever steps ask for it.
"""

from __future__ import annotations

import bisect
import copy
import itertools
import os
import re
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

import httpx
import numpy as np

from searcher.config import EmbeddingSettings
from searcher.embedding.local_static_model import load_local_static_model
from searcher.errors import EmbedderMisconfigured, EmbedderUnavailable


class Embedder(Protocol):
    """Anything that turns texts into unit vectors."""

    name: str

    async def embed(self, texts: Sequence[str]) -> np.ndarray:
        """``(len(texts), d)`` float32, rows of unit length (all-zero for a text with
        nothing to embed). Raise ``EmbedderUnavailable`` when no answer can be had."""
        ...


def normalise_rows(vectors: np.ndarray) -> np.ndarray:
    """Rows scaled to unit length, as float32; all-zero rows stay zero."""
    vectors = np.asarray(vectors, dtype=np.float32)
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    return np.divide(vectors, norms, out=np.zeros_like(vectors), where=norms > 0)


# --- model2vec, in-process ---------------------------------------------------------------

_LOCAL_OR_OFF = "set embeddings.model to a local model directory, or embeddings.provider: none"


def load_problem(model: str, exc: Exception, environ: Mapping[str, str]) -> str:
    """Why a model2vec model did not load, in one line, with the fix that applies: the
    hub libraries' own messages run to several sentences and advise HF_HUB_OFFLINE=1
    even when it is set."""
    offline = environ.get("HF_HUB_OFFLINE", "").lower() not in ("", "0", "false", "no")
    kind = type(exc).__name__
    if _looks_like_path(model):
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        return f"cannot load model2vec model {model!r}: {kind}: {first[:200]}"
    if offline:
        return (
            f"the embedding model {model!r} is not in the hub cache and HF_HUB_OFFLINE is "
            f"set: {_LOCAL_OR_OFF}"
        )
    if kind in _HUB_UNREACHABLE or "connect" in str(exc).lower():
        return (
            f"cannot reach the model hub for the embedding model {model!r} (no network?): "
            f"{_LOCAL_OR_OFF}, or HF_HUB_OFFLINE=1 if it is in the hub cache"
        )
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"cannot load model2vec model {model!r}: {kind}: {first[:200]} (embeddings.model)"


# huggingface_hub's errors for "the hub could not be asked and the cache lacks the model".
_HUB_UNREACHABLE = frozenset({"LocalEntryNotFoundError", "ConnectError", "ConnectionError"})

# Distinct words remembered with their token ids (a few hundred bytes each).
_WORD_CACHE_SIZE = 100_000
# Where a BERT tokenizer splits words: what its normaliser keeps and then counts as
# whitespace (space, tab, newline, carriage return, Unicode Zs, line and paragraph
# separators). str.split() also splits at some control characters, which BERT deletes.
_BERT_SPACE = re.compile("[\t\n\r \u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]+")
_SURROGATE = re.compile("[\ud800-\udfff]")
_SPLIT_DIFFERS = re.compile("[\x0b\x0c\x1c-\x1f\x85]")


def _words(text: str) -> list[str]:
    """The words a BERT tokenizer sees in ``text`` (before it splits off punctuation)."""
    if _SPLIT_DIFFERS.search(text) is None:  # nearly always: the faster str.split() agrees
        return text.split()
    return [word for word in _BERT_SPACE.split(text) if word]


class StaticEmbedder:
    """A model2vec ``StaticModel``: the mean of per-token vectors.

    Tokenising is most of the cost: the Rust tokenizer costs ~15 us a call plus ~2 us a
    word here, and model2vec's own ``encode`` takes ~5 ms for 36 snippets, half the 10 ms
    budget of fusion (bench/fusion_overhead.py). Its pre-tokenizer splits on whitespace
    before anything else, so this embedder remembers each word's token ids and tokenises
    only the words it has not seen, all of them in one call. Words recur across results
    and requests: 36 snippets then take ~1 ms when their words are known, ~2.5 ms with a
    sixth of them new. The vectors equal ``StaticModel.encode``'s (tested)."""

    def __init__(self, model: Any, name: str) -> None:
        self.name = name
        self.model = model  # the model2vec StaticModel
        self._max_tokens: int | None = model.max_length
        # Models with vocabulary quantisation or token weights take model2vec's own path.
        self._fast = model.token_mapping is None and model.weights is None
        # A copy that does not truncate: unknown words are tokenised as one long string.
        self._tokenizer = copy.deepcopy(model.tokenizer)
        self._tokenizer.no_truncation()
        self._word_ids: dict[str, tuple[int, ...]] = {}
        self._int16_tokens = _int16_safe_tokens(model.embedding)

    @classmethod
    def load(cls, model: str) -> StaticEmbedder:
        """Load a model2vec model from a local directory or by hub name (needs internet,
        or the model in the local hub cache). Raises ``EmbedderUnavailable``."""
        try:
            # Imported here: it takes a moment, and only this provider needs it.
            from model2vec import StaticModel
        except ImportError as exc:
            raise EmbedderMisconfigured(f"model2vec is not installed ({exc})") from exc
        if _looks_like_path(model) and not Path(model).expanduser().is_dir():
            raise EmbedderMisconfigured(
                f"model2vec model {model!r} (embeddings.model): no such directory"
            )
        try:
            # A local directory is read without huggingface_hub when it can be
            # (local_static_model.py); force_download=False: a model already in the hub
            # cache loads offline.
            local = Path(model).expanduser() if _looks_like_path(model) else None
            loaded = (load_local_static_model(local) if local else None) or (
                StaticModel.from_pretrained(str(local or model), force_download=False)
            )
        except Exception as exc:  # hub, network and file errors of many kinds
            raise EmbedderMisconfigured(load_problem(model, exc, os.environ)) from exc
        return cls(loaded, name=f"model2vec:{model}")

    async def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Encoded inline, on the event loop: a few milliseconds for a page of results,
        and a worker thread would add a hop while holding the GIL for most of it. Any
        failure is ``EmbedderUnavailable``, as from the HTTP embedder: the steps that use
        vectors leave them out rather than fail the request."""
        try:
            return self.encode(texts)
        except Exception as exc:  # a tokenizer or model failure, whatever its type
            raise EmbedderUnavailable(f"{self.name}: {type(exc).__name__}: {exc}") from exc

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """``(len(texts), d)`` float32 unit rows; zero rows for texts without tokens.
        (Vectors are remembered by ``CachedEmbedder``, not here.)"""
        if not texts:
            return np.zeros((0, self.model.embedding.shape[1]), dtype=np.float32)
        return self._encode(texts)

    def _encode(self, texts: Sequence[str]) -> np.ndarray:
        if not self._fast:
            return normalise_rows(self.model.encode(list(texts)))
        words = [_words(text) for text in texts]
        self._learn(list(dict.fromkeys(itertools.chain.from_iterable(words))))
        known = self._word_ids
        rows = [list(itertools.chain.from_iterable(map(known.__getitem__, ws))) for ws in words]
        if self._max_tokens is not None:
            rows = [ids[: self._max_tokens] for ids in rows]
        # One gather for all texts, then a sum over each text's slice of it.
        table = self.model.embedding
        gathered = table[np.fromiter(itertools.chain.from_iterable(rows), dtype=np.intp)]
        out = np.zeros((len(texts), table.shape[1]), dtype=np.float32)
        start = 0
        for row, ids in enumerate(rows):
            # Summing instead of averaging: the same direction, and rows are normalised.
            tokens = gathered[start : start + len(ids)]
            if len(ids) > self._int16_tokens:
                tokens.sum(axis=0, dtype=np.float32, out=out[row])
            elif ids:
                # An int8 table's rows summed in int16 (a third faster than into float32
                # here) cannot overflow this short, and equal the float32 sums exactly.
                out[row] = tokens.sum(axis=0, dtype=np.int16)
            start += len(ids)
        return normalise_rows(out)

    def _learn(self, needed: list[str]) -> None:
        """Make sure every word of ``needed`` (distinct) has its ids: tokenise the unknown
        ones in one call, each token going to the word its offset falls in."""
        words = [w for w in needed if w not in self._word_ids]
        if not words:
            return
        if len(self._word_ids) + len(words) > _WORD_CACHE_SIZE:
            # Full: forget all but the words this call needs (rare; simpler and cheaper
            # than tracking recency). Forgetting those too failed the call's look-ups.
            self._word_ids = {w: self._word_ids[w] for w in needed if w in self._word_ids}
        joined = " ".join(words)
        # The tokenizer refuses lone surrogates (broken UTF-16 from some source); one
        # character for one keeps the offsets right.
        joined = _SURROGATE.sub("\ufffd", joined)
        encoding = self._tokenizer.encode(joined, add_special_tokens=False)
        starts = list(itertools.accumulate((len(w) + 1 for w in words[:-1]), initial=0))
        ids: list[list[int]] = [[] for _ in words]
        unknown = self.model.unk_token_id
        for token, (begin, _) in zip(encoding.ids, encoding.offsets, strict=True):
            if token != unknown:
                ids[bisect.bisect_right(starts, begin) - 1].append(token)
        self._word_ids.update(zip(words, map(tuple, ids), strict=True))


def _int16_safe_tokens(table: np.ndarray) -> int:
    """How many rows of an int8 ``table`` always sum without overflow in int16 (0 for
    any other table). Their float32 sums are exact too (integers far below 2**24), so the
    int16 sum is the same vector, bit for bit."""
    if table.dtype != np.int8 or table.size == 0:
        return 0
    largest = max(-int(table.min()), int(table.max()), 1)
    return int(np.iinfo(np.int16).max) // largest


def _looks_like_path(model: str) -> bool:
    return model.startswith(("/", "./", "../", "~")) or Path(model).is_dir()


# --- OpenAI-compatible endpoint ----------------------------------------------------------


class OpenAIEmbedder:
    """``POST {base_url}/embeddings`` of an OpenAI-compatible server."""

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key: str | None = None,
        timeout_s: float = 5.0,
        client: httpx.AsyncClient | None = None,
    ) -> None:
        self.name = f"openai:{model}"
        self._url = base_url.rstrip("/") + "/embeddings"
        self._model = model
        self._headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._timeout = timeout_s
        self._client = client
        self._owns_client = client is None

    async def embed(self, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, 0), dtype=np.float32)
        body = {"model": self._model, "input": list(texts)}
        try:
            response = await self._http().post(
                self._url, json=body, headers=self._headers, timeout=self._timeout
            )
        except httpx.TimeoutException as exc:
            raise EmbedderUnavailable(f"{self._url}: timed out after {self._timeout}s") from exc
        except httpx.HTTPError as exc:
            raise EmbedderUnavailable(f"{self._url}: {type(exc).__name__}: {exc}") from exc
        if response.status_code != 200:
            raise EmbedderUnavailable(f"{self._url}: HTTP {response.status_code}")
        try:
            return normalise_rows(parse_embeddings(response.json(), len(texts)))
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            raise EmbedderUnavailable(f"{self._url}: unusable answer ({exc})") from exc

    async def __aenter__(self) -> OpenAIEmbedder:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the HTTP client if this embedder made it."""
        if self._client is not None and self._owns_client:
            await self._client.aclose()
            self._client = None

    def _http(self) -> httpx.AsyncClient:
        if self._client is None:
            self._client = httpx.AsyncClient()
        return self._client


def parse_embeddings(data: Any, expected: int) -> np.ndarray:
    """The ``(expected, d)`` matrix of an OpenAI embeddings answer, rows in input order.
    Raises ``ValueError`` when the answer is not one."""
    rows = data["data"]
    if not isinstance(rows, list) or len(rows) != expected:
        raise ValueError(f"expected {expected} embeddings, got {len(rows)}")
    # The spec gives each row its input index; servers are allowed to reorder.
    ordered = sorted(rows, key=lambda row: row.get("index", 0))
    matrix = np.array([row["embedding"] for row in ordered], dtype=np.float32)
    if matrix.ndim != 2 or matrix.shape[1] == 0 or not np.isfinite(matrix).all():
        raise ValueError(f"embeddings are not a matrix of numbers (shape {matrix.shape})")
    return matrix


# --- vectors remembered ------------------------------------------------------------------


def _rows_for(name: str, fresh: np.ndarray, count: int) -> np.ndarray:
    """``fresh`` when it holds one row per text asked; ``EmbedderUnavailable`` otherwise
    (rows cannot be told apart, so none can be remembered)."""
    fresh = np.asarray(fresh)
    if fresh.ndim != 2 or fresh.shape[0] != count:
        raise EmbedderUnavailable(f"{name}: gave shape {fresh.shape} for {count} texts")
    return fresh


class CachedEmbedder:
    """An embedder whose vectors are remembered across requests: the ``size`` texts used
    most recently (least recently used forgotten first). Near-duplicate removal and the
    hybrid stage read the same titles and snippets, and popular results and queries
    recur; a hit costs a dict look-up where the static model costs ~30 us a text and an
    HTTP embedder a round trip. A 256-d float32 row is 1 KB: 4,096 texts hold ~4 MB.
    ``hits`` and ``misses`` count texts (a text asked twice in one call counts once)."""

    def __init__(self, inner: Embedder, size: int) -> None:
        self.name = inner.name
        self.inner = inner
        self.size = size
        self.hits = 0
        self.misses = 0
        self._vectors: OrderedDict[str, np.ndarray] = OrderedDict()

    async def embed(self, texts: Sequence[str]) -> np.ndarray:
        """The rows of ``texts``; only those not remembered are asked of the inner
        embedder, in one call."""
        if not texts:
            return await self.inner.embed(texts)
        known = self._vectors
        rows: dict[str, np.ndarray] = {}
        for text in dict.fromkeys(texts):
            row = known.get(text)
            if row is not None:
                known.move_to_end(text)
                rows[text] = row
        new = [t for t in dict.fromkeys(texts) if t not in rows]
        self.hits += len(rows)
        self.misses += len(new)
        if new:
            fresh = _rows_for(self.name, await self.inner.embed(new), len(new))
            for text, row in zip(new, fresh, strict=True):
                rows[text] = row
                known[text] = row
            while len(known) > self.size:
                known.popitem(last=False)
        return np.stack([rows[t] for t in texts])

    async def aclose(self) -> None:
        """Close the inner embedder's HTTP client, if it has one."""
        close = getattr(self.inner, "aclose", None)
        if close is not None:
            await close()


class RequestVectors:
    """One request's vectors, by text: each text the request's steps embed (near-duplicate
    removal, then the hybrid stage, with the query) is asked of ``embedder`` once, however
    small its cache or however many steps ask. Lives as long as the request."""

    def __init__(self, embedder: Embedder) -> None:
        self.name = embedder.name
        self.embedder = embedder
        self._vectors: dict[str, np.ndarray] = {}

    async def embed(self, texts: Sequence[str]) -> np.ndarray:
        """The rows of ``texts``, embedding those this request has not seen yet."""
        if not texts:
            return await self.embedder.embed(texts)
        known = self._vectors
        new = [t for t in dict.fromkeys(texts) if t not in known]
        if new:
            fresh = _rows_for(self.name, await self.embedder.embed(new), len(new))
            known.update(zip(new, fresh, strict=True))
        return np.stack([known[t] for t in texts])


# --- from settings -------------------------------------------------------------------------


def build_embedder(settings: EmbeddingSettings) -> Embedder | None:
    """The configured embedder, remembering ``embeddings.cache_size`` texts' vectors;
    None when switched off. Raises ``EmbedderUnavailable`` when it cannot be had (the
    reason says why)."""
    if settings.provider == "none":
        return None
    inner: Embedder
    if settings.provider == "openai":
        if not settings.base_url:
            raise EmbedderMisconfigured(
                "embeddings.base_url is required for embeddings.provider openai"
            )
        inner = OpenAIEmbedder(
            settings.base_url, settings.model, settings.api_key, settings.timeout_s
        )
    elif settings.provider == "onnx":
        # Imported here: its module is small, but onnxruntime (an extra) is only its own.
        from searcher.embedding.onnx_embedder import OnnxEmbedder

        inner = OnnxEmbedder.load(settings.model)
    else:
        inner = StaticEmbedder.load(settings.model)
    return CachedEmbedder(inner, settings.cache_size) if settings.cache_size else inner
