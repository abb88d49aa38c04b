"""Pages that need a browser, and pages that try to use one against us (issue 29):

- ``/js/written``              an empty ``<div id="root">``: the article is written by script
- ``/js/service-worker``       writes whether ``navigator.serviceWorker`` is there
- ``/js/spa/{route}``          a single-page app: one shell, the view chosen by the path
                               (``history.pushState`` links between views)
- ``/js/websocket?to=URL``     opens a WebSocket to ``URL`` (a private address), then writes
- ``/js/metadata``             ``fetch()``es the cloud metadata endpoint, writes what it got
- ``/js/never-loads``          writes its text, then waits for a script that never arrives
- ``/js/huge-dom?mb=50``       builds a DOM of ``mb`` megabytes of short paragraphs
                               (about 9,000 elements a megabyte)
- ``/js/redirect-browser?to=URL``  a shell to a static read; the browser is redirected to
                               ``URL`` (its User-Agent says HeadlessChrome)
- ``/js/user-agent``           writes the User-Agent it was asked with and the script's
- ``/js/hang``                 never answers
- ``/js/dialog?kind=alert``    writes its article, then opens an ``alert`` (``confirm``,
                               ``prompt``) that nobody answers
- ``/js/hostile-prototypes``   writes its article, then breaks ``NodeList.forEach`` and
                               ``outerHTML`` for every script of the page
- ``/js/shadow``               its article inside an open shadow root of a custom element
- ``/js/late?ms=900``          writes its article ``ms`` after the load, the network quiet
- ``/js/navigate?to=URL``      a shell whose script sends the browser on to ``URL``
- ``/js/big-head``             the logbook shell after 135 KB of inline CSS in its head
- ``/js/hanging-fetch?to=URL`` writes its article, then ``fetch()``es ``URL`` (default
                               ``/js/hang``)
"""

from __future__ import annotations

import json

from .asgi import HTML, Request, Router

router = Router()

WRITTEN_TEXT = (
    "The lighthouse keepers of the northern coast kept logbooks for two centuries.",
    "Each entry recorded the weather, the passing ships and the oil burned that night.",
    "Historians now read these logbooks to reconstruct storms that no instrument measured.",
    "The oldest surviving volume describes a gale in the winter of 1791 in careful detail.",
)
SPA_VIEWS = {
    "home": ("Welcome to Harbour Tools", "Harbour Tools builds tide tables for small ports."),
    "pricing": (
        "Pricing for Harbour Tools",
        "The harbour plan costs twelve euros a month and includes tide alerts for three ports.",
    ),
    "docs": (
        "Harbour Tools documentation",
        "Install the tide agent, register your port, and alerts arrive before each spring tide.",
    ),
}
WEBSOCKET_TEXT = "This page tried to open a socket to a private address and then wrote this."
METADATA_TEXT = "This page asked the metadata endpoint for credentials and then wrote this."
EARLY_TEXT = "This text was written before the page stalled on a script that never arrives."
LEAK_MARK = "LEAKED-METADATA"


def _shell(title: str, script: str, extra: str = "") -> bytes:
    page = (
        f"<!doctype html><html><head><meta charset='utf-8'><title>{title}</title></head>"
        f"<body><div id='root'></div>{extra}<script>{script}</script></body></html>"
    )
    return page.encode()


def _write_paragraphs(
    lines: tuple[str, ...] | list[str], heading: str, into: str = "document.getElementById('root')"
) -> str:
    return (
        f"const root = {into};"
        "const article = document.createElement('article');"
        f"const h = document.createElement('h1'); h.textContent = {json.dumps(heading)};"
        "article.appendChild(h);"
        f"for (const line of {json.dumps(list(lines))}) {{"
        "  const p = document.createElement('p'); p.textContent = line; article.appendChild(p);"
        "}"
        "root.appendChild(article);"
    )


def _logbook(then: str = "", lines: tuple[str, ...] = WRITTEN_TEXT) -> bytes:
    """The logbook article written by script into an empty shell, then ``then`` run."""
    return _shell("Lighthouse logbooks", _write_paragraphs(lines, "Lighthouse logbooks") + then)


@router.route("/js/written")
async def written(req: Request) -> None:
    await req.respond(200, _logbook(lines=WRITTEN_TEXT * 3), HTML)


@router.route("/js/service-worker")
async def service_worker(req: Request) -> None:
    # Written at once, not after a promise: what the page could see when its script ran.
    script = (
        "const s = document.createElement('p');"
        "s.textContent = 'serviceWorker' in navigator ? 'service workers: available'"
        " : 'service workers: absent';"
        "document.querySelector('article').appendChild(s);"
    )
    await req.respond(200, _logbook(script), HTML)


@router.route("/js/spa/{route}")
async def spa(req: Request) -> None:
    views = json.dumps(SPA_VIEWS)
    script = f"""
const views = {views};
function show(route) {{
  const [title, body] = views[route] || ['Not found', 'No such view.'];
  const root = document.getElementById('root');
  root.innerHTML = '';
  const nav = document.createElement('nav');
  for (const name of Object.keys(views)) {{
    const a = document.createElement('a'); a.href = '/js/spa/' + name; a.textContent = name;
    a.onclick = (e) => {{ e.preventDefault(); history.pushState(null, '', a.href); show(name); }};
    nav.appendChild(a);
  }}
  root.appendChild(nav);
  const main = document.createElement('main');
  const h = document.createElement('h1'); h.textContent = title; main.appendChild(h);
  for (let i = 0; i < 4; i++) {{
    const p = document.createElement('p'); p.textContent = body; main.appendChild(p);
  }}
  root.appendChild(main);
  document.title = title;
}}
window.onpopstate = () => show(location.pathname.split('/').pop());
show(location.pathname.split('/').pop());
"""
    await req.respond(200, _shell("Harbour Tools", script), HTML)


@router.route("/js/websocket")
async def websocket(req: Request) -> None:
    target = req.query.get("to", "ws://127.0.0.1:9/")
    script = (
        f"try {{ const ws = new WebSocket({json.dumps(target)}); }} catch (e) {{}}"
        + _write_paragraphs((WEBSOCKET_TEXT,) * 5, "Socket page")
    )
    await req.respond(200, _shell("Socket page", script), HTML)


@router.route("/js/metadata")
async def metadata(req: Request) -> None:
    script = (
        _write_paragraphs((METADATA_TEXT,) * 5, "Metadata page")
        + "fetch('http://169.254.169.254/latest/meta-data/iam/security-credentials/')"
        f".then(r => r.text()).then(t => {{ const p = document.createElement('p');"
        f" p.textContent = {json.dumps(LEAK_MARK)} + t; root.appendChild(p); }})"
        ".catch(() => {});"
    )
    await req.respond(200, _shell("Metadata page", script), HTML)


@router.route("/js/never-loads")
async def never_loads(req: Request) -> None:
    script = _write_paragraphs((EARLY_TEXT,) * 5, "Stalled page")
    # A parser-blocking script that never arrives: no load event, ever.
    page = _shell("Stalled page", script, "").replace(
        b"</body>", b"<script src='/js/hang'></script></body>"
    )
    await req.respond(200, page, HTML)


@router.route("/js/huge-dom")
async def huge_dom(req: Request) -> None:
    megabytes = int(req.query.get("mb", "50"))
    script = f"""
const root = document.getElementById('root');
const paragraph = '<p>' + 'word '.repeat(20) + '</p>';
const chunk = paragraph.repeat(1024 * 1024 / paragraph.length);
for (let i = 0; i < {megabytes}; i++) root.insertAdjacentHTML('beforeend', chunk);
"""
    await req.respond(200, _shell("Huge DOM", script), HTML)


@router.route("/js/redirect-browser")
async def redirect_browser(req: Request) -> None:
    if "HeadlessChrome" in (req.header("user-agent") or ""):
        await req.redirect(req.query.get("to", "http://127.0.0.1:9/"))
        return
    await req.respond(200, _shell("Redirecting", "document.title = 'x';"), HTML)


@router.route("/js/user-agent")
async def user_agent(req: Request) -> None:
    """Writes the User-Agent the page was asked with and the one its script sees."""
    asked = json.dumps(req.header("user-agent") or "")
    script = _write_paragraphs([], "Who is reading") + (
        "const said = (who, ua) => { const p = document.createElement('p');"
        "  p.textContent = who + ' user agent: ' + ua; root.appendChild(p); };"
        f"said('Asked with', {asked}); said('Script sees', navigator.userAgent);"
    )
    await req.respond(200, _shell("User agent", script), HTML)


@router.route("/js/hang")
async def hang(req: Request) -> None:
    await req.hang()


@router.route("/js/dialog")
async def dialog(req: Request) -> None:
    kind = req.query.get("kind", "alert")
    if kind not in ("alert", "confirm", "prompt"):
        kind = "alert"
    await req.respond(200, _logbook(f"{kind}('Welcome!');"), HTML)


@router.route("/js/hostile-prototypes")
async def hostile_prototypes(req: Request) -> None:
    script = (
        "NodeList.prototype.forEach = function () { throw new Error('no'); };"
        "Object.defineProperty(Element.prototype, 'outerHTML', "
        "{ get() { throw new Error('no'); } });"
        "document.getElementsByTagName = () => ({ length: 0 });"
    )
    await req.respond(200, _logbook(script), HTML)


@router.route("/js/shadow")
async def shadow(req: Request) -> None:
    write = _write_paragraphs(
        WRITTEN_TEXT, "Lighthouse logbooks", "this.attachShadow({mode: 'open'})"
    )
    script = (
        f"class LogBook extends HTMLElement {{ constructor() {{ super(); {write} }} }}"
        "customElements.define('log-book', LogBook);"
        "document.getElementById('root').appendChild(document.createElement('log-book'));"
    )
    await req.respond(200, _shell("Lighthouse logbooks", script), HTML)


@router.route("/js/late")
async def late(req: Request) -> None:
    delay = min(5000, max(0, int(req.query.get("ms", "900") or 0)))
    write = _write_paragraphs(WRITTEN_TEXT, "Lighthouse logbooks")
    script = f"setTimeout(() => {{ {write} }}, {delay});"
    await req.respond(200, _shell("Lighthouse logbooks", script), HTML)


@router.route("/js/navigate")
async def navigate(req: Request) -> None:
    to = req.query.get("to", "/js/written")
    script = f"location.replace({json.dumps(to)});"
    await req.respond(200, _shell("Moving on", script), HTML)


@router.route("/js/hanging-fetch")
async def hanging_fetch(req: Request) -> None:
    to = json.dumps(req.query.get("to", "/js/hang"))
    await req.respond(200, _logbook(f"fetch({to}, {{mode: 'no-cors'}}).catch(() => {{}});"), HTML)


@router.route("/js/big-head")
async def big_head(req: Request) -> None:
    css = "".join(f".c{n} {{ margin: {n % 7}px; color: #{n % 4096:03x}; }}\n" for n in range(4500))
    page = _logbook().replace(b"</title>", f"</title><style>{css}</style>".encode(), 1)
    await req.respond(200, page, HTML)
