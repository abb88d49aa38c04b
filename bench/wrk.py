"""wrk (Debian package ``wrk``) as the benchmarks drive it, and what they read of its report.

A load generator in Python measures itself (an asyncio + httpx client tops out near 350
requests/s here), so every throughput figure comes from wrk in its own process.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

# Counts every status in each wrk thread; done() reads them back (threads are separate
# Lua states, so only plain values cross) and prints "STATUS <code> <count>" lines.
COUNT_STATUSES = """
local threads = {}
function setup(thread) table.insert(threads, thread) end
function response(status, headers, body)
  local key = "s" .. status
  _G[key] = (_G[key] or 0) + 1
end
function done(summary, latency, requests)
  for _, thread in ipairs(threads) do
    for code = 100, 599 do
      local n = thread:get("s" .. code)
      if n then io.write(string.format("STATUS %d %d\\n", code, n)) end
    end
  end
end
"""


def run(
    url: str,
    *,
    body: dict | None = None,
    seconds: float,
    connections: int,
    threads: int = 1,
    headers: dict[str, str] | None = None,
    lua: str = "",
    timeout_s: float | None = None,
) -> str:
    """wrk's report of ``seconds`` of load on ``url`` (a POST of ``body`` as JSON, else a
    GET), with ``lua`` appended to the request script."""
    if shutil.which("wrk") is None:
        raise SystemExit("wrk is not installed: apt-get install wrk")
    script = []
    if body is not None:
        script += ['wrk.method = "POST"', f"wrk.body = {json.dumps(json.dumps(body))}"]
        script.append('wrk.headers["Content-Type"] = "application/json"')
    script += [
        f"wrk.headers[{json.dumps(k)}] = {json.dumps(v)}" for k, v in (headers or {}).items()
    ]
    extra = ["--timeout", f"{timeout_s:g}s"] if timeout_s else []
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "load.lua"
        path.write_text("\n".join(script) + "\n" + lua)
        return subprocess.run(
            ["wrk", f"-t{threads}", f"-c{connections}", f"-d{seconds:g}s", "--latency",
             *extra, "-s", str(path), url],
            capture_output=True, text=True, check=True,
        ).stdout  # fmt: skip


def requests_per_s(report: str) -> float:
    found = re.search(r"Requests/sec:\s+([\d.]+)", report)
    return float(found[1]) if found else float("nan")


def latency_ms(report: str, label: str) -> float:
    """A latency percentile of the report (``"50%"``, ``"99%"``) in milliseconds."""
    found = re.search(rf"^\s*{re.escape(label)}\s+([\d.]+)(us|ms|s)\s*$", report, re.M)
    if not found:
        return float("nan")
    value, unit = float(found[1]), found[2]
    return value / 1000 if unit == "us" else value * 1000 if unit == "s" else value


def non_2xx(report: str) -> int:
    found = re.search(r"Non-2xx or 3xx responses: (\d+)", report)
    return int(found[1]) if found else 0


def statuses(report: str) -> dict[int, int]:
    """Every status and its count (the report of a run with ``lua=COUNT_STATUSES``)."""
    return {int(code): int(n) for code, n in re.findall(r"^STATUS (\d+) (\d+)$", report, re.M)}


def socket_errors(report: str) -> str:
    found = re.search(r"Socket errors: (.*)", report)
    return found[1] if found else "none"
