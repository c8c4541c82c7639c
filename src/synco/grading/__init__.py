"""Everything that judges text: answer extraction and matching (with math-verify in a bounded worker),
task-card parsing, the verifier, novelty and contamination, benchmark files. Torch-free; imports only
``synco.core``.

The answer modules, bottom to top: :mod:`~synco.grading.normalise` (text preparation),
:mod:`~synco.grading.values` (the values the fast path reads), :mod:`~synco.grading.equivalence` (comparing
them), :mod:`~synco.grading.extract` (finding the answer in a response), :mod:`~synco.grading.worker` (the
math-verify child process) and :mod:`~synco.grading.checker` (:class:`AnswerChecker`). Their public names are
also loaded from here on first use.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

_EXPORTS = {
    "Extraction": "synco.grading.extract",
    "ExtractMode": "synco.grading.extract",
    "BoxedPolicy": "synco.grading.extract",
    "MAX_SCAN_CHARS": "synco.grading.extract",
    "boxed_answers": "synco.grading.extract",
    "extract_answer": "synco.grading.extract",
    "extract_answer_with_method": "synco.grading.extract",
    "MAX_ANSWER_CHARS": "synco.grading.normalise",
    "APPROX_DIGITS": "synco.grading.equivalence",
    "REL_TOL": "synco.grading.equivalence",
    "DEFAULT_TIMEOUT": "synco.grading.checker",
    "MAX_TIMEOUT": "synco.grading.checker",
    "CheckerStats": "synco.grading.checker",
    "AnswerChecker": "synco.grading.checker",
    "default_checker": "synco.grading.checker",
    "answers_match": "synco.grading.checker",
}
"""Public answer API -> the module that defines it."""

__all__ = [
    "APPROX_DIGITS",
    "AnswerChecker",
    "BoxedPolicy",
    "CheckerStats",
    "DEFAULT_TIMEOUT",
    "ExtractMode",
    "Extraction",
    "MAX_ANSWER_CHARS",
    "MAX_SCAN_CHARS",
    "MAX_TIMEOUT",
    "REL_TOL",
    "answers_match",
    "boxed_answers",
    "default_checker",
    "extract_answer",
    "extract_answer_with_method",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'synco.grading' has no attribute {name!r}")
    value = getattr(import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


if TYPE_CHECKING:  # pragma: no cover - for type checkers and IDEs
    from synco.grading.checker import (
        DEFAULT_TIMEOUT,
        MAX_TIMEOUT,
        AnswerChecker,
        CheckerStats,
        answers_match,
        default_checker,
    )
    from synco.grading.equivalence import APPROX_DIGITS, REL_TOL
    from synco.grading.extract import (
        MAX_SCAN_CHARS,
        BoxedPolicy,
        Extraction,
        ExtractMode,
        boxed_answers,
        extract_answer,
        extract_answer_with_method,
    )
    from synco.grading.normalise import MAX_ANSWER_CHARS
