"""Feedback over real HTTP: ``POST /v1/feedback``, ``GET /v1/stats/routes``, the cited
answer reporting its own citations, and ``searcher judge --from-feedback`` turning it all
into qrels."""

from __future__ import annotations

import asyncio
import re
from typing import Any

import httpx
import yaml
from click.testing import CliRunner

from searcher.cli import main
from tests.testbed.chat import script

QUERY = "Google Stadia Microsoft xCloud Apple Arcade games"
FEEDBACK = {"enabled": True}


def search(base: str, body: dict[str, Any], headers: dict[str, str] | None = None) -> Any:
    response = httpx.post(f"{base}/v1/search", json=body, headers=headers, timeout=30)
    assert response.status_code == 200, response.text
    return response


def feedback(base: str, body: Any, headers: dict[str, str] | None = None) -> httpx.Response:
    return httpx.post(f"{base}/v1/feedback", json=body, headers=headers, timeout=10)


def test_feedback_is_kept_with_the_search_and_counted_per_route(make_settings, serve_searcher):
    base = serve_searcher(make_settings(feedback=FEEDBACK))
    answer = search(base, {"query": QUERY, "budget": {"max_results": 4}})
    data = answer.json()
    rid = data["meta"]["request_id"]
    assert rid == answer.headers["x-request-id"]
    ids = [item["id"] for item in data["items"]]
    given = feedback(base, {"request_id": rid, "items": {ids[0]: "cited", ids[1]: "not_relevant"}})
    assert given.status_code == 200, given.text
    assert given.json()["items"] == {ids[0]: "cited", ids[1]: "not_relevant"}
    # A later report for an item replaces the earlier one; others are kept.
    again = feedback(base, {"request_id": rid, "items": {ids[1]: "used"}})
    assert again.json()["items"] == {ids[0]: "cited", ids[1]: "used"}
    search(base, {"query": "cloud gaming services", "budget": {"max_results": 2}})

    stats = httpx.get(f"{base}/v1/stats/routes").json()
    (row,) = [r for r in stats["routes"] if r["preset"] == "simple"]
    assert row["searches"] == 2 and row["with_feedback"] == 1 and row["used_searches"] == 1
    assert (row["used"], row["cited"], row["not_relevant"]) == (2, 1, 0)
    assert row["used_rate"] == 1.0


def test_bad_feedback_is_a_422_naming_the_field_and_an_unknown_search_a_404(
    make_settings, serve_searcher
):
    base = serve_searcher(make_settings(feedback=FEEDBACK))
    data = search(base, {"query": QUERY, "budget": {"max_results": 2}}).json()
    rid, first = data["meta"]["request_id"], data["items"][0]["id"]
    bad = feedback(base, {"request_id": rid, "items": {first: "loved"}})
    assert bad.status_code == 422 and bad.json()["error"]["field"] == f"items.{first}"
    stranger = feedback(base, {"request_id": rid, "items": {"r-nope": "used"}})
    assert stranger.status_code == 422 and stranger.json()["error"]["field"] == "items.r-nope"
    empty = feedback(base, {"request_id": rid, "items": {}})
    assert empty.status_code == 422 and empty.json()["error"]["field"] == "items"
    extra = feedback(base, {"request_id": rid, "items": {first: "used"}, "mood": "happy"})
    assert extra.status_code == 422 and extra.json()["error"]["field"] == "mood"
    unknown = feedback(base, {"request_id": "never-made", "items": {first: "used"}})
    assert unknown.status_code == 404 and "never-made" in unknown.json()["error"]["message"]


def test_without_feedback_enabled_no_record_is_kept(make_settings, serve_searcher):
    base = serve_searcher(make_settings())
    answer = search(base, {"query": QUERY, "budget": {"max_results": 2}})
    assert answer.json()["meta"]["request_id"] is None
    rid, first = answer.headers["x-request-id"], answer.json()["items"][0]["id"]
    refused = feedback(base, {"request_id": rid, "items": {first: "used"}})
    assert refused.status_code == 404 and "feedback.enabled" in refused.text


def test_feedback_wants_an_api_key_when_keys_are_on(make_settings, serve_searcher, config_file):
    from tests.test_auth import bearer, create_key

    config = config_file()
    base = serve_searcher(make_settings(auth={"enabled": True}, feedback=FEEDBACK))
    key = bearer(create_key(config, "agent"))
    data = search(base, {"query": QUERY, "budget": {"max_results": 2}}, key).json()
    body = {"request_id": data["meta"]["request_id"], "items": {data["items"][0]["id"]: "used"}}
    assert feedback(base, body).status_code == 401
    assert httpx.get(f"{base}/v1/stats/routes").status_code == 401
    assert feedback(base, body, key).status_code == 200


def test_a_key_neither_gives_feedback_on_nor_counts_another_keys_searches(
    make_settings, serve_searcher, config_file
):
    from tests.test_auth import bearer, create_key

    config = config_file()
    base = serve_searcher(make_settings(auth={"enabled": True}, feedback=FEEDBACK))
    alice, bob = bearer(create_key(config, "alice")), bearer(create_key(config, "bob"))
    data = search(base, {"query": QUERY, "budget": {"max_results": 2}}, alice).json()
    rid, first = data["meta"]["request_id"], data["items"][0]["id"]
    # To Bob, Alice's search does not exist: not writable, and its item ids not listed.
    for items in ({first: "not_relevant"}, {"zzz": "used"}):
        refused = feedback(base, {"request_id": rid, "items": items}, bob)
        assert refused.status_code == 404, refused.text
        assert first not in refused.text
    assert httpx.get(f"{base}/v1/stats/routes", headers=bob).json()["routes"] == []
    assert feedback(base, {"request_id": rid, "items": {first: "used"}}, alice).status_code == 200
    (row,) = httpx.get(f"{base}/v1/stats/routes", headers=alice).json()["routes"]
    assert (row["searches"], row["with_feedback"], row["used"]) == (1, 1, 1)


def test_a_request_id_another_key_chose_too_leaves_each_keys_search_its_own(
    make_settings, serve_searcher, config_file
):
    from tests.test_auth import bearer, create_key

    config = config_file()
    base = serve_searcher(make_settings(auth={"enabled": True}, feedback=FEEDBACK))
    alice, bob = bearer(create_key(config, "alice")), bearer(create_key(config, "bob"))
    same = {"X-Request-ID": "shared-id"}
    hers = search(base, {"query": QUERY, "budget": {"max_results": 2}}, alice | same).json()
    his = search(base, {"query": QUERY, "budget": {"max_results": 1}}, bob | same).json()
    assert hers["meta"]["request_id"] == his["meta"]["request_id"] == "shared-id"
    her_second, his_first = hers["items"][1]["id"], his["items"][0]["id"]
    # Bob's search, made after hers with her id, did not take her search's place: her
    # second item is still one of its items (his search returned one item).
    given = feedback(base, {"request_id": "shared-id", "items": {her_second: "used"}}, alice)
    assert given.status_code == 200, given.text
    assert given.json()["items"] == {her_second: "used"}
    refused = feedback(base, {"request_id": "shared-id", "items": {her_second: "used"}}, bob)
    assert refused.status_code == 422, refused.text  # not an item of his search
    given = feedback(base, {"request_id": "shared-id", "items": {his_first: "cited"}}, bob)
    assert given.status_code == 200, given.text
    assert given.json()["items"] == {his_first: "cited"}  # none of her outcomes
    (row,) = httpx.get(f"{base}/v1/stats/routes", headers=alice).json()["routes"]
    assert (row["searches"], row["used"], row["cited"]) == (1, 1, 0)


def test_the_cited_answer_reports_its_citations_and_judge_turns_feedback_into_qrels(
    make_settings, serve_searcher, testbed_clean, tmp_path
):
    llm = {"base_url": testbed_clean.llm_url(), "model": script(reply="Stadia streams [1].")}
    settings = make_settings(llm=llm, feedback=FEEDBACK)
    base = serve_searcher(settings)
    data = search(base, {"query": QUERY, "want": {"answer": True}, "budget": {"max_results": 3}})
    data = data.json()
    first, second = data["items"][0], data["items"][1]
    rid = data["meta"]["request_id"]
    # The answer cited item 1 on its own; the agent says item 2 was not relevant.
    given = feedback(base, {"request_id": rid, "items": {second["id"]: "not_relevant"}}).json()
    assert given["items"] == {first["id"]: "cited", second["id"]: "not_relevant"}

    config = tmp_path / "judge.yaml"  # the server's state directory, feedback on
    config.write_text(yaml.safe_dump({"state": {"dir": settings.state.dir}, "feedback": FEEDBACK}))
    out = tmp_path / "feedback.qrels"
    result = CliRunner().invoke(
        main, ["judge", "--from-feedback", "--out", str(out), "--config", str(config)]
    )
    assert result.exit_code == 0, result.output
    queries = (tmp_path / "feedback.tsv").read_text().splitlines()
    assert queries == [f"f1\t{QUERY}"]
    qrels = sorted((tmp_path / "feedback.qrels").read_text().splitlines())
    assert qrels == sorted([f"f1 0 {first['url']} 2", f"f1 0 {second['url']} 0"])


def test_a_research_job_reports_the_passages_its_report_cited(make_settings, serve_searcher):
    from tests.test_research import QUESTION, follow, start

    base = serve_searcher(make_settings(feedback=FEEDBACK))
    job_id = start(base, {"query": QUESTION, "preset": "minimal"})
    follow(base, job_id)  # to the end of its events
    result = httpx.get(f"{base}/v1/research/{job_id}").json()["result"]
    cited = {int(n) for n in re.findall(r"\[(\d+)\]", result["report"])}
    assert cited
    # The job id is the request id; the evidence's numbers are the item ids.
    extra = str(max(p["n"] for p in result["evidence"]))
    given = feedback(base, {"request_id": job_id, "items": {extra: "not_relevant"}})
    assert given.status_code == 200, given.text
    expected = {str(n): "cited" for n in cited} | {extra: "not_relevant"}
    assert given.json()["items"] == expected
    stats = httpx.get(f"{base}/v1/stats/routes").json()["routes"]
    (row,) = [r for r in stats if r["route"] == "research"]
    assert row["preset"] == "research:minimal" and row["cited"] == len(cited - {int(extra)})


def test_a_request_id_used_again_keeps_its_newest_record_until_its_own_slot_comes_round(
    make_settings, serve_searcher
):
    base = serve_searcher(make_settings(feedback={"enabled": True, "max_searches": 3}))

    def search_as(request_id: str, query: str) -> Any:
        return search(base, {"query": query, "budget": {"max_results": 2}},
                      {"X-Request-ID": request_id}).json()  # fmt: skip

    search_as("A", QUERY)
    again = search_as("A", "cloud gaming services")  # A moves to the second slot
    search_as("B", QUERY)
    search_as("C", QUERY)  # takes the first slot, which named A before it moved
    item = again["items"][0]["id"]
    kept = feedback(base, {"request_id": "A", "items": {item: "used"}})
    assert kept.status_code == 200, kept.text
    search_as("D", QUERY)  # A's own slot: now it goes
    assert feedback(base, {"request_id": "A", "items": {item: "used"}}).status_code == 404


def test_an_answer_citing_an_item_beyond_those_kept_is_answered_and_the_rest_recorded(
    make_settings, serve_searcher, testbed_clean
):
    llm = {"base_url": testbed_clean.llm_url(), "model": script(reply="Stadia [1] and xCloud [2].")}
    base = serve_searcher(make_settings(llm=llm, feedback={"enabled": True, "max_items": 1}))
    data = search(base, {"query": QUERY, "want": {"answer": True}, "budget": {"max_results": 3}})
    data = data.json()  # (a 422 before: the second citation is beyond the one item kept)
    first, second = data["items"][0]["id"], data["items"][1]["id"]
    assert {c["id"] for c in data["answer_citations"]} >= {first, second}
    rid = data["meta"]["request_id"]
    given = feedback(base, {"request_id": rid, "items": {first: "cited"}}).json()
    assert given["items"] == {first: "cited"}
    refused = feedback(base, {"request_id": rid, "items": {second: "used"}})
    assert refused.status_code == 422 and "feedback.max_items" in refused.text


def test_a_request_id_used_again_starts_its_new_search_without_outcomes(
    make_settings, serve_searcher
):
    base = serve_searcher(make_settings(feedback=FEEDBACK))
    same = {"X-Request-ID": "again"}
    first = search(base, {"query": QUERY, "budget": {"max_results": 2}}, same).json()
    item = first["items"][0]["id"]
    assert feedback(base, {"request_id": "again", "items": {item: "cited"}}).status_code == 200
    second = search(base, {"query": QUERY, "budget": {"max_results": 2}}, same).json()
    other = second["items"][1]["id"]
    given = feedback(base, {"request_id": "again", "items": {other: "used"}}).json()
    assert given["items"] == {other: "used"}  # not the first search's "cited" as well
    (row,) = httpx.get(f"{base}/v1/stats/routes").json()["routes"]
    # ("used" counts the results used or cited)
    assert (row["searches"], row["with_feedback"], row["cited"], row["used"]) == (2, 2, 1, 2)


def test_taking_back_a_searchs_only_use_takes_back_its_used_search(make_settings, serve_searcher):
    base = serve_searcher(make_settings(feedback=FEEDBACK))
    data = search(base, {"query": QUERY, "budget": {"max_results": 2}}).json()
    rid, item = data["meta"]["request_id"], data["items"][0]["id"]
    for outcome in ("used", "not_relevant"):
        answer = feedback(base, {"request_id": rid, "items": {item: outcome}})
        assert answer.status_code == 200, answer.text
    (row,) = httpx.get(f"{base}/v1/stats/routes").json()["routes"]
    assert (row["used"], row["not_relevant"], row["used_searches"], row["used_rate"]) == (
        0, 1, 0, 0.0,
    )  # fmt: skip


def test_reports_on_one_search_arriving_at_once_are_all_kept_and_counted_once(
    make_settings, serve_searcher, redis_url, matching_query
):
    # Two servers sharing one real Redis, as two workers do; eight reports at once, each
    # on another item of the same search, half through each server.
    settings = make_settings(feedback=FEEDBACK, state={"redis_url": redis_url})
    bases = [serve_searcher(settings), serve_searcher(settings)]
    data = search(bases[0], {"query": matching_query, "budget": {"max_results": 8}}).json()
    rid, ids = data["meta"]["request_id"], [item["id"] for item in data["items"]]
    assert len(ids) == 8

    async def report_all() -> list[httpx.Response]:
        async with httpx.AsyncClient(timeout=30) as client:
            return await asyncio.gather(*(
                client.post(f"{bases[n % 2]}/v1/feedback",
                            json={"request_id": rid, "items": {item: "used"}})
                for n, item in enumerate(ids)
            ))  # fmt: skip

    answers = asyncio.run(report_all())
    assert all(a.status_code == 200 for a in answers), [a.text for a in answers]
    everything = feedback(bases[1], {"request_id": rid, "items": {ids[0]: "cited"}}).json()
    assert everything["items"] == {**dict.fromkeys(ids, "used"), ids[0]: "cited"}
    (row,) = httpx.get(f"{bases[0]}/v1/stats/routes").json()["routes"]
    assert (row["with_feedback"], row["used_searches"]) == (1, 1)
    assert (row["used"], row["cited"]) == (8, 1)
