"""The peak resident memory of a process's extraction workers, read from /proc while they
run (for tests and ``bench/extract_memory.py``).

A worker that runs into its bound dies, and a dead process's peak can no longer be read,
so a thread samples every worker's high-water mark (``VmHWM``, the peak so far, not the
resident size of the moment) every few milliseconds and keeps the largest seen per
process. What it reports is at most the true peak (the last moments of a worker that
died between two samples are not seen), never more: a reported peak above a bound proves
the bound broken, and a bound that holds can never be reported broken.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from types import TracebackType

# Extraction workers are forked from multiprocessing's fork server, whose command line
# they keep.
WORKER_MARK = b"multiprocessing.forkserver"
PROC = Path("/proc")


def descendants(root: int) -> set[int]:
    """Every process below ``root`` (children, their children, ...)."""
    children: dict[int, list[int]] = {}
    for entry in PROC.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:  # ended meanwhile
            continue
        # "pid (comm) state ppid ...": the name may hold spaces and parentheses.
        parent = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(parent, []).append(int(entry.name))
    found: set[int] = set()
    stack = [root]
    while stack:
        for child in children.get(stack.pop(), ()):
            if child not in found:
                found.add(child)
                stack.append(child)
    return found


def _is_worker(pid: int) -> bool:
    try:
        return WORKER_MARK in (PROC / str(pid) / "cmdline").read_bytes()
    except OSError:
        return False


def rss_mb(pid: int) -> tuple[float, float] | None:
    """The process's resident memory now and its peak so far, in MB (``None``: it is
    gone)."""
    found: dict[str, float] = {}
    try:
        for line in (PROC / str(pid) / "status").read_text().splitlines():
            if line.startswith(("VmRSS:", "VmHWM:")):
                found[line[:5]] = int(line.split()[1]) / 1024
    except OSError:
        return None
    if len(found) < 2:  # a zombie has no memory lines
        return None
    return found["VmRSS"], found["VmHWM"]


class WorkerPeaks:
    """While open, samples the peak RSS of the extraction workers below ``root`` (this
    process by default); ``peaks`` maps each worker seen to the largest peak seen, and
    ``together`` is the most the workers were seen to hold at one time (their resident
    sizes summed at each sample)."""

    def __init__(self, root: int | None = None, interval_s: float = 0.005) -> None:
        self.root = os.getpid() if root is None else root
        self.interval_s = interval_s
        self.peaks: dict[int, float] = {}
        self.together = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True, name="worker-peaks")

    def _sample(self) -> None:
        known: set[int] = set()
        rounds = 0
        while not self._stop.is_set():
            # Looking for new workers scans all of /proc: every 20th round only. A new
            # worker's high-water mark keeps what it reached before it was found.
            if rounds % 20 == 0:
                below = descendants(self.root)
                known = {pid for pid in known if pid in below}
                known |= {pid for pid in below - known if _is_worker(pid)}
            rounds += 1
            now = 0.0
            for pid in known:
                sizes = rss_mb(pid)
                if sizes is None:
                    continue
                now += sizes[0]
                self.peaks[pid] = max(sizes[1], self.peaks.get(pid, 0.0))
            self.together = max(self.together, now)
            self._stop.wait(self.interval_s)

    def highest(self) -> float:
        """The largest peak any worker reached (0 when none was seen)."""
        return max(self.peaks.values(), default=0.0)

    def __enter__(self) -> WorkerPeaks:
        self._thread.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self._stop.set()
        self._thread.join()
