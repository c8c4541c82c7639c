"""The tools world's card payload: an instruction, its gold actions and the outputs the agent must state."""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar, Literal

from synco.core.records import TaskPayload


class ToolsPayload(TaskPayload):
    """A tools-world task as the Synthesizer wrote it (texts parsed by ``synco.domains.tools.syntax``)."""

    kind: Literal["tools"] = "tools"
    instruction: str
    """What the user asks, naming entities by name (the Reasoner's prompt)."""
    actions: str
    """The gold action list, ``find_user(bob);cancel_order(o58)`` (``syntax.parse_actions``)."""
    outputs: str
    """The values the agent must state, ``12`` or ``none`` (``syntax.parse_outputs``)."""
    wire_names: ClassVar[Mapping[str, str]] = {"instruction": "problem", "actions": "solution", "outputs": "final_answer"}
    prompt_field: ClassVar[str] = "instruction"
    solution_field: ClassVar[str] = "actions"
    answer_field: ClassVar[str] = "outputs"
    solution_is_gold: ClassVar[bool] = True

    def factor_subject(self) -> str:
        """``instruction + "\\n" + actions``: factors describe the gold trajectory, not the wording alone."""
        return f"{self.instruction}\n{self.actions}"
