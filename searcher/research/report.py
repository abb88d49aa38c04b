"""The report of a research job: written by the LLM from numbered evidence passages, every
citation checked against the passage it names; or, with no model (or when it fails), an
evidence report — the best passages grouped by sub-question, with their sources."""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from dataclasses import dataclass

from searcher.llm.answer import CITED, check_citations
from searcher.llm.prompts import PROMPTS, messages, system_prompt
from searcher.llm.runner import StepRunner
from searcher.pack.layout import neutralise_markers
from searcher.ranking.relevance import keyword_overlap
from searcher.research.evidence import Passage
from searcher.research.sources import PIECES, uncited, with_sources
from searcher.text import query_keywords

# A cited sentence is supported by a passage that holds this share of its keywords.
SUPPORTED_AT = 0.3
# Sentences, runs of line breaks or stray punctuation: the pieces put back together are
# the text (a line without a full stop was lost, and line breaks with it).
_SENTENCE = PIECES
_CITES = re.compile(r"\s?" + CITED)  # with the space before it, to go with it


@dataclass(frozen=True)
class Section:
    """One sub-question and the numbers of its evidence passages (1-based), best first."""

    question: str
    covered: bool
    evidence: list[int]


def numbered_evidence(passages: Sequence[Passage], max_chars: int) -> tuple[str, int]:
    """``[n] title (url)`` then the passage, for the model, within ``max_chars``; and how
    many passages that holds (the first ones)."""
    blocks, used = [], 0
    for n, p in enumerate(passages, start=1):
        block = f"[{n}] {uncited(p.title)} ({p.url})\n{uncited(' '.join(p.text.split()))}"
        if used + len(block) > max_chars:
            break
        blocks.append(block)
        used += len(block) + 2
    return "\n\n".join(blocks), len(blocks)


def evidence_report(
    question: str, sections: Sequence[Section], passages: Sequence[Passage], max_chars: int
) -> str:
    """The deterministic report: per sub-question its best passages, then the sources
    (``with_sources``: the body fitted to ``max_chars``, the list whole)."""
    lines = [f"# Evidence for: {uncited(question)}", ""]
    for i, section in enumerate(sections, start=1):
        status = "answered" if section.covered else "not fully answered"
        lines += [f"## {i}. {uncited(section.question)} ({status})", ""]
        for n in section.evidence:
            text = uncited(" ".join(passages[n - 1].text.split()))
            lines.append(f"- [{n}] {text}")
        lines.append("")
    # Passages are web text; the Sources list is added (and the body fitted) after.
    return with_sources(neutralise_markers("\n".join(lines).strip()), passages, max_chars)


def supports(sentence: str, passage: Passage) -> bool:
    """Whether ``passage`` holds enough of ``sentence`` (its keywords) to support it."""
    keywords = query_keywords(_CITES.sub("", sentence))
    if not keywords:
        return True
    return keyword_overlap(keywords, passage.title, passage.text, "") >= SUPPORTED_AT


@dataclass(frozen=True)
class Verified:
    text: str
    claims: int  # cited sentences checked
    supported: int
    unsupported: list[int]  # citations removed because their passage did not support


def verify_citations(text: str, passages: Sequence[Passage], max_claims: int) -> Verified:
    """Check each cited sentence (up to ``max_claims``) against the passages it cites; a
    citation whose passage does not support its sentence is removed."""
    claims = supported = 0
    unsupported: list[int] = []
    out = []
    for sentence in _SENTENCE.findall(text):
        cites = [int(n) for group in _CITES.findall(sentence) for n in group.split(",")]
        if not cites or claims >= max_claims:
            out.append(sentence)
            continue
        claims += 1
        bad = [n for n in cites if not supports(sentence, passages[n - 1])]
        if len(bad) < len(cites):
            supported += 1
        unsupported += bad
        if bad:
            sentence = _CITES.sub(functools.partial(_without, removed=set(bad)), sentence)
        out.append(sentence)
    return Verified("".join(out), claims, supported, unsupported)


def _without(group: re.Match[str], removed: set[int]) -> str:
    """A citation group (``[1, 2]``) rebuilt from the numbers not ``removed``; nothing, its
    space before too, if none is left."""
    kept = [n for n in (int(x) for x in group.group(1).split(",")) if n not in removed]
    if not kept:
        return ""
    space = " " if group.group(0).startswith(" ") else ""
    return f"{space}[{', '.join(map(str, kept))}]"


@dataclass(frozen=True)
class Written:
    text: str | None  # None: the model gave nothing usable (take the evidence report)
    invalid: list[int]  # citations of passages that do not exist, removed


async def llm_report(
    runner: StepRunner,
    question: str,
    passages: Sequence[Passage],
    max_chars: int,
    reserve: int = 0,
) -> Written:
    """The model's report with citations outside the evidence removed; not yet fitted to
    ``max_chars`` (``with_sources`` does, once its citations are verified). ``reserve``:
    LLM calls that must stay for the steps after it (a structured answer)."""
    # The evidence the model's context holds with room for the report, if it is known.
    room = await runner.room_chars("research_report")
    budget = max(2000, max_chars * 3)
    if room is not None:
        fixed = system_prompt("research_report", runner.today) + PROMPTS["research_report"].user
        budget = min(budget, max(0, room - len(fixed) - len(question)))
    evidence, shown = numbered_evidence(passages, max_chars=budget)
    outcome = await runner.run(
        "research_report",
        messages("research_report", runner.today, question=question, evidence=evidence),
        lambda reply: reply.strip()[: max_chars * 2] or _refuse(),
        reserve,
    )
    if outcome.value is None:
        return Written(None, [])
    # Only what the model was shown can support what it wrote.
    checked = check_citations(outcome.value, shown)
    if not checked.refs:
        return Written(None, checked.removed)  # a report that cites nothing is not one
    return Written(neutralise_markers(checked.text), checked.removed)


def _refuse() -> str:
    raise ValueError("empty report")
