"""synco: agent-data co-training of LLMs.

A Synthesizer writes verifiable task cards for a Reasoner, conditioned on a
report of the Reasoner's measured capability; both are trained with GRPO in
the same step, and every task, verdict, attempt and reward goes into a pool.

The public names below are loaded on first use, so ``import synco`` stays
light (no torch) for analysis scripts.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

_EXPORTS = {
    # records
    "TaskCard": "synco.core.records",
    "TaskCardError": "synco.core.records",
    "Verdict": "synco.core.records",
    "Attempt": "synco.core.records",
    "SynthReward": "synco.core.records",
    "TaskRecord": "synco.core.records",
    "CARD_FIELDS": "synco.core.records",
    # parsing and checking
    "parse_task_card": "synco.grading.cards",
    "extract_answer": "synco.grading.extract",
    "extract_answer_with_method": "synco.grading.extract",
    "answers_match": "synco.grading.checker",
    "AnswerChecker": "synco.grading.checker",
    # verification, novelty
    "TaskVerifier": "synco.grading.verifier",
    "VerifierConfig": "synco.grading.verifier",
    "NoveltyIndex": "synco.grading.novelty",
    # rewards
    "teachability": "synco.core.rewards",
    "gate": "synco.core.rewards",
    "synthesizer_reward": "synco.core.rewards",
    "reasoner_reward": "synco.core.rewards",
    "is_gradient_bearing": "synco.core.rewards",
    "SynthesizerRewardConfig": "synco.core.rewards",
    "ReasonerRewardConfig": "synco.core.rewards",
    # pool and report
    "TaskPool": "synco.core.pool",
    "CapabilityReport": "synco.core.report",
    "ReportConfig": "synco.core.report",
    "build_report": "synco.core.report",
}

__all__ = sorted(_EXPORTS) + ["__version__"]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'synco' has no attribute {name!r}")
    value = getattr(import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__


if TYPE_CHECKING:  # pragma: no cover - for type checkers and IDEs
    from synco.grading.checker import AnswerChecker, answers_match
    from synco.grading.extract import extract_answer, extract_answer_with_method
    from synco.grading.cards import parse_task_card
    from synco.grading.novelty import NoveltyIndex
    from synco.core.pool import TaskPool
    from synco.core.records import CARD_FIELDS, Attempt, SynthReward, TaskCard, TaskCardError, TaskRecord, Verdict
    from synco.core.report import CapabilityReport, ReportConfig, build_report
    from synco.core.rewards import (
        ReasonerRewardConfig,
        SynthesizerRewardConfig,
        gate,
        is_gradient_bearing,
        reasoner_reward,
        synthesizer_reward,
        teachability,
    )
    from synco.grading.verifier import TaskVerifier, VerifierConfig
