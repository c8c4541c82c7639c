"""Sampling engines by name (``rollout_engine``): the built-ins and any registered from outside the package.

An engine is a factory ``(learner, role, trains) -> Sampler`` (:class:`synco.core.policy.Sampler`), called once
when the learner is built (:func:`synco.learn.build.build_policy`); ``trains``: the role is updated in this run (its
completions must carry the sampled ids and log-probs). A new engine needs no edit in ``cotrain/`` or ``run/``::

    from synco.core.engines import register_engine
    register_engine("mine", lambda learner, role, trains: MySampler(learner))

then ``reasoner.rollout_engine=mine``. Torch-free: the config validates names against this registry; how a built-in
engine is built is the learner's business (:mod:`synco.learn.build`).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

EngineFactory = Callable[[Any, str, bool], Any]
"""``(learner, role, trains) -> Sampler``."""

BUILTIN_ENGINES = ("hf", "vllm", "served")
"""transformers on the training model, vLLM in process, a served endpoint (:mod:`synco.learn.build` builds them)."""
_REGISTERED: dict[str, EngineFactory] = {}
_NAME = re.compile(r"^[a-z][a-z0-9_-]*$")


def register_engine(name: str, factory: EngineFactory) -> None:
    """Make ``rollout_engine: <name>`` build its sampler with ``factory``; registering a name again replaces it
    (a built-in's name is refused)."""
    if not _NAME.match(name):
        raise ValueError(f"engine name {name!r}: lower-case letters, digits, '_' or '-', starting with a letter")
    if name in BUILTIN_ENGINES:
        raise ValueError(f"engine name {name!r} is built in")
    if not callable(factory):
        raise TypeError(f"engine {name!r}: the factory must be callable, got {type(factory).__name__}")
    _REGISTERED[name] = factory


def engine_names() -> list[str]:
    """Every engine ``rollout_engine`` may name: the built-ins, then the registered ones."""
    return [*BUILTIN_ENGINES, *_REGISTERED]


def engine_factory(name: str) -> EngineFactory | None:
    """The factory registered under ``name``; None for a built-in engine."""
    if name in _REGISTERED:
        return _REGISTERED[name]
    if name not in BUILTIN_ENGINES:
        raise ValueError(f"unknown rollout_engine {name!r}; choose one of {', '.join(engine_names())}")
    return None
