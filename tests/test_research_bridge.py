"""Research follows the bridge and reports how well its evidence answers: a job on the
testbed (its AEB pages over real HTTP, no LLM) asked which engines went into the SLS core
stage searches, in round 2, the engine its first hop names (RS-25) and no site name or
headline word; its confidence is high, and a question the pages do not answer stays low."""

from __future__ import annotations

from typing import Any

import httpx

from searcher.research.answering import answer_kind, answer_support
from searcher.research.bridge import bridge_query, rank_bridges
from searcher.research.evidence import EvidencePool, Passage, linked_passages
from searcher.research.links import linked, page_subject
from tests.shared_data import AEB, require_shared
from tests.test_research import follow, start
from tests.testbed.hops import FIRST_HOP, SECOND_HOP, TWO_HOP_ANSWER, TWO_HOP_QUESTION

SLS = "Which rocket engines were installed in the SLS core stage?"
UNANSWERED = "Who won the chess olympiad held in Elista in 1998?"
# The Space Review's article on the SLS, as the testbed serves it (its <title>).
SITE_AND_HEADLINE = ("space review", "seeking")


def _finished_with_events(base: str, question: str) -> tuple[list[dict[str, Any]], Any]:
    job_id = start(base, {"query": question, "preset": "balanced"})
    events = follow(base, job_id)
    job = httpx.get(f"{base}/v1/research/{job_id}", timeout=30).json()
    assert job["status"] == "done", job
    return events, job["result"]


def test_round_two_follows_the_engine_the_first_hop_names_not_the_site(
    make_settings, serve_searcher
):
    require_shared(AEB)  # its pages and counts are the AEB set's, not the shipped pages'
    base = serve_searcher(make_settings())
    events, result = _finished_with_events(base, SLS)

    plans = [e["data"]["data"] for e in events if e["event"] == "plan"]
    second = [p for p in plans if p["round"] == 2]
    assert second and second[0]["source"] == "entities"
    queries = second[0]["sub_questions"]
    assert "RS-25" in queries[0]  # the best-ranked follow-up is the bridge
    for query in queries:
        assert not any(word in query.lower() for word in SITE_AND_HEADLINE), query
        assert query.split()[0] not in {"NASA", "Seeking", "The"}, query
    # The evidence holds the answer, and the confidence says so.
    assert any("RS-25" in p["text"] for p in result["evidence"])
    assert result["confidence"] >= 0.5


def test_evidence_that_does_not_answer_keeps_the_confidence_low(make_settings, serve_searcher):
    base = serve_searcher(make_settings())
    _, result = _finished_with_events(base, UNANSWERED)
    assert result["evidence"]  # the testbed found pages, about other things
    assert result["confidence"] <= 0.3


# --- the ranking itself, on passages written here -----------------------------------------


def _page(title: str, text: str, url: str = "https://www.thespacereview.com/article/1") -> Passage:
    return Passage(url, title, text, "page")


def test_site_names_headline_words_and_the_questions_own_names_are_no_bridges():
    passages = [
        _page(
            "The Space Review: Seeking a bigger role for a big rocket",
            "Earlier this month, NASA announced a milestone for its big rocket. The stage "
            "stands at the Michoud Assembly Facility in New Orleans. Workers completed "
            "installation of the four RS-25 engines into the rocket's core stage of the SLS. "
            "The Space Review covered it in November.",
        )
    ]
    bridges = rank_bridges(SLS, passages, [SLS], 5)
    names = [b.name for b in bridges]
    assert names[0] == "RS-25"
    assert not {"The Space Review", "Space Review", "Seeking", "Earlier", "SLS", "November"} & set(
        names
    )
    assert bridge_query(bridges[0]).startswith("RS-25")


def test_a_name_that_extends_the_questions_own_words_keeps_only_what_is_new():
    question = (
        "Alfred Balk served as the secretary of the Committee on the Employment of Minority "
        "Groups in the News Media under which United States Vice President?"
    )
    passages = [
        _page(
            "Alfred Balk",
            "Alfred Balk served as secretary of the Committee on the Employment of Minority "
            "Groups in the News Media under United States Vice President Nelson Rockefeller.",
            "http://127.0.0.1/hotpotqa/page/1",
        )
    ]
    names = [b.name for b in rank_bridges(question, passages, [question], 3)]
    assert names[0] == "Nelson Rockefeller"


def test_a_name_for_what_the_question_describes_outranks_a_bare_adjective():
    question = "Alexander Kerensky was defeated in a civil war that ended when?"
    passages = [
        _page(
            "Russian Civil War",
            "The Russian Civil War (Russian: November 1917 – October 1922) was a multi-party "
            "war in the former Russian Empire.",
            "http://127.0.0.1/hotpotqa/page/2",
        )
    ]
    names = [b.name for b in rank_bridges(question, passages, [question], 3)]
    assert names[0] == "Russian Civil War"


def test_the_kind_of_answer_a_question_asks_for():
    assert answer_kind("When was the album released?") == "date"
    assert answer_kind("Born in what year was the author?") == "date"
    assert answer_kind("How many inhabitants does the county have?") == "number"
    assert answer_kind(SLS) == "name"


def test_answer_support_needs_the_questions_terms_and_a_candidate_together():
    answer = _page("SLS", "Workers installed four RS-25 rocket engines into the SLS core stage.")
    unrelated = _page("Solar", "Installed solar capacity reached 1.64 GW in August.")
    assert answer_support(SLS, [answer]) == 1.0
    assert answer_support(SLS, [unrelated]) <= 0.2
    # The terms without a name the question lacks: no answer.
    no_name = _page("SLS", "The rocket engines were installed in the SLS core stage.")
    assert answer_support(SLS, [no_name]) == 0.0


def test_a_name_beside_the_questions_relation_outranks_one_listed_beside_its_names():
    question = "The football manager who recruited David Beckham managed which club?"
    passages = [
        _page(
            "The Class of '92",
            "The film follows the young footballers David Beckham, Nicky Butt and Ryan Giggs. "
            "They were recruited by the manager Alex Ferguson, a Scottish coach.",
            "http://127.0.0.1/hotpotqa/page/3",
        )
    ]
    names = [b.name for b in rank_bridges(question, passages, [question], 4)]
    assert names[0] == "Alex Ferguson"
    assert "Scottish" not in names  # what a name is, not one


# --- the second hop in the evidence ---------------------------------------------------------


def test_the_evidence_follows_the_first_hop_to_the_page_it_names(
    testbed, make_settings, serve_searcher
):
    """Two hops on the testbed's small encyclopedia (/hops): the film's page names its
    star, whose page holds the answer and none of the question's words. The evidence puts
    the star's page right after the film's, ahead of pages that hold "government position
    held" and nothing else of the question (evidence chosen by words alone puts them
    there), so the answer is in the first two passages, and a read page's snippet does
    not repeat it."""
    settings = make_settings(
        backends={"order": ["searxng"], "searxng": {"base_url": f"{testbed.base_url}/hops"}}
    )
    _, result = _finished_with_events(serve_searcher(settings), TWO_HOP_QUESTION)

    first_two = result["evidence"][:2]
    assert [p["title"] for p in first_two] == [FIRST_HOP, SECOND_HOP]
    assert any(TWO_HOP_ANSWER in p["text"] for p in first_two)
    assert all(p["kind"] == "page" for p in first_two)
    urls = [(p["url"], p["kind"]) for p in result["evidence"]]
    assert not [u for u, kind in urls if kind == "snippet" and (u, "page") in urls]


def test_a_page_links_to_another_by_naming_its_subject_as_a_name():
    assert page_subject("Kiss and Tell (1945 film)") == "Kiss and Tell"
    assert page_subject("Shirley Temple - Wikipedia") == "Shirley Temple"
    film = "Kiss and Tell is a 1945 film starring Shirley Temple as Corliss Archer."
    assert linked("Kiss and Tell (1945 film)", film, "Shirley Temple", "An actress.")
    # Named the other way round: the star's page names the film.
    assert linked("Shirley Temple", "She starred in Kiss and Tell.", "Kiss and Tell", "A film.")
    # A phrase in lower case is no name: "paper lanterns" does not name "Paper Lanterns".
    assert not linked("Paper Lanterns", "A film.", "Festival", "A night of paper lanterns.")


def test_the_next_hop_is_the_page_named_where_the_first_says_what_the_question_asks():
    # Three pages are linked to the remote's page; the program it was designed for is
    # named in the sentence that says what the question says, the successor and the
    # page whose name merely starts like it in passing. Both passing pages hold more of
    # the words the first page lacks ("other", "device"), which alone ranked them first.
    question = "What other device can control the program the Widget Remote was designed for?"
    pool = EvidencePool()
    pool.add(
        Passage(
            "http://t/remote",
            "Widget Remote",
            (
                "The Widget Remote is a remote control. It was designed to control the Lantern "
                "Row media program. It was replaced by the Glow Remote."
            ),
            "page",
        )
    )
    pool.add(
        Passage(
            "http://t/glow",
            "Glow Remote",
            "The Glow Remote is another device, the Widget Remote's successor.",
            "page",
        )
    )
    pool.add(
        Passage(
            "http://t/desk",
            "Widget Remote Desktop",
            "Widget Remote Desktop lets other device owners control computers.",
            "page",
        )
    )
    pool.add(
        Passage(
            "http://t/row",
            "Lantern Row (software)",
            "Lantern Row is media software, run by the keyboard's keys.",
            "page",
        )
    )
    chosen = [pool.passages[i].title for i in linked_passages(pool, 0, question, 2)]
    assert chosen == ["Lantern Row (software)", "Glow Remote"]
