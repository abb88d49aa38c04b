"""normalise_url: idempotent, merges the documented spellings of one page, never merges
two different pages (searcher/fetch/urls.py's decisions, as properties)."""

from __future__ import annotations

import string
from urllib.parse import quote, quote_plus

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from searcher.fetch.urls import domain_matches, domain_of, host_of, item_id, normalise_url, page_key

# --- strategies ----------------------------------------------------------------------------

schemes = st.sampled_from(["http", "https"])
DEFAULT_PORT = {"http": 80, "https": 443}
_label = st.text(string.ascii_lowercase + string.digits, min_size=1, max_size=8)
hosts = st.builds(
    lambda labels, tld: ".".join([*labels, tld]),
    st.lists(_label.filter(lambda s: s != "www"), min_size=1, max_size=3),
    st.text(string.ascii_lowercase, min_size=2, max_size=5),
)
# Path segments: unreserved, sub-delims, and text that must be encoded in a segment
# ("/", "?", "%", spaces, non-ASCII), which url() does, as a site would.
_segment_chars = st.one_of(
    st.sampled_from(string.ascii_letters + string.digits + "-_~!$&'()*+,;=:@/?#%"),
    st.characters(codec="utf-8"),
)
segments = st.lists(
    st.text(_segment_chars, min_size=1, max_size=8).filter(lambda s: s not in (".", "..")),
    min_size=0,
    max_size=4,
)
TRACKING = {"gclid", "fbclid", "dclid", "msclkid", "yclid", "mc_cid", "mc_eid", "igshid", "_ga"}
names = st.text(string.ascii_lowercase + "_", min_size=1, max_size=6).filter(
    lambda k: not k.startswith("utm_") and k not in TRACKING
)
values = st.text(st.characters(codec="utf-8"), max_size=8)
queries = st.dictionaries(names, values, max_size=4)


def url(
    scheme: str,
    host: str,
    segs: list[str],
    query: dict[str, str] | list[tuple[str, str]],
    port: int | None = None,
    fragment: str = "",
) -> str:
    pairs = list(query.items()) if isinstance(query, dict) else query
    netloc = host if port is None else f"{host}:{port}"
    path = "/" + "/".join(quote(s, safe="") for s in segs)
    q = "&".join(f"{quote_plus(k)}={quote_plus(v)}" for k, v in pairs)
    tail = (f"?{q}" if q else "") + (f"#{fragment}" if fragment else "")
    return f"{scheme}://{netloc}{path}{tail}"


# --- idempotent ----------------------------------------------------------------------------


@given(schemes, hosts, segments, queries, st.none() | st.integers(1, 65535), st.text(max_size=6))
def test_idempotent_on_urls(scheme, host, segs, query, port, fragment):
    key = normalise_url(url(scheme, host, segs, query, port, fragment))
    assert normalise_url(key) == key


@given(st.sampled_from(["http://", "https://", "HTTP://www.", ""]), st.text(max_size=40))
@example("http://", "www.www.example.com/a")
@example("http://", "x.org/a%zz%2f%41")
@example("http://", "x.org/?a=%FF&b=%C3%A9")
def test_idempotent_on_any_text(prefix, rest):
    try:
        key = normalise_url(prefix + rest)
    except ValueError:  # urlsplit refuses some strings (bad IPv6 brackets): fine, not ours
        return
    assert normalise_url(key) == key


# --- never merges different pages ----------------------------------------------------------


@given(schemes, hosts, segments, segments, queries)
def test_different_paths_stay_apart(scheme, host, a, b, query):
    if a == b:
        return
    assert normalise_url(url(scheme, host, a, query)) != normalise_url(url(scheme, host, b, query))


@given(schemes, hosts, segments, st.sampled_from("/;=&+$,:@!*'()"), segments)
def test_an_encoded_reserved_character_is_not_the_character(scheme, host, left, char, right):
    # RFC 3986 6.2.2.2: "/a%2Fb" is not "/a/b"; only unreserved characters may be decoded.
    raw = "/".join([*left, "x" + char + "y", *right])
    encoded = "/".join([*left, "x" + quote(char, safe="") + "y", *right])
    base = f"{scheme}://{host}/"
    assert normalise_url(base + quote(raw, safe="/" + char)) != normalise_url(base + encoded)


@given(schemes, hosts, segments, names, values, values)
def test_different_query_values_stay_apart(scheme, host, segs, name, v1, v2):
    if v1 == v2:
        return
    one = normalise_url(url(scheme, host, segs, {name: v1}))
    assert one != normalise_url(url(scheme, host, segs, {name: v2}))


@given(schemes, hosts, hosts, segments)
def test_different_hosts_stay_apart(scheme, h1, h2, segs):
    if h1 == h2:
        return
    assert normalise_url(url(scheme, h1, segs, {})) != normalise_url(url(scheme, h2, segs, {}))


@given(schemes, hosts, st.integers(1, 65535), st.integers(1, 65535))
def test_different_ports_stay_apart(scheme, host, p1, p2):
    if p1 == p2:
        return
    one, two = (normalise_url(url(scheme, host, ["a"], {}, p)) for p in (p1, p2))
    assert one != two


@given(hosts, segments, queries)
def test_http_and_https_stay_apart(host, segs, query):
    assert normalise_url(url("http", host, segs, query)) != normalise_url(
        url("https", host, segs, query)
    )


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("https://x.org/a%2Fb", "https://x.org/a/b"),  # an encoded slash is not a slash
        ("https://x.org/a%3Bb", "https://x.org/a;b"),
        ("https://x.org/a%3Fb", "https://x.org/a?b"),
        ("https://x.org/Page", "https://x.org/page"),  # paths are case-sensitive
        ("https://x.org/?id=1&id=2", "https://x.org/?id=2&id=1"),  # a list's order
        ("https://x.org/?a=%FF", "https://x.org/?a=%FE"),  # undecodable, still different
        ("https://x.org/?a=1%262", "https://x.org/?a=1&2="),
        ("https://x.org/#/docs/a", "https://x.org/#/docs/b"),  # hash routes are pages
        ("https://x.org/#!/item/1", "https://x.org/#!/item/2"),
        ("https://x.org:8443/", "https://x.org/"),
        ("https://x.org/?q=a+b", "https://x.org/?q=a%2Bb"),
    ],
)
def test_different_pages_examples(a, b):
    assert normalise_url(a) != normalise_url(b)


# --- merges the spellings of one page ------------------------------------------------------


def _random_case(data: st.DataObject, text: str) -> str:
    flips = data.draw(st.lists(st.booleans(), min_size=len(text), max_size=len(text)))
    return "".join(c.upper() if f else c for c, f in zip(text, flips, strict=True))


@given(st.data(), schemes, hosts, segments, queries)
def test_documented_variants_merge(data, scheme, host, segs, query):
    canonical = normalise_url(url(scheme, host, segs, query))
    pairs = list(query.items())
    variant_host = host
    if data.draw(st.booleans(), label="www"):
        variant_host = "www." + variant_host
    variant_host = _random_case(data, variant_host)
    port = DEFAULT_PORT[scheme] if data.draw(st.booleans(), label="default port") else None
    tracking = data.draw(
        st.lists(st.sampled_from(["utm_source", "utm_medium", "gclid", "fbclid", "UTM_Campaign"]))
    )
    pairs += [(name, "x") for name in tracking]
    pairs = data.draw(st.permutations(pairs), label="parameter order")
    fragment = data.draw(st.sampled_from(["", "top", "section-2"]), label="fragment")
    if data.draw(st.booleans(), label="trailing slash"):
        segs = [*segs, ""]
    variant = url(_random_case(data, scheme), variant_host, segs, pairs, port, fragment)
    assert normalise_url(variant) == canonical


@pytest.mark.parametrize(
    ("a", "b"),
    [
        (
            "HTTPS://WWW.Example.COM:443/a/?utm_source=x&b=2&a=1#top",
            "https://example.com/a?a=1&b=2",
        ),
        ("https://example.com/%7Euser/%61", "https://example.com/~user/a"),  # unreserved
        ("https://example.com/caf%c3%a9", "https://example.com/café"),  # encoded vs raw
        ("https://example.com/a%zz", "https://example.com/a%25zz"),  # a stray percent sign
        ("https://example.com", "https://example.com/"),
        ("https://example.com./a", "https://example.com/a"),  # the root dot of DNS
        ("https://example.com/?gclid=1&fbclid=2", "https://example.com/"),
        ("  https://example.com/a  ", "https://example.com/a"),
    ],
)
def test_same_page_examples(a, b):
    assert normalise_url(a) == normalise_url(b)
    assert item_id(a) == item_id(b)


@pytest.mark.parametrize(
    ("entry", "domain"),
    [
        ("example.com", "example.com"),
        ("https://Example.com/docs?x=1", "example.com"),
        ("127.0.0.1:8080", "127.0.0.1"),
        ("*.example.com", "example.com"),
        (" .example.com. ", "example.com"),
        ("bücher.de", "xn--bcher-kva.de"),  # as DNS spells it, and host_of too
        ("xn--bcher-kva.de", "xn--bcher-kva.de"),
        ("[2001:db8::1]", "[2001:db8::1]"),  # read again, it is the same entry
        ("http://[2001:db8::1]:8080/a", "[2001:db8::1]"),
        ("https://user:pw@example.com/", "example.com"),  # user info is no host
    ],
)
def test_a_domain_filter_entry_is_read_as_its_host(entry, domain):
    assert domain_of(entry) == domain
    assert domain_of(domain) == domain  # what it is read as reads the same again


@pytest.mark.parametrize(
    ("url", "entry", "matches"),
    [
        ("https://münchen.de/a", "xn--mnchen-3ya.de", True),
        ("https://xn--mnchen-3ya.de/b", "münchen.de", True),
        ("https://blog.münchen.de/", "MÜNCHEN.de", True),
        ("https://example.com/", "www.example.com", True),
        ("https://www.example.com/", "www.example.com", True),
        ("https://blog.example.com/", "www.example.com", False),  # not a subdomain of www.
        ("https://x.www.example.com/", "www.example.com", True),
        ("https://blog.example.com/", "example.com", True),
        ("http://127.0.0.1:8080/", "127.0.0.1", True),
        ("http://127.0.0.1:8080/", "0.1", False),  # an address has no subdomains
        ("http://127.0.0.1:8080/", "1", False),
        ("http://[2001:db8::1]/", "2001:db8::1", True),
    ],
)
def test_a_filter_entry_matches_its_host_and_subdomains_only(url, entry, matches):
    assert domain_matches(host_of(url), entry) is matches


def test_a_page_under_its_unicode_and_punycode_names_is_one_page():
    assert normalise_url("https://münchen.de/rathaus") == normalise_url(
        "https://xn--mnchen-3ya.de/rathaus"
    )


@pytest.mark.parametrize(
    "entry", ["", " ", "a b", "http://", "/path", "...", "x:", "example.com\n", "user@", "[]"]
)
def test_an_entry_without_a_host_is_refused(entry):
    with pytest.raises(ValueError, match="is not a domain"):
        domain_of(entry)


@given(hosts, segments, queries)
def test_page_keys_take_http_and_https_as_one_page_and_item_ids_do_not(host, segs, query):
    plain, secure = url("http", host, segs, query), url("https", host, segs, query)
    assert page_key(plain) == page_key(secure) == normalise_url(secure)
    assert normalise_url(plain) != normalise_url(secure)  # ids name the spelling shown
    assert item_id(plain) != item_id(secure)
    assert page_key(page_key(plain)) == page_key(plain)
