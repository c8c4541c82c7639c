"""ProcessSampler, the snapshot in a child process (``async_placement: process``), on a tiny char-level Llama: it
samples what the snapshot in this process samples, stamps the version it was loaded with, keeps it through updates
until a publish, answers a bad request with one line, and ends its child on close."""

from __future__ import annotations

import pytest
import torch

from synco.core.policy import GRPOConfig, LoraSettings, PolicyConfig, Sampler
from synco.core.sampling import SamplingParams
from synco.learn.charlm import char_tokenizer, tiny_llama
from synco.learn.hf_policy import HFPolicy, SnapshotSampler
from synco.learn.process_sampler import ProcessSampler, SamplerProcessError

torch.set_num_threads(1)
PROMPTS = ["2+2=", "hello", "x"]
SAMPLED = SamplingParams(max_new_tokens=6)


def policy(lora: LoraSettings | None) -> HFPolicy:
    tok = char_tokenizer()
    return HFPolicy(tiny_llama(tok, seed=0, hidden_size=32, num_layers=2), tok,
                    PolicyConfig(model_path="tiny", device="cpu", grpo=GRPOConfig(lr=3e-2), lora=lora))


def logprobs(groups: list) -> list[float]:
    return [x for g in groups for c in g for x in c.logprobs]


def ids_of(pol: HFPolicy) -> list[list[int]]:
    return [pol.encode_prompt(p) for p in PROMPTS]


def test_it_samples_as_the_snapshot_and_changes_only_at_a_publish() -> None:
    """Under LoRA (the export is the adapters alone; the default world's full weights run in tests/run)."""
    pol = policy(LoraSettings(rank=4, alpha=8.0))
    pol.sample_apart()
    snap = pol.generator
    assert isinstance(snap, SnapshotSampler)
    proc = ProcessSampler(snap)
    try:
        assert isinstance(proc, Sampler) and proc.version == 0 and proc.recompute_proximal is False
        ids = ids_of(pol)
        here = snap.generate(ids, 2, SAMPLED, seed=5)
        there = proc.generate(ids, 2, SAMPLED, seed=5)
        assert [[c.completion_ids for c in g] for g in there] == [[c.completion_ids for c in g] for g in here]
        assert logprobs(there) == pytest.approx(logprobs(here))
        assert {c.version for g in there for c in g} == {0}
        pol.generator = proc  # the learner now publishes to the child
        batch = [c.to_experience(1.0 if i % 2 else -1.0) for g in there for i, c in enumerate(g)]
        assert pol.update(batch).stepped and pol.update(batch).stepped
        assert pol.version == 2 and pol.policy_version == 0
        again = proc.generate(ids, 2, SAMPLED, seed=5)
        assert [[c.completion_ids for c in g] for g in again] == [[c.completion_ids for c in g] for g in there]
        assert pol.publish() == 2 and proc.version == 2 and pol.policy_version == 2
        snap.load(pol.model, 2)  # the same export into this process's snapshot: both sample alike again
        moved_here = snap.generate(ids, 2, SAMPLED, seed=5)
        moved = proc.generate(ids, 2, SAMPLED, seed=5)
        assert [[c.completion_ids for c in g] for g in moved] == [[c.completion_ids for c in g] for g in moved_here]
        assert {c.version for g in moved for c in g} == {2}
        assert logprobs(moved) == pytest.approx(logprobs(moved_here))
        assert logprobs(moved) != pytest.approx(logprobs(there))
        with pytest.raises(SamplerProcessError, match="generate"):  # a bad request: one line, the child serves on
            proc.generate([[10**9]], 1, SAMPLED, seed=1)
        assert proc.generate(ids[:1], 1, SAMPLED, seed=5)[0][0].version == 2
    finally:
        proc.close()
    assert not proc._proc.is_alive()
    proc.close()  # idempotent
