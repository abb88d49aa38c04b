"""The tools searcher offers to LLMs, ``web_search`` and ``fetch_page``: one definition
(name, description, JSON schema) shared by the MCP server and ``GET /v1/tools/openai``.

The schemas are also what tool arguments are validated against, so a client that builds
arguments from them cannot be refused for a reason the schema does not state.
``fetch_page`` arguments are the ``POST /v1/fetch`` body as they are; ``web_search``
arguments become a ``POST /v1/search`` body with ``search_body``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, get_args

from jsonschema import Draft202012Validator
from jsonschema.exceptions import best_match

from searcher.contract import (
    HTTP_URL,
    HTTP_URL_RULE,
    MAX_INT,
    MAX_QUERY_CHARS,
    MAX_SESSION_ID_CHARS,
    NOT_BLANK,
    SESSION_ID,
    Preset,
    SearchMode,
    TimeRange,
)
from searcher.errors import InvalidRequest

MAX_TOOL_RESULTS = 20
MAX_FETCH_CHARS = 200_000
MAX_DOMAINS = 50
# jsonschema's own message for a pattern quotes the regex; these say what is meant. The
# URL rule is POST /v1/fetch's own: the tool takes what the endpoint takes.
_PATTERN_MESSAGES = {NOT_BLANK: "must not be blank", HTTP_URL: f"must be {HTTP_URL_RULE}"}
# A value quoted in a message is cut to this: a 60,000-character query is not repeated.
_MAX_QUOTED = 200


@dataclass(frozen=True)
class ToolSpec:
    """One tool as an LLM sees it."""

    name: str
    description: str
    parameters: dict[str, Any]

    def validate(self, arguments: Any) -> None:
        """Raise ``InvalidRequest`` naming the first argument that breaks the schema."""
        error = best_match(Draft202012Validator(self.parameters).iter_errors(arguments))
        if error is None:
            return
        field = ".".join(str(part) for part in error.absolute_path) or "arguments"
        message = error.message
        if error.validator == "pattern":
            message = _PATTERN_MESSAGES.get(str(error.validator_value), message)
        elif error.validator in ("maxLength", "minLength", "maxItems", "minItems"):
            # jsonschema quotes the whole value; its size says enough.
            size = len(error.instance) if isinstance(error.instance, str | list) else None
            bound = "at most" if error.validator.startswith("max") else "at least"
            unit = "characters" if isinstance(error.instance, str) else "items"
            message = f"has {size} {unit}; {bound} {error.validator_value} allowed"
        if len(message) > _MAX_QUOTED:
            message = message[:_MAX_QUOTED] + "…"
        raise InvalidRequest(field, message)


def _domains(description: str) -> dict[str, Any]:
    return {
        "type": "array",
        "items": {"type": "string", "minLength": 1, "maxLength": 253},
        "maxItems": MAX_DOMAINS,
        "description": description,
    }


def web_search_spec(max_results: int = MAX_TOOL_RESULTS) -> ToolSpec:
    """The ``web_search`` tool; ``max_results`` is the most results a call may ask for
    (the server's ``limits.max_results``, up to ``MAX_TOOL_RESULTS``)."""
    return ToolSpec(
        name="web_search",
        description=(
            "Search the web and get a context pack: the top results (title, URL, snippet) "
            "ranked and numbered, ready to cite. mode=full also reads the top pages and "
            "includes the passages that answer the query. Use fetch_page to read one page "
            "in full."
        ),
        parameters={
            "type": "object",
            "properties": {
                "query": {
                    "type": "string",
                    "minLength": 1,
                    "maxLength": MAX_QUERY_CHARS,
                    "pattern": NOT_BLANK,
                    "description": "What to search for. Search operators (quotes, site:) "
                    "are passed to the search engine.",
                },
                "mode": {
                    "type": "string",
                    "enum": list(get_args(SearchMode)),
                    "default": "simple",
                    "description": "simple: snippets only (fast); full: also fetch the top "
                    "pages and include their most relevant passages.",
                },
                "max_results": {
                    "type": "integer",
                    "minimum": 1,
                    "maximum": min(MAX_TOOL_RESULTS, max_results),
                    "description": "How many results to return (default: the server's).",
                },
                "backend": {
                    "type": "string",
                    "default": "auto",
                    "description": "Search backend instance (as named in /v1/health); auto "
                    "uses the server's configured order.",
                },
                "time_range": {
                    "type": "string",
                    "enum": list(get_args(TimeRange)),
                    "description": "Only results from the last day, week, month or year.",
                },
                "include_domains": _domains(
                    "Keep only results on these domains (and their subdomains)."
                ),
                "exclude_domains": _domains("Drop results on these domains (and subdomains)."),
                "session_id": _session_id(
                    "Any name for this conversation or task: later searches with the same "
                    "session_id put results already shown to it below new ones (the best "
                    "result stays first)."
                ),
            },
            "required": ["query"],
            "additionalProperties": False,
        },
    )


def fetch_page_spec(default_max_chars: int) -> ToolSpec:
    """The ``fetch_page`` tool; ``default_max_chars`` is the server's ``mcp.max_output_chars``."""
    return ToolSpec(
        name="fetch_page",
        description=(
            "Read one web page: its main text as markdown (no navigation, ads or "
            "boilerplate). Long pages come in slices: when the result says there is more, "
            "call again with start_char set to the next_start_char it gives."
        ),
        parameters={
            "type": "object",
            "properties": {
                "url": {
                    "type": "string",
                    "minLength": 1,
                    "maxLength": 8192,
                    "pattern": HTTP_URL,
                    "description": "The page's http or https URL.",
                },
                "max_chars": {
                    "type": "integer",
                    "minimum": 1,
                    "maximum": MAX_FETCH_CHARS,
                    "default": min(default_max_chars, MAX_FETCH_CHARS),
                    "description": "Characters of text to return at most.",
                },
                "start_char": {
                    "type": "integer",
                    "minimum": 0,
                    "maximum": MAX_INT,
                    "default": 0,
                    "description": "Where in the page's text to start (for the next slice).",
                },
            },
            "required": ["url"],
            "additionalProperties": False,
        },
    )


def tool_specs(
    default_max_chars: int, max_results: int = MAX_TOOL_RESULTS
) -> tuple[ToolSpec, ToolSpec]:
    """Every tool, in the order they are listed."""
    return web_search_spec(max_results), fetch_page_spec(default_max_chars)


def openai_tools(
    default_max_chars: int, max_results: int = MAX_TOOL_RESULTS
) -> list[dict[str, Any]]:
    """The tools as OpenAI chat-completions tool definitions."""
    return [
        {
            "type": "function",
            "function": {
                "name": spec.name,
                "description": spec.description,
                "parameters": spec.parameters,
            },
        }
        for spec in tool_specs(default_max_chars, max_results)
    ]


# Each web_search argument's place in a ``POST /v1/search`` body (``mode`` defaults to
# simple); one table both ways: arguments to a body, a body's field back to its argument.
_BODY_FIELD = {
    "mode": "constraints.search_mode",
    "backend": "constraints.backend",
    "time_range": "constraints.time_range",
    "include_domains": "constraints.include_domains",
    "exclude_domains": "constraints.exclude_domains",
    "max_results": "budget.max_results",
    "session_id": "constraints.session_id",
}


def search_body(arguments: dict[str, Any], max_context_chars: int | None = None) -> dict[str, Any]:
    """The ``POST /v1/search`` body for ``web_search`` arguments; ``max_context_chars``
    bounds the context pack (the MCP server passes its output cap)."""
    body: dict[str, Any] = {
        "query": arguments["query"],
        "constraints": {"search_mode": arguments.get("mode", "simple")},
        "budget": {},
    }
    for argument, field in _BODY_FIELD.items():
        if arguments.get(argument) is not None:
            section, name = field.split(".")
            body[section][name] = arguments[argument]
    if max_context_chars is not None:
        body["budget"]["max_context_chars"] = max_context_chars
    return body


def search_argument(field: str) -> str:
    """The ``web_search`` argument a ``POST /v1/search`` field (as an error names it,
    ``constraints.include_domains.2``) comes from, so that a refusal names what the caller
    sent."""
    for argument, body_field in (*_BODY_FIELD.items(), ("query", "query.text")):
        if field == body_field or field.startswith(body_field + "."):
            return argument + field[len(body_field) :]
    return field


def _session_id(description: str) -> dict[str, Any]:
    """A ``session_id`` argument (``constraints.session_id`` of the request it makes)."""
    return {
        "type": "string",
        "minLength": 1,
        "maxLength": MAX_SESSION_ID_CHARS,
        "pattern": SESSION_ID,
        "description": description,
    }


def deep_research_spec() -> ToolSpec:
    """The ``deep_research`` tool (MCP only: it runs for tens of seconds, reporting progress
    through MCP progress notifications)."""
    return ToolSpec(
        name="deep_research",
        description=(
            "Research a question over several rounds of web searches and page reading "
            "(sub-questions, follow-ups through the people, places and works the evidence "
            "names), then get a report with [n] citations and its numbered sources. Takes "
            "tens of seconds; use web_search for a quick lookup."
        ),
        parameters={
            "type": "object",
            "properties": {
                "query": {
                    "type": "string",
                    "minLength": 1,
                    "maxLength": MAX_QUERY_CHARS,
                    "pattern": NOT_BLANK,
                    "description": "The question to research.",
                },
                "preset": {
                    "type": "string",
                    "enum": list(get_args(Preset)),
                    "default": "balanced",
                    "description": "How far to go: minimal (1 round, 5 pages) to full "
                    "(5 rounds, 15 pages).",
                },
                "session_id": _session_id(
                    "The conversation or task this research belongs to (web_search's "
                    "session_id): pages already shown to it are read after new ones, and "
                    "the report's sources count as shown."
                ),
            },
            "required": ["query"],
            "additionalProperties": False,
        },
    )


MAX_CRAWL_TOOL_PAGES = 50


def crawl_site_spec() -> ToolSpec:
    """The ``crawl_site`` tool (MCP only: a crawl job run inline, each page a progress
    notification); its arguments are a ``POST /v1/crawl`` body's."""
    return ToolSpec(
        name="crawl_site",
        description=(
            "Read a website's pages, breadth first from a URL on the same site (robots.txt "
            "honoured, duplicates skipped), and get each page's main text. Give a query to "
            "follow the links that match it first. Use fetch_page for one page."
        ),
        parameters={
            "type": "object",
            "properties": {
                "url": {"type": "string", "minLength": 1, "maxLength": 2048,
                        "pattern": HTTP_URL, "description": "Where to start."},
                "query": {"type": "string", "minLength": 1, "maxLength": 500,
                          "description": "What to look for: matching links are followed first."},
                "max_depth": {"type": "integer", "minimum": 0, "maximum": 5, "default": 1,
                              "description": "Link hops from the start page."},
                "limit": {"type": "integer", "minimum": 1, "maximum": MAX_CRAWL_TOOL_PAGES,
                          "default": 10, "description": "Pages read at most."},
                "select_paths": {"type": "array", "maxItems": 20,
                                 "items": {"type": "string", "minLength": 1, "maxLength": 200},
                                 "description": "Regular expressions; a page's path must "
                                 "match one."},
            },
            "required": ["url"],
            "additionalProperties": False,
        },
    )  # fmt: skip


def mcp_tool_specs(
    default_max_chars: int, max_results: int = MAX_TOOL_RESULTS
) -> tuple[ToolSpec, ...]:
    """The tools the MCP server lists: every tool, deep_research and crawl_site."""
    return (*tool_specs(default_max_chars, max_results), deep_research_spec(), crawl_site_spec())
