import pytest

from synco.core.records import CARD_FIELDS, TaskCard
from synco.core.report import CapabilityReport, CoverageStat, FactorStat
from synco.core.rewards import (
    ReasonerRewardConfig,
    SynthesizerRewardConfig,
    card_alignment,
    gate,
    is_gradient_bearing,
    learner_term,
    reasoner_reward,
    report_focus,
    success_band,
    supervised_gap,
    synthesizer_reward,
    teachability,
)


@pytest.mark.parametrize("p,expected", [(0.0, 0.0), (0.25, 0.5), (0.5, 1.0), (0.75, 0.5), (1.0, 0.0), (0.1, 0.2), (0.9, 0.2)])
def test_teachability_hand_values(p, expected):
    assert teachability(p) == pytest.approx(expected)


def test_teachability_rejects_out_of_range():
    with pytest.raises(ValueError, match="success rate"):
        teachability(1.5)


@pytest.mark.parametrize("p,expected", [(0.0, 1.0), (0.25, 0.75), (0.5, 0.5), (0.75, 0.25), (1.0, 0.0)])
def test_supervised_gap_hand_values(p, expected):
    assert supervised_gap(p) == pytest.approx(expected)
    with pytest.raises(ValueError, match="success rate"):
        supervised_gap(-0.1)


def test_gated_reward_uses_the_configured_learner_term():
    """Same card, success 1/4: teachability 0.5, gap 0.75, each times the gates (quality 0.75 -> 0.5, reliability 1)."""
    teach = synthesizer_reward(True, 0.75, 1.0, 0.25, config=SynthesizerRewardConfig())
    gap = synthesizer_reward(True, 0.75, 1.0, 0.25, config=SynthesizerRewardConfig(learnability="gap"))
    assert (teach.total, teach.teachability) == (pytest.approx(0.25), pytest.approx(0.5))
    assert (gap.total, gap.teachability) == (pytest.approx(0.375), pytest.approx(0.75))
    # a task every attempt fails: nothing for group-relative RL, everything for SFT on its gold solution
    assert synthesizer_reward(True, 1.0, 1.0, 0.0, config=SynthesizerRewardConfig(learnability="gap")).total == 1.0
    assert synthesizer_reward(True, 1.0, 1.0, 0.0).total == 0.0


def test_progress_reward_scales_the_gap_by_the_cells_effect():
    """Success 1/4, gates 0.5 and 1: gap 0.75 times the cell's learning-effect weight 0.4 -> 0.3, gated 0.15; the
    weight is ignored by the other learner terms and must be a probability-like weight."""
    cfg = SynthesizerRewardConfig(learnability="progress")
    r = synthesizer_reward(True, 0.75, 1.0, 0.25, config=cfg, progress=0.4)
    assert (r.total, r.teachability) == (pytest.approx(0.15), pytest.approx(0.3))
    assert synthesizer_reward(True, 0.75, 1.0, 0.25, config=cfg).total == pytest.approx(0.375)  # unmeasured: 1
    assert synthesizer_reward(True, 0.75, 1.0, 0.25, progress=0.4).total == pytest.approx(0.25)  # teachability
    assert synthesizer_reward(False, 0.75, 1.0, None, config=cfg, progress=0.4).total == cfg.invalid_penalty
    with pytest.raises(ValueError, match="progress"):
        synthesizer_reward(True, 0.75, 1.0, 0.25, config=cfg, progress=1.5)
    with pytest.raises(ValueError, match="gated"):
        SynthesizerRewardConfig(learnability="progress", mode="additive")


def test_effect_reward_is_the_cells_measured_improvement_alone():
    """learnability=effect (SOAR-style): gates 0.5 and 1, the cell's weight 0.4 -> 0.2 whatever the success rate;
    an unmeasured cell weighs 1 (gates only); invalid cards keep the penalty."""
    cfg = SynthesizerRewardConfig(learnability="effect")
    for p in (0.0, 0.25, 1.0):
        r = synthesizer_reward(True, 0.75, 1.0, p, config=cfg, progress=0.4)
        assert (r.total, r.teachability) == (pytest.approx(0.2), pytest.approx(0.4))
    assert synthesizer_reward(True, 0.75, 1.0, 0.25, config=cfg).total == pytest.approx(0.5)
    assert synthesizer_reward(False, 0.75, 1.0, None, config=cfg, progress=0.4).total == cfg.invalid_penalty
    assert learner_term("progress", 0.25, 0.4) == pytest.approx(0.3)
    assert learner_term("teachability", 0.75) == pytest.approx(0.5)
    with pytest.raises(ValueError, match="unknown learnability"):
        learner_term("vibes", 0.5)


@pytest.mark.parametrize("x,t,expected", [(0.5, 0.5, 0.0), (0.4, 0.5, 0.0), (0.75, 0.5, 0.5), (1.0, 0.5, 1.0), (0.9, 0.8, 0.5), (0.3, 0.0, 0.3)])
def test_gate_hand_values(x, t, expected):
    assert gate(x, t) == pytest.approx(expected)


def test_gate_rejects_bad_threshold():
    with pytest.raises(ValueError, match="threshold"):
        gate(0.5, 1.0)


def test_success_band():
    assert success_band(0.5) == 1.0
    assert success_band(0.2) == 1.0 and success_band(0.8) == 1.0
    assert success_band(0.0) == 0.2 and success_band(1.0) == 0.2
    assert success_band(0.1) == 0.6 and success_band(0.9) == 0.6


def test_gated_synth_reward_hand_computed():
    # gate(0.9) = 0.8, gate(0.75) = 0.5, teach(0.25) = 0.5 -> 0.2
    r = synthesizer_reward(True, quality=0.9, reliability=0.75, success_rate=0.25)
    assert r.total == pytest.approx(0.2)
    assert r.teachability == pytest.approx(0.5)
    assert r.mode == "gated"


def test_additive_synth_reward_hand_computed():
    cfg = SynthesizerRewardConfig(mode="additive")
    # 0.3*1 + 0.2*0.5 + 0.2*band(0.5)=0.2 + 0.15*0.4 + 0.15*1 = 0.3+0.1+0.2+0.06+0.15 = 0.81
    r = synthesizer_reward(True, 1.0, 0.5, 0.5, novelty=0.4, alignment=1.0, config=cfg)
    assert r.total == pytest.approx(0.81) and r.alignment == 1.0
    # an off-target card loses exactly the alignment weight: 0.81 - 0.15
    assert synthesizer_reward(True, 1.0, 0.5, 0.5, novelty=0.4, alignment=0.0, config=cfg).total == pytest.approx(0.66)


def test_additive_reward_needs_its_alignment_input():
    cfg = SynthesizerRewardConfig(mode="additive")
    with pytest.raises(ValueError, match="alignment"):
        synthesizer_reward(True, 1.0, 0.5, 0.5, config=cfg)
    with pytest.raises(ValueError, match="alignment must be in"):
        synthesizer_reward(True, 1.0, 0.5, 0.5, alignment=1.5, config=cfg)
    # invalid cards are penalised without one; the gated mode does not use it but records it
    assert synthesizer_reward(False, 0.2, 0.0, None, config=cfg).total == -0.5
    assert synthesizer_reward(True, 0.9, 0.75, 0.25, alignment=1.0).alignment == 1.0


def card(factors: dict[str, str], difficulty: str = "medium") -> TaskCard:
    fields = {f: "x" for f in CARD_FIELDS}
    fields.update(problem="What is 2 + 3?", difficulty_estimate=difficulty)
    c = TaskCard(**fields)
    c.factors.update(factors)
    return c


def test_alignment_with_a_designer_target_is_on_target():
    c = card({"topic": "algebra", "steps": "3-4"})
    assert card_alignment(c, (("topic", "algebra"),)) == 1.0
    assert card_alignment(c, (("topic", "algebra"), ("steps", "3-4"))) == 1.0
    assert card_alignment(c, (("topic", "algebra"), ("steps", "5+"))) == 0.0  # one bucket missed
    assert card_alignment(c, (("topic", "geometry"),), focus={("topic", "algebra")}) == 0.0  # the target decides
    assert card_alignment(None, (("topic", "algebra"),)) == 0.0


def test_alignment_without_a_target_follows_the_report():
    report = CapabilityReport(
        weakest=[FactorStat(key="topic", value="geometry", n_tasks=6, n_measured=6, success_rate=0.1)],
        under_covered=[CoverageStat(key="difficulty", value="hard", n_tasks=1, share=0.05, uniform_share=0.33)],
    )
    focus = report_focus(report)
    assert focus == {("topic", "geometry"), ("difficulty", "hard")}
    assert card_alignment(card({"topic": "geometry"}), None, focus) == 1.0  # a weak spot
    assert card_alignment(card({"topic": "algebra"}, difficulty="hard"), None, focus) == 1.0  # under-covered
    assert card_alignment(card({"topic": "algebra"}), None, focus) == 0.0
    assert card_alignment(card({"topic": "geometry"}), None, frozenset()) == 0.0  # the report asks for nothing
    assert report_focus(CapabilityReport()) == frozenset()


def test_invalid_and_duplicate_penalties():
    cfg = SynthesizerRewardConfig(invalid_penalty=-0.5, duplicate_penalty=-0.3)
    assert synthesizer_reward(False, 0.2, 0.0, None, config=cfg).total == -0.5
    dup = synthesizer_reward(False, 0.9, 1.0, None, reason_codes=["near_duplicate"], config=cfg)
    assert dup.total == -0.3 and dup.penalty == -0.3


def test_valid_card_without_rollouts_scores_as_zero_success():
    assert synthesizer_reward(True, 1.0, 1.0, None).total == 0.0


def test_reasoner_reward():
    cfg = ReasonerRewardConfig()
    assert reasoner_reward(True, ["5"], cfg) == 1.0
    assert reasoner_reward(True, [], cfg) == 0.9
    assert reasoner_reward(False, ["4"], cfg) == 0.0
    # hedging: two different boxed answers is wrong even if one matched
    assert reasoner_reward(True, ["5", "4"], cfg) == 0.0
    # the same answer boxed twice is not hedging
    assert reasoner_reward(True, ["5", " 5"], cfg) == 1.0
    bonus = ReasonerRewardConfig(format_bonus=0.1)
    assert reasoner_reward(True, ["5"], bonus) == pytest.approx(1.1)
    assert reasoner_reward(False, ["4"], bonus) == pytest.approx(0.1)


def test_gradient_bearing():
    assert is_gradient_bearing([1.0, 0.0, 0.0, 0.0])
    assert not is_gradient_bearing([1.0, 1.0, 1.0, 1.0])
    assert not is_gradient_bearing([0.5])
    assert not is_gradient_bearing([])
    assert is_gradient_bearing([1.0, 0.9])


def test_off_target_subtracts_the_control_penalty_and_records_it():
    from synco.core.rewards import off_target

    r = synthesizer_reward(True, quality=0.9, reliability=0.75, success_rate=0.25)  # 0.2 (hand-computed above)
    missed = off_target(r, penalty=0.3, invalid_penalty=-0.5)
    assert missed.total == pytest.approx(0.2 - 0.3) and missed.penalty == pytest.approx(-0.3)
    assert missed.control == pytest.approx(-0.3) and r.control == 0.0
    assert (missed.quality, missed.teachability, missed.success_rate) == (r.quality, r.teachability, r.success_rate)
    assert r.total == pytest.approx(0.2)  # the original is not changed
    assert off_target(r, penalty=0.0, invalid_penalty=-0.5).total == pytest.approx(0.2)


def test_off_target_strict_gives_the_invalid_penalty():
    from synco.core.rewards import off_target

    r = synthesizer_reward(True, quality=0.9, reliability=0.75, success_rate=0.25)
    gated = off_target(r, penalty=0.3, invalid_penalty=-0.5, strict=True)
    # total becomes the invalid penalty; ``penalty`` holds what was folded in: -0.5 - 0.2 = -0.7
    assert gated.total == pytest.approx(-0.5) and gated.penalty == pytest.approx(-0.7)
    assert gated.control == pytest.approx(-0.7)  # the shift the gate folded in
