"""The ``searcher-search`` model: condense the conversation into a query, search it
(pages already shown in the conversation demoted unless still the best), and answer from
the context pack with ``[n]`` citations through the pipeline's own answer step.

``[n]`` is the n-th item of the search, so the sources are the items in order: the
answer's numbers need no renumbering and ``citations[n - 1]`` is item n's URL."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import date
from typing import Any

from searcher.auth.access import EVERY, CollectionAccess
from searcher.chat.condense import Condensed, condense
from searcher.chat.conversation import Conversation
from searcher.chat.reply import ChatReply, Source, tokens_of
from searcher.contract import SearchRequest, SearchResponse, Want
from searcher.errors import AnswerUnavailable
from searcher.llm.runner import StepRunner
from searcher.llm.structured import structured_output
from searcher.pipeline.resilience import CallBudget, Deadline
from searcher.ranking.novelty import shown_keys
from searcher.service import SearchService


@dataclass(frozen=True)
class Caller:
    """Who asks: their share of shared work and the collections they may search."""

    client: str | None = None
    access: CollectionAccess = EVERY


def turn_runner(service: SearchService) -> StepRunner:
    """The runner of a chat turn's own LLM calls: the condense call, and a JSON answer's
    (with its repairs). Its own deadline: the search between them has its budget too."""
    settings = service.settings
    deadline = Deadline(settings.budget.max_total_time_ms / 1000)
    calls = CallBudget(2 + settings.llm.steps.output_schema.repairs)
    return StepRunner(service.parts.llm, settings.llm, deadline, calls, date.today())


async def standalone_query(
    service: SearchService, conversation: Conversation
) -> tuple[Condensed, StepRunner]:
    """The query for the conversation's last question, and the turn's runner."""
    runner = turn_runner(service)
    return await condense(runner, conversation), runner


@dataclass(frozen=True)
class ItemSource:
    """A search item as the structured step reads a source."""

    url: str
    title: str
    text: str


async def shaped_reply(
    service: SearchService,
    response: SearchResponse,
    condensed: Condensed,
    runner: StepRunner,
    schema: dict[str, Any],
) -> ChatReply:
    """A JSON answer valid against ``schema``, from the search's items, each field cited
    (``StructuredOutputFailed`` when no reply validates within the repairs)."""
    items = response.items or []
    sources = [ItemSource(i.url, i.title, i.content or i.snippet) for i in items]
    repairs = service.settings.llm.steps.output_schema.repairs
    shaped = await structured_output(runner, condensed.query, sources, schema, repairs=repairs)
    text = json.dumps(shaped.data, ensure_ascii=False)
    cached = response.meta.cache is not None and response.meta.cache.hit
    tokens = tokens_of(runner.records) + tokens_of([] if cached else response.meta.llm)
    cited = sorted({n for numbers in shaped.citations.values() for n in numbers})
    return ChatReply(
        text, [Source(i.url, i.title) for i in items], cited, tokens, condensed.query,
        field_citations=shaped.citations,
    )  # fmt: skip


def _no_answer_reason(response: SearchResponse) -> str:
    """Why the answer step wrote nothing, as it recorded it."""
    for call in reversed(response.meta.llm):
        if call.step == "answer" and call.reason:
            return call.reason
    return "the answer step gave no answer"


def reply_from(response: SearchResponse, condensed: Condensed, runner: StepRunner) -> ChatReply:
    """The chat reply of a search that asked for an answer. ``AnswerUnavailable`` when
    there was evidence but the model wrote nothing from it."""
    items = response.items or []
    # A cached answer cost this request no LLM call: only the condensing counts then.
    cached = response.meta.cache is not None and response.meta.cache.hit
    tokens = tokens_of(runner.records) + tokens_of([] if cached else response.meta.llm)
    sources = [Source(item.url, item.title) for item in items]
    if response.answer is None:
        if items:
            raise AnswerUnavailable(f"the LLM gave no answer: {_no_answer_reason(response)}")
        text = f"No sources were found for “{condensed.query}”."
        return ChatReply(text, [], [], tokens, condensed.query)
    cited = [c.ref for c in response.answer_citations or []]
    return ChatReply(response.answer, sources, cited, tokens, condensed.query)


async def search_and_answer(
    service: SearchService,
    conversation: Conversation,
    condensed: Condensed,
    runner: StepRunner,
    caller: Caller,
    schema: dict[str, Any] | None = None,
) -> ChatReply:
    """Search the condensed query and answer from what was found: in prose citing
    ``[n]``, or with ``schema`` as JSON valid against it."""
    want = Want(answer=schema is None, rendered_text=False)
    request = SearchRequest.model_validate({"query": condensed.query, "want": want})
    response = await service.search(
        request,
        client=caller.client,
        access=caller.access,
        shown=shown_keys(conversation.shown_urls),
    )
    if schema is not None:
        return await shaped_reply(service, response, condensed, runner, schema)
    return reply_from(response, condensed, runner)
