"""The configuration reference (docs/configuration.md) is generated from config.py: a
stale file, an undocumented variable or key, fails here."""

import re
import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import BaseModel

from searcher.backends.registry import BUILTIN_SPECS
from searcher.config import ENV_VARS, LEGACY_INSTANCES, Settings
from searcher.config_reference import BEGIN, DOCUMENT, END, regenerated

ROOT = Path(__file__).resolve().parents[1]


def _leaf_keys(model, prefix=""):
    for name, field in model.model_fields.items():
        annotation = field.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            yield from _leaf_keys(annotation, f"{prefix}{name}.")
        else:
            yield f"{prefix}{name}"


def test_the_reference_is_generated_from_config_py():
    current = DOCUMENT.read_text(encoding="utf-8")
    assert regenerated(current) == current, "run: python -m searcher.config_reference"


def test_the_reference_documents_every_variable_and_key():
    reference = DOCUMENT.read_text(encoding="utf-8")
    table = reference.split(BEGIN)[1].split(END)[0]
    for var in ENV_VARS:
        assert f"`{var}`" in table, var
    adapters = {spec.adapter: spec.config_model for spec in BUILTIN_SPECS}
    for key in _leaf_keys(Settings):
        parts = key.split(".")
        if parts[0] == "backends" and parts[1] in LEGACY_INSTANCES:
            if parts[2] not in adapters[parts[1]].model_fields:
                continue  # a key this adapter refuses (DuckDuckGo's base_url)
            generic = "backends.<name>." + ".".join(parts[2:])
        else:
            generic = re.sub(r"^llm\.steps\.\w+\.", "llm.steps.<step>.", key)
        assert f"`{key}`" in table or f"`{generic}`" in table, key
    assert "`SEARCHER_CONFIG`" in reference


def test_the_readme_links_the_reference_and_fits_a_few_screens():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) <= 250
    for link in re.findall(r"\]\((docs/[^)#]+)", readme):
        assert (ROOT / link).is_file(), link


@pytest.mark.parametrize(
    "name", ["README.md", *sorted(p.name for p in (ROOT / "docs").glob("*.md"))]
)
def test_every_code_block_of_the_docs_is_closed(name):
    """An unclosed fence turns the rest of the page into one code block when rendered."""
    path = ROOT / name if name == "README.md" else ROOT / "docs" / name
    fences = [line for line in path.read_text(encoding="utf-8").splitlines()
              if line.lstrip().startswith("```")]  # fmt: skip
    assert len(fences) % 2 == 0, f"{name}: {len(fences)} fence lines, one block left open"


def test_check_fails_on_a_stale_copy_and_passes_on_a_fresh_one(tmp_path):
    fresh = tmp_path / "configuration.md"
    fresh.write_text(DOCUMENT.read_text(encoding="utf-8"), encoding="utf-8")
    stale = tmp_path / "stale.md"
    stale.write_text(
        fresh.read_text(encoding="utf-8").replace("`budget.max_results`", "`budget.results`"),
        encoding="utf-8",
    )
    command = [sys.executable, "-m", "searcher.config_reference", "--check", "--path"]
    assert subprocess.run([*command, str(fresh)], capture_output=True).returncode == 0
    failed = subprocess.run([*command, str(stale)], capture_output=True, text=True)
    assert failed.returncode == 1
    assert "stale" in failed.stderr
    subprocess.run([*command[:-2], "--path", str(stale)], check=True)  # regenerates it
    assert stale.read_text(encoding="utf-8") == fresh.read_text(encoding="utf-8")
