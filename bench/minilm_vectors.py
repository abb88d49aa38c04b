"""all-MiniLM-L6-v2 vectors of the ranking collections' documents, computed once into the
bench cache (``bench/ranking_parts/engines.py``: ``CACHE_DIR``, keyed by the model file
and a digest of the texts) so that every bench that serves the MiniLM engine reads them.

Encoding SciFact (5,183 abstracts, 256 tokens each) takes about 0.14 s of CPU per document
here, so the documents are cut into chunks encoded by ``--workers`` single-threaded
processes (onnxruntime's own threads spin while waiting on a loaded machine). Each chunk
is saved as it is done: an interrupted run resumes where it stopped.

    .venv/bin/python -m bench.minilm_vectors [--workers 3]
"""

from __future__ import annotations

import argparse
import multiprocessing
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from bench import ranking_collections as rc
from bench.ranking_parts import engines as eng

CHUNK = 200


def _encode_chunk(job: tuple[Path, Sequence[str]]) -> Path:
    path, texts = job
    if not path.exists():
        encode, _ = eng.minilm_encoder(threads=1)
        partial = path.with_suffix(".partial")
        with open(partial, "wb") as out:
            np.save(out, encode(texts))
        partial.replace(path)
    return path


def compute(texts: Sequence[str], workers: int, cache_dir: Path = eng.CACHE_DIR) -> Path:
    """The cache file of ``texts`` (``eng.cached_vectors``' name), written if absent."""
    _, key = eng.minilm_encoder(threads=1)
    final = eng.vectors_path(cache_dir, key, texts)
    if final.exists():
        return final
    cache_dir.mkdir(parents=True, exist_ok=True)
    jobs = [
        (final.with_suffix(f".chunk{n:04d}.npy"), list(texts[start : start + CHUNK]))
        for n, start in enumerate(range(0, len(texts), CHUNK))
    ]
    started = time.perf_counter()
    with multiprocessing.get_context("spawn").Pool(workers) as pool:
        for done, path in enumerate(pool.imap(_encode_chunk, jobs), start=1):
            print(f"  {path.name} ({done}/{len(jobs)}, {time.perf_counter() - started:.0f} s)",
                  flush=True)  # fmt: skip
    vectors = np.concatenate([np.load(path) for path, _ in jobs])
    partial = final.with_suffix(".partial")
    with open(partial, "wb") as out:
        np.save(out, vectors)
    partial.replace(final)
    for path, _ in jobs:
        path.unlink()
    return final


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, default=3)
    args = parser.parse_args()
    missing = eng.minilm_missing()
    if missing:
        raise SystemExit(f"missing {', '.join(missing)}: {eng.MINILM_INSTALL}")
    # Cranfield first: it is a quarter of SciFact's work, so a short run has one done.
    for c in sorted(rc.load_all(), key=lambda c: len(c.docs)):
        path = compute([eng.full_text(d) for d in c.docs], args.workers)
        print(f"{c.name}: {len(c.docs)} documents -> {path}", flush=True)


if __name__ == "__main__":
    main()
