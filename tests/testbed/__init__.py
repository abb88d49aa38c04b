"""The local web that the tests and benchmarks run against (see DESIGN.md, "Testing: the
local web"): real AEB pages, SearXNG's and Brave's JSON APIs, OpenAI-compatible
embeddings and a scripted chat-completions API (``chat.py``), and misbehaving pages, all
served by one ASGI app on 127.0.0.1."""

from .app import LoggedRequest, TestbedApp, build_app
from .corpus import Corpus, aeb_ids, corpus, data_dir, ground_truth, shared_dir
from .server import TestbedServer

__all__ = [
    "Corpus",
    "LoggedRequest",
    "TestbedApp",
    "TestbedServer",
    "aeb_ids",
    "build_app",
    "corpus",
    "data_dir",
    "ground_truth",
    "shared_dir",
]
