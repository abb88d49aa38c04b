"""One request's LLM calls: each within the tool-call budget and the deadline, each
accounted for, and each either a validated value or a reason to take the fallback.

Steps never see an exception from here: ``run`` returns ``StepOutcome(value, reason)``,
and a step whose value is None takes its deterministic fallback and says why.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import date
from typing import Any, Generic, TypeVar

from searcher.config import LlmSettings, LlmStep
from searcher.errors import LlmError
from searcher.llm.client import CallOptions, Completion, LlmClient, Message
from searcher.llm.prompts import PROMPTS
from searcher.pipeline.resilience import CallBudget, Deadline

T = TypeVar("T")

# Below this much time left, a call could not return anything useful: skip it.
MIN_CALL_S = 0.05
# Characters per token, for a call whose server reported no usage (a budget in tokens must
# hold against servers that leave ``usage`` out): the usual rule of thumb for English.
CHARS_PER_TOKEN = 4
NOT_CONFIGURED = "no LLM configured (llm.base_url and llm.model)"

# The part of the time left until the deadline that one call of a step may take: a slow
# model must not leave the searches, fetches and later steps with nothing. Steps before
# the search get little; the answer comes last but for its check.
TIME_SHARE: dict[LlmStep, float] = {
    "rewrite": 0.25,
    "route": 0.25,
    "multi_query": 0.35,
    "crag": 0.4,
    "rank": 0.5,
    "answer": 0.8,
    "answer_check": 1.0,
    # Research: planning a round leaves its searches and reading most of the time; the
    # report comes last.
    "research_plan": 0.25,
    "research_report": 0.9,
    # A caller's output_schema: the last step of its request, repairs included.
    "output_schema": 0.9,
    # A chat's follow-up turned into a standalone query: before its search, like rewrite.
    "condense": 0.25,
}


# Steps whose reply is still of use when cut at max_tokens (its last sentence dropped);
# any other reply cut short is refused: half a JSON object or half a query is not one.
PARTIAL_OK: frozenset[LlmStep] = frozenset({"answer", "research_report"})
# Fitting a prompt into the context: characters per token counted low (code, names and
# other languages take more tokens than English prose), and the chat template's tokens.
FIT_CHARS_PER_TOKEN = 3
TEMPLATE_TOKENS = 32
# At most this share of a step's time (and 2 s) for reading the context window, once.
CONTEXT_READ_SHARE, CONTEXT_READ_MAX_S = 0.2, 2.0


@dataclass(frozen=True)
class StepOutcome(Generic[T]):
    value: T | None
    reason: str | None = None  # why the fallback is taken; None when value is the model's


@dataclass(frozen=True)
class CallRecord:
    """One step's entry in ``meta.llm``."""

    step: str
    model: str | None
    latency_ms: int = 0
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    fallback_used: bool = False
    reason: str | None = None


@dataclass
class StepRunner:
    """Runs the LLM steps of one request."""

    client: LlmClient | None
    settings: LlmSettings
    deadline: Deadline
    calls: CallBudget
    today: date
    records: list[CallRecord] = field(default_factory=list)
    # Tokens the server did not report (``usage`` missing), estimated from characters.
    estimated_tokens: int = 0

    def tokens_used(self) -> int:
        """Prompt and completion tokens of every call: as reported, else estimated."""
        reported = sum((r.prompt_tokens or 0) + (r.completion_tokens or 0) for r in self.records)
        return reported + self.estimated_tokens

    def options(self, step: LlmStep) -> CallOptions:
        """The model and generation settings ``step`` runs with (timeout not yet capped)."""
        own = self.settings.steps.get(step)
        return CallOptions(
            model=own.model or self.settings.model or "",
            max_tokens=own.max_tokens or self.settings.max_tokens,
            temperature=self.settings.temperature if own.temperature is None else own.temperature,
            timeout_s=own.timeout_s or self.settings.timeout_s,
            schema=PROMPTS[step].schema,
            schema_name=step,
        )

    async def context_tokens(self) -> int | None:
        """The model's context window (see ``LlmClient.context_tokens``); None if unknown
        or no LLM is configured."""
        if self.client is None:
            return None
        wait_s = min(CONTEXT_READ_MAX_S, self.deadline.remaining() * CONTEXT_READ_SHARE)
        return await self.client.context_tokens(max(wait_s, MIN_CALL_S))

    async def room_chars(self, step: LlmStep) -> int | None:
        """How many characters of prompt ``step`` may send and still leave its
        ``max_tokens`` for the reply (counted low: ``FIT_CHARS_PER_TOKEN``); None when the
        context window is unknown."""
        context = await self.context_tokens()
        if context is None:
            return None
        room = context - self.options(step).max_tokens - TEMPLATE_TOKENS
        return max(0, room) * FIT_CHARS_PER_TOKEN

    def fallback(self, step: LlmStep, reason: str) -> None:
        """Record that ``step`` took its fallback without calling the model."""
        model = self.options(step).model or None
        self.records.append(CallRecord(step, model, fallback_used=True, reason=reason))

    async def run(
        self,
        step: LlmStep,
        messages: list[Message],
        parse: Callable[[str], T],
        reserve: int = 0,
        schema: dict[str, Any] | None = None,
        step_schema: dict[str, Any] | None = None,
    ) -> StepOutcome[T]:
        """Call the model for ``step`` and ``parse`` its reply (``parse`` raises
        ``LlmError`` or ``ValueError`` to refuse it). ``reserve``: tool calls that must stay
        available for later stages. The call may take its step's ``TIME_SHARE`` of the time
        left, so that the stages after it still have theirs. ``schema``: the reply's JSON
        Schema when the request chose it (sent without strict mode), not the step's;
        ``step_schema``: the step's own schema narrowed to this call (sent as the step's)."""
        if self.client is None:
            return self._refuse(step, NOT_CONFIGURED)
        allowed_s = self.deadline.remaining() * TIME_SHARE[step]
        if allowed_s < MIN_CALL_S:
            return self._refuse(step, "request deadline reached")
        if not self.calls.take(1, reserve):
            return self._refuse(
                step, f"budget: max_tool_calls={self.calls.limit} leaves no call for this step"
            )
        too_long = await self._over_context(step, messages)
        if too_long is not None:
            return self._refuse(step, too_long)
        options = self.options(step)
        capped = CallOptions(
            options.model,
            options.max_tokens,
            options.temperature,
            min(options.timeout_s, allowed_s),
            schema if schema is not None else step_schema or options.schema,
            options.schema_name,
            strict=schema is None,
        )
        started = time.perf_counter()
        try:
            completion = await self.client.complete(messages, capped)
        except LlmError as exc:  # the time it took counts too: a timeout took all it had
            spent_ms = round((time.perf_counter() - started) * 1000)
            return self._refuse(step, str(exc), model=options.model, latency_ms=spent_ms)
        self._estimate(messages, completion)
        text, cut_note = completion.text, None
        if completion.truncated:
            cut = f"reply cut off at max_tokens={options.max_tokens}"
            if step not in PARTIAL_OK or not (text := without_last_sentence(text)):
                return self._done(step, completion, None, cut)
            cut_note = f"{cut}; its unfinished last sentence dropped"
        try:
            value = parse(text)
        except (LlmError, ValueError, RecursionError) as exc:  # a reply nested past the stack
            return self._done(step, completion, None, f"invalid reply: {exc}")
        return self._done(step, completion, value, cut_note)

    async def _over_context(self, step: LlmStep, messages: list[Message]) -> str | None:
        """Why ``messages`` cannot be sent for ``step`` (prompt and reply would not fit the
        model's context window), or None when they fit or the window is unknown."""
        context = await self.context_tokens()
        if context is None:
            return None
        chars = sum(len(m.get("content", "")) for m in messages)
        prompt = -(-chars // FIT_CHARS_PER_TOKEN) + TEMPLATE_TOKENS
        max_tokens = self.options(step).max_tokens
        if prompt + max_tokens <= context:
            return None
        return (
            f"prompt of about {prompt} tokens and max_tokens={max_tokens} do not fit the "
            f"model's context of {context} tokens; not sent"
        )

    def _estimate(self, messages: list[Message], completion: Completion) -> None:
        """Count the tokens the server did not report, as characters / ``CHARS_PER_TOKEN``
        (rounded up) of the prompt or the reply."""
        if completion.prompt_tokens is None:
            chars = sum(len(m.get("content", "")) for m in messages)
            self.estimated_tokens += -(-chars // CHARS_PER_TOKEN)
        if completion.completion_tokens is None:
            self.estimated_tokens += -(-len(completion.text) // CHARS_PER_TOKEN)

    def _refuse(
        self, step: LlmStep, reason: str, model: str | None = None, latency_ms: int = 0
    ) -> StepOutcome[T]:
        model = model or self.options(step).model or None
        self.records.append(CallRecord(step, model, latency_ms, None, None, True, reason))
        return StepOutcome(None, reason)

    def _done(
        self, step: LlmStep, completion: Completion, value: T | None, reason: str | None
    ) -> StepOutcome[T]:
        self.records.append(
            CallRecord(
                step,
                completion.model,
                completion.latency_ms,
                completion.prompt_tokens,
                completion.completion_tokens,
                value is None,
                reason,
            )
        )
        return StepOutcome(value, reason if value is None else None)


_SENTENCE_END = re.compile(r"[.!?\u3002\uff01\uff1f][\"')\]]*(?=\s|$)")


def without_last_sentence(text: str) -> str:
    """``text`` up to the end of its last whole sentence (empty if it has none): what is
    left of a reply cut off mid-sentence."""
    ends = list(_SENTENCE_END.finditer(text))
    return text[: ends[-1].end()].rstrip() if ends else ""
