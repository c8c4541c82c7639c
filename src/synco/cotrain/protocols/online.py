"""Online co-training (``protocol=online``, the paper's, the default): every step both agents take their GRPO step,
as ``mode`` says (the Synthesizer only in ``cotrain``). Nothing before, between or after the steps: the base
:class:`~synco.cotrain.protocols.base.TrainingProtocol` as it is."""

from __future__ import annotations

from dataclasses import dataclass

from synco.cotrain.protocols.base import TrainingProtocol


@dataclass(frozen=True, kw_only=True)
class Online(TrainingProtocol):
    """Online co-training: the co-training step, every step, nothing after it."""

    name: str = "online"

    def run_label(self, mode: str) -> str:
        return mode
