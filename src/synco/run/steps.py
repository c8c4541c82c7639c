"""The run's step, assembled once from its protocol: the protocol's plan, the co-training step, what the protocol
runs after it (a round's training).

A protocol never changes the run's ``StepSettings``: what it decides per step is a ``StepPlan`` that the step hands
to :func:`~synco.cotrain.engine.cotrain_step`. The asynchronous pipeline (:mod:`synco.cotrain.pipeline`) takes the
same protocol object and runs the same plan and ``after``, its phases overlapped.
"""

from __future__ import annotations

from typing import Callable

from synco.cotrain.engine import CoTrainState, cotrain_step
from synco.cotrain.protocols.base import TrainingProtocol
from synco.cotrain.stats import StepStats

StepFn = Callable[[CoTrainState, int], StepStats]


def protocol_step(protocol: TrainingProtocol) -> StepFn:
    """The function the synchronous loop calls for each step: plan, co-training step, ``after``."""

    def step_fn(state: CoTrainState, step: int) -> StepStats:
        return protocol.after(state, step, cotrain_step(state, step, protocol.plan(step)))

    return step_fn
