"""Issue 27, point 5: the per-query work done in numpy instead of Python loops must answer
what the loops answered. Fused chunks grouped into documents (``best_documents``) are
checked against the plain-Python grouping they replaced, with many ties and several
chunks summed; the shortlist's block-by-block product against the one-pass product, to
the bit; a chunk's stored terms against a plain count."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping

import numpy as np
import pytest

from searcher.corpus import retrieval, sparse
from searcher.corpus.base import ChunkRow, DocumentMatch


def reference_documents(
    fused: Mapping[int, float],
    owners: Mapping[int, tuple[str, int]],
    rows: Mapping[int, ChunkRow],
    max_documents: int,
    chunks_summed: int,
) -> list[DocumentMatch]:
    """The grouping as it was written before, loop by loop."""
    by_document: dict[tuple[str, int], list[int]] = {}
    for chunk_id in sorted(fused, key=lambda c: (-fused[c], c)):
        owner = owners.get(chunk_id)
        if owner is not None:
            by_document.setdefault(owner, []).append(chunk_id)
    scored = sorted(
        ((sum([fused[c] for c in chunks[:chunks_summed]]), chunks[:3])
         for chunks in by_document.values()),
        key=lambda pair: -pair[0],
    )  # fmt: skip
    if len(scored) > max_documents > 0:
        floor = scored[max_documents - 1][0]
        scored = [pair for pair in scored if pair[0] >= floor]
    matches = [
        DocumentMatch(score, tuple(rows[c] for c in chunks if c in rows))
        for score, chunks in scored
        if chunks[0] in rows
    ]
    matches.sort(key=lambda m: (-m.score, m.best.path, m.best.collection, m.best.ordinal))
    return matches[:max_documents]


def chunk_rows(owners: Mapping[int, tuple[str, int]]) -> dict[int, ChunkRow]:
    return {
        cid: ChunkRow(cid, doc, cid % 7, None, None, "t", f"/d/{doc % 5}.md", "T", "markdown", c)
        for cid, (c, doc) in owners.items()
    }


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("summed", [1, 2])
def test_best_documents_answer_what_the_loops_did(seed: int, summed: int) -> None:
    rng = np.random.default_rng(seed)
    chunks = int(rng.integers(1, 400))
    ids = rng.choice(10_000, size=chunks, replace=False).tolist()
    # Few distinct scores: ties between chunks and between documents everywhere.
    fused = {cid: float(rng.integers(0, 6)) / 7 for cid in ids}
    owners = {cid: (f"c{rng.integers(0, 2)}", int(rng.integers(0, 40))) for cid in ids}
    for cid in ids[:5]:  # chunks no document claims (dropped meanwhile)
        owners.pop(cid)
    rows = chunk_rows(owners)
    for cid in list(rows)[:3]:  # rows gone by the time they are read
        rows.pop(cid)
    for limit in (0, 1, 3, 10, 50):
        expected = reference_documents(fused, owners, rows, limit, summed)
        found = retrieval.documents_of(fused, owners, lambda _: rows, limit, summed)
        assert found == expected


def test_no_chunks_no_documents() -> None:
    assert retrieval.documents_of({}, {}, lambda _: {}, 10) == []


def test_shortlist_scores_block_by_block_equal_one_product() -> None:
    rng = np.random.default_rng(5)
    matrix = rng.standard_normal((5_000, 64)).astype(np.float32)
    query = rng.standard_normal(64).astype(np.float32)
    for size in (1, retrieval.GATHER_BLOCK, retrieval.GATHER_BLOCK * 3 + 17):
        rows = np.sort(rng.choice(5_000, size=size, replace=False))
        one_pass = np.einsum("ij,j->i", matrix[rows], query)
        assert np.array_equal(retrieval._gathered_scores(matrix, rows, query), one_pass)


def test_term_counts_count_every_kept_word() -> None:
    text = "Espresso, espresso and the grinder: grinders grind. A 2 b 42 espresso!"
    expected = Counter(sparse.term_id(t) for t in sparse.terms(text))
    pairs = sparse.term_counts(text)
    assert pairs["id"].tolist() == sorted(expected)
    assert pairs["count"].tolist() == [expected[i] for i in sorted(expected)]
    assert len(sparse.term_counts("the and of")) == 0
