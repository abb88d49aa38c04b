"""Issue 27's file kinds past the core: a DOCX generated here is read by its heading
styles, and HTML is extracted under the fetcher's bounds (pre-scan, time limit, memory),
so that a hostile page is skipped with its reason instead of holding the indexer; bad
fusion settings exit 2 naming them."""

from __future__ import annotations

import io
import zipfile
from pathlib import Path

import docx

from searcher.config import CorpusSettings
from tests.test_corpus import EMBEDDINGS, cli, corpus_config, search, status

__all__ = ["corpus_config"]  # the fixture, imported for these tests


def write_docx(path: Path | io.BytesIO) -> None:
    """A Word document with a title, two headed sections and a table."""
    word = docx.Document()
    word.add_heading("Beekeeping handbook", 0)
    word.add_paragraph("Bees are kept in wooden hives with removable frames.")
    word.add_heading("Swarming", 1)
    word.add_paragraph("A colony swarms in late spring when the queen runs out of room.")
    word.add_heading("Harvest", 1)
    word.add_paragraph("Honey is extracted by spinning the uncapped frames in a centrifuge.")
    table = word.add_table(rows=1, cols=2)
    table.rows[0].cells[0].text = "Varroa mite"
    table.rows[0].cells[1].text = "oxalic acid treatment in winter"
    word.save(path if isinstance(path, io.BytesIO) else str(path))


def test_a_docx_is_indexed_by_its_headings_and_found(
    tmp_path, corpus_config, make_settings, serve_searcher
):
    folder = tmp_path / "docs"
    folder.mkdir()
    write_docx(folder / "bees.docx")
    (folder / "broken.docx").write_bytes(b"PK\x03\x04 not really a zip")
    bomb = io.BytesIO()
    with zipfile.ZipFile(bomb, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("word/document.xml", b"\0" * (300 * 1024 * 1024))  # 300 MB of zeros
    (folder / "bomb.docx").write_bytes(bomb.getvalue())
    # A 12 MB run of text in one element: over lxml's limit for one text node (10 MB).
    long_run = io.BytesIO()
    write_docx(long_run)
    with zipfile.ZipFile(long_run) as source:
        parts = {name: source.read(name) for name in source.namelist()}
    parts["word/document.xml"] = parts["word/document.xml"].replace(
        b"Varroa mite", b"Varroa mite " + b"x" * 12_000_000, 1
    )
    with zipfile.ZipFile(folder / "long-run.docx", "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in parts.items():
            archive.writestr(name, data)
    overrides = {
        "backends": {"instances": {"docs": {"adapter": "local", "collection": "docs"}}},
        "corpus": {"max_file_bytes": 2_000_000, "chunk_chars": 200},
    }
    config = corpus_config(**overrides)
    added = cli("index", "add", str(folder), "--collection", "docs", "--config", config)
    assert added.exit_code == 0, added.output
    docs = status(config)["docs"]
    [document] = docs["documents"]
    assert document["kind"] == "docx" and document["title"] == "Beekeeping handbook"
    assert document["chunks"] >= 3  # each heading starts a chunk
    reasons = {Path(s["path"]).name: s["reason"] for s in docs["skipped"]}
    assert reasons == {name: "docx_unreadable" for name in ("broken.docx", "bomb.docx",
                                                             "long-run.docx")}  # fmt: skip
    base = serve_searcher(make_settings(embeddings=EMBEDDINGS, **overrides))
    item = search(base, "queen swarms late spring", "docs")["items"][0]
    assert item["url"] == (folder / "bees.docx").as_uri()
    assert "queen runs out of room" in item["snippet"] and "centrifuge" not in item["snippet"]
    table = search(base, "varroa oxalic acid", "docs")["items"][0]
    assert "oxalic acid treatment" in table["snippet"]


def test_hostile_html_is_skipped_with_its_reason_and_the_rest_indexed(tmp_path, corpus_config):
    folder = tmp_path / "pages"
    folder.mkdir()
    # 100,000 nested elements: lxml and trafilatura would take the indexer's memory and
    # time for it; the fetcher's pre-scan refuses it before any parse.
    (folder / "nested.html").write_text("<html><body>" + "<div>" * 100_000 + "deep")
    (folder / "fine.html").write_text(
        "<html><head><title>Fine page</title></head><body><article><p>Lighthouses guide "
        "ships past the reef at night with a rotating beam of light.</p></article></body></html>"
    )
    config = corpus_config(corpus={"max_file_bytes": 2_000_000})
    added = cli("index", "add", str(folder), "--collection", "pages", "--config", config)
    assert added.exit_code == 0, added.output
    assert "Traceback" not in added.output
    pages = status(config)["pages"]
    assert [Path(d["path"]).name for d in pages["documents"]] == ["fine.html"]
    [skipped] = pages["skipped"]
    assert Path(skipped["path"]).name == "nested.html"
    assert skipped["reason"] == "extraction_failed" and "too complex" in skipped["detail"]


def test_html_over_the_extraction_time_limit_is_skipped(tmp_path, corpus_config):
    folder = tmp_path / "slow"
    folder.mkdir()
    # Under every pre-scan bound, but far more text than 1 ms of extraction gets through:
    # the worker is killed at fetch.extract_timeout_s and the file skipped, saying so.
    rows = "".join(f"<p>paragraph {n} about tides and harbours</p>" for n in range(20_000))
    (folder / "long.html").write_text(f"<html><body><article>{rows}</article></body></html>")
    config = corpus_config(
        corpus={"max_file_bytes": 5_000_000},
        fetch={"extract_timeout_s": 0.001, "max_page_elements": 100_000},
    )
    added = cli("index", "add", str(folder), "--collection", "slow", "--config", config)
    assert added.exit_code == 0, added.output
    [skipped] = status(config)["slow"]["skipped"]
    assert skipped["reason"] == "extraction_failed" and "longer than" in skipped["detail"]


def test_bad_fusion_settings_exit_2_naming_them(corpus_config):
    config = corpus_config(corpus={"fusion": "magic", "vector_weight": -1, "chunks_summed": 0})
    refused = cli("index", "status", "--config", config)
    assert refused.exit_code == 2
    for field in ("corpus.fusion", "corpus.vector_weight", "corpus.chunks_summed"):
        assert field in refused.stderr
    assert "Traceback" not in refused.output


def test_unset_fusion_weights_follow_the_kind_of_embedder():
    unset = CorpusSettings()
    assert unset.fusion_weights("model2vec") == (0.9, 0.1)  # a static model's weak vectors
    assert unset.fusion_weights("onnx") == unset.fusion_weights("openai") == (0.5, 0.5)
    # What is set wins, each weight on its own; 0 still leaves a list out.
    assert CorpusSettings(keyword_weight=0.7).fusion_weights("onnx") == (0.7, 0.5)
    assert CorpusSettings(vector_weight=0).fusion_weights("model2vec") == (0.9, 0.0)


def test_a_corpus_folder_or_file_it_cannot_use_exits_2_saying_so(corpus_config, tmp_path):
    (tmp_path / "a-file").write_text("not a folder")
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.md").write_text("# Bees\n\nHives.\n")
    garbage = tmp_path / "garbage"
    garbage.mkdir()
    (garbage / "corpus.sqlite3").write_bytes(bytes(range(256)) * 32)  # not an SQLite file
    for folder in (tmp_path / "a-file" / "corpus", garbage):
        config = corpus_config(corpus={"dir": str(folder), "roots": [str(tmp_path)]})
        for args in (
            ("index", "status"),
            ("index", "add", str(tmp_path / "docs"), "--collection", "n"),
        ):
            refused = cli(*args, "--config", config)
            assert refused.exit_code == 2, refused.output
            assert f"cannot use the corpus index {folder / 'corpus.sqlite3'}" in refused.stderr


def test_a_file_name_that_is_not_utf8_is_skipped_and_the_rest_indexed(tmp_path, corpus_config):
    folder = tmp_path / "odd"
    folder.mkdir()
    with open(bytes(folder) + b"/bad\xff.md", "wb") as bad:  # a name no text can hold
        bad.write(b"# Marmosets\n\nMarmosets live in the canopy.\n")
    (folder / "fine.md").write_text("# Tamarins\n\nTamarins eat fruit and insects.\n")
    config = corpus_config()
    for _ in range(2):  # and again: the skip is kept under the same name
        added = cli("index", "add", str(folder), "--collection", "odd", "--config", config)
        assert added.exit_code == 0, added.output
    odd = status(config)["odd"]
    assert [Path(d["path"]).name for d in odd["documents"]] == ["fine.md"]
    [skip] = odd["skipped"]
    assert skip["reason"] == "unreadable" and skip["path"].endswith("bad\\xff.md")


def test_a_line_longer_than_a_chunk_is_cut_at_spaces_into_chunks_that_fit():
    from searcher.corpus.chunking import chunk_document
    from searcher.corpus.readers import Document, Section

    words = [f"w{i}" for i in range(20_000)]  # one 'sentence' of ~120,000 characters
    long_word = "x" * 150  # no space in a chunk's second half: cut where the chunk ends
    line = " ".join(words[:10]) + "  \t " + long_word + " " + " ".join(words[10:]) + "   "
    chunks = chunk_document(Document("text", "log", (Section(line),)), 100)
    texts = [c.text for c in chunks]
    assert all(0 < len(t) <= 100 and t == t.strip() for t in texts)
    assert "".join("".join(texts).split()) == "".join(line.split())  # all of it, in order
    # Cut at spaces: every word whole in one chunk (only the long one is cut).
    assert [w for t in texts for w in t.split() if w.startswith("w")] == words
    assert "".join(w for t in texts for w in t.split() if w[0] == "x") == long_word


def test_removing_a_link_found_in_a_folder_removes_the_link_not_its_target(tmp_path, corpus_config):
    folder = tmp_path / "lk"
    folder.mkdir()
    (folder / "target.md").write_text("# Gazelles\n\nGazelles run across the savanna.\n")
    (folder / "alias.md").symlink_to("target.md")
    config = corpus_config()
    assert cli("index", "add", str(folder), "--collection", "lk", "--config", config).exit_code == 0
    held = sorted(Path(d["path"]).name for d in status(config)["lk"]["documents"])
    assert held == ["alias.md", "target.md"]
    gone = cli(
        "index", "remove", str(folder / "alias.md"), "--collection", "lk", "--config", config
    )
    assert gone.exit_code == 0 and "1 documents" in gone.stdout, gone.output
    assert [Path(d["path"]).name for d in status(config)["lk"]["documents"]] == ["target.md"]


POST = """---
title: "Espresso at home"
tags: [coffee, crema]
date: 2024-03-01
---

Pulling a shot needs nine bars of pressure and a fine grind.

## Tamping

Tamp level with about fifteen kilograms of force.
"""


def test_markdown_front_matter_names_the_document_and_is_not_its_text(
    tmp_path, corpus_config, make_settings, serve_searcher
):
    folder = tmp_path / "blog"
    folder.mkdir()
    (folder / "espresso.md").write_text(POST)
    hugo = '+++\ntitle = "Cold brew"\n+++\n\nSteep the grounds overnight.\n'  # TOML
    (folder / "hugo.md").write_text(hugo)
    overrides = {"backends": {"instances": {"blog": {"adapter": "local", "collection": "blog"}}}}
    config = corpus_config(**overrides)
    added = cli("index", "add", str(folder), "--collection", "blog", "--config", config)
    assert added.exit_code == 0, added.output
    titles = {Path(d["path"]).name: d["title"] for d in status(config)["blog"]["documents"]}
    assert titles == {"espresso.md": "Espresso at home", "hugo.md": "Cold brew"}
    base = serve_searcher(make_settings(embeddings=EMBEDDINGS, **overrides))
    item = search(base, "nine bars of pressure", "blog")["items"][0]
    assert item["title"] == "Espresso at home"
    assert "pressure" in item["snippet"] and "tags:" not in item["snippet"], item["snippet"]
    # The title's words find the text it heads (the front matter's title is its heading).
    assert search(base, "espresso at home", "blog")["items"][0]["url"].endswith("espresso.md")
