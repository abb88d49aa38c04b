"""A document cut into chunks: never across a heading or a PDF page, at paragraph
boundaries, each about ``max_chars`` long; a paragraph longer than that is cut at sentence
ends (or spaces) so that no chunk is much longer."""

from __future__ import annotations

import re
from dataclasses import dataclass

from searcher.corpus.readers import Document

_PARAGRAPH_BREAK = re.compile(r"\n\s*\n")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


@dataclass(frozen=True)
class Chunk:
    """One searchable piece of a document: its place (``ordinal``, 0-based, in reading
    order) and anchors (the heading above it, its PDF page)."""

    ordinal: int
    text: str
    heading: str | None = None
    page: int | None = None


def chunk_document(document: Document, max_chars: int) -> list[Chunk]:
    """The chunks of ``document``, in reading order."""
    chunks: list[Chunk] = []
    for section in document.sections:
        for text in _pieces(section.text, max_chars):
            chunks.append(Chunk(len(chunks), text, section.heading, section.page))
    return chunks


def _pieces(text: str, max_chars: int) -> list[str]:
    """Paragraphs of ``text`` joined while they fit in ``max_chars``."""
    pieces: list[str] = []
    current = ""
    for paragraph in _paragraphs(text, max_chars):
        if current and len(current) + 2 + len(paragraph) > max_chars:
            pieces.append(current)
            current = ""
        current = f"{current}\n\n{paragraph}" if current else paragraph
    if current:
        pieces.append(current)
    return pieces


def _paragraphs(text: str, max_chars: int) -> list[str]:
    """The paragraphs of ``text``, those over ``max_chars`` cut into parts that fit."""
    out: list[str] = []
    for paragraph in _PARAGRAPH_BREAK.split(text):
        paragraph = paragraph.strip()
        if not paragraph:
            continue
        if len(paragraph) <= max_chars:
            out.append(paragraph)
            continue
        out.extend(_cut_long(paragraph, max_chars))
    return out


def _cut_at_spaces(text: str, max_chars: int) -> tuple[list[str], str]:
    """Pieces of ``text``, longer than ``max_chars``, of at most ``max_chars`` each: cut
    at the last space of each (at ``max_chars`` when that is in its first half), stripped;
    and the stripped rest, which fits. By offsets: cutting the rest off again and again
    copied it for every piece, minutes for a log of 16 MB on one line."""
    heads: list[str] = []
    start, end, stripped_end = 0, len(text), len(text.rstrip())
    while end - start > max_chars:
        space = text.rfind(" ", start, start + max_chars)
        cut = space - start if space - start > max_chars // 2 else max_chars
        heads.append(text[start : start + cut].strip())
        start, end = start + cut, stripped_end
        while start < end and text[start].isspace():
            start += 1
    return heads, text[start:end]


def _cut_long(paragraph: str, max_chars: int) -> list[str]:
    parts: list[str] = []
    current = ""
    for sentence in _SENTENCE_END.split(paragraph):
        if len(sentence) > max_chars:  # one "sentence" longer than a chunk: cut at spaces
            heads, sentence = _cut_at_spaces(sentence, max_chars)
            if current:
                parts.append(current)
                current = ""
            parts += heads
        if current and len(current) + 1 + len(sentence) > max_chars:
            parts.append(current)
            current = ""
        current = f"{current} {sentence}" if current else sentence
    if current:
        parts.append(current)
    return [p for p in parts if p]
