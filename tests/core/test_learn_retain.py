"""Learn / Retain on hand-computed cases."""

import pytest

from synco.core.learn_retain import SOLVED_THRESHOLD, learn_retain


def test_split_by_the_base_and_counted_by_the_trained_model():
    # base solves b, c (c on a tie: 0.5 counts as solved); trained solves a, b and d
    base = {"a": 0.0, "b": 1.0, "c": 0.5, "d": 0.25}
    trained = {"a": 1.0, "b": 1.0, "c": 0.0, "d": 0.75}
    r = learn_retain("x", base, trained)
    assert (r.learn.n, r.retain.n) == (2, 2)  # a, d | b, c
    assert (r.learn_gain, r.retain_loss, r.extra_solved) == (2, 1, 1)
    assert r.learn.base_accuracy == pytest.approx(0.125) and r.learn.trained_accuracy == pytest.approx(0.875)
    assert r.retain.base_accuracy == pytest.approx(0.75) and r.retain.trained_accuracy == pytest.approx(0.5)
    assert r.delta == pytest.approx(2.75 / 4 - 1.75 / 4)
    assert SOLVED_THRESHOLD == 0.5


def test_ids_on_one_side_only_are_dropped_and_counted():
    r = learn_retain("x", {"a": 1.0, "b": 0.0}, {"a": 0.0, "c": 1.0})
    assert r.n == 1 and (r.dropped_base_only, r.dropped_trained_only) == (1, 1)
    assert (r.learn.n, r.retain.n, r.retain_loss, r.extra_solved) == (0, 1, 1, -1)
    assert r.learn.base_accuracy is None
