"""robots.txt: which paths a site lets us read and where its sitemaps are, parsed by
Protego (Scrapy's parser: Google's wildcard and longest-match rules)."""

from __future__ import annotations

from protego import Protego


class RobotsRules:
    """A site's robots.txt as read for ``user_agent``. No file (or a 4xx) allows
    everything; a file that failed with a server error refuses everything, as Google
    treats it."""

    def __init__(self, text: str | None, user_agent: str, *, refuse_all: bool = False) -> None:
        self._parsed = Protego.parse(text) if text else None
        self._user_agent = user_agent
        self._refuse_all = refuse_all

    def allows(self, url: str) -> bool:
        """Reading ``url`` is allowed."""
        if self._refuse_all:
            return False
        return self._parsed is None or bool(self._parsed.can_fetch(url, self._user_agent))

    def sitemaps(self) -> list[str]:
        """The ``Sitemap:`` lines, in order."""
        return [] if self._parsed is None else list(self._parsed.sitemaps)

    def crawl_delay(self) -> float | None:
        """The ``Crawl-delay`` for our agent, if the file sets one."""
        delay = None if self._parsed is None else self._parsed.crawl_delay(self._user_agent)
        return None if delay is None else float(delay)
