"""What a chat's messages say to a search: the questions asked, in order, and the
sources earlier answers already showed (their URLs, as this server writes them under
"Sources:", or as any other assistant wrote them).

The deterministic fallback of condensation lives here too: a follow-up that refers back
("and its population?") carries the words of the question before it, its names first
("capital of France" -> "France capital population"); a question that stands on its own
is searched as it is.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from searcher.chat.wire import ChatMessage
from searcher.contract import MAX_QUERY_CHARS, squeezed
from searcher.fetch.urls import page_key
from searcher.llm.rewrite import operators, without_operators
from searcher.text import STOP_WORDS

# Words that make a question lean on the one before it.
_REFERS_BACK_TEXT = """
    it its it's they them their theirs this that these those he him his she her hers
    there one ones same former latter
"""
_REFERS_BACK = frozenset(_REFERS_BACK_TEXT.split())
# Openings of a follow-up ("and ...", "what about ...").
_FOLLOW_UP_OPENINGS = ("and ", "also ", "but ", "then ", "what about ", "how about ")
# Words of a chat request, not of its topic.
_CHAT_WORDS_TEXT = """
    tell explain describe give show please know want find search look say
    anything something thing things many much
"""
_CHAT_WORDS = frozenset(_CHAT_WORDS_TEXT.split())
_WORD = re.compile(r"[^\W_]+(?:[-'.][^\W_]+)*")
# A URL in an answer's text; trailing punctuation is the sentence's, not the URL's.
_URL = re.compile(r"https?://[^\s<>{}\"'`]+", re.IGNORECASE)
_URL_TAIL = ".,;:!?*_"
# Brackets a URL may hold in pairs (``/wiki/Mercury_(planet)``); one that closes a pair
# opened before the URL (``(see https://a.example/x)``, Markdown's ``[a](https://...)``)
# is the sentence's, not the URL's.
_PAIRS = {")": "(", "]": "["}


@dataclass(frozen=True)
class Conversation:
    """The user's questions, oldest first (the last is the one to answer), the chat's
    earlier turns as ``(role, text)``, and the URLs earlier assistant messages showed."""

    questions: list[str]
    turns: Sequence[tuple[str, str]]
    shown_urls: list[str]

    @property
    def question(self) -> str:
        return self.questions[-1]

    @property
    def is_follow_up(self) -> bool:
        return len(self.questions) > 1


def read_conversation(messages: Sequence[ChatMessage]) -> Conversation:
    """The conversation in ``messages`` (the last one is the user's question, with text)."""
    # On one line, as a search takes it: a question led by whitespace or control
    # characters would otherwise be cut to a blank query.
    questions = [squeezed(m.text) for m in messages if m.role == "user"]
    questions = [q for q in questions if q]
    turns = [(m.role, m.text.strip()) for m in messages[:-1] if m.role in ("user", "assistant")]
    shown: list[str] = []
    for message in messages[:-1]:
        if message.role == "assistant":
            shown.extend(urls_in(message.text))
    return Conversation(questions, turns, list(dict.fromkeys(shown)))


def urls_in(text: str) -> list[str]:
    """The http(s) URLs in ``text``, in order; what only looks like one (a placeholder
    such as ``http://[your-host]:8080/``, which no URL parser reads) is left out."""
    return [url for url in map(_without_tail, _URL.findall(text)) if _readable(url)]


def _readable(url: str) -> bool:
    try:
        page_key(url)
    except ValueError:
        return False
    return True


def _without_tail(url: str) -> str:
    """``url`` without the sentence's punctuation and closing brackets after it."""
    while True:
        url = url.rstrip(_URL_TAIL)
        closing = url[-1:]
        if closing not in _PAIRS or url.count(closing) <= url.count(_PAIRS[closing]):
            return url
        url = url[:-1]


def topic_words(text: str) -> list[str]:
    """The words of ``text`` that say what it is about, as written, each once: stop
    words, pronouns and the words of asking left out."""
    found: list[str] = []
    for word in _WORD.findall(text):
        lower = word.lower()
        if lower in STOP_WORDS or lower in _REFERS_BACK or lower in _CHAT_WORDS:
            continue
        if lower not in {w.lower() for w in found}:
            found.append(word)
    return found


def refers_back(question: str) -> bool:
    """Whether ``question`` leans on the one before: it opens as a follow-up does, uses a
    pronoun for what was asked about, or names nothing of its own."""
    lower = " ".join(question.lower().split())
    if lower.startswith(_FOLLOW_UP_OPENINGS):
        return True
    if any(word in _REFERS_BACK for word in re.findall(r"[^\W_]+(?:'s)?", lower)):
        return True
    return len(topic_words(without_operators(question))) <= 1


def _is_name(word: str) -> bool:
    """A name or number: capitalised (a topic word, so no sentence's opening "What"), or
    holding a digit."""
    return word[:1].isupper() or any(c.isdigit() for c in word)


def carried_query(previous: str, question: str) -> str:
    """``question`` as a standalone query: when it refers back, the topic words of
    ``previous`` (names first) and then its own, and the search operators of both
    (``-wikipedia``, ``site:``, ``"a phrase"``) whole; else ``question`` as it is."""
    if not refers_back(question):
        return question.strip()[:MAX_QUERY_CHARS]
    carried = topic_words(without_operators(previous))
    names = [w for w in carried if _is_name(w)]
    others = [w for w in carried if w not in names]
    known = {w.lower() for w in carried}
    own = [w for w in topic_words(without_operators(question)) if w.lower() not in known]
    typed = dict.fromkeys(operators(previous) + operators(question))
    query = " ".join([*names, *others, *own, *typed]) or question.strip()
    return query[:MAX_QUERY_CHARS]


def fallback_query(conversation: Conversation) -> str:
    """The last question made standalone without a model: each question in turn carries
    the standalone form of the one before it."""
    query = conversation.questions[0].strip()[:MAX_QUERY_CHARS]
    for question in conversation.questions[1:]:
        query = carried_query(query, question)
    return query
