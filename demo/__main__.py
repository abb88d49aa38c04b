"""``python -m demo`` (``make demo``): the demo web on 127.0.0.1:8890 and searcher serving
on 127.0.0.1:8080 against it, until Ctrl-C."""

from __future__ import annotations

import argparse
import contextlib
import socket
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import yaml

from demo.web import DemoServer

CONFIG = Path(__file__).with_name("searcher.yaml")
WEB_PORT = 8890


@contextlib.contextmanager
def config_for(web_port: int) -> Iterator[str]:
    """demo/searcher.yaml itself, or a copy pointed at another port of the demo web, kept
    while the demo runs (its banner names it) and removed after."""
    if web_port == WEB_PORT:
        yield str(CONFIG.relative_to(Path.cwd()) if CONFIG.is_relative_to(Path.cwd()) else CONFIG)
        return
    config = yaml.safe_load(CONFIG.read_text(encoding="utf-8"))
    config["backends"]["searxng"]["base_url"] = f"http://127.0.0.1:{web_port}"
    config["fetch"]["allowed_hosts"] = [f"127.0.0.1:{web_port}"]
    with tempfile.TemporaryDirectory(prefix="searcher-demo-") as folder:
        path = Path(folder) / "searcher.yaml"
        path.write_text(yaml.safe_dump(config), encoding="utf-8")
        yield str(path)


def banner(web: str, api: str, config: str) -> str:
    cli = ".venv/bin/searcher"
    return f"""
Demo web (SearXNG's JSON format and {len(list(_slugs()))} pages): {web}
searcher: {api}  (API docs: {api}/docs)

In another terminal, all offline:
  {cli} search "what is bm25" --config {config}
  {cli} search "why did stadia close" --mode full --max-results 3 --config {config}
  curl -s {api}/v1/search -H 'content-type: application/json' \\
       -d '{{"query": "okapi bm25", "constraints": {{"search_mode": "full"}}}}'
  {cli} research "how does bm25 rank documents" --config {config}
  .venv/bin/python -m demo.mcp_call "what is bm25" --url {api}/mcp   # an MCP client's tool call
  {cli} mcp --config {config}        # MCP on stdio, for agents that start their tools

Ctrl-C stops both.
"""


def _slugs() -> list[str]:
    text = Path(__file__).with_name("pages.txt").read_text(encoding="utf-8")
    return [line for line in text.splitlines() if line.startswith("=== ")]


def _taken(port: int) -> str | None:
    """Why searcher could not listen on 127.0.0.1:``port``, or None when it can."""
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds
        try:
            probe.bind(("127.0.0.1", port))
        except OSError as exc:
            return exc.strerror or str(exc)
    return None


def _other(port: int) -> int:
    return port + 1 if port < 65535 else 8081


def _refused(port: int, reason: str, option: str) -> int:
    print(f"demo: cannot listen on 127.0.0.1:{port}: {reason.lower()}; another port: "
          f".venv/bin/python -m demo {option}", file=sys.stderr)  # fmt: skip
    return 2


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m demo", description=__doc__)
    parser.add_argument("--port", type=int, default=8080, help="searcher's port")
    parser.add_argument("--web-port", type=int, default=WEB_PORT, help="the demo web's port")
    args = parser.parse_args(argv)
    # Before the banner: a port taken (llama.cpp's server defaults to 8080 too) is told
    # with the option of this command that moves it, not serve's --host/--port.
    taken = _taken(args.port)
    if taken:
        return _refused(args.port, taken, f"--port {_other(args.port)}")
    try:
        web = DemoServer(args.web_port)
    except OSError as exc:
        return _refused(
            args.web_port, exc.strerror or str(exc), f"--web-port {_other(args.web_port)}"
        )
    with web, config_for(web.port) as config:
        return _serve(web, args.port, config)


def _serve(web: DemoServer, port: int, config: str) -> int:
    from searcher.cli import main as searcher

    print(banner(web.base_url, f"http://127.0.0.1:{port}", config), file=sys.stderr)
    try:
        searcher(["serve", "--port", str(port), "--config", config])
    except SystemExit as exc:  # click ends every command so; Ctrl-C included (code 0)
        return exc.code if isinstance(exc.code, int) else 1
    except KeyboardInterrupt:
        return 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
