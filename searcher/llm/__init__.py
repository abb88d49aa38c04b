"""The optional LLM steps, each with a deterministic fallback.

``client`` talks to any OpenAI-compatible endpoint, ``prompts`` holds every prompt,
``runner`` keeps each call within the request's budget and deadline, and each other module
is one step. ``snippet_rank`` is also a public function for thin clients.
"""

from searcher.llm.snippet_rank import (
    Candidate,
    RankResult,
    fallback_pick,
    rank_messages,
    snippet_rank,
    validate_pick,
)

__all__ = [
    "Candidate",
    "RankResult",
    "fallback_pick",
    "rank_messages",
    "snippet_rank",
    "validate_pick",
]
