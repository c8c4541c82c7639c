"""τ²'s card payload: a user scenario, the gold actions, the information to communicate and the other criteria."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import ClassVar, Literal

from synco.core.records import HEADER_FIELDS, TaskCard, TaskPayload


class Tau2Payload(TaskPayload):
    """A τ² task as the Synthesizer wrote it (texts parsed by ``synco.domains.tau2.tasks.parse_card``). The field
    docstrings are model-facing: ``Tau2Settings.payload_schema`` shows them to the Synthesizer."""

    kind: Literal["tau2"] = "tau2"
    scenario: str
    """The user's side: what the user wants and knows (a JSON scenario), or the ticket a solo agent is given."""
    actions: str
    """The gold actions in order: a JSON list of {"name": ..., "arguments": {...}}, or name(arg=value) calls."""
    outputs: str
    """The information the agent must tell the user: a JSON list of strings ([] for none)."""
    criteria: str = ""
    """Any other evaluation criteria: a JSON object (reward_basis, nl_assertions, env_assertions), or empty."""
    wire_names: ClassVar[Mapping[str, str]] = {"scenario": "problem", "actions": "solution", "outputs": "final_answer",
                                               "criteria": "verification_notes"}
    prompt_field: ClassVar[str] = "scenario"
    solution_field: ClassVar[str] = "actions"
    answer_field: ClassVar[str] = "outputs"
    solution_is_gold: ClassVar[bool] = True

    def factor_subject(self) -> str:
        """``{"scenario": <user side>, "actions": <gold actions>}`` as compact JSON: what ``synco.domains.tau2.factors``
        reads (``subject_parts``), so factors describe the gold trajectory."""
        return json.dumps({"scenario": self.scenario, "actions": self.actions}, separators=(",", ":"), ensure_ascii=False)


def tau2_card(payload: Tau2Payload) -> TaskCard:
    """A card of ``payload`` alone, its header empty: a τ² task the domain builds for itself (a scenario to open an
    episode with, a subject to replay), never shown to the Synthesizer."""
    return TaskCard(**dict.fromkeys(HEADER_FIELDS, ""), payload=payload)
