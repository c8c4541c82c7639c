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
    "TaskCard": "synco.records",
    "TaskCardError": "synco.records",
    "Verdict": "synco.records",
    "Rollout": "synco.records",
    "SynthReward": "synco.records",
    "TaskRecord": "synco.records",
    "CARD_FIELDS": "synco.records",
    # parsing and checking
    "parse_task_card": "synco.cards",
    "extract_answer": "synco.answers",
    "extract_answer_with_method": "synco.answers",
    "answers_match": "synco.answers",
    "AnswerChecker": "synco.answers",
    # verification, novelty
    "TaskVerifier": "synco.verifier",
    "VerifierConfig": "synco.verifier",
    "NoveltyIndex": "synco.novelty",
    # rewards
    "teachability": "synco.rewards",
    "gate": "synco.rewards",
    "synthesizer_reward": "synco.rewards",
    "reasoner_reward": "synco.rewards",
    "is_gradient_bearing": "synco.rewards",
    "SynthesizerRewardConfig": "synco.rewards",
    "ReasonerRewardConfig": "synco.rewards",
    # pool and report
    "TaskPool": "synco.pool",
    "CapabilityReport": "synco.report",
    "ReportConfig": "synco.report",
    "build_report": "synco.report",
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
    from synco.answers import AnswerChecker, answers_match, extract_answer, extract_answer_with_method
    from synco.cards import parse_task_card
    from synco.novelty import NoveltyIndex
    from synco.pool import TaskPool
    from synco.records import CARD_FIELDS, Rollout, SynthReward, TaskCard, TaskCardError, TaskRecord, Verdict
    from synco.report import CapabilityReport, ReportConfig, build_report
    from synco.rewards import (
        ReasonerRewardConfig,
        SynthesizerRewardConfig,
        gate,
        is_gradient_bearing,
        reasoner_reward,
        synthesizer_reward,
        teachability,
    )
    from synco.verifier import TaskVerifier, VerifierConfig
