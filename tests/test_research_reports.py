"""A research report keeps its sources (issue 24, defect 9): over real HTTP, against the
testbed, the body is fitted to ``max_report_chars``, the Sources list is whole (no URL
cut), each URL is listed once with the passages of it the body cites, and every ``[n]``
in the body resolves to a listed source, for the evidence report and the model's."""

from __future__ import annotations

import json
import re
from typing import Any

import httpx
import pytest

from searcher.research.evidence import EvidencePool, Passage, best_in_evidence, choose_evidence
from searcher.research.sources import SOURCES_HEADING, refit
from tests.test_research import QUESTION, _llm, follow, start
from tests.testbed.chat import script

SUB_QUESTIONS = [
    "Google Stadia launch",
    "Microsoft xCloud games",
    "Apple Arcade price",
    "cloud gaming subscriptions",
]
_LISTED = re.compile(r"^\[(\d+(?:, \d+)*)\] (.*) — (\S+)$")
_CITED = re.compile(r"\[(\d+(?:,\s*\d+)*)\]")


def finished_result(base: str, body: dict[str, Any]) -> dict[str, Any]:
    job_id = start(base, body)
    follow(base, job_id)
    job = httpx.get(f"{base}/v1/research/{job_id}", timeout=30).json()
    assert job["status"] == "done", job.get("error")
    result: dict[str, Any] = job["result"]
    return result


def check_sources(report: str, evidence: list[dict[str, Any]], max_chars: int) -> dict[int, str]:
    """Assert what a report must hold; returns ``{n: url}`` of its Sources list."""
    assert len(report) <= max_chars
    body, heading, listed = report.partition(f"\n\n{SOURCES_HEADING}\n\n")
    assert heading, "the report has no Sources list"
    url_of = {p["n"]: p["url"] for p in evidence}
    sources: dict[int, str] = {}
    urls = []
    for line in listed.splitlines():
        match = _LISTED.match(line)
        assert match, f"not a whole source line: {line!r}"
        url = match.group(3)
        urls.append(url)
        for n in map(int, match.group(1).split(", ")):
            assert url_of[n] == url  # the passage is of that source
            sources[n] = url
    assert len(urls) == len(set(urls)), "a URL is listed more than once"
    assert set(urls) <= set(url_of.values())  # whole URLs, none cut
    cited = {int(n) for group in _CITED.findall(body) for n in group.split(",")}
    assert cited and cited <= set(sources), f"cited {cited - set(sources)} resolve to nothing"
    assert set(sources) <= cited  # and nothing listed that the body does not cite
    return sources


@pytest.mark.parametrize("max_chars", [600, 1000, None])
def test_an_evidence_report_keeps_its_whole_sources_within_its_length(
    make_settings, serve_searcher, testbed, max_chars
):
    # The balanced preset's 5,000 characters cut the Sources list after [4], a URL
    # halfway, and listed one URL once per passage. (The model only plans: four
    # sub-questions make a long report; it writes none, so the report is the evidence's.)
    plan = json.dumps({"sub_questions": SUB_QUESTIONS})
    base = serve_searcher(make_settings(llm=_llm(testbed, research_plan=script(reply=plan))))
    budget = {"max_report_chars": max_chars} if max_chars else {}
    body = {"query": QUESTION, "preset": "balanced", "budget": budget}
    result = finished_result(base, body)
    assert result["report_method"] == "evidence"
    report = result["report"]
    sources = check_sources(report, result["evidence"], max_chars or 5000)
    if max_chars is None:  # some source supports several passages: listed once
        assert len(set(sources.values())) < len(sources)
    else:  # the body gave way, and says so
        assert "\n\n…\n\n## Sources" in report


def test_a_models_report_gets_its_sources_and_is_fitted_too(make_settings, serve_searcher, testbed):
    sentence = "Google Stadia was a cloud gaming service by Google [1][2]. "
    written = sentence * 40 + "Microsoft xCloud streams games [3, 4]."
    llm = _llm(testbed, research_report=script(reply=written))
    base = serve_searcher(make_settings(llm=llm))
    body = {"query": QUESTION, "preset": "balanced", "budget": {"max_report_chars": 900}}
    result = finished_result(base, body)
    assert result["report_method"] == "llm"
    report = result["report"]
    check_sources(report, result["evidence"], 900)
    assert report.startswith("Google Stadia was a cloud gaming service by Google")
    assert "[3, 4]" not in report  # its sentence did not fit; its sources are not listed


def test_a_report_refitted_smaller_keeps_the_sources_of_what_is_left():
    report = (
        "Alpha beta [1]. Gamma delta [2]. Epsilon [3].\n\n## Sources\n\n"
        "[1, 3] A — https://a.example/x\n[2] B — https://b.example/y"
    )
    assert refit(report, len(report)) == report
    smaller = refit(report, 62)
    assert smaller == "Alpha beta [1].\n\n…\n\n## Sources\n\n[1, 3] A — https://a.example/x"
    assert refit(report, 10) == ""  # not even one cited sentence fits with its source


def test_a_section_cites_the_best_passages_the_evidence_holds():
    # The question's second-best passage is a result snippet whose page was read: the
    # evidence leaves it out (the page says it), and the section cited one source only
    # where the page's passage, next best, was right there.
    question = "cloud gaming Stadia xCloud"
    pool = EvidencePool()
    pool.add(
        Passage(
            "file:///notes/gaming.md",
            "Cloud gaming",
            "Cloud gaming: Stadia and xCloud stream games.",
            "page",
        )
    )
    pool.add(Passage("http://t/stadia", "Stadia", "Stadia xCloud cloud gaming news", "snippet"))
    pool.add(
        Passage("http://t/stadia", "Stadia", "Stadia was Google's cloud gaming service.", "page")
    )
    order = choose_evidence(pool, [question], 10_000)
    assert 1 not in order  # the snippet of a page that was read
    numbers = {index: n for n, index in enumerate(order, start=1)}
    cited = best_in_evidence(pool, question, pool.best(question, 2), numbers, 2)
    assert [pool.passages[order[n - 1]].url for n in cited] == [
        "file:///notes/gaming.md",
        "http://t/stadia",
    ]
