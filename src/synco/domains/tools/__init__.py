"""The embedded ``tools`` world: a τ²-style tool-use domain small enough for tiny character models.

A fixed database (``db``, with numeric variants per episode when ``tools.db_variants`` is on), eight typed tools
tagged read or write with a short policy (``tools``), a compact call syntax (``syntax``), task families from
templates (``tasks``), verification of a card by execution (``verify``), the per-episode environment (``env``), the
``tools:`` config section (``settings``) and the domain (``domain``). Every text the world writes is printable
ASCII; everything runs on a CPU in microseconds.
"""

from synco.domains.tools.domain import ToolsDomain
from synco.domains.tools.syntax import ActionError, format_actions, parse_actions
from synco.domains.tools.tools import POLICY, TOOL_KINDS, TOOLS

__all__ = ["POLICY", "TOOLS", "TOOL_KINDS", "ActionError", "ToolsDomain", "format_actions", "parse_actions"]
