"""Issue 27, point 6: only what you allowed. Over real HTTP and the real CLI: keys made
with ``searcher keys create --collections``, each seeing only its collections in search,
research and MCP; the result cache never serving one key's local results to another;
uploads (``POST /v1/collections/{name}/documents``), the collection list and deletes;
bad input refused naming the field."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from click.testing import CliRunner
from pydantic import ValidationError

from searcher.cli import main
from searcher.client import AsyncSearcherClient, SearcherClient
from searcher.config import Settings
from searcher.corpus.uploads import BadUploadName, upload_name
from searcher.errors import InvalidRequest, RemoteError
from tests.test_corpus import EMBEDDINGS

GARDEN = "# Garden notes\n\nAphids on the roses are washed off with soapy water.\n"
PAPER = "# Tidal paper\n\nAphids were never observed on the tidal kelp forests we sampled.\n"
QUERY = "aphids"


def cli(*args: str) -> Any:
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def bearer(secret: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {secret}"}


@pytest.fixture
def two_collections(tmp_path: Path, testbed: Any, serve_searcher: Any) -> Any:
    """``start(**extra)``: a searcher with auth on, collections ``notes`` and ``papers``
    indexed (instances of the same names), and a key-making function; returns
    (base URL, config path, make_key)."""
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "garden.md").write_text(GARDEN)
    (tmp_path / "papers").mkdir()
    (tmp_path / "papers" / "kelp.md").write_text(PAPER)

    def start(**extra: Any) -> tuple[str, str, Any]:
        config: dict[str, Any] = {
            "backends": {
                "order": ["searxng", "notes", "papers"],
                "auto": "fanout",
                "searxng": {"base_url": testbed.searxng_url()},
                "duckduckgo": {"enabled": False},
                "instances": {
                    "notes": {"adapter": "local", "collection": "notes"},
                    "papers": {"adapter": "local", "collection": "papers"},
                },
            },
            "state": {"dir": str(tmp_path / "state")},
            "service": {"cache": {"dir": str(tmp_path / "cache")}},
            "fetch": {"allowed_hosts": [f"127.0.0.1:{testbed.port}"], "extract_workers": 1},
            "embeddings": EMBEDDINGS,
            "scoring": {"hybrid_share": 0.0, "min_keyword_overlap": 0},
            "auth": {"enabled": True, "default_rate": "1000/min"},
        }
        for key, value in extra.items():
            config[key] = {**config.get(key, {}), **value}
        path = tmp_path / "searcher.yaml"
        path.write_text(yaml.safe_dump(config))
        for name in ("notes", "papers"):
            added = cli("index", "add", str(tmp_path / name), "--collection", name,
                        "--config", str(path))  # fmt: skip
            assert added.exit_code == 0, added.output
        base = serve_searcher(Settings.model_validate(config))

        def make_key(name: str, *options: str) -> str:
            made = cli("keys", "create", name, *options, "--config", str(path))
            assert made.exit_code == 0, made.output
            return str(made.stdout.strip().splitlines()[0])

        return base, str(path), make_key

    return start


def post_search(base: str, secret: str, backend: Any = None, cache: str = "off") -> httpx.Response:
    constraints: dict[str, Any] = {"cache": cache}
    if backend is not None:
        constraints["backend"] = backend
    body = {"query": QUERY, "constraints": constraints, "budget": {"max_results": 10}}
    return httpx.post(f"{base}/v1/search", json=body, headers=bearer(secret), timeout=60)


def local_urls(response: httpx.Response) -> set[str]:
    assert response.status_code == 200, response.text
    return {i["url"] for i in response.json()["items"] if i["url"].startswith("file://")}


def test_a_key_searches_only_its_collections(two_collections, tmp_path):
    base, config, make_key = two_collections()
    notes_only = make_key("notes-only", "--collections", "notes")
    everything = make_key("everything", "--collections", "*")
    unlisted = make_key("unlisted")  # corpus.default_access is empty: no collection
    garden = (tmp_path / "notes" / "garden.md").as_uri()
    kelp = (tmp_path / "papers" / "kelp.md").as_uri()

    assert local_urls(post_search(base, notes_only, "notes")) == {garden}
    for barred in ("papers", ["searxng", "papers"]):
        refused = post_search(base, notes_only, barred)
        assert refused.status_code == 403, refused.text
        assert refused.json()["error"]["field"] == "constraints.backend"
        assert "papers" in refused.json()["error"]["message"]
    assert post_search(base, unlisted, "notes").status_code == 403
    # "auto" (a fan-out over the web and both collections) leaves out what the key may
    # not see, and says so in meta.errors.
    auto = post_search(base, notes_only)
    assert local_urls(auto) == {garden}
    left_out = [e for e in auto.json()["meta"]["errors"] if e["source"] == "papers"]
    assert left_out and left_out[0]["kind"] == "auth" and left_out[0]["stage"] == "plan"
    assert local_urls(post_search(base, unlisted)) == set()
    assert local_urls(post_search(base, everything)) == {garden, kelp}
    # The compat routes plan the same way.
    compat = httpx.get(f"{base}/search", params={"q": QUERY, "format": "json"},
                       headers=bearer(notes_only), timeout=60)  # fmt: skip
    assert compat.status_code == 200
    assert kelp not in {r["url"] for r in compat.json()["results"]}

    listed = json.loads(cli("keys", "list", "--json", "--config", config).stdout)
    assert {k["name"]: k["collections"] for k in listed} == {
        "notes-only": ["notes"], "everything": ["*"], "unlisted": None,
    }  # fmt: skip
    bad = cli("keys", "create", "odd", "--collections", "notes,no/slash", "--config", config)
    assert bad.exit_code == 2 and "--collections" in bad.stderr and "no/slash" in bad.stderr


def test_the_default_access_is_configurable(two_collections, tmp_path):
    base, _, make_key = two_collections(corpus={"default_access": ["papers"]})
    unlisted = make_key("unlisted")
    kelp = (tmp_path / "papers" / "kelp.md").as_uri()
    assert local_urls(post_search(base, unlisted, "papers")) == {kelp}
    assert post_search(base, unlisted, "notes").status_code == 403
    with pytest.raises(ValidationError, match="default_access"):
        Settings.model_validate({"corpus": {"default_access": ["../x"]}})


def test_the_result_cache_never_serves_one_keys_local_results_to_another(two_collections, tmp_path):
    # A shared cache (cache.scope: shared) is where answers would cross between keys.
    base, _, make_key = two_collections(cache={"scope": "shared"})
    reader_a = make_key("a", "--collections", "notes")
    reader_b = make_key("b", "--collections", "papers")
    also_a = make_key("also-a", "--collections", "notes")
    garden = (tmp_path / "notes" / "garden.md").as_uri()
    kelp = (tmp_path / "papers" / "kelp.md").as_uri()
    first = post_search(base, reader_a, cache="on")
    assert local_urls(first) == {garden}
    second = post_search(base, reader_b, cache="on")
    assert local_urls(second) == {kelp}  # never A's garden
    assert second.json()["meta"]["cache"]["hit"] is False
    # A key that may see the same collections shares the answer, as cache.scope says.
    third = post_search(base, also_a, cache="on")
    assert third.json()["meta"]["cache"]["hit"] is True and local_urls(third) == {garden}


def mcp_search(base: str, secret: str, backend: str) -> dict[str, Any]:
    arguments = {"query": QUERY, "backend": backend}
    call = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": "web_search", "arguments": arguments}}  # fmt: skip
    headers = {**bearer(secret), "Accept": "application/json, text/event-stream"}
    response = httpx.post(f"{base}/mcp", json=call, headers=headers, timeout=60)
    assert response.status_code == 200, response.text
    data = [line[6:] for line in response.text.splitlines() if line.startswith("data: ")]
    result: dict[str, Any] = json.loads(data[-1])["result"]
    return result


def test_research_and_mcp_see_only_the_keys_collections(two_collections, tmp_path):
    base, _, make_key = two_collections(mcp={"http": True})
    notes_only = make_key("notes-only", "--collections", "notes")
    research = httpx.post(
        f"{base}/v1/research",
        json={"query": "what eats aphids", "constraints": {"backend": "papers"}},
        headers=bearer(notes_only), timeout=30,
    )  # fmt: skip
    assert research.status_code == 403, research.text
    assert research.json()["error"]["field"] == "constraints.backend"
    refused = mcp_search(base, notes_only, "papers")
    assert refused["isError"] and "may not search" in refused["content"][0]["text"]
    allowed = mcp_search(base, notes_only, "notes")
    assert not allowed.get("isError")
    urls = {i["url"] for i in allowed["structuredContent"]["items"]}
    assert urls == {(tmp_path / "notes" / "garden.md").as_uri()}


def upload(
    base: str, secret: str, collection: str, files: list[tuple[str, bytes]]
) -> httpx.Response:
    parts = [("files", (name, body, "application/octet-stream")) for name, body in files]
    return httpx.post(f"{base}/v1/collections/{collection}/documents", files=parts,
                      headers=bearer(secret), timeout=60)  # fmt: skip


def test_uploads_are_indexed_listed_and_deleted(two_collections, tmp_path):
    base, _, make_key = two_collections(corpus={"uploads": {"enabled": True}})
    writer = make_key("writer", "--collections", "notes")
    sent = [
        ("bees.md", b"# Bees\n\nBees visit the lavender hedge at noon.\n"),
        ("sub\\deeper/hives.txt", b"Two hives stand by the apple trees.\n"),
        ("photo.png", b"\x89PNG\r\n\x1a\n\x00\x00binary"),
    ]
    answer = upload(base, writer, "notes", sent)
    assert answer.status_code == 200, answer.text
    files = {f["name"]: f for f in answer.json()["files"]}
    assert files["bees.md"]["status"] == "indexed"
    assert files["sub/deeper/hives.txt"]["status"] == "indexed"
    assert files["photo.png"]["status"] == "skipped" and files["photo.png"]["reason"] == "binary"
    kept = tmp_path / "state" / "uploads" / "notes"
    assert (kept / "bees.md").is_file() and not (kept / "photo.png").exists()
    body = {"query": "lavender hedge", "constraints": {"backend": "notes", "cache": "off"}}
    found = httpx.post(f"{base}/v1/search", json=body, headers=bearer(writer), timeout=60)
    assert found.json()["items"][0]["url"] == (kept / "bees.md").resolve().as_uri()
    # Incremental by content: the same bytes again are unchanged, new bytes re-indexed.
    again = upload(base, writer, "notes", [sent[0], ("sub/deeper/hives.txt", b"Three hives.\n")])
    assert [f["status"] for f in again.json()["files"]] == ["unchanged", "indexed"]

    listing = httpx.get(f"{base}/v1/collections", headers=bearer(writer), timeout=30).json()
    (notes,) = listing["collections"]  # papers is not this key's to see
    assert notes["name"] == "notes" and notes["documents"] == 3 and notes["skipped"] == 1
    admin = make_key("admin", "--collections", "*")
    names = {c["name"] for c in httpx.get(f"{base}/v1/collections", headers=bearer(admin)).json()[
        "collections"]}  # fmt: skip
    assert names == {"notes", "papers"}

    for folder in ("sub", "sub/deeper", "sub/deeper/"):  # a folder of uploads is no document
        kept_folder = httpx.delete(f"{base}/v1/collections/notes/documents/{folder}",
                                   headers=bearer(writer), timeout=30)  # fmt: skip
        assert kept_folder.status_code == 404, kept_folder.text
    gone = httpx.delete(f"{base}/v1/collections/notes/documents/sub/deeper/hives.txt",
                        headers=bearer(writer), timeout=30)  # fmt: skip
    assert gone.status_code == 200 and gone.json()["removed"] is True
    assert not (kept / "sub" / "deeper" / "hives.txt").exists()
    again_gone = httpx.delete(f"{base}/v1/collections/notes/documents/sub/deeper/hives.txt",
                              headers=bearer(writer), timeout=30)  # fmt: skip
    assert again_gone.status_code == 404
    hidden = httpx.delete(f"{base}/v1/collections/notes/documents/.env", headers=bearer(writer))
    assert hidden.status_code == 422 and hidden.json()["error"]["field"] == "document"
    # Dropping the collection drops the server's copies of what was uploaded into it.
    config = str(tmp_path / "searcher.yaml")
    dropped = cli("index", "remove", "--collection", "notes", "--config", config)
    assert dropped.exit_code == 0, dropped.output
    assert not kept.exists() and (tmp_path / "notes" / "garden.md").is_file()


def test_an_upload_answers_each_file_in_the_order_sent(two_collections):
    base, _, make_key = two_collections(corpus={"uploads": {"enabled": True}})
    writer = make_key("writer", "--collections", "notes")
    made = upload(base, writer, "notes", [("guide/intro.md", b"# Intro\n\nHello.\n")])
    assert made.status_code == 200, made.text
    # "guide" is a folder of uploads already: that file cannot be kept, the others are.
    sent = [("first.md", b"# First\n\none\n"), ("guide", b"# Guide\n\ntwo\n"),
            ("third.md", b"# Third\n\nthree\n")]  # fmt: skip
    answer = upload(base, writer, "notes", sent)
    assert answer.status_code == 200, answer.text
    files = answer.json()["files"]
    assert [f["name"] for f in files] == ["first.md", "guide", "third.md"]
    assert [f["status"] for f in files] == ["indexed", "skipped", "indexed"]
    assert files[1]["reason"] == "unreadable" and "cannot be kept" in files[1]["detail"]
    # Its skip is listed, as every skipped file's is.
    listing = httpx.get(f"{base}/v1/collections", headers=bearer(writer), timeout=30).json()
    assert listing["collections"][0]["skipped"] == 1


def test_uploads_refuse_what_is_not_allowed(two_collections, tmp_path):
    base, _, make_key = two_collections(corpus={"uploads": {"enabled": True, "max_bytes": 4000,
                                                            "max_files": 3}})  # fmt: skip
    writer = make_key("writer", "--collections", "notes")
    anonymous = httpx.post(f"{base}/v1/collections/notes/documents",
                           files=[("files", ("a.md", b"# A\n"))])  # fmt: skip
    assert anonymous.status_code == 401
    barred = upload(base, writer, "papers", [("a.md", b"# A\n\ntext\n")])
    assert barred.status_code == 403 and barred.json()["error"]["field"] == "name"
    bad_collection = upload(base, writer, "no!good", [("a.md", b"# A\n\ntext\n")])
    assert bad_collection.status_code == 422 and bad_collection.json()["error"]["field"] == "name"
    for name in ("../escape.md", "/etc/passwd.md", "C:/x.md", "ok/../../x.md", ".hidden.md"):
        refused = upload(base, writer, "notes", [("fine.md", b"# F\n\nfine\n"), (name, b"# x\n")])
        assert refused.status_code == 422, name
        assert refused.json()["error"]["field"] == "files[1].filename", name
    twice = upload(base, writer, "notes", [("dup.md", b"# One\n\none\n"), ("dup.md", b"# 2\n")])
    assert twice.status_code == 422 and twice.json()["error"]["field"] == "files[1].filename"
    assert "files[0]" in twice.json()["error"]["message"]
    kept = tmp_path / "state" / "uploads" / "notes"
    assert not (kept / "fine.md").exists()  # nothing is kept until every name is good
    assert not (kept / "dup.md").exists()
    assert not (tmp_path / "state" / "uploads" / "escape.md").exists()
    too_big = upload(base, writer, "notes", [("big.md", b"# Big\n\n" + b"word " * 2000)])
    assert too_big.status_code == 413
    assert "corpus.uploads.max_bytes" in too_big.json()["error"]["message"]
    assert not (kept / "big.md").exists()
    too_many = upload(base, writer, "notes", [(f"{n}.md", b"# n\n\nx\n") for n in range(4)])
    assert too_many.status_code == 422 and too_many.json()["error"]["field"] == "files"
    no_files = httpx.post(f"{base}/v1/collections/notes/documents", json={"files": []},
                          headers=bearer(writer))  # fmt: skip
    assert no_files.status_code == 422 and no_files.json()["error"]["field"] == "files"


def test_uploads_are_off_unless_configured_and_need_keys(two_collections):
    base, _, make_key = two_collections()
    writer = make_key("writer", "--collections", "*")
    off = upload(base, writer, "notes", [("a.md", b"# A\n\ntext\n")])
    assert off.status_code == 403
    assert off.json()["error"]["field"] == "corpus.uploads.enabled"
    with pytest.raises(ValidationError, match=r"corpus\.uploads\.enabled needs auth\.enabled"):
        Settings.model_validate({"corpus": {"uploads": {"enabled": True}}})
    with pytest.raises(ValidationError, match="max_bytes"):
        Settings.model_validate({"corpus": {"uploads": {"max_bytes": 0}}})


@pytest.mark.parametrize(
    "sent",
    ["a\x00b.md", "a\nb.md", "", "  ", "../x", "/abs.md", "D:/x.md", "a/./.git/x", "x/" * 9 + "y"],
)
def test_a_bad_upload_name_is_refused_not_repaired(sent):
    with pytest.raises(BadUploadName):
        upload_name(sent)


def test_upload_names_keep_their_folders():
    assert upload_name("docs\\guide/intro.md") == "docs/guide/intro.md"
    assert upload_name("docs//intro.md") == "docs/intro.md"


def test_a_named_symlink_loop_is_refused(tmp_path, two_collections):
    _, config, _ = two_collections()
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    looped = cli("index", "add", str(tmp_path / "loop"), "--collection", "c", "--config", config)
    assert looped.exit_code == 2 and "cannot be resolved" in looped.stderr
    assert "Traceback" not in looped.output


def test_the_python_client_uploads_lists_and_deletes(two_collections, tmp_path):
    """``SearcherClient`` and ``AsyncSearcherClient`` over real HTTP: upload, list,
    delete, and the server's refusals as searcher's own errors."""
    base, _, make_key = two_collections(corpus={"uploads": {"enabled": True}})
    writer = make_key("writer", "--collections", "notes")
    sent = [("bees.md", b"# Bees\n\nBees visit the lavender hedge.\n"),
            ("docs/hives.txt", b"Two hives by the apple trees.\n")]  # fmt: skip
    with SearcherClient(base, api_key=writer) as client:
        answer = client.upload("notes", sent)
        assert answer.collection == "notes"
        assert [(f.name, f.status) for f in answer.files] == [
            ("bees.md", "indexed"), ("docs/hives.txt", "indexed")]  # fmt: skip
        (notes,) = client.collections().collections
        assert (notes.name, notes.documents) == ("notes", 3)
        removed = client.delete_document("notes", "docs/hives.txt")
        assert (removed.name, removed.removed) == ("docs/hives.txt", True)
        assert not (tmp_path / "state" / "uploads" / "notes" / "docs" / "hives.txt").exists()
        with pytest.raises(RemoteError) as gone:
            client.delete_document("notes", "docs/hives.txt")
        assert gone.value.status == 404
        with pytest.raises(InvalidRequest) as bad:
            client.upload("notes", [("../escape.md", b"# x\n")])
        assert bad.value.field == "files[0].filename"
        with pytest.raises(InvalidRequest, match="files"):
            client.upload("notes", [])
        with pytest.raises(RemoteError) as barred:
            client.upload("papers", sent)
        assert barred.value.status == 403

    async def through_async() -> tuple[Any, Any, Any]:
        async with AsyncSearcherClient(base, api_key=writer) as client:
            answer = await client.upload("notes", [("wasps.md", b"# Wasps\n\nWasps nest.\n")])
            listed = await client.collections()
            removed = await client.delete_document("notes", "wasps.md")
            return answer, listed, removed

    answer, listed, removed = asyncio.run(through_async())
    assert [f.status for f in answer.files] == ["indexed"]
    assert listed.collections[0].documents == 3
    assert removed.removed is True
