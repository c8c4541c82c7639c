"""Tests for the capability report: hand-computed statistics, rendering budget, braces, empty input."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from synco.core.records import CARD_FIELDS, Attempt, TaskCard, TaskRecord, Verdict
from synco.core.report import (
    CapabilityReport,
    ReportConfig,
    band_of,
    build_report,
    normalise_label,
    record_factors,
)


def card(level: str | None, difficulty: str = "Easy", style: str = " Direct ", **factors: str) -> TaskCard:
    fields = {name: "x" for name in CARD_FIELDS}
    fields["difficulty_estimate"] = difficulty
    fields["target_reasoning_style"] = style
    if level is not None:
        factors["level"] = level
    return TaskCard(**fields, factors=factors)


def rec(
    c: TaskCard | None, n_correct: int, k: int = 4, valid: bool = True, reasons: tuple[str, ...] = ()
) -> TaskRecord:
    rollouts = [Attempt(text="t", correct=i < n_correct, reward=float(i < n_correct)) for i in range(k)]
    return TaskRecord(
        step=0,
        slot=0,
        raw="raw",
        card=c,
        verdict=Verdict(valid=valid, reasons=list(reasons)),
        rollouts=rollouts if valid else [],
        success_rate=n_correct / k if valid and k else None,
    )


def hand_built() -> list[TaskRecord]:
    """24 records; the numbers in the tests below are worked out from this list by hand."""
    records = [rec(card("1"), 4) for _ in range(6)]  # p = 1.0: too easy
    records += [rec(card("2"), 2) for _ in range(6)]  # p = 0.5: learnable, gradient-bearing
    records += [rec(card("3", difficulty="  Hard   PROBLEM "), 0) for _ in range(5)]  # p = 0: too hard
    records += [rec(card("4"), 1) for _ in range(2)]  # p = 0.25: learnable, too few for 'weakest'
    records.append(rec(card("5"), 9, k=10))  # p = 0.9: in between
    records.append(rec(card("2"), 0, k=0))  # valid but not solved yet: counts for coverage, not for success
    records.append(rec(card("1"), 0, valid=False, reasons=("near_duplicate: sim=0.91",)))
    records.append(rec(card("9"), 0, valid=False, reasons=("near_duplicate: sim=0.95", "low_quality: q=0.2")))
    records.append(rec(None, 0, valid=False, reasons=("missing_field: solution", "missing_field: problem")))
    return records


def test_normalise_and_factors() -> None:
    assert normalise_label("  Hard   PROBLEM \n") == "hard problem"
    assert normalise_label("a" * 50) == "a" * 40
    c = card("L5", difficulty="Medium", topic=" Algebra ", empty="  ")
    assert record_factors(c) == {"topic": "algebra", "level": "l5", "style": "direct", "difficulty": "medium"}
    # the card's own factors win over the derived ones
    assert record_factors(card(None, **{"Difficulty": "own"}))["difficulty"] == "own"


def test_bands_edges() -> None:
    cfg = ReportConfig()
    assert [band_of(p, cfg) for p in (0.0, 0.049, 0.05, 0.2, 0.5, 0.8, 0.81, 0.949, 0.95, 1.0)] == [
        "too_hard", "too_hard", "in_between", "learnable", "learnable", "learnable",
        "in_between", "in_between", "too_easy", "too_easy",
    ]


def test_counts_bands_and_rates() -> None:
    report = build_report(hand_built(), step=7)
    assert report.step == 7
    assert (report.n_records, report.n_valid, report.n_measured) == (24, 21, 20)
    assert report.valid_rate == pytest.approx(21 / 24)
    assert report.n_duplicates == 2
    assert report.bands.model_dump() == {"too_easy": 6, "learnable": 8, "too_hard": 5, "in_between": 1}
    assert report.mean_success_rate == pytest.approx((6 * 1.0 + 6 * 0.5 + 2 * 0.25 + 0.9) / 20)
    assert report.gradient_bearing_share == pytest.approx(9 / 20)
    assert report.learnable_share == pytest.approx(0.4)


def test_reason_codes_do_not_split_on_numbers() -> None:
    report = build_report(hand_built())
    assert [(r.code, r.count) for r in report.top_reasons] == [
        ("near_duplicate", 2), ("low_quality", 1), ("missing_field", 1),
    ]


def test_factor_stats() -> None:
    report = build_report(hand_built())
    stats = {(f.key, f.value): f for f in report.factors}
    lvl2 = stats[("level", "2")]
    assert (lvl2.n_tasks, lvl2.n_measured, lvl2.n_rollouts) == (7, 6, 24)
    assert lvl2.success_rate == pytest.approx(0.5) and lvl2.gradient_bearing_rate == pytest.approx(1.0)
    lvl1 = stats[("level", "1")]
    assert (lvl1.n_tasks, lvl1.success_rate, lvl1.gradient_bearing_rate) == (6, 1.0, 0.0)
    assert stats[("level", "5")].n_rollouts == 10
    assert stats[("difficulty", "hard problem")].success_rate == 0.0
    assert stats[("difficulty", "easy")].n_measured == 15
    assert stats[("difficulty", "easy")].success_rate == pytest.approx(10.4 / 15)
    assert stats[("style", "direct")].n_tasks == 21
    assert ("level", "9") not in stats  # only valid tasks count


def test_weakest_are_reasoner_weaknesses() -> None:
    report = build_report(hand_built())
    # >= 5 measured tasks, below too_easy; ties (0.0) by key; style=direct covers every task, so it is no weakness
    assert [(f.key, f.value) for f in report.weakest] == [
        ("difficulty", "hard problem"), ("level", "3"), ("level", "2"), ("difficulty", "easy"),
    ]
    assert [(f.key, f.value) for f in build_report(hand_built(), ReportConfig(top_k=2)).weakest] == [
        ("difficulty", "hard problem"), ("level", "3"),
    ]


def test_coverage() -> None:
    report = build_report(hand_built())
    # level over 21 valid tasks: 6, 7, 5, 2, 1 vs uniform 1/5; difficulty: easy 16, hard 5 vs uniform 1/2
    assert [(c.key, c.value, c.n_tasks) for c in report.over_covered] == [("level", "2", 7), ("difficulty", "easy", 16)]
    assert [(c.key, c.value) for c in report.under_covered] == [
        ("level", "5"), ("difficulty", "hard problem"), ("level", "4"),
    ]
    assert report.over_covered[0].share == pytest.approx(7 / 21)
    assert report.over_covered[0].uniform_share == pytest.approx(0.2)


def test_recommendations() -> None:
    recs = build_report(hand_built()).recommendations
    assert recs[0] == "aim between too easy and too hard: learnable share is 40%"
    assert recs[1] == "make tasks harder: 30% were solved by nearly every attempt"
    assert recs[2].startswith("target the Reasoner's weak spots: difficulty=hard problem (0.00), level=3 (0.00)")
    assert recs[3] == "cover more: level=5, difficulty=hard problem, level=4"
    assert recs[4] == "vary more, fewer of: level=2, difficulty=easy"
    assert len(recs) == 5


def test_validity_and_duplicate_recommendations() -> None:
    records = [rec(card("1"), 2)] + [rec(card("1"), 0, valid=False, reasons=("near_duplicate: sim=0.9",))] * 3
    recs = build_report(records).recommendations
    assert recs[0] == "make cards valid first: only 25% were valid; most common rejection: near_duplicate (3)"
    assert recs[1] == "avoid repeats: 3 of 4 cards duplicated earlier problems"


def test_window_keeps_latest_records() -> None:
    records = [rec(card("1"), 4) for _ in range(3)] + [rec(card("2"), 0) for _ in range(2)]
    report = build_report(records, ReportConfig(window=2))
    assert report.n_records == 2 and report.bands.too_hard == 2 and report.bands.too_easy == 0


def test_empty_report() -> None:
    report = build_report([])
    assert report.n_records == 0 and report.n_measured == 0
    assert report.mean_success_rate is None and report.learnable_share is None
    assert report.recommendations[0].startswith("no data yet")
    text = report.render()
    assert text.startswith("Capability report (step 0): no data yet")
    assert "no data yet: write" in text
    assert report.render_compact() == "no data"
    assert CapabilityReport.from_json(report.to_json()) == report


def test_json_round_trip() -> None:
    report = build_report(hand_built(), ReportConfig(top_k=3), step=3)
    back = CapabilityReport.from_json(report.to_json())
    assert back == report
    assert back.render() == report.render()


def test_render_sections_and_compact() -> None:
    report = build_report(hand_built(), step=7)
    text = report.render()
    lines = text.splitlines()
    assert lines[0] == "Capability report (step 7, last 24 cards)"
    assert lines[1] == (
        "valid 21/24 (88%), duplicates 2, mean success 0.52, gradient-bearing 45% of 20 solved tasks"
    )
    assert "- level=3: 0.00 over 5 tasks" in lines
    assert "- near_duplicate: 2" in lines
    assert "- too easy (>= 0.95): 6" in lines
    assert report.render_compact() == "weak:2|easy:1|hard:3|ok:0.40"
    assert report.render_compact(12) == "ok:0.40"  # no list fits with the share; the share alone does


def test_render_drops_least_important_first() -> None:
    report = build_report(hand_built(), step=7)
    full = report.render(100_000)
    assert "Success by factor:" in full
    short = report.render(600)
    assert len(short) <= 600
    assert "Recommendations:" in short and "Success by factor:" not in short
    assert short.startswith("Capability report (step 7")
    assert report.render(10) == "Capability"


def test_compact_shrinks_lists_to_fit() -> None:
    records = [rec(card(lv), n) for lv, n in (("a", 1), ("b", 2), ("c", 3), ("d", 0), ("e", 4)) for _ in range(5)]
    report = build_report(records)
    assert report.render_compact() == "weak:a,b,c|easy:e|hard:d|ok:0.60"
    assert report.render_compact(30) == "weak:a,b|easy:e|hard:d|ok:0.60"
    assert report.render_compact(29) == "weak:a|easy:e|hard:d|ok:0.60"
    assert report.render_compact(27) == "ok:0.60"
    assert report.render_compact(5) == "ok:0."


BRACES = ("\\frac{a}{b}", "{x}", "{0}", "{}}{")


def brace_records() -> list[TaskRecord]:
    records = []
    for value in BRACES:
        records += [rec(card("1", topic=value), 1) for _ in range(5)]
    records += [rec(card("1"), 0, valid=False, reasons=("bad_{field}: {0}",))]
    return records


def test_braces_survive_verbatim() -> None:
    report = build_report(brace_records())
    text = report.render(100_000)
    for value in BRACES:
        assert "topic=" + value + ": 0.25 (n=5)" in text
    assert "- bad_{field}: 1" in text
    assert "{" in CapabilityReport.from_json(report.to_json()).render()


SAMPLE = build_report(hand_built(), step=12)
BRACE_SAMPLE = build_report(brace_records())


@settings(max_examples=150, deadline=None)
@given(budget=st.integers(min_value=50, max_value=5000), which=st.booleans())
def test_render_respects_budget(budget: int, which: bool) -> None:
    report = SAMPLE if which else BRACE_SAMPLE
    text = report.render(budget)
    assert len(text) <= budget
    full_lines = set(report.render(1_000_000).splitlines())
    assert all(line in full_lines for line in text.splitlines())  # whole lines only
    assert len(report.render_compact(budget)) <= budget


@settings(max_examples=60, deadline=None)
@given(
    values=st.lists(st.text(min_size=1, max_size=60), min_size=1, max_size=8),
    budget=st.integers(min_value=0, max_value=800),
)
def test_render_budget_with_arbitrary_model_text(values: list[str], budget: int) -> None:
    records = [rec(card(v, difficulty=v, style=v, topic=v), i % 5) for i, v in enumerate(values * 5)]
    report = build_report(records)
    assert len(report.render(budget)) <= budget
    assert len(report.render_compact(min(budget, 120))) <= min(budget, 120)


def test_a_report_built_without_a_step_is_for_the_step_after_its_latest_record() -> None:
    """`build_report(pool.recent(500)).render()` of a run's last steps says the step the run would show, not step 0."""
    records = [r.model_copy(update={"step": 237 + i // 8}) for i, r in enumerate(hand_built())]
    report = build_report(records)
    assert report.step == 237 + (len(records) - 1) // 8 + 1
    assert report.render().startswith(f"Capability report (step {report.step}, last {len(records)} cards)")
    assert build_report(records, step=5).step == 5 and build_report([]).step == 0
