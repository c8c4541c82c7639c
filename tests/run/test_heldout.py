"""Held-out scoring: per group and per item, from each item's successes."""

import pytest

from synco.domains.base import HeldoutItem
from synco.run.heldout import score_items


def test_groups_and_items_from_outcomes():
    items = [HeldoutItem("p0", "1", "L10"), HeldoutItem("p1", "2", "L2"), HeldoutItem("p2", "3", "L2")]
    s = score_items(items, [[True, False], [True, True], [False, False]])
    assert list(s.groups) == ["L2", "L10"]  # by the number in the name
    assert s.groups == {"L2": pytest.approx(0.5), "L10": pytest.approx(0.5)}
    assert s.items == {"0:L10": 0.5, "1:L2": 1.0, "2:L2": 0.0}


def test_outcomes_must_match_the_items():
    with pytest.raises(ValueError, match="2 lists for 1 held-out items"):
        score_items([HeldoutItem("p", "1", "L1")], [[True], [False]])
