"""The LLM steps with a real small model (issue 31's figures): SmolLM2-135M-Instruct served
on 127.0.0.1 by llama.cpp's server (xllamacpp) or llama-cpp-python's
(``tests/llama_server.py``; ``make test-llm`` installs the first).

1. Per step, over the testbed's SearXNG (``--queries``, five by default): the share of
   replies that were valid (readable and in shape: used, or refused only by the checks on
   their content), how often the model's result was used (else the fallback, its reasons
   counted), the median latency; with the JSON Schema sent the way the server accepts it
   (``llm.structured_output: auto``) and without (``none``: the prompt alone asks for
   JSON). The research planner is asked directly (one call a question); the report's row
   comes from the research jobs of part 2.
2. Research on the held-out half of the HotpotQA questions (``bench/research_recall.py``'s
   split and measure: both supporting pages and the answer in the evidence; also the
   answer in the report), with this model and without an LLM, on ``--questions`` of them.

Bounded: every call has ``--call-timeout``, every search ``--search-budget`` (its
deadline) and every job a 60 s budget, each also cut off from outside a little later; past
``--max-minutes`` (13) nothing new starts and the output says what was left out, so a
run ends within about 15 minutes. The default sample took 10 minutes on 2 idle cores
(~50 tokens/s; figures in docs/llm.md).

Run: ``.venv/bin/python -m bench.llm_real [--questions 8] [--queries 5]``.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import enum
import statistics
import time
from collections.abc import Awaitable, Sequence
from dataclasses import dataclass
from datetime import date
from typing import Any, TypeVar

import httpx

from bench.answer_recall import _holds, build_app, hotpotqa, settings_for
from bench.research_recall import Row, judge, research_evidence, share
from searcher.config import LlmSettings, Settings
from searcher.contract import ResearchRequest, SearchRequest
from searcher.llm.client import LlmClient
from searcher.llm.runner import CallRecord, StepRunner
from searcher.pipeline.resilience import CallBudget, Deadline
from searcher.research.loop import Research
from searcher.research.planning import llm_questions
from searcher.runtime import open_service
from tests.llama_server import LlamaServer, llama_server
from tests.test_real_llm import QUERIES
from tests.testbed import TestbedServer
from tests.testbed.server import ThreadedServer

T = TypeVar("T")

# What each search asks for; its row reads that step's entry of meta.llm.
SEARCH_STEPS: dict[str, dict[str, Any]] = {
    "rewrite": {"constraints": {"rewrite": True}},
    "rank": {"constraints": {"rank": "llm"}},
    "multi_query": {"constraints": {"multi_query": 3}},
    "crag": {"constraints": {"crag": True}},
    "answer": {"want": {"answer": True}},
    "answer_check": {"want": {"answer": True, "answer_check": True}},
}
FORMS = ("auto", "none")
RESEARCH_BUDGET_MS = 60_000
# Beyond its own deadline, how long a search or job may run before it is cut off here.
GRACE_S = 30.0
# The longest wait for the model server to finish replies nobody waits for any more.
DRAIN_S = 600.0
# Reasons of a reply the content checks refused (it was readable and in shape).
CHECK_REFUSALS = (
    "the rewrite is not searched",
    "the model refused",
    "no perspective usable",
    "no sub-question on the question's subject",
    "graded CORRECT, but",
    "the answer cites no item",
)


class Kind(enum.Enum):
    """What became of one step's call."""

    USED = "used"
    CHECKED = "refused by a check"  # valid, but its content refused
    MALFORMED = "malformed"
    CUT = "cut at max_tokens"
    NO_REPLY = "no reply"  # timeout, HTTP error, deadline, budget, not sent


@dataclass(frozen=True)
class Outcome:
    kind: Kind
    latency_ms: int
    reason: str  # shortened; empty when used


def short(reason: str | None) -> str:
    """A fallback reason, shortened to what went wrong."""
    text = (reason or "").removeprefix("invalid reply: ")
    return text.split(":")[0].split(" (")[0].split(", ")[0][:60]


def outcome_of(record: CallRecord, refusal: str | None = None) -> Outcome:
    """``record`` classified; ``refusal``: why the caller dropped a reply the step took
    (an answer that cites nothing)."""
    reason = record.reason or ""
    if not record.fallback_used and refusal is None:
        return Outcome(Kind.USED, record.latency_ms, "")
    if refusal is not None or any(r in reason for r in CHECK_REFUSALS):
        kind = Kind.CHECKED
    elif reason.startswith("reply cut off at max_tokens"):
        kind = Kind.CUT
    elif reason.startswith("invalid reply"):
        kind = Kind.MALFORMED
    else:
        kind = Kind.NO_REPLY
    return Outcome(kind, record.latency_ms, short(refusal or reason))


def table_row(step: str, form: str, outcomes: Sequence[Outcome]) -> str:
    """One markdown row: step, form, valid, used, median latency, fallback reasons."""
    n = len(outcomes)
    used = sum(o.kind is Kind.USED for o in outcomes)
    valid = used + sum(o.kind is Kind.CHECKED for o in outcomes)
    p50 = statistics.median(o.latency_ms for o in outcomes) if outcomes else 0
    reasons = collections.Counter(f"{o.kind.value}: {o.reason}" for o in outcomes if o.reason)
    why = "; ".join(f"{count}x {text}" for text, count in reasons.most_common(3)) or "-"
    return f"| {step} | {form} | {valid}/{n} | {used}/{n} | {p50:.0f} | {why} |"


class Clock:
    """The run's time limit: past it nothing new starts."""

    def __init__(self, minutes: float) -> None:
        self.end = time.monotonic() + minutes * 60
        self.skipped: list[str] = []

    def left(self, what: str) -> bool:
        if time.monotonic() < self.end:
            return True
        self.skipped.append(what)
        return False


async def bounded(work: Awaitable[T], seconds: float) -> T | None:
    """``work``'s result, or None when it outlives ``seconds`` (then it is cancelled)."""
    try:
        async with asyncio.timeout(seconds):
            return await work
    except TimeoutError:
        return None


async def drain(server: LlamaServer, seconds: float) -> None:
    """Wait until the server is done with what calls that gave up left it: llama-cpp-python
    serves one call at a time and goes on writing a reply nobody waits for, so the next
    step's call would queue behind it and time out too. A one-token call returns after."""
    body = {"model": server.model, "messages": [{"role": "user", "content": "hi"}]}
    async with httpx.AsyncClient(timeout=seconds) as client:
        with contextlib.suppress(httpx.HTTPError):
            await client.post(f"{server.base_url}/chat/completions", json={**body, "max_tokens": 1})


def llm_config(server: LlamaServer, form: str, call_timeout_s: float) -> dict[str, Any]:
    return {
        "base_url": server.base_url,
        "model": server.model,
        "context_tokens": server.context_tokens,
        "timeout_s": call_timeout_s,
        "structured_output": form,
    }


def step_settings(
    testbed: TestbedServer, server: LlamaServer, form: str, args: argparse.Namespace
) -> Settings:
    return Settings.model_validate({
        "backends": {"order": ["searxng"], "searxng": {"base_url": testbed.searxng_url()},
                     "duckduckgo": {"enabled": False}, "brave": {"enabled": False}},
        "embeddings": {"provider": "none"},
        "service": {"cache": {"enabled": False}},
        "cache": {"enabled": False},
        "limits": {"max_total_time_ms": int(args.search_budget * 1000)},
        "llm": llm_config(server, form, args.call_timeout),
    })  # fmt: skip


def not_asked(response: Any, step: str) -> Outcome:
    """A search that never called the step (the answer check when there is no answer to
    check): why, from its error entry."""
    reason = next((e.reason for e in response.meta.errors if e.stage == step), "")
    return Outcome(Kind.NO_REPLY, 0, f"not asked{': ' + reason if reason else ''}")


def search_outcome(response: Any, step: str) -> Outcome | None:
    """The step's call in one search response (None if it made none)."""
    calls = [c for c in response.meta.llm or [] if c.step == step]
    if not calls:
        return None
    record = CallRecord(**calls[0].model_dump())
    refusal = None
    if step == "answer" and not record.fallback_used and response.answer is None:
        refusal = next((e.reason for e in response.meta.errors if "cite" in e.reason), "dropped")
    return outcome_of(record, refusal)


async def search_rows(
    server: LlamaServer, form: str, queries: Sequence[str], args: argparse.Namespace, clock: Clock
) -> dict[str, list[Outcome]]:
    found: dict[str, list[Outcome]] = {step: [] for step in SEARCH_STEPS}
    budget = {"max_total_time_ms": int(args.search_budget * 1000)}
    with TestbedServer() as testbed:
        settings = step_settings(testbed, server, form, args)
        async with open_service(settings, extract_in_process=True, sweep=False) as runtime:
            for step, body in SEARCH_STEPS.items():
                for query in queries if step in args.steps else ():
                    if not clock.left(f"{step} ({form}): {query!r}"):
                        continue
                    request = SearchRequest.model_validate(
                        {"query": query, "budget": budget, **body}
                    )
                    response = await bounded(
                        runtime.service.search(request), args.search_budget + GRACE_S
                    )
                    outcome = (
                        Outcome(Kind.NO_REPLY, 0, "cut off here")
                        if response is None
                        else search_outcome(response, step) or not_asked(response, step)
                    )
                    found[step].append(outcome)
                    if outcome is None or outcome.kind is Kind.NO_REPLY:
                        await drain(server, DRAIN_S)
    return found


async def plan_rows(
    server: LlamaServer, form: str, queries: Sequence[str], args: argparse.Namespace, clock: Clock
) -> list[Outcome]:
    """The research planner asked directly, once a question: its first round's call."""
    settings = LlmSettings.model_validate(llm_config(server, form, args.call_timeout))
    client = LlmClient(settings)
    outcomes = []
    try:
        for query in queries:
            if not clock.left(f"research_plan ({form}): {query!r}"):
                continue
            runner = StepRunner(
                client, settings, Deadline(args.search_budget), CallBudget(1), date.today()
            )
            await bounded(llm_questions(runner, query, 3, [query], 0), args.search_budget)
            outcome = outcome_of(runner.records[0]) if runner.records else None
            outcomes.append(outcome or Outcome(Kind.NO_REPLY, 0, "cut off here"))
            if outcome is None or outcome.kind is Kind.NO_REPLY:
                await drain(server, DRAIN_S)
    finally:
        await client.aclose()
    return outcomes


async def research_rows(
    settings: Settings, questions: Sequence[Any], prefix: str, clock: Clock, label: str
) -> tuple[list[Row], list[bool], list[float], list[CallRecord]]:
    rows, in_report, seconds, records = [], [], [], []
    async with open_service(settings, extract_in_process=True, sweep=False) as runtime:
        for question in questions:
            if not clock.left(f"research ({label}): {question.text[:60]!r}"):
                continue
            request = ResearchRequest.model_validate(
                {
                    "query": question.text,
                    "preset": "minimal",
                    "budget": {"max_total_time_ms": RESEARCH_BUDGET_MS},
                }
            )
            job = Research(request, runtime.service.parts, _no_events)
            started = time.perf_counter()
            result = await bounded(job.run(), RESEARCH_BUDGET_MS / 1000 + GRACE_S)
            seconds.append(time.perf_counter() - started)
            records += job.llm.records
            if result is None:  # cut off here: counts as found nothing
                rows.append(Row(False, False))
                in_report.append(False)
                continue
            rows.append(judge(research_evidence(result), question, prefix))
            in_report.append(_holds(result.report or "", question.answers))
    return rows, in_report, seconds, records


async def _no_events(kind: str, data: dict[str, Any]) -> None:
    return None


async def research_figures(
    server: LlamaServer, args: argparse.Namespace, clock: Clock
) -> tuple[list[str], list[Outcome]]:
    """The lines of part 2, and the report step's outcomes in the model's jobs."""
    corpus, _ = hotpotqa()
    held_out = corpus.questions[len(corpus.questions) // 2 :][: args.questions]
    app = ThreadedServer(build_app({"hotpotqa": corpus})).start()
    prefix = f"{app.base_url}/hotpotqa/page/"
    lines = [
        f"research, preset minimal, {RESEARCH_BUDGET_MS // 1000} s budget, "
        f"{len(held_out)} held-out HotpotQA questions:",
        "| research | both pages | answer in evidence | both | answer in report | p50 s | max s |",
        "|---|---|---|---|---|---|---|",
    ]
    report: list[Outcome] = []
    try:
        base = settings_for(f"{app.base_url}/hotpotqa", f"127.0.0.1:{app.port}")
        llm = LlmSettings.model_validate(llm_config(server, "auto", args.call_timeout))
        with_llm = base.model_copy(update={"llm": llm})
        for name, settings in (("no LLM", base), ("SmolLM2-135M", with_llm)):
            got = await research_rows(settings, held_out, prefix, clock, name)
            rows, in_report, seconds, records = got
            report += [outcome_of(r) for r in records if r.step == "research_report"]
            if not rows:
                continue
            lines.append(
                f"| {name} | {share(rows, 'both_pages')} | {share(rows, 'answer')} | "
                f"{share(rows, 'hit')} | {sum(in_report)}/{len(in_report)} | "
                f"{statistics.median(seconds):.1f} | {max(seconds):.1f} |"
            )
    finally:
        app.stop()
    return lines, report


def step_table(rows: dict[tuple[str, str], list[Outcome]]) -> list[str]:
    header = [
        "| step | schema sent | valid replies | model's result used | p50 ms | fallbacks |",
        "|---|---|---|---|---|---|",
    ]
    return header + [table_row(step, form, found) for (step, form), found in rows.items()]


async def main_async(args: argparse.Namespace) -> None:
    started = time.perf_counter()
    clock = Clock(args.max_minutes)
    queries = QUERIES[: args.queries]
    rows: dict[tuple[str, str], list[Outcome]] = {}
    with llama_server() as server:
        print(f"SmolLM2-135M-Instruct, {server.kind}, n_ctx {server.context_tokens}")
        for form in FORMS:
            found = await search_rows(server, form, queries, args, clock)
            if "research_plan" in args.steps:
                found["research_plan"] = await plan_rows(server, form, queries, args, clock)
            rows.update({(step, form): got for step, got in found.items() if got})
        research, report = await research_figures(server, args, clock)
        if report:
            rows[("research_report", "auto")] = report
    steps = [*SEARCH_STEPS, "research_plan", "research_report"]
    rows = {key: rows[key] for step in steps for form in FORMS if (key := (step, form)) in rows}
    print(f"per step, {len(queries)} queries (research_report: in the jobs below):")
    print("\n".join(step_table(rows)))
    print("\n".join(research))
    if clock.skipped:
        print(f"left out past --max-minutes {args.max_minutes:g}: {len(clock.skipped)} runs, "
              f"from {clock.skipped[0]}")  # fmt: skip
    print(f"wall time {time.perf_counter() - started:.0f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--questions", type=int, default=8, help="held-out questions")
    parser.add_argument("--queries", type=int, default=len(QUERIES), help="queries per step")
    parser.add_argument("--call-timeout", type=float, default=30.0, help="one LLM call, s")
    parser.add_argument("--search-budget", type=float, default=60.0, help="one search, s")
    parser.add_argument("--max-minutes", type=float, default=13.0, help="start nothing after")
    parser.add_argument(
        "--steps", type=lambda text: text.split(","), default=[*SEARCH_STEPS, "research_plan"],
        help="comma-separated steps of part 1 (default: all)",
    )  # fmt: skip
    asyncio.run(main_async(parser.parse_args()))


if __name__ == "__main__":
    main()
