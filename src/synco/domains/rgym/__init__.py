"""The reasoning-gym world (``domain: rgym``): reasoning-gym's procedural families, whose generator configs the
Synthesizer writes (:mod:`~synco.domains.rgym.domain`); what a config may ask (:mod:`~synco.domains.rgym.catalog`);
the worker process that generates and scores (:mod:`~synco.domains.rgym.gym`, :mod:`~synco.domains.rgym._worker`);
the scorer audit (:mod:`~synco.domains.rgym.audit`); the ``rgym:`` section (:mod:`~synco.domains.rgym.settings`).
"""

from synco.domains.rgym.domain import RgymDomain
from synco.domains.rgym.settings import RgymSettings

__all__ = ["RgymDomain", "RgymSettings"]
