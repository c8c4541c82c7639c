"""Answer checking: decide whether a predicted answer is mathematically the same as a reference.

(:class:`AnswerChecker`, :func:`answers_match`, :func:`default_checker`.) Checking runs in two stages. A pure-Python *fast path* normalises both strings
(delimiters, ``\\left``, ``\\dfrac``, thousands separators, ``$``, units,
degrees, ``\\text{}``) and, when both sides are values it fully understands
(numbers, fractions, mixed numbers, percentages, scientific notation, ±∞,
tuples, sets, intervals, matrices of those, ``x = value`` equations, base-n
numerals, multiple-choice letters, short words), decides with exact
``Fraction`` arithmetic. Everything else goes to **math-verify**, which runs in
a persistent child process (:mod:`synco.grading._mathverify_worker`) so every call is
bounded by a wall-clock timeout from any thread, the child can be killed when
a hostile answer (``9^{9^{9^9}}``) makes sympy spin, and its memory is capped.
The timeout covers the whole call, waiting for the shared worker included
(``inf`` means :data:`MAX_TIMEOUT`); see :class:`AnswerChecker`.

Decisions (no false positives is the priority: a checker that calls a wrong
answer right poisons training):

* Integers and fractions compare exactly. A written decimal (``0.333333``,
  ``2.0107e-06``) equals an exact value when they differ by at most 1e-6
  relative *and* at most half a unit in the decimal's last written digit; two
  decimals must also agree to the finer one's last digit. So ``0.33 != 1/3``,
  ``0.333333 == 1/3``, ``1000000.5 != 1000001``, ``23634691.5 != 23634691.51``.
* Percent: ``50%`` equals ``0.5`` (its value) and ``50`` (the same number
  with the percent sign dropped, as answers to "what percent..." usually are).
  ``50%`` never equals ``5000`` or ``0.005``.
* ``1,000`` (and ``1{,}000``, ``1\\,000``, ``10,\\!080``, ``1 000`` with any space) is one thousand;
  ``1.000`` is one, so ``1,000 != 1.000``. A comma that is no thousands grouping is a decimal comma
  against a number (``1000,99`` = 1000.99, ``0,111`` = 0.111, ``3,5`` = 3.5, ``1 234,5``) and a list
  against a list (``3,5`` = ``3, 5``). Currency signs (``$``, ``€``, ``£``, ``¥``) are dropped.
* Tuples and intervals are ordered and bracket-sensitive (``(1,2) != [1,2]``,
  ``(1,2) != (2,1)``); sets and bare comma lists are unordered. A braced set never equals a
  bracketed pair either way round (``\\{1,3\\} != (1,3)``: an open interval or an ordered pair);
  a bare list is read as the set or the tuple on the other side. Inside sets, intervals, tuples,
  matrices and relations a decimal of at least :data:`APPROX_DIGITS` significant digits equals the
  exact value it correctly rounds (``(0.6, 2.6667]`` = ``(\\frac{3}{5}, \\frac{8}{3}]``, not ``2.67``).
* ``x = 5`` matches ``5`` (and ``5 = x``); ``x = 5`` does not match ``y = 5``. A reference equation
  that is no assignment (``7 = 11a + c``, ``a + 3z = 0``, ``x^2 + y^2 = 25``) is never matched by
  a prediction without ``=``: one side of it (``11a + c``, ``0``, ``25``) states nothing. Two
  equations with the same sides (swapped too) or the same solutions go to math-verify.
* Relations: ``>=``, ``\\geq``, ``\\geqslant``, ``≥`` are one symbol (likewise ``<=``, ``=<``, ``!=``,
  ``\\neq``); a linear relation or chain in one variable is compared as its solution set, so
  ``x \\ge 5`` = ``5 \\le x``, ``-x \\ge -1`` = ``x \\le 1``, ``2x + 1 > 5`` = ``x > 2`` and
  ``-2 \\le x \\le 7`` = ``x \\in [-2, 7]``; the interval ``[-2, 7]`` answers the reference
  ``-2 \\le x \\le 7``, but an inequality does not answer a reference in interval notation.
  Different variables never match.
* ``(A)``, ``A``, ``\\text{(A)}``, ``\\textbf{(A)} 12`` are all choice A.
* Units are dropped (``10\\text{ cm}`` == ``10``, ``60km/h``, ``150m^2``, ``1,000.99m²``) unless
  both sides carry different units (``5 cm != 5 km``). A lone letter against a number (``5m``)
  stays: it may be a variable. Degree marks are dropped.
* A base-n numeral (the base 2-36 written without a leading zero, the digits
  fitting it) predicted is read as its value: ``10_{3}`` answers ``3``, not
  ``10``. A reference written ``52_8`` also accepts its bare digits ``52`` (the
  base left implicit), never its decimal value ``42`` written bare. Any other
  decoration on a number that the fast path cannot read, namely subscripts
  (``1_000``, ``5_2``), primes (``5'``), ellipses (``2.5\\ldots``), digit groups
  written apart (``10 00``) or digits after ``!`` / ``%``, makes the answer
  wrong without asking math-verify, which reads those as the bare number.
  A list of two or more items never equals a single number (``5,5 != 5``). Unicode script
  digits are the scripts they show (``5²`` = 25, ``52₈`` is a base-8 numeral); commands that
  print nothing (``\\displaystyle``, ``\\limits``) and evaluation bars (``5\\Big|_{2}``) never hide
  a subscript from this rule.
* Matrices and vectors (``pmatrix``, ``bmatrix``, ``vmatrix`` (a determinant),
  ``array``) the fast path cannot settle go to math-verify; environment names
  are neither prose nor variables.
* ``rel_tol`` (:meth:`AnswerChecker.match`, :meth:`AnswerChecker.grade`,
  :func:`answers_match`; default 0 = the exact rules above) also accepts numbers
  within that relative difference, for benchmarks with rounded references
  (Minerva: ``1.6e-19`` vs ``1.602e-19`` at ``rel_tol=0.01``): plain numbers, in
  lists and matrices too, and constant expressions math-verify reads
  (``\\frac{\\pi}{3}`` vs ``1.047`` at ``0.001``). Never expressions with variables.
* math-verify runs without its own unit stripper (units are removed above, by these rules):
  it deletes trailing letters after a number, reading ``7 = 11a + c`` as ``7 = 11``.
* Every True from math-verify is checked numerically in the worker: constant
  expressions at 30 digits, expressions with variables at fixed sample points,
  so a sign or term math-verify misreads is vetoed (``1 - \\frac{1}{e}`` vs
  ``1 + \\frac{1}{e}``: bare math-verify on un-delimited text reads only the
  leading ``1`` of both; the worker wraps answers in ``$..$`` and checks anyway).
* Answers over :data:`MAX_ANSWER_CHARS` characters, or containing code-like
  text (``__``, ``import``, ``lambda`` without a backslash, backticks, ...), are
  wrong answers and never reach sympy. Invisible characters (zero-width,
  bidi, NUL) are removed and compatibility forms folded (NFKC) before that
  filter, and it runs again on the normalised answer. Nothing here evals model text; the
  worker only hands strings to latex2sympy's grammar-based parser.
"""

from __future__ import annotations

import logging
import math
import numbers
import os
import subprocess
import threading
import time
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from synco.grading.normalise import _NON_ANSWER_WORDS, _prepare, _Prepared, _to_latex
from synco.grading.values import _Choice, _DivZero, _parse_value, _Word
from synco.grading.equivalence import (
    _contains_opaque,
    _decorated_number,
    _is_prose,
    _one_side_of_equation,
    _same,
    _shapes_differ,
    _variables_differ,
)
from synco.grading.extract import BoxedPolicy, extract_answer_with_method, Extraction, ExtractMode
from synco.grading.worker import _WorkerGone, _WorkerLate, _WorkerProcess

logger = logging.getLogger(__name__)


DEFAULT_TIMEOUT = 2.0
MAX_TIMEOUT = 3600.0
"""The largest time bound a check takes, in seconds: ``float('inf')`` or a huge timeout means this."""


# ---------------------------------------------------------------------------
# Public checker
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class CheckerStats:
    """Counters of an :class:`AnswerChecker` since it was made."""

    n_calls: int
    n_fast_path: int
    n_math_verify: int
    n_timeouts: int
    n_errors: int
    n_rejected: int
    n_worker_starts: int


def _valid_timeout(value: object, name: str = "timeout") -> float:
    """``value`` as a time bound in seconds, at most :data:`MAX_TIMEOUT` (so ``inf`` or ``1e10`` mean a large cap).

    Zero, negative, NaN or non-numeric values raise ``ValueError`` naming ``name``.
    """
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(f"{name} must be a positive number of seconds, got {value!r}")
    try:
        seconds = float(value)
    except OverflowError:  # an integer too large for a float
        seconds = math.inf if value > 0 else -math.inf
    if math.isnan(seconds) or seconds <= 0:
        raise ValueError(f"{name} must be a positive number of seconds, got {value!r}")
    return min(seconds, MAX_TIMEOUT)


def _valid_rel_tol(value: object) -> Fraction:
    """``rel_tol`` as an exact fraction in ``[0, 1)``; anything else (negative, NaN, inf, not a number) raises ``ValueError``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(f"rel_tol must be a number in [0, 1), got {value!r}")
    try:
        tol = float(value)
    except OverflowError:  # an integer too large for a float
        tol = math.inf
    if not (0.0 <= tol < 1.0):  # also false for NaN
        raise ValueError(f"rel_tol must be a number in [0, 1), got {value!r}")
    return Fraction(repr(tol))  # 0.01 -> 1/100, not the binary float's 5764607523034235/2**59


class AnswerChecker:
    """Decides whether a predicted answer equals a reference answer; safe from any thread, bounded in time.

    ``timeout`` bounds each call as a whole (seconds): normalising, waiting for
    the shared math-verify worker while other threads use it, and the
    math-verify request. When the deadline passes the answer is judged not
    equal, the same as a math-verify timeout. ``float('inf')`` or a huge value
    means :data:`MAX_TIMEOUT`; zero, negative or NaN raises ``ValueError``.
    The one exception is a worker's start-up (importing math-verify, 1-3 s, at
    most ``startup_timeout``): a call that has to wait for one gets that time on
    top of its timeout, so the first checks of a run and the first after a
    worker was killed are not judged wrong for want of a worker. ``warm_up``
    makes the worker run a few representative checks at start-up so sympy's
    lazy imports do not eat into the first calls' deadlines. Calls from several
    threads share one worker and take turns. ``use_math_verify=False`` keeps
    only the fast path (anything it cannot decide is False). The worker's
    address space is capped at ``memory_limit_mb``.
    """

    def __init__(
        self,
        timeout: float = DEFAULT_TIMEOUT,
        use_math_verify: bool = True,
        *,
        memory_limit_mb: int = 1024,
        startup_timeout: float = 60.0,
        warm_up: bool = True,
    ) -> None:
        self.timeout = _valid_timeout(timeout)
        self.use_math_verify = use_math_verify
        self.memory_limit_mb = memory_limit_mb
        self.startup_timeout = _valid_timeout(startup_timeout, "startup_timeout")
        self.warm_up = warm_up
        self.n_calls = 0
        self.n_fast_path = 0
        self.n_math_verify = 0
        self.n_timeouts = 0
        self.n_errors = 0
        self.n_rejected = 0
        self.n_worker_starts = 0
        self._lock = threading.Lock()  # guards the worker
        self._count_lock = threading.Lock()
        self._worker: _WorkerProcess | None = None
        self._finalizer: weakref.finalize | None = None
        self._start_failures = 0
        self._startup_total = 0.0  # seconds calls have spent waiting for workers to start (finished waits)
        self._startup_began: float | None = None  # when the wait for a starting worker began, while one lasts

    # -- public API --------------------------------------------------------

    def match(self, predicted: str, reference: str, *, timeout: float | None = None, rel_tol: float = 0.0) -> bool:
        """Whether ``predicted`` is the same answer as ``reference`` (False for anything unreadable or too slow).

        ``timeout`` overrides the checker's timeout for this call; it covers the whole call (see the class).
        ``rel_tol`` (default 0: the exact rules of the module docstring) also accepts numbers within that
        relative difference, for benchmarks whose references are rounded (``1.6e-19`` vs ``1.602e-19``
        at ``rel_tol=0.01``); it applies to plain numbers, in lists and matrices too, and to constant
        expressions math-verify reads. Negative, NaN or ``>= 1`` raises ``ValueError``.
        """
        tol = _valid_rel_tol(rel_tol)
        deadline = time.monotonic() + self._call_timeout(timeout)
        return self._match_until(predicted, reference, deadline, tol)

    def match_many(self, pairs: Sequence[tuple[str, str]], *, timeout: float | None = None,
                   rel_tol: float = 0.0) -> list[bool]:
        """:meth:`match` of every ``(predicted, reference)`` pair, in order: one call per batch of checks.

        Here a plain loop (each pair gets its own ``timeout``, as one :meth:`match` call would, and the
        same ``rel_tol``); it is the seam a checker that fans the checks out elsewhere overrides
        (``synco.distributed.ray_checks``), so a step asks once for all its checks and gets the same
        answers either way.
        """
        _valid_rel_tol(rel_tol)  # a bad tolerance is refused for an empty batch too
        return [self.match(predicted, reference, timeout=timeout, rel_tol=rel_tol) for predicted, reference in pairs]

    def grade(
        self,
        response: str,
        reference: str,
        *,
        timeout: float | None = None,
        mode: ExtractMode = "reward",
        boxed: BoxedPolicy = "last",
        rel_tol: float = 0.0,
    ) -> tuple[Extraction, bool]:
        """Extract the final answer of a whole response and check it against ``reference``, within one time bound.

        The per-attempt path in one call: extraction (``mode`` / ``boxed`` as in
        :func:`extract_answer_with_method`) reads at most :data:`MAX_SCAN_CHARS` characters in
        linear time, and whatever it leaves of ``timeout`` bounds the check (``rel_tol`` as in :meth:`match`).
        """
        tol = _valid_rel_tol(rel_tol)
        deadline = time.monotonic() + self._call_timeout(timeout)
        extraction = extract_answer_with_method(response, mode=mode, boxed=boxed)
        if extraction.answer is None:
            return extraction, False
        return extraction, self._match_until(extraction.answer, reference, deadline, tol)

    def understands(self, answer: str, *, timeout: float | None = None) -> bool:
        """Whether ``answer`` is something checkable: a number, expression, set/tuple/interval, choice, equation, short word.

        False for empty, over-long or code-like text, prose, placeholders ("see above"), a literal division
        by zero, and anything math-verify cannot parse either (within ``timeout``, as for :meth:`match`).
        """
        deadline = time.monotonic() + self._call_timeout(timeout)
        prep = _prepare(answer)
        if prep is None:
            return False
        try:
            value = _parse_value(prep.text, prep.was_text)
        except Exception:
            self._count("n_errors")
            logger.exception("answer fast path failed on %r", str(answer)[:200])
            return False
        if value is not None and not _contains_opaque(value):
            if isinstance(value, _Word):
                return not (set(value.text.split()) & _NON_ANSWER_WORDS)
            return not isinstance(value, _DivZero)
        if _is_prose(prep.text) or not self.use_math_verify:
            return False
        return self._ask_worker({"op": "parse", "text": _to_latex(prep.text)}, deadline)

    @property
    def startup_seconds(self) -> float:
        """Seconds calls have spent waiting for math-verify workers to start (a wait in progress included).

        Time bounds exclude it (see the class); a caller bounding several calls can exclude it the same way.
        """
        return self._startup_spent()

    def stats(self) -> CheckerStats:
        with self._count_lock:
            return CheckerStats(
                self.n_calls, self.n_fast_path, self.n_math_verify, self.n_timeouts,
                self.n_errors, self.n_rejected, self.n_worker_starts,
            )

    def close(self) -> None:
        """Stop the math-verify worker; a later call starts a new one."""
        with self._lock:
            self._drop_worker()

    def __enter__(self) -> "AnswerChecker":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- internals ---------------------------------------------------------

    def _call_timeout(self, timeout: float | None) -> float:
        """The bound of one call: the checker's, or a validated per-call override."""
        return self.timeout if timeout is None else _valid_timeout(timeout)

    def _match_until(self, predicted: str, reference: str, deadline: float, tol: Fraction = Fraction(0)) -> bool:
        """:meth:`match` with an absolute deadline (``time.monotonic()`` seconds) and a relative tolerance (0 = off)."""
        self._count("n_calls")
        try:
            pred = _prepare(predicted)
            ref = _prepare(reference)
            if pred is None or ref is None:
                self._count("n_rejected")
                return False
            verdict = self._fast(pred, ref, tol)
        except Exception:  # a bug in the fast path must not crash a training step; counted and logged
            self._count("n_errors")
            logger.exception("answer fast path failed on %r vs %r", str(predicted)[:200], str(reference)[:200])
            return False
        if verdict is not None:
            self._count("n_fast_path")
            return verdict
        if not self.use_math_verify or _is_prose(pred.text):
            return False
        payload = {"op": "match", "ref": _to_latex(ref.text), "pred": _to_latex(pred.text), "rel_tol": float(tol)}
        return self._ask_worker(payload, deadline)

    def _count(self, name: str, k: int = 1) -> None:
        with self._count_lock:
            setattr(self, name, getattr(self, name) + k)

    def _fast(self, pred: _Prepared, ref: _Prepared, tol: Fraction = Fraction(0)) -> bool | None:
        """The fast path's verdict; a decorated number it cannot read is never handed to math-verify (False)."""
        verdict = self._fast_verdict(pred, ref, tol)
        if verdict is None and (_decorated_number(pred.text) or _decorated_number(ref.text)):
            return False
        return verdict

    def _fast_verdict(self, pred: _Prepared, ref: _Prepared, tol: Fraction = Fraction(0)) -> bool | None:
        if pred.unit and ref.unit and pred.unit != ref.unit:
            return False
        if pred.key == ref.key:
            return True
        if _one_side_of_equation(pred.text, ref.text):
            return False
        a = _parse_value(pred.text, pred.was_text)
        b = _parse_value(ref.text, ref.was_text)
        if a is None or b is None:
            known = a if a is not None else b
            if isinstance(known, (_Word, _Choice, _DivZero)):
                return False  # a word/choice never equals something only math-verify could read
            if _shapes_differ(pred.text, ref.text) is False:
                return False
            return _variables_differ(pred.text, ref.text, a, b)
        return _same(a, b, tol)

    def _drop_worker(self) -> None:
        if self._finalizer is not None:
            self._finalizer()  # kills the process
            self._finalizer = None
        self._worker = None

    def _start_worker(self) -> bool:
        """Launch a worker process (it imports math-verify in the background); False if the OS refuses."""
        try:
            self._worker = _WorkerProcess(self.memory_limit_mb, self.warm_up)
        except (OSError, subprocess.SubprocessError) as exc:
            self._start_failures += 1
            logger.warning("cannot start the math-verify worker: %s", exc)
            self._worker = None
            return False
        self._finalizer = weakref.finalize(self, _WorkerProcess.kill, self._worker)
        self._count("n_worker_starts")
        return True

    def _startup_spent(self) -> float:
        """Seconds calls have spent waiting for workers to start, including a wait in progress."""
        with self._count_lock:
            began = self._startup_began
            return self._startup_total + (time.monotonic() - began if began is not None else 0.0)

    def _wait_ready(self, worker: _WorkerProcess) -> None:
        """Wait (at most ``startup_timeout``) for a starting worker, recording the time so deadlines can exclude it."""
        if worker.ready:
            return
        with self._count_lock:
            self._startup_began = time.monotonic()
        try:
            worker.wait_ready(self.startup_timeout)
        finally:
            with self._count_lock:
                assert self._startup_began is not None
                self._startup_total += time.monotonic() - self._startup_began
                self._startup_began = None

    def _ready_worker(self) -> _WorkerProcess | None:
        """The running worker (started if needed), or None when math-verify cannot be started here."""
        if self._worker is not None and self._worker.owner_pid != os.getpid():
            # We were forked: the process belongs to our parent. Forget it without touching it.
            if self._finalizer is not None:
                self._finalizer.detach()
            self._worker, self._finalizer = None, None
        if self._start_failures >= 3:
            return None
        if self._worker is None and not self._start_worker():
            return None
        assert self._worker is not None
        try:
            self._wait_ready(self._worker)
        except (_WorkerGone, _WorkerLate, ValueError) as exc:
            self._start_failures += 1
            logger.warning("math-verify worker failed to start (%s); attempt %d", exc, self._start_failures)
            self._drop_worker()
            return None
        return self._worker

    def _acquire_until(self, deadline: float, startup_mark: float) -> bool:
        """Take the worker lock before ``deadline``, extended by any worker start-up since ``startup_mark``."""
        while True:
            remaining = deadline + (self._startup_spent() - startup_mark) - time.monotonic()
            if remaining <= 0:
                return False
            if self._lock.acquire(timeout=min(remaining, threading.TIMEOUT_MAX)):
                return True

    def _ask_worker(self, payload: dict[str, Any], deadline: float) -> bool:
        """One math-verify request before ``deadline``, lock wait included; on timeout the worker is killed and replaced.

        Time spent waiting for a worker to start (by this call or by the call it queues behind)
        is added to the deadline; see :class:`AnswerChecker`.
        """
        startup_mark = self._startup_spent()
        if not self._acquire_until(deadline, startup_mark):
            self._count("n_timeouts")  # the worker was busy with other calls until our deadline
            return False
        try:
            if deadline + (self._startup_spent() - startup_mark) <= time.monotonic():
                self._count("n_timeouts")  # got the lock just too late: no waiting for a worker to start either
                return False
            worker = self._ready_worker()
            if worker is not None and worker.proc.poll() is not None:
                self._drop_worker()  # it died since the last call (killed from outside): start afresh
                worker = self._ready_worker()
            if worker is None:
                return False
            remaining = deadline + (self._startup_spent() - startup_mark) - time.monotonic()
            if remaining <= 0:
                self._count("n_timeouts")
                return False
            self._count("n_math_verify")
            try:
                reply = worker.call(dict(payload, budget=max(0.8 * remaining, 0.01)), remaining)
            except _WorkerLate:
                self._count("n_timeouts")
                self._drop_worker()
                self._start_worker()  # warm up the replacement while the caller moves on
                return False
            except _WorkerGone as exc:
                # Died on this request: its memory or CPU limit ended it. A wrong answer, like a timeout.
                self._count("n_timeouts")
                logger.warning("math-verify worker died during a request (%s)", exc)
                self._drop_worker()
                return False
            except ValueError as exc:  # undecodable reply
                self._count("n_errors")
                logger.warning("bad reply from math-verify worker: %s", exc)
                self._drop_worker()
                return False
        finally:
            self._lock.release()
        status = reply.get("status")
        if status == "timeout":
            self._count("n_timeouts")
        elif status == "error":
            self._count("n_errors")
            logger.warning("math-verify worker error: %s", reply.get("detail"))
        return reply.get("result") is True


_default_checker: AnswerChecker | None = None
_default_lock = threading.Lock()


def default_checker() -> AnswerChecker:
    """The process-wide checker behind :func:`answers_match` (created on first use)."""
    global _default_checker
    with _default_lock:
        if _default_checker is None:
            _default_checker = AnswerChecker()
        return _default_checker


def answers_match(
    predicted: str, reference: str, *, timeout: float = DEFAULT_TIMEOUT, rel_tol: float = 0.0
) -> bool:
    """Whether ``predicted`` equals ``reference``, using the shared :class:`AnswerChecker`, within ``timeout`` seconds.

    ``rel_tol`` as in :meth:`AnswerChecker.match` (0: exact rules).
    """
    return default_checker().match(predicted, reference, timeout=timeout, rel_tol=rel_tol)
