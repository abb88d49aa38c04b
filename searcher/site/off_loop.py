"""The heavy parts of maps and crawls (parsing a sitemap or a page's links, matching the
client's patterns over thousands of URLs) run off the event loop, in a small pool of
their own: in asyncio's default pool, a few maps with slow patterns and long deadlines
would hold every thread that name lookups (``loop.getaddrinfo``) and other work wait on.
Here they wait on each other only, each within its own map's deadline.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

T = TypeVar("T")

SITE_THREADS = 2  # the machine's cores: more would only share them
_POOL = ThreadPoolExecutor(max_workers=SITE_THREADS, thread_name_prefix="site-work")


async def off_loop(work: Callable[..., T], *args: Any) -> T:
    """``work(*args)`` in the site pool."""
    return await asyncio.get_running_loop().run_in_executor(_POOL, work, *args)
