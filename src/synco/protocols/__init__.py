"""Training protocols on one trainer: online co-training, EvoSyn's rounds, alternating phases, RFT.

The settings (:mod:`synco.protocols.config`) load torch-free with every config; the step
functions (:mod:`synco.protocols.steps`) wrap :func:`synco.engine.cotrain_step`, and the
supervised loss lives in :mod:`synco.protocols.sft`.
"""

from synco.protocols.config import PROTOCOLS, AlternatingConfig, ProtocolName, RoundsConfig, protocol_mode

__all__ = ["PROTOCOLS", "AlternatingConfig", "ProtocolName", "RoundsConfig", "protocol_mode"]
