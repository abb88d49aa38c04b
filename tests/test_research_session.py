"""Session novelty in research jobs, over real HTTP against the testbed: a job started
with ``constraints.session_id`` reads the pages its session was not shown before those it
was (unless ranked first), and its evidence's pages join the session; the chat model's
research turns do the same with the sources of the conversation's earlier answers."""

from __future__ import annotations

import json
from typing import Any

import httpx

from searcher.fetch.urls import page_key
from tests.test_research import follow
from tests.testbed.chat import script

QUESTION = "Google Stadia Microsoft xCloud cloud gaming"
# One search of three sub-questions' worth of pages read: what the session changes.
BUDGET = {"max_pages": 4, "max_iterations": 1}


def _research(base: str, **constraints: Any) -> tuple[list[str], dict[str, Any]]:
    """The pages a job read, in order, and its result."""
    body = {"query": QUESTION, "preset": "minimal", "budget": BUDGET, "constraints": constraints}
    response = httpx.post(f"{base}/v1/research", json=body, timeout=30)
    assert response.status_code == 202, response.text
    job_id = response.json()["id"]
    events = follow(base, job_id)
    assert events[-1]["data"]["data"]["status"] == "done", events[-1]
    read = [e["data"]["data"]["url"] for e in events if e["event"] == "read"]
    result = httpx.get(f"{base}/v1/research/{job_id}", timeout=30).json()["result"]
    return read, result


def _shown(base: str, session: str, n: int) -> list[str]:
    """Show the session the top ``n`` results of the question (a search of it)."""
    body = {
        "query": QUESTION,
        "constraints": {"session_id": session, "cache": "off"},
        "budget": {"max_results": n},
    }
    response = httpx.post(f"{base}/v1/search", json=body, timeout=30)
    assert response.status_code == 200, response.text
    return [item["url"] for item in response.json()["items"]]


def _search(base: str, n: int, **constraints: Any) -> list[str]:
    body = {
        "query": QUESTION,
        "constraints": {"cache": "off", **constraints},
        "budget": {"max_results": n},
    }
    response = httpx.post(f"{base}/v1/search", json=body, timeout=30)
    assert response.status_code == 200, response.text
    return [item["url"] for item in response.json()["items"]]


def test_a_research_job_reads_what_its_session_was_not_shown_first(make_settings, serve_searcher):
    base = serve_searcher(make_settings())
    plain, _ = _research(base)
    shown = {page_key(u) for u in _search(base, 3, session_id="agent-1")}
    assert len({page_key(u) for u in plain} & shown) >= 2  # the job would read them
    seen, _ = _research(base, session_id="agent-1")
    assert _research(base, session_id="agent-2")[0] == plain  # a session that saw nothing
    # The best page is still read first; the others shown are left for pages not shown.
    assert seen[0] == plain[0]
    assert not {page_key(u) for u in seen[1:]} & shown
    assert len(seen) == len(plain) and set(seen) != set(plain)


def test_a_research_jobs_evidence_joins_its_session(make_settings, serve_searcher):
    base = serve_searcher(make_settings())
    before = _search(base, 10)
    _, result = _research(base, session_id="agent-3")
    evidence = {page_key(p["url"]) for p in result["evidence"]}
    after = _search(base, 10, session_id="agent-3")
    # The next search of the session: pages of the job's evidence below the others,
    # except the best one.
    assert after[0] == before[0] and after != before
    repeats = [page_key(u) in evidence for u in after[1:]]
    assert repeats == sorted(repeats) and any(repeats)


def _chat_read(base: str, messages: list[dict[str, str]]) -> list[str]:
    """The pages a chat research turn read, from its reasoning ("Read URL (status)")."""
    body = {"model": "searcher-research", "messages": messages, "stream": True,
            "reasoning_effort": "low"}  # fmt: skip
    reasoning = []
    with httpx.stream("POST", f"{base}/v1/chat/completions", json=body, timeout=120) as response:
        assert response.status_code == 200
        for line in response.iter_lines():
            if line.startswith("data: {"):
                for choice in json.loads(line[6:]).get("choices", []):
                    reasoning.append(choice["delta"].get("reasoning_content") or "")
    lines = "".join(reasoning).splitlines()
    return [line.split()[1] for line in lines if line.startswith("Read ")]


def test_a_chat_research_turn_reads_the_sources_already_given_last(
    make_settings, serve_searcher, testbed
):
    llm = {
        "base_url": testbed.llm_url(),
        "model": script(status=503),  # every step falls back but the report
        "steps": {"research_report": {"model": script(reply="Cloud gaming [1].")}},
    }
    base = serve_searcher(make_settings(llm=llm, backends={"hedge": False}))
    ask = [{"role": "user", "content": QUESTION}]
    plain = _chat_read(base, ask)
    given = plain[1:3]  # sources an earlier answer of the conversation gave
    answered = "Cloud gaming [1][2].\n\nSources:\n" + "".join(
        f"[{n}] page — {url}\n" for n, url in enumerate(given, 1)
    )
    history = [*ask, {"role": "assistant", "content": answered}]
    again = _chat_read(base, [*history, {"role": "user", "content": QUESTION}])
    assert again[0] == plain[0]  # the best page is still read first
    assert not set(again) & set(given)
    assert len(again) == len(plain)
