"""The simulated user: roles turned around, replies bounded and seeded by the conversation."""

from __future__ import annotations

import torch

from synco.core.policy import GRPOConfig, PolicyConfig
from synco.learn.charlm import char_tokenizer, tiny_llama
from synco.learn.hf_policy import HFPolicy
from synco.learn.user_sim import LocalUserSim

torch.set_num_threads(1)


def _sim(temperature: float) -> LocalUserSim:
    tok = char_tokenizer()
    policy = HFPolicy(tiny_llama(tok, seed=0, hidden_size=32, num_layers=2), tok,
                      PolicyConfig(model_path="tiny", device="cpu", trainable=False, grpo=GRPOConfig()))
    return LocalUserSim(policy, "tiny", max_new_tokens=12, temperature=temperature)


def test_the_agent_is_the_models_user_and_the_user_its_assistant() -> None:
    sim = _sim(0.0)
    assert sim.messages("S", [("agent", "hi"), ("user", "cancel"), ("agent", "id?")]) == [
        {"role": "system", "content": "S"}, {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "cancel"}, {"role": "user", "content": "id?"}]
    assert sim.prompt("S", [("agent", "hi")]) == "system: S\nuser: hi\nassistant: "


def test_a_reply_depends_on_the_conversation_only() -> None:
    sim = _sim(1.0)
    a = sim.reply("S", [("agent", "how can I help?")])
    assert a == sim.reply("S", [("agent", "how can I help?")])  # same conversation, same reply, any order
    sim.reply("S", [("agent", "something else")])
    assert a == sim.reply("S", [("agent", "how can I help?")])
    assert len(a) <= 12 and sim.params.max_new_tokens == 12
    assert _sim(0.0).params.greedy and not sim.params.greedy
