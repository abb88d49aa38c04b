"""A real SearXNG (built from ``../shared/searxng/``) on 127.0.0.1, for tests and benches.

Its engines are ``json_engine``s pointing at servers of our own (any URL answering
``{"results": [{"url", "title", "content"}]}``), so the real thing merges them its own way:
``engines`` an unordered set, ``positions`` in arrival order, its own ``score``.
Nothing here talks to anything but 127.0.0.1: the settings keep none of SearXNG's
internet engines, no autocomplete, and the plugin list of the shared example.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping
from pathlib import Path

import httpx
import platformdirs

from tests.shared_data import SEARXNG_SOURCE, missing_reason, shared_path

from .server import HOST, bind

SHARED = shared_path(SEARXNG_SOURCE)
BUILD_SCRIPT = SHARED / "build.sh"
# The same place tests/test_real_searxng.py builds into, so CI builds SearXNG once.
DEFAULT_CACHE = (
    Path(os.environ["SEARCHER_TEST_SEARXNG_DIR"])
    if os.environ.get("SEARCHER_TEST_SEARXNG_DIR")
    else Path(platformdirs.user_cache_dir("searcher-tests")) / "searxng"
)
READY_TIMEOUT_S = 60.0


def shared_missing() -> str | None:
    """Why a real SearXNG cannot be built here, or None."""
    if not BUILD_SCRIPT.is_file():
        return missing_reason(SEARXNG_SOURCE) or f"{BUILD_SCRIPT} is absent"
    return None


@contextlib.contextmanager
def build_lock(directory: Path) -> Iterator[None]:
    """Held while SearXNG is built into ``directory``: two test processes at once (pytest's
    workers, or two runs on one machine) would otherwise both start the script, and one
    would delete the half-built tree the other is installing into."""
    directory.parent.mkdir(parents=True, exist_ok=True)
    with open(directory.parent / f".{directory.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        yield


def build(directory: Path = DEFAULT_CACHE) -> Path:
    """Build SearXNG into ``directory`` once (the script is a no-op when it is there)."""
    with build_lock(directory):
        subprocess.run(
            ["bash", str(BUILD_SCRIPT), str(directory)],
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            timeout=900,
        )
    return directory


def settings_yaml(port: int, engines: Mapping[str, str], timeout_s: float = 5.0) -> str:
    """Settings: the shared loopback-only example with one ``json_engine`` per entry of
    ``engines`` (name -> URL containing ``{query}``)."""
    example = (SHARED / "settings-example.yml").read_text(encoding="utf-8")
    head = example.split("\nengines:\n", 1)[0].replace("__PORT__", str(port))
    head = head.replace("request_timeout: 3.0", f"request_timeout: {timeout_s}")
    blocks = []
    for index, (name, url) in enumerate(engines.items()):
        blocks.append(
            f"""  - name: {name}
    engine: json_engine
    shortcut: e{index}
    categories: [general]
    paging: false
    search_url: "{url}"
    results_query: results
    url_query: url
    title_query: title
    content_query: content
    timeout: {timeout_s}
    enable_http: true
"""
        )
    return head + "\nengines:\n" + "".join(blocks)


@contextlib.contextmanager
def running(directory: Path, engines: Mapping[str, str], timeout_s: float = 5.0) -> Iterator[str]:
    """A real SearXNG over ``engines`` (name -> URL with ``{query}``); yields its base URL.
    The process is ours: it is terminated (then killed) on exit."""
    sock = bind()
    port = sock.getsockname()[1]
    sock.close()  # SearXNG binds it itself; the race with another binder is harmless here
    with tempfile.TemporaryDirectory(prefix="searxng-") as tmp:
        settings = Path(tmp) / "settings.yml"
        settings.write_text(settings_yaml(port, engines, timeout_s), encoding="utf-8")
        log = (Path(tmp) / "searxng.log").open("wb")
        env = {**os.environ, "SEARXNG_SETTINGS_PATH": str(settings)}
        process = subprocess.Popen(
            [str(directory / "venv" / "bin" / "python"), "-m", "searx.webapp"],
            cwd=directory / "src",
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own group: the server's children go with it
        )
        base = f"http://{HOST}:{port}"
        try:
            _wait_ready(base, process, Path(tmp) / "searxng.log")
            yield base
        finally:
            # searx.webapp can leave a child behind its parent: end the whole group.
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                process.wait(timeout=10)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)  # a child that ignored SIGTERM
            log.close()


def _wait_ready(base: str, process: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            tail = log.read_text(errors="replace")[-2000:]
            raise RuntimeError(f"SearXNG exited with {process.returncode}:\n{tail}")
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(base + "/healthz", timeout=1.0).status_code == 200:
                return
        time.sleep(0.2)  # polling a child process's readiness: there is no event to wait on
    raise RuntimeError(f"SearXNG did not answer /healthz within {READY_TIMEOUT_S} s")


if __name__ == "__main__":  # python -m tests.testbed.real_searxng DIR: build only
    build(Path(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT_CACHE)
