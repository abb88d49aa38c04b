"""Bridge entities: the names a question's first-hop evidence leads to (the actor who
played the part, the engine fitted to the stage), ranked by what they add, and the
follow-up queries made from them. No LLM: names are runs of capitalised words or codes in
the best passages' sentences, kept when they are no site name, no headline word and not
the question's own words, and ranked by salience (the page's rank, how much of the question
the sentence naming them holds, a question word beside them) times novelty (how much of
the name is not the question's own names). What is already searched is not followed
again. A page already held is not held against its name: searching it with the rest of
the question is what finds the second page of a question about two (the dev half of
bench/research_recall.py, balanced, when it was tried: 0.889 halving such names' score,
0.933 not)."""

from __future__ import annotations

import functools
import re
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit

from searcher.research.evidence import Passage
from searcher.research.links import TITLE_PARTS, sentences
from searcher.text import STOP_WORDS, query_terms, stem, words

# A run of capitalised words (with small joiners inside): a name, a title, a place; or a
# code such as "RS-25" (it starts with a capital too).
NAME = re.compile(r"\b(?:[A-Z][\w'’.-]*)(?:\s+(?:of|the|de|von|van|for|and|&)?\s*[A-Z][\w'’.-]*)*")
# A name with the number that belongs to it: "Indianapolis 500", "Apollo 11", "Boeing 747".
_NUMBERED_NAME = re.compile(rf"(?:{NAME.pattern})(?:\s+\d+\b(?![.,:/-]\d))?")
_LOWER_WORD = re.compile(r"\b[a-z][a-z'’-]*\b")
_JOINERS = frozenset({"of", "the", "de", "von", "van", "for", "and", "&"})
# A name this long (letters) is a site's when the site's name holds it.
SITE_PART_MIN = 5
# A name found in a sentence that holds none of the question still counts this much: the
# first hop's page may name its bridge in a sentence of its own.
BASE_SALIENCE = 0.25
# A name with a question word right beside it is what the question's relation leads to.
BESIDE_BONUS = 0.5
# A name holding a word the question uses in lower case names what it describes.
DESCRIBED_FACTOR = 1.5
# Capitalised words that name nothing on their own: calendar words, and the generic nouns
# of institutions' names ("the Department of Health, Education, and Welfare").
_GENERIC_TEXT = """
    january february march april may june july august september october november
    december monday tuesday wednesday thursday friday saturday sunday department education
    welfare health government ministry committee council office university college school
    church party army navy force company club band album film series season award prize
    state city county district province river lake island mount north south east west
    northern southern eastern western central new old great general president king queen
    prince princess sir lord saint american english british french german
"""
_GENERIC = frozenset(_GENERIC_TEXT.split())
_DEMONYM_ENDINGS = ("ish", "ese", "ian")
# Question words kept beside the bridge name in its query: the name must stay what the
# search is about.
MAX_REST_WORDS = 4


@dataclass(frozen=True)
class Bridge:
    """A name to follow, its score, and the question's words its sentence lacked."""

    name: str
    score: float
    rest: tuple[str, ...]  # question words (as written) the bridge's sentence does not hold


def _stems(text: str) -> set[str]:
    return {stem(w) for w in words(text) if w not in STOP_WORDS}


def lower_case_words(passages: Iterable[Passage]) -> frozenset[str]:
    """Words the passages write in lower case: a capitalised one of them starts a
    sentence or a headline ("Earlier", "Seeking"); it names nothing."""
    found: set[str] = set()
    for p in passages:
        found |= _lower_case_words_of(p.text)
    return frozenset(found)


@functools.lru_cache(maxsize=4096)
def _lower_case_words_of(text: str) -> frozenset[str]:
    # Cached: a job asks again each round, for the passages it already had.
    return frozenset(_LOWER_WORD.findall(text))


def site_names(passage: Passage) -> frozenset[str]:
    """What names the site rather than the subject, letters only: the page title's parts
    but its longest ("The Space Review" of "The Space Review: Seeking a bigger role…"),
    and the host's name."""
    parts = [p.strip() for p in TITLE_PARTS.split(passage.title) if p.strip()]
    names = {_letters(p) for p in sorted(parts, key=len)[:-1]}
    host = (urlsplit(passage.url).hostname or "").removeprefix("www.")
    label = host.rsplit(".", 1)[0] if "." in host else host
    if label and not label.replace(".", "").isdigit():
        names.add(_letters(label))
    return frozenset(names - {""})


def _letters(text: str) -> str:
    return re.sub(r"[^a-z0-9]", "", text.lower())


def _trim(name: str, lower: Collection[str]) -> str:
    """The name without the sentence's or headline's words at its ends ("The", "With",
    "Earlier"), and without a possessive."""
    tokens = name.strip(" .'’-").split()
    while tokens and (tokens[0].lower() in STOP_WORDS or tokens[0].lower() in lower):
        tokens.pop(0)
    while tokens and tokens[-1].lower() in _JOINERS:
        tokens.pop()
    return " ".join(tokens)


def _unpossessed(name: str) -> str:
    for suffix in ("'s", "’s"):
        name = name.removesuffix(suffix)
    return name.strip(" .'’-")


@functools.lru_cache(maxsize=256)
def question_names(question: str) -> frozenset[str]:
    """The words the question capitalises after its first: parts of the names it holds."""
    return frozenset(w.lower() for w in re.findall(r"[\w'’.-]+", question)[1:] if w[:1].isupper())


def _core(name: str, named: frozenset[str]) -> str:
    """The name without the question's own name words at its ends ("United States Vice
    President Nelson Rockefeller" -> "Nelson Rockefeller"); "" when both ends are the
    question's (its subject, under a middle name: "Ralph Franklin Hefferline")."""
    tokens = name.split()
    if len(tokens) > 1 and tokens[0].lower() in named and tokens[-1].lower() in named:
        return ""
    while len(tokens) > 1 and tokens[0].lower() in named:
        tokens.pop(0)
    while len(tokens) > 1 and tokens[-1].lower() in named:
        tokens.pop()
    return " ".join(tokens)


def _is_site(name: str, sites: frozenset[str]) -> bool:
    # "Space Review" is the site "The Space Review", and of thespacereview.com.
    letters = _letters(name)
    if len(letters) < SITE_PART_MIN:
        return letters in sites
    return any(letters in site for site in sites)


def _novelty(name: str, question: str) -> float:
    """What following the name adds: the share of its words that are not the question's
    own names, raised when it names what the question describes in common words ("a civil
    war" -> "Russian Civil War", "a university" -> "Columbia University")."""
    terms = set(query_terms(name))
    if not terms:
        return 0.0
    named = set(query_terms(" ".join(question_names(question))))
    asked = set(query_terms(question))
    share = len(terms - named) / len(terms)
    if terms & (asked - named):
        share *= DESCRIBED_FACTOR
    return share


def _rest(question: str, context: str) -> tuple[str, ...]:
    """The question's words (as written, in order) whose stems the context lacks."""
    have = _stems(context)
    rest: dict[str, None] = {}
    for word in re.findall(r"[^\W_]+(?:[-.][^\W_]+)*", question):
        low = word.lower()
        if low in STOP_WORDS or len(low) < 2 or stem(low) in have:
            continue
        rest.setdefault(word, None)
    return tuple(rest)


@dataclass
class _Seen:
    salience: float
    first: int
    context: str
    gain: float


def _name_in(match: str, lower: Collection[str], named: frozenset[str]) -> str:
    """The name a capitalised run holds, or "" if it names nothing worth a search."""
    name = _unpossessed(_core(_unpossessed(_trim(match, lower)), named))
    if len(name) < 2 or name.isdigit() or name.lower() in _GENERIC:
        return ""
    if " " not in name and name.endswith(_DEMONYM_ENDINGS):
        return ""  # "Scottish", "Japanese", "Italian": what a name is, not one
    if name.split()[0].lower() in _GENERIC and name.split()[-1].isdigit():
        return ""  # "November 1917", "Season 3": a date or an episode, not a name
    return name


def _beside(sentence: str, found: re.Match[str], asked: set[str]) -> bool:
    """Whether a question word stands right beside the name (two words either side, stop
    words aside) or in it: "illustrated by Masakazu Katsura", "the four RS-25 engines" —
    the relation the question asks through."""
    before = [w for w in words(sentence[: found.start()]) if w not in STOP_WORDS][-2:]
    after = [w for w in words(sentence[found.end() :]) if w not in STOP_WORDS][:2]
    # A word of the name itself counts too: "Russian Civil War" for "a civil war".
    return any(stem(w) in asked for w in before + words(found.group()) + after)


def _in_sentences(
    passage: Passage, asked: set[str], named: frozenset[str], lower: Collection[str]
) -> dict[str, tuple[float, str]]:
    """The names of one passage, each with its best gain (the share of the question its
    sentence holds, more with a question word beside it) and that sentence."""
    sites = site_names(passage)
    title_stems = _stems(passage.title)
    # The words the question relates through ("recruited", "engines"), not its names: a
    # name listed beside "Beckham" is a teammate, not the manager who recruited him.
    relation = asked - set(query_terms(" ".join(named)))
    best: dict[str, tuple[float, str]] = {}
    for sentence in sentences(passage.text):
        held = (_stems(sentence) | title_stems) & asked
        share = len(held) / len(asked) if asked else 0.0
        opening = len(sentence) - len(sentence.lstrip(" \"'“‘("))
        for found in _NUMBERED_NAME.finditer(sentence):
            name = _name_in(found.group(), lower, named)
            if not name or _is_site(name, sites) or sentence[found.end() :].startswith(":"):
                continue  # "Hepburn: …", "Russian: …" label a spelling
            if found.start() == opening and " " not in name:
                continue  # "Workers completed…": a capital a sentence gives any word
            if set(query_terms(name)) <= asked:
                continue  # the question's own words
            gain = share + (BESIDE_BONUS if _beside(sentence, found, relation) else 0.0)
            if gain > best.get(name, (-1.0, ""))[0]:
                best[name] = (gain, f"{passage.title}\n{sentence}")
    return best


def _candidates(
    question: str, passages: Sequence[Passage], lower: Collection[str]
) -> dict[str, _Seen]:
    """Every name of the passages with its salience: per page (its snippet and its
    passages count once), its best rank's weight times the best gain of its sentences
    naming it."""
    asked = set(query_terms(question))
    named = question_names(question)
    by_page: dict[str, tuple[int, dict[str, tuple[float, str]]]] = {}
    for rank, passage in enumerate(passages):
        _, names = by_page.setdefault(passage.url, (rank, {}))
        for name, (gain, context) in _in_sentences(passage, asked, named, lower).items():
            if gain > names.get(name, (-1.0, ""))[0]:
                names[name] = (gain, context)
    seen: dict[str, _Seen] = {}
    for rank, names in by_page.values():
        weight = 1.0 / (1 + rank)
        for name, (gain, context) in names.items():
            entry = seen.setdefault(name, _Seen(0.0, len(seen), context, gain))
            entry.salience += weight * (BASE_SALIENCE + gain)
            if gain > entry.gain:
                entry.context, entry.gain = context, gain
    return seen


def rank_bridges(
    question: str,
    passages: Sequence[Passage],
    searched: Sequence[str],
    n: int,
    lower: Collection[str] = frozenset(),
) -> list[Bridge]:
    """The ``n`` names of ``passages`` (best first) most worth a search of their own,
    best first: salience × novelty; names already in a ``searched`` query are left out.
    ``lower``: words written in lower case anywhere in the job's passages (with those of
    ``passages``: a capitalised one of them names nothing). Deterministic: ties go to
    the name seen first."""
    done = [s.lower() for s in searched]
    ranked = []
    common = frozenset(lower) | lower_case_words(passages)
    for name, seen in _candidates(question, passages, common).items():
        if any(name.lower() in query for query in done):
            continue
        score = seen.salience * _novelty(name, question)
        if score > 0:
            ranked.append((score, seen.first, name, seen.context))
    ranked.sort(key=lambda r: (-r[0], r[1]))
    return [
        Bridge(name, round(score, 4), _rest(question, context))
        for score, _, name, context in ranked[:n]
    ]


def bridge_query(bridge: Bridge) -> str:
    """The search that follows ``bridge``: its name with the question's words its
    sentence did not hold (the next hop's half of the question)."""
    return " ".join([bridge.name, *bridge.rest[:MAX_REST_WORDS]])
