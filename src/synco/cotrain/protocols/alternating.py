"""Alternating self-evolution (``protocol=alternating``, R-Zero style): one agent learns per phase.

Phases of ``alternating.phase_steps`` ordinary co-training steps alternate between the
learners: in a Synthesizer phase only the Synthesizer takes its GRPO step, rewarded by the
frozen Reasoner's outcomes; in a Reasoner phase only the Reasoner does, on the frozen
Synthesizer's tasks. Both agents still generate every step, inside the co-training step
(so their requests are seeded as an online step's). The phase follows from the step alone,
so a resumed run needs no state for it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

from synco.cotrain.protocols.base import TrainingProtocol
from synco.cotrain.protocols.config import AlternatingConfig
from synco.cotrain.settings import StepPlan
from synco.core.text import counted


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


@dataclass(frozen=True, kw_only=True)
class Alternating(TrainingProtocol):
    """Phases in which only one agent learns; needs ``mode=cotrain`` (the Synthesizer trains in its phases)."""

    name: str = "alternating"
    alternating: AlternatingConfig = field(default_factory=AlternatingConfig)

    def run_mode(self, mode: str) -> str:
        if mode != "cotrain":
            raise ValueError(f"protocol=alternating trains the Synthesizer in its phases and needs mode=cotrain, "
                             f"got mode={mode!r}")
        return mode

    def plan(self, step: int) -> StepPlan:
        return phase_plan(step, self.alternating)

    def settings(self) -> dict[str, Any]:
        return {"alternating": self.alternating.model_dump()}

    def describe(self, rows: Sequence[dict[str, Any]]) -> list[str]:
        phases = list(dict.fromkeys((r.get("round"), r.get("phase")) for r in rows))
        if not phases:
            return []
        return [f"protocol alternating: {counted(len(phases), 'phase')} ({', '.join(str(p) for _, p in phases)})"]
