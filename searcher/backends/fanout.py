"""The fan-out: every instance asked at once; the failures leave the others' answers."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field

from searcher.backends.base import BackendAnswer, BackendQuery
from searcher.backends.fallback import InstanceCall, Unexpected
from searcher.backends.runner import FailureLog
from searcher.errors import BackendError, BackendFailure
from searcher.pipeline.resilience import Deadline


@dataclass
class FanOutResult:
    answers: list[BackendAnswer]
    tried: list[str]
    failures: list[BackendFailure] = field(default_factory=list)


async def fan_out(
    call: InstanceCall, unexpected: Unexpected, names: Sequence[str], query: BackendQuery,
    deadline: Deadline, timeout_s: float, retries: int,
) -> FanOutResult:  # fmt: skip
    """Query every instance in ``names`` at once with ``call``; an empty answer is listed
    as ``no_results``, not as an answer."""
    failures = FailureLog()
    tasks = [
        asyncio.create_task(call(name, query, deadline, timeout_s, retries, failures.watch()))
        for name in names
    ]
    results = await asyncio.gather(*tasks, return_exceptions=True)
    answers: list[BackendAnswer] = []
    for name, result in zip(names, results, strict=True):
        if isinstance(result, BackendError):
            continue  # reported through its watch
        if isinstance(result, Exception):  # a bug: that backend's failure, not a 500
            failures.add(unexpected(name, result))
            continue
        if isinstance(result, BaseException):
            raise result
        if result.hits:
            answers.append(result)
        else:
            failures.add(BackendFailure.no_results(name))
    return FanOutResult(answers, list(names), failures.close())
