"""synco.run.summary.family_rows: held-out per family (levels, transfer, Learn / Retain) on hand-computed numbers."""

from __future__ import annotations

from synco.run.summary import family_rows


def test_family_rows_split_levels_transfer_and_items() -> None:
    before = {"a/L0": 0.5, "a/L1": 0.0, "a/default": 0.0, "b/L0": 1.0}
    after = {"a/L0": 1.0, "a/L1": 0.5, "a/default": 1.0, "b/L0": 0.0}
    before_items = {"0:a/L0": 1.0, "1:a/L0": 0.0, "2:a/L1": 0.0, "3:a/L1": 0.0, "4:a/default": 0.0, "5:b/L0": 1.0}
    after_items = {"0:a/L0": 1.0, "1:a/L0": 1.0, "2:a/L1": 1.0, "3:a/L1": 0.0, "4:a/default": 1.0, "5:b/L0": 0.0}
    rows = family_rows(before, after, before_items, after_items)
    assert rows["a"] == {"levels_before": 0.25, "levels_after": 0.75, "transfer_before": 0.0, "transfer_after": 1.0,
                         "learn": "3/4", "retain_lost": "0/1"}
    assert rows["b"]["learn"] == "0/0" and rows["b"]["retain_lost"] == "1/1" and rows["b"]["transfer_before"] is None


def test_groups_without_a_family_give_no_rows() -> None:
    assert family_rows({"L1": 0.5}, {"L1": 0.6}, {"0:L1": 1.0}, {"0:L1": 1.0}) == {}
