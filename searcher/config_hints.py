"""Configuration that would otherwise be silently ignored, or refused without a way out:
which file is read when none is named, "did you mean …" for an unknown key, and the
environment variables that look like ours but are not read."""

from __future__ import annotations

import difflib
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, get_args, get_origin

from pydantic import BaseModel

CONFIG_ENV_VAR = "SEARCHER_CONFIG"
DEFAULT_CONFIG_NAME = "searcher.yaml"  # read from the current directory when nothing is named
# Read by the CLI and the test suite rather than by the settings; a user may set them.
OTHER_ENV_VARS = frozenset(
    {
        CONFIG_ENV_VAR,
        "SEARCHER_REMOTE",
        "SEARCHER_API_KEY",
        "SEARCHER_SHARED_DIR",
        "SEARCHER_REQUIRE_SHARED",
        "SEARCHER_REQUIRE_BROWSER",
        "SEARCHER_TEST_SEARXNG_DIR",
        "SEARCHER_TEST_QDRANT_URL",
        "SEARCHER_WHEEL_CACHE",
    }
)
# A variable with one of these prefixes that searcher does not read is most likely a typo
# or a name from another project's documentation (SEARXNG_URL for SEARXNG_BASE_URL).
OUR_PREFIXES = ("SEARCHER_", "SEARXNG_", "BRAVE_")

ConfigOrigin = Literal["--config", "$SEARCHER_CONFIG", "./searcher.yaml"]


@dataclass(frozen=True)
class ConfigFile:
    """The configuration file read, and how it was chosen."""

    path: Path
    origin: ConfigOrigin


def find_config_file(
    given: str | Path | None, environ: Mapping[str, str], cwd: Path | None = None
) -> ConfigFile | None:
    """``--config``, else ``$SEARCHER_CONFIG``, else ``./searcher.yaml`` when it exists,
    else none (built-in defaults and the environment)."""
    if given:
        return ConfigFile(Path(given), "--config")
    if environ.get(CONFIG_ENV_VAR):
        return ConfigFile(Path(environ[CONFIG_ENV_VAR]), "$SEARCHER_CONFIG")
    local = (cwd or Path(os.getcwd())) / DEFAULT_CONFIG_NAME
    if local.is_file():
        return ConfigFile(local, "./searcher.yaml")
    return None


def closest(name: str, known: Iterable[str], cutoff: float = 0.6) -> str | None:
    """The known name ``name`` most likely meant, or None when none is close."""
    candidates = sorted(set(known))
    by_spelling = difflib.get_close_matches(name, candidates, n=1, cutoff=cutoff)
    if by_spelling:
        return by_spelling[0]
    # A unit suffix left off or added (timeout -> timeout_s) reads as far by spelling.
    stems = [c for c in candidates if c.startswith(name + "_") or name.startswith(c + "_")]
    return stems[0] if len(stems) == 1 else None


def _section_model(annotation: Any) -> type[BaseModel] | None:
    """The pydantic model a field holds, looking through ``X | None``."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    if get_origin(annotation) is not None:
        for arg in get_args(annotation):
            found = _section_model(arg)
            if found is not None:
                return found
    return None


def keys_beside(model: type[BaseModel], path: Sequence[str]) -> list[str]:
    """The keys allowed next to the last part of ``path`` (a dotted key split), found by
    walking ``model``'s sections; [] where the walk leaves the models (a mapping)."""
    for part in path[:-1]:
        field = model.model_fields.get(part)
        section = None if field is None else _section_model(field.annotation)
        if section is None:
            return []
        model = section
    return [
        name if field.alias is None else field.alias for name, field in model.model_fields.items()
    ]


def unknown_key_text(model: type[BaseModel], path: Sequence[str]) -> str:
    """ "unknown field", with "did you mean 'x'?" when a key beside it is close."""
    guess = closest(path[-1], keys_beside(model, path)) if path else None
    return "unknown field" + (f" (did you mean {guess!r}?)" if guess else "")


def lookalike_env_vars(environ: Mapping[str, str], read: Iterable[str]) -> list[str]:
    """One line for each set variable that looks like ours (``SEARCHER_*``, ``SEARXNG_*``,
    ``BRAVE_*``) but is not read, with the name it most likely meant."""
    known = set(read) | OTHER_ENV_VARS
    lines = []
    for name in sorted(environ):
        if name in known or not name.startswith(OUR_PREFIXES):
            continue
        # Stricter than for keys: the shared prefix alone makes any two names look alike.
        guess = closest(name, known, cutoff=0.75)
        hint = f" (did you mean {guess}?)" if guess else " (see the configuration reference)"
        lines.append(f"${name} is not a setting searcher reads; it is ignored{hint}")
    return lines
