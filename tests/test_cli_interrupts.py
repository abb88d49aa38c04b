"""Ctrl-C at any moment of a command: one line, exit 130 (README), never a traceback nor
click's "Aborted!" with exit 1, the code of every backend failing."""

import os
import signal
import subprocess
import sys
import time
from importlib.metadata import entry_points
from pathlib import Path

import pytest

SEARCHER = Path(sys.executable).with_name("searcher")


def test_the_searcher_command_is_the_interruptible_entry_point():
    (script,) = [e for e in entry_points(group="console_scripts") if e.name == "searcher"]
    assert script.value == "searcher.__main__:run"


def _wait_for_reader(fifo: Path, proc: subprocess.Popen, timeout_s: float = 60) -> int:
    """Open ``fifo`` for writing once ``proc`` has opened it for reading (it then waits
    for the config's text, inside the command); the caller closes the descriptor."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            return os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
        except OSError:  # ENXIO: no reader yet
            time.sleep(0.05)  # polling for the reader, bounded by the deadline above
    raise AssertionError(f"the command never read its config (exit {proc.poll()})")


@pytest.mark.parametrize("command", [["serve", "--port", "0"], ["search", "q"], ["config"]])
def test_ctrl_c_before_a_command_s_async_work_exits_130_in_one_line(tmp_path, command):
    # The config is a FIFO that never gets its text: the command waits, reading it, as it
    # would on a slow disk or the start-up probes, and Ctrl-C comes then.
    fifo = tmp_path / "searcher.yaml"
    os.mkfifo(fifo)
    proc = subprocess.Popen(
        [str(SEARCHER), *command, "--config", str(fifo)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    writer = None
    try:
        writer = _wait_for_reader(fifo, proc)
        proc.send_signal(signal.SIGINT)
        _, stderr = proc.communicate(timeout=30)
    finally:
        if writer is not None:
            os.close(writer)
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=20)
    assert proc.returncode == 130, stderr
    assert stderr.decode().splitlines() == ["searcher: interrupted"]


# Sends this process a real SIGINT when the command line's modules start loading (the
# first import of yaml), then runs the command as the `searcher` script does.
INTERRUPTED_LOAD = """
import os, signal, sys

class Interrupt:
    def find_spec(self, name, path=None, target=None):
        if name == "yaml":
            sys.meta_path.remove(self)
            os.kill(os.getpid(), signal.SIGINT)
        return None

sys.meta_path.insert(0, Interrupt())
sys.argv = ["searcher", "config"]
from searcher.__main__ import run
run()
"""


def test_ctrl_c_while_the_command_line_loads_exits_130_without_a_traceback():
    done = subprocess.run([sys.executable, "-c", INTERRUPTED_LOAD], capture_output=True, timeout=60)
    assert done.returncode == 130, done.stderr
    assert done.stderr.decode().splitlines() == ["searcher: interrupted"]
