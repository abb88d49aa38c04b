"""A page's extracted markdown as plain text, for clients that ask for text (Tavily's
``format: "text"``): no heading marks, quote marks, table pipes, fences or link syntax;
list items keep a bullet or their number, table cells are separated by tabs.

markdown-it-py parses (CommonMark, with tables): a page's text can hold characters that
look like markdown, and only a parser tells which are."""

from __future__ import annotations

import functools

from markdown_it import MarkdownIt
from markdown_it.token import Token

_INLINE_TEXT = frozenset({"text", "code_inline", "html_inline"})
_BREAKS = frozenset({"softbreak", "hardbreak"})


@functools.cache
def _parser() -> MarkdownIt:
    return MarkdownIt("commonmark").enable("table")


def plain_text(markdown: str) -> str:
    """``markdown`` as plain text: blocks apart by a blank line, a list's items and a
    table's rows on lines of their own."""
    blocks: list[str] = []
    lists: list[list[int]] = []  # per open list: [is ordered, next number]
    row: list[str] | None = None
    item_prefix = ""
    for token in _parser().parse(markdown):
        kind = token.type
        if kind in ("bullet_list_open", "ordered_list_open"):
            lists.append([kind == "ordered_list_open", int(token.attrs.get("start", 1) or 1)])
        elif kind in ("bullet_list_close", "ordered_list_close"):
            lists.pop()
            if not lists:
                blocks.append("")
        elif kind == "list_item_open":
            ordered, number = lists[-1]
            item_prefix = "  " * (len(lists) - 1) + (f"{number}. " if ordered else "- ")
            lists[-1][1] = number + 1
        elif kind == "tr_open":
            row = []
        elif kind == "tr_close" and row is not None:
            blocks.append("\t".join(row))
            row = None
        elif kind == "table_close":
            blocks.append("")
        elif kind == "inline":
            text = _inline(token)
            if row is not None:
                row.append(text)
            elif lists:
                indent = "  " * len(lists)
                blocks.append(item_prefix + text.replace("\n", "\n" + indent))
                item_prefix = "  " * len(lists)
            else:
                blocks += [text, ""]
        elif kind in ("fence", "code_block"):
            blocks += [token.content.rstrip("\n"), ""]
    return "\n".join(blocks).strip()


def _inline(token: Token) -> str:
    parts = []
    for child in token.children or []:
        if child.type in _INLINE_TEXT:
            parts.append(child.content)
        elif child.type in _BREAKS:
            parts.append("\n")
        elif child.type == "image":
            parts.append(child.content)  # its alt text
    return "".join(parts)
