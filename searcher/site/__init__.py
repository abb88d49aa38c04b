"""Whole sites: the URLs of a site found from its sitemaps and links (``POST /v1/map``)."""
