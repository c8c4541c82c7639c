"""The factor space inside a run: built from the domain, reflected on and logged, logs rewound on resume."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from synco.evosyn.config import EvoSynConfig, ReflectorConfig
from synco.evosyn.effect import Transition
from synco.evosyn.proposed import ProposedFactor
from synco.evosyn.run import (EFFECT_FILE, EvoState, build_evo_state, read_effects, reflect_and_log, truncate_logs,
                              with_proposed_values, write_space)
from synco.evosyn.space import SPACE_CHANGES, FactorSpace, factor_values
from synco.core.records import CARD_FIELDS, HEADER_FIELDS, Attempt, TaskCard, TaskRecord, Verdict
from synco.domains.arith import ArithDomain


def arith_records(n: int = 240, seed: int = 0) -> list[TaskRecord]:
    """Solved arith tasks of L1, L3 and L5 whose 4 attempts all fail exactly when the problem has a carry."""
    domain, rng = ArithDomain(), random.Random(seed)
    defs = domain.factor_defs()
    out = []
    for i in range(n):
        problem = domain.sample_problem(rng, rng.choice(["L1", "L3", "L5"]))
        factors = factor_values(problem, defs)
        fails = 0 if factors["carries"] == "0" else 4
        fields = {name: "x" for name in CARD_FIELDS}
        fields["problem"] = problem
        out.append(TaskRecord(step=0, slot=i, raw="r", card=TaskCard(**fields, factors=factors),
                              verdict=Verdict(valid=True),
                              rollouts=[Attempt(text="t", correct=j >= fails) for j in range(4)]))
    return out


def cfg(**reflector: object) -> EvoSynConfig:
    base = {"min_tasks": 100, "min_bucket_tasks": 10, "permutations": 50, "alpha": 0.05}
    return EvoSynConfig(reflector_settings=ReflectorConfig(**{**base, **reflector}))


def test_build_evo_state_starts_from_the_builtin_factors() -> None:
    evo = build_evo_state(ArithDomain())
    assert evo is not None
    assert evo.space.active_names() == ["level"] and evo.builtin == ["level"]
    assert [d.name for d in evo.defs] == ["level", "carries", "answer_digits", "zeros", "lead", "ones"]
    assert evo.cells == [(("level", f"L{i}"),) for i in range(1, 12)]
    # resuming: the saved space is used as it is
    space = FactorSpace.from_defs(evo.defs[:2])
    resumed = build_evo_state(ArithDomain(), space)
    assert resumed is not None and resumed.space is space
    assert len(resumed.cells) == len(resumed.feasible(space)) > 11


def test_evosyn_factors_choose_the_starting_space_and_are_never_retired() -> None:
    evo = build_evo_state(ArithDomain(), factors=["level", "carries"])
    assert evo is not None
    assert evo.space.active_names() == ["level", "carries"] and evo.builtin == ["level", "carries"]
    assert {c[0] for c in evo.cells} == {("level", f"L{i}") for i in range(1, 12)}
    assert {c[1][0] for c in evo.cells} == {"carries"} and len(evo.cells) > 11
    # the remaining factors stay candidates: the definitions are all still there
    assert [d.name for d in evo.defs] == ["level", "carries", "answer_digits", "zeros", "lead", "ones"]
    # in the order given, whatever the domain's order: the first factor is each cell's parent (Designer coverage)
    swapped = build_evo_state(ArithDomain(), factors=["carries", "level"])
    assert swapped is not None and swapped.space.active_names() == ["carries", "level"]
    assert {c[0][0] for c in swapped.cells} == {"carries"}


def test_evosyn_factors_naming_an_unknown_factor_is_an_error_naming_it() -> None:
    with pytest.raises(ValueError, match=r"unknown factor\(s\) \['size'\].*known: level, carries"):
        build_evo_state(ArithDomain(), factors=["level", "size"])


def test_evosyn_factors_must_be_distinct_and_non_empty() -> None:
    for bad in ([], ["level", "level"]):
        with pytest.raises(ValueError, match="evosyn.factors must name at least one factor, each once"):
            EvoSynConfig(factors=bad)


def test_a_domain_without_factors_has_no_space() -> None:
    class Plain:
        name = "plain"

    assert build_evo_state(Plain()) is None


def small_evo():
    """The arith space with two candidates only (each candidate that passes costs a feasibility scan)."""
    evo = build_evo_state(ArithDomain())
    assert evo is not None
    evo.defs = [d for d in evo.defs if d.name in ("level", "carries", "lead")]
    return evo


def test_reflect_and_log_promotes_carries_and_writes_the_files(tmp_path: Path) -> None:
    evo = small_evo()
    n_before = len(evo.cells)
    r = reflect_and_log(evo, arith_records(), cfg(), step=9, seed=0, run_dir=tmp_path)
    assert [(c.action, c.factor) for c in r.changes] == [("promote", "carries")]
    assert evo.space.active_names() == ["level", "carries"] and len(evo.cells) > n_before
    [line] = (tmp_path / "factors.jsonl").read_text().splitlines()
    logged = json.loads(line)
    assert (logged["step"], logged["action"], logged["factor"], logged["version"]) == (9, "promote", "carries", 1)
    assert logged["evidence"]["p_value"] <= 0.05 and logged["evidence"]["n_tasks"] == 240
    saved = json.loads((tmp_path / "factor_space.json").read_text())
    assert saved["n_cells"] == len(evo.cells)
    assert FactorSpace.model_validate({k: v for k, v in saved.items() if k != "n_cells"}) == evo.space
    [refl] = [json.loads(ln) for ln in (tmp_path / "reflector.jsonl").read_text().splitlines()]
    assert refl["step"] == 9 and refl["space_version"] == 1
    assert set(refl["candidates"]) == {"carries", "lead"}
    assert refl["candidates"]["carries"]["excess"] > 0.1


def test_a_reflection_without_changes_logs_only_the_candidates(tmp_path: Path) -> None:
    evo = build_evo_state(ArithDomain())
    assert evo is not None
    reflect_and_log(evo, arith_records(n=50), cfg(), step=4, seed=0, run_dir=tmp_path)  # 50 < min_tasks
    assert not (tmp_path / "factors.jsonl").exists() and not (tmp_path / "factor_space.json").exists()
    assert json.loads((tmp_path / "reflector.jsonl").read_text())["candidates"] == {}


def test_max_cells_counts_the_feasible_cells_of_the_domain(tmp_path: Path) -> None:
    evo = small_evo()
    # level x carries has more than 20 feasible cells (2 to 4 per level): the promotion is blocked
    r = reflect_and_log(evo, arith_records(), cfg(max_cells=20), step=9, seed=0, run_dir=tmp_path)
    assert r.changes == [] and evo.space.active_names() == ["level"]
    assert r.candidates["carries"].p_value <= 0.05


def test_truncate_logs_drops_later_reflections_and_a_torn_line(tmp_path: Path) -> None:
    (tmp_path / "factors.jsonl").write_text('{"step": 9, "a": 1}\n{"step": 19, "a": 2}\n{"step": 29, "a"')
    (tmp_path / "reflector.jsonl").write_text('{"step": 9}\n{"step": 19}\n')
    truncate_logs(tmp_path, 19)
    assert (tmp_path / "factors.jsonl").read_text() == '{"step": 9, "a": 1}\n{"step": 19, "a": 2}\n'
    truncate_logs(tmp_path, 10)
    assert (tmp_path / "factors.jsonl").read_text() == '{"step": 9, "a": 1}\n'
    assert (tmp_path / "reflector.jsonl").read_text() == '{"step": 9}\n'
    truncate_logs(tmp_path, -1)
    assert (tmp_path / "reflector.jsonl").read_text() == ""
    truncate_logs(tmp_path / "missing", 3)  # no files: nothing to do


def test_write_space_replaces_the_file_whole(tmp_path: Path) -> None:
    evo = build_evo_state(ArithDomain())
    assert evo is not None
    write_space(evo, tmp_path)
    first = json.loads((tmp_path / "factor_space.json").read_text())
    assert first["version"] == 0 and first["n_cells"] == 11
    assert [p.name for p in tmp_path.iterdir()] == ["factor_space.json"]  # no temporary file left


# ----------------------------------------------------------------- a real run: resume restores the space exactly

REFLECT_EARLY = ["evosyn.reflector_settings.every=1", "evosyn.reflector_settings.min_tasks=2",
                 "evosyn.reflector_settings.min_bucket_tasks=1", "evosyn.reflector_settings.permutations=10",
                 "evosyn.reflector_settings.alpha=0.99", "evosyn.reflector_settings.min_excess_cmi=0",
                 "evosyn.reflector_settings.retire_alpha=0.95", "evosyn.reflector_settings.min_control_cards=2"]
TINY = ["n_cards=8", "k=2", "heldout_per_group=0", "progress=false", "tensorboard=false", "report_refresh_every=2",
        "synthesizer.sampling.max_new_tokens=96"]


def _lines(path: Path) -> list[dict]:
    return [json.loads(ln) for ln in path.read_text().splitlines()]


@pytest.mark.slow
def test_resume_restores_the_factor_space_exactly(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, one_thread) -> None:
    from synco.cli import main
    from synco.config import load_config
    from synco.run.loop import train

    # Start from an empty space (one cell): with the 11 level cells built in, the few tasks of a tiny run are
    # spread so thin that no shuffle within a cell can move the CMI (p = 1) and nothing is ever promoted.
    monkeypatch.setattr(ArithDomain, "builtin_factors", ())

    def cfg(run_id: str, steps: int):
        return load_config("arith", overrides=[*TINY, *REFLECT_EARLY, f"runs_dir={tmp_path}", f"run_id={run_id}",
                                                f"steps={steps}"])

    train(cfg("full", 3), log=lambda _: None)
    train(cfg("half", 2), log=lambda _: None)  # checkpoint after step 1
    assert main(["train", "--resume", str(tmp_path / "half"), "steps=3"]) == 0
    full, half = tmp_path / "full", tmp_path / "half"

    changes = _lines(full / "factors.jsonl")
    assert any(c["step"] <= 1 for c in changes), "the space must change before the checkpoint for this test to bite"
    assert any(c["step"] == 2 for c in changes), "... and again after it"
    for name in ("factor_space.json", "factors.jsonl", "reflector.jsonl"):
        assert (half / name).read_text() == (full / name).read_text(), name
    space = json.loads((full / "factor_space.json").read_text())
    assert space["version"] == sum(c["action"] in SPACE_CHANGES for c in changes) and space["factors"]
    assert any(c["action"] in ("steer", "observe") and c["control"]["n_cards"] >= 2 for c in changes), \
        "the control check must judge a promoted factor too"
    m_full, m_half = _lines(full / "metrics.jsonl"), _lines(half / "metrics.jsonl")
    assert [r["step"] for r in m_half] == [0, 1, 2]
    assert [(r["allocation"], r["space_version"]) for r in m_half] == [(r["allocation"], r["space_version"]) for r in m_full]
    assert m_half[2]["space_version"] > 0 and set(m_half[2]["allocation"]) != {""}  # step 2 ran on the restored space
    assert sum(m_half[2]["allocation"].values()) == 8


def test_truncate_logs_reports_a_torn_line_and_refuses_a_bad_middle_line(tmp_path: Path) -> None:
    """The run's other logs' rule (one shared rewind): nothing unreadable is dropped silently."""
    (tmp_path / "factors.jsonl").write_text('{"step": 9}\n{"step": 19, "a"')
    said: list[str] = []
    truncate_logs(tmp_path, 19, log=said.append)
    assert (tmp_path / "factors.jsonl").read_text() == '{"step": 9}\n'
    assert len(said) == 1 and "torn last line" in said[0] and "factors.jsonl" in said[0]
    (tmp_path / "reflector.jsonl").write_text('{"step": 9}\n{oops\n{"step": 12}\n')
    with pytest.raises(RuntimeError, match="reflector.jsonl: line 2 is not a JSON object with a step"):
        truncate_logs(tmp_path, 19, error=RuntimeError, log=said.append)
    assert (tmp_path / "reflector.jsonl").read_text() == '{"step": 9}\n{oops\n{"step": 12}\n'  # left as it was


def test_read_effects_reads_transitions_and_names_a_bad_line(tmp_path: Path) -> None:
    t = Transition(step=9, period=0, pre_steps=(0, 9), post_steps=(10, 19), cells=[])
    path = tmp_path / EFFECT_FILE
    assert read_effects(tmp_path) == []
    path.write_text(t.model_dump_json() + "\n" + t.model_dump_json()[:20])  # a torn last line is dropped
    assert read_effects(tmp_path) == [t]
    path.write_text(t.model_dump_json() + "\n" + '{"step": "nine"}\n' + t.model_dump_json() + "\n")
    with pytest.raises(RuntimeError, match=f"{EFFECT_FILE}:2: not a learning-effect transition"):
        read_effects(tmp_path, RuntimeError)


def test_proposed_values_are_computed_from_the_domains_factor_subject() -> None:
    """As the step computes a new card's factors (``factor_subject``): in the tools world the instruction and the gold
    actions, so a keyword of the actions counts (from the problem alone this card would be in ``plus``)."""
    from synco.domains.tools.domain import ToolsDomain

    evo = build_evo_state(ToolsDomain())
    assert evo is not None
    evo.add_proposal(ProposedFactor(name="who", buckets={"zed": ["zed"], "plus": ["plus"]}, step=0), 4)
    fields = {name: "x" for name in CARD_FIELDS} | {"problem": "what is 3 plus 4", "solution": "find_user(zed)"}
    rec = TaskRecord(step=0, slot=0, raw="r", card=TaskCard(**fields), verdict=Verdict(valid=True))
    [out] = with_proposed_values([rec], evo)
    assert out.card is not None and out.card.factors["who"] == "zed"
    assert rec.card is not None and "who" not in rec.card.factors  # the given record is not changed


def test_the_step_and_the_reflector_read_one_factor_subject() -> None:
    """A tools card's proposed factor: the step (``screen_card``) and the Reflector's values of older cards
    (``with_proposed_values``) read the same subject, the payload's instruction and gold actions, also in a state built
    without the domain (whose subject once defaulted to the problem text: ``plus`` here, not ``zed``)."""
    from synco.cotrain.engine import screen_card
    from synco.domains.tools.domain import ToolsDomain
    from synco.domains.tools.payload import ToolsPayload

    domain = ToolsDomain()
    evo = build_evo_state(domain)
    assert evo is not None
    evo.add_proposal(ProposedFactor(name="who", buckets={"zed": ["zed"], "plus": ["plus"]}, step=0), 4)
    card = TaskCard(**dict.fromkeys(HEADER_FIELDS, "x"),
                    payload=ToolsPayload(instruction="what is 3 plus 4", actions="find_user(zed)", outputs="none"))
    stepped = card.model_copy(deep=True)
    screen_card(domain, evo.defs, stepped, Verdict(valid=True))
    assert stepped.factors["who"] == "zed"
    bare = EvoState(space=evo.space, defs=evo.defs, builtin=evo.builtin, cells=[])
    for state in (evo, bare):
        rec = TaskRecord(step=0, slot=0, raw="r", card=card, verdict=Verdict(valid=True))
        [out] = with_proposed_values([rec], state)
        assert out.card is not None and out.card.factors["who"] == stepped.factors["who"]
