"""The protocols a run may name (``protocol=...``): a name -> factory registry, the four built-ins registered here.

A factory takes the run's config and returns the :class:`~synco.cotrain.protocols.base.TrainingProtocol` object,
built once at setup (and at config validation, to check the protocol against ``mode``: keep a factory cheap, it
loads nothing). A protocol from outside the package registers itself::

    register_protocol("warmup", lambda cfg: Warmup(steps=cfg.steps, effect_every=cfg.evosyn.effect_every))

and runs with ``protocol=warmup``, with no edit in ``synco.cotrain`` or ``synco.run``. Torch-free.
"""

from __future__ import annotations

from typing import Any, Callable

from synco.cotrain.protocols.alternating import Alternating
from synco.cotrain.protocols.base import TrainingProtocol
from synco.cotrain.protocols.online import Online
from synco.cotrain.protocols.rft import RFT
from synco.cotrain.protocols.rounds import Rounds

ProtocolFactory = Callable[[Any], TrainingProtocol]
"""Builds a protocol from the run's ``synco.config.RunConfig`` (typed Any here: the config layer sits above this one)."""

_FACTORIES: dict[str, ProtocolFactory] = {}


def register_protocol(name: str, factory: ProtocolFactory, *, replace: bool = False) -> None:
    """Make ``protocol=<name>`` build ``factory(cfg)``; ValueError when the name is taken (unless ``replace``)."""
    if not name or not name.isidentifier():
        raise ValueError(f"a protocol's name must be an identifier, got {name!r}")
    if name in _FACTORIES and not replace:
        raise ValueError(f"protocol {name!r} is already registered")
    _FACTORIES[name] = factory


def unregister_protocol(name: str) -> None:
    """Forget ``protocol=<name>`` (a test's own protocol, once it is done)."""
    _FACTORIES.pop(name, None)


def protocol_names() -> tuple[str, ...]:
    """The registered protocols' names, built-ins first."""
    return tuple(_FACTORIES)


def unknown_protocol_message(name: str) -> str:
    return f"unknown protocol {name!r} (registered: {', '.join(protocol_names())})"


def build_protocol(cfg: Any) -> TrainingProtocol:
    """The run's protocol object, from its registered factory; ValueError for an unregistered name."""
    factory = _FACTORIES.get(cfg.protocol)
    if factory is None:
        raise ValueError(unknown_protocol_message(cfg.protocol))
    return factory(cfg)


register_protocol("online", lambda cfg: Online(steps=cfg.steps, effect_every=cfg.evosyn.effect_every))
register_protocol("rounds", lambda cfg: Rounds(steps=cfg.steps, effect_every=cfg.evosyn.effect_every,
                                               rounds=cfg.rounds, seed=cfg.seed))
register_protocol("alternating", lambda cfg: Alternating(steps=cfg.steps, effect_every=cfg.evosyn.effect_every,
                                                         alternating=cfg.alternating))
register_protocol("rft", lambda cfg: RFT(steps=cfg.steps, effect_every=cfg.evosyn.effect_every, rounds=cfg.rounds,
                                         seed=cfg.seed))

__all__ = ["ProtocolFactory", "build_protocol", "protocol_names", "register_protocol", "unregister_protocol"]
