"""The control check: a promoted factor the Synthesizer does not follow is kept observed only, out of the cells."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import ValidationError

from synco.evosyn.config import EvoSynConfig, ReflectorConfig
from synco.evosyn.control import check_control, factor_control, pending
from synco.evosyn.run import build_evo_state, control_and_log
from synco.evosyn.space import SPACE_CHANGES, ControlEvidence, FactorEvidence, FactorSpace, FactorState, feasible_cells
from synco.core.records import CARD_FIELDS, TaskCard, TaskRecord, Verdict
from synco.domains.arith import ArithDomain

EV = FactorEvidence(cmi=0.05, cmi_null=0.001, p_value=0.005, n_tasks=400, n_attempts=3200)


def card_record(target: str | None, realised: dict[str, str], step: int = 5, valid: bool = True) -> TaskRecord:
    fields = {name: "x" for name in CARD_FIELDS}
    return TaskRecord(step=step, slot=0, raw="r", card=TaskCard(**fields, factors=realised),
                      verdict=Verdict(valid=valid), target=target)


def window() -> list[TaskRecord]:
    """Four targeted cards that count, and five that must not.

    carries asked 0, 0, 1, 1 and realised 0, 1, 1, 1: rate 3/4; P(asked) = (1/2, 1/2),
    P(realised) = (1/4, 3/4), so chance = 1/2 * 1/4 + 1/2 * 3/4 = 1/2.
    """
    recs = [card_record("level=L1,carries=0", {"level": "L1", "carries": "0"}),
            card_record("level=L1,carries=0", {"level": "L1", "carries": "1"}),
            card_record("level=L2,carries=1", {"level": "L2", "carries": "1"}),
            card_record("level=L2,carries=1", {"level": "L2", "carries": "1"})]
    recs += [card_record("level=L1,carries=0", {"level": "L1", "carries": "0"}, valid=False),  # invalid
             card_record("level=L1,carries=1", {"level": "L1", "carries": "0"}, step=2),  # before the promotion
             card_record(None, {"level": "L1", "carries": "0"}),  # no target
             card_record("level=L1", {"level": "L1", "carries": "1"}),  # carries not asked for
             TaskRecord(step=5, slot=0, raw="r", card=None, verdict=Verdict(valid=False), target="level=L1,carries=0")]
    return recs


def test_factor_control_on_a_hand_computed_window() -> None:
    ev = factor_control(window(), "carries", since_step=3)
    assert (ev.rate, ev.chance, ev.n_cards) == (0.75, 0.5, 4)
    # level: asked and realised L1 three times, L2 twice: chance = (3 * 3 + 2 * 2) / 5 ** 2
    assert factor_control(window(), "level", since_step=3) == ControlEvidence(rate=1.0, chance=13 / 25, n_cards=5)
    assert factor_control(window(), "zeros").n_cards == 0


def test_a_missing_realised_value_is_a_miss() -> None:
    ev = factor_control([card_record("level=L1,carries=2", {"level": "L1"})], "carries")
    assert (ev.rate, ev.chance, ev.n_cards) == (0.0, 0.0, 1)


def space_with_carries() -> FactorSpace:
    return FactorSpace(version=1, factors=[
        FactorState(name="level", buckets=["L1", "L2"]),
        FactorState(name="carries", buckets=["0", "1"], status="experimental", origin="promoted", since_step=2,
                    evidence=EV)])


def test_a_factor_followed_less_than_min_control_is_observed_only() -> None:
    space = space_with_carries()
    assert space.cell_of({"level": "L1", "carries": "1"}) == (("level", "L1"), ("carries", "1"))
    [ch] = check_control(window(), space, ReflectorConfig(min_control=0.8, min_control_cards=4), step=6)
    assert (ch.action, ch.factor, ch.version, ch.control.rate) == ("observe", "carries", 2, 0.75)
    assert "observe" in SPACE_CHANGES
    carries = space.get("carries")
    assert carries is not None and not carries.steered and carries.control == ch.control
    # still in use (the Reflector strata on it), but the cells no longer split on it
    assert space.active_names() == ["level", "carries"] and [f.name for f in space.steered()] == ["level"]
    assert space.cell_of({"level": "L1", "carries": "1"}) == (("level", "L1"),)
    assert pending(space) == [] and check_control(window(), space, ReflectorConfig(min_control=0.8), step=7) == []


def test_a_followed_factor_stays_a_control_and_the_cells_do_not_change() -> None:
    space = space_with_carries()
    [ch] = check_control(window(), space, ReflectorConfig(min_control=0.75, min_control_cards=4), step=6)
    assert (ch.action, ch.version, ch.control.n_cards) == ("steer", 1, 4) and "steer" not in SPACE_CHANGES
    carries = space.get("carries")
    assert carries is not None and carries.steered and carries.control is not None and pending(space) == []


def test_no_decision_before_min_control_cards_or_with_the_check_off() -> None:
    space = space_with_carries()
    assert check_control(window(), space, ReflectorConfig(min_control_cards=5), step=6) == []
    assert check_control(window(), space, ReflectorConfig(min_control=0.0, min_control_cards=1), step=6) == []
    assert pending(space) == ["carries"]


def test_built_in_factors_are_never_judged() -> None:
    space = FactorSpace(factors=[FactorState(name="level", buckets=["L1", "L2"])])
    assert pending(space) == [] and check_control(window(), space, ReflectorConfig(min_control_cards=1), step=6) == []


def test_an_observed_factor_is_out_of_the_feasible_cells_and_survives_a_json_round_trip() -> None:
    domain = ArithDomain()
    defs = domain.factor_defs()
    space = FactorSpace.from_defs(d for d in defs if d.name == "level")
    carries = next(d for d in defs if d.name == "carries")
    space.promote(carries, 9, EV)
    assert len(feasible_cells(space, defs, domain.sample_any)) > 11
    space.observe("carries", 11, ControlEvidence(rate=0.42, chance=0.26, n_cards=218))
    assert feasible_cells(space, defs, domain.sample_any) == [(("level", f"L{i}"),) for i in range(1, 12)]
    restored = FactorSpace.model_validate_json(space.model_dump_json())  # what a checkpoint saves
    assert restored == space and restored.get("carries").steered is False  # type: ignore[union-attr]
    # a space saved before the control check existed loads with every factor steered
    old = json.loads(space.model_dump_json())
    for f in old["factors"]:
        del f["steered"], f["control"]
    assert all(f.steered for f in FactorSpace.model_validate(old).factors)


def test_control_and_log_writes_the_decision_and_refreshes_the_cells(tmp_path: Path) -> None:
    evo = build_evo_state(ArithDomain())
    assert evo is not None
    carries = next(d for d in evo.defs if d.name == "carries")
    evo.space.promote(carries, 9, EV)
    evo.refresh_cells()
    assert len(evo.cells) > 11
    recs = [card_record("level=L3,carries=1", {"level": "L3", "carries": "0"}, step=10) for _ in range(6)]
    calls = []

    def recent() -> list[TaskRecord]:
        calls.append(1)
        return recs

    settings = EvoSynConfig(reflector_settings=ReflectorConfig(min_control_cards=6))
    [ch] = control_and_log(evo, recent, settings, step=10, run_dir=tmp_path)
    assert ch.action == "observe" and len(evo.cells) == 11
    [line] = (tmp_path / "factors.jsonl").read_text().splitlines()
    logged = json.loads(line)
    assert (logged["action"], logged["factor"], logged["control"]["rate"], logged["control"]["n_cards"]) == \
        ("observe", "carries", 0.0, 6)
    saved = json.loads((tmp_path / "factor_space.json").read_text())
    assert saved["n_cells"] == 11 and saved["factors"][1]["steered"] is False
    # nothing pending: the window is not even read
    assert control_and_log(evo, recent, settings, step=11, run_dir=tmp_path) == [] and len(calls) == 1


@pytest.mark.parametrize("field,value", [("min_control", 1.5), ("min_control", -0.1), ("min_control_cards", 0)])
def test_a_bad_control_setting_names_the_field(field: str, value: float) -> None:
    with pytest.raises(ValidationError, match=field):
        ReflectorConfig(**{field: value})
