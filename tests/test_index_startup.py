"""What ``searcher index add`` of Markdown files loads at start-up: not trafilatura or
lxml (HTML extraction only) and not huggingface_hub (a model in a local directory), which
cost ~1 s of CPU per run (issue 27 point 5; figures: bench/corpus.py ``index``)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import yaml

from tests.shared_data import REAL_MODEL, REPO, require_shared

_HEAVY = ("trafilatura", "lxml", "huggingface_hub")
_RUN = """
import json, sys
from searcher.cli import main
main(sys.argv[1:], standalone_mode=False)
print(json.dumps(sorted({name.split(".")[0] for name in sys.modules})))
"""


def test_markdown_index_add_loads_no_html_or_hub_libraries(tmp_path: Path) -> None:
    model = require_shared(REAL_MODEL)
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "a.md").write_text("# Routing\n\nRouting tables map prefixes to next hops.\n")
    (notes / "b.rst").write_text("Servo\n=====\n\nA servo alarm stops the arm.\n")
    (notes / "c.txt").write_text("Plain notes about torque limits.\n")
    config = tmp_path / "searcher.yaml"
    config.write_text(yaml.safe_dump({
        "state": {"dir": str(tmp_path / "state")},
        "embeddings": {"model": str(model)},
        "corpus": {"roots": [str(notes)]},
    }))  # fmt: skip
    args = ["index", "add", str(notes), "--collection", "notes", "--config", str(config)]
    done = subprocess.run(
        [sys.executable, "-c", _RUN, *args], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert "3 indexed" in done.stdout or "indexed 3" in done.stdout, done.stdout
    loaded = set(json.loads(done.stdout.strip().splitlines()[-1]))
    assert "model2vec" in loaded  # the files were embedded
    assert loaded.isdisjoint(_HEAVY), sorted(loaded & set(_HEAVY))


def test_local_model_equals_model2vecs_own_loading(tmp_path: Path) -> None:
    from model2vec import StaticModel

    from searcher.embedding.local_static_model import load_local_static_model

    folder = require_shared(REAL_MODEL)
    ours, theirs = load_local_static_model(folder), StaticModel.from_pretrained(folder)
    assert ours is not None
    texts = ["routing tables", "Servo-Alarm äöü", "word " * 2000]
    assert (ours.encode(texts) == theirs.encode(texts)).all()
    assert (ours.config, ours.max_length, ours.normalize, ours.tokenizer.to_str()) == (
        theirs.config, theirs.max_length, theirs.normalize, theirs.tokenizer.to_str(),
    )  # fmt: skip
    # Another layout (sentence-transformers' config name) is left to model2vec.
    assert load_local_static_model(tmp_path) is None
