"""Shared fixtures: the local web (``tests/testbed``) and its data."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.testbed import TestbedServer
from tests.testbed import aeb_ids as _aeb_ids
from tests.testbed import ground_truth as _ground_truth


@pytest.fixture(scope="session")
def testbed() -> Iterator[TestbedServer]:
    """The testbed server on 127.0.0.1 (one per session; see tests/testbed/)."""
    with TestbedServer() as server:
        yield server


@pytest.fixture
def testbed_clean(testbed: TestbedServer) -> TestbedServer:
    """The session testbed with an empty request log and fresh flaky counters."""
    testbed.reset()
    return testbed


@pytest.fixture(scope="session")
def aeb_ids() -> list[str]:
    """Sorted AEB page ids."""
    return _aeb_ids()


@pytest.fixture(scope="session")
def aeb_ground_truth() -> dict[str, dict[str, str]]:
    """``{id: {"url": ..., "articleBody": ...}}`` (do not mutate: shared)."""
    return _ground_truth()
