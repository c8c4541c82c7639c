"""The τ² domain's settings model, its ``tau2:`` config section: which τ² domain, who plays the user, which splits.
τ²-free (the registry reads it without importing τ²)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from synco.core.episodes import USER_MAX_NEW_TOKENS
from synco.core.served import ServedSettings

Tau2DomainName = Literal["airline", "retail", "telecom", "mock"]


class Tau2Settings(BaseModel):
    """The τ²-bench domain, the user side (solo or a simulated user played by a frozen local model) and the splits."""

    model_config = ConfigDict(extra="forbid")

    domain: Tau2DomainName = Field("airline", description="The τ²-bench domain: airline, retail, telecom or mock.")
    user: Literal["auto", "solo", "simulated"] = Field(
        "auto", description="The user side of an episode: solo (the agent gets the task's ticket and works alone; "
                            "tasks without one are refused), simulated (a frozen local model plays the user from the "
                            "task's scenario), auto (solo where the task has a ticket, else simulated).")
    user_model: str = Field(
        "smollm2", description="The frozen local model that plays the simulated user (a model directory or a model "
                               "preset such as smollm2). Its text is never trained on; every episode records it.")
    user_max_new_tokens: int = Field(USER_MAX_NEW_TOKENS, ge=1, description="Tokens per simulated-user message.")
    user_temperature: float = Field(0.0, ge=0.0, description="Sampling temperature of the simulated user (0: greedy).")
    served: ServedSettings | None = Field(None, description="The simulated user on a served chat endpoint (an OpenAI-compatible server or API provider: base_url, model, api_key_env, timeout_s, max_retries, max_concurrency); replaces tau2.user_model. None: a local model plays the user.")
    train_split: str = Field("train", description="τ²'s split the Synthesizer's examples and the static corpus come from.")
    heldout_split: str = Field("test", description="τ²'s split held out for evaluation: training never sees its tasks.")
    tool_choice: Literal["auto", "required"] = Field(
        "auto", description="auto: each agent turn is a tool call or a message, as the agent writes it; required: every "
                            "turn is prefilled with the opening of a tool call (the agent names the tool and its "
                            "arguments), as OpenAI's tool_choice=required; solo runs only (a solo agent sends no "
                            "messages: it ends with the done tool).")
    max_actions: int = Field(12, ge=1, le=64, description="Most gold actions a synthesized task may have.")
    payload_schema: bool = Field(
        False, description="Show the Synthesizer what each card field holds (the τ² payload's schema: scenario, gold "
                           "actions, outputs, criteria) before the example task. Off: the prompt as before.")

    def models(self, section: str) -> dict[str, str]:
        """The simulated user's model, when the run has a user (not solo)."""
        from synco.domains.tau2.world import SOLO_DOMAINS

        if self.served is None and (self.user == "simulated" or (self.user == "auto" and self.domain not in SOLO_DOMAINS)):
            return {f"{section}.user_model": self.user_model}
        return {}

    def endpoints(self, section: str) -> dict[str, ServedSettings]:
        """The served endpoint of the simulated user, checked at startup (``/v1/models``)."""
        return {} if self.served is None else {f"{section}.served": self.served}

    @model_validator(mode="after")
    def _check_tool_choice(self) -> "Tau2Settings":
        from synco.domains.tau2.world import SOLO_DOMAINS

        solo = self.user == "solo" or (self.user == "auto" and self.domain in SOLO_DOMAINS)
        if self.tool_choice == "required" and not solo:
            raise ValueError(f"tau2.tool_choice=required needs a solo run (the agent talks to no user), but "
                             f"tau2.user={self.user!r} on tau2.domain={self.domain!r} has a simulated user: set "
                             f"tau2.tool_choice=auto (solo runs: tau2.user=solo or auto on {' or '.join(SOLO_DOMAINS)})")
        return self
