"""``synco train`` in a child process, killed with SIGKILL at a chosen moment (the kill -9 tests)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path


def train_then_kill(args: list[str], ready: Callable[[], bool], delay: float) -> int:
    """Run ``synco <args>``, wait until ``ready()`` (at most 120 s), then ``delay`` seconds, then kill its process
    group with SIGKILL; the child's return code (``-SIGKILL`` when it was killed, 0 when it finished first)."""
    proc = subprocess.Popen([sys.executable, "-m", "synco.cli", *args], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while not ready() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)
        time.sleep(delay)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    return proc.returncode


def tail(path: Path, n: int = 300) -> str:
    """The end of a run file, for an assertion message ("none" when it does not exist)."""
    return path.read_text()[-n:] if path.exists() else "none"
