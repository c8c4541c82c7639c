"""The domain registry: a config's ``domain:`` name -> a built :class:`~synco.domains.base.Domain`.

One namespace, three sources:

* the built-ins (:mod:`synco.domains.builtins`; their modules are imported only when one is built);
* :func:`register_domain`, called by a script before it loads a config or calls ``synco.cli.main``;
* the ``synco.domains`` entry-point group of any installed package (the entry point's name is the
  domain's name, its object the factory or a :class:`DomainSpec`), so ``synco train domain=NAME`` finds a
  domain that a user's own package declares, without an edit to synco. The group is listed on the first
  lookup and each entry point imported only when its domain is needed.

A name comes from one source: registering a taken name, or two sources claiming one name, is an
error that names both. A registration (:class:`DomainSpec`) is a factory, which takes a :class:`DomainContext`
(the run settings a domain may read, its own settings section validated) and returns the domain (checked against
the ``Domain`` contract), plus optionally the domain's settings model (its ``NAME:`` config section) and its warm
start (``synco pretrain --world NAME``, ``builtin:NAME/<role>`` model paths). See ``docs/ADDING_A_DOMAIN.md``.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable, Mapping
from dataclasses import replace as replace_fields
from importlib.metadata import EntryPoint, entry_points
from typing import Any

from pydantic import BaseModel

from synco.domains.base import Domain
from synco.domains.builtins import BUILTIN_DOMAINS
from synco.domains.spec import DomainContext, DomainError, DomainFactory, DomainSpec, Ref, WarmStart

__all__ = ["BUILTIN_MODEL_PREFIX", "ENTRY_POINT_GROUP", "available_domains", "builtin_model", "builtin_models",
           "domain_factory", "domain_settings", "domain_spec", "get_domain", "register_domain", "resolve",
           "settings_model", "unknown_domain_message", "unregister_domain", "warm_start", "warm_start_worlds"]

ENTRY_POINT_GROUP = "synco.domains"
"""The entry-point group a package declares its domains in (``[project.entry-points."synco.domains"]``)."""

BUILTIN_MODEL_PREFIX = "builtin:"
"""``builtin:NAME/<role>``: a model path naming a role of domain NAME's warm start (:class:`WarmStart`)."""

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")

_SPECS: dict[str, DomainSpec] = dict(BUILTIN_DOMAINS)
"""Built-ins and :func:`register_domain` calls."""

_LOADED: dict[str, DomainSpec] = {}
"""Registrations imported from entry points, by domain name."""

_ENTRY_POINTS: dict[str, list[EntryPoint]] | None = None
"""The ``synco.domains`` group, read once (on the first lookup)."""


def _entry_points() -> dict[str, list[EntryPoint]]:
    global _ENTRY_POINTS
    if _ENTRY_POINTS is None:
        found: dict[str, list[EntryPoint]] = {}
        for ep in entry_points(group=ENTRY_POINT_GROUP):
            found.setdefault(ep.name, []).append(ep)
        _ENTRY_POINTS = found
    return _ENTRY_POINTS


def _describe(ep: EntryPoint) -> str:
    return f"entry point {ep.name} = {ep.value!r} (group {ENTRY_POINT_GROUP})"


def _spec_problem(name: str, spec: DomainSpec) -> str | None:
    """Why ``spec`` cannot be registered as ``name`` (a callable factory, a settings model, a warm start), or None."""
    if not callable(spec.factory):
        return f"the factory must be callable (context -> domain), got {type(spec.factory).__name__}"
    if spec.settings is not None:
        if not (isinstance(spec.settings, type) and issubclass(spec.settings, BaseModel)):
            return f"settings must be a pydantic model class, got {spec.settings!r}"
        if "." in name:
            return ("a domain with settings needs a name without '.' (its config section is the name, and a dotted "
                    "override NAME.KEY=VALUE reaches it)")
    if spec.warm_start is not None and not isinstance(spec.warm_start, WarmStart):
        return f"warm_start must be a synco.domains.spec.WarmStart, got {type(spec.warm_start).__name__}"
    if not isinstance(spec.config_defaults, Mapping):
        return f"config_defaults must be a mapping of dotted config keys, got {type(spec.config_defaults).__name__}"
    for key in spec.config_defaults:
        if not isinstance(key, str) or not key or any(not part for part in key.split(".")) or key == "domain":
            return f"config_defaults: {key!r} is not a dotted config key (e.g. verifier.max_problem_chars)"
    return None


def register_domain(name: str, factory: DomainFactory, *, settings: type[BaseModel] | None = None,
                    warm_start: WarmStart | None = None, config_defaults: Mapping[str, Any] | None = None,
                    replace: bool = False) -> None:
    """Make ``domain: <name>`` build ``factory(context)``.

    ``settings``: the pydantic model of the domain's own config section ``<name>:`` (and ``<name>.KEY=VALUE``
    overrides): the config validates the section with it and the factory gets the validated model as
    ``context.settings``. ``warm_start``: how its tiny agents are warm-started (``synco pretrain --world <name>``)
    and where they are (``builtin:<name>/<role>``). ``config_defaults``: the world's own values of run settings
    (dotted keys, :attr:`DomainSpec.config_defaults`). ``replace=True`` replaces an earlier registration of ``name``
    (a built-in included); without it a taken name is an error. A name an installed package's entry point also
    claims is an error either way.
    """
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise DomainError(f"domain name {name!r}: use 1-64 letters, digits, '_', '.' or '-', starting with a "
                          f"letter or digit (it names run directories)")
    spec = DomainSpec(factory, settings=settings, warm_start=warm_start, config_defaults=dict(config_defaults or {}))
    problem = _spec_problem(name, spec)
    if problem:
        raise DomainError(f"domain {name!r}: {problem}")
    if name in _SPECS and not replace:
        raise DomainError(f"domain {name!r} is already registered; pass replace=True to replace it")
    claims = _entry_points().get(name)
    if claims:
        raise DomainError(f"domain {name!r} is already provided by " + "; ".join(_describe(ep) for ep in claims))
    _SPECS[name] = spec


def unregister_domain(name: str) -> None:
    """Forget a :func:`register_domain` registration (a no-op for an unknown name)."""
    _SPECS.pop(name, None)


def available_domains() -> list[str]:
    """Every name ``domain:`` accepts: built-ins, registrations and installed entry points, sorted."""
    return sorted(set(_SPECS) | set(_entry_points()))


def unknown_domain_message(name: object) -> str:
    """The one message for a name no source provides, listing the available ones."""
    return (f"unknown domain {name!r}; available: {', '.join(available_domains())} (add one with "
            f"synco.domains.registry.register_domain or the {ENTRY_POINT_GROUP!r} entry-point group, "
            f"see docs/ADDING_A_DOMAIN.md)")


def domain_spec(name: str) -> DomainSpec:
    """The registration of ``name``; an entry point's object is imported here, on first use (a bare factory is a
    registration without settings or warm start)."""
    claims = _entry_points().get(name, [])
    sources = ([f"a register_domain call (or synco's built-in {name!r})"] if name in _SPECS else []) \
        + [_describe(ep) for ep in claims]
    if len(sources) > 1:
        raise DomainError(f"domain {name!r} is provided more than once: {'; '.join(sources)}; rename one")
    if name in _SPECS:
        return _SPECS[name]
    if not claims:
        raise DomainError(unknown_domain_message(name))
    if name not in _LOADED:
        try:
            obj = claims[0].load()
        except Exception as err:  # noqa: BLE001 - any import failure of a user's package, said once, with its source
            raise DomainError(f"domain {name!r}: cannot load {_describe(claims[0])}: "
                              f"{type(err).__name__}: {err}") from err
        if not isinstance(obj, DomainSpec) and not callable(obj):
            raise DomainError(f"domain {name!r}: {_describe(claims[0])} is a {type(obj).__name__}, "
                              f"not a factory (context -> domain) or a DomainSpec")
        spec = obj if isinstance(obj, DomainSpec) else DomainSpec(obj)
        problem = _spec_problem(name, spec)
        if problem:
            raise DomainError(f"domain {name!r}: {_describe(claims[0])}: {problem}")
        _LOADED[name] = spec
    return _LOADED[name]


def domain_factory(name: str) -> DomainFactory:
    """The factory registered as ``name`` (:func:`domain_spec`)."""
    return domain_spec(name).factory


def settings_model(name: str) -> type[BaseModel] | None:
    """The settings model domain ``name`` declares for its config section ``<name>:``, or None."""
    return domain_spec(name).settings


def config_defaults(name: str) -> dict[str, Any]:
    """Domain ``name``'s own values of run settings, by dotted key (:attr:`DomainSpec.config_defaults`)."""
    return dict(domain_spec(name).config_defaults)


def domain_settings(name: str, value: BaseModel | Mapping[str, Any] | None = None) -> BaseModel | None:
    """Domain ``name``'s settings: ``value`` (a mapping, or an instance of its model) validated by the model its
    registration declares, the model's defaults for None; None for a domain that declares no model.

    Raises pydantic's ``ValidationError`` for a bad value (its locations are inside the section) and
    :class:`DomainError` for settings given to a domain without a settings model.
    """
    model = settings_model(name)
    if model is None:
        if value is not None:
            raise DomainError(f"domain {name!r} declares no settings (its registration has no settings model), "
                              f"got {type(value).__name__}")
        return None
    if value is None:
        return model()
    return model.model_validate(value)


def _missing_members(domain: object) -> list[str]:
    wanted = set(Domain.__annotations__) | {k for k, v in vars(Domain).items()
                                           if not k.startswith("_") and (callable(v) or isinstance(v, property))}
    return sorted(m for m in wanted if not hasattr(domain, m))


def get_domain(name: str, context: DomainContext | None = None) -> Domain:
    """Build the domain registered as ``name`` for ``context`` (default: no settings, so a domain with a settings
    model gets its defaults; a dict in ``context.settings`` is validated by that model first).

    Raises :class:`DomainError` for an unknown name (listing the available ones) and when the
    factory returns something that lacks members of the ``Domain`` contract (naming them).
    """
    spec = domain_spec(name)
    context = context or DomainContext()
    context = replace_fields(context, settings=domain_settings(name, context.settings))
    domain = spec.factory(context)
    if not isinstance(domain, Domain):
        raise DomainError(f"domain {name!r}: the factory returned a {type(domain).__name__} without "
                          f"{', '.join(_missing_members(domain))} (the Domain contract, synco.domains.base)")
    return domain


# ----------------------------------------------------------------- warm starts


def warm_start_worlds() -> list[str]:
    """The names of the domains with a warm start (``synco pretrain --world``), sorted; an entry point that does not
    load is left out (building its domain names the error)."""
    worlds = []
    for name in available_domains():
        try:
            if domain_spec(name).warm_start is not None:
                worlds.append(name)
        except DomainError:
            continue
    return worlds


def warm_start(name: str) -> WarmStart:
    """Domain ``name``'s warm start; DomainError listing the worlds that have one otherwise."""
    found = domain_spec(name).warm_start
    if found is None:
        raise DomainError(f"domain {name!r} has no warm start; worlds with one: {', '.join(warm_start_worlds())}")
    return found


def builtin_models() -> list[str]:
    """Every ``builtin:NAME/<role>`` model path: each role of each registered warm start."""
    return [f"{BUILTIN_MODEL_PREFIX}{name}/{role}" for name in warm_start_worlds() for role in warm_start(name).roles]


def builtin_model(path: str) -> tuple[WarmStart, str]:
    """The warm start and the role a ``builtin:NAME/<role>`` model path names; DomainError listing the known ones."""
    world, _, role = path.removeprefix(BUILTIN_MODEL_PREFIX).partition("/")
    try:
        found = domain_spec(world).warm_start if path.startswith(BUILTIN_MODEL_PREFIX) and _NAME.fullmatch(world) \
            else None
    except DomainError:
        found = None
    if found is None or role not in found.roles:
        raise DomainError(f"unknown built-in model {path!r}; known: {', '.join(builtin_models())}")
    return found, role


def resolve(ref: Ref) -> Callable[..., Any]:
    """The function ``ref`` names: a callable as it is, ``"module:attribute"`` imported (a warm start's functions)."""
    if callable(ref):
        return ref
    module, _, attribute = ref.partition(":")
    try:
        found = getattr(importlib.import_module(module), attribute)
    except (ImportError, AttributeError) as err:
        raise DomainError(f"cannot resolve {ref!r} ('module:attribute'): {type(err).__name__}: {err}") from err
    if not callable(found):
        raise DomainError(f"{ref!r} is a {type(found).__name__}, not a function")
    return found
