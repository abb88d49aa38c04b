"""Research presets (seeds 000 and 004): how far a job may go, from MINIMAL to FULL."""

from __future__ import annotations

from dataclasses import dataclass, replace

from searcher.config import ResearchSettings
from searcher.contract import ErrorEntry, Preset, ResearchBudget
from searcher.pipeline.limits import over_ceiling

# The research budget fields that the server bounds (``research.<field>``).
CEILINGS = ("max_tool_calls", "max_pages", "max_total_time_ms")


@dataclass(frozen=True)
class Limits:
    """Every limit of one research job, resolved."""

    max_iterations: int  # search rounds
    max_sub_questions: int
    max_tool_calls: int
    max_pages: int  # pages read in the whole job
    max_total_time_ms: int
    max_llm_tokens: int
    max_report_chars: int
    verify_claims: int  # claims checked against the evidence (0: no verification)
    results_per_search: int
    passages_per_question: int
    max_evidence_chars: int  # the evidence passages kept (and shown to the report writer)


PRESETS: dict[Preset, Limits] = {
    "minimal": Limits(1, 2, 8, 5, 20_000, 8_000, 3_000, 0, 5, 2, 4_000),
    "balanced": Limits(2, 3, 20, 10, 45_000, 20_000, 5_000, 8, 6, 3, 6_000),
    "enhanced": Limits(3, 4, 30, 10, 60_000, 30_000, 6_000, 12, 8, 3, 8_000),
    "research": Limits(4, 5, 45, 15, 120_000, 50_000, 8_000, 20, 8, 4, 10_000),
    "full": Limits(5, 6, 60, 15, 180_000, 80_000, 10_000, 30, 10, 4, 12_000),
}


def resolve(preset: Preset, budget: ResearchBudget) -> Limits:
    """The preset's limits with the request's budget fields put over them."""
    base = PRESETS[preset]

    def pick(value: int | None, default: int) -> int:
        return default if value is None else value

    return Limits(
        max_iterations=pick(budget.max_iterations, base.max_iterations),
        max_sub_questions=base.max_sub_questions,
        max_tool_calls=pick(budget.max_tool_calls, base.max_tool_calls),
        max_pages=pick(budget.max_pages, base.max_pages),
        max_total_time_ms=pick(budget.max_total_time_ms, base.max_total_time_ms),
        max_llm_tokens=pick(budget.max_llm_tokens, base.max_llm_tokens),
        max_report_chars=pick(budget.max_report_chars, base.max_report_chars),
        verify_claims=base.verify_claims,
        results_per_search=base.results_per_search,
        passages_per_question=base.passages_per_question,
        max_evidence_chars=base.max_evidence_chars,
    )


@dataclass(frozen=True)
class Bounded:
    """A job's limits held to the server's ceilings, and a note per limit lowered."""

    limits: Limits
    notes: tuple[ErrorEntry, ...] = ()


def within_time(bounded: Bounded, max_time_ms: int) -> Bounded:
    """``bounded`` with its deadline lowered to ``max_time_ms`` (noted), if it is above:
    what the caller's own time allows, whatever the client asked."""
    value = bounded.limits.max_total_time_ms
    if value <= max_time_ms:
        return bounded
    note = over_ceiling(
        "budget.max_total_time_ms", value, "limits.max_total_time_ms", max_time_ms, strict=False
    )
    limits = replace(bounded.limits, max_total_time_ms=max_time_ms)
    return Bounded(limits, (*bounded.notes, note))


def resolve_within(
    preset: Preset, budget: ResearchBudget, ceilings: ResearchSettings, strict: bool
) -> Bounded:
    """``resolve`` held to the server's ceilings (``research.max_*``). A value the request
    asked for above its ceiling is lowered with a note, or refused (``InvalidRequest``
    naming ``budget.<field>``) when ``strict`` (``limits.strict``); a preset's own value
    above a ceiling is always lowered with a note: the client asked for nothing over it."""
    limits = resolve(preset, budget)
    changes: dict[str, int] = {}
    notes: list[ErrorEntry] = []
    for name in CEILINGS:
        value, limit = getattr(limits, name), getattr(ceilings, name)
        if value <= limit:
            continue
        if getattr(budget, name) is not None:  # asked for: refused when strict
            notes.append(over_ceiling(f"budget.{name}", value, f"research.{name}", limit, strict))
        else:
            source = f"preset.{preset}.{name}"
            notes.append(over_ceiling(source, value, f"research.{name}", limit, strict=False))
        changes[name] = limit
    return Bounded(replace(limits, **changes), tuple(notes))
