"""τ²'s simulated user on a served chat endpoint (``tau2.served``): τ²'s published setting has an LLM behind an API
play the user (GPT-4.1; AReaL's recipe self-hosts Qwen2.5-72B). The same conversation as the local user
(:class:`synco.learn.user_sim.LocalUserSim`: the agent speaks as ``user``, the simulated user answers as
``assistant``), one request per turn, seeded by the conversation so a rerun asks the same."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from synco.core.episodes import USER_MAX_NEW_TOKENS
from synco.core.seeds import derive_seed
from synco.core.served import ChatRequest, ServedClient, ServedSettings, sampling_fields

MAX_REPLY_CHARS = 2000
"""Longest reply kept (a runaway generation is cut)."""

Speaker = Literal["agent", "user"]


class ServedUserSim:
    """A served chat model as τ²'s simulated user."""

    def __init__(self, settings: ServedSettings, max_new_tokens: int = USER_MAX_NEW_TOKENS, temperature: float = 0.0) -> None:
        self.client = ServedClient(settings, "tau2.served")
        self.model_name = f"{settings.model}@{settings.base_url}"
        """What plays the user: recorded with every episode (never the key)."""
        self.sampling = sampling_fields(temperature if temperature > 0 else 1.0, 1.0, 0, max_new_tokens,
                                        greedy=temperature <= 0.0)

    def reply(self, system: str, conversation: Sequence[tuple[Speaker, str]]) -> str:
        """The user's next message (stripped, at most :data:`MAX_REPLY_CHARS`)."""
        messages = (("system", system),) + tuple(("user" if who == "agent" else "assistant", text)
                                                 for who, text in conversation)
        seed = derive_seed("user_sim", self.model_name, repr(messages)) % (2 ** 31)
        [[s]] = self.client.chat([ChatRequest(messages)], 1, self.sampling, [seed])
        return s.text.strip()[:MAX_REPLY_CHARS]


def served_user(settings: ServedSettings, max_new_tokens: int = USER_MAX_NEW_TOKENS, temperature: float = 0.0) -> ServedUserSim:
    """The factory the τ² domain calls when an episode first needs its user (picklable through ``partial``)."""
    return ServedUserSim(settings, max_new_tokens, temperature)
