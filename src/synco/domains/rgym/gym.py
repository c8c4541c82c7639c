"""The parent side of reasoning-gym's worker process (:mod:`synco.domains.rgym._worker`): generation and scoring
with a deadline each, a killed and restarted child after a timeout, and counts of what failed.

The line protocol and the process handling are the math-verify worker's (:mod:`synco.grading.worker`); this class
adds only reasoning-gym's three requests. It never raises on a generator's or scorer's failure: a generation that
fails is a :class:`GymFailure` (the card is rejected with its code), a score that fails is 0 with its status.
"""

from __future__ import annotations

import threading
import weakref
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from synco.grading.worker import _WorkerGone, _WorkerLate, _WorkerProcess

WORKER_SCRIPT = Path(__file__).with_name("_worker.py")
STARTUP_TIMEOUT = 120.0
"""Seconds the worker may take to import reasoning-gym (and describe every family)."""


class GymFailure(Exception):
    """A generation or description the worker could not do: ``code`` is ``generator_timeout`` or ``generator_error``."""

    def __init__(self, code: str, detail: str = "") -> None:
        super().__init__(f"{code}: {detail}" if detail else code)
        self.code, self.detail = code, detail


@dataclass(frozen=True)
class Score:
    """A scorer's verdict on one answer: ``value`` in [0, 1] and how the call went (``ok``, ``error``, ``timeout``)."""

    value: float
    status: str
    detail: str = ""


class Gym:
    """One reasoning-gym worker, started on first use; thread-safe (one request at a time). The worker stops on
    :meth:`close`, or when the Gym is dropped (a finished run that is not closed leaves no ~1 GB process behind)."""

    def __init__(self, memory_mb: int = 2048, timeout_s: float = 5.0) -> None:
        self.memory_mb, self.timeout_s = memory_mb, timeout_s
        self.failures: Counter[str] = Counter()
        """Failed calls by ``<op>_<status>`` (``score_error``, ``generate_timeout``, ...), for the run's metrics."""
        self._worker: _WorkerProcess | None = None
        self._finalizer: weakref.finalize | None = None
        self._lock = threading.Lock()

    def _call(self, payload: dict[str, Any], timeout: float) -> dict[str, Any]:
        """One request; a late or dead worker is killed (restarted on the next call) and reported as a timeout."""
        with self._lock:
            try:
                if self._worker is None:
                    self._worker = _WorkerProcess(self.memory_mb, script=WORKER_SCRIPT)
                    self._finalizer = weakref.finalize(self, _WorkerProcess.kill, self._worker)
                    self._worker.wait_ready(STARTUP_TIMEOUT)
                reply = self._worker.call(dict(payload, budget=timeout), timeout + 2.0)
            except (_WorkerLate, _WorkerGone, ValueError) as exc:
                self.close_locked()
                return {"status": "timeout", "detail": type(exc).__name__}
        if reply.get("status") != "ok":
            self.failures[f"{payload['op']}_{reply.get('status')}"] += 1
        return reply

    def describe(self) -> dict[str, Any]:
        """Every family's config fields (with defaults) and curriculum attributes, as the worker reads them."""
        reply = self._call({"op": "describe"}, STARTUP_TIMEOUT)
        if reply.get("status") != "ok":
            raise GymFailure("describe_failed", str(reply.get("detail", "")))
        return dict(reply["families"])

    def generate(self, family: str, config: dict[str, Any], seed: int) -> tuple[str, str]:
        """``(question, answer)`` of the item ``seed`` of ``family`` under ``config``; raises :class:`GymFailure`."""
        reply = self._call({"op": "generate", "family": family, "config": config, "seed": seed}, self.timeout_s)
        status = reply.get("status")
        if status != "ok":
            raise GymFailure("generator_timeout" if status == "timeout" else "generator_error",
                             str(reply.get("detail", ""))[:200])
        return str(reply["question"]), str(reply["answer"])

    def score(self, family: str, config: dict[str, Any], seed: int, answer: str) -> Score:
        """The family's own score of ``answer`` on that item; 0 with the status when the scorer fails."""
        reply = self._call({"op": "score", "family": family, "config": config, "seed": seed, "answer": answer},
                           self.timeout_s)
        if reply.get("status") != "ok":
            return Score(0.0, str(reply.get("status")), str(reply.get("detail", ""))[:200])
        return Score(float(reply["score"]), "ok")

    def close_locked(self) -> None:
        if self._finalizer is not None:
            self._finalizer()  # kills the worker, once
            self._finalizer = None
        self._worker = None

    def close(self) -> None:
        """Stop the worker (a later call starts a new one)."""
        with self._lock:
            self.close_locked()

    def __getstate__(self) -> dict[str, Any]:  # a copy in another process starts its own worker
        return {"memory_mb": self.memory_mb, "timeout_s": self.timeout_s}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["memory_mb"], state["timeout_s"])  # type: ignore[misc]
