"""A caller's regular expressions (``pattern``, ``patternProperties``) matched against
what the model wrote, within a time.

jsonschema matches them with ``re``, which cannot be stopped: a pattern that backtracks
catastrophically (``^([a-zA-Z]+ ?)+$`` against a long near miss such as "Jean Luc Picard
Enterprise Captain Starfleet-") held the event loop, and so every request of the process,
for hours. Here they are matched with the ``regex`` module, each match within
``PATTERN_TIMEOUT_S`` and all of one validation within ``PATTERNS_BUDGET_S``; a match not
decided in time is a validation error (sent back for repair like any other), as a slow
pattern of ``POST /v1/map`` admits nothing.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator, Mapping
from contextvars import ContextVar
from typing import Any

import regex
from jsonschema import Draft202012Validator
from jsonschema.exceptions import ValidationError
from jsonschema.protocols import Validator

from searcher.site.scope import MAX_REPEAT_COPIES, repeat_copies

PATTERN_TIMEOUT_S = 0.05
PATTERNS_BUDGET_S = 1.0
# jsonschema's own keyword, the same in every draft since 4, for the keys no pattern asks.
_ADDITIONAL = Draft202012Validator.VALIDATORS["additionalProperties"]
_UNTIL: ContextVar[float | None] = ContextVar("searcher_schema_patterns_until", default=None)


@contextlib.contextmanager
def patterns_budget() -> Iterator[None]:
    """One validation's time for its patterns (``PATTERNS_BUDGET_S``)."""
    token = _UNTIL.set(time.monotonic() + PATTERNS_BUDGET_S)
    try:
        yield
    finally:
        _UNTIL.reset(token)


def pattern_problem(pattern: str) -> str | None:
    """Why ``pattern`` cannot be matched here, or None. ``regex`` compiles counted repeats
    by copying them (``((a{100}){100}){100}`` is a million copies), so those are bounded."""
    copies = repeat_copies(pattern)
    if copies > MAX_REPEAT_COPIES:
        return (
            f"its counted repeats make {copies:,} copies when nested; at most {MAX_REPEAT_COPIES:,}"
        )
    try:
        regex.compile(pattern)
    except regex.error as exc:
        return f"not a regular expression: {exc}"
    return None


def matches(pattern: str, text: str) -> bool | None:
    """Whether ``pattern`` matches somewhere in ``text`` (``re.search``'s question); None
    when that was not decided in time."""
    until = _UNTIL.get()
    left = PATTERN_TIMEOUT_S if until is None else min(PATTERN_TIMEOUT_S, until - time.monotonic())
    if left <= 0:
        return None
    try:
        return regex.search(pattern, text, timeout=left, concurrent=True) is not None
    except TimeoutError:
        return None


def _undecided(text: str, pattern: str) -> ValidationError:
    shown = text if len(text) <= 80 else text[:80] + "…"
    return ValidationError(f"{shown!r} could not be matched against {pattern!r} in time")


def pattern(
    validator: Validator, patrn: str, instance: Any, schema: Mapping[str, Any]
) -> Iterator[ValidationError]:
    """The ``pattern`` keyword, timed."""
    if not validator.is_type(instance, "string"):
        return
    found = matches(patrn, instance)
    if found is None:
        yield _undecided(instance, patrn)
    elif not found:
        yield ValidationError(f"{instance!r} does not match {patrn!r}")


def _matched_keys(
    patterns: Mapping[str, Any], instance: Mapping[str, Any]
) -> tuple[set[str], ValidationError | None]:
    """The keys of ``instance`` some pattern matches, or the error of the first one not
    decided in time."""
    matched: set[str] = set()
    for patrn in patterns:
        for key in instance:
            found = matches(patrn, key)
            if found is None:
                return matched, _undecided(key, patrn)
            if found:
                matched.add(key)
    return matched, None


def pattern_properties(
    validator: Validator, patterns: Mapping[str, Any], instance: Any, schema: Mapping[str, Any]
) -> Iterator[ValidationError]:
    """The ``patternProperties`` keyword, timed."""
    if not validator.is_type(instance, "object"):
        return
    for patrn, subschema in patterns.items():
        for key, value in instance.items():
            found = matches(patrn, key)
            if found is None:
                yield _undecided(key, patrn)
                return
            if found:
                yield from validator.descend(value, subschema, path=key, schema_path=patrn)


def additional_properties(
    validator: Validator, allowed: Any, instance: Any, schema: Mapping[str, Any]
) -> Iterator[ValidationError]:
    """The ``additionalProperties`` keyword, its keys matched against the
    ``patternProperties`` beside it in time (jsonschema's own asks ``re``)."""
    patterns = schema.get("patternProperties")
    if not isinstance(patterns, Mapping) or not validator.is_type(instance, "object"):
        yield from _ADDITIONAL(validator, allowed, instance, schema)
        return
    matched, undecided = _matched_keys(patterns, instance)
    if undecided is not None:
        yield undecided
        return
    # The keys a pattern took count as named properties; no pattern is left to ask.
    named = {**schema.get("properties", {}), **dict.fromkeys(matched, True)}
    plain = {k: v for k, v in schema.items() if k != "patternProperties"} | {"properties": named}
    yield from _ADDITIONAL(validator, allowed, instance, plain)


TIMED_KEYWORDS = {
    "pattern": pattern,
    "patternProperties": pattern_properties,
    "additionalProperties": additional_properties,
}
