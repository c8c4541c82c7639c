"""EvoSyn's data metrics: controllability, coverage, balance and Spearman's rho, by hand."""

from __future__ import annotations

import math

import pytest

from synco.evosyn.metrics import balance, controlled, coverage, spearman

A = (("level", "L1"),)
B = (("level", "L2"),)
C = (("level", "L3"),)
D = (("level", "L4"),)


def test_controlled_compares_every_requested_bucket_with_the_recomputed_values() -> None:
    target = (("level", "L8"), ("carries", "0"))
    assert controlled(target, {"level": "L8", "carries": "0", "zeros": "yes"})
    assert not controlled(target, {"level": "L8", "carries": "1"})
    assert not controlled(target, {"level": "L8"})  # a factor the domain could not compute is a miss
    assert controlled((), {})  # no request: nothing to miss


def test_coverage_counts_feasible_cells_hit() -> None:
    assert coverage([A, A, None, B], [A, B, C, D]) == 0.5
    assert coverage([(("level", "L9"),)], [A, B]) == 0.0  # a cell outside the feasible ones does not count
    assert coverage([], []) == 0.0


def test_balance_is_normalised_entropy() -> None:
    assert balance([A, B, C, D], [A, B, C, D]) == pytest.approx(1.0)
    assert balance([A, A, A], [A, B, C, D]) == pytest.approx(0.0)
    # two cells of four, 3:1 -> H = -(3/4 ln 3/4 + 1/4 ln 1/4) = 0.5623 nats; / ln 4 = 0.4056
    assert balance([A, A, A, B, None], [A, B, C, D]) == pytest.approx(
        -(0.75 * math.log(0.75) + 0.25 * math.log(0.25)) / math.log(4))
    assert balance([], [A, B]) == 0.0 and balance([A], [A]) == 0.0


def test_spearman_hand_values() -> None:
    assert spearman([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1.0)
    assert spearman([1, 2, 3, 4], [4, 3, 2, 1]) == pytest.approx(-1.0)
    # ranks x: 1 2 3 4, y: 1 3 2 4 -> d^2 = 0+1+1+0 = 2 -> 1 - 6*2/(4*15) = 0.8
    assert spearman([1, 2, 3, 4], [5, 9, 7, 11]) == pytest.approx(0.8)
    # ties share the mean rank: x ranks 1.5 1.5 3, y 1 2 3 -> Pearson of the ranks = 0.8660
    assert spearman([1, 1, 2], [1, 2, 3]) == pytest.approx(math.sqrt(3) / 2)
    assert spearman([1, 2], [2, 1]) is None and spearman([1, 1, 1], [1, 2, 3]) is None
    with pytest.raises(ValueError, match="differ in length"):
        spearman([1, 2, 3], [1, 2])
