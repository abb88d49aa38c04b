"""One chat turn of each model, answered whole or streamed.

A streamed turn opens at once (the assistant's role), says its progress as reasoning
(the query searched; a research job's steps), then streams the answer and its sources.
What can be refused is refused before the stream opens, with its own status: the
request, a missing LLM, a research slot. A failure after it opened is raised to the
caller, which ends the stream with an error event."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from searcher.chat.condense import Condensed
from searcher.chat.conversation import Conversation
from searcher.chat.render import KEEP_ALIVE, Completion
from searcher.chat.reply import ChatReply
from searcher.chat.research_model import finished_reply, follow_job, start_job
from searcher.chat.search_model import Caller, search_and_answer, standalone_query
from searcher.contract import Preset
from searcher.llm.runner import StepRunner
from searcher.ranking.novelty import shown_keys
from searcher.research.jobs import Job, JobBook
from searcher.service import SearchService


def searching_line(condensed: Condensed) -> str:
    """What the reader is told before the search: the query, and how it was made."""
    how = {"llm": " (the follow-up, made standalone)", "fallback": " (the follow-up, made "
           "standalone from the question before it)"}.get(condensed.method, "")  # fmt: skip
    return f"Searching the web for: {condensed.query}{how}"


async def search_turn(
    service: SearchService,
    conversation: Conversation,
    caller: Caller,
    schema: dict[str, Any] | None = None,
) -> ChatReply:
    """``searcher-search``, answered whole."""
    condensed, runner = await standalone_query(service, conversation)
    return await search_and_answer(service, conversation, condensed, runner, caller, schema)


async def search_turn_stream(
    service: SearchService,
    conversation: Conversation,
    caller: Caller,
    completion: Completion,
    include_usage: bool,
    schema: dict[str, Any] | None = None,
) -> AsyncIterator[bytes]:
    """``searcher-search``, streamed."""
    yield completion.opening()
    condensed, runner = await standalone_query(service, conversation)
    yield completion.reasoning(searching_line(condensed))
    reply = await search_and_answer(service, conversation, condensed, runner, caller, schema)
    for event in completion.answer(reply, include_usage):
        yield event


@dataclass(frozen=True)
class ResearchTurn:
    """A research turn whose job has started: what following it and answering need."""

    jobs: JobBook
    job: Job
    key: str | None  # the API key that owns the job
    condensed: Condensed
    runner: StepRunner
    heartbeat_s: float

    async def reply(self) -> ChatReply:
        """The answer, once the job has ended. Cancelled (its client gone), it ends the
        job: nobody is left to read its report."""
        try:
            async for _ in follow_job(self.jobs, self.job.id, self.key, self.heartbeat_s):
                pass
            return await finished_reply(
                self.jobs, self.job.id, self.key, self.condensed, self.runner
            )
        finally:
            await self._end_unfinished()

    async def stream(self, completion: Completion, include_usage: bool) -> AsyncIterator[bytes]:
        """The job's progress as reasoning, then the answer. A reader who leaves ends the
        job: nobody is left to read its report."""
        try:
            yield completion.opening()
            yield completion.reasoning(f"Researching: {self.condensed.query}")
            async for line in follow_job(self.jobs, self.job.id, self.key, self.heartbeat_s):
                yield KEEP_ALIVE if line is None else completion.reasoning(line)
            reply = await finished_reply(
                self.jobs, self.job.id, self.key, self.condensed, self.runner
            )
            for event in completion.answer(reply, include_usage):
                yield event
        finally:
            await self._end_unfinished()

    async def _end_unfinished(self) -> None:
        """Cancel the job unless it has ended."""
        if self.job.task is not None and not self.job.task.done():
            with contextlib.suppress(Exception):
                await self.jobs.cancel(self.job.id, self.key)


async def start_research_turn(
    service: SearchService,
    jobs: JobBook,
    conversation: Conversation,
    preset: Preset,
    caller: Caller,
    key: str | None,
    schema: dict[str, Any] | None = None,
) -> ResearchTurn:
    """Condense the question and start its job (``TooManyJobs`` when no slot is free)."""
    condensed, runner = await standalone_query(service, conversation)
    shown = shown_keys(conversation.shown_urls)  # the sources earlier answers gave
    job = await start_job(jobs, condensed, preset, caller, key, schema, shown)
    heartbeat_s = service.settings.research.heartbeat_s
    return ResearchTurn(jobs, job, key, condensed, runner, heartbeat_s)
