"""``python -m tests.testbed [--port 8899] [--host 127.0.0.1]``: serve the testbed in the
foreground until interrupted. Prints ``testbed listening on http://127.0.0.1:PORT`` once
ready (``--port 0`` picks a free port)."""

from __future__ import annotations

import argparse
import asyncio
import sys

from uvicorn.config import LOGGING_CONFIG

from .app import TestbedApp
from .corpus import corpus
from .server import HOST, bind, make_server


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.testbed", description=__doc__)
    parser.add_argument("--port", type=int, default=8899)
    parser.add_argument("--host", default=HOST, help="only 127.0.0.1 is allowed")
    parser.add_argument("--log-limit", type=int, default=10_000, help="request log size")
    args = parser.parse_args(argv)
    if args.host != HOST:
        parser.error(f"the testbed only binds {HOST}")
    corpus().load()
    sock = bind(args.host, args.port)
    app = TestbedApp(log_limit=args.log_limit)
    server = make_server(app, log_config=LOGGING_CONFIG, on_shutdown=app.shutting_down.set)

    async def announce() -> None:
        while not server.started:
            await asyncio.sleep(0.005)
        port = sock.getsockname()[1]
        print(f"testbed listening on http://{HOST}:{port}", flush=True)

    async def serve() -> None:
        task = asyncio.ensure_future(announce())
        try:
            await server.serve(sockets=[sock])
        finally:
            task.cancel()

    config_loop = server.config.get_loop_factory()
    try:
        with asyncio.Runner(loop_factory=config_loop) as runner:
            runner.run(serve())
    except KeyboardInterrupt:  # uvicorn re-raises the SIGINT it handled, after shutdown
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
