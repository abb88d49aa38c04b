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
from searcher.passages import select_passages
from searcher.render import PackItem, render_context_pack
from searcher.runtime import open_service
from tests.testbed import data_dir
from tests.testbed.server import ThreadedServer

BUDGETS = (2000, 4000, 8000)
RESULTS = 5
SNIPPET_CHARS = 200
MODES = ("simple", "head", "passages", "head-content", "passages-content")
MODE_NAMES = {
    "simple": "simple (snippets)",
    "head": "full, head of page",
    "passages": "full, passages",
    "head-content": "  contents only: head",
    "passages-content": "  contents: passages",
}
RATIOS = (("passages / head", "passages", "head"),
          ("  contents only", "passages-content", "head-content"))  # fmt: skip


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
                "searxng": {"base_url": base_url},
                "duckduckgo": {"enabled": False},
                "brave": {"enabled": False},
            },
            "embeddings": {"provider": "none"},
            "fetch": {"allowed_hosts": [host]},
            "service": {"cache": {"enabled": False}},
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
class Outcome:
    found: dict[tuple[str, int], bool]
    gold_in_results: bool
    answer_in_content: bool


async def ask(
    service: Any, question: Question, page_id: Callable[[str], int | None], seen: list[Sample]
) -> Outcome:
    found: dict[tuple[str, int], bool] = {}
    for budget in BUDGETS:
        simple = await service.search(
            SearchRequest.model_validate(
                {"query": question.text, "budget": {"max_results": RESULTS,
                                                    "max_context_chars": budget}}
            )
        )  # fmt: skip
        found["simple", budget] = holds_answer(simple.rendered_text or "", question.answers)
    full = await service.search(
        SearchRequest.model_validate(
            {
                "query": question.text,
                "constraints": {"search_mode": "full"},
                "budget": {"max_results": RESULTS, "max_fetch_pages": RESULTS},
            }
        )
    )
    items = [PackItem(i.title, i.url, i.snippet, i.content) for i in full.items or []]
    seen += [(question.text, item.content) for item in items if item.content]
    backend = full.meta.backend_used

    def passages(content: str, budget: int) -> str:
        return select_passages(question.text, content, budget)

    for budget in BUDGETS:
        for mode, select in (("head", None), ("passages", passages)):
            pack = render_context_pack(
                items, query=question.text, backend=backend, mode="full", max_chars=budget,
                select=select,
            )  # fmt: skip
            found[mode, budget] = holds_answer(pack, question.answers)
            found[f"{mode}-content", budget] = contents_hold_answer(pack, question.answers)
    pages = {page_id(i.url) for i in full.items or []}
    contents = " ".join(i.content or "" for i in full.items or [])
    return Outcome(
        found,
        gold_in_results=bool(question.gold_pages & pages),
        answer_in_content=_holds(contents, question.answers),
    )


async def run_corpus(
    corpus: Corpus, base: str, host: str, concurrency: int, seen: list[Sample]
) -> list[Outcome]:
    prefix = f"{base}/{corpus.name.lower()}/page/"

    def page_id(url: str) -> int | None:
        return int(url[len(prefix) :]) if url.startswith(prefix) else None

    async with open_service(settings_for(f"{base}/{corpus.name.lower()}", host)) as runtime:
        gate = asyncio.Semaphore(concurrency)

        async def one(question: Question) -> Outcome:
            async with gate:
                return await ask(runtime.service, question, page_id, seen)

        return await asyncio.gather(*(one(q) for q in corpus.questions))


# --- the report -----------------------------------------------------------------------------


def share(outcomes: Sequence[Outcome], key: tuple[str, int]) -> float:
    return sum(o.found[key] for o in outcomes) / max(len(outcomes), 1)


def table(results: dict[str, list[Outcome]]) -> str:
    names = list(results)
    head = f"{'max_context_chars':<22}" + "".join(
        f"| {f'{n} ({len(results[n])} q)':^23}" for n in names
    )
    budgets = "".join("| " + "".join(f"{b:>7}" for b in BUDGETS) + "  " for _ in names)
    lines = [head, f"{'':<22}{budgets}", "-" * len(head)]
    for mode in MODES:
        row = f"{MODE_NAMES[mode]:<22}"
        for n in names:
            row += "| " + "".join(f"{share(results[n], (mode, b)):>7.3f}" for b in BUDGETS) + "  "
        lines.append(row)
    for label, top, bottom in RATIOS:
        row = f"{label:<22}"
        for n in names:
            ratios = []
            for b in BUDGETS:
                base = share(results[n], (bottom, b))
                ratios.append(f"{share(results[n], (top, b)) / base:>6.2f}x" if base else "    n/a")
            row += "| " + "".join(ratios) + "  "
        lines.append(row)
    return "\n".join(lines)


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
    server = ThreadedServer(build_app(corpora)).start()
    host = f"127.0.0.1:{server.port}"
    seen: list[Sample] = []
    try:
        results = {
            corpus.name: await run_corpus(corpus, server.base_url, host, args.concurrency, seen)
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
        f"questions ({yes_no} yes/no left out) over {len(hotpot_corpus.titles)} paragraphs"
    )
    print()
    print(table(results))
    print()
    for name, outcomes in results.items():
        n = max(len(outcomes), 1)
        gold = sum(o.gold_in_results for o in outcomes) / n
        anywhere = sum(o.answer_in_content for o in outcomes) / n
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
