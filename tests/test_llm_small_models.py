"""What makes the LLM steps hold up with small local models (issue 31), against the
testbed's scripted chat API over real HTTP: the JSON Schema sent in the form the endpoint
accepts (probed once), the context window read from the server and never exceeded, replies
cut at ``max_tokens`` treated as such, and the model's queries, perspectives, grades and
plans checked before use. The same steps against a real model: ``test_real_llm.py``."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from datetime import date
from typing import Any

import httpx
import pytest

from searcher.config import LlmSettings
from searcher.errors import LlmBadReply
from searcher.llm.answer import write_answer
from searcher.llm.client import LlmClient
from searcher.llm.crag import Evidence, Verdict, checked_verdict
from searcher.llm.multi_query import Perspective, checked_perspectives, generate
from searcher.llm.query_checks import rewrite_problem
from searcher.llm.rewrite import rewrite_query
from searcher.llm.runner import StepRunner, without_last_sentence
from searcher.llm.snippet_rank import Candidate, pick_schema, rank_candidates
from searcher.pipeline.resilience import CallBudget, Deadline
from searcher.research.planning import checked_sub_questions
from tests.testbed import TestbedServer
from tests.testbed.chat import script

TODAY = date(2026, 11, 28)
RANK_JSON = '{"pick": [1, 0]}'
PERSPECTIVES = (
    '{"perspectives": [{"type": "technical", "query": "stadia shutdown reasons", '
    '"confidence": 0.9}, {"type": "user", "query": "stadia refunds for players", '
    '"confidence": 0.8}]}'
)

MakeRunner = Callable[..., StepRunner]


@pytest.fixture
async def make_runner(testbed_clean: TestbedServer) -> AsyncIterator[MakeRunner]:
    clients: list[LlmClient] = []

    def make(model: str, base_url: str | None = None, **settings: Any) -> StepRunner:
        llm = LlmSettings(base_url=base_url or testbed_clean.llm_url(), model=model, **settings)
        client = LlmClient(llm)
        clients.append(client)
        return StepRunner(client, llm, Deadline(30), CallBudget(10), TODAY)

    yield make
    for client in clients:
        await client.aclose()


def forms(bodies: list[dict[str, Any]]) -> list[str]:
    """How each request asked for JSON."""
    found = []
    for body in bodies:
        fmt = body.get("response_format") or {}
        found.append("guided_json" if "guided_json" in body else fmt.get("type", "none"))
    return found


# --- structured output: the form the endpoint accepts, probed once ----------------------


async def test_auto_tries_the_next_form_after_a_refusal_and_keeps_the_one_accepted(
    make_runner: MakeRunner, testbed_clean: TestbedServer
) -> None:
    # As llama-cpp-python's server: OpenAI's json_schema refused with 422.
    runner = make_runner(script(reply=PERSPECTIVES, refuse=["json_schema"]))
    assert runner.client is not None and runner.client.structured is None
    first = await generate(runner, "why did stadia close", 2, reserve=0)
    assert first.source == "llm"
    assert forms(testbed_clean.chat_bodies()) == ["json_schema", "json_object"]
    assert testbed_clean.chat_bodies()[1]["response_format"]["schema"]["required"] == [
        "perspectives"
    ]
    assert runner.client.structured == "json_object"
    await generate(runner, "why did stadia close", 2, reserve=0)  # no second probe
    assert forms(testbed_clean.chat_bodies()) == ["json_schema", "json_object", "json_object"]
    assert runner.tokens_used() > 0 and len(runner.records) == 2  # one call each


async def test_a_server_error_naming_the_form_is_a_refusal_and_other_errors_keep_none(
    make_runner: MakeRunner, testbed_clean: TestbedServer
) -> None:
    # llama-cpp-python 0.3.36 answers OpenAI's json_schema with a 500 that names
    # response_format (its validation error), not a 422.
    runner = make_runner(script(reply=PERSPECTIVES, refuse=["json_schema"], refuse_status=500))
    assert (await generate(runner, "why did stadia close", 2, reserve=0)).source == "llm"
    assert forms(testbed_clean.chat_bodies()) == ["json_schema", "json_object"]
    assert runner.client is not None and runner.client.structured == "json_object"
    # A 503 says nothing about the form: nothing is kept, the next call probes again.
    down = make_runner(script(status=503))
    assert (await generate(down, "why did stadia close", 2, reserve=0)).source == "templates"
    assert down.client is not None and down.client.structured is None


async def test_a_server_refusing_every_form_gets_the_prompt_alone(
    make_runner: MakeRunner, testbed_clean: TestbedServer
) -> None:
    refuse = ["json_schema", "json_object", "guided_json"]
    runner = make_runner(script(reply=PERSPECTIVES, refuse=refuse))
    assert (await generate(runner, "why did stadia close", 2, reserve=0)).source == "llm"
    assert forms(testbed_clean.chat_bodies()) == [*refuse, "none"]
    assert runner.client is not None and runner.client.structured == "none"


async def test_a_text_step_neither_probes_nor_sends_a_schema(
    make_runner: MakeRunner, testbed_clean: TestbedServer
) -> None:
    runner = make_runner(script(reply="stadia shutdown reasons", refuse=["json_schema"]))
    assert (await rewrite_query(runner, "why did stadia close", reserve=0)).value
    assert forms(testbed_clean.chat_bodies()) == ["none"]
    assert runner.client is not None and runner.client.structured is None


async def test_health_shows_the_form_the_endpoint_accepted(
    make_settings, serve_searcher, testbed_clean
) -> None:
    model = script(reply=RANK_JSON, refuse=["json_schema"])
    base = serve_searcher(make_settings(llm={"base_url": testbed_clean.llm_url(), "model": model}))
    assert httpx.get(f"{base}/v1/health").json()["llm"]["structured_output"] is None
    body = {"query": "Google Stadia games", "constraints": {"rank": "llm"}}
    data = httpx.post(f"{base}/v1/search", json=body, timeout=30).json()
    assert data["meta"]["rank"]["fallback_used"] is False
    assert httpx.get(f"{base}/v1/health").json()["llm"]["structured_output"] == "json_object"


async def test_the_schema_changes_what_a_small_model_replies(make_runner: MakeRunner) -> None:
    # A server that enforces the schema answers in JSON; without it, prose (SmolLM2's way).
    model = script(reply="Sure! The first two look best.", schema_reply=RANK_JSON)
    with_schema = make_runner(model)
    without = make_runner(model, structured_output="none")
    for runner, used in ((with_schema, True), (without, False)):
        outcome = await runner.run("rank", [{"role": "user", "content": "rank"}], str)
        assert (outcome.value == RANK_JSON) is used


async def test_the_rank_schema_bounds_the_picks_to_this_call(
    make_runner: MakeRunner, testbed_clean: TestbedServer
) -> None:
    # A grammar built from an unbounded list let SmolLM2 count 1, 2, 3, ... until
    # max_tokens (llama.cpp's server); the schema sent says how many, and which indices.
    candidates = [
        Candidate(i, f"Result {i}", "about stadia", f"http://r{i}.example/") for i in range(5)
    ]
    ranked = await rank_candidates(make_runner(script(reply=RANK_JSON)), "stadia", candidates, 2)
    assert ranked.picks == [1, 0] and ranked.fallback_used is False
    (body,) = testbed_clean.chat_bodies()
    sent = body["response_format"]["json_schema"]
    pick = sent["schema"]["properties"]["pick"]
    assert (pick["minItems"], pick["maxItems"]) == (1, 2)
    assert (pick["items"]["minimum"], pick["items"]["maximum"]) == (0, 4)
    assert sent["strict"] is True  # the step's own schema, narrowed, not a caller's
    assert pick_schema(1, 3)["properties"]["pick"]["maxItems"] == 1  # never more than there are


# --- the context window -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "tokens"), [("llmctx/2048", 2048), ("vllmctx/8192", 8192), ("llm", None)]
)
async def test_the_context_window_is_read_from_the_server(
    make_runner: MakeRunner, testbed_clean: TestbedServer, path: str, tokens: int | None
) -> None:
    runner = make_runner(script(reply="x"), base_url=f"{testbed_clean.base_url}/{path}/v1")
    assert await runner.context_tokens() == tokens
    configured = make_runner(
        script(reply="x"), base_url=f"{testbed_clean.base_url}/{path}/v1", context_tokens=1000
    )
    assert await configured.context_tokens() == 1000


async def test_evidence_is_trimmed_to_fit_with_room_for_the_reply(
    make_runner: MakeRunner, testbed_clean: TestbedServer
) -> None:
    base = f"{testbed_clean.base_url}/llmctx/1024/v1"
    runner = make_runner(script(reply="Stadia closed [1]."), base_url=base)
    pack = "\n".join(f"[{n}] item {n}: " + "cloud gaming words " * 10 for n in range(1, 200))
    outcome = await write_answer(runner, "why did stadia close", pack, 199)
    assert outcome.value == "Stadia closed [1]."
    (body,) = testbed_clean.chat_bodies()
    sent = sum(len(m["content"]) for m in body["messages"])
    # Counted at 3 characters a token, the prompt and max_tokens fit in 1024 tokens.
    assert sent / 3 + body["max_tokens"] <= 1024
    user = body["messages"][1]["content"]
    assert user.startswith("[1] item 1:") and "[199]" not in user  # the best items kept
    assert user.endswith("Question: why did stadia close\nAnswer:")  # the question kept


async def test_a_prompt_that_cannot_fit_is_not_sent(
    make_runner: MakeRunner, testbed_clean: TestbedServer
) -> None:
    runner = make_runner(script(reply="q"), base_url=f"{testbed_clean.base_url}/llmctx/256/v1")
    outcome = await rewrite_query(runner, "stadia " * 400, reserve=0)
    assert outcome.value is None and "do not fit the model's context of 256" in str(outcome.reason)
    assert testbed_clean.chat_bodies() == []


# --- replies cut at max_tokens ----------------------------------------------------------


async def test_a_json_reply_cut_at_max_tokens_is_refused(make_runner: MakeRunner) -> None:
    runner = make_runner(script(reply=RANK_JSON, finish_reason="length"))
    outcome = await runner.run("rank", [{"role": "user", "content": "rank"}], str)
    assert outcome.value is None
    assert outcome.reason == "reply cut off at max_tokens=96"


async def test_an_answer_cut_at_max_tokens_keeps_its_whole_sentences(
    make_runner: MakeRunner,
) -> None:
    reply = "Stadia closed in January [1]. Google said that the"
    runner = make_runner(script(reply=reply, finish_reason="length"))
    outcome = await write_answer(runner, "why did stadia close", "[1] Stadia text", 1)
    assert outcome.value == "Stadia closed in January [1]."
    assert "unfinished last sentence dropped" in str(runner.records[-1].reason)
    assert without_last_sentence("no sentence end at all") == ""


# --- checked before use -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("rewrite", "question", "problem"),
    [
        ("The company closed Stadia in 2017.", "why did stadia close", "a sentence"),
        ("Stadia closed due to low user numbers", "why did stadia close", "states an answer"),
        ("stadia shutdown 2019", "why did stadia close", "adds facts"),
        ("cloud gaming services", "why did stadia close", "key terms"),
        ("stadia games", "Google Stadia Microsoft xCloud Apple Arcade games", "key terms"),
        (
            "stadia cloud streaming latency comparison",
            "Stadia vs GeForce Now vs Xbox Cloud Gaming latency",
            "drops 'geforce', 'now', 'xbox'",
        ),
        ("stadia xcloud arcade", "Google Stadia Microsoft xCloud Apple Arcade games", None),
        ("stadia shutdown reason", "why did stadia close", None),
        ("best laptops 2026", "best laptops", None),
        ("bm25 ranking function", "what is BM25", None),
    ],
)
def test_a_rewrite_must_stay_a_query_for_the_question(
    rewrite: str, question: str, problem: str | None
) -> None:
    found = rewrite_problem(rewrite, question, TODAY)
    assert (found is None) if problem is None else (problem in str(found))


async def test_a_rewrite_that_answers_is_not_searched_and_errors_say_why(
    make_settings, serve_searcher, testbed_clean
) -> None:
    model = script(reply="The company closed Stadia in 2017.")
    llm = {"base_url": testbed_clean.llm_url(), "model": model}
    base = serve_searcher(make_settings(llm=llm, backends={"order": ["searxng"]}))
    body = {"query": "why did stadia close", "constraints": {"rewrite": True}}
    data = httpx.post(f"{base}/v1/search", json=body, timeout=30).json()
    assert data["meta"]["rewritten_query"] is None
    searched = {e.query["q"] for e in testbed_clean.log if e.path == "/searxng/search"}
    assert searched == {"why did stadia close"}
    (reason,) = [e["reason"] for e in data["meta"]["errors"] if e["stage"] == "rewrite"]
    assert "the rewrite is not searched, it is a sentence, not a search query" in reason


def test_perspectives_off_topic_or_answering_are_dropped() -> None:
    found = [
        Perspective("technical", "stadia shutdown reasons", 0.9),
        Perspective("user", "best pizza in naples", 0.8),  # off topic
        Perspective("conceptual", "reasons stadia shutdown", 0.7),  # alike: diversity's call
        Perspective("examples", "Stadia closed in 2023.", 0.6),  # an answer
    ]
    kept = checked_perspectives(found, "why did stadia close", TODAY)
    assert [p.type for p in kept] == ["technical", "conceptual"]
    with pytest.raises(LlmBadReply, match="no perspective usable"):
        checked_perspectives(found[1:2], "why did stadia close", TODAY)


def test_crag_grades_and_refinements_are_checked_against_the_evidence() -> None:
    nothing = [Evidence(keyword_overlap=0.0, relevance=0.0)]
    with pytest.raises(LlmBadReply, match="graded CORRECT"):
        checked_verdict(Verdict("CORRECT", "llm"), "why did stadia close", nothing, TODAY)
    some = [Evidence(keyword_overlap=0.5, relevance=1.0)]
    answer = Verdict("AMBIGUOUS", "llm", "Stadia closed in 2023.")
    checked = checked_verdict(answer, "why did stadia close", some, TODAY)
    assert checked.refined_query is None and "refined query not used" in str(checked.reason)
    off = Verdict("AMBIGUOUS", "llm", "best pizza in naples")
    assert checked_verdict(off, "why did stadia close", some, TODAY).refined_query is None
    # A refinement may narrow and add a year: the model has seen the results.
    good = Verdict("AMBIGUOUS", "llm", "stadia shutdown 2022")
    assert checked_verdict(good, "why did stadia close", some, TODAY) == good


def test_research_plans_keep_only_sub_questions_on_the_question() -> None:
    question = "Which came first, Google Stadia or Apple Arcade?"
    plan = [
        "When did Google Stadia launch?",
        "When did Apple Arcade launch?",
        "What is the capital of France?",  # off topic
        "Google Stadia launched in 2019.",  # a guessed fact
        "when did google stadia launch",  # the same as the first
    ]
    kept = checked_sub_questions(plan, question, TODAY)
    assert kept == plan[:2]
    with pytest.raises(LlmBadReply, match="no sub-question"):
        checked_sub_questions(plan[2:4], question, TODAY)
