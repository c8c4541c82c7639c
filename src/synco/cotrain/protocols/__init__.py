"""Training protocols on one trainer: online co-training, EvoSyn's rounds, alternating phases, RFT.

Each protocol is one object in one file (:mod:`~synco.cotrain.protocols.online`, ``rounds``, ``alternating``,
``rft``), a :class:`~synco.cotrain.protocols.base.TrainingProtocol` built once at setup from the registry
(:mod:`synco.cotrain.protocols.registry`); the synchronous loop and the asynchronous pipeline both take it. Their
settings sections (:mod:`synco.cotrain.protocols.config`) load torch-free with every config, and so do the objects.
"""
