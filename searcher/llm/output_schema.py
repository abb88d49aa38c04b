"""A caller's JSON Schema (``output_schema``): checked once when the request arrives, then
used to validate the model's answers, with the real validator (``jsonschema``).

The schema's own ``$schema`` picks the draft (2020-12 when it names none). References
resolve inside the schema only: nothing is fetched (``jsonschema`` retrieves no remote
reference unless told to), so a ``$ref`` to a URL fails validation instead of reaching
the network. A schema is bounded in size and depth: it goes into every prompt.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError
from jsonschema.protocols import Validator
from jsonschema.validators import extend, validator_for
from referencing import Registry, Resource
from referencing.exceptions import Unresolvable
from referencing.jsonschema import DRAFT202012

from searcher.llm.schema_patterns import TIMED_KEYWORDS, pattern_problem, patterns_budget

# A schema is sent in every structured prompt: far above any response shape, far below a
# prompt the model could not read.
MAX_SCHEMA_CHARS = 20_000
MAX_SCHEMA_DEPTH = 20
# Validation errors shown (to the model for repair, to the caller on failure).
MAX_PROBLEMS = 10
MAX_PROBLEM_CHARS = 200


class SchemaRefused(ValueError):
    """The schema is not one searcher can use; the message says why (a 422 at the edge)."""


def _depth(value: Any, limit: int) -> int:
    """How deeply ``value`` nests, counted up to ``limit + 1`` (no further: a deep one
    is refused, not walked)."""
    stack, deepest = [(value, 1)], 0
    while stack:
        node, depth = stack.pop()
        deepest = max(deepest, depth)
        if deepest > limit:
            return deepest
        children = node.values() if isinstance(node, dict) else node
        if isinstance(node, dict | list):
            stack += [(child, depth + 1) for child in children]
    return deepest


def checked_schema(schema: Mapping[str, Any]) -> dict[str, Any]:
    """``schema`` if it is a valid JSON Schema searcher can validate against; else
    ``SchemaRefused`` saying what is wrong (too large, too deep, not a schema of its
    draft, a reference that does not resolve inside it)."""
    schema = dict(schema)
    size = len(json.dumps(schema, ensure_ascii=False))
    if size > MAX_SCHEMA_CHARS:
        raise SchemaRefused(f"schema of {size} characters is over {MAX_SCHEMA_CHARS}")
    if _depth(schema, MAX_SCHEMA_DEPTH) > MAX_SCHEMA_DEPTH:
        raise SchemaRefused(f"schema nested deeper than {MAX_SCHEMA_DEPTH} levels")
    if "$schema" in schema and not isinstance(schema["$schema"], str):
        # jsonschema looks the draft up by it before any check, and crashes on a number
        # or an object.
        raise SchemaRefused("$schema must be a string: the URI of a JSON Schema draft")
    cls = validator_for(schema, default=Draft202012Validator)
    try:
        cls.check_schema(schema)
    except SchemaError as exc:
        where = "/".join(str(p) for p in exc.path)
        raise SchemaRefused(
            f"not a valid JSON Schema: {exc.message}" + (f" (at /{where})" if where else "")
        ) from None
    _check_references(schema)
    _check_patterns(schema)
    return schema


# Keywords whose values are data, not schemas: a "pattern" in them is no regex.
_DATA_KEYWORDS = frozenset({"const", "enum", "default", "examples"})


def _patterns(value: Any) -> list[str]:
    """Every regular expression of the schema: ``pattern`` values and the names of
    ``patternProperties``."""
    found, stack = [], [value]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            if isinstance(node.get("pattern"), str):
                found.append(node["pattern"])
            if isinstance(node.get("patternProperties"), dict):
                found += list(node["patternProperties"])
            stack += [v for k, v in node.items() if k not in _DATA_KEYWORDS]
        elif isinstance(node, list):
            stack += node
    return found


def _check_patterns(schema: dict[str, Any]) -> None:
    """Every pattern can be matched within a time (``schema_patterns``)."""
    for pattern in _patterns(schema):
        problem = pattern_problem(pattern)
        if problem is not None:
            raise SchemaRefused(f"pattern {pattern[:100]!r}: {problem}")


def _references(value: Any) -> list[str]:
    """Every ``$ref`` string in the schema."""
    found, stack = [], [value]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            ref = node.get("$ref")
            if isinstance(ref, str):
                found.append(ref)
            stack += list(node.values())
        elif isinstance(node, list):
            stack += node
    return found


def _check_references(schema: dict[str, Any]) -> None:
    """Every ``$ref`` points inside the schema (``#...``) and resolves there: a dangling
    one would otherwise show only when an answer reaches it, as the job's failure."""
    resource = Resource.from_contents(schema, default_specification=DRAFT202012)
    resolver = Registry().with_resource("", resource).resolver()
    for ref in _references(schema):
        if not ref.startswith("#"):
            raise SchemaRefused(f"$ref {ref!r}: only references inside the schema (#…) are used")
        try:
            resolver.lookup(ref)
        except Unresolvable:
            raise SchemaRefused(f"$ref {ref!r} does not resolve inside the schema") from None


def validator(schema: Mapping[str, Any]) -> Validator:
    """The validator of a ``checked_schema``, formats checked as its draft defines them."""
    cls = validator_for(schema, default=Draft202012Validator)
    timed = extend(cls, TIMED_KEYWORDS)  # the caller's patterns matched within a time
    return timed(schema, format_checker=cls.FORMAT_CHECKER)


def problems(checker: Validator, instance: Any) -> list[str]:
    """What is wrong with ``instance``, each as ``/json/pointer: message`` (at most
    ``MAX_PROBLEMS``, in a stable order); empty when it validates."""
    try:
        with patterns_budget():
            errors = sorted(
                checker.iter_errors(instance), key=lambda e: (list(map(str, e.path)), e.message)
            )
    except Unresolvable as exc:
        return [f"/: a $ref does not resolve: {exc}"[:MAX_PROBLEM_CHARS]]
    found = []
    for error in errors[:MAX_PROBLEMS]:
        where = "/" + "/".join(str(p) for p in error.path)
        found.append(f"{where}: {error.message}"[:MAX_PROBLEM_CHARS])
    return found
