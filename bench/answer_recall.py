"""Answer recall of the context pack: is the gold answer in ``rendered_text``?

SQuAD v1.1 dev articles (each one page: title, h1, its paragraphs in order) and HotpotQA
dev paragraphs (each one page, titled by its title) are served on 127.0.0.1 with a
SearXNG-format ``/search`` over them (BM25 over whole pages, 5 results, the best-matching
sentence as a ~200-character snippet). Each question goes through searcher for real
(``open_service``, SearXNG backend, no cache) in simple mode and in full mode; the
full-mode items are then rendered at each budget twice: with the head of each page (the
renderer's default) and with query-focused passages (``select=select_passages``).

A question counts when a gold answer, normalised as SQuAD does (lower case, no
punctuation, no articles), appears on word boundaries in the pack's items (the request
echo is left out: it holds the question). HotpotQA's yes/no answers are not spans and are
left out. Run: ``.venv/bin/python -m bench.answer_recall``.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import html
import json
import random
import re
import statistics
import string
import time
import zipfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import bm25s
import Stemmer
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import Route

from searcher.config import Settings
from searcher.contract import SearchRequest
from searcher.embedding.embedders import Embedder, StaticEmbedder
from searcher.pack.cross_page import CrossPageAllotter, Similarity, passage_similarity
from searcher.pack.layout import EVIDENCE_HEAD_SHARE, PackItem, render_context_pack
from searcher.pack.passages import (
    CROSS_PAGE_FLOOR_SHARE,
    CROSS_PAGE_PASSAGE_CHARS,
    select_across_pages,
    select_passages,
)
from searcher.runtime import open_service
from tests.shared_data import shared_path
from tests.testbed import data_dir
from tests.testbed.server import ThreadedServer

BUDGETS = (800, 2000, 4000)
RESULTS = 5
SNIPPET_CHARS = 200
STATIC_MODEL = shared_path("models/minilm-static-256")


# --- the corpora ------------------------------------------------------------------------------


@dataclass
class Question:
    text: str
    answers: list[str]
    gold_pages: set[int]  # page ids that hold the answer (for the retrieval diagnostic)


@dataclass
class Corpus:
    """Pages (title, paragraphs) with a BM25 index over whole pages."""

    name: str
    titles: list[str]
    paragraphs: list[list[str]]
    questions: list[Question] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.stemmer = Stemmer.Stemmer("english")
        texts = [
            f"{t}\n" + "\n".join(ps) for t, ps in zip(self.titles, self.paragraphs, strict=True)
        ]
        tokens = bm25s.tokenize(texts, stopwords="en", stemmer=self.stemmer, show_progress=False)
        self.index = bm25s.BM25()
        self.index.index(tokens, show_progress=False)
        self.sentences = [_sentences(" ".join(ps)) for ps in self.paragraphs]

    def search(self, query: str) -> list[tuple[int, float]]:
        """The ``RESULTS`` best pages for ``query`` as (page id, score)."""
        tokens = bm25s.tokenize(
            [query], stopwords="en", stemmer=self.stemmer, return_ids=False, show_progress=False
        )
        known = [[t for t in tokens[0] if t in self.index.vocab_dict]]
        if not known[0]:
            return []
        k = min(RESULTS, len(self.titles))
        ids, scores = self.index.retrieve(known, k=k, show_progress=False)
        return [(int(i), float(s)) for i, s in zip(ids[0], scores[0], strict=True) if s > 0]

    def snippet(self, pid: int, query: str) -> str:
        """The page's sentence sharing most stemmed words with the query, cut to ~200."""
        wanted = set(self.stemmer.stemWords(_words(query)))
        best = max(
            self.sentences[pid] or [""],
            key=lambda s: len(wanted & set(self.stemmer.stemWords(_words(s)))),
        )
        if len(best) <= SNIPPET_CHARS:
            return best
        cut = best.rfind(" ", 0, SNIPPET_CHARS)
        return best[: cut if cut > 0 else SNIPPET_CHARS] + " ..."


_STOP = frozenset(bm25s.stopwords.STOPWORDS_EN)


def _words(text: str) -> list[str]:
    return [w for w in re.findall(r"\w+", text.lower()) if w not in _STOP]


def _sentences(text: str) -> list[str]:
    return [s.strip() for s in re.split(r"(?<=[.!?])\s+", text) if s.strip()]


def squad(sample: int, seed: int) -> Corpus:
    """The SQuAD dev articles and ``sample`` questions spread evenly over them."""
    with zipfile.ZipFile(data_dir() / "squad-v1.1-dev" / "dev-v1.1.json.zip") as archive:
        data = json.loads(archive.read("dev-v1.1.json"))["data"]
    corpus = Corpus(
        "SQuAD",
        [a["title"].replace("_", " ") for a in data],
        [[p["context"] for p in a["paragraphs"]] for a in data],
    )
    rng = random.Random(seed)
    per_article = []
    for pid, article in enumerate(data):
        qas = [qa for p in article["paragraphs"] for qa in p["qas"]]
        rng.shuffle(qas)
        per_article.append(
            [Question(qa["question"], [a["text"] for a in qa["answers"]], {pid}) for qa in qas]
        )
    rounds = 0
    while len(corpus.questions) < sample and any(per_article):
        for questions in per_article:  # round robin: every article gets its turn
            if rounds < len(questions) and len(corpus.questions) < sample:
                corpus.questions.append(questions[rounds])
        rounds += 1
    return corpus


def hotpotqa() -> tuple[Corpus, int]:
    """Every paragraph of the 103 HotpotQA questions as a page (one per title), and the
    questions with a span answer; also how many yes/no questions were left out."""
    path = data_dir() / "hotpotqa-dev-103" / "hotpot_dev_distractor_v1_first103.json"
    records = json.loads(path.read_text(encoding="utf-8"))
    titles: list[str] = []
    paragraphs: list[list[str]] = []
    ids: dict[str, int] = {}
    for record in records:
        for title, sentences in record["context"]:
            if title not in ids:
                ids[title] = len(titles)
                titles.append(title)
                paragraphs.append(["".join(sentences).strip()])
    corpus = Corpus("HotpotQA", titles, paragraphs)
    yes_no = 0
    for record in records:
        if record["answer"].lower() in ("yes", "no"):
            yes_no += 1
            continue
        gold = {ids[t] for t, _ in record["supporting_facts"] if t in ids}
        corpus.questions.append(Question(record["question"], [record["answer"]], gold))
    return corpus, yes_no


# --- the local web --------------------------------------------------------------------------


def page_html(title: str, paragraphs: Sequence[str]) -> str:
    body = "\n".join(f"<p>{html.escape(p)}</p>" for p in paragraphs)
    t = html.escape(title)
    return (
        f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{t}</title></head>"
        f"<body><article><h1>{t}</h1>\n{body}\n</article></body></html>"
    )


def build_app(corpora: dict[str, Corpus]) -> Starlette:
    """``/{corpus}/page/{id}`` pages and ``/{corpus}/search`` in SearXNG's JSON format."""

    async def page(request: Request) -> Response:
        corpus = corpora[request.path_params["corpus"]]
        pid = int(request.path_params["pid"])
        return HTMLResponse(page_html(corpus.titles[pid], corpus.paragraphs[pid]))

    async def search(request: Request) -> Response:
        name = request.path_params["corpus"]
        corpus, query = corpora[name], request.query_params.get("q", "")
        base = f"{request.url.scheme}://{request.url.netloc}/{name}/page"
        results = [
            {
                "url": f"{base}/{pid}",
                "title": corpus.titles[pid],
                "content": corpus.snippet(pid, query),
                "engine": "bm25",
                "engines": ["bm25"],
                "positions": [rank],
                "score": score,
                "category": "general",
            }
            for rank, (pid, score) in enumerate(corpus.search(query), start=1)
        ]
        return JSONResponse({"query": query, "results": results, "unresponsive_engines": []})

    return Starlette(
        routes=[
            Route("/{corpus}/search", search),
            Route("/{corpus}/page/{pid:int}", page),
        ]
    )


# --- asking searcher ------------------------------------------------------------------------


def settings_for(base_url: str, host: str) -> Settings:
    return Settings.model_validate(
        {
            "backends": {
                "order": ["searxng"],
                # Generous: a loaded machine must not turn searches into timeouts here.
                "searxng": {"base_url": base_url, "timeout_s": 60},
                "duckduckgo": {"enabled": False},
                "brave": {"enabled": False},
            },
            "embeddings": {"provider": "none"},
            "fetch": {"allowed_hosts": [host], "extract_timeout_s": 60},
            "service": {"cache": {"enabled": False}},
            "cache": {"enabled": False},  # no result cache: every request is computed
        }
    )


def _normalise(text: str) -> str:
    text = "".join(ch for ch in text.lower() if ch not in string.punctuation)
    return " ".join(re.sub(r"\b(a|an|the)\b", " ", text).split())


def items_of(pack: str) -> str:
    """The pack without its request echo (which holds the question) and its rules."""
    return pack.split("\n\n", 1)[-1].rsplit("\n\nRules:\n", 1)[0]


def holds_answer(pack: str, answers: Sequence[str]) -> bool:
    return _holds(items_of(pack), answers)


def contents_hold_answer(pack: str, answers: Sequence[str]) -> bool:
    """Whether the answer is in the ``Content:`` sections alone (not titles or snippets):
    what the choice of content adds."""
    return _holds("\n".join(ln for ln in pack.split("\n") if ln.startswith("     ")), answers)


def _holds(text: str, answers: Sequence[str]) -> bool:
    body = f" {_normalise(text)} "
    return any(f" {_normalise(a)} " in body for a in answers if _normalise(a))


Sample = tuple[str, str]  # (query, page content) as full mode returned it


@dataclass
class Record:
    """One question asked: the simple-mode finds, and the full-mode items to render."""

    question: Question
    dev: bool  # tuning split (every other question), else held out
    simple: dict[int, bool]
    items: list[PackItem]
    backend: str | None
    gold_in_results: bool
    answer_in_content: bool
    similarity: Similarity | None = None


async def ask(
    service: Any,
    question: Question,
    dev: bool,
    page_id: Callable[[str], int | None],
    seen: list[Sample],
    embedder: Embedder | None,
) -> Record:
    simple: dict[int, bool] = {}
    for budget in BUDGETS:
        response = await service.search(
            SearchRequest.model_validate(
                {"query": question.text, "budget": {"max_results": RESULTS,
                                                    "max_context_chars": budget}}
            )
        )  # fmt: skip
        simple[budget] = holds_answer(response.rendered_text or "", question.answers)
    full = await service.search(
        SearchRequest.model_validate(
            {
                "query": question.text,
                "constraints": {"search_mode": "full"},
                # Generous time: a loaded machine must not turn pages into timeouts here.
                "budget": {
                    "max_results": RESULTS,
                    "max_fetch_pages": RESULTS,
                    "max_total_time_ms": 60_000,
                    "per_request_timeout_ms": {"fetch": 30_000},
                },
            }
        )
    )
    items = [PackItem(i.title, i.url, i.snippet, i.content) for i in full.items or []]
    seen += [(question.text, item.content) for item in items if item.content]
    texts = [i.content for i in items if i.content]
    pages = {page_id(i.url) for i in full.items or []}
    contents = " ".join(i.content or "" for i in full.items or [])
    return Record(
        question,
        dev,
        simple,
        items,
        full.meta.backend_used,
        gold_in_results=bool(question.gold_pages & pages),
        answer_in_content=_holds(contents, question.answers),
        similarity=await passage_similarity(embedder, question.text, texts),
    )


# --- the ways of choosing content ---------------------------------------------------------------

Chooser = Callable[[Record], dict[str, Any]]  # record -> render_context_pack keyword arguments


def head(_: Record) -> dict[str, Any]:
    return {}


def per_page(record: Record) -> dict[str, Any]:
    """Yesterday's default: each page's fair share, filled with its own best passages."""
    query = record.question.text
    return {"select": lambda content, budget: select_passages(query, content, budget)}


def cross_page(
    size: int,
    floor: float,
    embeddings: bool = False,
    head_share: float | None = EVIDENCE_HEAD_SHARE,
) -> Chooser:
    """The service's choice: passages of all pages ranked together; with ``head_share``
    None, laid out as before issue 28 (every result's lines first, passages in what is
    left), else passages first (``evidence_head_share``)."""

    def choose(record: Record) -> dict[str, Any]:
        return {**chosen(record), "evidence_head_share": head_share}

    def chosen(record: Record) -> dict[str, Any]:
        query = record.question.text
        if embeddings or (size, floor) != (CROSS_PAGE_PASSAGE_CHARS, CROSS_PAGE_FLOOR_SHARE):

            def allot(contents: Sequence[str], budget: int) -> list[str]:
                sims = None
                if embeddings and record.similarity is not None:
                    sims = [record.similarity[c] for c in contents]
                picked = select_across_pages(
                    query, contents, budget, sims, size=size, floor_share=floor
                )
                return [p.text for p in picked]

            return {"allot": allot}
        return {"allot": CrossPageAllotter(query)}  # exactly what the service runs

    return choose


_STEMMER = Stemmer.Stemmer("english")


def bm25_paragraphs(record: Record) -> dict[str, Any]:
    """The plain baseline: every paragraph (non-blank line) of every fetched page scored by
    BM25 (bm25s, stemmed, stop words out) as one collection; the best taken while they fit
    (each joined by a blank line), shown per page in page order."""
    query = record.question.text

    def allot(contents: Sequence[str], budget: int) -> list[str]:
        paragraphs = [
            (p, k, line.strip())
            for p, content in enumerate(contents)
            for k, line in enumerate(content.split("\n"))
            if line.strip()
        ]
        if not paragraphs:
            return ["" for _ in contents]
        tokens = bm25s.tokenize(
            [t for _, _, t in paragraphs], stopwords="en", stemmer=_STEMMER, show_progress=False
        )
        index = bm25s.BM25()
        index.index(tokens, show_progress=False)
        asked = bm25s.tokenize(
            [query], stopwords="en", stemmer=_STEMMER, return_ids=False, show_progress=False
        )
        known = [t for t in asked[0] if t in index.vocab_dict]
        scores = index.get_scores(known) if known else [0.0] * len(paragraphs)
        order = sorted(range(len(paragraphs)), key=lambda i: (-float(scores[i]), i))
        used, kept = 0, []
        for i in order:
            cost = len(paragraphs[i][2]) + 2
            if used + cost <= budget:
                kept.append(i)
                used += cost
        shown: list[list[str]] = [[] for _ in contents]
        for i in sorted(kept):
            shown[paragraphs[i][0]].append(paragraphs[i][2])
        return ["\n\n".join(parts) for parts in shown]

    return {"allot": allot}


def found(record: Record, choose: Chooser, budget: int) -> bool:
    pack = render_context_pack(
        record.items, query=record.question.text, backend=record.backend, mode="full",
        max_chars=budget, **choose(record),
    )  # fmt: skip
    assert len(pack) <= budget
    return holds_answer(pack, record.question.answers)


async def run_corpus(
    corpus: Corpus,
    base: str,
    host: str,
    concurrency: int,
    seen: list[Sample],
    embedder: Embedder | None,
) -> list[Record]:
    prefix = f"{base}/{corpus.name.lower()}/page/"

    def page_id(url: str) -> int | None:
        return int(url[len(prefix) :]) if url.startswith(prefix) else None

    async with open_service(settings_for(f"{base}/{corpus.name.lower()}", host)) as runtime:
        gate = asyncio.Semaphore(concurrency)

        async def one(n: int, question: Question) -> Record:
            async with gate:
                return await ask(runtime.service, question, n % 2 == 0, page_id, seen, embedder)

        return await asyncio.gather(*(one(n, q) for n, q in enumerate(corpus.questions)))


# --- the report -----------------------------------------------------------------------------


def recall(records: Sequence[Record], choose: Chooser | None, budget: int) -> float:
    if choose is None:
        hits = sum(r.simple[budget] for r in records)
    else:
        hits = sum(found(r, choose, budget) for r in records)
    return hits / max(len(records), 1)


def table(results: dict[str, list[Record]], rows: Sequence[tuple[str, Chooser | None]]) -> str:
    names = list(results)
    head_line = f"{'max_context_chars':<34}" + "".join(
        f"| {f'{n} ({len(results[n])} q)':^23}" for n in names
    )
    budgets = "".join("| " + "".join(f"{b:>7}" for b in BUDGETS) + "  " for _ in names)
    lines = [head_line, f"{'':<34}{budgets}", "-" * len(head_line)]
    for label, choose in rows:
        row = f"{label:<34}"
        for n in names:
            row += "| " + "".join(f"{recall(results[n], choose, b):>7.3f}" for b in BUDGETS) + "  "
        lines.append(row)
    gold = f"{'target: 0.95 x gold page fetched':<34}"
    for n in names:
        share = sum(r.gold_in_results for r in results[n]) / max(len(results[n]), 1)
        gold += "| " + f"{0.95 * share:>21.3f}" + "  "
    lines.append(gold)
    return "\n".join(lines)


SIZES = (400, 600, 1000)
HEAD_SHARES = (None, 0.0, 0.1, 0.2, 0.3, 0.4, 0.5)
FLOORS = (0.0, 0.25, 0.5)


def tune(results: dict[str, list[Record]]) -> tuple[str, tuple[int, float]]:
    """Mean recall over both corpora and all budgets, on the dev split, for each passage
    size and floor share; and the best pair (ties: the first in the grid)."""
    dev = {n: [r for r in rs if r.dev] for n, rs in results.items()}
    lines = ["dev split: mean answer recall over corpora and budgets (cross-page, BM25)"]
    lines.append("size \\ floor " + "".join(f"{f:>8.2f}" for f in FLOORS))
    best, best_score = (SIZES[0], FLOORS[0]), -1.0
    for size in SIZES:
        row = f"{size:>12} "
        for floor in FLOORS:
            choose = cross_page(size, floor)
            score = statistics.mean(recall(rs, choose, b) for rs in dev.values() for b in BUDGETS)
            row += f"{score:>8.3f}"
            if score > best_score:
                best, best_score = (size, floor), score
        lines.append(row)
    lines.append(f"best on dev: size {best[0]}, floor share {best[1]} (defaults: "
                 f"{CROSS_PAGE_PASSAGE_CHARS}, {CROSS_PAGE_FLOOR_SHARE})")  # fmt: skip
    lines.append(
        "dev split: recall at 800 / 2,000 / 4,000 by the share of the budget the results' "
        "lines may take before passages are chosen (evidence_head_share)"
    )
    for share in HEAD_SHARES:
        choose = cross_page(CROSS_PAGE_PASSAGE_CHARS, CROSS_PAGE_FLOOR_SHARE, head_share=share)
        cells = "  ".join(
            " ".join(f"{recall(rs, choose, b):.3f}" for b in BUDGETS) for rs in dev.values()
        )
        lines.append(f"{share!s:>12}  {cells}")
    return "\n".join(lines), best


def _ms(run: Callable[[], object], repeat: int = 1) -> float:
    """The best of ``repeat`` timings of ``run``, in milliseconds."""
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - start)
    return best * 1000


def select_timing(seen: Sequence[Sample], corpus: Corpus, budget: int = 1000) -> str:
    """select_passages timed on one thread, after the run: on every (question, fetched
    content) pair that needs choosing, and on a 300,000-character page (SQuAD articles
    end to end)."""
    longer = [(q, c) for q, c in seen if len(c) > budget]  # the others come back whole
    times = sorted(_ms(functools.partial(select_passages, q, c, budget)) for q, c in longer)
    big = "\n\n".join(p for ps in corpus.paragraphs for p in ps)[:300_000]
    query = corpus.questions[0].text
    big_ms = _ms(lambda: select_passages(query, big, budget), repeat=5)
    if not times:
        return f"select_passages on a {len(big):,}-character page: {big_ms:.1f} ms"
    return (
        f"select_passages (budget {budget}) on the {len(times)} fetched contents longer than "
        f"that (longest {max(len(c) for _, c in longer):,} chars): "
        f"median {statistics.median(times):.2f} ms, "
        f"p90 {times[int(0.9 * (len(times) - 1))]:.2f} ms, max {times[-1]:.2f} ms; "
        f"on a {len(big):,}-character page: {big_ms:.1f} ms"
    )


async def main_async(args: argparse.Namespace) -> None:
    started = time.perf_counter()
    squad_corpus = squad(args.squad, args.seed)
    hotpot_corpus, yes_no = hotpotqa()
    corpora = {"squad": squad_corpus, "hotpotqa": hotpot_corpus}
    embedder: Embedder | None = None
    if STATIC_MODEL.is_dir():
        embedder = StaticEmbedder.load(str(STATIC_MODEL))
    server = ThreadedServer(build_app(corpora)).start()
    host = f"127.0.0.1:{server.port}"
    seen: list[Sample] = []
    try:
        results = {
            corpus.name: await run_corpus(
                corpus, server.base_url, host, args.concurrency, seen, embedder
            )
            for corpus in corpora.values()
        }
    finally:
        server.stop()
    print(
        f"answer recall: share of questions whose gold answer is in rendered_text "
        f"({RESULTS} results, full mode fetches all {RESULTS})"
    )
    print(
        f"SQuAD v1.1 dev: {len(squad_corpus.questions)} questions (seed {args.seed}) over "
        f"{len(squad_corpus.titles)} articles; HotpotQA dev: {len(hotpot_corpus.questions)} "
        f"questions ({yes_no} yes/no left out) over {len(hotpot_corpus.titles)} paragraphs; "
        f"every other question is the dev split, the rest held out"
    )
    print()
    grid, best = tune(results)
    print(grid)
    rows: list[tuple[str, Chooser | None]] = [
        ("simple (snippets)", None),
        ("full, head of page", head),
        ("full, passages per page (old)", per_page),
        ("baseline: best BM25 paragraphs", bm25_paragraphs),
        (
            "full, cross-page, lines first (old)",
            cross_page(CROSS_PAGE_PASSAGE_CHARS, CROSS_PAGE_FLOOR_SHARE, head_share=None),
        ),
        (
            "full, cross-page (service)",
            cross_page(CROSS_PAGE_PASSAGE_CHARS, CROSS_PAGE_FLOOR_SHARE),
        ),
    ]
    if best != (CROSS_PAGE_PASSAGE_CHARS, CROSS_PAGE_FLOOR_SHARE):
        rows.append((f"full, cross-page {best}", cross_page(*best)))
    if embedder is not None:
        embedded = cross_page(CROSS_PAGE_PASSAGE_CHARS, CROSS_PAGE_FLOOR_SHARE, True)
        rows.append(("  + static embeddings", embedded))
    for split, keep in (("HELD-OUT split", False), ("dev split", True)):
        print()
        print(split)
        print(table({n: [r for r in rs if r.dev == keep] for n, rs in results.items()}, rows))
    print()
    for name, records in results.items():
        n = max(len(records), 1)
        gold = sum(r.gold_in_results for r in records) / n
        anywhere = sum(r.answer_in_content for r in records) / n
        print(
            f"{name}: a gold page among the {RESULTS} results {gold:.3f}; "
            f"answer anywhere in the fetched contents (the ceiling of full mode) {anywhere:.3f}"
        )
    print(select_timing(seen, squad_corpus))
    print(f"wall time {time.perf_counter() - started:.0f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--squad", type=int, default=300, help="SQuAD questions sampled")
    parser.add_argument("--seed", type=int, default=13)
    parser.add_argument("--concurrency", type=int, default=8)
    asyncio.run(main_async(parser.parse_args()))


if __name__ == "__main__":
    main()
