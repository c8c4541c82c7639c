"""EvoSyn inside the co-training loop: an explicit, evolving space of task factors.

* :mod:`~synco.evosyn.space` — ``FactorDef`` (a named extractor problem -> bucket),
  ``FactorSpace`` (the versioned set of factors in use, with status and provenance)
  and cells (one bucket per active factor).
* :mod:`~synco.evosyn.designer` — ``allocate``: splits the step's card slots over
  cells from the pool's recent window (gap to the teachable band, coverage, an
  exploration floor, a retention share). A pure function.
* :mod:`~synco.evosyn.reflector` — conditional mutual information of Reasoner
  failure with a candidate factor given the current cells, a stratified
  permutation test, promotion and retirement.
* :mod:`~synco.evosyn.control` — the control check: a promoted factor the Synthesizer
  does not follow (its cards miss the requested bucket) stays in use, observed only,
  out of the Designer's cells.
* :mod:`~synco.evosyn.metrics` — controllability, coverage, balance, Spearman ρ.
* :mod:`~synco.evosyn.trajectory` — tool-use worlds: factors of a gold action list
  (``num_write``, ``num_read``, ``pattern``, ``distinct_tools``), its structural metrics
  (interaction coverage, pattern diversity, distinct sequences, contrastive support) and
  the first wrong call of a failed episode.
* :mod:`~synco.evosyn.proposer` — the opt-in LLM proposer: a keyword factor proposed by
  the Synthesizer model as strict JSON (parsed as hostile text), computed by synco from
  the problem, a Reflector candidate like any other.
* :mod:`~synco.evosyn.config` — ``EvoSynConfig`` (the ``evosyn`` config section).

Nothing here imports torch.
"""

from synco.evosyn.config import EvoSynConfig
from synco.evosyn.space import Cell, FactorChange, FactorDef, FactorSpace, FactorState

__all__ = ["Cell", "EvoSynConfig", "FactorChange", "FactorDef", "FactorSpace", "FactorState"]
