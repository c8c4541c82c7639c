"""The learning effect: per-cell measures, transitions, pooled gains, progress weights and Table 5's summary, on
hand-computed numbers."""

from __future__ import annotations

import math

import pytest

from synco.core.records import CARD_FIELDS, Attempt, TaskCard, TaskRecord, Verdict
from synco.evosyn.effect import (
    CellEffect,
    CellMeasure,
    Transition,
    effect_weights,
    measure,
    pooled_gain,
    progress_weight,
    standard_error,
    summarize,
    task_success,
    transition,
)
from synco.evosyn.space import FactorSpace, FactorState

SPACE = FactorSpace(factors=[FactorState(name="level", buckets=["L1", "L2"])])


def record(level: str | None, correct: list[bool], valid: bool = True, step: int = 0) -> TaskRecord:
    fields = {name: "x" for name in CARD_FIELDS}
    card = TaskCard(**fields, factors={} if level is None else {"level": level})
    return TaskRecord(step=step, slot=0, raw="r", card=card, verdict=Verdict(valid=valid),
                      rollouts=[Attempt(text="t", correct=c) for c in correct])


def test_task_success_of_valid_solved_tasks_only() -> None:
    assert task_success(record("L1", [True, False, True, True])) == 0.75
    assert task_success(record("L1", [True], valid=False)) is None
    assert task_success(record("L1", [])) is None


def test_standard_error_by_hand() -> None:
    # mean 0.5, sample variance 0.25 > binomial floor q(1-q)/2 = 0.125 (q = (3 + 1) / (6 + 2) = 0.5): sqrt(0.25 / 3)
    assert standard_error([1.0, 0.5, 0.0], 2) == pytest.approx(math.sqrt(0.25 / 3))
    # two tasks that agree: the floor, q = (8 + 1) / (8 + 2) = 0.9 -> sqrt(0.09 / 4 / 2)
    assert standard_error([1.0, 1.0], 4) == pytest.approx(math.sqrt(0.0225 / 2))
    # one task: the floor alone, q = (1 + 1) / (2 + 2) = 0.5 -> sqrt(0.125)
    assert standard_error([0.5], 2) == pytest.approx(math.sqrt(0.125))
    with pytest.raises(ValueError, match="at least one"):
        standard_error([], 2)
    with pytest.raises(ValueError, match="attempts"):
        standard_error([0.5], 0)


def test_measure_by_cell() -> None:
    recs = [record("L1", [True, True]), record("L1", [True, False]), record("L2", [False, False]),
            record("L2", [True, True], valid=False), record(None, [True, True])]
    m = measure(recs, SPACE)
    assert set(m) == {"level=L1", "level=L2"}
    a, b = m["level=L1"], m["level=L2"]
    assert (a.n_tasks, a.success, a.share) == (2, 0.75, pytest.approx(2 / 3))
    assert a.se == pytest.approx(0.25)  # sample variance 0.125 > floor (2/3)(1/3)/2 = 0.111: sqrt(0.125 / 2)
    assert (b.n_tasks, b.success, b.share) == (1, 0.0, pytest.approx(1 / 3))
    assert b.se == pytest.approx(math.sqrt(0.1875 / 2))  # floor, q = 1/4


def test_transition_measures_cells_seen_in_both_periods() -> None:
    pre = {"a": CellMeasure(4, 0.25, 0.1, 0.5), "b": CellMeasure(1, 0.0, 0.3, 0.5)}
    post = {"a": CellMeasure(3, 0.5, 0.1, 0.4), "b": CellMeasure(5, 0.2, 0.1, 0.6)}
    [a] = transition(pre, post, before={"c": CellMeasure(2, 0.5, 0.1, 1.0)})
    assert (a.cell, a.gain, a.share, a.prev_share) == ("a", 0.25, 0.5, 0.0)
    assert a.gain_se == pytest.approx(math.sqrt(0.02))
    assert a.gap == 0.75 and a.delta_share == 0.5 and a.targeted
    [a] = transition(pre, post, before=None)
    assert a.delta_share is None and not a.targeted


def test_pooled_gain_and_progress_weight() -> None:
    g, se = pooled_gain([(0.2, 0.1), (0.0, 0.2)])  # weights 100 and 25
    assert g == pytest.approx(20 / 125) and se == pytest.approx(math.sqrt(1 / 125))
    assert progress_weight(0.0, 0.1, 0.25) == pytest.approx(0.625)  # P = 0.5
    assert progress_weight(0.1, 0.1, 0.0) == pytest.approx(0.8413447, abs=1e-6)  # Phi(1)
    assert progress_weight(-1.0, 0.01, 0.25) == pytest.approx(0.25)
    with pytest.raises(ValueError, match="floor"):
        progress_weight(0.0, 0.1, 1.5)
    with pytest.raises(ValueError, match="at least one"):
        pooled_gain([])


def effect(cell: str, gain: float, se: float, share: float = 0.5, prev: float | None = None) -> CellEffect:
    return CellEffect(cell=cell, pre=0.5, pre_n=4, post=0.5 + gain, post_n=4, gain=gain, gain_se=se, share=share,
                      prev_share=prev)


def line(step: int, *cells: CellEffect) -> Transition:
    return Transition(step=step, period=step, pre_steps=(0, 0), post_steps=(1, 1), cells=list(cells))


def test_effect_weights_pool_the_last_transitions() -> None:
    history = [line(1, effect("a", 0.2, 0.1)), line(2, effect("a", 0.0, 0.2), effect("b", -0.1, 0.1))]
    w = effect_weights(history, memory=1, floor=0.0)
    assert w.weights["a"] == pytest.approx(0.5)
    assert w.weights["b"] == pytest.approx(0.1586553, abs=1e-6)  # Phi(-1)
    assert w.of("never measured") == pytest.approx((0.5 + 0.1586553) / 2, abs=1e-6) == w.of(None)
    w = effect_weights(history, memory=2, floor=0.0)
    assert w.weights["a"] == pytest.approx(0.5 * (1 + math.erf(0.16 / math.sqrt(1 / 125) / math.sqrt(2))))
    assert effect_weights([], memory=3, floor=0.25).of("a") == 1.0  # nothing measured: every cell neutral
    with pytest.raises(ValueError, match="memory"):
        effect_weights(history, memory=0, floor=0.0)


def test_summarize_table5() -> None:
    rows = [effect("a", 0.1, 0.05, share=0.6, prev=0.4),  # targeted, improved, gap 0.5
            effect("b", -0.1, 0.05, share=0.2, prev=0.3),  # not targeted
            effect("c", -0.2, 0.05, share=0.2, prev=0.1),  # targeted, not improved
            effect("d", 0.3, 0.05, share=0.0, prev=None)]  # first transition: no allocation change
    s = summarize([line(1, *rows)])
    assert (s.transitions, s.cells, s.targeted, s.targeted_improved, s.targeted_rate) == (1, 4, 2, 1, 0.5)
    assert s.mean_gain == pytest.approx(0.1 / 4)
    assert s.mean_gain_weighted == pytest.approx((0.06 - 0.02 - 0.04) / 1.0)
    # d alloc: +0.2, -0.1, +0.1 -> ranks 3, 1, 2; gains 0.1, -0.1, -0.2 -> ranks 3, 2, 1: rho = 0.5
    assert s.allocation_gain_rho == pytest.approx(0.5)
    assert s.gap_allocation_rho is None  # every gap is 0.5: a constant
    empty = summarize([])
    assert empty.targeted_rate is None and empty.mean_gain is None
