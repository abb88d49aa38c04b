"""Web text made safe to show in a context pack, whatever it holds.

A pack's frame (its markers, ``Rules:``, the item heads) must be the only text at column 0
that looks like one. Web text is cleaned here before the layout (``layout.py``) places it:
controls and invisible format characters removed (the joiners and the tags of a
subdivision flag kept, as emoji and Persian or Indic words need them), line breaks
unified, every pack-marker look-alike (accented, full-width, Greek or Cyrillic twins,
hidden behind invisible characters) defused by replacing its bracket, URLs
percent-encoded instead of cut apart, cuts made between whole characters, and the query
echoed as a JSON string. All of it is frozen at Unicode 14, so the same text gives the
same bytes on every Python version.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable, Sequence
from urllib.parse import quote

from searcher.backends.normalise import OTHER_SPACES, fold_spaces

ELLIPSIS = "…"
MAX_URL_CHARS = 2048  # a URL is cut here, escapes counted, never inside one

# --- character classes ------------------------------------------------------------------

# Unicode "Cf" (format: zero-width, bidi overrides, BOM, tags), frozen at Unicode 14 so the
# output does not change with the Python version. Invisible, and able to hide a marker.
# The zero-width joiner and non-joiner (U+200C, U+200D) are not in it: they are part of
# how emoji sequences and Persian or Indic words are written, and the marker pattern
# looks through them (see _JOINERS).
_FORMAT_RANGES: tuple[tuple[int, int], ...] = (
    (0x00AD, 0x00AD), (0x0600, 0x0605), (0x061C, 0x061C), (0x06DD, 0x06DD),
    (0x070F, 0x070F), (0x0890, 0x0891), (0x08E2, 0x08E2), (0x180E, 0x180E),
    (0x200B, 0x200B), (0x200E, 0x200F), (0x202A, 0x202E), (0x2060, 0x2064), (0x2066, 0x206F),
    (0xFEFF, 0xFEFF), (0xFFF9, 0xFFFB), (0x110BD, 0x110BD), (0x110CD, 0x110CD),
    (0x13430, 0x13438), (0x1BCA0, 0x1BCA3), (0x1D173, 0x1D17A), (0xE0001, 0xE0001),
    (0xE0020, 0xE007F),
)  # fmt: skip
# Everything str.splitlines() treats as a line break, besides "\n" and "\r\n".
_LINE_BREAKS = "\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"


def _build_table() -> dict[int, str | None]:
    """str.translate table: line breaks -> "\\n", other controls, format characters and lone
    surrogates -> removed, unit separator -> space. Tab and "\\n" are kept."""
    table: dict[int, str | None] = {}
    for code in [*range(0x00, 0x20), *range(0x7F, 0xA0)]:
        table[code] = None
    for lo, hi in _FORMAT_RANGES:
        for code in range(lo, hi + 1):
            table[code] = None
    for code in range(0xD800, 0xE000):  # lone surrogates cannot be encoded as UTF-8
        table[code] = None
    for ch in _LINE_BREAKS:
        table[ord(ch)] = "\n"
    table[ord("\x1f")] = " "
    del table[ord("\t")], table[ord("\n")]
    return table


_TABLE = _build_table()


def _table_class(codes: Sequence[int]) -> str:
    """A regex character class matching exactly the code points in ``codes`` (sorted)."""
    ranges: list[list[int]] = []
    for code in codes:
        if ranges and code == ranges[-1][1] + 1:
            ranges[-1][1] = code
        else:
            ranges.append([code, code])
    return "[" + "".join(f"\\U{lo:08x}-\\U{hi:08x}" for lo, hi in ranges) + "]"


# str.translate with a dict looks up every character; most text holds none of the table's.
# Classes of BMP characters only are fast in the re engine, so the rare astral ones are
# looked for only in text that has an astral character at all.
_SPECIAL_BMP_RE = re.compile(_table_class(sorted(c for c in _TABLE if c < 0x10000)))
_SPECIAL_ASTRAL_RE = re.compile(_table_class(sorted(c for c in _TABLE if c >= 0x10000)))
_ASTRAL_RE = re.compile("[\\U00010000-\\U0010ffff]")


# An emoji tag sequence (the flags of England, Scotland, Wales): a black flag, a
# subdivision code of 2-6 tag letters or digits, a cancel tag. Too short to smuggle words
# in, so it is kept whole; every other tag character is removed (tags can hide text).
_EMOJI_TAG_RE = re.compile("\U0001f3f4[\U000e0030-\U000e0039\U000e0061-\U000e007a]{2,6}\U000e007f")


def translate(text: str) -> str:
    """``text.translate(_TABLE)`` except inside emoji tag sequences, skipped (the same
    result) when no character is in the table."""
    special = _SPECIAL_BMP_RE.search(text) or (
        _ASTRAL_RE.search(text) and _SPECIAL_ASTRAL_RE.search(text)
    )
    if not special:
        return text
    if "\U0001f3f4" not in text:
        return text.translate(_TABLE)
    parts, at = [], 0
    for match in _EMOJI_TAG_RE.finditer(text):
        parts += [text[at : match.start()].translate(_TABLE), match.group()]
        at = match.end()
    parts.append(text[at:].translate(_TABLE))
    return "".join(parts)


# Marker look-alikes, found by one compiled regex (no per-bracket Python work, so pages
# full of markdown links cost nothing extra): a left-bracket look-alike, optional slash,
# then CONTEXT and PACK where every letter may be any case, accented, full-width,
# mathematical, circled, or its Greek / Cyrillic twin, with separators and whitespace in
# between. Only the bracket is replaced, so the text stays readable.
_BRACKETS = "[［﹇⁅⟦〚【〔〘⦋⦍⦏❲﹝⌈⌊⎡⎣"
_SLASHES = "/\\／＼∕⁄⧸╱∖⧹﹨"
_SEPARATORS = "_\\-.＿－﹍﹎﹏︳︴﹣"
# Joiners are kept in the text (see _FORMAT_RANGES) and invisible: the pattern allows
# them wherever it allows a combining mark or whitespace. So are the other characters
# Unicode says render as nothing (Default_Ignorable_Code_Point, those the table keeps:
# variation selectors, which emoji need, fillers, Mongolian and Khmer marks) and blanks
# that are no whitespace to Python (Hangul fillers, the braille blank).
_JOINERS = "\u200c\u200d"
_INVISIBLE = (
    "\u115f\u1160\u17b4\u17b5\u180b-\u180f\u2800\u3164\ufe00-\ufe0f\uffa0\ufff0-\ufff8"
    "\U000e0100-\U000e01ef"
)
_UNSEEN = _JOINERS + _INVISIBLE
_COMBINING = "\u0300-\u036f\u1ab0-\u1aff\u1dc0-\u1dff\u20d0-\u20ff\ufe20-\ufe2f" + _UNSEEN
_TWINS = {  # Cyrillic, Greek, Coptic and Cherokee letters that look Latin
    "a": "аАΑᎪ", "c": "сСϲϹⲤⲥᏟ", "e": "еЕΕᎬ", "k": "кКΚⲔᏦ", "n": "ΝⲚ",
    "o": "оОοΟⲞⲟ", "p": "рРρΡⲢⲣᏢ", "t": "тТΤⲦᎢ", "x": "хХχΧⲬⲭ",
}  # fmt: skip
# Blocks holding Latin letter variants (accented, modifier, letter-like, enclosed,
# full-width, mathematical); their compatibility decompositions are frozen by Unicode.
_VARIANT_BLOCKS = (
    (0x00C0, 0x0250), (0x1D00, 0x1DC0), (0x1E00, 0x1F00), (0x2100, 0x2500),
    (0xFF00, 0xFFF0), (0x1D400, 0x1D800), (0x1F100, 0x1F200),
)  # fmt: skip


def _letter_variants() -> dict[str, str]:
    """For each letter of "contextpack": every character that reads as that letter."""
    variants = {letter: letter + letter.upper() + _TWINS[letter] for letter in _TWINS}
    for lo, hi in _VARIANT_BLOCKS:
        for code in range(lo, hi):
            decomposed = unicodedata.normalize("NFKD", chr(code))
            base = "".join(ch for ch in decomposed if not unicodedata.combining(ch)).lower()
            if base in variants:
                variants[base] += chr(code)
    return variants


def _marker_pattern() -> re.Pattern[str]:
    """The compiled marker look-alike pattern (every repeat bounded, see _WINDOW_MARGIN)."""
    variants = _letter_variants()

    def word(text: str) -> str:
        return "".join(f"[{re.escape(variants[c])}][{_COMBINING}]{{0,8}}" for c in text)

    return re.compile(
        f"[{re.escape(_BRACKETS)}][\\s{_UNSEEN}]{{0,64}}[{re.escape(_SLASHES)}]?"
        f"[\\s{_UNSEEN}]{{0,64}}{word('context')}[\\s{_SEPARATORS}{_UNSEEN}]{{0,16}}"
        f"{word('pack')}"
    )


_MARKER_RE = _marker_pattern()
# Most web text holds none of the bracket characters; one cheap scan skips the big pattern.
_ANY_BRACKET_RE = re.compile(f"[{re.escape(_BRACKETS)}]")
# Anything fold or _neutralise would change: a table character, whitespace but the space,
# a marker bracket, or any astral character (the table's astral ones are looked for later).
_UNPLAIN_RE = re.compile(
    _table_class(
        sorted({c for c in _TABLE if c < 0x10000} | set(map(ord, OTHER_SPACES + _BRACKETS)))
    )[:-1]
    + "\\U00010000-\\U0010ffff]"
)


def _neutralise(text: str, bracket: Callable[[str], str] = lambda _: "(") -> str:
    """Replace the opening bracket of every marker look-alike (with "(" by default, which
    keeps every offset and line as it was)."""
    if _ANY_BRACKET_RE.search(text) is None:
        return text
    return _MARKER_RE.sub(lambda m: bracket(m.group()[0]) + m.group()[1:], text)


def neutralise_markers(text: str) -> str:
    """``text`` with every pack-marker look-alike defused (its bracket made "("), as web
    text is in a pack: for text that is not web text but may end up in a pack, such as an
    LLM's answer."""
    return _neutralise(text)


def _extends(ch: str) -> bool:
    """True for a character that belongs to the one before it: a combining mark, a joiner,
    a variation selector, a skin-tone modifier or a tag character."""
    code = ord(ch)
    return (
        unicodedata.category(ch) in ("Mn", "Mc", "Me")
        or code in (0x200C, 0x200D)
        or 0xFE00 <= code <= 0xFE0F
        or 0x1F3FB <= code <= 0x1F3FF
        or 0xE0020 <= code <= 0xE007F
    )


def _is_regional(ch: str) -> bool:
    """True for a regional indicator letter (two of them make a flag)."""
    return 0x1F1E6 <= ord(ch) <= 0x1F1FF


def grapheme_cut(text: str, at: int) -> int:
    """``at``, moved back if need be so that ``text[:at]`` splits no character made of
    several code points: never before a combining mark, modifier or joiner, never after a
    joiner, never between the two regional indicators of a flag."""
    at = min(at, len(text))
    while 0 < at < len(text) and (_extends(text[at]) or text[at - 1] == "\u200d"):
        at -= 1
    if 0 < at < len(text) and _is_regional(text[at]):
        run = 0  # regional indicators pair up from the start of their run
        while run < at and _is_regional(text[at - 1 - run]):
            run += 1
        at -= run % 2
    return at


def fold(raw: str, cap: int) -> tuple[str, bool, bool]:
    """Clean a bounded window of ``raw`` onto one line; True when text was left out, and
    True when it holds no marker bracket (nothing to neutralise)."""
    # The window bounds the work on a multi-megabyte hostile field.
    window = raw[: 4 * cap + 64]
    if "  " in window or _UNPLAIN_RE.search(window):
        text = fold_spaces(translate(window)).strip()
        plain = False
    else:  # most fields: nothing to translate, fold or neutralise, found in one look
        text, plain = window.strip(), True
    return text, len(window) < len(raw) or len(text) > cap, plain


# Invisible characters a URL may hold: what _TABLE deletes (controls, format and tag
# characters, lone surrogates) and the joiners. In a URL they are percent-encoded instead,
# so the URL shown stays the same URL ("pa\u200bth" is not "path").
_URL_HIDDEN = frozenset([*(c for c, v in _TABLE.items() if v is None), *map(ord, _JOINERS)])
_URL_HIDDEN_RE = re.compile(_table_class(sorted(_URL_HIDDEN)))
# The escape of a UTF-8 continuation byte: a cut just before it would split a character.
_CONTINUATION_RE = re.compile("%[89ABab][0-9A-Fa-f]")


def _url_escape(ch: str) -> str:
    """``ch`` percent-encoded as UTF-8 (a lone surrogate as its own three bytes)."""
    return quote(ch.encode("utf-8", "surrogatepass"), safe="")


def cut_url(url: str, limit: int) -> str:
    """``url`` cut to at most ``limit`` characters with ``…`` (a URL has no word boundary):
    never inside a ``%XX`` escape, between the escapes of one UTF-8 character, or inside a
    character made of several code points. The head (scheme, host, path) is what stays."""
    at = grapheme_cut(url, limit - len(ELLIPSIS))
    while at > 0:
        escape = url.rfind("%", max(at - 2, 0), at)
        if escape >= 0:
            at = escape
        elif _CONTINUATION_RE.match(url, at):
            at -= 1  # then onto the "%" of the escape before it
        else:
            break
    return url[:at] + ELLIPSIS


def clean_url(raw: str) -> str:
    """A URL on one line: invisible characters and marker brackets percent-encoded, never
    deleted; whitespace and line breaks folded to one ``%20``; then cut to
    ``MAX_URL_CHARS`` (escapes counted) with ``…`` if longer."""
    if (
        len(raw) <= MAX_URL_CHARS
        and raw.isascii()
        and raw.isprintable()
        and " " not in raw
        and "[" not in raw
    ):
        return raw  # nearly every URL: escaped_url would not change it (tested)
    return escaped_url(raw)


def escaped_url(raw: str) -> str:
    window = raw[: 4 * MAX_URL_CHARS + 64]
    text = window
    brackets = _marker_brackets(text) if _ANY_BRACKET_RE.search(text) else set()
    if brackets or _URL_HIDDEN_RE.search(text):
        text = "".join(
            _url_escape(ch) if i in brackets or ord(ch) in _URL_HIDDEN else ch
            for i, ch in enumerate(text)
        )
    text = fold_spaces(translate(text)).strip().replace(" ", "%20")
    if len(text) > MAX_URL_CHARS or len(window) < len(raw):
        text = cut_url(text, MAX_URL_CHARS)
    return text


_JSON_ESCAPES = {'"': '\\"', "\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t"}
_JSON_ESCAPES.update({"\b": "\\b", "\f": "\\f"})


def _u_escape(ch: str) -> str:
    """JSON ``\\uXXXX`` escape of one character (a surrogate pair beyond the BMP)."""
    code = ord(ch)
    if code <= 0xFFFF:
        return f"\\u{code:04x}"
    code -= 0x10000
    return f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}"


def _marker_brackets(text: str) -> set[int]:
    """Indices in ``text`` of brackets that open a marker look-alike, looking through the
    invisible characters that _TABLE would drop."""
    visible = [i for i, ch in enumerate(text) if _TABLE.get(ord(ch), ch) is not None]
    shadow = "".join(text[i] for i in visible)
    return {visible[m.start()] for m in _MARKER_RE.finditer(shadow)}


def quoted_query(query: str) -> str:
    """The query as a JSON string on one line: quotes, backslashes and every control,
    format, line-separator or marker-bracket character escaped, so ``json.loads`` of the
    echo gives back the exact query."""
    brackets = _marker_brackets(query)
    out = []
    for i, ch in enumerate(query):
        if ch in _JSON_ESCAPES:
            out.append(_JSON_ESCAPES[ch])
        elif i in brackets or ord(ch) in _TABLE:
            out.append(_u_escape(ch))
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'
