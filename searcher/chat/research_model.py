"""The ``searcher-research`` model: the condensed question becomes a research job (the
same job ``POST /v1/research`` starts, under the same limits and per-key share), its
events are said as progress lines while it runs, and its report is the answer.

The report cites evidence passages (``[n]`` of ``result.evidence``), several of which may
come from one page; the chat's sources are the pages, so each ``[n]`` is renumbered to
its page's place among them (``citations[n - 1]`` is that page's URL)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

from searcher.chat.condense import Condensed
from searcher.chat.reply import ChatReply, Source, Tokens, cited_numbers, renumbered, tokens_of
from searcher.chat.search_model import Caller
from searcher.contract import Preset, ResearchEvent, ResearchRequest, ResearchResult
from searcher.errors import AnswerJobFailed
from searcher.llm.runner import StepRunner
from searcher.research.jobs import Job, JobBook
from searcher.research.sources import report_body


async def start_job(
    jobs: JobBook,
    condensed: Condensed,
    preset: Preset,
    caller: Caller,
    key: str | None,
    schema: dict[str, Any] | None = None,
    shown: frozenset[str] = frozenset(),
) -> Job:
    """Start the research job of the condensed question in ``preset``, its answer shaped
    by ``schema`` when given (``TooManyJobs`` when no slot is free, as for
    ``POST /v1/research``); ``shown``: the page keys the conversation showed already,
    which its searches demote unless still the best (session novelty)."""
    asked: dict[str, Any] = {"query": condensed.query, "preset": preset}
    if schema is not None:
        asked["output_schema"] = schema
    request = ResearchRequest.model_validate(asked)
    return await jobs.submit(
        request, client=caller.client, key=key, access=caller.access, shown=shown
    )


def progress_line(event: ResearchEvent) -> str | None:
    """What a reader is told of one event of the job (None: nothing to say)."""
    data = event.data
    if event.type == "plan":
        return "Planning: " + "; ".join(str(q) for q in data.get("sub_questions", []))
    if event.type == "search":
        if data.get("error"):
            return f"Searching “{data.get('sub_question')}” failed: {data['error']}"
        return f"Searched “{data.get('sub_question')}”: {data.get('results', 0)} results"
    if event.type == "read":
        return f"Read {data.get('url')} ({data.get('status')})"
    if event.type == "evidence":
        return f"Round {data.get('round')}: {data.get('passages', 0)} evidence passages"
    if event.type == "verify":
        return f"Checked claims: {data.get('supported', 0)} of {data.get('claims', 0)} supported"
    if event.type == "draft":
        return "Writing the report"
    if event.type == "error":
        return f"Stopped: {data.get('message')}"
    return None


async def follow_job(
    jobs: JobBook, job_id: str, key: str | None, heartbeat_s: float
) -> AsyncIterator[str | None]:
    """The job's progress lines until it ends; None after each ``heartbeat_s`` of
    silence (for a keep-alive)."""
    async for event in jobs.follow(job_id, 0, heartbeat_s, key=key):
        if event is None:
            yield None
            continue
        line = progress_line(event)
        if line is not None:
            yield line


def reply_from_result(result: ResearchResult, query: str, tokens: Tokens) -> ChatReply:
    """The chat reply of a finished job: its report, cited by page."""
    passages = result.evidence or []
    place: dict[str, int] = {}
    sources: list[Source] = []
    for passage in passages:
        if passage.url not in place:
            sources.append(Source(passage.url, passage.title))
            place[passage.url] = len(sources)
    numbers = {p.n: place[p.url] for p in passages}
    if result.structured is not None:  # a JSON answer: its fields cited by page
        cited = {
            pointer: list(dict.fromkeys(numbers[n] for n in ns if n in numbers))
            for pointer, ns in result.structured.citations.items()
        }
        text = json.dumps(result.structured.data, ensure_ascii=False)
        used = sorted({n for ns in cited.values() for n in ns})
        return ChatReply(text, sources, used, tokens, query, field_citations=cited)
    # Cited by page in the message's own Sources list (``render.message_content``), not
    # by passage in the report's.
    text = renumbered(report_body(result.report or ""), numbers).strip()
    if not text:
        return ChatReply(f"No sources were found for “{query}”.", [], [], tokens, query)
    return ChatReply(text, sources, cited_numbers(text), tokens, query)


async def finished_reply(
    jobs: JobBook, job_id: str, key: str | None, condensed: Condensed, runner: StepRunner
) -> ChatReply:
    """The reply of a job that ended; ``AnswerJobFailed`` (its kind) for one that failed."""
    job = await jobs.view(job_id, key)
    if job.status != "done" or job.result is None:
        raise AnswerJobFailed(
            f"the research job ended {job.status}: {job.error or 'no result'}",
            job.error_kind or "failed",
        )
    usage = job.result.usage
    tokens = tokens_of(runner.records) + Tokens(
        usage.llm_prompt_tokens, usage.llm_completion_tokens
    )
    return reply_from_result(job.result, condensed.query, tokens)
