"""The domain registry: a config's ``domain:`` name -> a built :class:`~synco.domains.base.Domain`.

One namespace, three sources:

* the built-ins, ``arith``, ``arith-chat``, ``math``, ``tools`` and ``tau2`` (their modules are imported only when one is built);
* :func:`register_domain`, called by a script before it loads a config or calls ``synco.cli.main``;
* the ``synco.domains`` entry-point group of any installed package (the entry point's name is the
  domain's name, its object the factory), so ``synco train domain=NAME`` finds a domain that a
  user's own package declares, without an edit to synco. The group is listed on the first lookup
  and each entry point imported only when its domain is built.

A name comes from one source: registering a taken name, or two sources claiming one name, is an
error that names both. A factory takes a :class:`DomainContext` (the run settings a domain may read)
and returns the domain; what it returns is checked against the ``Domain`` contract.
See ``docs/ADDING_A_DOMAIN.md``.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib.metadata import EntryPoint, entry_points
from typing import TYPE_CHECKING, Any

from synco.domains.base import Domain
from synco.domains.tau2.settings import Tau2Settings
from synco.domains.tools.settings import ToolsSettings

if TYPE_CHECKING:
    from synco.domains.arith import ArithDomain
    from synco.domains.arith_chat import ArithChatDomain
    from synco.domains.math import MathDomain
    from synco.domains.tau2.domain import Tau2Domain
    from synco.domains.tools import ToolsDomain

ENTRY_POINT_GROUP = "synco.domains"
"""The entry-point group a package declares its domains in (``[project.entry-points."synco.domains"]``)."""

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")


class DomainError(ValueError):
    """A domain name is unknown, malformed or taken, or a factory did not build a domain."""


@dataclass(frozen=True)
class DomainContext:
    """The run settings a domain factory may read (the rest of the config is the loop's business)."""

    prompts_dir: str | None = None
    """A folder of prompt templates searched before ``$SYNCO_PROMPTS_DIR`` and the shipped ones (``prompts_dir``)."""

    tau2: Tau2Settings = field(default_factory=Tau2Settings)
    """The ``tau2:`` section (``domain: tau2``)."""

    tools: ToolsSettings = field(default_factory=ToolsSettings)
    """The ``tools:`` section (``domain: tools``)."""

    user_factory: Callable[[], Any] | None = field(default=None, compare=False)
    """Builds the simulated user of a domain whose episodes have one (τ²), called on first need; picklable
    (a Ray worker builds its own). None: the domain refuses episodes that need a simulated user."""


DomainFactory = Callable[[DomainContext], Domain]
"""Builds a domain from the run's :class:`DomainContext`."""


def _arith(context: DomainContext) -> ArithDomain:
    from synco.domains.arith import ArithDomain

    return ArithDomain()


def _arith_chat(context: DomainContext) -> ArithChatDomain:
    from synco.domains.arith_chat import ArithChatDomain

    return ArithChatDomain()


def _math(context: DomainContext) -> MathDomain:
    from synco.domains.math import MathDomain

    return MathDomain(prompts_dir=context.prompts_dir)


def _tools(context: DomainContext) -> ToolsDomain:
    from synco.domains.tools import ToolsDomain

    return ToolsDomain(context.tools)


def _tau2(context: DomainContext) -> Tau2Domain:
    from synco.domains.tau2.domain import Tau2Domain
    from synco.domains.tau2.world import Tau2Missing, require_tau2

    try:
        require_tau2()
    except Tau2Missing as err:
        raise DomainError(str(err)) from None
    return Tau2Domain(context.tau2, user_factory=context.user_factory)


_FACTORIES: dict[str, DomainFactory] = {"arith": _arith, "arith-chat": _arith_chat, "math": _math, "tools": _tools,
                                        "tau2": _tau2}
"""Built-ins and :func:`register_domain` calls."""

_LOADED: dict[str, DomainFactory] = {}
"""Factories imported from entry points, by domain name."""

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


def register_domain(name: str, factory: DomainFactory, *, replace: bool = False) -> None:
    """Make ``domain: <name>`` build ``factory(context)``.

    ``replace=True`` replaces an earlier registration of ``name`` (a built-in included); without it a
    taken name is an error. A name an installed package's entry point also claims is an error either way.
    """
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise DomainError(f"domain name {name!r}: use 1-64 letters, digits, '_', '.' or '-', starting with a "
                          f"letter or digit (it names run directories)")
    if not callable(factory):
        raise DomainError(f"domain {name!r}: the factory must be callable (context -> domain), "
                          f"got {type(factory).__name__}")
    if name in _FACTORIES and not replace:
        raise DomainError(f"domain {name!r} is already registered; pass replace=True to replace it")
    claims = _entry_points().get(name)
    if claims:
        raise DomainError(f"domain {name!r} is already provided by " + "; ".join(_describe(ep) for ep in claims))
    _FACTORIES[name] = factory


def unregister_domain(name: str) -> None:
    """Forget a :func:`register_domain` registration (a no-op for an unknown name)."""
    _FACTORIES.pop(name, None)


def available_domains() -> list[str]:
    """Every name ``domain:`` accepts: built-ins, registrations and installed entry points, sorted."""
    return sorted(set(_FACTORIES) | set(_entry_points()))


def unknown_domain_message(name: object) -> str:
    """The one message for a name no source provides, listing the available ones."""
    return (f"unknown domain {name!r}; available: {', '.join(available_domains())} (add one with "
            f"synco.domains.registry.register_domain or the {ENTRY_POINT_GROUP!r} entry-point group, "
            f"see docs/ADDING_A_DOMAIN.md)")


def domain_factory(name: str) -> DomainFactory:
    """The factory registered as ``name``; an entry point's object is imported here, on first use."""
    claims = _entry_points().get(name, [])
    sources = ([f"a register_domain call (or synco's built-in {name!r})"] if name in _FACTORIES else []) \
        + [_describe(ep) for ep in claims]
    if len(sources) > 1:
        raise DomainError(f"domain {name!r} is provided more than once: {'; '.join(sources)}; rename one")
    if name in _FACTORIES:
        return _FACTORIES[name]
    if not claims:
        raise DomainError(unknown_domain_message(name))
    if name not in _LOADED:
        try:
            factory = claims[0].load()
        except Exception as err:  # noqa: BLE001 - any import failure of a user's package, said once, with its source
            raise DomainError(f"domain {name!r}: cannot load {_describe(claims[0])}: "
                              f"{type(err).__name__}: {err}") from err
        if not callable(factory):
            raise DomainError(f"domain {name!r}: {_describe(claims[0])} is a {type(factory).__name__}, "
                              f"not a factory (context -> domain)")
        _LOADED[name] = factory
    return _LOADED[name]


def _missing_members(domain: object) -> list[str]:
    wanted = set(Domain.__annotations__) | {k for k, v in vars(Domain).items()
                                           if not k.startswith("_") and (callable(v) or isinstance(v, property))}
    return sorted(m for m in wanted if not hasattr(domain, m))


def get_domain(name: str, context: DomainContext | None = None) -> Domain:
    """Build the domain registered as ``name`` for ``context`` (default: no settings).

    Raises :class:`DomainError` for an unknown name (listing the available ones) and when the
    factory returns something that lacks members of the ``Domain`` contract (naming them).
    """
    domain = domain_factory(name)(context or DomainContext())
    if not isinstance(domain, Domain):
        raise DomainError(f"domain {name!r}: the factory returned a {type(domain).__name__} without "
                          f"{', '.join(_missing_members(domain))} (the Domain contract, synco.domains.base)")
    return domain
