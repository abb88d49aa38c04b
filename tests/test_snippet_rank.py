"""The Snippet Ranking Contract (seed 001, section 11): every validation rule of 11.4, on
its own (``validate_pick``) and through the whole step over HTTP (``snippet_rank``), and
the request the model receives (11.5 budget, 11.6 reference prompt)."""

from __future__ import annotations

from datetime import date
from typing import Any

import pytest

from searcher.config import LlmStepsSettings
from searcher.errors import LlmBadReply
from searcher.llm import (
    Candidate,
    RankResult,
    fallback_pick,
    rank_messages,
    snippet_rank,
    validate_pick,
)
from tests.testbed import TestbedServer
from tests.testbed.chat import script

TODAY = date(2026, 1, 2)


def results(n: int) -> list[dict[str, Any]]:
    return [
        {"title": f"Title {i}", "snippet": f"Snippet {i}", "url": f"https://e{i}.example/p"}
        for i in range(n)
    ]


# (id, reply, candidates N, want_n, picks); picks None: validation fails (fallback).
RULES: list[tuple[str, str, int, int, list[int] | None]] = [
    ("valid", '{"pick":[2,0,1]}', 5, 3, [2, 0, 1]),
    ("valid_with_why", '{"pick":[1,4,0],"why":["a","b","c"]}', 5, 3, [1, 4, 0]),
    ("code_fence", '```json\n{"pick": [4, 1, 3]}\n```', 5, 3, [4, 1, 3]),
    ("prose", 'Sure! Here you go: {"pick": [3, 2, 1]} Hope that helps.', 5, 3, [3, 2, 1]),
    ("invalid_json", "{pick: [1, 2, 3]}", 5, 3, None),
    ("no_json", "The first three results look best.", 5, 3, None),
    ("json_array", "[1, 2, 3]", 5, 3, None),
    ("pick_missing", '{"picks": [1, 2, 3]}', 5, 3, None),
    ("pick_int", '{"pick": 1}', 5, 3, None),
    ("pick_string", '{"pick": "1,2,3"}', 5, 3, None),
    ("pick_null", '{"pick": null}', 5, 3, None),
    ("pick_object", '{"pick": {"0": 1}}', 5, 3, None),
    ("pick_empty", '{"pick": []}', 5, 3, None),
    ("out_of_range", '{"pick": [-1, 5, 3, 9, 1]}', 5, 3, [3, 1]),
    ("non_integers", '{"pick": ["1", 1.0, true, null, [0], {"i": 0}, 2, 4]}', 5, 3, [2, 4]),
    ("bool_not_index", '{"pick": [true, false, 3]}', 5, 3, [3]),
    ("duplicates", '{"pick": [3, 3, 1, 3, 1, 0]}', 5, 3, [3, 1, 0]),
    ("capped", '{"pick": [4, 3, 2, 1, 0]}', 5, 3, [4, 3, 2]),
    ("dedup_before_cap", '{"pick": [1, 1, 1, 2]}', 5, 2, [1, 2]),
    ("all_invalid", '{"pick": [7, -2, "0", 1.5, false]}', 5, 3, None),
    ("fewer_candidates", '{"pick": [1, 0]}', 2, 3, [1, 0]),
    ("fewer_candidates_long_pick", '{"pick": [1, 0, 2, 3]}', 2, 3, [1, 0]),
    ("fewer_candidates_invalid", '{"pick": [5]}', 2, 3, None),
]
RULE_IDS = [r[0] for r in RULES]


@pytest.mark.parametrize(("reply", "n", "want_n", "picks"), [r[1:] for r in RULES], ids=RULE_IDS)
def test_validate_pick(reply: str, n: int, want_n: int, picks: list[int] | None) -> None:
    if picks is None:
        with pytest.raises(LlmBadReply):
            validate_pick(reply, n, want_n)
    else:
        assert validate_pick(reply, n, want_n) == picks


@pytest.mark.parametrize(
    ("n", "want_n", "expected"), [(10, 3, [0, 1, 2]), (5, 5, [0, 1, 2, 3, 4]), (2, 3, [0, 1])]
)
def test_fallback_pick_is_the_first_want_n(n: int, want_n: int, expected: list[int]) -> None:
    assert fallback_pick(n, want_n) == expected


@pytest.mark.parametrize(("reply", "n", "want_n", "picks"), [r[1:] for r in RULES], ids=RULE_IDS)
async def test_rules_through_the_step(
    testbed_clean: TestbedServer, reply: str, n: int, want_n: int, picks: list[int] | None
) -> None:
    result = await snippet_rank(
        "which result?",
        results(n),
        base_url=testbed_clean.llm_url(),
        model=script(reply=reply),
        want_n=want_n,
        today=TODAY,
    )
    assert len(testbed_clean.chat_bodies()) == 1  # one call, no retry
    if picks is None:
        assert result.picks == list(range(min(n, want_n)))
        assert result.fallback_used
        assert result.reason is not None and result.reason.startswith("invalid reply")
    else:
        assert result == RankResult(picks, False, None)


@pytest.mark.parametrize(
    ("model", "timeout_s", "reason"),
    [
        (script(reply=""), 10.0, "empty reply"),
        (script(status=500), 10.0, "HTTP 500"),
        ("not-a-scripted-model", 10.0, "HTTP 404"),
        (script(garbage=True), 10.0, "unreadable reply"),
        (script(hang=True), 0.3, "no reply within"),
        (script(delay_ms=3000, reply='{"pick":[2]}'), 0.3, "no reply within"),
    ],
    ids=["empty", "http500", "http404", "garbage", "hang", "delay"],
)
async def test_call_failures_fall_back_with_a_reason(
    testbed_clean: TestbedServer, model: str, timeout_s: float, reason: str
) -> None:
    result = await snippet_rank(
        "q", results(6), base_url=testbed_clean.llm_url(), model=model, timeout_s=timeout_s
    )
    assert result.picks == [0, 1, 2]
    assert result.fallback_used
    assert result.reason is not None and reason in result.reason


async def test_not_configured_falls_back_without_a_call(testbed_clean: TestbedServer) -> None:
    result = await snippet_rank("q", results(4), base_url="", model="m", want_n=2)
    assert result.picks == [0, 1]
    assert result.fallback_used and result.reason and "no LLM configured" in result.reason
    assert testbed_clean.chat_bodies() == []


async def test_no_results_make_no_call(testbed_clean: TestbedServer) -> None:
    result = await snippet_rank(
        "q", [], base_url=testbed_clean.llm_url(), model=script(reply='{"pick":[0]}')
    )
    assert result == RankResult([], True, "no results to rank")
    assert testbed_clean.chat_bodies() == []


def test_budget_defaults_follow_the_seed() -> None:
    rank = LlmStepsSettings().rank
    assert (rank.top_k, rank.want_n) == (10, 3)
    assert rank.temperature is not None and 0.0 <= rank.temperature <= 0.2
    assert rank.max_tokens is not None and 64 <= rank.max_tokens <= 128


async def test_request_follows_the_reference_prompt(testbed_clean: TestbedServer) -> None:
    items = results(12)
    items[3] = {"title": "Multi\nline   title", "snippet": "x " * 400, "url": ""}
    query = "как отправить фото в Telegram Bot API"
    result = await snippet_rank(
        query,
        items,
        base_url=testbed_clean.llm_url(),
        model=script(reply='{"pick": [10, 11, 7, 2]}'),
        today=TODAY,
    )
    # Only the top 10 are candidates: 10 and 11 do not exist for the model.
    assert result == RankResult([7, 2], False, None)

    (body,) = testbed_clean.chat_bodies()
    assert 0.0 <= body["temperature"] <= 0.2
    assert 64 <= body["max_tokens"] <= 128
    assert body["response_format"]["type"] == "json_schema"  # auto: OpenAI's form first
    system, user = body["messages"]
    assert system["role"] == "system" and user["role"] == "user"
    assert system["content"].startswith(
        "You are ranking web search results by relevance to a user question.\n"
    )
    for line in (
        'Return ONLY valid JSON: {"pick":[...]}.',
        "Use semantic relevance; do not prefer ads/SEO.",
        "No extra text.",
    ):
        assert line in system["content"].splitlines()
    assert system["content"].endswith("\nToday's date: 2026-01-02.")
    assert query not in system["content"]  # the system prompt is a stable prefix

    text = user["content"]
    assert text.startswith(f"Question: {query}\n\nCandidates:\n0) Title 0 — Snippet 0")
    assert text.endswith("\n\nPick 3. Return JSON only.")
    lines = text.split("\n\nCandidates:\n")[1].split("\n\n")[0].splitlines()
    assert len(lines) == 10
    assert lines[0] == "0) Title 0 — Snippet 0 (URL: https://e0.example/p)"
    assert lines[9] == "9) Title 9 — Snippet 9 (URL: https://e9.example/p)"
    # One line per candidate: whitespace flattened, long snippets cut, no empty URL part.
    assert lines[3].startswith("3) Multi line title — x x x")
    assert lines[3].endswith("…") and "(URL:" not in lines[3]
    assert len(lines[3]) < 350
    assert "10)" not in text and "Title 10" not in text


async def test_system_prompt_ends_with_todays_date(testbed_clean: TestbedServer) -> None:
    before = date.today()
    await snippet_rank(
        "q", results(3), base_url=testbed_clean.llm_url(), model=script(reply='{"pick":[0]}')
    )
    after = date.today()
    (body,) = testbed_clean.chat_bodies()
    system = body["messages"][0]["content"]
    assert system.endswith((f"Today's date: {before}.", f"Today's date: {after}."))


@pytest.mark.parametrize(("n", "want_n", "asked"), [(2, 3, 2), (10, 3, 3), (5, 1, 1)])
def test_the_number_asked_for_is_capped_by_the_candidates(n: int, want_n: int, asked: int) -> None:
    candidates = [Candidate(i, f"T{i}", f"S{i}", f"https://e{i}.example") for i in range(n)]
    system, user = rank_messages("q", candidates, want_n, TODAY)
    assert user["content"].endswith(f"Pick {asked}. Return JSON only.")
    assert f"{n - 1}) T{n - 1} — S{n - 1} (URL: https://e{n - 1}.example)" in user["content"]
    # The number picked lives in the user message: one system prompt for every request.
    assert system == rank_messages("other", candidates[:1], 7, TODAY)[0]


async def test_want_n_and_top_k_are_honoured(testbed_clean: TestbedServer) -> None:
    result = await snippet_rank(
        "q",
        results(8),
        base_url=testbed_clean.llm_url(),
        model=script(reply='{"pick": [4, 3, 1, 0]}'),
        want_n=2,
        top_k=4,
    )
    assert result == RankResult([3, 1], False, None)  # 4 was not shown; capped to 2
    user = testbed_clean.chat_bodies()[0]["messages"][1]["content"]
    assert "3) Title 3" in user and "4) Title 4" not in user
    assert user.endswith("Pick 2. Return JSON only.")
