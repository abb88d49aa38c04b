"""Issue 27, point 5 (embedded store): a query after a write reads only what the write
changed, laid over the collection's snapshot, which every reader maps from disk instead
of holding (the memory of ``serve`` does not grow with the corpus beyond what it maps).
Readers are separate ``SqliteStore`` objects on one file, as ``serve`` workers are."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from searcher.corpus import live_index
from searcher.corpus import store as sqlite_store
from searcher.corpus.base import NewDocument
from searcher.corpus.chunking import Chunk
from searcher.corpus.indexer import IndexOptions, index_paths
from searcher.corpus.serving import CorpusReader
from searcher.corpus.store import SqliteStore
from searcher.embedding.embedders import StaticEmbedder
from tests.conftest import STATIC_MODEL


@pytest.fixture(scope="module")
def embedder() -> StaticEmbedder | None:
    """The offline static model when ../shared has it; keywords only otherwise."""
    return StaticEmbedder.load(str(STATIC_MODEL)) if STATIC_MODEL.exists() else None


def notes(folder: Path, count: int) -> Path:
    folder.mkdir()
    for n in range(count):
        (folder / f"note{n:03}.md").write_text(f"# Note {n}\n\nThe heron {n} fishes at dawn.\n")
    return folder


def add(writer: SqliteStore, path: Path, embedder: StaticEmbedder | None) -> Any:
    options = IndexOptions("birds", 100_000, 1200)
    return asyncio.run(index_paths(writer, [path], options, embedder))


def found(reader: SqliteStore, query: str, embedder: StaticEmbedder | None) -> list[str]:
    vectors = {"birds": embedder.encode([query])[0]} if embedder else {}
    return [Path(m.best.path).name for m in CorpusReader(reader).search(["birds"], query,
                                                                        vectors, 5)]  # fmt: skip


def mapped(array: np.ndarray) -> bool:
    """Whether ``array`` reads a memory-mapped file (not memory of its own)."""
    return isinstance(array.base, np.memmap) or isinstance(array, np.memmap)


def test_index_add_writes_a_snapshot_that_readers_map(tmp_path, embedder):
    folder = notes(tmp_path / "notes", 20)
    writer = SqliteStore(tmp_path / "corpus.sqlite3")
    add(writer, folder, embedder)
    snapshots = tmp_path / "corpus.snapshots" / "birds"
    assert [p.name.startswith("g") for p in snapshots.iterdir() if p.is_dir()] == [True]
    reader = SqliteStore(tmp_path / "corpus.sqlite3")
    live = reader.index("birds")
    # Mapped from the files index add wrote, not read from SQLite into memory.
    assert mapped(live.base.ids) and mapped(live.base.keywords.rows)
    if embedder is not None:
        assert mapped(live.base.matrix) and live.base.matrix.shape[0] == 20
    assert live.base.generation == writer.generation("birds") and live.changed == 0
    assert found(reader, "heron 7", embedder)[0] == "note007.md"
    reader.close()
    writer.close()


def test_a_query_after_a_write_reads_only_what_it_changed(tmp_path, embedder):
    folder = notes(tmp_path / "notes", 30)
    writer = SqliteStore(tmp_path / "corpus.sqlite3")
    add(writer, folder, embedder)
    reader = SqliteStore(tmp_path / "corpus.sqlite3")
    before = reader.index("birds")
    assert found(reader, "kingfisher", None) == []

    (folder / "note031.md").write_text("# Kingfisher\n\nA kingfisher dives from the alder.\n")
    (folder / "note005.md").unlink()
    (folder / "note010.md").write_text("# Note 10\n\nThe kingfisher waits where the heron did.\n")
    add(writer, folder, embedder)

    after = reader.index("birds")
    assert after.base is before.base  # the snapshot was not read again
    assert after.generation == writer.generation("birds") > before.generation
    assert len(after.ids) == 2 and after.removed == 2  # note031 and note010 in; 005 and 010 out
    assert sorted(found(reader, "kingfisher", None)) == ["note010.md", "note031.md"]
    assert "note005.md" not in found(reader, "heron 5 fishes", None)
    if embedder is not None:  # the added chunks' vectors are searched too
        nearest = live_index.vector_list(after, embedder.encode(["kingfisher alder"])[0], 1)
        assert nearest[0][0] in after.ids.tolist()
    # Exactly the chunks a whole reading of the collection now has.
    kept = before.base.ids[~after.excluded].tolist() + after.ids.tolist()
    assert sorted(kept) == sorted(sqlite_store.load_index(writer.conn(), "birds").ids.tolist())
    reader.close()
    writer.close()


def test_many_changes_lead_to_a_new_snapshot_that_readers_take_up(tmp_path):
    path = tmp_path / "corpus.sqlite3"
    writer = SqliteStore(path, snapshot_after=10)
    writer.ensure_collection("birds", None)

    def write(n: int) -> None:
        text = f"Bird number {n} sings at dawn."
        writer.replace_document(NewDocument(
            "birds", f"/b/{n}.md", "markdown", f"Bird {n}", 30, 0, str(n), [Chunk(0, text)], None,
        ))  # fmt: skip

    for n in range(5):
        write(n)
    writer.publish("birds")
    first = writer.index("birds").base.generation
    reader = SqliteStore(path)
    assert reader.index("birds").base.generation == first
    for n in range(5, 12):  # 7 changes: under the threshold, no new snapshot
        write(n)
    writer.publish("birds")
    assert writer.index("birds").base.generation == first
    for n in range(12, 20):  # 15 changes: over it
        write(n)
    writer.publish("birds")
    assert writer.index("birds").base.generation > first
    live = reader.index("birds")
    assert live.base.generation == writer.generation("birds") and live.changed == 0
    assert live.chunks == 20
    # The removal log is kept only back to the snapshot before the newest.
    snapshots = []
    for _ in range(2):
        for n in range(20):
            write(n)  # 20 replacements: 20 chunks removed, over the threshold
        writer.publish("birds")
        snapshots.append(writer.index("birds").base.generation)
    logged = writer.conn().execute("SELECT min(generation) FROM removed_chunks").fetchone()[0]
    assert logged > snapshots[0] and reader.index("birds").chunks == 20
    reader.close()
    writer.close()


def test_a_collection_made_again_never_reads_the_old_ones_snapshot(tmp_path):
    path = tmp_path / "corpus.sqlite3"
    writer, reader = SqliteStore(path), SqliteStore(path)

    def make(text: str) -> None:
        writer.ensure_collection("birds", None)
        writer.replace_document(NewDocument(
            "birds", "/b/one.md", "markdown", "One", 30, 0, text, [Chunk(0, text)], None,
        ))  # fmt: skip
        writer.publish("birds")

    make("The osprey circles the lake.")
    assert found(reader, "osprey", None) == ["one.md"]
    old = reader.index("birds").generation
    writer.remove_collection("birds")
    make("The wren hides in the hedge.")
    assert writer.generation("birds") > old  # generations are never given twice
    assert found(reader, "osprey", None) == []
    assert found(reader, "wren", None) == ["one.md"]
    reader.close()
    writer.close()


def test_a_reader_whose_changes_grow_writes_a_snapshot_in_the_background(tmp_path):
    path = tmp_path / "corpus.sqlite3"
    writer, reader = SqliteStore(path), SqliteStore(path, snapshot_after=10)
    writer.ensure_collection("birds", None)

    def write(n: int) -> None:
        text = f"Bird number {n} sings at dawn."
        writer.replace_document(NewDocument(
            "birds", f"/b/{n}.md", "markdown", f"Bird {n}", 30, 0, str(n), [Chunk(0, text)], None,
        ))  # fmt: skip

    write(0)
    writer.publish("birds")
    first = reader.index("birds").base.generation
    for n in range(1, 16):  # 15 chunks added: past the reader's threshold, not the writer's
        write(n)
    assert reader.index("birds").base.generation == first  # answered at once, from memory
    for thread in threading.enumerate():
        if thread.name == "snapshot-birds":
            thread.join()
    live = reader.index("birds")  # no write since: the new snapshot is taken up anyway
    assert live.base.generation == writer.generation("birds") > first
    assert live.changed == 0 and live.chunks == 16
    assert found(reader, "bird 15", None)[0] == "15.md"
    reader.close()
    writer.close()


def _cut_short(folder: Path) -> None:
    data = (folder / "ids.npy").read_bytes()
    (folder / "ids.npy").write_bytes(data[: len(data) - 16])


def _rows_of_another_length(folder: Path) -> None:
    np.save(folder / "rows.npy", np.zeros(3, dtype=np.int32))


def _folder_for_a_file(folder: Path) -> None:
    (folder / "documents.npy").unlink()
    (folder / "documents.npy").mkdir()


def _meta_not_json(folder: Path) -> None:
    (folder / "meta.json").write_bytes(b"\xff{not json")


def _rows_past_the_chunks(folder: Path) -> None:
    rows = np.load(folder / "rows.npy")
    np.save(folder / "rows.npy", rows + 1000)


@pytest.mark.parametrize(
    "damage",
    [_cut_short, _rows_of_another_length, _folder_for_a_file, _meta_not_json,
     _rows_past_the_chunks],
)  # fmt: skip
def test_a_damaged_snapshot_is_read_again_from_the_database(tmp_path, damage, caplog):
    folder = notes(tmp_path / "notes", 12)
    writer = SqliteStore(tmp_path / "corpus.sqlite3")
    add(writer, folder, None)
    snapshots = tmp_path / "corpus.snapshots" / "birds"
    (written,) = [p for p in snapshots.iterdir() if p.name.startswith("g")]
    damage(written)

    reader = SqliteStore(tmp_path / "corpus.sqlite3")  # a worker started after the damage
    assert found(reader, "heron 7", None)[0] == "note007.md"
    assert "reading it again" in caplog.text
    # Written again whole, and mapped by the next reader with no warning.
    caplog.clear()
    again = SqliteStore(tmp_path / "corpus.sqlite3")
    assert found(again, "heron 3", None)[0] == "note003.md"
    assert mapped(again.index("birds").base.ids) and "reading it again" not in caplog.text
    for store in (again, reader, writer):
        store.close()
