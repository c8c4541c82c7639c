"""The co-training step on the embedded world, with the shipped warm-start models."""

import pytest
import torch

from synco.config import load_config
from synco.engine import cotrain_step
from synco.policy import Completion
from synco.trainer import setup_run
from synco.worlds.arith import ArithDomain


def make_state(tmp_path, mode="cotrain", n_cards=16, k=4, synth_tokens=None, reasoner=None, seed=0):
    overrides = [f"mode={mode}", f"n_cards={n_cards}", f"k={k}", f"seed={seed}", f"runs_dir={tmp_path}",
                 "run_id=t", "heldout_per_group=0", "tensorboard=false", "progress=false"]
    if synth_tokens:
        overrides.append(f"synthesizer.sampling.max_new_tokens={synth_tokens}")
    state = setup_run(load_config("arith", overrides=overrides)).state
    if reasoner is not None:
        state.reasoner = reasoner
    return state


def snapshot(policy):
    return {n: p.detach().clone() for n, p in policy.trainable_parameters()}


def changed(before, policy):
    after = dict(policy.trainable_parameters())
    return {n for n, p in before.items() if not torch.equal(p, after[n].detach())}


def run_until_gradient(state, max_steps=4):
    for step in range(max_steps):
        stats = cotrain_step(state, step)
        if stats.n_gradient_bearing > 0:
            return stats
    pytest.fail("no gradient-bearing task in %d steps" % max_steps)


def test_cotrain_step_updates_every_parameter_of_both_agents(tmp_path):
    state = make_state(tmp_path, "cotrain")
    s0, r0 = snapshot(state.synthesizer), snapshot(state.reasoner)
    stats = run_until_gradient(state)
    assert changed(s0, state.synthesizer) == set(s0), "every Synthesizer parameter must change in cotrain"
    assert changed(r0, state.reasoner) == set(r0), "every Reasoner parameter must change"
    assert stats.n_valid > 0 and stats.reasoner_loss is not None


def test_frozen_mode_keeps_synthesizer_fixed(tmp_path):
    state = make_state(tmp_path, "frozen")
    s0, r0 = snapshot(state.synthesizer), snapshot(state.reasoner)
    run_until_gradient(state)
    assert changed(s0, state.synthesizer) == set()
    assert changed(r0, state.reasoner) == set(r0)


def test_static_mode_draws_from_the_domain_generator(tmp_path):
    state = make_state(tmp_path, "static", n_cards=8)
    s0 = snapshot(state.synthesizer)
    stats = cotrain_step(state, 0)
    assert stats.n_cards == 8 and stats.n_valid == 8  # the fixed generator writes valid cards
    assert changed(s0, state.synthesizer) == set()


def test_step_is_recorded_whole_in_the_pool(tmp_path):
    state = make_state(tmp_path, "cotrain", n_cards=8, k=3)
    stats = cotrain_step(state, 0)
    records = state.pool.by_step(0)
    assert len(records) == 8 == stats.n_cards
    assert len({r.task_id for r in records}) == 8
    for rec in records:
        assert rec.synth_reward is not None
        if rec.valid:
            assert len(rec.rollouts) == 3
            assert rec.card is not None and "level" in rec.card.factors
            assert rec.success_rate == sum(r.correct for r in rec.rollouts) / 3
        else:
            assert rec.synth_reward.total < 0


def test_all_invalid_batch_is_handled(tmp_path):
    # 8 tokens cannot hold a card: every card is truncated and invalid; the step still completes
    state = make_state(tmp_path, "cotrain", n_cards=8, synth_tokens=8)
    s0 = snapshot(state.synthesizer)
    stats = cotrain_step(state, 0)
    assert stats.n_valid == 0 and stats.n_synth_truncated == 8
    # all rewards equal (-0.5) in every context (one per cell the Designer gave slots to): no gradient, counted
    assert stats.allocation is not None and sum(stats.allocation.values()) == 8
    assert stats.synth_groups_skipped == sum(1 for n in stats.allocation.values() if n)
    assert changed(s0, state.synthesizer) == set()
    assert len(state.pool.by_step(0)) == 8


class OracleReasoner:
    """A stand-in Reasoner that always answers correctly: every group has equal rewards."""

    def __init__(self, domain):
        self.domain = domain
        self.updates = 0

    def format_prompt(self, text, system=None):
        return text

    def generate(self, prompts, n, params=None):
        out = []
        for p in prompts:
            problem = p[len("Q:"):].split("\n")[0] if p.startswith("Q:") else p
            ans = self.domain.answer(problem)
            out.append([Completion(text=f"\\boxed{{{ans}}}", prompt_ids=[1], completion_ids=[5, 6], logprobs=[-0.1, -0.1],
                                   truncated=False, finish_reason="stop") for _ in range(n)])
        return out

    def update(self, batch):
        self.updates += 1
        raise AssertionError("no update expected without a gradient-bearing group")


def test_step_without_gradient_bearing_groups_skips_reasoner_update(tmp_path):
    domain = ArithDomain()
    fake = OracleReasoner(domain)
    state = make_state(tmp_path, "frozen", n_cards=8, reasoner=fake)
    assert domain.reasoner_prompt("12+3").startswith("Q:")
    stats = cotrain_step(state, 0)
    assert stats.n_valid > 0
    assert stats.n_gradient_bearing == 0 and stats.reasoner_groups_skipped == stats.n_valid
    assert stats.reasoner_accuracy == 1.0 and fake.updates == 0
