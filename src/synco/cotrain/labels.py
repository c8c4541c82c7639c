"""How a step trusts a card's label (its reference answer), chosen once at setup (:func:`label_trust`).

* :class:`Oracle`: the domain computes the reference exactly (arith, tools, τ²) or consensus is off: the
  verifier's verdict stands.
* :class:`AttemptConsensus`: no oracle; after the Reasoner's K attempts, the verifier's consensus check reads
  their extracted answers (reusing the step's grades as agreement where they were made against the same
  reference) and rejects a card whose attempts clearly agree on another answer. Any domain whose attempts carry
  an answer can use it: a single-turn answer's extraction, an episode's final message.
* :class:`CheckerConsensus`: no oracle, and a separate frozen checker model answers each valid card M times
  before the Reasoner solves it; a card it rejects gets no attempts.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Protocol

from synco.core.policy import Policy
from synco.core.records import TaskRecord
from synco.cotrain.settings import StepState, request_seed
from synco.domains.base import answer_extractor, solve
from synco.grading.extract import extract_answer



class LabelTrust(Protocol):
    """Judges labels before the Reasoner solves (returns seconds spent sampling) and after it has."""

    def before_solving(self, state: StepState, records: Sequence[TaskRecord]) -> float: ...

    def after_solving(self, state: StepState, records: Sequence[TaskRecord]) -> None: ...


class Oracle:
    """The verdict's reference is trusted as it is."""

    def before_solving(self, state: StepState, records: Sequence[TaskRecord]) -> float:
        return 0.0

    def after_solving(self, state: StepState, records: Sequence[TaskRecord]) -> None:
        return None


class AttemptConsensus(Oracle):
    """Consensus on the Reasoner's own attempts (the checks count as agreement when they were made against
    consensus's reference)."""

    def after_solving(self, state: StepState, records: Sequence[TaskRecord]) -> None:
        for rec in records:
            if not rec.valid or not rec.rollouts:
                continue
            reference = rec.reference
            agree = [a.correct for a in rec.rollouts] if rec.verdict.reference == reference else None
            rec.verdict = state.verifier.apply_consensus(rec.verdict, [a.answer for a in rec.rollouts], agree=agree)


class CheckerConsensus(Oracle):
    """A frozen checker model's M answers per valid card, judged in one batch before the Reasoner solves."""

    def __init__(self, checker: Policy) -> None:
        self.checker = checker

    def before_solving(self, state: StepState, records: Sequence[TaskRecord]) -> float:
        valid = [r for r in records if r.valid and r.card is not None]
        if not valid:
            return 0.0
        s = state.settings
        t = time.perf_counter()
        groups = solve(self.checker, state.domain, [r.card.payload.prompt_text() for r in valid if r.card is not None],
                       s.consensus_m, s.checker_sampling, request_seed(state))
        dt = time.perf_counter() - t
        read = answer_extractor(state.domain) or extract_answer
        judged = state.verifier.consensus_batch([r.verdict for r in valid],
                                                [[read(c.text) for c in group] for group in groups])
        for rec, verdict in zip(valid, judged):
            rec.verdict = verdict
        return dt


def label_trust(consensus: bool, has_oracle: bool, checker: Policy | None) -> LabelTrust:
    """The run's label trust: the oracle (or consensus off), a checker model's consensus, or the attempts'."""
    if not consensus or has_oracle:
        return Oracle()
    if checker is not None:
        return CheckerConsensus(checker)
    return AttemptConsensus()
