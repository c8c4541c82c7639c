"""The Designer: need, shares, systematic rounding and min_group, on hand-computed pool windows."""

from __future__ import annotations

import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from synco.evosyn.config import DesignerConfig
from synco.evosyn.designer import (
    CellStats,
    allocate,
    cell_needs,
    cell_stats,
    mastered_cells,
    need,
    round_systematic,
    shares,
)
from synco.evosyn.space import FactorSpace, FactorState
from synco.core.records import CARD_FIELDS, Attempt, TaskCard, TaskRecord, Verdict

LEVELS = ["L1", "L2", "L3", "L4"]
SPACE = FactorSpace(factors=[FactorState(name="level", buckets=LEVELS)])
CELLS = [(("level", lv),) for lv in LEVELS]
L1, L2, L3, L4 = CELLS


def record(level: str | None, correct: list[bool], valid: bool = True, i: int = 0) -> TaskRecord:
    """A solved task whose card carries the domain-computed factor ``level`` (absent when None)."""
    fields = {name: "x" for name in CARD_FIELDS}
    fields["problem"] = f"problem {level} {i}"
    card = TaskCard(**fields, factors={} if level is None else {"level": level, "carries": "0"})
    rollouts = [Attempt(text="t", correct=c, reward=float(c)) for c in correct]
    return TaskRecord(step=0, slot=i, raw="r", card=card, verdict=Verdict(valid=valid), rollouts=rollouts,
                      success_rate=sum(correct) / len(correct) if correct else None)


def window() -> list[TaskRecord]:
    """The hand-computed window used below (4 attempts per task).

    L1: 3 tasks, 12/12 correct          L2: 3 tasks, 6/12 correct (2 each)
    L3: 3 tasks, 1/12 correct           L4: 1 task, 0/4 correct (under-measured)
    plus records that must be skipped: an invalid L3 card with 4/4 correct, a card with no level,
    and a valid card without rollouts.
    """
    t, f = True, False
    recs = [record("L1", [t] * 4, i=i) for i in range(3)]
    recs += [record("L2", [t, t, f, f], i=10 + i) for i in range(3)]
    recs += [record("L3", [t, f, f, f], i=20), record("L3", [f] * 4, i=21), record("L3", [f] * 4, i=22)]
    recs += [record("L4", [f] * 4, i=30)]
    recs += [record("L3", [t] * 4, valid=False, i=40), record(None, [t] * 4, i=41), record("L2", [], i=42)]
    return recs


CFG = DesignerConfig(target=0.5, floor=0.2, retention=0.1, mastered=0.9, min_tasks=2, prior=1.0, sharpness=2.0,
                     min_group=2)


# ----------------------------------------------------------------- need and rounding


@pytest.mark.parametrize("p,target,expected", [
    (0.5, 0.5, 1.0), (0.0, 0.5, 0.0), (1.0, 0.5, 0.0), (0.25, 0.5, 0.5), (0.75, 0.5, 0.5), (0.1, 0.5, 0.2),
    (0.25, 0.25, 1.0), (0.125, 0.25, 0.5), (0.625, 0.25, 0.5), (1.0, 0.25, 0.0), (0.0, 0.8, 0.0), (0.9, 0.8, 0.5),
])
def test_need_hand_values(p: float, target: float, expected: float) -> None:
    assert need(p, target) == pytest.approx(expected)


@pytest.mark.parametrize("p", [-0.1, 1.5, math.nan])
def test_need_rejects_a_rate_outside_0_1(p: float) -> None:
    with pytest.raises(ValueError, match="success rate p"):
        need(p)


@pytest.mark.parametrize("share,offset,expected", [
    ([0.5, 0.5, 0.5, 0.5], 0.0, [0, 1, 0, 1]),  # running sums 0.5, 1, 1.5, 2
    ([0.5, 0.5, 0.5, 0.5], 0.5, [1, 0, 1, 0]),  # + 0.5: 1, 1.5, 2, 2.5
    ([0.5, 0.5, 0.5, 0.5], 0.75, [1, 0, 1, 0]),  # floor(1.25, 1.75, 2.25, 2.75) - 0
    ([1.0, 2.0, 3.0], 0.3, [1, 2, 3]),  # whole shares stay whole for every offset
    ([2.5, 0.25, 0.25, 1.0], 0.5, [3, 0, 0, 1]),  # floor(3, 3.25, 3.5, 4.5) = 3, 3, 3, 4
    ([2.5, 0.25, 0.25, 1.0], 0.0, [2, 0, 1, 1]),  # floor(2.5, 2.75, 3, 4) = 2, 2, 3, 4
    ([0.0, 0.0], 0.9, [0, 0]),
    ([], 0.5, []),
])
def test_round_systematic_examples(share: list[float], offset: float, expected: list[int]) -> None:
    assert round_systematic(share, offset) == expected


def test_round_systematic_rejects_an_offset_outside_0_1() -> None:
    with pytest.raises(ValueError, match="offset"):
        round_systematic([1.0], 1.0)
    with pytest.raises(ValueError, match="offset"):
        round_systematic([1.0], -0.1)


def test_round_systematic_is_unbiased_over_offsets() -> None:
    share = [0.3, 1.7, 0.0, 2.45, 0.55]
    offsets = [(j + 0.5) / 1000 for j in range(1000)]
    runs = [round_systematic(share, u) for u in offsets]
    for i, s in enumerate(share):
        assert all(r[i] in (math.floor(s), math.ceil(s)) for r in runs)
        assert sum(r[i] for r in runs) / len(runs) == pytest.approx(s, abs=2e-3)


# ----------------------------------------------------------------- the hand-computed window


def test_cell_stats_of_the_window_skip_invalid_unplaced_and_unsolved_records() -> None:
    stats = cell_stats(window(), SPACE)
    assert stats == {L1: CellStats(3, 12, 12), L2: CellStats(3, 12, 6), L3: CellStats(3, 12, 1),
                     L4: CellStats(1, 4, 0)}
    assert CellStats().success() is None
    assert stats[L2].success(1.0) == pytest.approx(7 / 14)


def test_needs_mastered_and_shares_by_hand() -> None:
    stats = cell_stats(window(), SPACE)
    # smoothed success (prior 1): L1 13/14 = 0.929 >= 0.9 -> mastered; L2 7/14 = 0.5 -> need 1;
    # L3 2/14 = 1/7 -> need (1/7)/0.5 = 2/7; L4 has 1 task < min_tasks 2 -> need 1 (coverage first).
    needs = cell_needs(CELLS, stats, CFG)
    assert needs[L2] == pytest.approx(1.0) and needs[L3] == pytest.approx(2 / 7) and needs[L4] == 1.0
    assert needs[L1] == pytest.approx(need(13 / 14))
    assert mastered_cells(CELLS, stats, CFG) == [L1]
    # n_slots 20: floor 0.2*20 = 4 -> 1 per cell; retention 0.1*20 = 2 -> all to L1 (the one mastered cell);
    # need share 20 - 4 - 2 = 14 over weights need^2: L1 0 (mastered), L2 1, L3 4/49, L4 1; total 102/49.
    #   L2 = L4 = 1 + 14 * 49/102 = 1 + 686/102 = 7.7255;  L3 = 1 + 14 * 4/102 = 1 + 56/102 = 1.5490;  L1 = 1 + 2 = 3
    sh = shares(CELLS, stats, 20, CFG)
    assert sh[L1] == pytest.approx(3.0)
    assert sh[L2] == pytest.approx(1 + 686 / 102) and sh[L4] == pytest.approx(1 + 686 / 102)
    assert sh[L3] == pytest.approx(1 + 56 / 102)
    assert sum(sh.values()) == pytest.approx(20)


@pytest.mark.parametrize("offset,expected", [
    # running sums 3, 10.7255, 12.2745, 20 (+ offset, floored), then min_group 2:
    # u=0.5: floor(3.5, 11.2255, 12.7745, 20.5) = 3, 11, 12, 20 -> 3, 8, 1, 8; L3 has 1 < 2: one slot from the
    #        largest allocation (L2 and L4 tie at 8: the first in cell order, L2) -> 3, 7, 2, 8
    (0.5, [3, 7, 2, 8]),
    # u=0:   floor(3, 10.7255, 12.2745, 20) = 3, 10, 12, 20 -> 3, 7, 2, 8 (no fix-up needed)
    (0.0, [3, 7, 2, 8]),
    # u=0.9: floor(3.9, 11.6255, 13.1745, 20.9) = 3, 11, 13, 20 -> 3, 8, 2, 7
    (0.9, [3, 8, 2, 7]),
])
def test_allocation_of_the_window_by_hand(offset: float, expected: list[int]) -> None:
    slots = allocate(CELLS, cell_stats(window(), SPACE), 20, CFG, offset=offset)
    assert [slots[c] for c in CELLS] == expected


def test_min_group_takes_from_the_largest_allocation() -> None:
    # prior 0: success 3/20 = 0.15, 7/20 = 0.35, 10/20 = 0.5 -> needs 0.3, 0.7, 1 (sharpness 1, no floor,
    # nothing mastered): shares of 8 slots = 8 * (0.3, 0.7, 1) / 2 = 1.2, 2.8, 4.
    cfg = DesignerConfig(floor=0.0, retention=0.0, min_tasks=0, sharpness=1.0, min_group=2, prior=0.0)
    stats = {L1: CellStats(5, 20, 3), L2: CellStats(5, 20, 7), L3: CellStats(5, 20, 10)}
    cells = [L1, L2, L3]
    sh = shares(cells, stats, 8, cfg)
    assert [sh[c] for c in cells] == pytest.approx([1.2, 2.8, 4.0])
    # u=0.5: floor(1.7, 4.5, 8.5) = 1, 4, 8 -> 1, 3, 4; L1 has 1 < 2: one slot from the largest (L3, 4 -> 3)
    slots = allocate(cells, stats, 8, cfg, offset=0.5)
    assert [slots[c] for c in cells] == [2, 3, 3]


def test_min_group_gives_the_slots_of_a_hopeless_cell_away() -> None:
    # 3 slots over 3 cells of equal need (nothing measured), min_group 2: u=0.5 -> floor(1.5, 2.5, 3.5) =
    # 1, 2, 3 -> 1, 1, 1. No cell is above 2, so none can be raised: the first is itself the largest (kept),
    # the second gives its slot to the first (2), the third too (3).
    cfg = DesignerConfig(floor=0.0, retention=0.0, min_group=2)
    slots = allocate(CELLS[:3], {}, 3, cfg, offset=0.5)
    assert [slots[c] for c in CELLS[:3]] == [3, 0, 0]


def test_min_group_never_loses_the_slots_a_small_cell_received() -> None:
    # Regression: 7 slots, 3 equal cells, min_group 4, u=0: floor(2.33, 4.67, 7) = 2, 4, 7 -> 2, 2, 3 (all small).
    # L1 gives its 2 to the largest (L3: 5); L2 cannot be raised (L3 has 1 to spare, L2 needs 2): its 2 go to L3
    # (7). L3 is no longer small and must keep all 7 (it used to be cut back to min_group: 4 slots in total).
    cfg = DesignerConfig(floor=0.0, retention=0.0, min_group=4)
    slots = allocate(CELLS[:3], {}, 7, cfg, offset=0.0)
    assert [slots[c] for c in CELLS[:3]] == [0, 0, 7]


def test_feedback_off_is_coverage_only() -> None:
    stats = cell_stats(window(), SPACE)
    cfg = CFG.model_copy(update={"min_group": 1})
    assert cell_needs(CELLS, stats, cfg, feedback=False) == {c: 1.0 for c in CELLS}
    sh = shares(CELLS, stats, 20, cfg, feedback=False)
    assert all(v == pytest.approx(5.0) for v in sh.values())  # uniform: no retention (nothing "mastered")
    assert allocate(CELLS, stats, 20, cfg, feedback=False) == {c: 5 for c in CELLS}
    assert allocate(CELLS, stats, 20, cfg, feedback=False) == allocate(CELLS, {}, 20, cfg, feedback=True)
    # with feedback the same window gives a very different allocation
    assert allocate(CELLS, stats, 20, cfg) != {c: 5 for c in CELLS}


def test_every_cell_gets_its_floor_on_average_over_offsets() -> None:
    # L1 mastered and L3 nearly hopeless still get at least floor * n / cells slots on average.
    cfg = CFG.model_copy(update={"min_group": 1, "floor": 0.25, "retention": 0.0})
    stats = {L1: CellStats(10, 40, 40), L2: CellStats(10, 40, 20), L3: CellStats(10, 40, 0), L4: CellStats(10, 40, 20)}
    offsets = [(j + 0.5) / 200 for j in range(200)]
    mean = {c: sum(allocate(CELLS, stats, 8, cfg, offset=u)[c] for u in offsets) / len(offsets) for c in CELLS}
    floor = 0.25 * 8 / 4
    assert all(m >= floor - 1e-9 for m in mean.values()), mean
    assert mean[L2] > 2 * floor and mean[L3] < 1.5 * floor


def test_no_cells_or_negative_slots_are_errors() -> None:
    with pytest.raises(ValueError, match="at least one cell"):
        allocate([], {}, 4, CFG)
    with pytest.raises(ValueError, match="n_slots"):
        allocate(CELLS, {}, -1, CFG)


# ----------------------------------------------------------------- properties


@st.composite
def designer_case(draw: st.DrawFn):
    n_cells = draw(st.integers(1, 12))
    cells = [(("level", f"L{i}"),) for i in range(n_cells)]
    stats = {}
    for c in cells:
        if draw(st.booleans()):
            n_tasks = draw(st.integers(0, 30))
            k = draw(st.integers(1, 8))
            stats[c] = CellStats(n_tasks, n_tasks * k, draw(st.integers(0, n_tasks * k)))
    floor = draw(st.floats(0, 1))
    cfg = DesignerConfig(
        target=draw(st.floats(0.05, 0.95)), floor=floor, retention=draw(st.floats(0, 1 - floor)),
        mastered=draw(st.floats(0.05, 1.0)), min_tasks=draw(st.integers(0, 6)), prior=draw(st.floats(0, 3)),
        sharpness=draw(st.floats(0.1, 6)), min_group=draw(st.integers(1, 5)))
    return cells, stats, cfg, draw(st.integers(0, 64)), draw(st.floats(0, 1, exclude_max=True)), draw(st.booleans())


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(designer_case())
def test_allocation_always_sums_to_n_slots(case) -> None:
    cells, stats, cfg, n_slots, offset, feedback = case
    slots = allocate(cells, stats, n_slots, cfg, feedback=feedback, offset=offset)
    assert list(slots) == cells
    assert all(v >= 0 for v in slots.values())
    assert sum(slots.values()) == n_slots
    sh = shares(cells, stats, n_slots, cfg, feedback)
    assert sum(sh.values()) == pytest.approx(n_slots)
    # a group below min_group is left only when the slots cannot make two groups of min_group
    small = [c for c in cells if 0 < slots[c] < cfg.min_group]
    assert not small or n_slots < 2 * cfg.min_group, (slots, cfg.min_group)


def test_parent_backoff_by_hand() -> None:
    """An under-measured fine cell borrows its level's success as a prior worth min_tasks tasks."""
    from synco.evosyn.designer import CellStats, backed_off_success, cell_needs, parent_stats

    hard = (("level", "L8"), ("carries", "0"))
    new = (("level", "L8"), ("carries", "2"))
    easy = (("level", "L1"), ("carries", "0"))
    fresh = (("level", "L5"), ("carries", "1"))
    stats = {hard: CellStats(n_tasks=10, n_attempts=80, n_correct=4), new: CellStats(n_tasks=1, n_attempts=8, n_correct=0),
             easy: CellStats(n_tasks=20, n_attempts=160, n_correct=156)}
    parents = parent_stats(stats)
    assert parents[(("level", "L8"),)] == CellStats(11, 88, 4)
    # w = 4 tasks x 8 attempts per task = 32 pseudo-attempts at the parent's 4/88
    q = backed_off_success(stats[new], parents[(("level", "L8"),)], 4)
    assert q == pytest.approx((0 + 32 * 4 / 88) / (8 + 32))
    cfg = DesignerConfig(coverage="parent")
    needs = cell_needs([hard, new, easy, fresh], stats, cfg)
    assert needs[new] == pytest.approx(q / 0.5)  # below the target: need = p / target
    assert needs[hard] == pytest.approx(((4 + 1) / (80 + 2)) / 0.5)  # measured: its own (Beta-smoothed) rate
    assert needs[fresh] == 1.0  # no parent evidence at all: explore
    assert cell_needs([new], stats, DesignerConfig())[new] == 1.0  # coverage: full (the default) keeps need 1
    assert cell_needs([new], stats, cfg, feedback=False)[new] == 1.0


def test_learning_effect_scales_each_need() -> None:
    """Four cells at need 1 (success 0.5, no floor, no retention): weights 1, 0.5, 0.25, 0.25 of 2 -> 4, 2, 1, 1 of
    8 slots; a cell without a weight keeps its need."""
    cfg = DesignerConfig(floor=0.0, retention=0.0, min_tasks=0, prior=0.0, min_group=1)
    stats = {c: CellStats(n_tasks=2, n_attempts=4, n_correct=2) for c in CELLS}
    effect = {L1: 1.0, L2: 0.5, L3: 0.25, L4: 0.25}
    assert shares(CELLS, stats, 8, cfg, effect=effect) == {L1: 4.0, L2: 2.0, L3: 1.0, L4: 1.0}
    assert allocate(CELLS, stats, 8, cfg, effect=effect) == {L1: 4, L2: 2, L3: 1, L4: 1}
    # L1 at 0.5, the rest unweighted: shares 8/7 and 16/7 each; systematic rounding at offset 0.5 -> 1, 2, 3, 2
    assert allocate(CELLS, stats, 8, cfg, effect={L1: 0.5}) == {L1: 1, L2: 2, L3: 3, L4: 2}
    # the exploration floor still reaches a cell whose training never moved the learner
    floored = shares(CELLS, stats, 8, cfg.model_copy(update={"floor": 0.5}), effect={L1: 1.0, L2: 1.0, L3: 1.0, L4: 0.0})
    assert floored[L4] == pytest.approx(1.0) and sum(floored.values()) == pytest.approx(8.0)
