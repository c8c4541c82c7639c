"""Training protocols on one trainer: online co-training, EvoSyn's rounds, alternating phases, RFT.

The settings (:mod:`synco.cotrain.protocols.config`) load torch-free with every config; the step
functions (:mod:`synco.run.steps`) wrap :func:`synco.cotrain.engine.cotrain_step`, and the
supervised loss lives in :mod:`synco.learn.sft`.
"""

from synco.cotrain.protocols.config import PROTOCOLS, AlternatingConfig, ProtocolName, RoundsConfig, protocol_mode

__all__ = ["PROTOCOLS", "AlternatingConfig", "ProtocolName", "RoundsConfig", "protocol_mode"]
