"""llama.cpp's own OpenAI-compatible server, through xllamacpp's prebuilt wheel, in a
process of its own until it is stopped (SIGTERM or SIGINT). ``tests/llama_server.py``
starts it; by hand::

    python -m tests.llama_serve --model M.gguf --port 8081 [--ctx 4096] [--threads 2]
"""

from __future__ import annotations

import argparse
import signal
import threading


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--model", required=True, help="the GGUF file")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--alias", default="", help="the model's name in /v1/models")
    parser.add_argument("--ctx", type=int, default=4096, help="context tokens")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()

    import xllamacpp  # the extension loads llama.cpp: only here, not for --help

    params = xllamacpp.CommonParams()
    params.model.path = args.model
    if args.alias:
        params.model_alias = args.alias
    params.n_ctx = args.ctx
    params.n_parallel = 1  # one slot: the whole context for the one call at a time
    params.cpuparams.n_threads = args.threads
    params.cpuparams_batch.n_threads = args.threads
    params.hostnames = ["127.0.0.1"]
    params.port = args.port
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    server = xllamacpp.Server(params)  # serves HTTP from its own threads
    try:
        stop.wait()
    finally:
        del server  # its destructor stops the HTTP threads and frees the model


if __name__ == "__main__":
    main()
