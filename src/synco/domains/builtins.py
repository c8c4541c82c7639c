"""synco's own domains, registered as any domain is (:class:`~synco.domains.spec.DomainSpec`): each one's factory
(its module imported only when it is built), its settings model (``tools:``, ``tau2:``), its warm start
(``synco pretrain --world NAME``, ``builtin:NAME/<role>``) and its own values of run settings (the verifier's
problem length bounds).

This is the one place that names them; the registry, the config, the run and the CLI ask the registry.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from synco.domains.spec import DomainContext, DomainSpec, WarmStart
from synco.domains.rgym.payload import RgymPayload  # noqa: F401  (the payload kinds a pool may hold, registered)
from synco.domains.rgym.settings import RgymSettings
from synco.domains.tau2.payload import Tau2Payload  # noqa: F401
from synco.domains.tools.payload import ToolsPayload  # noqa: F401
from synco.domains.tau2.settings import Tau2Settings
from synco.domains.tools.settings import ToolsSettings

if TYPE_CHECKING:
    from synco.domains.arith import ArithDomain
    from synco.domains.arith_chat import ArithChatDomain
    from synco.domains.math import MathDomain
    from synco.domains.rgym import RgymDomain
    from synco.domains.tau2.domain import Tau2Domain
    from synco.domains.tools import ToolsDomain

DEFAULT_DOMAIN = "arith"
"""The domain of a config that names none: the embedded arithmetic world (its preset is the default one, its warm
start the default agents')."""


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

    return ToolsDomain(context.settings)  # type: ignore[arg-type]  # the registry validated it: ToolsSettings


def _tau2(context: DomainContext) -> Tau2Domain:
    from synco.domains.tau2.domain import make_domain

    return make_domain(context)


def _rgym(context: DomainContext) -> RgymDomain:
    from synco.domains.rgym import RgymDomain

    return RgymDomain(context.settings, seed=context.seed)  # type: ignore[arg-type]  # validated: RgymSettings


def _problem_chars(low: int, high: int, **more: object) -> dict[str, object]:
    """The verifier's problem length bounds a world's cards need (``config_defaults``), and any further settings."""
    return {"verifier.min_problem_chars": low, "verifier.max_problem_chars": high,
            **{f"verifier.{k}": v for k, v in more.items()}}


BUILTIN_DOMAINS: dict[str, DomainSpec] = {
    "arith": DomainSpec(_arith, warm_start=WarmStart(pretrain="synco.run.pretrain.arith:pretrain_arith",
                                                     folder="synco.run.pretrain.arith:load_arith_warm_start"),
                        config_defaults=_problem_chars(3, 40)),
    "arith-chat": DomainSpec(_arith_chat, config_defaults=_problem_chars(3, 40)),
    "math": DomainSpec(_math, config_defaults=_problem_chars(20, 4000)),
    "tools": DomainSpec(_tools, settings=ToolsSettings,
                        warm_start=WarmStart(pretrain="synco.run.pretrain.tools:warm_start",
                                             folder="synco.run.pretrain.tools:load_tools_warm_start"),
                        config_defaults=_problem_chars(8, 80, novelty_threshold=0.95)),
    "tau2": DomainSpec(_tau2, settings=Tau2Settings),
    # a card's problem is a generator config (up to 600 characters); questions share each family's boilerplate, so
    # only copies are duplicates, and those are not rejected: the items come from synco's seeds, and a small cell
    # (products at level 0: 100 questions) repeats its questions whatever the Synthesizer writes
    "rgym": DomainSpec(_rgym, settings=RgymSettings,
                       warm_start=WarmStart(pretrain="synco.run.pretrain.rgym:warm_start",
                                            folder="synco.run.pretrain.rgym:load_rgym_warm_start"),
                       config_defaults=_problem_chars(3, 600, novelty_threshold=1.0, reject_duplicates=False)),
}
"""The built-in registrations, by name."""
