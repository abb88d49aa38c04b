"""Heuristic relevance: domain lists, keywords, each score component, the filter."""

from __future__ import annotations

import math
from importlib import resources

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from searcher.backends.base import Hit
from searcher.config import ScoringSettings
from searcher.errors import ConfigError
from searcher.fetch.urls import domain_matches
from searcher.ranking import relevance as scoring
from searcher.ranking.relevance import (
    COMPONENTS,
    DomainLists,
    Scored,
    apply_filter,
    keyword_overlap,
    load_domain_lists,
    parse_domain_file,
    score_results,
)
from searcher.text import query_keywords

SHIPPED = ScoringSettings()
# The tests of each component leave the soft keyword score out (it is tested on its own);
# the keyword floor, off by default since issue 12, is switched on where it is tested.
DEFAULTS = ScoringSettings(keyword_weight=0.0)
FLOOR_AND_BONUS = ScoringSettings(
    keyword_weight=0.0, multi_engine_bonus=0.05, min_keyword_overlap=0.15
)
LISTS = load_domain_lists(DEFAULTS)
CATEGORIES = {"academic", "technical", "news", "reference", "government", "health"}
ADDITIVE = [c for c in COMPONENTS if c != "keyword_overlap"]


def hit(url: str, title: str = "", snippet: str = "") -> Hit:
    return Hit(url=url, title=title, snippet=snippet, backend="test")


def score_one(
    item: tuple[Hit, float, int],
    query: str = "",
    group: str = "general",
    lists: DomainLists = LISTS,
    config: ScoringSettings = DEFAULTS,
) -> Scored:
    # A second, plain result with the best base score fixes the normalisation at 1.0.
    anchor = (hit("https://anchor.invalid/"), 1.0, 1)
    (scored,) = [s for s in score_results([anchor, item], query, group, lists, config)
                 if s.index == 1]  # fmt: skip
    return scored


# --- shipped domain lists -------------------------------------------------------------


def _shipped_entries(name: str) -> list[tuple[str, str]]:
    text = resources.files("searcher").joinpath("data", "domains", name).read_text("utf-8")
    return parse_domain_file(text, name)


@pytest.mark.parametrize("name", ["premium.txt", "trusted.txt"])
def test_shipped_lists_are_well_formed(name: str) -> None:
    entries = _shipped_entries(name)
    domains = [domain for domain, _ in entries]
    assert len(domains) == len(set(domains)), "a domain is listed twice"
    assert {category for _, category in entries} <= CATEGORIES


def test_shipped_lists_are_disjoint_and_sized() -> None:
    premium = {d for d, _ in _shipped_entries("premium.txt")}
    trusted = {d for d, _ in _shipped_entries("trusted.txt")}
    assert not premium & trusted
    assert len(premium) >= 50
    assert len(trusted) >= 300


@pytest.mark.parametrize(
    ("host", "expected"),
    [
        ("wikipedia.org", ("premium", "reference")),
        ("en.wikipedia.org", ("premium", "reference")),
        ("arxiv.org", ("premium", "academic")),
        ("docs.python.org", ("premium", "technical")),
        ("pubmed.ncbi.nlm.nih.gov", ("premium", "academic")),  # more specific than nih.gov
        ("nih.gov", ("premium", "health")),
        ("github.com", ("trusted", "technical")),
        ("health.harvard.edu", ("trusted", "health")),  # more specific than .edu
        ("cs.harvard.edu", ("trusted", "academic")),
        ("www.bbc.co.uk", ("trusted", "news")),
        ("example.com", (None, None)),
        ("notwikipedia.org", (None, None)),
        ("wikipedia.org.evil.example", (None, None)),
        ("", (None, None)),
    ],
)
def test_tier(host: str, expected: tuple[str | None, str | None]) -> None:
    assert LISTS.tier(host) == expected


@given(st.lists(st.sampled_from(["a", "b", "co", "example", "org", "www"]), max_size=5))
def test_tier_agrees_with_domain_matches(labels: list[str]) -> None:
    lists = DomainLists(frozenset({"example.org"}), {"example.org": "x", "co": "y"})
    host = ".".join(labels)
    listed = any(domain_matches(host, d) for d in ("example.org", "co"))
    assert (lists.tier(host)[0] is not None) == listed


# One DomainLists for every example: a host's tier then often comes from its memory.
SHARED_LISTS = DomainLists(frozenset({"example.org"}), {"example.org": "x", "co": "y"})


@given(st.lists(st.sampled_from(["a", "B", "co", "example", "org", "www", ""]), max_size=5))
def test_a_remembered_tier_is_the_tier(labels: list[str]) -> None:
    host = ".".join(labels)
    fresh = DomainLists(SHARED_LISTS.premium, SHARED_LISTS.trusted)  # nothing remembered
    for _ in range(2):
        assert SHARED_LISTS.tier(host) == fresh.tier(host)


def test_the_tier_memory_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(scoring, "_TIER_CACHE_SIZE", 10)
    lists = DomainLists(frozenset({"example.org"}), {"co": "y"})
    for i in range(25):
        assert lists.tier(f"h{i}.example.org") == ("premium", None)
        assert len(lists._tiers) <= 10
    assert lists.tier("a.co") == ("trusted", "y")


def test_config_extends_the_lists() -> None:
    config = ScoringSettings(
        premium_domains=["WWW.Intranet.Example", "github.com"],
        trusted_domains={"technical": ["intranet.example", "docs.corp.example"],
                         "news": ["arxiv.org"]},
    )  # fmt: skip
    lists = load_domain_lists(config)
    assert lists.tier("wiki.intranet.example") == ("premium", "technical")
    assert lists.tier("docs.corp.example") == ("trusted", "technical")
    assert lists.tier("github.com") == ("premium", "technical")  # promoted, keeps category
    assert lists.tier("arxiv.org") == ("premium", "news")  # configured category wins
    assert LISTS.tier("arxiv.org") == ("premium", "academic")  # shipped lists untouched


def test_config_premium_without_category() -> None:
    lists = load_domain_lists(ScoringSettings(premium_domains=["mine.example"]))
    assert lists.tier("mine.example") == ("premium", None)


@pytest.mark.parametrize("bad", ["https://example.org/", "example.org:8080", "", "a b"])
def test_config_domain_that_is_not_a_domain_is_a_config_error(bad: str) -> None:
    with pytest.raises(ConfigError, match=r"scoring\.trusted_domains\.news\[1\]"):
        load_domain_lists(ScoringSettings(trusted_domains={"news": ["ok.example", bad]}))
    with pytest.raises(ConfigError, match=r"scoring\.premium_domains\[0\]"):
        load_domain_lists(ScoringSettings(premium_domains=[bad]))


def test_parse_domain_file() -> None:
    text = "# heading\n\nExample.org  reference  # trailing comment\n.www.b.example News\n"
    assert parse_domain_file(text, "f") == [("example.org", "reference"), ("b.example", "news")]
    with pytest.raises(ConfigError, match="f:1"):
        parse_domain_file("example.org\n", "f")


# --- keywords -------------------------------------------------------------------------


def test_seed_example_passes_the_filter() -> None:
    keywords = query_keywords("SRVO-063 encoder alarm")
    overlap = keyword_overlap(keywords, "FANUC Servo Alarm SRVO-063 Troubleshooting", "", "")
    # srvo-063, srvo, 063 and alarm found; "encoder" is not in the title.
    assert overlap == pytest.approx(4 / 5)
    assert overlap >= DEFAULTS.min_keyword_overlap


def test_overlap_matches_stems_in_title_snippet_and_url() -> None:
    keywords = query_keywords("routers firmware update")
    assert keyword_overlap(keywords, "Router", "", "") == pytest.approx(1 / 3)
    assert keyword_overlap(keywords, "", "updating the firmware", "") == pytest.approx(2 / 3)
    assert keyword_overlap(keywords, "", "", "https://x.example/router-firmware") == (
        pytest.approx(2 / 3)
    )
    assert keyword_overlap(keywords, "Bananas", "are yellow", "https://fruit.example/") == 0.0


def test_compound_matches_as_a_phrase_however_it_is_joined() -> None:
    (code, *_) = keywords = query_keywords("SRVO-063")
    assert code == "srvo-063"
    for title in ["SRVO 063", "srvo_063", "SRVO-063: alarm"]:
        assert keyword_overlap(keywords, title, "", "") == 1.0
    assert keyword_overlap([code], "", "", "https://x.example/srvo-063-alarm%20fix") == 1.0
    assert keyword_overlap([code], "SRVO-0631", "", "") == 0.0
    assert keyword_overlap([code], "063 SRVO", "", "") == 0.0


def test_unspaced_scripts_match_as_substrings() -> None:
    keywords = query_keywords("東京タワー")
    assert keyword_overlap(keywords, "東京タワーの歴史", "", "") == 1.0


def test_overlap_without_keywords_is_one() -> None:
    assert keyword_overlap([], "anything", "", "") == 1.0


# --- score components, one at a time --------------------------------------------------


def test_fusion_component_is_scaled_to_the_best_result() -> None:
    items = [(hit("https://a.invalid/"), 0.5, 1), (hit("https://b.invalid/"), 0.02, 1),
             (hit("https://c.invalid/"), 0.0, 1)]  # fmt: skip
    by_index = {s.index: s for s in score_results(items, "", "general", LISTS, DEFAULTS)}
    assert by_index[0].components["fusion"] == pytest.approx(0.9)
    assert by_index[1].components["fusion"] == pytest.approx(0.9 * 0.02 / 0.5)
    assert by_index[2].components["fusion"] == 0.0
    assert by_index[0].relevance == pytest.approx(0.9)


def test_premium_domain_component() -> None:
    scored = score_one((hit("https://en.wikipedia.org/wiki/X"), 0.0, 1))
    assert scored.components["premium_domain"] == DEFAULTS.premium_boost
    assert scored.components["trusted_domain"] == 0.0
    assert scored.relevance == pytest.approx(DEFAULTS.premium_boost)


def test_trusted_domain_component() -> None:
    scored = score_one((hit("https://github.com/a/b"), 0.0, 1))
    assert scored.components["trusted_domain"] == DEFAULTS.trusted_boost
    assert scored.components["premium_domain"] == 0.0
    assert scored.relevance == pytest.approx(DEFAULTS.trusted_boost)


def test_category_component_only_when_the_route_group_matches() -> None:
    item = (hit("https://arxiv.org/abs/1"), 0.0, 1)
    assert score_one(item, group="academic").components["category"] == DEFAULTS.category_boost
    assert score_one(item, group="technical").components["category"] == 0.0
    assert score_one(item, group="general").components["category"] == 0.0
    unlisted = score_one((hit("https://blog.invalid/"), 0.0, 1), group="academic")
    assert unlisted.components["category"] == 0.0


def test_multi_engine_component_per_extra_engine() -> None:
    for engines, expected in [(0, 0.0), (1, 0.0), (2, 0.05), (4, 0.15)]:
        scored = score_one((hit("https://x.invalid/"), 0.0, engines), config=FLOOR_AND_BONUS)
        assert scored.components["multi_engine"] == pytest.approx(expected)
        assert scored.relevance == pytest.approx(expected)


def test_keyword_overlap_component_is_reported_not_added() -> None:
    scored = score_one((hit("https://x.invalid/", "encoder alarm"), 0.0, 1), "encoder fault")
    assert scored.components["keyword_overlap"] == pytest.approx(0.5)
    assert scored.relevance == 0.0


def test_every_component_is_always_present_and_sums_to_relevance() -> None:
    item = (hit("https://arxiv.org/abs/1", "Attention"), 0.4, 3)
    scored = score_one(item, "attention", group="academic", config=FLOOR_AND_BONUS)
    assert tuple(scored.components) == COMPONENTS
    total = sum(scored.components[c] for c in ADDITIVE)
    assert total == pytest.approx(0.9 * 0.4 + 0.25 + 0.30 + 0.10)
    assert scored.relevance == pytest.approx(min(1.0, total))


def test_weights_come_from_settings() -> None:
    config = ScoringSettings(premium_boost=0.5, trusted_boost=0.2, category_boost=0.1,
                             multi_engine_bonus=0.01)  # fmt: skip
    premium = score_one((hit("https://arxiv.org/"), 0.0, 3), group="academic", config=config)
    assert premium.components["premium_domain"] == 0.5
    assert premium.components["category"] == 0.1
    assert premium.components["multi_engine"] == pytest.approx(0.02)
    trusted = score_one((hit("https://github.com/"), 0.0, 1), config=config)
    assert trusted.components["trusted_domain"] == 0.2


def test_relevance_is_capped_at_one() -> None:
    scored = score_one((hit("https://arxiv.org/"), 1.0, 10), group="academic")
    assert sum(scored.components[c] for c in ADDITIVE) > 1
    assert scored.relevance == 1.0


@settings(max_examples=200)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["https://arxiv.org/a", "https://github.com/b", "https://x.invalid/",
                             "not a url", "http://[::1", "", "https://en.wikipedia.org/c"]),
            st.text(max_size=40),
            st.floats(allow_nan=True, allow_infinity=True),
            st.integers(min_value=-1, max_value=20),
        ),
        max_size=12,
    ),
    st.text(max_size=40),
    st.sampled_from(["general", "academic", "technical", "news"]),
    st.floats(min_value=0, max_value=2),
)  # fmt: skip
def test_relevance_always_in_unit_interval(
    rows: list[tuple[str, str, float, int]], query: str, group: str, boost: float
) -> None:
    config = ScoringSettings(premium_boost=boost, trusted_boost=boost, category_boost=boost,
                             multi_engine_bonus=boost / 4)  # fmt: skip
    items = [(hit(url, title), base, engines) for url, title, base, engines in rows]
    scored = score_results(items, query, group, LISTS, config)
    assert sorted(s.index for s in scored) == list(range(len(items)))
    for s in scored:
        assert 0.0 <= s.relevance <= 1.0
        assert all(math.isfinite(v) and v >= 0 for v in s.components.values())
        assert 0.0 <= s.components["keyword_overlap"] <= 1.0
    assert [s.relevance for s in scored] == sorted((s.relevance for s in scored), reverse=True)


# --- order and filter -----------------------------------------------------------------


def test_order_is_by_relevance_then_input_position() -> None:
    items = [(hit(f"https://site{i}.invalid/"), base, 1)
             for i, base in enumerate([0.2, 0.5, 0.2, 0.5, 0.1])]  # fmt: skip
    order = [s.index for s in score_results(items, "", "general", LISTS, DEFAULTS)]
    assert order == [1, 3, 0, 2, 4]
    assert order == [s.index for s in score_results(items, "", "general", LISTS, DEFAULTS)]


def test_boosts_reorder_results() -> None:
    items = [(hit("https://blog.invalid/"), 0.5, 1), (hit("https://arxiv.org/abs/1"), 0.4, 1)]
    order = [s.index for s in score_results(items, "", "academic", LISTS, DEFAULTS)]
    assert order == [1, 0]


def test_results_at_the_cap_keep_the_stronger_evidence_first() -> None:
    # 0.9 + 0.1 = 1.0 against 0.81 + 0.25 + 0.30 = 1.36: both capped at 1.
    items = [(hit("https://blog.invalid/"), 1.0, 3), (hit("https://arxiv.org/abs/1"), 0.9, 1)]
    scored = score_results(items, "", "academic", LISTS, FLOOR_AND_BONUS)
    assert [s.relevance for s in scored] == [1.0, 1.0]
    assert [s.index for s in scored] == [1, 0]


def test_filter_marks_results_below_min_overlap() -> None:
    items = [(hit("https://a.invalid/", "FANUC SRVO-063 alarm"), 0.5, 1),
             (hit("https://b.invalid/", "Banana bread recipe"), 0.9, 1)]  # fmt: skip
    scored = score_results(items, "SRVO-063 encoder alarm", "general", LISTS, FLOOR_AND_BONUS)
    kept = {s.index: s.kept for s in scored}
    assert kept == {0: True, 1: False}
    assert [s.index for s in apply_filter(scored)] == [0]


def test_filter_threshold_is_inclusive_and_configurable() -> None:
    item = (hit("https://a.invalid/", "alpha"), 0.5, 1)  # 1 of 4 keywords: 0.25
    strict = ScoringSettings(min_keyword_overlap=0.5)
    assert score_one(item, "alpha beta gamma delta").kept
    assert not score_one(item, "alpha beta gamma delta", config=strict).kept
    assert score_one(item, "alpha beta gamma delta",
                     config=ScoringSettings(min_keyword_overlap=0.25)).kept  # fmt: skip


def test_filter_keeps_everything_rather_than_nothing() -> None:
    items = [(hit("https://a.invalid/", "Bananen"), 0.5, 1),
             (hit("https://b.invalid/", "Äpfel"), 0.9, 1)]  # fmt: skip
    scored = score_results(items, "bananas apples", "general", LISTS, FLOOR_AND_BONUS)
    assert not any(s.kept for s in scored)
    assert apply_filter(scored) == scored


def test_empty_input() -> None:
    assert score_results([], "query", "general", LISTS, DEFAULTS) == []
    assert apply_filter([]) == []


def test_by_default_no_result_is_dropped_for_its_words() -> None:
    # Issue 12: on a real SearXNG the keyword floor cost relevant results; by default the
    # overlap is a small soft score, never a filter.
    items = [(hit("https://a.invalid/", "nothing in common"), 0.9, 1),
             (hit("https://b.invalid/", "encoder alarm SRVO-063"), 0.5, 1)]  # fmt: skip
    scored = score_results(items, "SRVO-063 encoder alarm", "general", LISTS, SHIPPED)
    assert [s.index for s in scored] == [0, 1] and all(s.kept for s in scored)
    assert scored[1].components["keyword"] == pytest.approx(SHIPPED.keyword_weight)


def test_keyword_weight_is_a_soft_score() -> None:
    soft = ScoringSettings(keyword_weight=0.5)
    items = [(hit("https://a.invalid/", "nothing in common"), 0.9, 1),
             (hit("https://b.invalid/", "encoder alarm SRVO-063"), 0.5, 1)]  # fmt: skip
    scored = score_results(items, "SRVO-063 encoder alarm", "general", LISTS, soft)
    assert [s.index for s in scored] == [1, 0] and all(s.kept for s in scored)
    assert scored[0].components["keyword"] == pytest.approx(0.5)


def test_keyword_overlap_reads_a_bounded_start_of_each_field():
    # A backend may send megabytes of title, snippet or URL; the overlap reads the first
    # MAX_RESULT_FIELD_CHARS of each, as the hybrid stage and a reranker do.
    from searcher.ranking.relevance import MAX_RESULT_FIELD_CHARS

    filler = "x" * (MAX_RESULT_FIELD_CHARS - 40)
    within = f"{filler} gaming"  # within the bound, even behind "https://a.example/"
    beyond = f"{filler} {'y' * 40} gaming"
    for make in (
        lambda text: hit("https://a.example/", title=text),
        lambda text: hit("https://a.example/", snippet=text),
        lambda text: hit(f"https://a.example/{text.replace(' ', '-')}"),
    ):
        assert score_one((make(within), 1.0, 1), "gaming").components["keyword_overlap"] == 1.0
        assert score_one((make(beyond), 1.0, 1), "gaming").components["keyword_overlap"] == 0.0
