"""How much memory one extraction worker may take, and the bound that holds it there.

The bound is an address-space limit (``RLIMIT_AS``) that each worker process sets on
itself, soft and hard alike, before it runs anything: an allocation past it fails
(``MemoryError`` in Python; PDFium and other C++ code abort), and an unprivileged process
cannot raise a hard limit again. Why not a cgroup: creating one needs write access to the
cgroup tree (root, or a delegated subtree from systemd), which a plain ``pip install`` on
a laptop or an unprivileged container does not have; ``setrlimit`` works everywhere Linux
and macOS run Python, costs nothing, and bounds each worker on its own, so one hostile
page cannot take memory that another client's page needed.

Address space is not resident memory: it counts what is mapped, touched or not. A warm
worker maps about 110 MB (trafilatura, lxml and PDFium loaded), of which about 75 MB is
resident, so the limit is an upper bound on a worker's resident memory with that much
room to spare.

A 2.6 KB PDF (a form-XObject chain 8 deep) took a worker to 1.9 GB before this bound, a
1 MB PDF holding one Flate stream that expands to 1 GB took 2.1 GB; see
``bench/extract_memory.py`` for both under the bound.
"""

from __future__ import annotations

import os
import resource
import signal
from pathlib import Path

MB = 1 << 20
# The automatic bound: this share of the machine's memory, split between the workers,
# kept between the floor and the cap. Half: the server itself, the state store and the
# operating system keep the rest. The floor leaves a warm worker (~110 MB mapped) room for
# a large ordinary page; the cap is far above what a real page takes (a 200-page text PDF
# or a 10 MB HTML page stays under a few hundred MB) and keeps a 64-core host from
# granting every hostile page gigabytes.
MACHINE_SHARE = 0.5
FLOOR_MB = 256
CAP_MB = 1024
# How a worker ends when an allocation fails outside Python: PDFium and C++'s
# ``std::bad_alloc`` abort (SIGABRT); the kernel's out-of-memory killer sends SIGKILL.
OUT_OF_MEMORY_SIGNALS = frozenset({signal.SIGABRT, signal.SIGKILL})
# Where a container's memory limit is (cgroup v2, then v1); "max" or a huge number: none.
_CGROUP_LIMITS = (
    Path("/sys/fs/cgroup/memory.max"),
    Path("/sys/fs/cgroup/memory/memory.limit_in_bytes"),
)


def machine_memory_bytes() -> int:
    """The memory this process may use: the physical memory, or the container's memory
    limit when that is lower."""
    physical = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    for path in _CGROUP_LIMITS:
        try:
            text = path.read_text().strip()
        except OSError:
            continue
        if text.isdigit() and 0 < int(text) < physical:
            return int(text)
    return physical


def worker_memory_mb(configured_mb: int, workers: int, machine_bytes: int) -> int:
    """The address-space bound of one worker, in MB: ``configured_mb`` when set (> 0),
    else ``MACHINE_SHARE`` of ``machine_bytes`` split between ``workers``, kept between
    ``FLOOR_MB`` and ``CAP_MB``."""
    if configured_mb > 0:
        return configured_mb
    share = int(machine_bytes * MACHINE_SHARE / max(1, workers) / MB)
    return max(FLOOR_MB, min(CAP_MB, share))


def bound_address_space(limit_bytes: int) -> None:
    """Limit the calling process's address space to ``limit_bytes`` (never above a hard
    limit already set), soft and hard, so that it cannot lift the bound itself."""
    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    if hard != resource.RLIM_INFINITY:
        limit_bytes = min(limit_bytes, hard)
    resource.setrlimit(resource.RLIMIT_AS, (limit_bytes, limit_bytes))


def ended_by_memory(exitcode: int | None) -> bool:
    """Whether a bounded worker's exit code says an allocation failed: it was ended by
    one of ``OUT_OF_MEMORY_SIGNALS`` (a negative exit code is the signal's number)."""
    return exitcode is not None and exitcode < 0 and -exitcode in OUT_OF_MEMORY_SIGNALS
