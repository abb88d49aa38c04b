"""Rates written the way people say them: ``60/min``, ``1/s``, ``10000/day``; the one
parser for API keys' limits and backends' pacing."""

from __future__ import annotations

import re
from dataclasses import dataclass

from searcher.errors import InvalidRequest

_UNITS = {"s": 1, "sec": 1, "second": 1, "min": 60, "minute": 60, "h": 3600, "hour": 3600,
          "d": 86_400, "day": 86_400}  # fmt: skip
_RATE = re.compile(r"^\s*(\d{1,9})\s*/\s*([a-z]+)\s*$")


@dataclass(frozen=True)
class Rate:
    """``count`` per ``per_s`` seconds, written ``60/min``, ``10000/day``."""

    count: int
    per_s: int

    @classmethod
    def parse(cls, text: str, field: str = "rate") -> Rate:
        """``InvalidRequest`` naming ``field`` unless ``text`` is ``N/unit``."""
        match = _RATE.match(text.lower())
        written = match.group(2) if match else ""
        unit = written if written in _UNITS else written.removesuffix("s")
        if unit not in _UNITS or (unit != written and len(unit) == 1):  # "mins", not "ss"
            raise InvalidRequest(field, f"{text!r} is not a rate like 60/min, 10/s or 10000/day")
        count = int(match.group(1)) if match else 0
        if count < 1:
            raise InvalidRequest(field, "must allow at least 1")
        return cls(count, _UNITS[unit])

    def __str__(self) -> str:
        unit = {1: "s", 60: "min", 3600: "hour", 86_400: "day"}.get(self.per_s, f"{self.per_s}s")
        return f"{self.count}/{unit}"
