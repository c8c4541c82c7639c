"""τ²'s card payload: a user scenario, the gold actions, the information to communicate and the other criteria."""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar, Literal

from synco.core.records import HEADER_FIELDS, TaskCard, TaskPayload


class Tau2Payload(TaskPayload):
    """A τ² task as the Synthesizer wrote it (texts parsed by ``synco.domains.tau2.tasks.parse_card``)."""

    kind: Literal["tau2"] = "tau2"
    scenario: str
    """The user scenario and ticket (``tasks.parse_scenario``)."""
    actions: str
    """The gold actions, a JSON list or the compact form (``tasks.parse_actions``)."""
    outputs: str
    """The information the agent must communicate, a JSON list of strings (``tasks.parse_outputs``)."""
    criteria: str = ""
    """The rest of τ²'s evaluation criteria, compact JSON or empty (``tasks.parse_criteria``)."""
    wire_names: ClassVar[Mapping[str, str]] = {"scenario": "problem", "actions": "solution", "outputs": "final_answer",
                                               "criteria": "verification_notes"}


def tau2_card(payload: Tau2Payload) -> TaskCard:
    """A card of ``payload`` alone, its header empty: a τ² task the domain builds for itself (a scenario to open an
    episode with, a subject to replay), never shown to the Synthesizer."""
    return TaskCard(**dict.fromkeys(HEADER_FIELDS, ""), payload=payload)
