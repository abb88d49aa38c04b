"""The pure halves of each backend: request building and response parsing."""

import json
import re
from datetime import UTC, datetime, timedelta, timezone
from urllib.parse import quote, urlsplit

import pytest
from hypothesis import given
from hypothesis import strategies as st

from searcher.backends import brave, duckduckgo, normalise, searxng
from searcher.backends.base import BackendQuery
from searcher.errors import BackendBadResponse, EnginesUnresponsive

JSON = {"content-type": "application/json"}


def searxng_body(results, unresponsive=()):
    # Current SearXNG releases leave out number_of_results; so does this recorded shape.
    return json.dumps(
        {"query": "q", "results": results, "answers": [], "corrections": [], "infoboxes": [],
         "suggestions": [], "unresponsive_engines": [list(p) for p in unresponsive]}
    ).encode()  # fmt: skip


def test_searxng_request_passes_every_supported_parameter():
    query = BackendQuery(
        "bm25 ranking", lang="de", pageno=2, time_range="month", safesearch=2,
        engines=("google", "bing"), categories=("science",),
    )  # fmt: skip
    parts = searxng.build_request("http://sx.local/base/", query)
    assert parts.url == "http://sx.local/base/search"
    assert parts.params == {
        "q": "bm25 ranking", "format": "json", "pageno": "2", "language": "de",
        "categories": "science", "engines": "google,bing", "time_range": "month", "safesearch": "2",
    }  # fmt: skip


def test_searxng_normalises_results():
    body = searxng_body(
        [
            {"url": "https://a.example/x", "title": "A <b>title</b>", "content": "snip &amp; more",
             "engine": "bing", "engines": ["bing", "google"], "positions": [1, 3], "score": 2.5,
             "category": "general", "publishedDate": "2024-05-01T10:00:00+02:00"},
            {"url": "https://b.example/", "title": "", "content": None, "engine": "google",
             "publishedDate": None},
            {"title": "no url at all"},
            {"url": "javascript:alert(1)", "title": "not http"},
        ]
    )  # fmt: skip
    answer = searxng.parse_response(200, JSON, body)
    assert [h.url for h in answer.hits] == ["https://a.example/x", "https://b.example/"]
    first, second = answer.hits
    assert first.title == "A title" and first.snippet == "snip & more"
    assert first.engines == ("bing", "google") and first.positions == (1, 3)
    assert first.score == 2.5 and first.category == "general"
    assert first.published == "2024-05-01T08:00:00Z"
    assert second.title == "https://b.example/" and second.snippet == ""
    assert second.engines == ("google",) and second.score is None and second.published is None


@pytest.mark.parametrize(
    ("sent", "kept"),
    [
        ("2024-05-01", "2024-05-01T00:00:00Z"),
        ("2024-05-01T23:30:00-01:00", "2024-05-02T00:30:00Z"),
        ("0001-01-01T00:30:00+01:00", None),  # before year 1 in UTC: no date, not a crash
        ("9999-12-31T23:30:00-01:00", None),  # after year 9999 in UTC
        ("yesterday", None),
    ],
)
def test_searxng_dates_become_utc_or_nothing(sent, kept):
    body = searxng_body([{"url": "https://a.example/", "engine": "bing", "publishedDate": sent}])
    assert searxng.parse_response(200, JSON, body).hits[0].published == kept


def test_searxng_zero_results_with_unresponsive_engines_is_a_failure():
    body = searxng_body([], unresponsive=[("google", "timeout"), ("bing", "CAPTCHA")])
    with pytest.raises(EnginesUnresponsive) as info:
        searxng.parse_response(200, JSON, body)
    assert info.value.engines == [("google", "timeout"), ("bing", "CAPTCHA")]
    assert "google (timeout)" in info.value.reason


def test_searxng_some_unresponsive_engines_are_warnings():
    body = searxng_body([{"url": "https://a.example/", "title": "A"}], [("google", "timeout")])
    answer = searxng.parse_response(200, JSON, body)
    assert len(answer.hits) == 1
    assert answer.warnings == ["engine google unresponsive: timeout"]


def test_searxng_unresponsive_entries_without_an_engine_name_are_left_out():
    body = json.dumps(
        {"results": [{"url": "https://a.example/", "title": "A"}],
         "unresponsive_engines": [[None, None], [3, "x"], ["bing", None], ["google", "timeout"],
                                  "odd", []]}
    ).encode()  # fmt: skip
    answer = searxng.parse_response(200, JSON, body)
    assert answer.warnings == [
        "engine bing unresponsive: unresponsive",
        "engine google unresponsive: timeout",
    ]


def test_searxng_zero_results_and_no_failures_is_an_empty_answer():
    assert searxng.parse_response(200, JSON, searxng_body([])).hits == []


@pytest.mark.parametrize("body", [b"<html>oops</html>", b"{not json", b"[1, 2]", b""])
def test_searxng_garbage_is_a_bad_response(body):
    with pytest.raises(BackendBadResponse):
        searxng.parse_response(200, {"content-type": "text/html"}, body)


def test_brave_request_maps_language_time_and_safesearch():
    query = BackendQuery(
        "q", max_results=50, lang="en-GB", pageno=3, time_range="week", safesearch=0
    )
    parts = brave.build_request("https://brave.local", "k3y", query)
    assert parts.url == "https://brave.local/res/v1/web/search"
    assert parts.headers["X-Subscription-Token"] == "k3y"
    assert parts.params == {
        "q": "q", "count": "20", "offset": "2", "search_lang": "en", "freshness": "pw",
        "safesearch": "off",
    }  # fmt: skip


def test_brave_never_asks_for_a_page_it_does_not_serve():
    # Brave refuses offsets above 9 (422): page 11 and later are asked as page 10.
    for pageno, offset in [(1, "0"), (10, "9"), (11, "9"), (50, "9")]:
        parts = brave.build_request("https://brave.local", "k", BackendQuery("q", pageno=pageno))
        assert parts.params["offset"] == offset
    assert brave.CAPABILITIES.max_pageno == brave.MAX_PAGENO == 10


def test_brave_parses_results_and_strips_markup():
    body = json.dumps(
        {"type": "search", "web": {"results": [
            {"title": "T &amp; <strong>U</strong>", "url": "https://t.example/",
             "page_age": "2024-01-02T03:04:05", "description": "the <strong>best</strong> one"},
            {"title": "no url"},
        ]}}
    ).encode()  # fmt: skip
    answer = brave.parse_response(200, JSON, body)
    assert len(answer.hits) == 1
    hit = answer.hits[0]
    assert (hit.title, hit.snippet, hit.published) == (
        "T & U",
        "the best one",
        "2024-01-02T03:04:05Z",
    )


def test_brave_without_web_section_means_no_results():
    assert brave.parse_response(200, JSON, b'{"type": "search", "query": {}}').hits == []


@pytest.mark.parametrize(
    ("lang", "region"),
    [(None, "wt-wt"), ("en", "us-en"), ("de", "de-de"), ("en-GB", "uk-en"), ("pt_BR", "br-pt"),
     ("xx", "wt-wt")],
)  # fmt: skip
def test_duckduckgo_region(lang, region):
    assert duckduckgo.region_for(lang) == region


def test_duckduckgo_kwargs_map_time_range_and_safesearch():
    kwargs = duckduckgo.search_kwargs(
        BackendQuery("q", max_results=7, time_range="day", safesearch=2)
    )
    assert kwargs == {
        "region": "wt-wt", "safesearch": "on", "max_results": 7, "backend": "duckduckgo",
        "timelimit": "d",
    }  # fmt: skip


def test_duckduckgo_rows_become_hits():
    rows = [
        {"title": "A", "href": "https://a.example/", "body": "x <b>y</b>"},
        {"title": "no href"},
    ]
    hits = duckduckgo.parse_results(rows)
    assert [(h.url, h.title, h.snippet, h.backend) for h in hits] == [
        ("https://a.example/", "A", "x y", "duckduckgo")
    ]
    with pytest.raises(BackendBadResponse):
        duckduckgo.parse_results({"not": "a list"})


def test_searxng_engines_are_read_as_a_list_and_bounded():
    many = [f"e{i}" for i in range(100)]
    body = {
        "results": [
            {"url": "https://e.org/1", "engines": many, "positions": list(range(1, 101))},
            {"url": "https://e.org/2", "engines": "google", "positions": "1"},
        ]
    }
    hits = searxng.parse_response(200, {}, json.dumps(body).encode()).hits
    assert len(hits[0].engines) == 64 and set(hits[0].engines) == set(many[:64])
    assert hits[1].engines == () and hits[1].positions == ()


# --- normalise's shortcuts against the plain formulas ------------------------------------

_SPACES_AND_MORE = st.text(
    alphabet=st.sampled_from(
        list("ab .-<>&;") + list(normalise.OTHER_SPACES)
        + ["\x00", "\x07", "\u200b", "\u00ad", "é", "’", "\U0001f600"]
    )
) | st.text()  # fmt: skip


@given(_SPACES_AND_MORE)
def test_fold_spaces_is_the_plain_substitution(text):
    # The printable test stands for "no whitespace but the plain space".
    assert normalise.fold_spaces(text) == re.sub(r"\s+", " ", text)


def _plain_iso_utc(value: str) -> str | None:
    """iso_utc as first written: parse, convert to UTC, spell every field out."""
    text = value.strip()
    text = text[:-1] + "+00:00" if text.endswith("Z") else text
    try:
        m = datetime.fromisoformat(text)
        m = m.astimezone(UTC) if m.tzinfo is not None else m
    except (ValueError, OverflowError):
        return None
    return f"{m.year}-{m.month:02d}-{m.day:02d}T{m.hour:02d}:{m.minute:02d}:{m.second:02d}Z"


_OFFSETS = st.none() | st.builds(
    timezone, st.timedeltas(min_value=timedelta(hours=-23, minutes=-59),
                            max_value=timedelta(hours=23, minutes=59))
)  # fmt: skip


@given(
    st.datetimes(timezones=_OFFSETS),
    st.sampled_from(["T", " "]),
    st.sampled_from(["auto", "seconds", "milliseconds", "microseconds"]),
    st.sampled_from(["", "Z"]),
)
def test_iso_utc_is_the_plain_formula(moment, sep, timespec, zulu):
    text = moment.isoformat(sep, timespec)
    if zulu and moment.tzinfo is None:
        text += zulu
    assert normalise.iso_utc(text) == _plain_iso_utc(text)


@pytest.mark.parametrize(
    "value", ["0999-01-02T03:04:05", "0001-01-01T00:30:00+00:30", "0001-01-01T00:00:00+01:00"]
)
def test_iso_utc_years_before_1000_are_unpadded(value):
    assert normalise.iso_utc(value) == _plain_iso_utc(value)


def _plain_http_url(value: str) -> str | None:
    """http_url as first written: every URL's netloc read through urlsplit."""
    if not value.startswith(("http://", "https://")):
        return None
    url = value.strip().translate(str.maketrans("", "", "\t\n\r"))
    url = "".join(c if c.isprintable() and c != " " else quote(c, safe="") for c in url)
    try:
        parts = urlsplit(url)
        plain = re.fullmatch(r"[^:\[\]@]+(?::(\d{1,5}))?", parts.netloc)
        if plain is not None:
            return url if plain[1] is None or 0 < int(plain[1]) <= 65535 else None
        usable = bool(parts.hostname) and (parts.port is None or parts.port > 0)
    except ValueError:
        return None
    return url if usable else None


_HOST_PIECES = st.sampled_from(
    ["a", "b.c", "-", "é", "u@", "\u2100", "\uff0f", "\ufe13", "x:y@", "[::1]", "[", "]", "\\", " ",
     "\t", "%20", "\u200b"]
)  # fmt: skip
_PORTS = st.sampled_from(["", ":", ":0", ":80", ":65535", ":65536", ":123456", ":١٢", ":8a"])
_TAILS = st.sampled_from(["", "/", "/p?q#f", "?q", "#f", ":", "@x", "/é \u2100", "\n"])


@given(
    st.sampled_from(["http://", "https://"]), st.lists(_HOST_PIECES, max_size=4), _PORTS,
    _TAILS,
)  # fmt: skip
def test_http_url_is_the_plain_urlsplit_reading(scheme, host, port, tail):
    url = scheme + "".join(host) + port + tail
    assert normalise.http_url(url) == _plain_http_url(url)
