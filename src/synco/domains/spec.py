"""What a domain registration declares: the factory, the domain's own settings model and its warm start.

Leaf types of the registry (:mod:`synco.domains.registry`), kept apart so the built-in registrations
(:mod:`synco.domains.builtins`) and a domain's own factory can name them without importing the registry.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from pydantic import BaseModel

if TYPE_CHECKING:
    from synco.domains.base import Domain


@runtime_checkable
class LoadsModels(Protocol):
    """A domain's settings that name models the run loads (τ²'s simulated user), so the run checks them before any
    model loads (``synco.run.setup.check_models``)."""

    def models(self, section: str) -> dict[str, str]:
        """``{config field: model}`` of every model these settings make the run load (``section``: its config key)."""
        ...


@runtime_checkable
class ServesEndpoints(Protocol):
    """A domain's settings that name served endpoints the run samples from (τ²'s user on ``tau2.served``), checked at
    startup (``synco.run.setup.check_endpoints``)."""

    def endpoints(self, section: str) -> dict[str, Any]:
        """``{config section: ServedSettings}`` of every endpoint these settings use (``section``: their config key)."""
        ...


class DomainError(ValueError):
    """A domain name is unknown, malformed or taken, or a factory did not build a domain."""


@dataclass(frozen=True)
class DomainContext:
    """What a domain factory gets: the run settings a domain may read (the rest of the config is the loop's
    business) and the services the run lends it."""

    prompts_dir: str | None = None
    """A folder of prompt templates searched before ``$SYNCO_PROMPTS_DIR`` and the shipped ones (``prompts_dir``)."""

    settings: BaseModel | None = None
    """The domain's own config section (``<name>:``), validated by the settings model its registration declares
    (:class:`DomainSpec`); the model's defaults when the config has no such section. None for a domain that declares
    no settings model. ``get_domain`` validates a plain dict here too."""

    seed: int = 0
    """The run's seed: a domain that draws its own tasks (reasoning-gym's generators, ``domain: rgym``) derives their
    seeds from it."""

    simulated_user: Callable[..., Any] | None = field(default=None, compare=False)
    """Loads a frozen local chat model that plays the user of an episode:
    ``simulated_user(model, max_new_tokens=..., temperature=...)`` returns an object with ``reply(system,
    conversation) -> str`` and ``model_name`` (``synco.learn.user_sim.LocalUserSim``; the run binds the device).
    Picklable (a Ray worker loads its own); a domain calls it only when an episode needs a user. None: no local
    model can play a user here."""


DomainFactory = Callable[[DomainContext], "Domain"]
"""Builds a domain from the run's :class:`DomainContext`."""

Ref = str | Callable[..., Any]
"""A function, or a ``"module:attribute"`` reference to one, imported when it is first called (a warm start trains
models: its code lives above the domain layer, so a registration names it instead of importing it)."""


@dataclass(frozen=True)
class WarmStart:
    """How an embedded world's tiny agents are warm-started, and where the result is.

    ``synco pretrain --world NAME`` calls ``pretrain(out_dir, seed=..., [reasoner_steps=..., synthesizer_steps=...,]
    [settings=...])`` and prints what it returns; ``settings`` (the world's settings model, validated from the
    command's ``NAME.KEY=VALUE`` overrides) is passed only to a world that declares a settings model. A model path
    ``builtin:NAME/<role>`` resolves to ``folder() / <role>``: the shipped warm start, or one built on first use.
    """

    pretrain: Ref
    folder: Ref
    roles: tuple[str, ...] = ("synthesizer", "reasoner")
    """The agents it trains, each a folder under ``folder()`` (``builtin:NAME/<role>``)."""


@dataclass(frozen=True)
class DomainSpec:
    """One registration: ``domain: NAME`` builds ``factory(context)``.

    ``settings``: the pydantic model of the domain's own config section, ``NAME:`` (YAML) and ``NAME.KEY=VALUE``
    (overrides); the config validates the section with it (errors name ``NAME.KEY`` and the value) and the factory
    gets the validated model as ``context.settings``. ``warm_start``: the world's tiny agents (:class:`WarmStart`).
    ``config_defaults``: the world's own values of run settings (see the field).
    An entry point's object may be a :class:`DomainSpec` or a bare factory (no settings, no warm start).
    """

    factory: DomainFactory
    settings: type[BaseModel] | None = None
    warm_start: WarmStart | None = None
    config_defaults: Mapping[str, Any] = field(default_factory=dict)
    """The domain's own values of run settings that depend on the world (dotted keys: ``verifier.max_problem_chars``
    for a config card is not arith's 40): a config that switches to this domain from a preset of another world gets
    them where it does not set them itself (:func:`synco.config.load_config`); the domain's own preset may differ."""
