"""A chat's follow-up turned into one standalone search query (the ``condense`` step).

The model reads the conversation (the last turns, each cut short) and writes the query;
its reply is cleaned as a rewrite's is (first line, no label or quotes, the operators the
user typed kept). Fallback: ``conversation.fallback_query`` (the previous question's
words carried). A first question is searched as asked, without a call."""

from __future__ import annotations

from dataclasses import dataclass

from searcher.chat.conversation import Conversation, fallback_query
from searcher.contract import MAX_QUERY_CHARS, squeezed
from searcher.errors import LlmBadReply
from searcher.llm.prompts import messages
from searcher.llm.rewrite import clean_rewrite
from searcher.llm.runner import StepRunner

# What the model is shown of the conversation: the last turns, each cut short (the
# answers are long and their sources matter little to what the question refers to).
HISTORY_TURNS = 6
TURN_CHARS = 600


@dataclass(frozen=True)
class Condensed:
    """The standalone query and how it was made."""

    query: str
    method: str  # "question" (asked first), "llm", or "fallback"
    reason: str | None = None  # why the fallback was taken


def history_text(conversation: Conversation) -> str:
    """The turns before the question, as the prompt shows them."""
    shown = conversation.turns[-HISTORY_TURNS:]
    lines = []
    for role, text in shown:
        cut = text if len(text) <= TURN_CHARS else text[:TURN_CHARS] + " …"
        lines.append(f"{'User' if role == 'user' else 'Assistant'}: {cut}")
    return "\n".join(lines)


def condensed_query(reply: str, question: str) -> str:
    """The model's standalone query as a search takes it: cleaned as a rewrite is, on one
    line and within the query limit (the operators put back may pass it).
    ``LlmBadReply`` when nothing searchable is left (control characters alone)."""
    query = squeezed(clean_rewrite(reply, question))[:MAX_QUERY_CHARS].rstrip()
    if not query:
        raise LlmBadReply("empty rewrite")
    return query


async def condense(runner: StepRunner, conversation: Conversation) -> Condensed:
    """The query to search for the conversation's last question."""
    if not conversation.is_follow_up:
        return Condensed(conversation.question[:MAX_QUERY_CHARS], "question")
    question = conversation.question
    outcome = await runner.run(
        "condense",
        messages("condense", runner.today, history=history_text(conversation), question=question),
        lambda reply: condensed_query(reply, question),
    )
    if outcome.value is not None:
        return Condensed(outcome.value, "llm")
    return Condensed(fallback_query(conversation), "fallback", outcome.reason)
