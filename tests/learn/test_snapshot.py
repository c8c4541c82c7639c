"""The learner, its samplers and the one weight sync on tiny char Llamas: every Completion stamped with the version
that sampled it; the transformers engine follows each update, the snapshot (synco.learn.snapshot) only a publish;
a shared base's agents sample one copy of it."""

from __future__ import annotations

import pytest
import torch

from synco.core.policy import GRPOConfig, Learner, LoraSettings, PolicyConfig, Sampler
from synco.core.sampling import Experience, SamplingParams
from synco.learn.charlm import char_tokenizer, tiny_llama
from synco.learn.hf_policy import HFGenerator, HFPolicy
from synco.learn.shared_base import BaseView, SharedBase
from synco.learn.snapshot import SnapshotSampler

torch.set_num_threads(1)
GREEDY = SamplingParams(greedy=True, max_new_tokens=8)
PROMPTS = ["2+2=", "hello", "x"]


def make_policy(lora: LoraSettings | None = None) -> HFPolicy:
    tok = char_tokenizer()
    return HFPolicy(tiny_llama(tok, seed=0, hidden_size=32, num_layers=2), tok,
                    PolicyConfig(model_path="tiny", device="cpu", grpo=GRPOConfig(lr=3e-2), lora=lora))


def learning_batch(policy: HFPolicy) -> list[Experience]:
    """Completions of its own, half pushed up and half down: an update that moves the weights."""
    sampled = policy.generate(PROMPTS, 2, SamplingParams(max_new_tokens=6), seed=1)
    return [c.to_experience(1.0 if i % 2 else -1.0) for g in sampled for i, c in enumerate(g)]


def greedy(policy: HFPolicy) -> tuple[list[list[int]], set[int]]:
    """Greedy ids of the prompts, and the versions they were stamped with."""
    out = [g[0] for g in policy.generate(PROMPTS, 1, GREEDY)]
    return [c.completion_ids for c in out], {c.version for c in out}


def test_the_transformers_engine_is_published_every_update_and_stamps_its_version() -> None:
    pol = make_policy()
    assert isinstance(pol, Learner) and isinstance(pol.generator, Sampler) and pol.generator.holds_copy is False
    ids0, v0 = greedy(pol)
    assert v0 == {0} and pol.version == pol.policy_version == 0
    assert pol.update(learning_batch(pol)).stepped
    ids1, v1 = greedy(pol)
    assert v1 == {1} and pol.version == pol.policy_version == 1 and ids1 != ids0  # the learner's own model


def test_the_snapshot_keeps_its_version_through_updates_until_a_publish() -> None:
    pol = make_policy()
    pol.sample_apart()
    gen = pol.generator
    assert isinstance(gen, SnapshotSampler) and gen.model is not pol.model and gen.version == 0
    ids0, _ = greedy(pol)
    assert pol.update(learning_batch(pol)).stepped and pol.update(learning_batch(pol)).stepped
    assert pol.version == 2 and pol.policy_version == 0
    assert greedy(pol) == (ids0, {0})  # the updates did not reach the copy
    assert pol.publish() == 2 and pol.policy_version == 2
    ids2, v2 = greedy(pol)
    assert v2 == {2} and ids2 != ids0
    learner, copy = dict(pol.model.named_parameters()), dict(gen.model.named_parameters())
    assert all(torch.equal(learner[n], copy[n]) for n in learner)  # the published weights, exactly
    pol.sample_apart()  # already apart: the same sampler
    assert pol.generator is gen


def test_a_model_with_dropout_cannot_sample_apart() -> None:
    pol = make_policy(LoraSettings(rank=4, alpha=8.0, dropout=0.1))  # LoRA's dropout draws from torch's stream
    with pytest.raises(ValueError, match="dropout"):
        pol.sample_apart()


def test_a_shared_bases_agents_sample_one_copy_each_through_its_own_adapter() -> None:
    tok = char_tokenizer()
    lora = LoraSettings(rank=4, alpha=8.0)
    cfg = PolicyConfig(model_path="tiny", device="cpu", grpo=GRPOConfig(lr=3e-2), lora=lora)
    sb = SharedBase(tiny_llama(tok, seed=0, hidden_size=32, num_layers=2), tok, {"synthesizer": cfg, "reasoner": cfg})
    syn, rea = sb.synthesizer, sb.reasoner
    base_ids = [g[0].completion_ids for g in BaseView(sb, cfg).generate(PROMPTS, 1, GREEDY)]
    syn.sample_apart()
    rea.sample_apart()
    copy = sb.sampling_model()
    assert isinstance(syn.generator, SnapshotSampler) and isinstance(rea.generator, SnapshotSampler)
    assert syn.generator.model is copy and rea.generator.model is copy and copy is not sb.model
    assert rea.update(learning_batch(rea)).stepped
    assert greedy(rea)[1] == {0}
    assert rea.publish() == 1 and syn.publish() == 0
    (r_ids, r_v), (s_ids, s_v) = greedy(rea), greedy(syn)
    assert r_v == {1} and s_v == {0} and r_ids != s_ids  # each through its own adapter, on the one copy
    live = dict(sb.model.named_parameters())
    copied = dict(copy.named_parameters())
    assert all(torch.equal(p, copied[n]) for n, p in rea.trainable_parameters())
    view = BaseView(sb, cfg)  # built after the agents went apart: it samples the copy, adapters disabled
    assert isinstance(view.generator, HFGenerator) and view.generator.model is copy
    assert [g[0].completion_ids for g in view.generate(PROMPTS, 1, GREEDY)] == base_ids
    assert all(torch.equal(live[n], copied[n]) for n, _ in sb.base_parameters())
