"""The client of the math-verify child process (:mod:`synco.grading._mathverify_worker`).

One persistent process per checker, spoken to by a line protocol with a deadline on every request, so a
hostile answer that makes sympy spin costs one timeout and a killed, restarted child.
"""

from __future__ import annotations

import json
import logging
import os
import select
import subprocess
import sys
import time
from pathlib import Path
from typing import Any


logger = logging.getLogger(__name__)


_WORKER_PATH = Path(__file__).with_name("_mathverify_worker.py")


# ---------------------------------------------------------------------------
# math-verify worker process
# ---------------------------------------------------------------------------


class _WorkerGone(Exception):
    """The worker process exited or its pipe broke."""


class _WorkerLate(Exception):
    """The worker did not answer before the deadline."""


class _WorkerProcess:
    """One child process and the line protocol to it: math-verify's (:mod:`synco.grading._mathverify_worker`) by
    default, or another standalone ``script`` speaking the same protocol (reasoning-gym's: ``synco.domains.rgym``)."""

    def __init__(self, memory_mb: int, warm_up: bool = True, script: Path = _WORKER_PATH) -> None:
        self.owner_pid = os.getpid()
        command = [sys.executable, "-I", str(script), "--memory-mb", str(memory_mb)]
        self.proc = subprocess.Popen(
            command if warm_up else command + ["--no-warm-up"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            close_fds=True,
        )
        self.ready = False
        self._buf = bytearray()
        self._next_id = 0

    def _readline(self, deadline: float) -> bytes:
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        poller = select.poll()
        poller.register(fd, select.POLLIN | select.POLLHUP | select.POLLERR)
        while True:
            nl = self._buf.find(b"\n")
            if nl >= 0:
                line = bytes(self._buf[:nl])
                del self._buf[: nl + 1]
                return line
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not poller.poll(min(max(1, int(remaining * 1000)), 60_000)):
                if time.monotonic() >= deadline:
                    raise _WorkerLate()
                continue
            chunk = os.read(fd, 65536)
            if not chunk:
                raise _WorkerGone("worker closed its output")
            self._buf += chunk

    def wait_ready(self, timeout: float) -> None:
        """Block until the worker has imported math-verify (raises _WorkerGone/_WorkerLate)."""
        if self.ready:
            return
        reply = json.loads(self._readline(time.monotonic() + timeout))
        if not reply.get("ready"):
            raise _WorkerGone(str(reply.get("detail", "worker failed to start")))
        self.ready = True

    def call(self, payload: dict[str, Any], timeout: float) -> dict[str, Any]:
        """Send one request and wait at most ``timeout`` seconds for its reply."""
        assert self.proc.stdin is not None
        self._next_id += 1
        payload = dict(payload, id=self._next_id)
        try:
            self.proc.stdin.write((json.dumps(payload) + "\n").encode("utf-8"))
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError) as exc:
            raise _WorkerGone(str(exc)) from exc
        deadline = time.monotonic() + timeout
        while True:
            reply = json.loads(self._readline(deadline))
            if reply.get("id") == self._next_id:
                return reply

    def kill(self) -> None:
        """Stop the process (only from the process that started it; a forked child leaves it alone)."""
        if os.getpid() != self.owner_pid:
            return
        try:
            self.proc.kill()
        except ProcessLookupError:
            pass
        for stream in (self.proc.stdin, self.proc.stdout):
            try:
                if stream is not None:
                    stream.close()
            except OSError:
                pass
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            logger.warning("worker %d did not exit after SIGKILL", self.proc.pid)
