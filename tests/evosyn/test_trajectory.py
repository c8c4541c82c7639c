"""EvoSyn's trajectory factors and structural metrics, on gold action lists computed by hand."""

from __future__ import annotations

import json
import math

import pytest

from synco.core.episodes import ToolCall
from synco.evosyn.trajectory import (
    COUNT_BUCKETS,
    DISTINCT_BUCKETS,
    PATTERN_BUCKETS,
    DistinctSequences,
    bucket,
    collapse_runs,
    composition,
    contrastive_support,
    distinct_action_sequences,
    distinct_tools,
    first_wrong_call,
    interaction_coverage,
    kind_sequence,
    num_read,
    num_write,
    pattern,
    tool_coverage,
    trajectory_diversity,
    trajectory_factors,
    transitions,
)

KINDS = {"find_user": "read", "list_orders": "read", "get_order": "read",
         "cancel_order": "write", "refund": "write", "update_address": "write"}
R, W = "find_user", "cancel_order"


def T(*names: str) -> list[ToolCall]:
    """A trajectory of argument-less calls."""
    return [ToolCall(name=n) for n in names]


def test_bucket_reads_exact_range_and_open_labels() -> None:
    assert [bucket(n, COUNT_BUCKETS) for n in range(8)] == ["0", "1", "2", "3-4", "3-4", "5+", "5+", "5+"]
    assert [bucket(n, DISTINCT_BUCKETS) for n in (0, 3, 4, 9)] == ["0", "3", "4+", "4+"]
    with pytest.raises(ValueError, match=r"n=7 is in none of the buckets \['0', '1'\]"):
        bucket(7, ("0", "1"))
    with pytest.raises(ValueError, match="n=-1"):
        bucket(-1, COUNT_BUCKETS)


def test_kind_sequence_and_an_unknown_tool_named() -> None:
    assert kind_sequence(T("find_user", "list_orders", "cancel_order", "get_order"), KINDS) == "rrwr"
    assert kind_sequence([], KINDS) == ""
    with pytest.raises(ValueError, match=r"calls\[1\].name='fly_away'"):
        kind_sequence(T("find_user", "fly_away"), KINDS)


def test_kind_sequence_leaves_out_tools_that_neither_read_nor_write() -> None:
    # τ²'s mock domain tags transfer_to_human_agents "generic": a gold task ending in it once crashed the step
    kinds = {**KINDS, "transfer_to_human_agents": "generic", "think": "think"}
    assert kind_sequence(T("find_user", "think", "cancel_order", "transfer_to_human_agents"), kinds) == "rw"
    assert pattern(T("transfer_to_human_agents"), kinds) == "none"


def test_num_write_and_num_read_count_by_kind() -> None:
    calls = T("find_user", "list_orders", "cancel_order", "refund", "refund")  # 2 reads, 3 writes
    assert num_write(calls, KINDS) == "3-4" and num_read(calls, KINDS) == "2"
    assert num_write(T(R), KINDS) == "0" and num_read(T(R), KINDS) == "1"
    assert num_write(T(*[W] * 5), KINDS) == "5+" and num_read(T(*[W] * 5), KINDS) == "0"


def test_pattern_collapses_runs_and_caps_at_three() -> None:
    assert collapse_runs("rrwwr") == "rwr" and collapse_runs("") == ""
    cases = {(): "none", (R,): "r", (W, W): "w", (R, R, W, W, W): "rw", (W, R): "wr",
             (R, R, W, W, R, R): "rwr", (W, R, W): "wrw", (R, W, R, W): "rw+", (W, R, W, R, W): "wr+"}
    for names, expected in cases.items():
        assert pattern(T(*names), KINDS) == expected, names
    assert set(cases.values()) == set(PATTERN_BUCKETS)  # every bucket reachable, no other value


def test_distinct_tools_and_all_factors() -> None:
    assert distinct_tools([]) == "0" and distinct_tools(T(R, R)) == "1"
    assert distinct_tools(T("find_user", "list_orders", "get_order", "cancel_order", "refund")) == "4+"
    calls = T("find_user", "list_orders", "cancel_order", "find_user")
    assert trajectory_factors(calls, KINDS) == {"num_write": "1", "num_read": "3-4", "pattern": "rwr",
                                                "distinct_tools": "3"}


def test_transitions_start_from_the_start_marker() -> None:
    assert transitions(T("a", "b", "a")) == [("^", "a"), ("a", "b"), ("b", "a")]
    assert transitions([]) == []


def test_interaction_coverage_counts_transitions_over_n_times_n_plus_1() -> None:
    trajs = [T("a", "b"), T("a", "b", "c"), T("b"), T("x", "a")]
    # seen within {a,b,c}: (^,a) (a,b) (b,c) (^,b); (^,x) and (x,a) name a tool outside the inventory
    # possible: 3 tools * (3 + 1) = 12 -> 4/12
    assert interaction_coverage(trajs, ["a", "b", "c"]) == pytest.approx(4 / 12)
    assert interaction_coverage([T("a")], ["a", "b"]) == pytest.approx(1 / 6)
    assert interaction_coverage(trajs, []) == 0.0 and interaction_coverage([], ["a"]) == 0.0
    assert tool_coverage(trajs, ["a", "b", "c"]) == 1.0 and tool_coverage([T("a")], ["a", "b"]) == 0.5
    assert tool_coverage(trajs, []) == 0.0


def test_trajectory_diversity_is_normalised_entropy_over_possible_patterns() -> None:
    assert trajectory_diversity(["r", "rw", "r", "rw"], possible=("r", "rw")) == pytest.approx(1.0)
    # the same two patterns among the nine possible: ln 2 / ln 9 = 0.3155
    assert trajectory_diversity(["r", "rw", "r", "rw"]) == pytest.approx(math.log(2) / math.log(9))
    # 3:1 over four possible: -(3/4 ln 3/4 + 1/4 ln 1/4) / ln 4 = 0.4056
    assert trajectory_diversity(["r", "r", "r", "w"], possible=("r", "w", "rw", "wr")) == pytest.approx(
        -(0.75 * math.log(0.75) + 0.25 * math.log(0.25)) / math.log(4))
    assert trajectory_diversity(["r", "r", "r"]) == 0.0 and trajectory_diversity([]) == 0.0
    assert trajectory_diversity(["r", "zz"]) == 0.0  # a pattern outside the possible ones is not counted
    assert trajectory_diversity(["r"], possible=("r",)) == 0.0


def test_distinct_action_sequences_ignore_arguments() -> None:
    trajs = [[ToolCall(name="a", arguments={"x": 1}), ToolCall(name="b")],
             [ToolCall(name="a", arguments={"x": 2}), ToolCall(name="b")], T("b", "a"), T("a")]
    assert distinct_action_sequences(trajs) == 3 and distinct_action_sequences([]) == 0


def test_contrastive_support_counts_compositions_seen_in_two_orders() -> None:
    assert composition(T("b", "a", "b")) == (("a", 1), ("b", 2))
    trajs = [T("a", "b"), T("b", "a"),  # {a,b}: two orders
             T("a", "b", "c"), T("a", "c", "b"),  # {a,b,c}: two orders
             T("a", "a"), T("c"),  # one tool name: only one order exists, not counted
             T("b", "d"), T("b", "d"),  # {b,d}: one order, twice
             T("a", "a", "b"), T("a", "b", "a")]  # {a:2,b}: two orders (not the same composition as {a,b})
    assert contrastive_support(trajs) == pytest.approx(3 / 4)
    assert contrastive_support([T("a", "a"), T("c")]) == 0.0 and contrastive_support([]) == 0.0


def test_distinct_sequences_accumulate_and_survive_json() -> None:
    tracker = DistinctSequences()
    assert tracker.update([T("a", "b"), T("a", "b")]) == 1 and len(tracker) == 1
    assert tracker.update([T("a", "b"), T("b")]) == 1 and len(tracker) == 2
    assert tracker.update([]) == 0
    text = tracker.to_json()
    assert json.loads(text) == {"sequences": [["a", "b"], ["b"]]}
    back = DistinctSequences.from_json(text)
    assert len(back) == 2 and back.to_json() == text
    assert back.update([T("b"), T("c")]) == 1  # the restored state knows what it saw
    with pytest.raises(ValueError, match=r"sequences\[0\]=\['a', 1\]"):
        DistinctSequences.from_json('{"sequences": [["a", 1]]}')
    with pytest.raises(ValueError, match="sequences: expected a list"):
        DistinctSequences.from_json("[]")


def test_first_wrong_call_names_the_position_and_what_went_wrong() -> None:
    gold = [ToolCall(name="find_user", arguments={"name": "bob"}),
            ToolCall(name="list_orders", arguments={"user": "u3"}),
            ToolCall(name="cancel_order", arguments={"order": "o12"})]
    assert first_wrong_call(list(gold), gold) is None
    assert first_wrong_call([gold[0], ToolCall(name="get_order", arguments={"order": "o12"})], gold) == (
        1, "wrong_tool:list_orders")
    assert first_wrong_call([gold[0], ToolCall(name="list_orders", arguments={"user": "u4"}), gold[2]], gold) == (
        1, "wrong_arguments:list_orders")
    assert first_wrong_call(gold[:1], gold) == (1, "missing_call:list_orders")
    assert first_wrong_call([*gold, ToolCall(name="refund")], gold) == (3, "extra_call:refund")
    assert first_wrong_call([], gold) == (0, "missing_call:find_user")
    assert first_wrong_call([], []) is None
    # a call turn that did not parse (None) is wrong where it stands, also past the gold list
    assert first_wrong_call([gold[0], None, gold[2]], gold) == (1, "malformed_call:list_orders")
    assert first_wrong_call([*gold, None], gold) == (3, "extra_call:?")
