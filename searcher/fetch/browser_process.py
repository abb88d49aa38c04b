"""The headless Chromium process: found on the machine (never downloaded), started with
flags that keep it quiet and behind the guarded proxy, measured, and stopped.

Debian's ``chromium`` (or ``chromium-headless-shell``) is run as is. It talks CDP over its
debugging pipe (``searcher.fetch.cdp``): ``/bin/sh`` maps the child's stdin and stdout
onto fds 3 and 4 where ``--remote-debugging-pipe`` expects them, so no port is opened.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from searcher.errors import BrowserGone, RenderError
from searcher.fetch.cdp import CdpConnection

# Looked for on PATH in this order when browser.executable is not set.
BROWSER_NAMES = ("chromium", "chromium-headless-shell", "chromium-browser")
# The largest CDP message read (a page's HTML, JSON-escaped): beyond it the pipe is dropped.
_MAX_MESSAGE_BYTES = 256 * 1024 * 1024
_START_TIMEOUT_S = 30.0
_CLOSE_TIMEOUT_S = 3.0
# Where Chromium puts its singleton socket under $TMPDIR, and the longest path a unix
# socket may have (108 bytes with its NUL on Linux).
_CHROMIUM_SOCKET = "/org.chromium.Chromium.XXXXXX/SingletonSocket"
_UNIX_SOCKET_PATH_MAX = 107
# fd 3 <- the commands (our pipe on the child's stdin), fd 4 -> the answers (its stdout).
_PIPE_SHIM = 'exec "$@" 3<&0 4>&1 </dev/null >/dev/null'


def find_browser(executable: str | None) -> str | None:
    """The browser to run: ``executable`` (a path, or a name looked up on PATH), else the
    first of ``BROWSER_NAMES`` on PATH; None when there is none."""
    if executable:
        return shutil.which(executable)
    for name in BROWSER_NAMES:
        found = shutil.which(name)
        if found:
            return found
    return None


def browser_flags(
    proxy_port: int, user_data_dir: str, load_media: bool, user_agent: str | None = None
) -> list[str]:
    """Chromium's command line: headless, no sandbox (it runs as the service's user, often
    root in a container), nothing it would fetch on its own (updates, sync, safe-browsing
    lists), no QUIC or non-proxied WebRTC (UDP would leave past the proxy), every request
    through the guarded proxy, loopback included; ``user_agent`` (None: Chromium's own)."""
    flags = [
        "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync",
        "--disable-dev-shm-usage", "--disable-extensions", "--disable-breakpad",
        "--disable-client-side-phishing-detection", "--disable-domain-reliability",
        "--disable-default-apps", "--no-default-browser-check", "--mute-audio",
        "--deny-permission-prompts", "--password-store=basic", "--use-mock-keychain",
        "--disable-features=Translate,MediaRouter,OptimizationHints,AutofillServerCommunication",
        "--force-webrtc-ip-handling-policy=disable_non_proxied_udp",
        "--webrtc-ip-handling-policy=disable_non_proxied_udp",
        f"--proxy-server=http://127.0.0.1:{proxy_port}",
        "--proxy-bypass-list=<-loopback>",
        f"--user-data-dir={user_data_dir}",
        "--remote-debugging-pipe",
    ]  # fmt: skip
    if not load_media:
        flags.append("--blink-settings=imagesEnabled=false")
    if user_agent:
        flags.append(f"--user-agent={user_agent}")
    return [*flags, "about:blank"]


@dataclass
class BrowserProcess:
    """One running browser: its process, its CDP connection and its profile directory."""

    process: asyncio.subprocess.Process
    cdp: CdpConnection
    profile: str
    started: float = field(default=0.0)

    @property
    def alive(self) -> bool:
        """Whether the process runs and its pipe is open."""
        return self.process.returncode is None and not self.cdp.closed.is_set()

    def memory_bytes(self) -> int:
        """Resident memory of the browser and every process it started (renderers, GPU
        and network services), from /proc; 0 where /proc cannot tell."""
        return process_tree_memory(self.process.pid)

    async def close(self) -> None:
        """Ask the browser to close, then end its process group; remove its profile."""
        if self.alive:
            with contextlib.suppress(BrowserGone, RenderError, TimeoutError):
                async with asyncio.timeout(_CLOSE_TIMEOUT_S):
                    await self.cdp.send("Browser.close")
        await self.kill()

    async def kill(self) -> None:
        """End its process group at once; remove its profile."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.process.pid, signal.SIGKILL)  # its renderers and zygotes too
        with contextlib.suppress(ProcessLookupError):
            self.process.kill()
        await self.process.wait()
        await self.cdp.aclose()
        shutil.rmtree(self.profile, ignore_errors=True)


async def start_browser(
    executable: str, proxy_port: int, load_media: bool, user_agent: str | None = None
) -> BrowserProcess:
    """A fresh browser with a fresh profile, answering over its pipe; ``RenderError`` when
    it does not start."""
    profile = tempfile.mkdtemp(prefix="searcher-chromium-")
    # Chromium's own temporary folders (its singleton socket's) go inside the profile,
    # which is removed with it: in /tmp they were left behind, one a browser. Unless the
    # socket's path would be too long for a unix socket: then where they were.
    environment = dict(os.environ)
    if len(profile) + len(_CHROMIUM_SOCKET) < _UNIX_SOCKET_PATH_MAX:
        environment["TMPDIR"] = profile
    try:
        process = await asyncio.create_subprocess_exec(
            "/bin/sh", "-c", _PIPE_SHIM, "sh", executable,
            *browser_flags(proxy_port, profile, load_media, user_agent),
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.DEVNULL, start_new_session=True,
            limit=_MAX_MESSAGE_BYTES, env=environment,
        )  # fmt: skip
    except OSError as exc:
        shutil.rmtree(profile, ignore_errors=True)
        raise RenderError(executable, f"the browser could not start: {exc}") from exc
    assert process.stdin is not None and process.stdout is not None
    browser = BrowserProcess(process, CdpConnection(process.stdout, process.stdin), profile)
    try:
        async with asyncio.timeout(_START_TIMEOUT_S):
            await browser.cdp.send("Browser.getVersion")
    except (BrowserGone, RenderError, TimeoutError) as exc:
        await browser.close()
        raise RenderError(executable, "the browser did not start (no answer on its pipe)") from exc
    except asyncio.CancelledError:  # the read's time ran out while it started: not left running
        await browser.kill()
        raise
    return browser


def _parent_pids() -> dict[int, int]:
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError, ValueError, IndexError):
            stat = (entry / "stat").read_text()
            # The command name, in parentheses, may hold spaces: the fields follow its ")".
            parents[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    return parents


def _memory_bytes(pid: int) -> int:
    # PSS (shared pages divided among their sharers): Chromium's processes share most of
    # their code, which RSS would count once per process.
    for name, key in (("smaps_rollup", "Pss:"), ("status", "VmRSS:")):
        with contextlib.suppress(OSError, ValueError, IndexError):
            for line in Path(f"/proc/{pid}/{name}").read_text().splitlines():
                if line.startswith(key):
                    return int(line.split()[1]) * 1024
    return 0


def process_tree_memory(root: int) -> int:
    """Memory of ``root`` and all its descendants: proportional set size where /proc
    gives it, else resident (Linux; 0 elsewhere)."""
    parents = _parent_pids()
    tree, frontier = {root}, [root]
    while frontier:
        pid = frontier.pop()
        children = [child for child, parent in parents.items() if parent == pid]
        tree.update(children)
        frontier.extend(children)
    return sum(_memory_bytes(pid) for pid in tree)
