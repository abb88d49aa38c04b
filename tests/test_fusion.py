"""Fusion: ranked lists from backend answers, weighted RRF, SearXNG's merge, provenance."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from searcher.backends import searxng
from searcher.backends.base import BackendAnswer, Hit
from searcher.backends.engine_positions import align
from searcher.fetch.urls import page_key
from searcher.ranking.fusion import (
    FusedHit,
    RankedList,
    Source,
    _group_by_page,
    _order,
    answer_list,
    engine_agreement,
    engine_count,
    fuse,
    fuse_answers,
    ranked_lists,
    representative,
    searxng_style,
)


def hit(url: str, title: str = "", snippet: str = "", backend: str = "brave", **kw) -> Hit:
    return Hit(url=url, title=title or url, snippet=snippet, backend=backend, **kw)


def urls(fused: list[FusedHit]) -> list[str]:
    return [f.key for f in fused]


U1, U2, U3, U4 = (f"https://site{i}.example/page" for i in range(1, 5))


def example_lists() -> list[RankedList]:
    bing = RankedList("searxng", "bing", 1.0, (hit(U1), hit(U2), hit(U3)))
    brave = RankedList("brave", None, 2.0, (hit(U2), hit(U4)))
    return [bing, brave]


# --- weighted RRF ------------------------------------------------------------------------


def test_rrf_arithmetic_on_a_hand_made_example():
    fused = fuse(example_lists(), k=60)
    scores = {f.key: f.score for f in fused}
    assert scores[U2] == pytest.approx(1 / 62 + 2 / 61)
    assert scores[U4] == pytest.approx(2 / 62)
    assert scores[U1] == pytest.approx(1 / 61)
    assert scores[U3] == pytest.approx(1 / 63)
    assert urls(fused) == [U2, U4, U1, U3]


def test_weights_decide_between_lists():
    bing, brave = example_lists()
    trusted_bing = [
        RankedList(bing.backend, bing.engine, 5.0, bing.hits),
        RankedList(brave.backend, brave.engine, 1.0, brave.hits),
    ]
    assert urls(fuse(trusted_bing))[:3] == [U2, U1, U3]
    assert urls(fuse(example_lists()))[:3] == [U2, U4, U1]


def test_k_sets_how_much_the_top_rank_counts():
    def fillers(name: str) -> tuple[Hit, ...]:
        return tuple(hit(f"https://{name}.example/{i}") for i in range(2))

    a = RankedList("searxng", "a", 1.0, (hit(U1), *fillers("a"), hit(U2)))
    b = RankedList("searxng", "b", 1.0, (hit(U3), *fillers("b"), hit(U2)))
    # U2 is fourth twice, U1 and U3 first once: k = 1 favours a first place, k = 60 votes.
    assert urls(fuse([a, b], k=1))[0] == U1
    assert urls(fuse([a, b], k=60))[0] == U2


def test_spellings_of_one_url_merge_into_the_richest_hit():
    a = RankedList(
        "searxng",
        "bing",
        1.0,
        (hit("https://www.Example.org/a/", "Short", "", engines=("bing",), positions=(1,)),),
    )
    b = RankedList(
        "brave",
        None,
        1.0,
        (
            hit(U1),
            hit(
                "https://example.org/a?utm_source=x",
                "A longer title",
                "A snippet",
                engines=("brave",),
                published="2024-01-02T00:00:00Z",
            ),
        ),
    )
    [first, _] = fuse([a, b])
    assert first.key == "https://example.org/a"
    assert first.hit.url == "https://www.Example.org/a/"  # the best-ranked spelling
    assert (first.hit.title, first.hit.snippet) == ("A longer title", "A snippet")
    assert first.hit.engines == ("bing", "brave")
    assert first.hit.positions == ()  # ranks live in the sources
    assert first.hit.published == "2024-01-02T00:00:00Z"
    assert first.sources == (Source("brave", None, 2), Source("searxng", "bing", 1))


def test_http_and_https_spellings_are_one_page_shown_as_https():
    # Engines list both spellings of one site; SearXNG merges them too. The page counts
    # once with both votes, and the secure spelling is the one shown and fetched.
    a = RankedList("searxng", "bing", 1.0, (hit("http://example.org/a", "Plain"),))
    b = RankedList("brave", None, 1.0, (hit(U1), hit("https://www.example.org/a/", "Secure")))
    fused = {f.key: f for f in fuse([a, b])}
    page = fused["https://example.org/a"]
    assert page.hit.url == "https://www.example.org/a/"
    assert page.sources == (Source("brave", None, 2), Source("searxng", "bing", 1))
    assert page.score == pytest.approx(1 / 61 + 1 / 62)
    # A page found only as http keeps its URL: no engine said it is served over https.
    [alone] = fuse([RankedList("brave", None, 1.0, (hit("http://example.org/b"),))])
    assert alone.hit.url == "http://example.org/b" and alone.key == "https://example.org/b"


def test_equal_texts_keep_the_better_ranked_ones():
    a = RankedList("searxng", "bing", 1.0, (hit(U2), hit(U1, "Title B", "snippet B")))
    b = RankedList("brave", None, 1.0, (hit(U1, "Title A", "snippet A"),))
    [merged] = [f for f in fuse([a, b]) if f.key == U1]
    assert (merged.hit.title, merged.hit.snippet) == ("Title A", "snippet A")


def test_a_page_twice_in_one_list_counts_once_at_its_better_rank():
    lst = RankedList("brave", None, 1.0, (hit(U1), hit(U2), hit(U1 + "#top")))
    fused = {f.key: f for f in fuse([lst])}
    assert fused[U1].score == pytest.approx(1 / 61)
    assert fused[U1].sources == (Source("brave", None, 1),)


def test_no_lists_no_hits():
    assert fuse([]) == []
    assert searxng_style([]) == []


# --- determinism and provenance (properties) ---------------------------------------------

POOL = [f"https://host{i % 3}.example/p{i}" for i in range(8)] + [
    "https://www.host0.example/p0/",
    "http://host1.example/p1",
    "HTTP://host2.example/p2/",
]

ranked = st.builds(
    RankedList,
    backend=st.sampled_from(["searxng", "brave", "duckduckgo"]),
    engine=st.sampled_from([None, "bing", "google", "wikipedia"]),
    weight=st.sampled_from([0.5, 1.0, 1.0, 2.0]),
    hits=st.lists(
        st.builds(
            hit,
            st.sampled_from(POOL),
            st.sampled_from(["", "T", "Title", "Other"]),
            st.sampled_from(["", "s", "snippet", "other"]),
            engines=st.sampled_from([(), ("bing",), ("google", "bing")]),
        ),
        max_size=6,
    ).map(tuple),
)


@given(st.lists(ranked, max_size=5), st.randoms(use_true_random=False))
def test_the_order_of_lists_does_not_change_the_output(lists, rnd):
    shuffled = list(lists)
    rnd.shuffle(shuffled)
    assert fuse(shuffled) == fuse(lists)
    assert searxng_style(shuffled) == searxng_style(lists)


@given(st.lists(ranked, max_size=5))
def test_output_is_best_first_with_ties_by_key(lists):
    for fused in (fuse(lists), searxng_style(lists)):
        order = [(-f.score, f.key) for f in fused]
        assert order == sorted(order)
        assert len({f.key for f in fused}) == len(fused)
        assert all(f.key == page_key(f.hit.url) for f in fused)


@given(st.lists(ranked, max_size=5))
def test_provenance_is_complete(lists):
    expected: set[tuple[int, str]] = set()  # (list index, page key)
    best_rank: dict[tuple[int, str], int] = {}
    for i, lst in enumerate(lists):
        for rank, h in enumerate(lst.hits, start=1):
            key = page_key(h.url)
            expected.add((i, key))
            best_rank.setdefault((i, key), rank)
    fused = fuse(lists)
    assert sum(len(f.sources) for f in fused) == len(expected)
    for f in fused:
        order = [(s.backend, s.engine or "", s.rank) for s in f.sources]
        assert order == sorted(order)
        assert sorted(s.rank for s in f.sources) == sorted(
            rank for (i, key), rank in best_rank.items() if key == f.key
        )
        expected_score = math.fsum(
            lists[i].weight / (60 + rank) for (i, key), rank in best_rank.items() if key == f.key
        )
        assert f.score == pytest.approx(expected_score)


# --- splitting answers -------------------------------------------------------------------


def test_a_searxng_answer_becomes_one_list_per_engine_ordered_by_position():
    answer = BackendAnswer(
        "searxng",
        [
            hit(U1, backend="searxng", engines=("bing", "google"), positions=(3, 1)),
            hit(U2, backend="searxng", engines=("bing",), positions=(1,)),
            hit(U3, backend="searxng", engines=("google", "bing"), positions=(2, 2)),
            hit(U4, backend="searxng"),  # no engines: the backend's own list
        ],
        per_engine=True,
    )
    lists = ranked_lists(answer, 2.0, {"google": 1.5})
    by_engine = {lst.engine: lst for lst in lists}
    assert [lst.engine for lst in lists] == [None, "bing", "google"]
    assert [h.url for h in by_engine["bing"].hits] == [U2, U3, U1]
    assert [h.url for h in by_engine["google"].hits] == [U1, U3]
    assert [h.url for h in by_engine[None].hits] == [U4]
    assert by_engine["google"].weight == pytest.approx(3.0)
    assert by_engine["bing"].weight == pytest.approx(2.0)
    assert all(lst.backend == "searxng" for lst in lists)


def test_missing_positions_fall_back_to_the_answer_order():
    answer = BackendAnswer(
        "searxng",
        [
            hit(U1, backend="searxng", engines=("bing", "google"), positions=(2,)),
            hit(U2, backend="searxng", engines=("google",)),
            hit(U3, backend="searxng", engines=("bing",), positions=(1,)),
        ],
        per_engine=True,
    )
    by_engine = {lst.engine: lst for lst in ranked_lists(answer, 1.0, {})}
    assert [h.url for h in by_engine["bing"].hits] == [U3, U1]
    assert [h.url for h in by_engine["google"].hits] == [U1, U2]  # answer order 1, 2


def test_a_real_searxng_json_answer_splits_by_its_engines():
    body = {
        "query": "q",
        "results": [
            {"url": U1, "title": "one", "content": "", "engines": ["wikipedia", "bing"],
             "positions": [1, 4]},
            {"url": U2, "title": "two", "content": "", "engine": "bing", "positions": [1]},
        ],
        "unresponsive_engines": [],
    }  # fmt: skip
    answer = searxng.parse_response(200, {}, json.dumps(body).encode())
    by_engine = {lst.engine: lst for lst in ranked_lists(answer, 1.0, {"wikipedia": 1.2})}
    assert [h.url for h in by_engine["bing"].hits] == [U2, U1]
    assert [h.url for h in by_engine["wikipedia"].hits] == [U1]
    assert by_engine["wikipedia"].weight == pytest.approx(1.2)
    fused = fuse(list(by_engine.values()))
    assert fused[0].key == U1  # two engines beat one first place
    assert fused[0].sources == (Source("searxng", "bing", 2), Source("searxng", "wikipedia", 1))


def test_other_backends_are_one_list_in_answer_order():
    answer = BackendAnswer("brave", [hit(U2, engines=("brave",)), hit(U1, engines=("brave",))])
    [lst] = ranked_lists(answer, 0.7, {"brave": 9.0})
    assert (lst.backend, lst.engine, lst.weight) == ("brave", None, 0.7)
    assert [h.url for h in lst.hits] == [U2, U1]
    assert ranked_lists(BackendAnswer("duckduckgo", []), 1.0, {}) == []


# --- SearXNG's merge, the baseline -------------------------------------------------------


def test_searxng_style_multiplies_weights_hits_and_inverse_positions():
    fused = searxng_style(example_lists())
    scores = {f.key: f.score for f in fused}
    assert scores[U2] == pytest.approx(1.0 * 2.0 * 2 * (1 / 2 + 1 / 1))
    assert scores[U1] == pytest.approx(1.0)
    assert scores[U4] == pytest.approx(2.0 * 1 * (1 / 2))
    assert scores[U3] == pytest.approx(1 / 3)
    assert urls(fused) == [U2, U1, U4, U3]  # U1 and U4 tie at 1.0: by key


# --- issue 12: a backend's own order, provenance-only lists, engine positions ------------


def searxng_answer() -> BackendAnswer:
    # SearXNG's own order: U3 first (it merged three engines), then U1, U2.
    return BackendAnswer(
        "searxng",
        [
            hit(U3, backend="searxng", engines=("a", "b"), positions=(2, 1)),
            hit(U1, backend="searxng", engines=("a",), positions=(1,)),
            hit(U2, backend="searxng", engines=("b",), positions=(2,)),
        ],
        per_engine=True,
    )


def test_one_backend_alone_keeps_its_own_order_with_engine_ranks_as_provenance():
    fused = fuse_answers([(None, searxng_answer(), 1.0)], {}, method="answer_order")
    assert urls(fused) == [U3, U1, U2]
    top = fused[0]
    assert Source("searxng", None, 1) in top.sources
    assert {(s.engine, s.rank) for s in top.sources if s.engine} == {("a", 2), ("b", 1)}
    assert engine_count(top) == 2 and engine_count(fused[1]) == 1


def test_engine_rrf_is_the_old_behaviour():
    fused = fuse_answers([(None, searxng_answer(), 1.0)], {}, k=60, method="engine_rrf")
    assert fused == fuse(ranked_lists(searxng_answer(), 1.0, {}), 60)


def test_engine_weights_reorder_a_searxng_answer_by_its_formula():
    # Trusting engine "a" ten times more puts a's first result (U1) above U3's 1/2 + 1/1.
    ordered = answer_list(searxng_answer(), 1.0, {"a": 10.0, "b": 0.1})
    assert [h.url for h in ordered.hits] == [U1, U3, U2]
    assert answer_list(searxng_answer(), 1.0, {}).hits == tuple(searxng_answer().hits)


def test_engine_agreement_is_the_share_of_results_another_engine_also_found():
    assert engine_agreement(searxng_answer().hits) == {"a": 0.5, "b": 0.5}


def test_two_backends_fuse_their_orders_and_provenance_never_adds_a_page():
    brave = BackendAnswer("brave", [hit(U2), hit(U4)])
    both = [(None, searxng_answer(), 1.0), (None, brave, 1.0)]
    fused = fuse_answers(both, {}, k=1, method="answer_order")
    assert urls(fused)[0] == U2  # 1/(1+3) + 1/(1+1) beats U3's 1/(1+1)
    only = fuse([RankedList("brave", None, 1.0, (hit(U1),))],
                provenance=[RankedList("searxng", "a", 1.0, (hit(U2),))])  # fmt: skip
    assert urls(only) == [U1]


def test_positions_are_paired_with_engines_across_the_whole_answer():
    # A real SearXNG: engines an unordered set, positions in arrival order. U2 pins
    # bing's position 1, so U1's bing position is 4 and wikipedia's 1, whatever the order.
    body = {
        "results": [
            {"url": U1, "engines": ["bing", "wikipedia"], "positions": [1, 4]},
            {"url": U2, "engines": ["bing"], "positions": [1]},
        ]
    }
    answer = searxng.parse_response(200, {}, json.dumps(body).encode())
    pairs = dict(zip(answer.hits[0].engines, answer.hits[0].positions, strict=True))
    assert pairs == {"bing": 4, "wikipedia": 1}


def test_undecidable_pairs_get_the_mean_position():
    rows = [(("a", "b"), (1, 3)), (("a", "b"), (3, 1)), (("a",), (2,)), (("b",), (2,))]
    assert align(rows)[:2] == [{"a": 2, "b": 2}, {"a": 2, "b": 2}]
    assert align(rows)[2:] == [{"a": 2}, {"b": 2}]


def test_an_answer_too_large_to_pair_keeps_single_engine_positions_and_says_so():
    # 251 results found by "a" and "b" (502 engine names) with positions that disagree,
    # as a broken instance's may: pairing them would take time growing with the square.
    shared = [
        {"url": f"https://e.org/{i}", "engines": ["a", "b"], "positions": [i + 1, i + 2]}
        for i in range(251)
    ]
    alone = {"url": "https://e.org/alone", "engines": ["c"], "positions": [3, 7]}
    body = json.dumps({"results": [alone, *shared]}).encode()
    answer = searxng.parse_response(200, {}, body)
    assert (answer.hits[0].engines, answer.hits[0].positions) == (("c",), (3,))
    assert answer.hits[1].engines == ("a", "b") and answer.hits[1].positions == ()
    assert any("engines not paired with positions" in w for w in answer.warnings)
    # One result fewer (500 names): paired as before, no warning.
    body = json.dumps({"results": [alone, *shared[:250]]}).encode()
    answer = searxng.parse_response(200, {}, body)
    assert answer.hits[1].positions and not answer.warnings


def _fuse_plain(lists: list[RankedList], k: int) -> list[FusedHit]:
    """``fuse`` without its shortcut: every page's appearances sorted best-ranked first."""
    fused = []
    for key, group in _group_by_page(lists).items():
        group = sorted(group, key=_order)
        if any(a.scored for a in group):
            page = representative([a.hit for a in group])
            sources = tuple(sorted((a.source for a in group), key=Source.sort_key))
            score = math.fsum(a.weight / (k + a.source.rank) for a in group if a.scored)
            fused.append(FusedHit(page, key, score, sources))
    fused.sort(key=lambda f: (-f.score, f.key))
    return fused


_pages = st.lists(
    st.builds(
        hit,
        st.sampled_from(["https://a.example/x", "https://www.a.example/x/", "https://b.example/"]),
        st.sampled_from(["", "T1", "T2"]),
        st.sampled_from(["", "s1", "s2"]),
        engines=st.sampled_from([(), ("bing",), ("bing", "google")]),
    ),
    min_size=1,
    max_size=4,
)


@settings(max_examples=400)
@given(st.data(), _pages)
def test_fuse_orders_a_page_s_appearances_only_when_its_hits_differ(data, pages):
    # Lists share hit objects, as a SearXNG page split into its engines' lists does, or
    # hold different hits of one page: the shortcut (no sort for one shared hit) and the
    # sort for different hits must both give the plain result, ties of sources included.
    lists = [
        RankedList(
            data.draw(st.sampled_from(["searxng", "brave"])),
            data.draw(st.sampled_from([None, "", "bing"])),
            data.draw(st.sampled_from([0.5, 1.0])),
            tuple(data.draw(st.lists(st.sampled_from(pages), max_size=4))),
            data.draw(st.sampled_from([None, "", "p"])),
            data.draw(st.sampled_from([True, True, False])),
        )
        for _ in range(data.draw(st.integers(1, 5)))
    ]
    assert fuse(lists, k=1) == _fuse_plain(lists, k=1)
