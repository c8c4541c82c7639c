"""Rollouts: how the agents' samples are made, for every engine and every domain.

* :mod:`synco.rollout.attempts`: the rollout seam, tasks in and graded :class:`~synco.core.records.Attempt` records
  out (one-turn answers graded by the answer checker, or episodes graded by their environments).
* :mod:`synco.rollout.episodes`: multi-turn episodes, token-in / token-out, in seeded jobs.
* :mod:`synco.rollout.gold`: a verified card's gold episode replayed, for SFT on verified trajectories.
* :mod:`synco.rollout.served`: a served endpoint (a vLLM server, or any completions / chat endpoint for a frozen role).
* :mod:`synco.rollout.vllm_engine`: vLLM in this process (imported lazily; a missing vLLM fails when an engine is
  built, with how to install it).
* :mod:`synco.rollout.card_decoding`: template-constrained card decoding.

The engines' settings live torch-free in :mod:`synco.core.rollout_config`. Import each name from its own module:
importing this package loads neither torch nor vLLM.
"""
