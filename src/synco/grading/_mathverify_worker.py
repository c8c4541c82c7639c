"""Child process that runs math-verify on behalf of :mod:`synco.grading.checker` (through :mod:`synco.grading.worker`).

Why a separate process: math-verify bounds its own work with ``signal.alarm``,
which only works on the main thread, and a hostile answer (``9^{9^{9^9}}``) can
make sympy compute for minutes or allocate gigabytes inside C code where no
signal is delivered. Here math-verify always runs on the main thread of a
process the parent can kill, under an address-space limit and a per-request CPU
limit, so every check in the parent is bounded by a wall-clock deadline.

This file is standalone (stdlib + math_verify only) and is started as
``python -I _mathverify_worker.py --memory-mb N`` so that nothing from the
caller's working directory or environment is imported.

Protocol: one JSON object per line on stdin, one reply per line on stdout.
  request  {"id": int, "op": "match", "ref": str, "pred": str, "budget": float, "rel_tol": float (optional, 0)}
           {"id": int, "op": "parse", "text": str, "budget": float}
  reply    {"id": int, "result": bool, "status": "ok" | "timeout" | "error", "detail": str}
The first line the worker writes is {"ready": true} (or {"ready": false, "detail": ...}).
Inputs are LaTeX strings the parent has already screened and normalised; they
are only ever given to latex2sympy (an ANTLR grammar), never to eval/sympify.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import resource
import signal
import sys
from typing import Any, TextIO

REL_TOL = 1e-6
"""Relative tolerance for the numeric guard on math-verify's True verdicts."""
ABS_FLOOR = 1e-20
"""Differences below this count as equal in the guard (30-digit evaluation noise around zero, e.g. ``sin(pi)``)."""
SAMPLE_POINTS = (
    (0.5813, 1.3179, 2.2361, 0.8642, 1.7071),
    (1.4142, 0.6931, 1.1892, 2.7183, 0.3679),
    (2.5066, 1.6180, 0.4343, 1.2599, 3.1416),
)
"""Values given to the free symbols of both sides (positive, so roots and logarithms stay on their main branch)."""
MAX_SYMBOLS = 5

DEFAULT_BUDGET = 2.0
MAX_BUDGET = 3600.0
"""A request's time budget is clamped to [0.01, MAX_BUDGET] seconds (inf or 1e10 would overflow the timers)."""


_WARM_UP = (
    ("\\frac{1}{2}", "0.5"),
    ("[\\frac{\\pi^2}{8}, \\frac{5\\pi^2}{4}]", "[\\pi^{2}/8, 5\\pi^{2}/4]"),
    ("(-\\sqrt{3}, \\sqrt{3})", "(-\\sqrt{2}, \\sqrt{3})"),
    ("\\{1\\pm\\sqrt{5}, -2\\}", "\\{-2, 1+\\sqrt{5}, 1-\\sqrt{5}\\}"),
    ("y = 2x + 3", "y = 3x + 2"),
    ("x^5 - x^4 + 1", "x^5 - x^4 - 1"),
    ("\\begin{pmatrix} 1 & x \\\\ 0 & 1 \\end{pmatrix}", "\\begin{pmatrix} 1 & x \\\\ 0 & 1 \\end{pmatrix}"),
    ("(0,9) \\cup (9,36)", "(0, 36)"),
    ("\\cot x", "\\frac{\\cos x}{\\sin x}"),
)
"""Representative checks run once at start-up."""


class _Deadline(BaseException):
    """Raised by the interval timer; a BaseException so math-verify's ``except Exception`` lets it through."""


def _on_alarm(signum: int, frame: Any) -> None:
    raise _Deadline()


def _limit_memory(megabytes: int) -> None:
    """Cap the address space so a runaway sympy computation raises MemoryError instead of eating the machine."""
    if megabytes <= 0:
        return
    limit = megabytes * 1024 * 1024
    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    if hard != resource.RLIM_INFINITY:
        limit = min(limit, hard)
    resource.setrlimit(resource.RLIMIT_AS, (limit, hard))


def _limit_cpu(budget: float) -> None:
    """Let this request use at most ``budget`` (+ slack) more CPU seconds, then SIGXCPU ends the process.

    Backstop for computations stuck in C code if the parent died and cannot kill us.
    """
    usage = resource.getrusage(resource.RUSAGE_SELF)
    used = usage.ru_utime + usage.ru_stime
    soft = int(math.ceil(used + budget)) + 5
    _, hard = resource.getrlimit(resource.RLIMIT_CPU)
    if hard != resource.RLIM_INFINITY:
        soft = min(soft, hard)
    resource.setrlimit(resource.RLIMIT_CPU, (soft, hard))


class _Checker:
    """math-verify wrapped: LaTeX-only extraction, no internal alarms, numeric guard on True."""

    def __init__(self) -> None:
        import math_verify
        import sympy

        from latex2sympy2_extended.latex2sympy2 import NormalizationConfig

        self._mv = math_verify
        self._sympy = sympy
        # Units off: the parent has already removed units by its own rules, and math-verify's unit stripper
        # deletes trailing letters after a number ("7 = 11a + c" reads as "7 = 11"), which turns variables
        # into nothing and two different equations into one.
        normalization = NormalizationConfig(
            basic_latex=True, units=False, malformed_operators=True, nits=True, boxed="all", equations=False
        )
        self._config = [math_verify.LatexExtractionConfig(boxed_match_priority=0, normalization_config=normalization)]

    def parse(self, text: str) -> Any | None:
        """The sympy object math-verify reads from ``text``, or None if it reads none."""
        wrapped = "$" + text.replace("\n", " ").replace("$", " ") + "$"
        found = self._mv.parse(
            wrapped,
            extraction_config=self._config,
            fallback_mode="no_fallback",
            parsing_timeout=None,
        )
        for obj in found:
            if isinstance(obj, (self._sympy.Basic, self._sympy.MatrixBase)):
                return obj
        return None

    def match(self, ref: str, pred: str, rel_tol: float = 0.0) -> bool:
        """math-verify's verdict (reference as gold), vetoed when the two sides differ numerically.

        With ``rel_tol > 0`` a False verdict on two constant expressions within ``rel_tol`` becomes True.
        """
        gold = self.parse(ref)
        target = self.parse(pred)
        if gold is None or target is None:
            return False
        ok = bool(self._mv.verify(gold, target, timeout_seconds=None, strict=True))
        if ok:
            return self._numeric_guard(gold, target, max(REL_TOL, rel_tol))
        return rel_tol > 0 and self._within(gold, target, rel_tol)

    def _scalar_pairs(self, gold: Any, target: Any) -> list[tuple[Any, Any]] | None:
        """Corresponding scalar expressions of two expressions or two same-shape matrices; None for anything else."""
        sp = self._sympy
        if isinstance(gold, sp.MatrixBase) and isinstance(target, sp.MatrixBase):
            if gold.shape != target.shape:
                return None
            pairs = list(zip(list(gold), list(target)))
        else:
            pairs = [(gold, target)]
        if all(isinstance(a, sp.Expr) and isinstance(b, sp.Expr) for a, b in pairs):
            return pairs
        return None

    def _value(self, expr: Any, subs: dict[Any, float] | None) -> complex | None:
        """``expr`` evaluated to 30 digits (symbols replaced by ``subs``); None when it is not a finite number there."""
        try:
            value = complex(self._sympy.N(expr, 30, subs=subs) if subs else self._sympy.N(expr, 30))
        except (TypeError, ValueError, ArithmeticError, AttributeError):
            return None
        return value if math.isfinite(value.real) and math.isfinite(value.imag) else None

    @staticmethod
    def _close(a: complex, b: complex, tol: float) -> bool:
        return abs(a - b) <= max(tol * max(abs(a), abs(b)), ABS_FLOOR)

    def _numeric_guard(self, gold: Any, target: Any, tol: float) -> bool:
        """Veto a True verdict when both sides, evaluated numerically, differ beyond ``tol`` relative.

        Two reasons. math-verify rounds floats to 6 decimals (0.000001 == 0.0000014). And a sign
        or structure it misreads (bare ``verify(parse("1 - \\frac{1}{e}"), parse("1 + \\frac{1}{e}"))``
        is True: without ``$..$`` its LaTeX reader finds nothing and its plain-expression reader keeps
        the leading ``1`` of both) must not pass as equal. Constant expressions are compared directly;
        expressions with free symbols at :data:`SAMPLE_POINTS`. A point where a side is not a finite
        number decides nothing; sets, tuples, intervals and relations keep math-verify's verdict.
        """
        pairs = self._scalar_pairs(gold, target)
        if pairs is None:
            return True
        symbols = sorted(set().union(*(a.free_symbols | b.free_symbols for a, b in pairs)), key=str)
        if len(symbols) > MAX_SYMBOLS:
            return True
        points = [None] if not symbols else [dict(zip(symbols, row)) for row in SAMPLE_POINTS]
        for subs in points:
            for a_expr, b_expr in pairs:
                a, b = self._value(a_expr, subs), self._value(b_expr, subs)
                if a is not None and b is not None and not self._close(a, b, tol):
                    return False
        return True

    def _within(self, gold: Any, target: Any, rel_tol: float) -> bool:
        """Whether two constant expressions (or same-shape matrices of them) agree within ``rel_tol`` relative."""
        pairs = self._scalar_pairs(gold, target)
        if pairs is None or any(a.free_symbols or b.free_symbols for a, b in pairs):
            return False
        for a_expr, b_expr in pairs:
            a, b = self._value(a_expr, None), self._value(b_expr, None)
            if a is None or b is None or not self._close(a, b, rel_tol):
                return False
        return True


def _reply(out: TextIO, payload: dict[str, Any]) -> None:
    out.write(json.dumps(payload) + "\n")
    out.flush()


def _budget(value: Any) -> float:
    """A request's time budget in seconds: clamped to [0.01, MAX_BUDGET]; DEFAULT_BUDGET when missing, NaN or not a number."""
    try:
        budget = float(value)
    except (TypeError, ValueError, OverflowError):
        return DEFAULT_BUDGET
    if math.isnan(budget):
        return DEFAULT_BUDGET
    return min(max(budget, 0.01), MAX_BUDGET)


def _rel_tol(value: Any) -> float:
    """A request's relative tolerance: a number in [0, 1), else 0 (the parent validates; this only guards the protocol)."""
    try:
        tol = float(value)
    except (TypeError, ValueError, OverflowError):
        return 0.0
    return tol if 0.0 <= tol < 1.0 else 0.0


def _handle(checker: _Checker, request: dict[str, Any]) -> dict[str, Any]:
    """Run one request under its time budget; never raises for bad input."""
    rid = request.get("id", -1)
    budget = _budget(request.get("budget", DEFAULT_BUDGET))
    _limit_cpu(budget)
    signal.setitimer(signal.ITIMER_REAL, budget)
    try:
        if request.get("op") == "match":
            result = checker.match(str(request["ref"]), str(request["pred"]), _rel_tol(request.get("rel_tol", 0.0)))
        elif request.get("op") == "parse":
            result = checker.parse(str(request["text"])) is not None
        else:
            return {"id": rid, "result": False, "status": "error", "detail": "unknown op"}
        return {"id": rid, "result": result, "status": "ok", "detail": ""}
    except _Deadline:
        return {"id": rid, "result": False, "status": "timeout", "detail": ""}
    except (MemoryError, RecursionError) as exc:
        return {"id": rid, "result": False, "status": "timeout", "detail": type(exc).__name__}
    except Exception as exc:  # reported to the parent, which counts and logs it
        return {"id": rid, "result": False, "status": "error", "detail": f"{type(exc).__name__}: {exc}"[:300]}
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--memory-mb", type=int, default=1024)
    parser.add_argument("--no-warm-up", action="store_true", help="skip the representative start-up checks")
    args = parser.parse_args(argv)

    # Keep the protocol channel private: anything a library prints goes to stderr.
    out = os.fdopen(os.dup(sys.stdout.fileno()), "w", encoding="utf-8")
    sys.stdout = sys.stderr
    logging.disable(logging.CRITICAL)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides when we stop
    signal.signal(signal.SIGALRM, _on_alarm)
    try:
        checker = _Checker()
        for ref, pred in _WARM_UP if not args.no_warm_up else _WARM_UP[:1]:  # pay sympy's lazy imports now, not inside the first deadline
            checker.match(ref, pred)
    except ImportError as exc:
        _reply(out, {"ready": False, "detail": f"{type(exc).__name__}: {exc}"})
        return 1
    _limit_memory(args.memory_mb)
    _reply(out, {"ready": True, "pid": os.getpid()})

    for line in sys.stdin:
        try:
            request = json.loads(line)
        except json.JSONDecodeError:
            _reply(out, {"id": -1, "result": False, "status": "error", "detail": "bad request"})
            continue
        if request.get("op") == "quit":
            break
        try:
            reply = _handle(checker, request)
        except _Deadline:  # the timer fired between the work and its cancellation
            reply = {"id": request.get("id", -1), "result": False, "status": "timeout", "detail": ""}
        _reply(out, reply)
    return 0


if __name__ == "__main__":
    sys.exit(main())
