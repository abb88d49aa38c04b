"""A small site to map: robots.txt with rules and a ``Sitemap:`` line, a sitemap index
naming a plain and a gzip sitemap (and one on a metadata address), pages that are only
reachable by links, links to other schemes and hosts, and a private path robots.txt
disallows. Everything lives under ``/site/`` except ``/robots.txt``."""

from __future__ import annotations

import gzip

from .asgi import HTML, TEXT, Request, Router

router = Router()
XML = "application/xml"

# Found in the sitemaps (the private one is disallowed by robots.txt).
SITEMAP_PAGES = ("/site/", "/site/about", "/site/blog/1", "/site/private/secret")
SITEMAP_DOCS = ("/site/docs/a", "/site/docs/b")
# Found only by following links: /site/ -> links-only -> deep/1 -> deep/2.
LINK_CHAIN = ("/site/links-only", "/site/deep/1", "/site/deep/2")
METADATA_SITEMAP = "http://169.254.169.254/latest/sitemap.xml"


def _urlset(base: str, paths: tuple[str, ...]) -> bytes:
    entries = "".join(f"<url><loc>{base}{p}</loc></url>" for p in paths)
    return (
        '<?xml version="1.0" encoding="UTF-8"?>'
        f'<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">{entries}</urlset>'
    ).encode()


@router.route("/robots.txt")
async def robots(req: Request) -> None:
    text = (
        "User-agent: *\nDisallow: /site/private/\nDisallow: /crawl/private/\n\n"
        f"Sitemap: {req.base_url}/site/sitemap_index.xml\n"
    )
    await req.respond(200, text.encode(), TEXT)


@router.route("/site/sitemap_index.xml")
async def sitemap_index(req: Request) -> None:
    locs = (
        f"{req.base_url}/site/sitemap-pages.xml",
        f"{req.base_url}/site/sitemap-docs.xml.gz",
        METADATA_SITEMAP,
    )
    entries = "".join(f"<sitemap><loc>{loc}</loc></sitemap>" for loc in locs)
    body = (
        '<?xml version="1.0" encoding="UTF-8"?>'
        f'<sitemapindex xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">{entries}</sitemapindex>'
    )
    await req.respond(200, body.encode(), XML)


@router.route("/site/sitemap-pages.xml")
async def sitemap_pages(req: Request) -> None:
    await req.respond(200, _urlset(req.base_url, SITEMAP_PAGES), XML)


@router.route("/site/sitemap-docs.xml.gz")
async def sitemap_docs(req: Request) -> None:
    body = gzip.compress(_urlset(req.base_url, SITEMAP_DOCS))
    await req.respond(200, body, "application/gzip")


def _page(title: str, hrefs: tuple[str, ...]) -> bytes:
    links = "".join(f'<li><a href="{h}">{h}</a></li>' for h in hrefs)
    return f"<html><head><title>{title}</title></head><body><ul>{links}</ul></body></html>".encode()


_LINKS = {
    "": (
        "about", "links-only", "#top", "mailto:someone@example.org", "javascript:void(0)",
        "http://outside.example/elsewhere", "private/hidden", "/site/about#team",
        "http://[x/",  # no URL at all (urljoin raises): passed over, the rest still mapped
    ),
    "links-only": ("deep/1",),
    "deep/1": ("2",),
    "deep/2": ("/site/",),
}  # fmt: skip


@router.route("/site/{rest:path}")
async def site_page(req: Request) -> None:
    rest = req.params["rest"]
    await req.respond(200, _page(rest or "home", _LINKS.get(rest, ())), HTML)


@router.route("/site/")
async def site_root(req: Request) -> None:
    await req.respond(200, _page("home", _LINKS[""]), HTML)


# A page of many links that a backtracking pattern (``(a|aa)+$``) takes its whole time
# limit to refuse, each: a map or crawl that matched them one after another on the event
# loop held the server for 20 s.
SLOW_LINKS = 400


@router.route("/slow-links/")
async def slow_links(req: Request) -> None:
    hrefs = tuple(f"/slow-links/{'a' * 40}!{n}" for n in range(SLOW_LINKS))
    await req.respond(200, _page("slow links", hrefs), HTML)
