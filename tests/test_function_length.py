"""No function in searcher/ is longer than 80 lines (issue 26): a longer one is several
steps that want names of their own. Counted from the ``def`` line to the last line,
docstring and comments included."""

from __future__ import annotations

import ast
from pathlib import Path

import searcher

MAX_LINES = 80
PACKAGE = Path(searcher.__file__).parent


def long_functions(root: Path, limit: int = MAX_LINES) -> list[str]:
    """``path:line name (n lines)`` for every function under ``root`` longer than
    ``limit`` lines."""
    found = []
    for path in sorted(root.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                if lines > limit:
                    where = path.relative_to(root.parent)
                    found.append(f"{where}:{node.lineno} {node.name} ({lines} lines)")
    return found


def test_no_function_in_searcher_is_longer_than_80_lines() -> None:
    assert long_functions(PACKAGE) == []


def test_the_count_sees_a_long_function(tmp_path: Path) -> None:
    body = "\n".join(f"    x{n} = {n}" for n in range(80))
    (tmp_path / "long.py").write_text(f"async def long():\n{body}\n")
    (tmp_path / "short.py").write_text("def short():\n    return 1\n")
    assert long_functions(tmp_path) == [f"{tmp_path.name}/long.py:1 long (81 lines)"]
