"""The one grading function: responses and their references in, what each response answered and whether it is right out.

The training step (rewards), the run's held-out evaluation and ``synco eval`` (benchmarks) all grade
through :func:`grade`; they differ only in its options:

* ``mode="reward"`` (the training step and the held-out evaluation): the strict extraction rules a
  reward should follow (the last ``\\boxed{}``, else an answer line with the answer alone on it);
* ``mode="eval"`` (``synco eval``): the lenient rules benchmark outputs need, with the benchmark's
  ``boxed`` policy and ``rel_tol`` (see :mod:`synco.grading.extract` and :mod:`synco.grading.checker` for both
  modes' rules).

A whole batch is checked in ONE ``match_many`` call, so a checker that fans its checks out
(``synco.distributed.ray_checks.RayAnswerChecker``) sees a training step's attempts at once. A response
without an answer is wrong without a check. Extraction reads at most ``MAX_SCAN_CHARS`` characters of a
response in linear time (milliseconds), and every check is bounded by the checker's timeout (or
``timeout``), so hostile model output costs bounded time and never raises.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from synco.core.records import ExtractionMethod
from synco.grading.checker import AnswerChecker, _valid_rel_tol
from synco.grading.extract import BoxedPolicy, _check_options, extract_answer_with_method, Extraction, ExtractMode

__all__ = ["Graded", "grade"]


@dataclass(frozen=True)
class Graded:
    """One graded response: what extraction found in it, and whether that answer matches the reference."""

    extraction: Extraction
    correct: bool

    @property
    def answer(self) -> str | None:
        """The extracted final answer (None: the response states none)."""
        return self.extraction.answer

    @property
    def method(self) -> ExtractionMethod:
        """How the answer was found (``boxed``, ``answer_line``, ... ``none``)."""
        return self.extraction.method

    @property
    def boxed(self) -> tuple[str, ...]:
        """Every ``\\boxed{}`` answer of the response, in order (the reward's no-hedging rule reads them)."""
        return self.extraction.boxed


def grade(
    checker: AnswerChecker,
    items: Sequence[tuple[str, str]],
    *,
    mode: ExtractMode = "reward",
    boxed: BoxedPolicy = "last",
    rel_tol: float = 0.0,
    timeout: float | None = None,
    extract: Callable[[str], str | None] | None = None,
) -> list[Graded]:
    """Grade every ``(response, reference)`` of ``items``, in order, with one ``match_many`` call for the batch.

    ``mode`` and ``boxed`` choose the extraction rules (:func:`~synco.grading.extract.extract_answer_with_method`),
    ``rel_tol`` the numeric tolerance of the checks and ``timeout`` each check's bound (None: the
    checker's); see :meth:`~synco.grading.checker.AnswerChecker.match`. A bad ``mode``, ``boxed`` or
    ``rel_tol`` raises ``ValueError`` naming it, even for an empty batch. No checker call is made
    when no response states an answer. ``extract``: a domain's own answer reader
    (:class:`~synco.domains.base.HasAnswerExtractor`), used instead of ``mode`` / ``boxed``; its answers
    are recorded with method ``domain``.
    """
    _check_options(mode, boxed)
    _valid_rel_tol(rel_tol)
    if extract is not None:
        found = [domain_extraction(extract, response) for response, _ in items]
    else:
        found = [extract_answer_with_method(response, mode=mode, boxed=boxed) for response, _ in items]
    pairs = [(e.answer, reference) for e, (_, reference) in zip(found, items) if e.answer is not None]
    results = checker.match_many(pairs, timeout=timeout, rel_tol=rel_tol) if pairs else []
    if len(results) != len(pairs):
        raise RuntimeError(f"the checker answered {len(results)} of {len(pairs)} checks")
    checked = iter(results)
    return [Graded(e, e.answer is not None and bool(next(checked))) for e in found]


def domain_extraction(extract: Callable[[str], str | None], response: str) -> Extraction:
    """What a domain's answer reader found in ``response``: method ``domain`` (``none`` when it found nothing);
    no boxed answers are listed, so the reward's no-hedging rule does not apply."""
    answer = extract(response)
    return Extraction(answer, "domain") if answer is not None else Extraction(None, "none")
