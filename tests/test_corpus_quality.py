"""The fusion's defaults pinned, loosely, on held-out queries: Cranfield written out as
files, indexed as ``searcher index add`` does, its held-out half of the queries run
through the ``local`` backend (bench/corpus_quality.py measures the rest). Hybrid must beat
its keyword half by a margin and its vector half outright; plain RRF with equal weights
(the first defaults) only tied the keywords here."""

from __future__ import annotations

import pytest

from tests.shared_data import REAL_MODEL, require_shared

# Cranfield held out: hybrid 0.358, keyword-only 0.349, vector-only 0.275 (bench figures).
MARGIN_OVER_KEYWORDS = 0.005


def test_hybrid_beats_each_half_on_held_out_cranfield(tmp_path):
    require_shared("data/cranfield")
    require_shared(REAL_MODEL)
    pytest.importorskip("ir_measures", reason="the eval extra (ir-measures) is not installed")
    from bench.corpus_quality import (
        STATIC_MODEL,
        backend_run,
        build_index,
        cranfield,
        index_settings,
        judged,
        queries_of,
        readers,
        score,
        split_queries,
    )
    from searcher.embedding.embedders import StaticEmbedder

    collection = cranfield()
    held_out = split_queries(judged(collection)).held_out
    settings = index_settings(tmp_path, "static")
    embedder = StaticEmbedder.load(str(STATIC_MODEL))
    build_index(collection, tmp_path, settings, embedder)
    found = {}
    for name, build in readers(settings).items():
        reader = build()
        rankings = backend_run(reader, collection.name, embedder, queries_of(collection, held_out))
        found[name] = score(rankings, held_out)
        reader.close()
    assert found["hybrid"] >= found["keyword-only"] + MARGIN_OVER_KEYWORDS, found
    assert found["hybrid"] > found["vector-only"], found
