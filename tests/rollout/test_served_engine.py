"""The served engine against a real ``vllm serve`` (tests/served.py): token-id completions whose log-probs are the
trainer's, an adapter hot-load that changes the output, chat turns with tools and a τ² user turn; through the relay
in front of it (tests/served.py), a completions endpoint that returns no token ids (llama.cpp's, most providers'),
ids outside the vocabulary and an adapter load whose answer never came."""

from __future__ import annotations


import torch

import pytest

from synco.core.policy import LoraSettings, PolicyConfig, Sampler
from synco.core.sampling import SamplingParams
from synco.core.served import ServedClient, ServedSettings
from synco.learn.build import build_policy
from synco.rollout.served import ServedGenerator, ServedPolicy

pytestmark = [pytest.mark.xdist_group("served"), pytest.mark.slow]

LOGPROB_TOL = 2e-3
"""Largest difference allowed between the server's sampling log-prob of a token and the trainer's recomputation
(both float32 on the CPU; they differ only by the order of float sums in two implementations)."""


def served(server, **kw) -> ServedSettings:  # noqa: ANN001
    return ServedSettings(base_url=kw.pop("base_url", server.base_url), model=server.model, max_retries=1, **kw)


def smol(server, lora: LoraSettings | None = None, trainable: bool = False, **kw):  # noqa: ANN001, ANN003, ANN201
    cfg = PolicyConfig(model_path=str(server.model_dir), device="cpu", trainable=trainable, lora=lora,
                       rollout_engine="served", served=served(server, **kw))
    return build_policy(cfg, role="reasoner", frozen=not trainable)


def _no_ids(data: dict) -> None:
    """A completions reply as llama.cpp's server or a provider sends it: text, no token ids, no log-probs."""
    for c in data["choices"]:
        c.pop("token_ids", None)
        c.pop("prompt_token_ids", None)
        c["logprobs"] = None


def test_token_id_completions_carry_the_ids_and_log_probs_the_trainer_computes(vllm_server) -> None:  # noqa: ANN001
    pol = smol(vllm_server)
    assert isinstance(pol.generator, ServedGenerator)
    prompt = pol.format_prompt("What is 2 + 3? Answer with a number.")
    params = SamplingParams(max_new_tokens=12, temperature=1.0)
    [group] = pol.generate([prompt], 3, params, seed=5)
    assert all(c.completion_ids and len(c.logprobs) == len(c.completion_ids) for c in group)
    assert all(c.prompt_ids == pol.encode_prompt(prompt) for c in group)
    rows = [c.to_experience(0.0) for c in group]
    with torch.no_grad():
        logp, mask = pol._completion_logprobs(pol.model, rows)
    worst = max(abs(float(logp[i, j]) - c.logprobs[j]) for i, c in enumerate(group) for j in range(len(c.logprobs)))
    assert worst < LOGPROB_TOL, worst
    [again] = pol.generate([prompt], 3, params, seed=5)  # a seeded request samples the same ids
    assert [c.completion_ids for c in again] == [c.completion_ids for c in group]


def test_an_adapter_hot_load_changes_the_output_and_names_its_version(vllm_server) -> None:  # noqa: ANN001
    pol = smol(vllm_server, lora=LoraSettings(rank=8, alpha=16, target_modules=["q_proj", "v_proj"]), trainable=True)
    gen = pol.generator
    greedy = SamplingParams(greedy=True, max_new_tokens=10)
    prompt = pol.format_prompt("Name a colour.")
    [[base]] = pol.generate([prompt], 1, greedy, seed=1)
    assert isinstance(gen, Sampler) and gen.recompute_proximal  # the server's numerics are not the trainer's
    assert gen.loaded == 0 and gen.served_model.endswith("-v0")  # the fresh adapter (B = 0) went up first
    assert base.version == 0
    with torch.no_grad():
        for name, p in pol.model.named_parameters():
            if "lora_B" in name:
                p.copy_(torch.randn_like(p) * 0.5, )
    gen.load(pol.model, 3)  # what the learner's publish does, at version 3
    assert gen.loaded == 1  # pushed now, before any request
    [[moved]] = pol.generate([prompt], 1, greedy, seed=1)
    assert moved.version == 3 and moved.completion_ids != base.completion_ids  # stamped by the sampler
    names = ServedClient(served(vllm_server)).models()
    assert gen.adapter_name(1) in names and gen.adapter_name(0) not in names  # the old version was unloaded


def test_a_frozen_chat_role_sends_tools_and_reads_text_or_calls(vllm_server) -> None:  # noqa: ANN001
    pytest.importorskip("tau2")
    from synco.domains.registry import get_domain
    from synco.domains.spec import DomainContext
    from synco.domains.tau2.settings import Tau2Settings

    domain = get_domain("tau2", DomainContext(settings=Tau2Settings(domain="mock")))  # τ²'s own tools, solo
    schemas = domain.tool_schemas()
    cfg = PolicyConfig(model_path="unused", trainable=False, rollout_engine="served",
                       served=served(vllm_server, endpoint="chat"), sampling=SamplingParams(max_new_tokens=48))
    pol = build_policy(cfg, role="reasoner", frozen=True)
    assert isinstance(pol, ServedPolicy) and pol.policy_version == 0
    prompt = pol.format_prompt("Create a task 'buy milk' for user_1.",
                               system=domain.reasoner_system_prompt(), tools=schemas)
    [[turn]] = pol.generate([prompt], 1, SamplingParams(max_new_tokens=48, greedy=True))
    assert isinstance(turn.text, str) and turn.text  # a message, or a call as {"name": ..., "arguments": ...}
    env = domain.environment(domain.heldout_card(domain.heldout(1, seed=0)[0]), "[]")
    step = env.step(turn.text)  # the environment parses the reply as hostile text: an observation, never a crash
    assert isinstance(step.observation, str)


def test_a_tau2_user_turn_on_the_served_chat_endpoint(vllm_server) -> None:  # noqa: ANN001
    from synco.domains.tau2.served_user import ServedUserSim

    user = ServedUserSim(served(vllm_server), max_new_tokens=16)
    reply = user.reply("You are a customer who wants to cancel a flight.", [("agent", "Hello, how can I help?")])
    assert isinstance(reply, str) and reply and vllm_server.base_url in user.model_name
    assert user.reply("You are a customer who wants to cancel a flight.",
                      [("agent", "Hello, how can I help?")]) == reply  # seeded by the conversation


def test_served_episodes_advance_on_their_own_whatever_order_responses_arrive_in(vllm_server) -> None:  # noqa: ANN001
    """On a served engine each episode takes its next turn as soon as its own response is in; the turn's seed is the
    episode's and the turn's, so one request at a time and all of them in flight give the same episodes (two agent
    turns each: an agent turn, the environment's answer, the next agent turn; LoRA sampling on vLLM's CPU build is
    slow, so no more)."""
    pytest.importorskip("tau2")
    from synco.core.episodes import EpisodeLimits
    from synco.domains.registry import get_domain
    from synco.domains.spec import DomainContext
    from synco.domains.tau2.settings import Tau2Settings
    from synco.grading.checker import AnswerChecker
    from synco.rollout.attempts import heldout_tasks, make_solver

    domain = get_domain("tau2", DomainContext(settings=Tau2Settings(domain="mock", tool_choice="required")))
    tasks = heldout_tasks(domain, domain.heldout(2, seed=0))
    assert tasks
    solver = make_solver(domain, AnswerChecker(use_math_verify=False), limits=EpisodeLimits(2, 300), group_size=4)
    runs = []
    for concurrency, lora in ((1, None), (16, None), (16, LoraSettings(rank=8, alpha=16, target_modules=["q_proj"]))):
        cfg = PolicyConfig(model_path=str(vllm_server.model_dir), device="cpu", trainable=lora is not None, lora=lora,
                           rollout_engine="served", served=served(vllm_server, max_concurrency=concurrency))
        pol = build_policy(cfg, role="reasoner", frozen=lora is None)
        assert pol.row_sampler() is pol.generator
        groups = solver.attempts(pol, tasks, 2, SamplingParams(max_new_tokens=24, temperature=1.0), seed=11)
        runs.append([[(a.completion_ids, [t.text for t in a.turns or []], a.reward) for a in g] for g in groups])
    assert runs[0] == runs[1]
    assert runs[2] == runs[0]  # a fresh adapter (B = 0), pushed before the episodes start, samples as the base does
    turns = [len(t) for g in runs[0] for _, t, _ in g]
    assert max(turns) > 1  # agent and environment turns: the episodes did go on after their first response


def test_a_frozen_role_samples_on_a_completions_endpoint_that_returns_no_token_ids(vllm_server, relay) -> None:  # noqa: ANN001
    from served import only, rewrite

    relay.fault = only("/completions", rewrite(_no_ids))
    pol = smol(vllm_server, base_url=relay.base_url)
    prompt = pol.format_prompt("What is 2 + 3? Answer with a number.")
    [group] = pol.generate([prompt], 2, SamplingParams(max_new_tokens=12, temperature=1.0), seed=5)
    for c in group:  # the text as the server wrote it, its ids the local tokenizer's (nothing trains on them)
        assert c.text and c.completion_ids and len(c.logprobs) == len(c.completion_ids)
        assert pol.tokenizer.decode(c.completion_ids, skip_special_tokens=True) == c.text


def test_token_ids_outside_the_vocabulary_are_a_served_error(vllm_server, relay) -> None:  # noqa: ANN001
    from served import only, rewrite

    from synco.core.served import ServedError

    def out_of_vocab(data: dict) -> None:
        data["choices"][0]["token_ids"][0] = 10 ** 6

    relay.fault = only("/completions", rewrite(out_of_vocab))
    pol = smol(vllm_server, base_url=relay.base_url)
    with pytest.raises(ServedError, match=r"POST /completions .*vocabulary"):
        pol.generate([pol.format_prompt("Hi.")], 1, SamplingParams(max_new_tokens=4), seed=5)


def test_an_adapter_load_whose_answer_was_lost_is_not_loaded_twice(vllm_server, relay) -> None:  # noqa: ANN001
    from served import only, withhold

    relay.fault = only("/load_lora_adapter", withhold(for_s=30.0), times=1)  # it loads; the answer never comes
    pol = smol(vllm_server, lora=LoraSettings(rank=8, alpha=16, target_modules=["q_proj", "v_proj"]), trainable=True,
               base_url=relay.base_url, timeout_s=5.0)
    gen = pol.generator
    [[c]] = pol.generate([pol.format_prompt("Name a colour.")], 1, SamplingParams(greedy=True, max_new_tokens=4),
                         seed=1)
    assert c.completion_ids and gen.loaded == 0
    assert gen.adapter_name(0) in ServedClient(served(vllm_server)).models()
    gen.close()
