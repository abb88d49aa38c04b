"""POST /v1/crawl end to end: searcher under uvicorn crawling the testbed's small site
(tests/testbed/crawl_site.py) as a job — status, SSE events with resume, cancel, robots,
per-host concurrency and pacing, budgets, duplicates, query ranking — and /tavily/crawl
through tavily-python's own client."""

import itertools

import httpx
import pytest

from searcher.ranking.dedup import same_text, text_signature
from searcher.site.link_rank import ranked_links
from searcher.site.links import Link
from searcher.site.politeness import MAX_CRAWL_DELAY_S, host_delay
from tests.testbed import crawl_site


def read_events(base, job_id, last_event_id=None):
    """Every event of a job's SSE stream (it ends with the job's ``done``)."""
    headers = {} if last_event_id is None else {"Last-Event-ID": str(last_event_id)}
    events, current = [], {}
    with httpx.stream("GET", f"{base}/v1/crawl/{job_id}/events", headers=headers,
                      timeout=60) as response:  # fmt: skip
        assert response.status_code == 200
        for line in response.iter_lines():
            if not line:
                if current:
                    events.append(current)
                current = {}
            elif line.startswith(("id:", "event:")):
                name, _, value = line.partition(": ")
                current[name] = value
    return events


@pytest.fixture
def crawler(make_settings, serve_searcher, testbed_clean, tmp_path):
    """``crawl(settings_overrides, **body)``: start a crawl of /crawl/ (each with its own
    extraction cache) and wait for its end through its event stream; returns (base, job
    id, final status, events)."""
    origin = f"http://127.0.0.1:{testbed_clean.port}"
    crawls = []

    def crawl(overrides=None, path="/crawl/", **body):
        crawls.append(path)
        cache = {"service": {"cache": {"dir": str(tmp_path / f"cache-{len(crawls)}")}}}
        settings = make_settings(**{"crawl": {"concurrency": 1}, **cache, **(overrides or {})})
        base = serve_searcher(settings)
        body = {"url": f"{origin}{path}", "politeness_delay_s": 0, **body}
        started = httpx.post(f"{base}/v1/crawl", json=body, timeout=30)
        assert started.status_code == 202, started.text
        job_id = started.json()["id"]
        assert started.headers["location"] == f"/v1/crawl/{job_id}"
        events = read_events(base, job_id)
        status = httpx.get(f"{base}/v1/crawl/{job_id}", timeout=30).json()
        return base, job_id, status, events

    crawl.origin = origin
    return crawl


def paths(urls, origin):
    return [u.removeprefix(origin) for u in urls]


def test_a_crawl_job_reads_pages_skips_robots_and_duplicates(crawler, testbed_clean):
    _, _, status, events = crawler(max_depth=1)
    origin = crawler.origin
    assert status["status"] == "done" and status["complete"] is True
    read = paths([p["url"] for p in status["pages"]], origin)
    assert read == ["/crawl/", "/crawl/history", "/crawl/garden", "/crawl/pricing", "/crawl/team"]
    history = next(p for p in status["pages"] if p["url"].endswith("/history"))
    assert crawl_site.page_text("history")[0][:60] in history["content"]
    skipped = {p.removeprefix(origin): s for s in status["skipped"] for p in [s["url"]]}
    # robots.txt disallows /crawl/private/: reported, never requested.
    assert skipped[crawl_site.PRIVATE]["reason"] == "robots"
    assert crawl_site.PRIVATE not in [e.path for e in testbed_clean.log]
    # The same text under another URL, and a reprint with one sentence changed.
    assert skipped["/crawl/copy"]["reason"] in ("duplicate", "near_duplicate")
    assert skipped["/crawl/copy"]["duplicate_of"] == f"{origin}/crawl/history"
    assert skipped["/crawl/near-copy"]["reason"] == "near_duplicate"
    # Events: one per page and skip, numbered, ending with done.
    kinds = [e["event"] for e in events]
    assert kinds.count("page") == 5 and kinds.count("skip") == 3 and kinds[-1] == "done"
    assert [int(e["id"]) for e in events] == list(range(1, len(events) + 1))
    assert status["events"] == len(events) and status["progress"]["pages"] == 5


def test_the_event_stream_resumes_after_last_event_id(crawler):
    base, job_id, _, events = crawler(max_depth=1)
    resumed = read_events(base, job_id, last_event_id=3)
    assert resumed == events[3:]


def test_a_query_ranks_which_links_are_followed_first(crawler):
    _, _, plain, _ = crawler(max_depth=1)
    _, _, ranked, _ = crawler(max_depth=1, query="pricing plans and costs")
    origin = crawler.origin
    assert paths([p["url"] for p in plain["pages"]], origin)[1] == "/crawl/history"
    assert paths([p["url"] for p in ranked["pages"]], origin)[1] == "/crawl/pricing"
    # max_breadth keeps the best-ranked links of a page, not the first ones.
    _, _, narrow, _ = crawler(max_depth=1, max_breadth=1, query="gardening tips")
    assert paths([p["url"] for p in narrow["pages"]], origin) == ["/crawl/", "/crawl/garden"]


def test_page_and_byte_budgets_cut_the_crawl(crawler):
    _, _, limited, _ = crawler(max_depth=1, limit=3)
    assert len(limited["pages"]) + len(limited["skipped"]) - _robots(limited) <= 3
    assert limited["complete"] is False
    _, _, small, _ = crawler(max_depth=1, max_bytes=1024)
    assert len(small["pages"]) == 1 and small["complete"] is False


def _robots(status):
    return sum(1 for s in status["skipped"] if s["reason"] == "robots")


def test_per_host_concurrency_and_delay_hold(crawler):
    crawl_site.FARM.reset()
    overrides = {"crawl": {"concurrency": 8, "per_host_concurrency": 2}}
    _, _, status, _ = crawler(overrides, path="/crawl/farm/", max_depth=1)
    assert len(status["pages"]) == crawl_site.FARM_SIZE + 1
    assert 1 <= crawl_site.FARM.max_in_flight <= 2
    crawl_site.FARM.reset()
    _, _, status, _ = crawler(overrides, path="/crawl/farm/", max_depth=1, limit=5,
                              politeness_delay_s=0.2, per_host_concurrency=1)  # fmt: skip
    arrivals = crawl_site.FARM.arrivals
    assert crawl_site.FARM.max_in_flight == 1 and len(arrivals) == 4
    # Starts are spaced by the delay (arrivals may differ by a little network jitter).
    assert min(b - a for a, b in itertools.pairwise(arrivals)) >= 0.15


def _two_hosts(port):
    """Settings that let the fetcher reach the testbed under both of its names."""
    return {"fetch": {"allowed_hosts": [f"127.0.0.1:{port}", f"localhost:{port}"]}}


def test_a_link_that_redirects_off_the_site_is_skipped_not_read_as_its_page(crawler, testbed_clean):
    _, _, status, _ = crawler(_two_hosts(testbed_clean.port), path="/crawl/away/", max_depth=1)
    origin = crawler.origin
    # A link within the site that lands on another page of it is that page, read once.
    assert paths([p["url"] for p in status["pages"]], origin) == ["/crawl/away/", "/crawl/history"]
    (out,) = [s for s in status["skipped"] if s["url"].endswith("/crawl/away/out")]
    assert out["reason"] == "out_of_scope"
    assert crawl_site.other_host(origin) in out["error"]
    assert status["complete"] is True


def test_a_root_that_redirects_to_another_host_crawls_the_site_there(crawler, testbed_clean):
    elsewhere = crawl_site.other_host(crawler.origin)
    _, _, status, _ = crawler(_two_hosts(testbed_clean.port),
                              path=f"/redirect-to?url={elsewhere}/crawl/", max_depth=1)  # fmt: skip
    read = [p["url"] for p in status["pages"]]
    assert read[0] == f"{elsewhere}/crawl/"
    assert f"{elsewhere}/crawl/history" in read and len(read) == 5, read
    skipped = {s["url"]: s["reason"] for s in status["skipped"]}
    assert skipped[f"{elsewhere}{crawl_site.PRIVATE}"] == "robots"  # the new host's robots.txt


def test_a_crawl_can_be_cancelled(make_settings, serve_searcher, testbed_clean):
    base = serve_searcher(make_settings())
    origin = f"http://127.0.0.1:{testbed_clean.port}"
    body = {"url": f"{origin}/crawl/farm/", "politeness_delay_s": 5, "max_depth": 1}
    job_id = httpx.post(f"{base}/v1/crawl", json=body, timeout=30).json()["id"]
    cancelled = httpx.delete(f"{base}/v1/crawl/{job_id}", timeout=30)
    assert cancelled.status_code == 200 and cancelled.json()["status"] == "cancelled"
    events = read_events(base, job_id)
    assert [e["event"] for e in events][-2:] == ["error", "done"]
    assert httpx.get(f"{base}/v1/crawl/{job_id}", timeout=30).json()["status"] == "cancelled"


def test_bad_input_is_422_naming_the_field(make_settings, serve_searcher, testbed):
    base = serve_searcher(make_settings(crawl={"max_pages": 10}, limits={"strict": True}))
    origin = f"http://127.0.0.1:{testbed.port}"
    cases = [
        ({"url": "ftp://example.org/"}, "url"),
        ({"url": f"{origin}/crawl/", "limit": 11}, "limit"),
        ({"url": f"{origin}/crawl/", "limit": 0}, "limit"),
        ({"url": f"{origin}/crawl/", "select_paths": ["("]}, "select_paths.0"),
        ({"url": f"{origin}/crawl/", "politeness_delay_s": -1}, "politeness_delay_s"),
        ({"url": f"{origin}/crawl/", "bogus": 1}, "bogus"),
    ]
    for body, field in cases:
        response = httpx.post(f"{base}/v1/crawl", json=body, timeout=30)
        assert response.status_code == 422, (body, response.text)
        assert response.json()["error"]["field"] == field, (body, response.text)
    assert httpx.get(f"{base}/v1/crawl/nope", timeout=30).status_code == 404


def test_tavily_crawl_answers_through_tavilys_client(make_settings, serve_searcher, testbed):
    from tavily import TavilyClient

    # One page at a time: pages are listed as they complete, so the ranking shows.
    base = serve_searcher(make_settings(crawl={"politeness_delay_s": 0, "concurrency": 1}))
    origin = f"http://127.0.0.1:{testbed.port}"
    tavily = TavilyClient(api_key="tvly-x", api_base_url=f"{base}/tavily")
    answer = tavily.crawl(f"{origin}/crawl/", max_depth=1, limit=4, instructions="pricing")
    assert answer["base_url"] == f"{origin}/crawl/"
    urls = [r["url"] for r in answer["results"]]
    assert urls[:2] == [f"{origin}/crawl/", f"{origin}/crawl/pricing"]
    assert crawl_site.page_text("pricing")[0][:60] in answer["results"][1]["raw_content"]
    assert isinstance(answer["response_time"], float)


def test_link_ranking_and_near_duplicates_as_functions():
    links = [
        Link("http://x/a", "About us"),
        Link("http://x/price", "Pricing"),
        Link("http://x/b", ""),
    ]
    assert ranked_links("pricing", links)[0].url == "http://x/price"
    assert ranked_links(None, links) == links
    one, two = crawl_site.page_text("history"), crawl_site.page_text("garden")
    assert same_text(
        text_signature(" ".join(one)), text_signature(" ".join([*one[:3], "x", *one[3:]]))
    )
    assert not same_text(text_signature(" ".join(one)), text_signature(" ".join(two)))
    assert host_delay(0.5, None) == 0.5 and host_delay(0, 2) == 2
    assert host_delay(0, 3600) == MAX_CRAWL_DELAY_S


async def test_mcp_crawl_site_reads_the_site_with_progress(make_settings, serve_searcher, testbed):
    from mcp import Client

    base = serve_searcher(make_settings(crawl={"politeness_delay_s": 0, "concurrency": 1}))
    origin = f"http://127.0.0.1:{testbed.port}"
    progress = []

    async def on_progress(done, total, message):
        progress.append(message)

    arguments = {"url": f"{origin}/crawl/", "query": "gardening", "limit": 3}
    async with Client(f"{base}/mcp") as client:
        result = await client.call_tool("crawl_site", arguments, progress_callback=on_progress)
        bad = await client.call_tool("crawl_site", {"url": f"{origin}/crawl/", "limit": 0})
    assert result.is_error is False
    pages = [p["url"] for p in result.structured_content["pages"]]
    assert pages[:2] == [f"{origin}/crawl/", f"{origin}/crawl/garden"] and len(pages) <= 3
    text = result.content[0].text
    assert f"## {origin}/crawl/garden" in text
    assert crawl_site.page_text("garden")[0][:60] in text
    assert progress and progress[0] == f"page: {origin}/crawl/"
    assert bad.is_error and "limit" in bad.content[0].text


def test_the_client_crawls_and_refuses_bad_options(make_settings, serve_searcher, testbed):
    from searcher.client import SearcherClient
    from searcher.errors import InvalidRequest

    base = serve_searcher(make_settings(crawl={"politeness_delay_s": 0}))
    origin = f"http://127.0.0.1:{testbed.port}"
    with SearcherClient(base) as client:
        job = client.crawl(f"{origin}/crawl/", max_depth=1, limit=2)
        assert job.status == "done" and job.pages[0].url == f"{origin}/crawl/"
        events = list(client.stream_crawl(job.id, after=1))
        assert events[0].id == 2 and events[-1].type == "done"
        with pytest.raises(InvalidRequest) as refused:
            client.start_crawl(f"{origin}/crawl/", limit=0)
        assert refused.value.field == "limit"


def test_cli_crawls_into_a_collection_that_search_then_finds(
    make_settings, serve_searcher, testbed, tmp_path
):
    import json

    import yaml
    from click.testing import CliRunner

    from searcher.cli import main

    settings = make_settings(
        crawl={"politeness_delay_s": 0, "concurrency": 1},
        backends={"instances": {"pages": {"adapter": "local", "collection": "pages"}}},
        scoring={"min_keyword_overlap": 0},
    )
    config = tmp_path / "searcher.yaml"
    config.write_text(yaml.safe_dump(settings.model_dump(mode="json")))
    origin = f"http://127.0.0.1:{testbed.port}"
    runner = CliRunner()

    def cli(*args):
        return runner.invoke(main, ["crawl", *args, "--config", str(config)])

    done = cli(f"{origin}/crawl/", "--limit", "3", "--query", "gardening", "--collection",
               "pages", "--json")  # fmt: skip
    assert done.exit_code == 0, done.output
    pages = json.loads(done.stdout)["pages"]
    assert [p["url"] for p in pages][:2] == [f"{origin}/crawl/", f"{origin}/crawl/garden"]
    assert "pages: 3 indexed" in done.stderr
    # Bad input: exit 2 naming the option; a collection that does not exist is refused.
    assert cli(f"{origin}/crawl/", "--limit", "0").exit_code == 2
    assert "limit" in cli(f"{origin}/crawl/", "--limit", "0").stderr
    missing = cli(f"{origin}/crawl/", "--collection", "nowhere")
    assert missing.exit_code == 2 and "no collection 'nowhere'" in missing.stderr
    # Each page its own file: paths a file name cannot spell apart are not written over.
    names = cli(f"{origin}/crawl/names/", "--limit", "20", "--collection", "pages")
    assert names.exit_code == 0, names.output
    assert f"pages: {len(crawl_site.AWKWARD_PATHS) + 1} indexed" in names.stderr
    listed = runner.invoke(main, ["index", "status", "--json", "--config", str(config)])
    documents = {d["path"] for c in json.loads(listed.stdout) for d in c["documents"]}
    assert len(documents) == 3 + len(crawl_site.AWKWARD_PATHS) + 1
    # Not even the start page read: exit 1 saying why (the guard refuses a loopback port
    # not in fetch.allowed_hosts, before connecting).
    unread = cli("http://127.0.0.1:9/")
    assert unread.exit_code == 1, unread.output
    assert "no page was read: http://127.0.0.1:9/" in unread.stderr
    assert "fetch.allowed_hosts" in unread.stderr
    # The collection is searched like any backend: the garden page's words find it.
    base = serve_searcher(settings)
    words = " ".join(crawl_site.page_text("garden")[1].split()[4:12])
    body = {"query": words, "constraints": {"backend": "pages", "cache": "off"}}
    found = httpx.post(f"{base}/v1/search", json=body, timeout=60).json()
    assert found["items"], found
    assert "garden" in (found["items"][0]["url"] + found["items"][0]["snippet"]).lower()


def test_the_llm_ranks_links_when_configured_and_bm25_stands_in(crawler, testbed):
    import json

    from tests.testbed.chat import script

    # The home page's in-scope links, in page order; the model picks the last (the team).
    picked = script(reply=json.dumps({"pick": [len(crawl_site.HOME_LINKS) - 1]}))
    llm = {"llm": {"base_url": testbed.llm_url(), "model": picked}}
    _, _, chosen, _ = crawler(llm, max_depth=1, max_breadth=1, query="gardening")
    assert [p["url"] for p in chosen["pages"]][1] == f"{crawler.origin}/crawl/team"
    failing = {"llm": {"base_url": testbed.llm_url(), "model": script(status=500)}}
    _, _, fallback, _ = crawler(failing, max_depth=1, max_breadth=1, query="gardening")
    assert [p["url"] for p in fallback["pages"]][1] == f"{crawler.origin}/crawl/garden"


def test_a_crawl_is_its_keys_on_every_worker(make_settings, serve_searcher, config_file, testbed):
    from tests.test_auth import bearer, create_key

    config = config_file()
    settings = make_settings(auth={"enabled": True, "default_rate": None})
    runner, other = serve_searcher(settings), serve_searcher(settings)
    owner, stranger = create_key(config, "owner"), create_key(config, "stranger")
    origin = f"http://127.0.0.1:{testbed.port}"
    body = {"url": f"{origin}/crawl/farm/", "politeness_delay_s": 5, "max_depth": 1}
    assert httpx.post(f"{runner}/v1/crawl", json=body, timeout=30).status_code == 401
    started = httpx.post(f"{runner}/v1/crawl", json=body, headers=bearer(owner), timeout=30)
    assert started.status_code == 202, started.text
    job_id = started.json()["id"]
    for base in (runner, other):  # the process running it, and one reading the store
        for path in (f"/v1/crawl/{job_id}", f"/v1/crawl/{job_id}/events"):
            refused = httpx.get(f"{base}{path}", headers=bearer(stranger), timeout=30)
            assert refused.status_code == 404, (base, path, refused.text)
        cancel = httpx.delete(f"{base}/v1/crawl/{job_id}", headers=bearer(stranger), timeout=30)
        assert cancel.status_code == 404
    seen = httpx.get(f"{other}/v1/crawl/{job_id}", headers=bearer(owner), timeout=30)
    assert seen.status_code == 200 and seen.json()["status"] in {"queued", "running"}
    # Cancelled through the other worker: the job stops at its next event, and its stream
    # (on either worker) ends with error and done.
    httpx.delete(f"{other}/v1/crawl/{job_id}", headers=bearer(owner), timeout=30)
    headers = bearer(owner)
    with httpx.stream("GET", f"{runner}/v1/crawl/{job_id}/events", headers=headers,
                      timeout=60) as stream:  # fmt: skip
        kinds = [line.removeprefix("event: ") for line in stream.iter_lines()
                 if line.startswith("event: ")]  # fmt: skip
    assert kinds[-2:] == ["error", "done"]
    final = httpx.get(f"{runner}/v1/crawl/{job_id}", headers=headers, timeout=30).json()
    assert final["status"] == "cancelled"


def test_a_key_over_its_crawl_share_is_told_the_setting_that_sets_it(
    make_settings, serve_searcher, config_file, testbed
):
    from tests.test_auth import bearer, create_key

    config = config_file()
    settings = make_settings(
        auth={"enabled": True, "default_rate": None}, crawl={"max_concurrent_jobs": 2}
    )
    base = serve_searcher(settings)
    headers = bearer(create_key(config, "owner"))
    origin = f"http://127.0.0.1:{testbed.port}"
    body = {"url": f"{origin}/crawl/farm/", "politeness_delay_s": 5, "max_depth": 1}
    started = httpx.post(f"{base}/v1/crawl", json=body, headers=headers, timeout=30)
    assert started.status_code == 202, started.text
    refused = httpx.post(f"{base}/v1/crawl", json=body, headers=headers, timeout=30)
    assert refused.status_code == 429 and refused.headers["retry-after"]
    message = refused.json()["error"]["message"]
    assert "1 crawl job(s)" in message and "crawl.max_concurrent_jobs" in message
    assert "research." not in message  # the research share has nothing to do with it
    httpx.delete(f"{base}/v1/crawl/{started.json()['id']}", headers=headers, timeout=30)
