"""A frozen local chat model that plays the user of an episode (τ²'s simulated user), never trained.

The model gets a system prompt (the user's guidelines and scenario, written by the domain) and the
conversation so far with the roles turned around: the agent's messages are its ``user`` turns, its own
earlier replies its ``assistant`` turns. Its reply is the agent's next observation (environment ids, mask
0). Sampling is seeded by the conversation itself, so a reply does not depend on which process asks or
in what order: the same conversation gets the same reply.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from synco.core.episodes import USER_MAX_NEW_TOKENS
from synco.core.policy import PolicyConfig
from synco.core.sampling import SamplingParams
from synco.core.seeds import derive_seed
from synco.learn.hf_policy import HFPolicy

Speaker = Literal["agent", "user"]

MAX_REPLY_CHARS = 2000
"""Longest reply kept (a runaway generation is cut)."""


class LocalUserSim:
    """A frozen chat model as a simulated user (see the module docstring)."""

    def __init__(self, policy: HFPolicy, model_name: str, max_new_tokens: int = USER_MAX_NEW_TOKENS, temperature: float = 0.0) -> None:
        self.policy = policy
        self.model_name = model_name
        """What plays the user (the config's ``tau2.user_model``): recorded with every episode."""
        greedy = temperature <= 0.0
        self.params = SamplingParams(greedy=greedy, temperature=1.0 if greedy else temperature,
                                     max_new_tokens=max_new_tokens)

    def messages(self, system: str, conversation: Sequence[tuple[Speaker, str]]) -> list[dict[str, str]]:
        """The chat the model sees: ``system``, then the agent as ``user`` and itself as ``assistant``."""
        flipped = [{"role": "user" if who == "agent" else "assistant", "content": text} for who, text in conversation]
        return [{"role": "system", "content": system}] + flipped

    def prompt(self, system: str, conversation: Sequence[tuple[Speaker, str]]) -> str:
        """The formatted prompt of :meth:`messages` (the tokenizer's chat template, generation prompt appended)."""
        tok = self.policy.tokenizer
        messages = self.messages(system, conversation)
        if getattr(tok, "chat_template", None):
            return str(tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True))
        return "\n".join(f"{m['role']}: {m['content']}" for m in messages) + "\nassistant: "

    def reply(self, system: str, conversation: Sequence[tuple[Speaker, str]]) -> str:
        """The user's next message (stripped, at most :data:`MAX_REPLY_CHARS`)."""
        prompt = self.prompt(system, conversation)
        seed = derive_seed("user_sim", self.model_name, prompt)
        [[c]] = self.policy.generate([prompt], 1, self.params, seed=seed)
        return c.text.strip()[:MAX_REPLY_CHARS]


def load_user_sim(model_path: str, device: str = "cpu", max_new_tokens: int = USER_MAX_NEW_TOKENS,
                  temperature: float = 0.0) -> LocalUserSim:
    """The simulated user played by ``model_path`` (a model folder or preset such as ``smollm2``), frozen."""
    from synco.learn.build import build_policy

    cfg = PolicyConfig(model_path=model_path, device=device, trainable=False)
    return LocalUserSim(build_policy(cfg), model_name=model_path, max_new_tokens=max_new_tokens,
                        temperature=temperature)
