"""Issue 27's core: a generated folder indexed with ``searcher index add`` (Markdown, text,
reStructuredText, HTML, a PDF written here), searched through ``/v1/search`` as the
``local`` backend alone and fused with the testbed's SearXNG, full mode read from the
index, incremental re-runs, skips with reasons, roots, and an interrupted run."""

from __future__ import annotations

import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from click.testing import CliRunner

from searcher.cli import main
from tests.conftest import STATIC_MODEL
from tests.ports import free_port
from tests.testbed.pdfs import make_pdf

# Vectors when the offline model is here (../shared/models); BM25 alone otherwise.
EMBEDDINGS: dict[str, Any] = (
    {"provider": "model2vec", "model": str(STATIC_MODEL)}
    if STATIC_MODEL.exists()
    else {"provider": "none"}
)

GARDEN = """# Garden notes

Tomatoes want full sun and deep watering twice a week.

## Pests

Aphids on the roses are washed off with soapy water; ladybirds eat them too.

## Compost

Compost needs green and brown layers, turned every fortnight.
"""


def write_folder(root: Path) -> Path:
    """A folder of every kind searcher reads, and of every kind it must skip."""
    notes = root / "notes"
    (notes / "deep").mkdir(parents=True)
    (notes / "garden.md").write_text(GARDEN)
    (notes / "bread.txt").write_text("Sourdough bread rises overnight with a wild yeast starter.\n")
    (notes / "kayak.rst").write_text(
        "River kayaking\n==============\n\nEddies\n------\n\n"
        "Read the eddy line before crossing the current with the kayak.\n"
    )
    (notes / "espresso.html").write_text(
        "<html><head><title>Espresso guide</title></head><body><article><h1>Espresso</h1>"
        "<p>Espresso is brewed by forcing hot water through finely ground coffee under "
        "nine bars of pressure, which gives the crema its body.</p>"
        "<p>A balanced shot runs for about twenty-five seconds.</p></article></body></html>"
    )
    (notes / "manual.pdf").write_bytes(
        make_pdf(
            [
                ["Chapter one covers the telescope tripod."],
                ["Chapter two aligns the finderscope with Polaris at night."],
            ]
        )
    )
    (notes / "gaming.md").write_text(
        "# Cloud gaming\n\nGoogle Stadia, Microsoft xCloud and Apple Arcade compete for "
        "games streamed from the cloud.\n"
    )
    # Skipped, each for its own reason.
    (notes / "photo.dat").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00binary")
    (notes / "blank.txt").write_text("")
    (notes / "huge.txt").write_text("big " * 3000)
    (notes / "scan.pdf").write_bytes(make_pdf([["no text"]], drawing_only=True))
    (notes / "dangling.md").symlink_to(root / "nowhere.md")
    (notes / "deep" / "back").symlink_to(notes)
    (notes / ".hidden.md").write_text("# hidden\n\nnever indexed\n")
    return notes


@pytest.fixture
def corpus_config(tmp_path: Path, testbed: Any) -> Any:
    """Writes a searcher.yaml for the corpus tests (``extra`` merged at the top level)."""

    def write(**extra: Any) -> str:
        config: dict[str, Any] = {
            "backends": {
                "order": ["searxng"],
                "searxng": {"base_url": testbed.searxng_url()},
                "duckduckgo": {"enabled": False},
                "instances": {"notes": {"adapter": "local", "collection": "notes"}},
            },
            "state": {"dir": str(tmp_path / "state")},
            "service": {"cache": {"dir": str(tmp_path / "cache")}},
            "fetch": {"allowed_hosts": [f"127.0.0.1:{testbed.port}"], "extract_workers": 1},
            "embeddings": EMBEDDINGS,
            "scoring": {"hybrid_share": 0.0, "min_keyword_overlap": 0},
            "corpus": {"max_file_bytes": 10_000},
        }
        for key, value in extra.items():
            config[key] = {**config.get(key, {}), **value}
        path = tmp_path / "searcher.yaml"
        path.write_text(yaml.safe_dump(config))
        return str(path)

    return write


def cli(*args: str) -> Any:
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def status(config: str) -> dict[str, Any]:
    result = cli("index", "status", "--json", "--config", config)
    assert result.exit_code == 0, result.output
    collections: list[dict[str, Any]] = json.loads(result.stdout)
    return {c["collection"]: c for c in collections}


def search(
    base: str, query: str, backend: Any = "notes", mode: str = "simple", **extra: Any
) -> dict[str, Any]:
    constraints = {"backend": backend, "cache": "off", "search_mode": mode}
    body = {"query": query, "constraints": constraints, **extra}
    response = httpx.post(f"{base}/v1/search", json=body, timeout=60)
    assert response.status_code == 200, response.text
    data: dict[str, Any] = response.json()
    return data


@pytest.fixture
def indexed(tmp_path: Path, corpus_config: Any) -> tuple[Path, str]:
    notes = write_folder(tmp_path)
    config = corpus_config()
    result = cli("index", "add", str(notes), "--collection", "notes", "--config", config)
    assert result.exit_code == 0, result.output
    return notes, config


def test_index_add_reads_every_kind_and_records_each_skip(indexed):
    _notes, config = indexed
    notes_status = status(config)["notes"]
    kinds = {Path(d["path"]).name: d["kind"] for d in notes_status["documents"]}
    assert kinds == {
        "garden.md": "markdown", "bread.txt": "text", "kayak.rst": "rst",
        "espresso.html": "html", "manual.pdf": "pdf", "gaming.md": "markdown",
    }  # fmt: skip
    titles = {Path(d["path"]).name: d["title"] for d in notes_status["documents"]}
    assert titles["espresso.html"] == "Espresso guide" and titles["kayak.rst"] == "River kayaking"
    assert titles["garden.md"] == "Garden notes"
    assert notes_status["chunks"] >= 7 and notes_status["files"] == 6
    reasons = {Path(s["path"]).name: s["reason"] for s in notes_status["skipped"]}
    assert reasons == {
        "photo.dat": "binary", "blank.txt": "empty", "huge.txt": "too_large",
        "scan.pdf": "pdf_unreadable", "dangling.md": "unreadable", "back": "symlink_loop",
    }  # fmt: skip
    # The plain listing says the same, one line each.
    listing = cli("index", "status", "--config", config).stdout
    assert "notes: 6 files" in listing and "too_large" in listing and "symlink_loop" in listing


def test_a_rerun_is_incremental(indexed):
    notes, config = indexed
    again = cli("index", "add", str(notes), "--collection", "notes", "--config", config)
    assert "0 indexed (0 chunks), 6 unchanged, 0 removed, 6 skipped" in again.stdout
    before = {d["path"]: d["indexed_at"] for d in status(config)["notes"]["documents"]}
    (notes / "bread.txt").write_text("Rye bread needs a longer proof than wheat.\n")
    touched = notes / "gaming.md"
    os.utime(touched, ns=(touched.stat().st_atime_ns, touched.stat().st_mtime_ns + 10**9))
    (notes / "kayak.rst").unlink()
    (notes / "blank.txt").write_text("Now it has words about canoes.\n")
    third = cli("index", "add", str(notes), "--collection", "notes", "--config", config)
    assert "2 indexed" in third.stdout and "4 unchanged, 1 removed, 5 skipped" in third.stdout
    after = status(config)["notes"]
    paths = {Path(d["path"]).name for d in after["documents"]}
    assert "kayak.rst" not in paths and "blank.txt" in paths
    assert "blank.txt" not in {Path(s["path"]).name for s in after["skipped"]}
    times = {d["path"]: d["indexed_at"] for d in after["documents"]}
    assert times[str(touched)] == before[str(touched)]  # same content: not re-indexed


def test_a_deleted_path_named_again_drops_what_was_indexed_under_it(indexed):
    notes, config = indexed
    (notes / "gone").mkdir()
    (notes / "gone" / "owls.md").write_text("# Owls\n\nOwls hunt at night.\n")
    (notes / "gone" / "blank.md").write_text("")
    added = cli("index", "add", str(notes / "gone"), "--collection", "notes", "--config", config)
    assert "1 indexed" in added.stdout and "1 skipped" in added.stdout
    shutil.rmtree(notes / "gone")
    again = cli("index", "add", str(notes / "gone"), "--collection", "notes", "--config", config)
    assert again.exit_code == 0, again.output
    assert "1 removed" in again.stdout
    after = status(config)["notes"]
    assert not [d for d in after["documents"] if "/gone/" in d["path"]]
    assert not [s for s in after["skipped"] if "/gone/" in s["path"]]
    # A path that never held anything indexed is a mistake, not a deletion.
    typo = cli("index", "add", str(notes / "gnoe"), "--collection", "notes", "--config", config)
    assert typo.exit_code == 2 and "no such file or folder" in typo.stderr


def test_overlapping_paths_index_each_file_once_and_a_pipe_is_skipped(tmp_path, corpus_config):
    folder = tmp_path / "overlap"
    (folder / "sub").mkdir(parents=True)
    (folder / "sub" / "roses.md").write_text("# Roses\n\nRoses are red.\n")
    (folder / "tulips.md").write_text("# Tulips\n\nTulips are bulbs.\n")
    os.mkfifo(folder / "pipe.md")  # reading it would wait for a writer forever
    config = corpus_config()
    named = [str(folder), str(folder / "sub"), str(folder / "sub" / "roses.md")]
    added = cli("index", "add", *named, "--collection", "o", "--config", config)
    assert "o: 2 indexed" in added.stdout, added.output
    alone = cli("index", "add", str(folder / "pipe.md"), "--collection", "o", "--config", config)
    assert alone.exit_code == 0, alone.output
    (skipped,) = status(config)["o"]["skipped"]
    assert skipped["path"].endswith("pipe.md") and skipped["reason"] == "unreadable"


def test_search_the_collection_alone_over_http(
    indexed, corpus_config, make_settings, serve_searcher
):
    notes, _ = indexed
    settings = make_settings(
        backends={"instances": {"notes": {"adapter": "local", "collection": "notes"}}},
        embeddings=EMBEDDINGS,
    )
    base = serve_searcher(settings)
    data = search(base, "aphids on roses soapy water")
    items = data["items"]
    assert data["meta"]["backend_used"] == "notes"
    assert items[0]["url"] == (notes / "garden.md").as_uri()
    assert items[0]["title"] == "Garden notes" and items[0]["engines"] == ["notes"]
    assert "soapy water" in items[0]["snippet"]
    assert len({i["url"] for i in items}) == len(items)  # one place per document
    # A PDF hit names its page.
    pdf = search(base, "finderscope Polaris")["items"][0]
    assert pdf["url"] == (notes / "manual.pdf").as_uri() + "#page=2"
    # Whatever the query holds, FTS5 syntax included, it is words to look for.
    odd = search(base, 'tomatoes" OR NEAR(sun* -- ) AND "')
    assert odd["items"][0]["url"] == (notes / "garden.md").as_uri()


def test_local_and_web_results_fuse_with_provenance(
    indexed, make_settings, serve_searcher, matching_query
):
    notes, _ = indexed
    settings = make_settings(
        backends={"instances": {"notes": {"adapter": "local", "collection": "notes"}}},
        embeddings=EMBEDDINGS,
        scoring={"hybrid_share": 0.0, "min_keyword_overlap": 0},
    )
    base = serve_searcher(settings)
    data = search(base, matching_query, ["searxng", "notes"], budget={"max_results": 10})
    assert data["meta"]["backend_used"] == "searxng+notes"
    by_backend = {i["url"]: {p["backend"] for p in i["provenance"]} for i in data["items"]}
    local = [url for url, b in by_backend.items() if b == {"notes"}]
    web = [url for url, b in by_backend.items() if b == {"searxng"}]
    assert (notes / "gaming.md").as_uri() in local and web
    assert all(url.startswith("file://") for url in local)
    assert all(url.startswith("http://") for url in web)


def test_full_mode_reads_the_chunk_and_its_neighbours_from_the_index(
    tmp_path, corpus_config, make_settings, serve_searcher
):
    folder = tmp_path / "long"
    folder.mkdir()
    filler = "Filler sentence number {} about nothing. "
    sections = [f"## Part {n}\n\n" + filler.format(n) * 6 for n in range(8)]
    sections[4] = "## Part 4\n\nThe lighthouse keeper logs the fog horn at dawn."
    (folder / "log.md").write_text("# Keeper's log\n\n" + "\n\n".join(sections))
    overrides: dict[str, Any] = {
        "backends": {"instances": {"mine": {"adapter": "local", "collection": "mine"}}},
        "corpus": {"chunk_chars": 200},
    }
    config = corpus_config(**overrides)
    added = cli("index", "add", str(folder), "--collection", "mine", "--config", config)
    assert added.exit_code == 0, added.output
    (folder / "log.md").unlink()  # full mode reads the index, not the disk (nor the web)
    base = serve_searcher(make_settings(embeddings=EMBEDDINGS, **overrides))
    data = search(base, "lighthouse fog horn", "mine", "full")
    item = data["items"][0]
    assert item["url"] == (folder / "log.md").as_uri()
    assert item["fetch"]["status"] == "fetched"
    assert item["fetch"]["content_type"] == "text/markdown"
    content = item["content"]
    assert "lighthouse keeper logs the fog horn" in content
    assert content.index("number 3") < content.index("lighthouse") < content.index("number 5")
    assert "number 0" not in content  # the neighbours, not the whole document


def test_paths_outside_the_roots_are_refused(tmp_path, corpus_config):
    inside = tmp_path / "inside"
    outside = tmp_path / "outside"
    inside.mkdir()
    outside.mkdir()
    (inside / "ok.md").write_text("# Fine\n\ninside the root\n")
    (outside / "secret.md").write_text("# Secret\n\nnot for the index\n")
    (inside / "escape.md").symlink_to(outside / "secret.md")
    config = corpus_config(corpus={"roots": [str(inside)], "max_file_bytes": 10_000})
    refused = cli("index", "add", str(outside), "--collection", "c", "--config", config)
    assert refused.exit_code == 2 and "outside corpus.roots" in refused.stderr
    dotted = cli("index", "add", f"{inside}/../outside", "--collection", "c", "--config", config)
    assert dotted.exit_code == 2 and "'..' is not allowed" in dotted.stderr
    (tmp_path / "link").symlink_to(outside)
    linked = cli("index", "add", str(tmp_path / "link"), "--collection", "c", "--config", config)
    assert linked.exit_code == 2 and "outside corpus.roots" in linked.stderr
    taken = cli("index", "add", str(inside), "--collection", "c", "--config", config)
    assert taken.exit_code == 0, taken.output
    c = status(config)["c"]
    assert [Path(d["path"]).name for d in c["documents"]] == ["ok.md"]
    assert [(Path(s["path"]).name, s["reason"]) for s in c["skipped"]] == [
        ("escape.md", "outside_roots")
    ]


def test_bad_input_exits_2_naming_it(tmp_path, corpus_config):
    config = corpus_config()
    (tmp_path / "a.md").write_text("# A\n\ntext\n")
    bad_name = cli(
        "index", "add", str(tmp_path / "a.md"), "--collection", "no/slash", "--config", config
    )
    assert bad_name.exit_code == 2 and "not a collection name" in bad_name.stderr
    missing = cli("index", "add", str(tmp_path / "nope"), "--collection", "c", "--config", config)
    assert missing.exit_code == 2 and "no such file or folder" in missing.stderr
    assert cli("index", "status", "--collection", "ghost", "--config", config).exit_code == 2
    assert cli("index", "remove", "--config", config).exit_code == 2
    no_collection = corpus_config(backends={"instances": {"x": {"adapter": "local"}}})
    refused = cli("index", "status", "--config", no_collection)
    assert refused.exit_code == 2 and "backends.instances.x: needs a collection" in refused.stderr
    assert "Traceback" not in bad_name.output + missing.output + refused.output


def test_a_missing_embedder_model_exits_2_and_a_failing_endpoint_1(tmp_path, corpus_config):
    (tmp_path / "a.md").write_text("# A\n\ntext\n")
    args = ("index", "add", str(tmp_path / "a.md"), "--collection", "c", "--config")
    nowhere = str(tmp_path / "no-model")
    missing = cli(*args, corpus_config(embeddings={"model": nowhere}))
    assert missing.exit_code == 2, missing.output
    assert "embeddings.model" in missing.stderr and nowhere in missing.stderr
    # An embedding endpoint that refuses the connection (nothing listens on the port)
    # is a failure of the moment, not bad input.
    closed = f"http://127.0.0.1:{free_port()}/v1"
    refused = cli(*args, corpus_config(embeddings={"provider": "openai", "base_url": closed}))
    assert refused.exit_code == 1, refused.output
    assert "cannot load the embedder" in refused.stderr and "Traceback" not in refused.output


def test_remove_a_path_then_the_collection(indexed, make_settings, serve_searcher):
    notes, config = indexed
    gone = cli("index", "remove", str(notes / "garden.md"), "--config", config)
    assert gone.exit_code == 0 and "1 documents" in gone.stdout
    base = serve_searcher(make_settings(
        backends={"instances": {"notes": {"adapter": "local", "collection": "notes"}}},
        embeddings=EMBEDDINGS,
    ))  # fmt: skip
    urls = [i["url"] for i in search(base, "aphids roses soapy water")["items"]]
    assert (notes / "garden.md").as_uri() not in urls
    dropped = cli("index", "remove", "--collection", "notes", "--config", config)
    assert dropped.exit_code == 0 and "5 documents" in dropped.stdout
    assert status(config) == {}
    # A collection that is not indexed is a failing backend, said as such.
    response = httpx.post(
        f"{base}/v1/search",
        json={"query": "roses", "constraints": {"backend": "notes", "cache": "off"}},
        timeout=30,
    )
    assert response.status_code == 502, response.text
    assert "collection notes is not indexed" in response.text


def test_an_interrupted_run_leaves_a_usable_index(tmp_path, corpus_config):
    folder = tmp_path / "many"
    folder.mkdir()
    for n in range(600):
        (folder / f"note{n:04}.md").write_text(f"# Note {n}\n\nThe quick brown fox {n} jumps.\n")
    config = corpus_config()
    command = [sys.executable, "-m", "searcher", "index", "add", str(folder),
               "--collection", "many", "--progress", "--config", config]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    with subprocess.Popen(
        command, stderr=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env
    ) as run:
        assert run.stderr is not None
        line = run.stderr.readline()
        while line and "] indexed" not in line:  # until the first file is committed
            line = run.stderr.readline()
        assert "] indexed" in line
        run.send_signal(signal.SIGINT)
        _, err = run.communicate(timeout=120)
    assert run.returncode == 130, err
    assert "interrupted" in err and "Traceback" not in err
    db = sqlite3.connect(Path(config).parent / "state" / "corpus.sqlite3")
    documents = db.execute("SELECT count(*), coalesce(sum(chunks), 0) FROM documents").fetchone()
    chunks = db.execute("SELECT count(*) FROM chunks").fetchone()[0]
    fts = db.execute("SELECT count(*) FROM chunks_fts").fetchone()[0]
    db.close()
    assert 1 <= documents[0] < 600
    assert documents[1] == chunks == fts  # nothing half-written
    resumed = cli("index", "add", str(folder), "--collection", "many", "--config", config)
    assert f"{600 - documents[0]} indexed" in resumed.stdout
    assert f"{documents[0]} unchanged" in resumed.stdout
    assert status(config)["many"]["files"] == 600


def test_an_indexed_files_url_is_not_fetchable_outside_the_local_backend(
    indexed, make_settings, serve_searcher
):
    notes, _ = indexed
    base = serve_searcher(make_settings(embeddings=EMBEDDINGS))
    url = (notes / "garden.md").as_uri()
    response = httpx.post(f"{base}/v1/fetch", json={"url": url}, timeout=30)
    assert response.status_code == 422 and "url" in response.text
    assert "Tomatoes" not in response.text
