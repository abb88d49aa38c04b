"""Multi-hop evidence recall of research mode against one full-mode search.

HotpotQA dev (the first 103 questions, distractor setting) served on 127.0.0.1 as in
``bench/answer_recall.py``: each paragraph one page, a SearXNG-format search over them
(BM25, 5 results). For each question with a span answer:

- one search: full mode, 5 results, all 5 pages read; its evidence is the context pack;
- research with no LLM, per preset: its evidence is the numbered evidence passages.

Both are cut to the same character budget. A question counts when the pages of BOTH its
supporting paragraphs reach that evidence (their URLs are in it) and the answer string is
in it too. Questions are split by position (first half "dev", second half "test"); the
bridge ranking (searcher/research/bridge.py) was tuned on the dev half only, the test half
is held out — both halves are reported.

Then latency and cost per preset with the testbed's backends, with no LLM (the setting
measured above) and with a scripted model that answers in 200 ms: time to the first
event, total time, tool calls, pages read.

Harder conditions expose weaknesses the dev half no longer shows at the defaults:
``--budget`` (a smaller evidence cut), ``--results`` (fewer results per search of the
local web) and ``--halves dev`` with ``--misses`` (each dev question research missed, with
its follow-up queries). Misses are never printed for the held-out half.

Run: ``.venv/bin/python -m bench.research_recall [--presets minimal,balanced] [--limit N]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from bench import answer_recall
from bench.answer_recall import Question, _holds, build_app, hotpotqa, settings_for
from searcher.config import Settings
from searcher.contract import ResearchRequest, SearchRequest
from searcher.research.loop import Research
from searcher.runtime import open_service
from tests.testbed import TestbedServer
from tests.testbed.chat import script
from tests.testbed.server import ThreadedServer

BUDGET = 4000
RESULTS = 5


@dataclass
class Row:
    both_pages: bool
    answer: bool
    queries: tuple[str, ...] = ()  # research's follow-up queries (for --misses, dev only)
    failures: tuple[str, ...] = ()  # searches or reads that failed (a loaded machine's timeouts)

    @property
    def hit(self) -> bool:
        return self.both_pages and self.answer


def judge(evidence: str, question: Question, prefix: str) -> Row:
    urls = {f"{prefix}{pid}" for pid in question.gold_pages}
    both = len(question.gold_pages) >= 2 and all(
        f"{u}\n" in evidence or f"{u})" in evidence or f"{u} " in evidence for u in urls
    )
    return Row(both, _holds(evidence, question.answers))


def research_evidence(result: Any, budget: int = BUDGET) -> str:
    blocks = [f"[{p.n}] {p.title} ({p.url})\n{p.text}" for p in result.evidence or []]
    return "\n\n".join(blocks)[:budget]


async def one_search(service: Any, question: Question, budget: int = BUDGET) -> str:
    response = await service.search(
        SearchRequest.model_validate(
            {
                "query": question.text,
                "constraints": {"search_mode": "full"},
                "budget": {"max_results": RESULTS, "max_fetch_pages": RESULTS,
                           "max_context_chars": budget},
            }
        )
    )  # fmt: skip
    return str(response.rendered_text or "")


async def no_events(kind: str, data: dict[str, Any]) -> None:
    return None


def follow_ups(result: Any) -> tuple[str, ...]:
    return tuple(t.query for t in result.search_trace or [] if t.round > 1)


async def run_questions(
    settings: Settings, questions: Sequence[Question], prefix: str,
    presets: Sequence[str], concurrency: int, budget: int = BUDGET,
) -> dict[str, list[Row]]:  # fmt: skip
    rows: dict[str, list[Row]] = {"one search": [], **{f"research {p}": [] for p in presets}}
    gate = asyncio.Semaphore(concurrency)
    async with open_service(settings, extract_in_process=True, sweep=False) as runtime:
        service = runtime.service

        async def ask(question: Question) -> dict[str, Row]:
            async with gate:
                pack = await one_search(service, question, budget)
                found = {"one search": judge(pack, question, prefix)}
                for preset in presets:
                    request = ResearchRequest.model_validate(
                        {"query": question.text, "preset": preset}
                    )
                    result = await Research(request, service.parts, no_events).run()
                    row = judge(research_evidence(result, budget), question, prefix)
                    row.queries = follow_ups(result)
                    row.failures = tuple(f"{e.stage}: {e.kind or e.reason}" for e in result.errors)
                    found[f"research {preset}"] = row
                return found

        for found in await asyncio.gather(*(ask(q) for q in questions)):
            for name, row in found.items():
                rows[name].append(row)
    return rows


def share(rows: Sequence[Row], attr: str) -> str:
    return f"{sum(getattr(r, attr) for r in rows) / max(1, len(rows)):.3f}"


def _first_event_timer(first: list[float], started: float) -> Any:
    async def emit(kind: str, data: dict[str, Any]) -> None:
        if not first:
            first.append(time.perf_counter() - started)

    return emit


def _latency_settings(testbed: TestbedServer, with_model: bool) -> Settings:
    """Testbed backends, no cache; with ``with_model``, a scripted model that plans two
    sub-questions and writes a one-line cited report in 200 ms."""
    plan = json.dumps({"sub_questions": ["Google Stadia shutdown", "Microsoft xCloud games"]})
    llm = {"base_url": testbed.llm_url(), "model": script(status=503), "steps": {
        "research_plan": {"model": script(reply=plan, delay_ms=200)},
        "research_report": {"model": script(reply="Stadia closed [1].", delay_ms=200)},
    }}  # fmt: skip
    return Settings.model_validate({
        "backends": {"order": ["searxng"], "searxng": {"base_url": testbed.searxng_url()},
                     "duckduckgo": {"enabled": False}, "brave": {"enabled": False}},
        "fetch": {"allowed_hosts": [f"127.0.0.1:{testbed.port}"]},
        "service": {"cache": {"enabled": False}},
        "cache": {"enabled": False},  # no result cache: every request is computed
        "embeddings": {"provider": "none"},
        **({"llm": llm} if with_model else {}),
    })  # fmt: skip


async def latency(presets: Sequence[str], runs: int, with_model: bool) -> list[str]:
    """Time to first event, total time and cost per preset on the testbed's backends,
    with no LLM or with the scripted 200 ms model."""
    lines = []
    with TestbedServer() as testbed:
        settings = _latency_settings(testbed, with_model)
        async with open_service(settings, extract_in_process=True, sweep=False) as runtime:
            for preset in presets:
                firsts, totals, calls, pages = [], [], [], []
                for _ in range(runs):
                    started = time.perf_counter()
                    first: list[float] = []
                    emit = _first_event_timer(first, started)
                    request = ResearchRequest.model_validate(
                        {"query": "Google Stadia Microsoft xCloud cloud gaming", "preset": preset}
                    )
                    result = await Research(request, runtime.service.parts, emit).run()
                    totals.append(time.perf_counter() - started)
                    firsts.append(first[0])
                    calls.append(result.usage.tool_calls)
                    pages.append(result.usage.pages_read)
                lines.append(
                    f"{preset:<10} first event p50 {statistics.median(firsts) * 1000:6.0f} ms | "
                    f"total p50 {statistics.median(totals) * 1000:6.0f} ms | "
                    f"tool calls {statistics.median(calls):.0f} | "
                    f"pages {statistics.median(pages):.0f}"
                )
    return lines


def print_misses(questions: Sequence[Question], rows: dict[str, list[Row]]) -> None:
    """Each dev question a research preset missed: which criterion, and its follow-ups."""
    for name, got in rows.items():
        if not name.startswith("research"):
            continue
        for question, row in zip(questions, got, strict=True):
            if not row.hit:
                print(
                    f"  miss {name}: pages {row.both_pages} answer {row.answer} | "
                    f"{question.text} -> {question.answers[0]} | follow-ups {list(row.queries)}"
                    + (f" | failures {list(row.failures)}" if row.failures else "")
                )


async def main_async(args: argparse.Namespace) -> None:
    started = time.perf_counter()
    answer_recall.RESULTS = args.results  # the local web's results per search
    corpus, yes_no = hotpotqa()
    questions = corpus.questions[: args.limit] if args.limit else corpus.questions
    presets = args.presets.split(",")
    server = ThreadedServer(build_app({"hotpotqa": corpus})).start()
    host = f"127.0.0.1:{server.port}"
    prefix = f"{server.base_url}/hotpotqa/page/"
    half = len(questions) // 2
    halves = {"dev": questions[:half], "test": questions[half:]}
    halves = {name: qs for name, qs in halves.items() if name in args.halves.split(",")}
    try:
        settings = settings_for(f"{server.base_url}/hotpotqa", host)
        results = {
            name: await run_questions(settings, qs, prefix, presets, args.concurrency, args.budget)
            for name, qs in halves.items()
        }
    finally:
        server.stop()
    print(
        f"HotpotQA dev: {len(questions)} questions with a span answer ({yes_no} yes/no left "
        f"out), {len(corpus.titles)} pages; evidence cut to {args.budget} characters, "
        f"{args.results} results per search"
    )
    print("share of questions: both supporting pages reach the evidence | answer in it | both")
    for name, rows in results.items():
        print(f"-- {name} ({len(next(iter(rows.values())))} questions)")
        for what, got in rows.items():
            print(
                f"{what:<20} pages {share(got, 'both_pages')} | answer {share(got, 'answer')} "
                f"| both {share(got, 'hit')}"
            )
        failed = {w: sum(bool(r.failures) for r in got) for w, got in rows.items()}
        if any(failed.values()):
            print(f"   jobs with a failed search or read (timeouts?): {failed}")
        if args.misses and name == "dev":  # never the held-out half's questions
            print_misses(halves[name], rows)
    print()
    if args.runs:
        for with_model, what in ((False, "no LLM"), (True, "scripted 200 ms model")):
            print(f"latency and cost (testbed backends, {what}), medians:")
            for line in await latency(presets, args.runs, with_model):
                print(line)
    print(f"wall time {time.perf_counter() - started:.0f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--presets", default="minimal,balanced,enhanced")
    parser.add_argument("--limit", type=int, default=0, help="questions (0: all)")
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--runs", type=int, default=5, help="latency runs per preset (0: none)")
    parser.add_argument("--halves", default="dev,test", help="dev, test or dev,test")
    parser.add_argument("--budget", type=int, default=BUDGET, help="evidence cut (characters)")
    parser.add_argument("--results", type=int, default=RESULTS, help="results per search")
    parser.add_argument("--misses", action="store_true", help="list the dev half's misses")
    asyncio.run(main_async(parser.parse_args()))


if __name__ == "__main__":
    main()
