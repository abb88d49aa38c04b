"""The LLM steps' parsers, checks and heuristics, and StepRunner (budget, deadline,
per-step settings, records) against the testbed's scripted chat API."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from datetime import date
from typing import Any

import numpy as np
import pytest

from searcher.config import LlmSettings, LlmStepSettings, LlmStepsSettings
from searcher.errors import LlmBadReply
from searcher.llm.answer import CheckedAnswer, check_citations, clean_answer, write_answer
from searcher.llm.answer_check import Grades, check_answer, heuristic_grades, parse_grades
from searcher.llm.client import LlmClient
from searcher.llm.crag import (
    Evidence,
    Verdict,
    grade_evidence,
    heuristic_grade,
    heuristic_refinement,
    parse_verdict,
)
from searcher.llm.json_reply import MAX_JSON_CHARS, json_object
from searcher.llm.multi_query import (
    TEMPLATES,
    Perspective,
    diversity,
    fill_with_templates,
    generate,
    mean_pairwise_diversity,
    parse_perspectives,
    template_perspectives,
)
from searcher.llm.rewrite import (
    MAX_REWRITE_CHARS,
    clean_rewrite,
    keep_operators,
    operators,
    rewrite_query,
)
from searcher.llm.route import classify_group, parse_group
from searcher.llm.runner import NOT_CONFIGURED, CallRecord, StepRunner
from searcher.llm.snippet_rank import Candidate, rank_candidates
from searcher.pipeline.resilience import CallBudget, Deadline
from tests.testbed import TestbedServer
from tests.testbed.chat import script

TODAY = date(2026, 1, 2)

# --- json_object ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('{"a": 1}', {"a": 1}),
        ('Sure! Here it is: {"a": 1} Anything else?', {"a": 1}),
        ('```json\n{"a": [1, 2]}\n```', {"a": [1, 2]}),
        ('Use {curly} braces: {"a": 1}', {"a": 1}),
        ('{"a": "x { y } z", "b": {"c": "}"}}', {"a": "x { y } z", "b": {"c": "}"}}),
        ('{"a": 1} {"b": 2}', {"a": 1}),
    ],
    ids=["bare", "prose", "fence", "stray_brace", "nested_and_strings", "first_of_two"],
)
def test_json_object_reads_the_first_object(text: str, expected: dict[str, Any]) -> None:
    assert json_object(text) == expected


@pytest.mark.parametrize("text", ["", "no json here", "[1, 2, 3]", "{'a': 1}", "{a: 1}"])
def test_json_object_refuses_replies_without_an_object(text: str) -> None:
    with pytest.raises(LlmBadReply, match="no JSON object"):
        json_object(text)


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ('{"pick":' + '{"a":' * 5000, "nested too deeply"),
        ('{"pick":' + "[" * 100_000 + "]" * 100_000 + "}", "too long"),
        ('{"pick": [1]}' + " " * MAX_JSON_CHARS, "too long"),
    ],
    ids=["deep_objects", "deep_lists", "long"],
)
def test_json_object_refuses_replies_no_answer_of_ours_could_be(text: str, reason: str) -> None:
    with pytest.raises(LlmBadReply, match=reason):
        json_object(text)


def test_json_object_refuses_deep_nesting_within_the_length_cap() -> None:
    with pytest.raises(LlmBadReply, match="nested too deeply"):
        json_object('{"pick":' + "[" * 20_000 + "]" * 20_000 + "}")


# --- rewrite --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("reply", "original", "expected"),
    [
        ("asyncio timeout python", "how do I time out asyncio?", "asyncio timeout python"),
        ("Search query: asyncio timeout", "q", "asyncio timeout"),
        ("query:asyncio timeout", "q", "asyncio timeout"),
        ("Rewritten query: asyncio timeout", "q", "asyncio timeout"),
        ('"asyncio timeout"', "q", "asyncio timeout"),
        ("'asyncio timeout'", "q", "asyncio timeout"),
        ('Query: "asyncio timeout"', "q", "asyncio timeout"),
        ("`asyncio timeout`", "q", "asyncio timeout"),
        ("\n\nasyncio timeout\nThis query targets the docs.", "q", "asyncio timeout"),
        ('"event loop" vs "thread pool"', "q", '"event loop" vs "thread pool"'),
        # Operators of the original the model dropped are put back, in order.
        (
            "asyncio timeout",
            "site:docs.python.org how to time out asyncio",
            "asyncio timeout site:docs.python.org",
        ),
        (
            "python event loop",
            'what is the "event loop" in python',
            'python event loop "event loop"',
        ),
        ("jaguar top speed", "jaguar speed -car", "jaguar top speed -car"),
        ("nginx manual", "nginx reverse proxy filetype:pdf", "nginx manual filetype:pdf"),
        (
            "nginx guide",
            'site:nginx.org "proxy_pass" -apache filetype:pdf',
            'nginx guide site:nginx.org "proxy_pass" -apache filetype:pdf',
        ),
        # Kept operators are not repeated (case aside).
        (
            "SITE:Docs.Python.org asyncio",
            "site:docs.python.org asyncio?",
            "SITE:Docs.Python.org asyncio",
        ),
    ],
)
def test_clean_rewrite(reply: str, original: str, expected: str) -> None:
    assert clean_rewrite(reply, original) == expected


@pytest.mark.parametrize(
    ("reply", "original", "expected"),
    [
        # Operators compare whole: a longer site is another site, and is dropped.
        ("python site:example.com.evil.net", "python site:example.com", "python site:example.com"),
        ("python -javascripts", "python -javascript", "python -javascript"),
        # Narrowing operators the user did not type go; a quoted phrase may stay.
        ("python tips site:evil.example -docs filetype:pdf", "python tips", "python tips"),
        ('python "event loop"', "python event loop", 'python "event loop"'),
        # Grouped, signed, date and all-in operators, SearXNG's !bang and :lang, too.
        ("stadia shutdown (site:evil.example) !wikipedia", "google stadia", "stadia shutdown"),
        ("stadia OR(site:x.example) +site:y ~site:z", "google stadia", "stadia"),
        (
            "why stadia failed !!wikipedia allinurl:evil before:2020 :fr",
            "stadia",
            "why stadia failed",
        ),
        # Words that only look like operators stay.
        ("c++ at 10:30, 16:9 screens, wow!", "c++ screens", "c++ at 10:30, 16:9 screens, wow!"),
        ("python (asyncio OR trio)", "python asyncio", "python (asyncio OR trio)"),
        # The user's own, in any case, stay.
        (
            "asyncio SITE:Docs.Python.org",
            "site:docs.python.org asyncio",
            "asyncio SITE:Docs.Python.org",
        ),
    ],
)
def test_clean_rewrite_keeps_exactly_the_users_operators(
    reply: str, original: str, expected: str
) -> None:
    assert clean_rewrite(reply, original) == expected


@pytest.mark.parametrize(
    "reply",
    [
        "I cannot help with that.",
        "I can't help with that request",
        "I’m sorry, but I can’t assist.",
        "Sorry, I don't know.",
        "As an AI language model, I ...",
        "site:evil.example -python",  # nothing left but operators the user did not type
        "(site:evil.example) OR !wikipedia",
    ],
)
def test_clean_rewrite_refuses_refusals(reply: str) -> None:
    with pytest.raises(LlmBadReply):
        clean_rewrite(reply, "python asyncio")


def test_keep_operators_puts_back_each_missing_operator_once() -> None:
    typed = 'a site:x.org "b c" site:x.org'
    assert keep_operators("a b c", typed) == 'a b c site:x.org "b c"'
    # The user's own !bang and :lang are operators too: kept, put back when dropped.
    assert keep_operators("a b", "a b !wiki :de") == "a b !wiki :de"


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("real-time linux -windows", ["-windows"]),
        ('site:a.org "x y" -z filetype:pdf', ["site:a.org", '"x y"', "-z", "filetype:pdf"]),
        ("-site:pinterest.com cats intitle:cute", ["-site:pinterest.com", "intitle:cute"]),
        ("plain words only", []),
    ],
)
def test_operators(query: str, expected: list[str]) -> None:
    assert operators(query) == expected


@pytest.mark.parametrize(
    "reply", ["", "  \n ", "Search query:", '""', "``", "x" * (MAX_REWRITE_CHARS + 1)]
)
def test_clean_rewrite_refuses_unusable_replies(reply: str) -> None:
    with pytest.raises(LlmBadReply):
        clean_rewrite(reply, "q")


# --- route ----------------------------------------------------------------------------

GROUPS = ["general", "code", "it-docs"]


@pytest.mark.parametrize(
    ("reply", "group"),
    [
        ("code", "code"),
        ("Code.", "code"),
        ("  GENERAL\n", "general"),
        ("it-docs", "it-docs"),
        ("Category: code", "code"),
    ],
)
def test_parse_group(reply: str, group: str) -> None:
    assert parse_group(reply, GROUPS) == group


@pytest.mark.parametrize("reply", ["", "42", "science", "the category is code"])
def test_parse_group_refuses(reply: str) -> None:
    with pytest.raises(LlmBadReply):
        parse_group(reply, GROUPS)


# --- multi_query ----------------------------------------------------------------------


def perspectives_reply(*entries: Any) -> str:
    return json.dumps({"perspectives": list(entries)})


def entry(query: Any, kind: Any = "technical", confidence: Any = 0.8) -> dict[str, Any]:
    return {"type": kind, "query": query, "confidence": confidence}


def test_parse_perspectives_valid() -> None:
    reply = perspectives_reply(
        entry("asyncio internals", "Technical", 0.9),
        entry("  asyncio   use cases ", "user", 1),
        entry("asyncio concepts", " conceptual ", 0.0),
    )
    assert parse_perspectives(reply, 3) == [
        Perspective("technical", "asyncio internals", 0.9),
        Perspective("user", "asyncio use cases", 1.0),
        Perspective("conceptual", "asyncio concepts", 0.0),
    ]


@pytest.mark.parametrize(
    "bad",
    [
        {"type": "technical", "query": "q2"},  # no confidence
        entry("q2", confidence=1.5),
        entry("q2", confidence=-0.1),
        entry("q2", confidence="0.5"),
        entry("q2", confidence=True),
        entry(""),
        entry("   "),
        entry(None),
        entry("x" * 301),
        entry("q2", kind=""),
        entry("q2", kind=None),
        "just a string",
    ],
)
def test_parse_perspectives_drops_invalid_entries(bad: Any) -> None:
    reply = perspectives_reply(entry("good query"), bad)
    assert [p.query for p in parse_perspectives(reply, 3)] == ["good query"]


def test_parse_perspectives_removes_duplicates_and_caps_to_n() -> None:
    reply = perspectives_reply(
        entry("Asyncio Internals"), entry("asyncio  internals", "user"), entry("b"), entry("c")
    )
    assert [p.query for p in parse_perspectives(reply, 2)] == ["Asyncio Internals", "b"]
    assert len(parse_perspectives(perspectives_reply(entry("only one")), 3)) == 1  # fewer: kept


@pytest.mark.parametrize(
    "reply",
    [
        '{"perspectives": "asyncio"}',
        '{"perspectives": {"type": "technical"}}',
        '{"queries": []}',
        '{"perspectives": []}',
        perspectives_reply(entry("", confidence=2)),
        "not json",
    ],
)
def test_parse_perspectives_refuses(reply: str) -> None:
    with pytest.raises(LlmBadReply):
        parse_perspectives(reply, 3)


def test_template_perspectives_keep_the_whole_query() -> None:
    query = 'site:docs.python.org "event loop" -asyncio'
    found = template_perspectives(query, 5)
    assert [p.type for p in found] == [t[0] for t in TEMPLATES]
    assert all(p.query.startswith(query + " ") for p in found)
    assert len({p.query for p in found}) == 5
    assert [p.type for p in template_perspectives(query, 3)] == ["technical", "user", "conceptual"]


def test_fill_with_templates() -> None:
    llm = [Perspective("user", "asyncio pain points", 0.7)]
    filled = fill_with_templates(llm, "asyncio", 3)
    assert filled[0] == llm[0]
    assert [p.type for p in filled] == ["user", "technical", "conceptual"]
    assert filled[1].query == "asyncio how it works"
    full = [Perspective("a", "x", 1.0), Perspective("b", "y", 1.0)]
    assert fill_with_templates(full, "asyncio", 2) == full
    more = [*full, Perspective("c", "z", 1.0)]
    assert fill_with_templates(more, "asyncio", 2) == more  # never trimmed here


def test_fill_with_templates_adds_no_query_already_found() -> None:
    # The model gave the technical template's query under another type name.
    llm = [Perspective("howto", "asyncio how it works", 0.9)]
    filled = fill_with_templates(llm, "asyncio", 3)
    assert len(filled) == 3
    assert len({p.query.lower() for p in filled}) == 3
    assert [p.type for p in filled] == ["howto", "user", "conceptual"]


@pytest.mark.parametrize(
    ("rows", "expected"),
    [
        ([[1.0, 0.0], [1.0, 0.0], [1.0, 0.0]], 0.0),
        ([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]], 1.0),
        ([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0]], 0.6667),
        ([[1.0, 0.0]], None),
    ],
)
def test_mean_pairwise_diversity(rows: list[list[float]], expected: float | None) -> None:
    assert mean_pairwise_diversity(np.asarray(rows, dtype=np.float32)) == expected


async def test_diversity_without_embedder_is_lexical_and_always_a_number() -> None:
    same = await diversity(None, ["cloud gaming services", "Cloud gaming service?"])
    assert (same.value, same.method) == (0.0, "lexical")
    apart = await diversity(None, ["cloud gaming latency", "subscription prices"])
    assert (apart.value, apart.method) == (1.0, "lexical")
    half = await diversity(None, ["cloud gaming", "cloud prices"])  # 1 of 3 words shared
    assert half.value == 0.6667
    assert (await diversity(None, ["alone"])).value == 0.0


# --- answer ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("answer", "text", "refs", "removed"),
    [
        ("Paris is big [1].", "Paris is big [1].", [1], []),
        ("Paris is big [1, 2].", "Paris is big [1, 2].", [1, 2], []),
        ("Paris is big [0].", "Paris is big.", [], [0]),
        ("Paris is big [7].", "Paris is big.", [], [7]),
        ("Paris is big [2][9].", "Paris is big [2].", [2], [9]),
        ("Paris is big [1, 7, 3].", "Paris is big [1, 3].", [1, 3], [7]),
        ("A [3]. B [1]. C [3][2].", "A [3]. B [1]. C [3][2].", [3, 1, 2], []),
        ("A [4]. B [0, 5].", "A. B.", [], [4, 0, 5]),
        ("No citations here.", "No citations here.", [], []),
        ("Not citations: [a], [1-3], [].", "Not citations: [a], [1-3], [].", [], []),
        ("  Padded [1].  ", "Padded [1].", [1], []),
        # Spaces inside the brackets: still citations, checked like any.
        ("Closed [ 42 ]. Streamed [1, 77 ].", "Closed. Streamed [1].", [1], [42, 77]),
        ("Spaced [ 2 ].", "Spaced [2].", [2], []),
        # A number too long to be any item's cites none: removed like [7] (one past 4,300
        # digits, which no int may hold, is counted as 0).
        ("Big [1234567].", "Big.", [], [1234567]),
        ("Big [" + "1" * 4400 + "].", "Big.", [], [0]),
    ],
)
def test_check_citations(answer: str, text: str, refs: list[int], removed: list[int]) -> None:
    assert check_citations(answer, 3) == CheckedAnswer(text, refs, removed)


def test_clean_answer() -> None:
    assert clean_answer("  An answer [1].\n") == "An answer [1]."
    with pytest.raises(LlmBadReply):
        clean_answer(" \n ")


# --- answer_check ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("isrel", "issup", "isuse"),
    [("relevant", "fully_supported", 5), ("irrelevant", "no_support", 1)]
    + [("relevant", "partially_supported", n) for n in (2, 3, 4)],
)
def test_parse_grades(isrel: str, issup: str, isuse: int) -> None:
    reply = json.dumps({"isrel": isrel, "issup": issup, "isuse": isuse})
    assert parse_grades(reply) == Grades("llm", isrel, issup, isuse)


@pytest.mark.parametrize(
    "fields",
    [
        {"isrel": "Relevant"},
        {"isrel": "yes"},
        {"issup": "supported"},
        {"isuse": 0},
        {"isuse": 6},
        {"isuse": "3"},
        {"isuse": 3.0},
        {"isuse": True},
        {"isuse": None},
    ],
)
def test_parse_grades_refuses(fields: dict[str, Any]) -> None:
    reply = {"isrel": "relevant", "issup": "fully_supported", "isuse": 4, **fields}
    with pytest.raises(LlmBadReply):
        parse_grades(json.dumps(reply))
    with pytest.raises(LlmBadReply):
        parse_grades('{"isrel": "relevant", "issup": "fully_supported"}')


@pytest.mark.parametrize(
    ("answer", "refs", "expected"),
    [
        (
            "Use asyncio.timeout in Python [1]. It cancels the task [2].",
            [1, 2],
            ("relevant", "fully_supported", 5),
        ),
        (
            "Use asyncio.timeout in Python [1]. It cancels the task.",
            [1],
            ("relevant", "partially_supported", 4),
        ),
        ("Use asyncio.timeout in Python [1].", [], ("relevant", "no_support", 3)),
        ("Python is a language.", [], ("relevant", "no_support", 2)),  # 1 of 3 keywords
        ("Bananas are yellow.", [], ("irrelevant", "no_support", 1)),
    ],
)
def test_heuristic_grades(answer: str, refs: list[int], expected: tuple[str, str, int]) -> None:
    grades = heuristic_grades("python asyncio timeout", answer, refs, "because")
    assert (grades.isrel, grades.issup, grades.isuse) == expected
    assert (grades.method, grades.reason) == ("heuristic", "because")


def test_heuristic_grades_without_keywords_is_irrelevant() -> None:
    assert heuristic_grades("the of and", "Bananas [1].", [1], None).isrel == "irrelevant"


# --- crag -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        ('{"grade": "CORRECT", "refined_query": ""}', Verdict("CORRECT", "llm")),
        ('{"grade": "correct"}', Verdict("CORRECT", "llm")),
        (
            '{"grade": " Ambiguous ", "refined_query": "  asyncio   timeout "}',
            Verdict("AMBIGUOUS", "llm", "asyncio timeout"),
        ),
        ('{"grade": "incorrect", "refined_query": 7}', Verdict("INCORRECT", "llm")),
    ],
)
def test_parse_verdict(reply: str, expected: Verdict) -> None:
    assert parse_verdict(reply) == expected


def test_parse_verdict_caps_the_refined_query() -> None:
    refined = parse_verdict(json.dumps({"grade": "AMBIGUOUS", "refined_query": "w " * 400}))
    assert refined.refined_query is not None and len(refined.refined_query) == 300


@pytest.mark.parametrize(
    "reply", ['{"grade": "MAYBE"}', '{"refined_query": "x"}', '{"grade": 1}', "CORRECT"]
)
def test_parse_verdict_refuses(reply: str) -> None:
    with pytest.raises(LlmBadReply):
        parse_verdict(reply)


@pytest.mark.parametrize(
    ("evidence", "grade"),
    [
        ([], "INCORRECT"),
        ([(0.6, 0.1)], "CORRECT"),
        ([(0.1, 0.0), (1.0, 0.5)], "CORRECT"),
        ([(0.6, 0.0)], "AMBIGUOUS"),  # the keywords, but nothing scored relevant
        ([(0.59, 0.9)], "AMBIGUOUS"),
        ([(0.2, 0.9)], "AMBIGUOUS"),
        ([(0.19, 0.9)], "INCORRECT"),
        ([(0.0, 0.0)] * 5 + [(1.0, 1.0)], "INCORRECT"),  # only the top 5 count
    ],
)
def test_heuristic_grade(evidence: list[tuple[float, float]], grade: str) -> None:
    assert heuristic_grade([Evidence(o, r) for o, r in evidence]) == grade


@pytest.mark.parametrize(
    ("query", "refined"),
    [
        ("how to configure nginx reverse proxy?", '"configure" nginx reverse proxy'),
        ("nginx", '"nginx"'),
        ("the of and", "the of and"),
        # Operators are never quoted; they follow the words as typed.
        ("site:example.com zzqx unmatched words", '"unmatched" zzqx words site:example.com'),
        ('Stadia shutdown "cloud gaming" -xbox', '"shutdown" Stadia "cloud gaming" -xbox'),
        ("the site:example.com", "the site:example.com"),
    ],
)
def test_heuristic_refinement(query: str, refined: str) -> None:
    assert heuristic_refinement(query) == refined


# --- CallBudget -----------------------------------------------------------------------


def test_call_budget_take_with_reserve() -> None:
    budget = CallBudget(3)
    assert budget.take(1, reserve=2)
    assert not budget.take(1, reserve=2)  # would leave 1 of the 2 reserved
    assert (budget.used, budget.remaining) == (1, 2)
    assert budget.take(2)
    assert not budget.take(1)
    assert (budget.used, budget.remaining) == (3, 0)
    assert not CallBudget(0).take()


# --- StepRunner -----------------------------------------------------------------------

MakeRunner = Callable[..., StepRunner]


@pytest.fixture
async def make_runner(testbed_clean: TestbedServer) -> AsyncIterator[MakeRunner]:
    clients: list[LlmClient] = []

    def make(
        model: str | None = None,
        deadline_s: float = 30.0,
        calls: int = 5,
        configured: bool = True,
        **settings: Any,
    ) -> StepRunner:
        llm = LlmSettings(
            base_url=testbed_clean.llm_url() if configured else None, model=model, **settings
        )
        client = LlmClient(llm) if llm.configured else None
        if client is not None:
            clients.append(client)
        return StepRunner(client, llm, Deadline(deadline_s), CallBudget(calls), TODAY)

    yield make
    for client in clients:
        await client.aclose()


async def test_runner_records_a_successful_call(
    make_runner: MakeRunner, testbed_clean: TestbedServer
) -> None:
    model = script(reply="code")
    runner = make_runner(model)
    outcome = await runner.run(
        "route", [{"role": "user", "content": "a b c"}], lambda t: parse_group(t, GROUPS)
    )
    assert (outcome.value, outcome.reason) == ("code", None)
    (record,) = runner.records
    assert (record.step, record.model, record.fallback_used, record.reason) == (
        "route",
        model,
        False,
        None,
    )
    assert (record.prompt_tokens, record.completion_tokens) == (3, 1)
    assert runner.calls.used == 1 and len(testbed_clean.chat_bodies()) == 1


async def test_runner_records_an_unparsable_reply(make_runner: MakeRunner) -> None:
    model = script(reply="astronomy")
    runner = make_runner(model)
    outcome = await runner.run("route", [], lambda t: parse_group(t, GROUPS))
    assert outcome.value is None
    assert outcome.reason == "invalid reply: unknown category 'astronomy'"
    (record,) = runner.records
    assert record.fallback_used and record.reason == outcome.reason
    assert record.model == model and record.completion_tokens == 1
    assert runner.calls.used == 1  # the call was made: it counts


async def test_runner_records_a_failed_call(make_runner: MakeRunner) -> None:
    model = script(status=500)
    runner = make_runner(model)
    outcome = await runner.run("route", [], str)
    assert outcome.value is None and outcome.reason and outcome.reason.startswith("HTTP 500")
    (record,) = runner.records
    spent = record.latency_ms  # the call's own time: an answer came, an error one
    assert record == CallRecord("route", model, spent, None, None, True, outcome.reason)
    assert spent >= 0


@pytest.mark.parametrize(
    ("runner_kw", "reserve", "reason"),
    [
        ({"configured": False}, 0, NOT_CONFIGURED),
        ({"calls": 0}, 0, "budget: max_tool_calls=0 leaves no call for this step"),
        ({"calls": 3}, 3, "budget: max_tool_calls=3 leaves no call for this step"),
        ({"deadline_s": 0}, 0, "request deadline reached"),
        ({"deadline_s": 0.01}, 0, "request deadline reached"),  # too little left to call
    ],
    ids=["not_configured", "no_budget", "reserved", "deadline_expired", "deadline_near"],
)
async def test_runner_refuses_without_calling(
    make_runner: MakeRunner,
    testbed_clean: TestbedServer,
    runner_kw: dict[str, Any],
    reserve: int,
    reason: str,
) -> None:
    model = script(reply="code")
    runner = make_runner(model, **runner_kw)
    used = runner.calls.used
    outcome = await runner.run("route", [], str, reserve=reserve)
    assert (outcome.value, outcome.reason) == (None, reason)
    assert runner.records == [CallRecord("route", model, fallback_used=True, reason=reason)]
    assert runner.calls.used == used
    assert testbed_clean.chat_bodies() == []


async def test_runner_not_configured_records_no_model() -> None:
    runner = StepRunner(None, LlmSettings(), Deadline(10), CallBudget(3), TODAY)
    outcome = await runner.run("rank", [], str)
    assert outcome.reason == NOT_CONFIGURED
    assert runner.records == [CallRecord("rank", None, fallback_used=True, reason=NOT_CONFIGURED)]


async def test_runner_reserve_leaves_room_when_possible(make_runner: MakeRunner) -> None:
    runner = make_runner(script(reply="code"), calls=3)
    assert (await runner.run("route", [], str, reserve=2)).value == "code"
    assert (await runner.run("route", [], str, reserve=2)).value is None
    assert runner.calls.used == 1
    assert [r.fallback_used for r in runner.records] == [False, True]


async def test_runner_caps_the_call_timeout_by_the_deadline(make_runner: MakeRunner) -> None:
    # The step may take 30 s; the request has well under a second left.
    runner = make_runner(script(hang=True), deadline_s=0.4, timeout_s=30.0)
    outcome = await runner.run("route", [], str)
    assert outcome.value is None
    assert outcome.reason is not None and outcome.reason.startswith("no reply within 0.")


async def test_runner_step_timeout_override(make_runner: MakeRunner) -> None:
    steps = LlmStepsSettings(route=LlmStepSettings(timeout_s=0.25))
    runner = make_runner(script(hang=True), timeout_s=30.0, steps=steps)
    outcome = await runner.run("route", [], str)
    assert outcome.reason == "no reply within 0.25 s"


async def test_runner_fallback_records_without_calling(
    make_runner: MakeRunner, testbed_clean: TestbedServer
) -> None:
    runner = make_runner("m")
    runner.fallback("answer", "no evidence")
    assert runner.records == [CallRecord("answer", "m", fallback_used=True, reason="no evidence")]
    assert testbed_clean.chat_bodies() == [] and runner.calls.used == 0


@pytest.mark.parametrize(
    ("step_settings", "expected_model", "max_tokens", "temperature"),
    [
        # The step's own model and generation settings win...
        ({"model": script(reply="own"), "max_tokens": 17, "temperature": 0.7}, "own", 17, 0.7),
        # ... a temperature of 0 included (not mistaken for "unset") ...
        ({"temperature": 0.0}, "global", 256, 0.0),
        # ... and anything the step leaves unset comes from llm.*.
        ({}, "global", 256, 0.5),
    ],
)
async def test_runner_per_step_overrides_reach_the_server(
    make_runner: MakeRunner,
    testbed_clean: TestbedServer,
    step_settings: dict[str, Any],
    expected_model: str,
    max_tokens: int,
    temperature: float,
) -> None:
    steps = LlmStepsSettings(rewrite=LlmStepSettings(**step_settings))
    runner = make_runner(script(reply="global"), steps=steps, max_tokens=256, temperature=0.5)
    outcome = await runner.run("rewrite", [{"role": "user", "content": "q"}], str)
    assert outcome.value == expected_model
    (body,) = testbed_clean.chat_bodies()
    assert json.loads(body["model"])["reply"] == expected_model
    assert body["max_tokens"] == max_tokens
    assert body["temperature"] == pytest.approx(temperature)
    assert runner.records[0].model == body["model"]


async def test_runner_step_defaults_reach_the_server(
    make_runner: MakeRunner, testbed_clean: TestbedServer
) -> None:
    runner = make_runner(script(reply='{"pick": [0]}'), structured_output="json_schema")
    await runner.run("rank", [], str)
    await runner.run("rewrite", [], str)
    rank, rewrite = testbed_clean.chat_bodies()
    assert (rank["max_tokens"], rank["temperature"]) == (96, 0.0)
    assert (rewrite["max_tokens"], rewrite["temperature"]) == (64, 0.1)
    # A JSON step sends its schema; a text step sends none.
    assert rank["response_format"]["json_schema"]["name"] == "rank"
    assert rank["response_format"]["json_schema"]["schema"]["required"] == ["pick"]
    assert "response_format" not in rewrite


# --- the steps over HTTP --------------------------------------------------------------


async def test_rewrite_query_step(make_runner: MakeRunner, testbed_clean: TestbedServer) -> None:
    runner = make_runner(script(reply="Search query: asyncio timeout"))
    outcome = await rewrite_query(runner, "site:docs.python.org how do I time out?", 0)
    assert outcome.value == "asyncio timeout site:docs.python.org"
    user = testbed_clean.chat_bodies()[0]["messages"][1]["content"]
    assert user == "Question: site:docs.python.org how do I time out?\nSearch query:"


async def test_classify_group_step(make_runner: MakeRunner, testbed_clean: TestbedServer) -> None:
    runner = make_runner(script(replies=["Code", "astronomy"]))
    assert (await classify_group(runner, "asyncio bug", GROUPS, 0)).value == "code"
    unknown = await classify_group(runner, "asyncio bug", GROUPS, 0)
    assert unknown.value is None and unknown.reason and "unknown category" in unknown.reason
    user = testbed_clean.chat_bodies()[0]["messages"][1]["content"]
    assert "- general\n- code\n- it-docs" in user and "Query: asyncio bug" in user


async def test_generate_step(make_runner: MakeRunner) -> None:
    reply = perspectives_reply(
        entry("asyncio event loop internals"), entry("asyncio pitfalls", "user")
    )
    found = await generate(make_runner(script(reply=reply)), "asyncio", 3, 0)
    assert (
        found.source == "llm"
        and found.note == "2 of 3 perspectives from the LLM, the rest from templates"
    )
    assert [p.type for p in found.items] == ["technical", "user", "conceptual"]
    failed = await generate(make_runner(script(status=500)), "asyncio", 3, 0)
    assert failed.source == "templates" and failed.items == template_perspectives("asyncio", 3)
    assert failed.note and "HTTP 500" in failed.note


async def test_write_answer_step(make_runner: MakeRunner, testbed_clean: TestbedServer) -> None:
    runner = make_runner(script(reply=" Paris [1]. "))
    none = await write_answer(runner, "capital?", "", 0)
    assert none.value is None and runner.records[-1].reason == "no evidence to answer from"
    assert testbed_clean.chat_bodies() == []
    assert (
        await write_answer(runner, "capital?", "[1] Paris is the capital.", 1)
    ).value == "Paris [1]."
    user = testbed_clean.chat_bodies()[0]["messages"][1]["content"]
    assert user == "[1] Paris is the capital.\n\nQuestion: capital?\nAnswer:"


async def test_check_answer_step(make_runner: MakeRunner) -> None:
    good = '{"isrel": "relevant", "issup": "partially_supported", "isuse": 4}'
    grades = await check_answer(make_runner(script(reply=good)), "q", "ev", "ans", [1])
    assert grades == Grades("llm", "relevant", "partially_supported", 4)
    bad = await check_answer(
        make_runner(script(reply='{"isuse": 9}')), "python asyncio", "ev", "Python [1].", [1]
    )
    assert bad.method == "heuristic" and bad.reason and bad.reason.startswith("invalid reply")


async def test_grade_evidence_step(make_runner: MakeRunner, testbed_clean: TestbedServer) -> None:
    candidates = [Candidate(i, f"T{i}", f"S{i}") for i in range(7)]
    evidence = [Evidence(0.1, 0.0)]
    runner = make_runner(script(reply='{"grade": "ambiguous", "refined_query": "better"}'))
    assert await grade_evidence(runner, "q", candidates, evidence, 0) == Verdict(
        "AMBIGUOUS", "llm", "better"
    )
    user = testbed_clean.chat_bodies()[0]["messages"][1]["content"]
    assert "4) T4 — S4" in user and "5) T5" not in user  # the top 5 only
    empty = await grade_evidence(runner, "q", [], evidence, 0)
    assert empty == Verdict("INCORRECT", "heuristic", None, "no results to grade")
    failed = await grade_evidence(make_runner(script(status=500)), "q", candidates, evidence, 0)
    assert (failed.grade, failed.method) == ("INCORRECT", "heuristic")
    assert failed.reason and failed.reason.startswith("HTTP 500")


async def test_rank_candidates_respects_the_reserve(
    make_runner: MakeRunner, testbed_clean: TestbedServer
) -> None:
    runner = make_runner(script(reply='{"pick": [2]}'), calls=2)
    candidates = [Candidate(i, f"T{i}", f"S{i}") for i in range(4)]
    refused = await rank_candidates(runner, "q", candidates, 3, reserve=2)
    assert (refused.picks, refused.fallback_used) == ([0, 1, 2], True)
    assert refused.reason and refused.reason.startswith("budget")
    ranked = await rank_candidates(runner, "q", candidates, 3, reserve=1)
    assert (ranked.picks, ranked.fallback_used) == ([2], False)
    assert len(testbed_clean.chat_bodies()) == 1
