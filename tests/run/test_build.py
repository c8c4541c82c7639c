"""What a run builds from its config: the step settings (one mapping from RunConfig), the verifier."""

from __future__ import annotations

from dataclasses import fields

from synco.config import load_config
from synco.cotrain.settings import StepSettings
from synco.grading.checker import AnswerChecker
from synco.config import RunConfig
from synco.cotrain.settings import ONLINE, StepPlan
from synco.run.build import STEP_SETTINGS_FROM, build_domain, build_verifier, step_settings

def test_step_settings_read_every_knob_from_the_config():
    cfg = load_config("arith", overrides=[
        "mode=frozen", "n_cards=12", "n_contexts=3", "k=5", "report.window=77", "consensus=false", "consensus_m=6",
        "seed_per_request=true", "synthesizer.sampling.temperature=0.5", "reasoner.sampling.temperature=0.9",
        "synthesizer.grpo.scale_adv_by_std=false", "reasoner.grpo.scale_adv_by_std=true"])
    s = step_settings(cfg)
    assert (s.mode, s.n_cards, s.n_contexts, s.k, s.window) == ("frozen", 12, 3, 5, 77)
    assert (s.consensus, s.consensus_m, s.seed_per_request) == (False, 6, True)
    assert s.synth_sampling.temperature == 0.5 and s.reasoner_sampling.temperature == 0.9
    assert (s.synth_scale_by_std, s.reasoner_scale_by_std) == (False, True)
    assert s.group_factor == cfg.group_factor and s.evosyn is cfg.evosyn
    assert s.reasoner_rewards is cfg.reasoner_rewards and s.synth_rewards is cfg.synth_rewards
    assert s.checker_sampling is cfg.reasoner.sampling  # no checker section: the Reasoner's sampling
    # what a protocol changes per step is its StepPlan, not a setting
    assert not {f.name for f in fields(StepPlan)} & {f.name for f in fields(StepSettings)}
    assert (ONLINE.update_synthesizer, ONLINE.update_reasoner, ONLINE.protocol) == (True, True, "online")


def test_every_step_setting_comes_from_a_config_field():
    """A StepSettings field is the RunConfig field of its name, or says in STEP_SETTINGS_FROM where it lives."""
    names = {f.name for f in fields(StepSettings)}
    assert set(STEP_SETTINGS_FROM) <= names
    assert names - set(STEP_SETTINGS_FROM) <= set(RunConfig.model_fields)
    # no shadowing of a same-name field, but the mode: the step runs the protocol's (RunConfig.run_mode)
    assert set(STEP_SETTINGS_FROM) & set(RunConfig.model_fields) == {"mode"}
    rft = load_config("arith", overrides=["protocol=rft"])
    assert (rft.mode, step_settings(rft).mode, step_settings(load_config("arith")).mode) == ("cotrain", "static",
                                                                                             "cotrain")


def test_build_verifier_in_process_keeps_the_checker_and_the_domains_oracle():
    checker = AnswerChecker()
    arith = build_domain(load_config("arith"))
    got, verifier = build_verifier(load_config("arith"), arith, checker)
    assert got is checker and verifier.checker is checker and verifier.oracle == arith.oracle
    math_cfg = load_config("arith", overrides=["domain=math"])  # no oracle: consensus labels instead
    _, verifier = build_verifier(math_cfg, build_domain(math_cfg), checker)
    assert verifier.oracle is None
