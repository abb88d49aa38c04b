"""Which paths may be indexed: with ``corpus.roots`` configured, only paths inside one of
them (after symlinks are resolved; a ``..`` in the path named is refused outright); with
no roots, any path the user of the CLI names (they could read it anyway)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from searcher.errors import SearcherError


class PathRefused(SearcherError):
    """A path that may not be indexed, or does not exist; the message names it."""


class PathMissing(PathRefused):
    """A path that does not exist (``path``: where it would be, inside the roots): what a
    collection indexed under it was deleted, if it indexed any."""

    def __init__(self, message: str, path: Path) -> None:
        super().__init__(message)
        self.path = path


def resolved_roots(roots: Sequence[str]) -> tuple[Path, ...]:
    """The configured roots, with ``~`` expanded and symlinks resolved."""
    return tuple(Path(root).expanduser().resolve() for root in roots)


def allowed_path(named: str, roots: Sequence[Path]) -> Path:
    """The real path of ``named``, checked against ``roots`` (empty: any). Raises
    ``PathRefused`` saying why."""
    path = Path(named).expanduser()
    if roots and ".." in path.parts:
        raise PathRefused(f"{named}: '..' is not allowed in a path to index")
    try:
        real = path.resolve(strict=True)
    except FileNotFoundError:
        where = path.resolve()
        if roots and not within(where, roots):
            listed = ", ".join(str(r) for r in roots)
            raise PathRefused(f"{named}: outside corpus.roots ({listed})") from None
        raise PathMissing(f"{named}: no such file or folder", where) from None
    except (OSError, RuntimeError) as exc:  # RuntimeError: a symlink loop (Python < 3.13)
        raise PathRefused(f"{named}: cannot be resolved ({exc})") from None
    if roots and not within(real, roots):
        listed = ", ".join(str(r) for r in roots)
        raise PathRefused(f"{named}: outside corpus.roots ({listed})")
    return real


def within(path: Path, roots: Sequence[Path]) -> bool:
    """Whether ``path`` (resolved) is one of ``roots`` or inside one; with no roots, yes."""
    return not roots or any(path == root or path.is_relative_to(root) for root in roots)
