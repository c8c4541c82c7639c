"""The embedded ``tools`` world: a τ²-style tool-use domain small enough for tiny character models.

A fixed database (``db``, with numeric variants per episode when ``tools.db_variants`` is on), eight typed tools
tagged read or write with a short policy (``tools``), a compact call syntax (``syntax``), task families from
templates (``tasks``), verification of a card by execution (``verify``), the per-episode environment (``env``), the
``tools:`` config section (``settings``) and the domain (``domain``). Every text the world writes is printable
ASCII; everything runs on a CPU in microseconds.

The names below are imported on first use, so the config can read ``synco.domains.tools.settings`` without
loading the world (the registry builds a domain only when a run asks for it).
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from synco.domains.tools.domain import ToolsDomain
    from synco.domains.tools.syntax import ActionError, format_actions, parse_actions
    from synco.domains.tools.tools import POLICY, TOOL_KINDS, TOOLS

_EXPORTS = {"ToolsDomain": "domain", "ActionError": "syntax", "format_actions": "syntax", "parse_actions": "syntax",
            "POLICY": "tools", "TOOLS": "tools", "TOOL_KINDS": "tools"}

__all__ = ["POLICY", "TOOLS", "TOOL_KINDS", "ActionError", "ToolsDomain", "format_actions", "parse_actions"]


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(import_module(f"{__name__}.{_EXPORTS[name]}"), name)
