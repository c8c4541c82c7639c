"""The embedded worlds' warm-start recipes (``synco pretrain --world NAME``, ``builtin:NAME/<role>``).

A world's warm-start data lives with the world (``synco.domains.arith_warm_start``, ``synco.domains.tools.warm_start``,
``synco.domains.rgym.warm_start``); the learner trains what it is handed (:mod:`synco.learn.pretrain`). A recipe here
joins the two: it hands each agent's example stream to the learner, measures the trained agents on the world, writes
``meta.json``, and finds the shipped or cached folder. Each world's registration (``synco.domains.builtins``) names
its recipe as a ``"module:function"`` reference, so the domain layer imports nothing above it.
"""
