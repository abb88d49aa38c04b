"""Query rewrite (``llm_query``, seed 001 section 11): one short call turns the question
into a search query. The search operators the user typed are kept even when the model
drops them: they are put back, because ``site:`` or a quoted phrase is an instruction,
not a suggestion. For the same reason a narrowing operator (``site:``, ``filetype:``,
``-word``, a SearXNG ``!bang`` or ``:lang``...) the user did not type is taken out, and a
refusal is no query. Fallback: the original query."""

from __future__ import annotations

import re
from datetime import date

from searcher.contract import MAX_QUERY_CHARS
from searcher.errors import LlmBadReply
from searcher.llm.prompts import messages
from searcher.llm.query_checks import rewrite_problem
from searcher.llm.runner import StepOutcome, StepRunner

# Operators: a field operator (site:example.com, filetype:pdf, before:2020, ... signed or
# not, also inside a group: "(site:x)"), a "quoted phrase", an -excluded word, a SearXNG
# !bang (an engine or category) or :lang (a language). A field's value ends at a space
# or a parenthesis.
_FIELDS = (
    "site|filetype|ext|inurl|intitle|intext|inanchor|allinurl|allintitle|allintext"
    "|allinanchor|before|after|related|link|source"
)
_OPERATOR = re.compile(
    rf"(?<![^\s(|])[-+~]?(?:{_FIELDS}):[^\s()]+"
    r'|"[^"]+"'
    r'|(?<!\S)-[^\s"-]\S*'
    r"|(?<![^\s(])!{1,2}[^\W\d_][\w.-]*"
    r"|(?<!\S):[a-z]{2,3}(?:-[a-z]{2,4})?(?!\S)",
    re.IGNORECASE,
)
# What taking operators out can leave: empty groups, and a dangling OR or AND.
_EMPTY_GROUP = re.compile(r"\(\s*\)")
_DANGLING = re.compile(r"(?<!\S)(?:OR|AND|\||[+~])(?=\s*$)|^\s*(?:OR|AND|\||[+~])(?!\S)")
# How a model says no ("I cannot help with that.", "Sorry, ..."): never a search query.
_REFUSAL = re.compile(
    r"(?:sorry\b|i apologi[sz]e|as an ai\b|i(?: am|'m) (?:sorry|unable|not able)"
    r"|i (?:cannot|can't|can not|won't|will not)\b)",
    re.IGNORECASE,
)
_LABEL = re.compile(r"^(?:search\s+query|query|rewritten(?:\s+query)?)\s*:\s*", re.IGNORECASE)
MAX_REWRITE_CHARS = 400


def operators(query: str) -> list[str]:
    """The search operators in ``query``, in order."""
    return _OPERATOR.findall(query)


def without_operators(query: str) -> str:
    """``query``'s plain words: its operators taken out."""
    return " ".join(_OPERATOR.sub(" ", query).split())


def clean_rewrite(reply: str, original: str) -> str:
    """The query in a reply: its first line, without a label or wrapping quotes, with
    every operator of ``original`` present. ``LlmBadReply`` if nothing usable is left."""
    lines = [line.strip() for line in reply.strip().strip("`").splitlines() if line.strip()]
    if not lines:
        raise LlmBadReply("empty rewrite")
    text = _LABEL.sub("", lines[0]).strip()
    if len(text) > 1 and text[0] == text[-1] and text[0] in "'\"" and text.count(text[0]) == 2:
        text = text[1:-1].strip()
    if not text:
        raise LlmBadReply("empty rewrite")
    if len(text) > MAX_REWRITE_CHARS:
        raise LlmBadReply(f"rewrite longer than {MAX_REWRITE_CHARS} characters")
    if _REFUSAL.match(" ".join(text.replace("’", "'").split())):
        raise LlmBadReply(f"the model refused: {text[:80]!r}")
    text = keep_operators(text, original)
    if not text:
        raise LlmBadReply("empty rewrite")
    return text


def _narrows(operator: str) -> bool:
    """Whether an operator restricts the results (all but a quoted phrase do)."""
    return not operator.startswith('"')


def keep_operators(text: str, original: str) -> str:
    """``text`` (a query the model wrote from ``original``) with the operators of
    ``original`` it lacks put back at the end, and the narrowing operators it added taken
    out. Operators compare whole, case aside: ``site:example.com.evil.net`` is not
    ``site:example.com``. Empty if nothing but added operators was left."""
    typed = {op.lower() for op in operators(original)}

    def drop_added(match: re.Match[str]) -> str:
        op = match.group()
        return "" if _narrows(op) and op.lower() not in typed else op

    text = " ".join(_OPERATOR.sub(drop_added, text).split())
    while (tidier := " ".join(_DANGLING.sub("", _EMPTY_GROUP.sub("", text)).split())) != text:
        text = tidier
    if not text:
        return ""
    present = {op.lower() for op in operators(text)}
    missing = [op for op in dict.fromkeys(operators(original)) if op.lower() not in present]
    if missing:
        text = f"{text} {' '.join(missing)}"
    return text[:MAX_QUERY_CHARS]


def checked_rewrite(reply: str, original: str, today: date) -> str:
    """The query in ``reply`` (``clean_rewrite``) if it is still a query for ``original``:
    its key terms and names kept, not a sentence answering it (``rewrite_problem``);
    ``LlmBadReply`` saying why not otherwise."""
    text = clean_rewrite(reply, original)
    problem = rewrite_problem(text, original, today)
    if problem is not None:
        raise LlmBadReply(f"the rewrite is not searched, {problem}")
    return without_final_stop(text)


def without_final_stop(query: str) -> str:
    """``query`` without a full stop at its end ("Google Stadia games." from a small
    model): a search query has no use for one. An abbreviation's dots stay ("U.S.")."""
    last = query.split()[-1] if query.split() else ""
    if last.endswith(".") and last.count(".") == 1 and len(last) > 1:
        return query.rstrip()[:-1].rstrip()
    return query


async def rewrite_query(runner: StepRunner, query: str, reserve: int) -> StepOutcome[str]:
    """The rewritten query, or None and why (the caller keeps the original)."""
    return await runner.run(
        "rewrite",
        messages("rewrite", runner.today, query=query),
        lambda reply: checked_rewrite(reply, query, runner.today),
        reserve,
    )
