"""The LLM steps with a real small model (issue 31's figures): SmolLM2-135M-Instruct served
by llama-cpp-python on 127.0.0.1 (``tests/llama_server.py``; ``make test-llm`` installs it).

1. Per step, over the testbed's SearXNG (five queries): how often the model's result was
   used (else the fallback, with its reasons counted), its median latency, with the JSON
   Schema sent the way the server accepts it (``llm.structured_output: auto``) and without
   (``none``: the prompt alone asks for JSON).
2. Research on the held-out half of the HotpotQA questions (``bench/research_recall.py``'s
   split and measure: both supporting pages and the answer in the evidence; also the
   answer in the report), with this model and without an LLM, on a small sample.

Run: ``.venv/bin/python -m bench.llm_real [--questions 6]``.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import statistics
import time
from collections.abc import Sequence
from typing import Any

from bench.answer_recall import _holds, build_app, hotpotqa, settings_for
from bench.research_recall import Row, judge, research_evidence, share
from searcher.config import Settings
from searcher.contract import ResearchRequest, SearchRequest
from searcher.research.loop import Research
from searcher.runtime import open_service
from tests.llama_server import LlamaServer, llama_server
from tests.test_real_llm import QUERIES
from tests.testbed import TestbedServer
from tests.testbed.server import ThreadedServer

# What each row asks for, and the step of meta.llm it reads.
STEPS: dict[str, dict[str, Any]] = {
    "rewrite": {"constraints": {"rewrite": True}},
    "rank": {"constraints": {"rank": "llm"}},
    "multi_query": {"constraints": {"multi_query": 3}},
    "crag": {"constraints": {"crag": True}},
    "answer": {"want": {"answer": True}},
    "answer_check": {"want": {"answer": True, "answer_check": True}},
}


def llm_config(server: LlamaServer, structured: str) -> dict[str, Any]:
    return {
        "base_url": server.base_url,
        "model": server.model,
        "context_tokens": server.context_tokens,
        "timeout_s": 120,
        "structured_output": structured,
    }


def step_settings(testbed: TestbedServer, server: LlamaServer, structured: str) -> Settings:
    return Settings.model_validate({
        "backends": {"order": ["searxng"], "searxng": {"base_url": testbed.searxng_url()},
                     "duckduckgo": {"enabled": False}, "brave": {"enabled": False}},
        "embeddings": {"provider": "none"},
        "service": {"cache": {"enabled": False}},
        "cache": {"enabled": False},
        "limits": {"max_total_time_ms": 150_000},  # a loaded machine: quality, not speed
        "llm": llm_config(server, structured),
    })  # fmt: skip


def _reason_kind(reason: str | None) -> str:
    """A fallback reason, shortened to what went wrong."""
    text = (reason or "").removeprefix("invalid reply: ")
    return text.split(":")[0].split(" (")[0][:60]


async def step_figures(server: LlamaServer, structured: str) -> list[str]:
    lines = []
    with TestbedServer() as testbed:
        settings = step_settings(testbed, server, structured)
        async with open_service(settings, extract_in_process=True, sweep=False) as runtime:
            for step, body in STEPS.items():
                used, latencies, reasons = 0, [], collections.Counter[str]()
                for query in QUERIES:
                    request = SearchRequest.model_validate(
                        {"query": query, "budget": {"max_total_time_ms": 150_000}, **body}
                    )
                    response = await runtime.service.search(request)
                    for call in response.meta.llm or []:
                        if call.step == step:
                            used += not call.fallback_used
                            latencies.append(call.latency_ms)
                            if call.fallback_used:
                                reasons[_reason_kind(call.reason)] += 1
                p50 = statistics.median(latencies) if latencies else 0
                why = "; ".join(f"{n}x {r}" for r, n in reasons.most_common(2))
                lines.append(
                    f"{step:<13} {structured:<5} used {used}/{len(QUERIES)} | p50 {p50:6.0f} ms"
                    + (f" | fallback: {why}" if why else "")
                )
    return lines


async def research_rows(
    settings: Settings, questions: Sequence[Any], prefix: str
) -> tuple[list[Row], list[bool], list[float]]:
    rows, in_report, seconds = [], [], []
    async with open_service(settings, extract_in_process=True, sweep=False) as runtime:
        for question in questions:
            request = ResearchRequest.model_validate(
                {
                    "query": question.text,
                    "preset": "minimal",
                    "budget": {"max_total_time_ms": 60_000},
                }
            )
            started = time.perf_counter()
            result = await Research(request, runtime.service.parts, _no_events).run()
            seconds.append(time.perf_counter() - started)
            rows.append(judge(research_evidence(result), question, prefix))
            in_report.append(_holds(result.report or "", question.answers))
    return rows, in_report, seconds


async def _no_events(kind: str, data: dict[str, Any]) -> None:
    return None


async def research_figures(server: LlamaServer, count: int) -> list[str]:
    corpus, _ = hotpotqa()
    held_out = corpus.questions[len(corpus.questions) // 2 :][:count]
    app = ThreadedServer(build_app({"hotpotqa": corpus})).start()
    prefix = f"{app.base_url}/hotpotqa/page/"
    lines = [f"research, preset minimal, {len(held_out)} held-out HotpotQA questions:"]
    try:
        base = settings_for(f"{app.base_url}/hotpotqa", f"127.0.0.1:{app.port}")
        with_llm = base.model_copy(
            update={"llm": base.llm.model_validate(llm_config(server, "auto"))}
        )
        for name, settings in (("no LLM", base), ("SmolLM2-135M", with_llm)):
            rows, in_report, seconds = await research_rows(settings, held_out, prefix)
            lines.append(
                f"{name:<13} pages {share(rows, 'both_pages')} | answer in evidence "
                f"{share(rows, 'answer')} | both {share(rows, 'hit')} | answer in report "
                f"{sum(in_report)}/{len(in_report)} | p50 {statistics.median(seconds):.1f} s, "
                f"max {max(seconds):.1f} s"
            )
    finally:
        app.stop()
    return lines


async def main_async(args: argparse.Namespace) -> None:
    started = time.perf_counter()
    with llama_server() as server:
        print(f"SmolLM2-135M-Instruct, llama-cpp-python, n_ctx {server.context_tokens}")
        print("per step, 5 queries: model result used / latency / why the fallback")
        for structured in ("auto", "none"):
            for line in await step_figures(server, structured):
                print(line)
        for line in await research_figures(server, args.questions):
            print(line)
    print(f"wall time {time.perf_counter() - started:.0f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--questions", type=int, default=6, help="held-out questions")
    asyncio.run(main_async(parser.parse_args()))


if __name__ == "__main__":
    main()
