"""Rejection-sampling fine-tuning (``protocol=rft``): EvoSyn's rounds on the fixed corpus of ``mode=static``.

The Synthesizer is not used: each round draws its tasks from the corpus, the Reasoner samples ``k`` answers per task
without training, and at the round's end it is fine-tuned on its correct ones (``rounds``, as
:class:`~synco.cotrain.protocols.rounds.Rounds`). The configured ``mode`` is left as written; the protocol runs
``static`` (``cotrain``, the default, is read as "not chosen").
"""

from __future__ import annotations

from dataclasses import dataclass

from synco.cotrain.protocols.rounds import Rounds


@dataclass(frozen=True, kw_only=True)
class RFT(Rounds):
    """Rounds on the fixed corpus: runs ``static`` whatever ``mode`` says, unless it says another source."""

    name: str = "rft"

    def run_mode(self, mode: str) -> str:
        if mode not in ("cotrain", "static"):
            raise ValueError(f"protocol=rft samples the fixed corpus of mode=static (no Synthesizer); "
                             f"mode={mode!r} cannot go with it (use mode=static, or protocol=rounds)")
        return "static"
