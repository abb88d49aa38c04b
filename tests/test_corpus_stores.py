"""Issue 27, point 4: one store interface, two stores. The same tests run over the
embedded SQLite store, over the Qdrant store in qdrant-client's local mode (a directory,
as ``corpus.qdrant_url: DIR`` selects it), and over a Qdrant server when
``SEARCHER_TEST_QDRANT_URL`` names one: indexing, search, incremental re-index, remove,
status, full mode's content, an embedder change; then the CLI and ``/v1/search`` on both,
a cached answer never outliving a re-index, and readers while ``index add`` writes."""

from __future__ import annotations

import asyncio
import os
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
import yaml
from click.testing import CliRunner

from searcher.cli import main
from searcher.corpus.base import CorpusStore
from searcher.corpus.indexer import IndexOptions, index_paths
from searcher.corpus.qdrant_store import QdrantStore
from searcher.corpus.serving import CorpusReader
from searcher.corpus.store import SqliteStore
from searcher.embedding.embedders import StaticEmbedder
from tests.conftest import STATIC_MODEL

QDRANT_SERVER = os.environ.get("SEARCHER_TEST_QDRANT_URL")
STORES = [
    "sqlite",
    "qdrant-local",
    pytest.param(
        "qdrant-server",
        marks=pytest.mark.skipif(
            not QDRANT_SERVER, reason="SEARCHER_TEST_QDRANT_URL names no Qdrant server"
        ),
    ),
]

NOTES = {
    "garden.md": "# Garden\n\nTomatoes want full sun and deep watering twice a week.\n\n"
    "## Pests\n\nAphids on the roses are washed off with soapy water.\n",
    "bread.txt": "Sourdough bread rises overnight with a wild yeast starter.\n",
    "kayak.md": "# Kayak\n\nRead the eddy line before crossing the current with the kayak.\n",
}


@pytest.fixture(scope="module")
def embedder() -> StaticEmbedder | None:
    """The offline static model when ../shared has it; keywords only otherwise."""
    return StaticEmbedder.load(str(STATIC_MODEL)) if STATIC_MODEL.exists() else None


def qdrant_location(kind: str, tmp_path: Path) -> str:
    """Where a Qdrant-backed test keeps its collections."""
    return (QDRANT_SERVER or "") if kind == "qdrant-server" else str(tmp_path / "qdrant")


@pytest.fixture(params=STORES)
def corpus(request: Any, tmp_path: Path) -> Iterator[CorpusStore]:
    kind: str = request.param
    opened: CorpusStore
    if kind == "sqlite":
        opened = SqliteStore(tmp_path / "corpus.sqlite3")
    else:
        opened = QdrantStore.open(qdrant_location(kind, tmp_path))
    yield opened
    for name in opened.collections():  # a server outlives the test
        if name.startswith("t-"):
            opened.remove_collection(name)
    opened.close()


def write_notes(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in NOTES.items():
        (folder / name).write_text(text)
    (folder / "empty.txt").write_text("")
    return folder


def index(
    corpus: CorpusStore, folder: Path, collection: str, embedder: StaticEmbedder | None
) -> Any:
    options = IndexOptions(collection, 1_000_000, 1200)
    return asyncio.run(index_paths(corpus, [folder], options, embedder))


def matches(
    corpus: CorpusStore, collection: str, query: str, embedder: StaticEmbedder | None
) -> list[Any]:
    vectors = {collection: embedder.encode([query])[0]} if embedder else {}
    return CorpusReader(corpus).search([collection], query, vectors, 5)


def found(
    corpus: CorpusStore, collection: str, query: str, embedder: StaticEmbedder | None
) -> list[str]:
    """The file names of the documents found for ``query``, best first."""
    return [Path(m.best.path).name for m in matches(corpus, collection, query, embedder)]


def every_text(corpus: CorpusStore, collection: str, query: str, embedder: Any) -> str:
    """Every chunk text the search for ``query`` answers with."""
    return "\n".join(c.text for m in matches(corpus, collection, query, embedder) for c in m.chunks)


def new_collection() -> str:
    return f"t-{uuid.uuid4().hex[:8]}"


def test_index_search_and_status(corpus, tmp_path, embedder):
    folder = write_notes(tmp_path / "notes")
    name = new_collection()
    report = index(corpus, folder, name, embedder)
    assert (report.indexed, len(report.skipped)) == (3, 1)
    assert found(corpus, name, "aphids on roses", embedder)[0] == "garden.md"
    assert found(corpus, name, "sourdough starter", embedder)[0] == "bread.txt"
    assert [d.path for d in corpus.documents(name)] == sorted(str(folder / n) for n in NOTES)
    garden = next(d for d in corpus.documents(name) if d.path.endswith("garden.md"))
    assert (garden.kind, garden.title, garden.chunks) == ("markdown", "Garden", 2)
    assert [(s.path, s.reason) for s in corpus.skipped(name)] == [
        (str(folder / "empty.txt"), "empty")
    ]
    assert name in corpus.collections()
    assert corpus.collection_embedder(name) == (True, embedder.name if embedder else None)


def test_a_rerun_is_incremental_and_bumps_the_generation(corpus, tmp_path, embedder):
    folder = write_notes(tmp_path / "notes")
    name = new_collection()
    index(corpus, folder, name, embedder)
    before = corpus.generation(name)
    again = index(corpus, folder, name, embedder)
    assert (again.indexed, again.unchanged) == (0, 3)
    assert corpus.generation(name) == before  # nothing changed, nothing to invalidate
    (folder / "bread.txt").write_text("Rye crackers are baked until crisp and brittle.\n")
    (folder / "kayak.md").unlink()
    changed = index(corpus, folder, name, embedder)
    assert (changed.indexed, changed.unchanged, changed.removed) == (1, 1, 1)
    assert corpus.generation(name) > before
    assert "Sourdough" not in every_text(corpus, name, "sourdough starter yeast", embedder)
    assert found(corpus, name, "rye crackers crisp", embedder)[0] == "bread.txt"
    assert "kayak.md" not in found(corpus, name, "eddy kayak current", embedder)
    assert sorted(Path(d.path).name for d in corpus.documents(name)) == ["bread.txt", "garden.md"]
    bread = next(d for d in corpus.documents(name) if d.path.endswith("bread.txt"))
    assert bread.chunks == 1  # the old chunk is gone, not kept beside the new one


def test_remove_a_path_then_the_collection(corpus, tmp_path, embedder):
    folder = write_notes(tmp_path / "notes")
    name = new_collection()
    index(corpus, folder, name, embedder)
    assert corpus.remove_documents(name, [str(folder / "garden.md")]) == 1
    assert "Aphids" not in every_text(corpus, name, "aphids on roses", embedder)
    assert len(corpus.documents(name)) == 2
    assert corpus.remove_collection(name) == 2
    assert name not in corpus.collections()
    assert corpus.collection_embedder(name) == (False, None)
    assert corpus.generation(name) == -1


def test_full_mode_content_is_the_best_chunk_and_its_neighbours(corpus, tmp_path, embedder):
    folder = tmp_path / "long"
    folder.mkdir()
    sections = [f"## Part {n}\n\n" + f"Paragraph {n} talks about topic{n} at length. " * 20
                for n in range(8)]  # fmt: skip
    (folder / "long.md").write_text("# Long\n\n" + "\n\n".join(sections))
    name = new_collection()
    index(corpus, folder, name, embedder)
    text = corpus.content([name], str(folder / "long.md"), None, "topic6", 100_000)
    assert text is not None and "topic6" in text and "topic4" in text
    assert "topic3 " not in text  # beyond two neighbours
    assert corpus.content([name], str(folder / "other.md"), None, "topic6", 1000) is None


def test_another_embedder_rebuilds_the_collection(corpus, tmp_path, embedder):
    folder = write_notes(tmp_path / "notes")
    name = new_collection()
    index(corpus, folder, name, None)
    assert corpus.collection_embedder(name) == (True, None)
    assert found(corpus, name, "aphids on roses", None)[0] == "garden.md"
    if embedder is None:
        pytest.skip("the static model (../shared/models/minilm-static-256) is absent")
    rebuilt = index(corpus, folder, name, embedder)
    assert rebuilt.indexed == 3  # every file again, now with vectors
    assert corpus.collection_embedder(name) == (True, embedder.name)
    assert found(corpus, name, "aphids on roses", embedder)[0] == "garden.md"


def test_a_rebuild_reads_the_files_it_held_not_only_those_named(corpus, tmp_path, embedder):
    if embedder is None:
        pytest.skip("the static model (../shared/models/minilm-static-256) is absent")
    notes = write_notes(tmp_path / "notes")
    other = tmp_path / "other"
    other.mkdir()
    (other / "ocelot.md").write_text("# Ocelots\n\nOcelots hunt at night in the forest.\n")
    (other / "gone.md").write_text("# Gone\n\nThis note is deleted before the rebuild.\n")
    name = new_collection()
    index(corpus, notes, name, None)
    index(corpus, other, name, None)
    (other / "gone.md").unlink()
    # Another embedder, only the notes named: the other folder's file is read again (it
    # was dropped with every vector, and reported as nothing), the deleted one removed.
    rebuilt = index(corpus, notes, name, embedder)
    assert (rebuilt.indexed, rebuilt.removed) == (4, 1)
    paths = {Path(path).name for path in corpus.stored_files(name)}
    assert paths == {"garden.md", "bread.txt", "kayak.md", "ocelot.md"}, paths
    assert found(corpus, name, "ocelots hunt at night", embedder)[0] == "ocelot.md"


# --- the CLI and HTTP on both stores --------------------------------------------------


def cli(*args: str) -> Any:
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def embeddings(embedder: StaticEmbedder | None) -> dict[str, Any]:
    if embedder is None:
        return {"provider": "none"}
    return {"provider": "model2vec", "model": str(STATIC_MODEL)}


@pytest.fixture(params=STORES)
def store_config(request: Any, tmp_path: Path) -> dict[str, Any]:
    """The ``corpus`` section that selects each store."""
    if request.param == "sqlite":
        return {"dir": str(tmp_path / "index")}
    return {"qdrant_url": qdrant_location(request.param, tmp_path)}


def write_config(tmp_path: Path, testbed: Any, corpus: dict[str, Any], embed: Any) -> str:
    config = {
        "backends": {
            "order": ["searxng"],
            "searxng": {"base_url": testbed.searxng_url()},
            "duckduckgo": {"enabled": False},
            "instances": {"notes": {"adapter": "local", "collection": "t-notes"}},
        },
        "state": {"dir": str(tmp_path / "state")},
        "service": {"cache": {"dir": str(tmp_path / "cache")}},
        "embeddings": embeddings(embed),
        "scoring": {"hybrid_share": 0.0, "min_keyword_overlap": 0},
        "corpus": corpus,
    }
    path = tmp_path / "searcher.yaml"
    path.write_text(yaml.safe_dump(config))
    return str(path)


def search(base: str, query: str, cache: str = "off") -> dict[str, Any]:
    body = {"query": query, "constraints": {"backend": "notes", "cache": cache}}
    response = httpx.post(f"{base}/v1/search", json=body, timeout=60)
    assert response.status_code == 200, response.text
    data: dict[str, Any] = response.json()
    return data


def test_the_cli_and_http_on_each_store(
    store_config, tmp_path, testbed, embedder, make_settings, serve_searcher
):
    folder = write_notes(tmp_path / "notes")
    config = write_config(tmp_path, testbed, store_config, embedder)
    added = cli("index", "add", str(folder), "--collection", "t-notes", "--config", config)
    assert added.exit_code == 0, added.output
    assert "3 indexed" in added.stdout and "1 skipped" in added.stdout
    listed = cli("index", "status", "--collection", "t-notes", "--config", config)
    assert "3 files" in listed.stdout and "empty" in listed.stdout
    # The CLI's client is closed: a local-mode directory is free for the server now.
    base = serve_searcher(make_settings(
        backends={"instances": {"notes": {"adapter": "local", "collection": "t-notes"}}},
        embeddings=embeddings(embedder), corpus=store_config,
    ))  # fmt: skip
    items = search(base, "aphids on the roses")["items"]
    assert items[0]["url"] == (folder / "garden.md").as_uri()
    assert items[0]["engines"] == ["t-notes"]


def test_missing_qdrant_client_is_a_clear_error(tmp_path, testbed, monkeypatch):
    config = write_config(tmp_path, testbed, {"qdrant_url": str(tmp_path / "q")}, None)
    # Hide the installed package the way an install without the extra lacks it.
    monkeypatch.setitem(__import__("sys").modules, "qdrant_client", None)
    for command in (
        ["index", "status"],
        ["index", "add", str(tmp_path), "--collection", "c"],
        ["serve", "--port", "0"],
    ):
        result = CliRunner().invoke(main, [*command, "--config", config])
        assert result.exit_code == 2, (command, result.output)
        assert "pip install 'searcher[qdrant]'" in result.output
        assert "Traceback" not in result.output


# --- the result cache and a re-index --------------------------------------------------


@pytest.mark.parametrize(
    "backend",
    [
        "sqlite",
        pytest.param(
            "qdrant-server",
            marks=pytest.mark.skipif(
                not QDRANT_SERVER, reason="SEARCHER_TEST_QDRANT_URL names no Qdrant server"
            ),
        ),
    ],
)
def test_a_cached_answer_does_not_outlive_a_re_index(
    backend, tmp_path, testbed, embedder, make_settings, serve_searcher
):
    # Qdrant's local mode is one process at a time: the server would hold it while the
    # CLI re-indexes, so the cache over Qdrant is shown against a server only.
    corpus = {"dir": str(tmp_path / "index")} if backend == "sqlite" else {
        "qdrant_url": QDRANT_SERVER
    }  # fmt: skip
    folder = write_notes(tmp_path / "notes")
    config = write_config(tmp_path, testbed, corpus, embedder)
    assert (
        cli("index", "add", str(folder), "--collection", "t-notes", "--config", config).exit_code
        == 0
    )
    base = serve_searcher(make_settings(
        backends={"instances": {"notes": {"adapter": "local", "collection": "t-notes"}}},
        embeddings=embeddings(embedder), corpus=corpus,
    ))  # fmt: skip
    first = search(base, "bread rises overnight", cache="on")
    assert "Sourdough" in first["items"][0]["snippet"]
    again = search(base, "bread rises overnight", cache="on")
    assert again["meta"]["cache"]["hit"] is True  # the cache is on and answers
    (folder / "bread.txt").write_text("This bread rises overnight with rye flour and caraway.\n")
    assert (
        cli("index", "add", str(folder), "--collection", "t-notes", "--config", config).exit_code
        == 0
    )
    after = search(base, "bread rises overnight", cache="on")
    assert after["meta"]["cache"]["hit"] is False
    assert "caraway" in after["items"][0]["snippet"]


@pytest.mark.parametrize("named", ["auto", "notes, by routing"])
def test_a_cached_answer_routed_by_auto_does_not_outlive_a_re_index(
    named, tmp_path, testbed, embedder, make_settings, serve_searcher
):
    """ "auto" names no instance: the generations of every collection routing may search
    key its cache entry, as when the request names none."""
    corpus = {"dir": str(tmp_path / "index")}
    folder = write_notes(tmp_path / "notes")
    config = write_config(tmp_path, testbed, corpus, embedder)
    index = ("index", "add", str(folder), "--collection", "t-notes", "--config", config)
    assert cli(*index).exit_code == 0
    base = serve_searcher(make_settings(
        backends={"instances": {"notes": {"adapter": "local", "collection": "t-notes"}},
                  "order": ["notes"]},
        embeddings=embeddings(embedder), corpus=corpus,
    ))  # fmt: skip
    backend = "auto" if named == "auto" else None

    def ask() -> dict[str, Any]:
        constraints = {"cache": "on", **({"backend": backend} if backend else {})}
        body = {"query": "bread rises overnight", "constraints": constraints}
        response = httpx.post(f"{base}/v1/search", json=body, timeout=60)
        assert response.status_code == 200, response.text
        return dict(response.json())

    assert "Sourdough" in ask()["items"][0]["snippet"]
    assert ask()["meta"]["cache"]["hit"] is True
    (folder / "bread.txt").write_text("This bread rises overnight with rye flour and caraway.\n")
    assert cli(*index).exit_code == 0
    after = ask()
    assert after["meta"]["cache"]["hit"] is False
    assert "caraway" in after["items"][0]["snippet"]


# --- readers while index add writes ---------------------------------------------------


def test_readers_while_index_add_writes(tmp_path, embedder):
    path = tmp_path / "corpus.sqlite3"
    folder = tmp_path / "many"
    folder.mkdir()
    for n in range(150):
        (folder / f"note{n:03}.md").write_text(f"# Note {n}\n\nThe heron {n} fishes at dawn.\n")
    writer = SqliteStore(path)
    asyncio.run(index_paths(writer, [folder / "note000.md"], IndexOptions("birds", 10_000, 1200),
                            embedder))  # fmt: skip
    done = threading.Event()
    failures: list[BaseException] = []
    seen: list[int] = []

    def read() -> None:
        # Each reader its own store, as each ``serve`` worker process has.
        reader = CorpusReader(SqliteStore(path), candidates=200)
        try:
            while True:  # at least once, then until the writer is done
                vectors = {"birds": embedder.encode(["heron"])[0]} if embedder else {}
                matches = reader.search(["birds"], "heron fishes", vectors, 200)
                # Every document found is whole: its entry and its chunks in one snapshot.
                assert all(m.best.text.startswith("The heron") for m in matches)
                seen.append(len(matches))
                if done.is_set():
                    break
        except BaseException as exc:
            failures.append(exc)
        finally:
            reader.close()

    readers = [threading.Thread(target=read) for _ in range(3)]
    for thread in readers:
        thread.start()
    try:
        report = asyncio.run(
            index_paths(writer, [folder], IndexOptions("birds", 10_000, 1200), embedder)
        )
    finally:
        done.set()
        for thread in readers:
            thread.join()
    writer.close()
    assert failures == []
    assert report.indexed == 149 and not report.skipped  # no write waited out its lock
    assert seen and min(seen) >= 1
    final = CorpusReader(SqliteStore(path), candidates=200)
    assert len(final.search(["birds"], "heron fishes", {}, 200)) == 150
    final.close()


def test_a_large_matrix_is_ranked_in_two_passes_that_find_the_nearest():
    from searcher.corpus import retrieval

    rng = np.random.default_rng(27)
    rows = retrieval.EXACT_UP_TO + 5_000
    matrix = rng.standard_normal((rows, 64)).astype(np.float32)
    matrix /= np.linalg.norm(matrix, axis=1, keepdims=True)
    ids = np.arange(1, rows + 1, dtype=np.int64)
    signs = retrieval.SignBits.of(matrix)
    assert signs is not None  # above the bound: a first pass on signs
    for row in (0, 1234, rows - 1):
        query = matrix[row] + 0.05 * rng.standard_normal(64).astype(np.float32)
        query /= np.linalg.norm(query)
        exact = retrieval.vector_search(ids, matrix, query, 10)
        shortlisted = retrieval.vector_search(ids, matrix, query, 10, signs)
        assert shortlisted[0] == exact[0] == row + 1
        assert len(set(shortlisted) & set(exact)) >= 5  # random vectors: a hard case
    assert retrieval.SignBits.of(matrix[:1000]) is None  # small: ranked exactly
