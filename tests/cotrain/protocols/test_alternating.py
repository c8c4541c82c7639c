"""Alternating self-evolution: the phase of a step, and only the phase's learner changes (real tiny models)."""

from __future__ import annotations

import pytest
import torch

from synco.config import load_config
from synco.cotrain.settings import StepPlan
from synco.cotrain.protocols.alternating import phase_of, phase_plan
from synco.cotrain.protocols.config import AlternatingConfig
from synco.run.setup import setup_run
from synco.run.steps import protocol_step


def test_phases_alternate_from_the_first_learner() -> None:
    cfg = AlternatingConfig(phase_steps=2)
    assert [phase_of(s, cfg) for s in range(5)] == [(0, "synthesizer"), (0, "synthesizer"), (1, "reasoner"),
                                                    (1, "reasoner"), (2, "synthesizer")]
    assert phase_of(0, AlternatingConfig(phase_steps=3, first="reasoner")) == (0, "reasoner")
    assert phase_of(3, AlternatingConfig(phase_steps=3, first="reasoner")) == (1, "synthesizer")


def test_a_phase_plans_that_only_its_learner_updates() -> None:
    cfg = AlternatingConfig(phase_steps=2)
    assert phase_plan(1, cfg) == StepPlan(update_synthesizer=True, update_reasoner=False, protocol="alternating",
                                          round=0, phase="synthesizer")
    assert phase_plan(2, cfg) == StepPlan(update_synthesizer=False, update_reasoner=True, protocol="alternating",
                                          round=1, phase="reasoner")


def snapshot(policy):  # noqa: ANN001, ANN201
    return {n: p.detach().clone() for n, p in policy.trainable_parameters()}


def changed(before, policy):  # noqa: ANN001, ANN201
    after = dict(policy.trainable_parameters())
    return {n for n, p in before.items() if not torch.equal(p, after[n].detach())}


def test_only_the_named_agent_changes_in_each_phase(tmp_path, one_thread) -> None:  # noqa: ANN001
    overrides = ["protocol=alternating", "alternating.phase_steps=4", "n_cards=16", "k=4", f"runs_dir={tmp_path}",
                 "run_id=t", "heldout_per_group=0", "tensorboard=false", "progress=false", "threads=1"]
    cfg = load_config("arith", overrides=overrides)
    run = setup_run(cfg)
    state, step_fn = run.state, protocol_step(run.protocol)
    for first_step, learner, frozen in ((0, "synthesizer", "reasoner"), (4, "reasoner", "synthesizer")):
        learning, fixed = getattr(state, learner), getattr(state, frozen)
        l0, f0 = snapshot(learning), snapshot(fixed)
        for step in range(first_step, first_step + 4):
            stats = step_fn(state, step)
            assert (stats.protocol, stats.round, stats.phase) == ("alternating", first_step // 4, learner)
            assert getattr(stats, f"{'synth' if frozen == 'synthesizer' else 'reasoner'}_loss") is None
            if getattr(stats, f"{'synth' if learner == 'synthesizer' else 'reasoner'}_loss") is not None:
                break
        else:
            pytest.fail(f"no gradient-bearing {learner} step in 4 steps")
        assert changed(l0, learning) == set(l0), f"every {learner} parameter must change in its phase"
        assert changed(f0, fixed) == set(), f"the {frozen} must stay fixed in the {learner}'s phase"


def test_both_agents_requests_are_seeded_from_the_runs_rng_and_the_settings_stay(tmp_path, one_thread) -> None:  # noqa: ANN001
    """With seed_per_request every request of an alternating step (Synthesizer and Reasoner) gets the run rng's
    next 63-bit draw, as in an online step; the run's settings are not changed by the phase."""
    overrides = ["protocol=alternating", "alternating.phase_steps=1", "n_cards=4", "k=2", "seed_per_request=true",
                 f"runs_dir={tmp_path}", "run_id=s", "heldout_per_group=0", "tensorboard=false", "progress=false",
                 "threads=1"]
    cfg = load_config("arith", overrides=overrides)
    run = setup_run(cfg)
    state = run.state
    drawn, sent = [], []
    draw = state.rng.getrandbits
    state.rng.getrandbits = lambda k: drawn.append(draw(k)) or drawn[-1]  # type: ignore[method-assign]
    for role in ("synthesizer", "reasoner"):
        generate = getattr(state, role).generate

        def recording(prompts, n, params=None, seed=None, _generate=generate, _role=role):  # noqa: ANN001, ANN202
            sent.append((_role, seed))
            return _generate(prompts, n, params, seed=seed)

        setattr(getattr(state, role), "generate", recording)
    settings = state.settings
    for step in range(2):  # a Synthesizer phase, then a Reasoner phase
        protocol_step(run.protocol)(state, step)
    assert state.settings is settings
    assert [role for role, _ in sent][:2] == ["synthesizer", "reasoner"] and len(sent) >= 3
    assert [seed for _, seed in sent] == drawn and None not in drawn
