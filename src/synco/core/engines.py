"""Sampling engines by name (``rollout_engine``): the built-ins and any registered from outside the package.

An engine is a factory ``(learner, role, trains) -> Sampler`` (:class:`synco.core.policy.Sampler`), called once
when the learner is built (:func:`synco.learn.build.build_policy`); ``trains``: the role is updated in this run (its
completions must carry the sampled ids and log-probs). A new engine needs no edit in ``cotrain/`` or ``run/``::

    from synco.core.engines import register_engine
    register_engine("mine", lambda learner, role, trains: MySampler(learner))

then ``reasoner.rollout_engine=mine``. Torch-free: the config validates names against this registry, and a built-in
engine's module is imported only when a learner asks for it.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable
from typing import Any

EngineFactory = Callable[[Any, str, bool], Any]
"""``(learner, role, trains) -> Sampler``."""

_BUILTIN: dict[str, str | None] = {
    "hf": None,  # transformers on the training model itself: the learner's own sampler
    "vllm": None,  # built by the learner itself (every HF learner: shared-base views, Ray workers, FSDP ranks)
    "served": "synco.rollout.served:ServedGenerator.for_policy",
}
_REGISTERED: dict[str, EngineFactory] = {}
_NAME = re.compile(r"^[a-z][a-z0-9_-]*$")


def register_engine(name: str, factory: EngineFactory) -> None:
    """Make ``rollout_engine: <name>`` build its sampler with ``factory``; registering a name again replaces it
    (a built-in's name is refused)."""
    if not _NAME.match(name):
        raise ValueError(f"engine name {name!r}: lower-case letters, digits, '_' or '-', starting with a letter")
    if name in _BUILTIN:
        raise ValueError(f"engine name {name!r} is built in")
    if not callable(factory):
        raise TypeError(f"engine {name!r}: the factory must be callable, got {type(factory).__name__}")
    _REGISTERED[name] = factory


def engine_names() -> list[str]:
    """Every engine ``rollout_engine`` may name: the built-ins, then the registered ones."""
    return [*_BUILTIN, *_REGISTERED]


def engine_factory(name: str) -> EngineFactory | None:
    """The factory of engine ``name``; None: the learner samples with its own (``hf``, ``vllm``)."""
    if name in _REGISTERED:
        return _REGISTERED[name]
    if name not in _BUILTIN:
        raise ValueError(f"unknown rollout_engine {name!r}; choose one of {', '.join(engine_names())}")
    ref = _BUILTIN[name]
    if ref is None:
        return None
    module, _, attr = ref.partition(":")
    target: Any = importlib.import_module(module)
    for part in attr.split("."):
        target = getattr(target, part)
    return target
