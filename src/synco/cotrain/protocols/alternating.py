"""Alternating self-evolution (``protocol=alternating``, R-Zero style): one agent learns per phase.

Phases of ``alternating.phase_steps`` ordinary co-training steps alternate between the
learners: in a Synthesizer phase only the Synthesizer takes its GRPO step, rewarded by the
frozen Reasoner's outcomes; in a Reasoner phase only the Reasoner does, on the frozen
Synthesizer's tasks. Both agents still generate every step, inside the co-training step
(so their requests are seeded as an online step's). The phase follows from the step alone,
so a resumed run needs no state for it.
"""

from __future__ import annotations

from synco.cotrain.engine import CoTrainState, cotrain_step
from synco.cotrain.settings import StepPlan
from synco.cotrain.stats import StepStats
from synco.cotrain.protocols.config import AlternatingConfig


def phase_of(step: int, cfg: AlternatingConfig) -> tuple[int, str]:
    """(phase index, the agent that learns in it) of a step."""
    index = step // cfg.phase_steps
    other = "reasoner" if cfg.first == "synthesizer" else "synthesizer"
    return index, cfg.first if index % 2 == 0 else other


def phase_plan(step: int, cfg: AlternatingConfig) -> StepPlan:
    """What a step of a phase changes in the co-training step: only the phase's learner updates."""
    index, learner = phase_of(step, cfg)
    return StepPlan(update_synthesizer=learner == "synthesizer", update_reasoner=learner == "reasoner",
                    protocol="alternating", round=index, phase=learner)


def alternating_step(state: CoTrainState, step: int, cfg: AlternatingConfig) -> StepStats:
    """One co-training step in which only the phase's learner updates."""
    return cotrain_step(state, step, phase_plan(step, cfg))
