"""synco.domains.tools.tools and .syntax: the tools on hand-checked records, the policy, and the text formats."""

from __future__ import annotations

import pytest

from synco.core.episodes import ToolCall
from synco.domains.tools import TOOL_KINDS, TOOLS
from synco.domains.tools.db import build_db
from synco.domains.tools.syntax import (
    ActionError,
    TurnError,
    format_actions,
    format_outputs,
    make_call,
    parse_actions,
    parse_outputs,
    parse_turn,
)
from synco.domains.tools.tools import call_tool


def run(db, name: str, *args: object):  # noqa: ANN001, ANN201
    return call_tool(db, ToolCall(name=name, arguments=dict(zip([p.name for p in TOOLS[name].params], args))))


def test_every_tool_is_tagged_and_the_world_has_reads_and_writes() -> None:
    assert TOOL_KINDS == {"find_user": "read", "find_product": "read", "list_orders": "read", "get_order": "read",
                          "place_order": "write", "cancel_order": "write", "ship_order": "write", "transfer": "write"}


def test_reads_answer_with_short_hand_checked_results_and_change_nothing() -> None:
    db = build_db()
    before = db.state_hash()
    assert run(db, "find_user", "bob").text == "u2,24"
    assert run(db, "find_user", "BOB").text == "u2,24"  # names are looked up case-insensitively
    assert run(db, "find_product", "lamp").text == "p1,26,6"
    assert run(db, "list_orders", "u2").text == "o22:shipped,o29:shipped,o58:pending,o61:pending"
    assert run(db, "list_orders", "u3").text == "none"
    assert run(db, "get_order", "o58").text == "u2,p11,3,36,pending"
    assert db.state_hash() == before


def test_place_order_takes_stock_and_money_and_cancel_gives_them_back() -> None:
    db = build_db()
    before = db.state_hash()
    r = run(db, "place_order", "u3", "p1", 2)  # cal (164) buys 2 lamps (26 each, stock 6)
    assert r.ok and r.text == "o65"
    assert db.users["u3"].balance == 164 - 52 and db.products["p1"].stock == 4
    assert run(db, "get_order", "o65").text == "u3,p1,2,52,pending"
    assert run(db, "cancel_order", "o65").text == "ok"
    assert db.users["u3"].balance == 164 and db.products["p1"].stock == 6
    assert run(db, "get_order", "o65").text == "u3,p1,2,0,cancelled"
    assert db.state_hash() != before  # a cancelled order stays on record: not the initial state


@pytest.mark.parametrize(("name", "args", "detail"), [
    ("place_order", ("u3", "p2", 1), "stock"),          # mug: stock 0
    ("place_order", ("u2", "p1", 1), "balance"),        # bob has 24 < 26
    ("place_order", ("u1", "p4", 1), "pending_limit"),  # ann already holds 3 pending orders
    ("place_order", ("u3", "p4", 6), "max_qty"),
    ("cancel_order", ("o22",), "not_pending"),          # shipped
    ("ship_order", ("o22",), "not_pending"),
    ("transfer", ("u2", "u2", 5), "same_user"),
    ("transfer", ("u2", "u3", 25), "balance"),
])
def test_a_policy_violation_is_an_error_and_changes_nothing(name: str, args: tuple, detail: str) -> None:
    db = build_db()
    before = db.state_hash()
    r = run(db, name, *args)
    assert (r.ok, r.code, r.detail) == (False, "policy_violation", detail)
    assert db.state_hash() == before


def test_bad_calls_are_codes_not_exceptions() -> None:
    db = build_db()
    assert run(db, "find_user", "zed").code == "not_found"
    assert run(db, "get_order", "o999").code == "not_found"
    assert run(db, "transfer", "u2", "u3", "five").code == "bad_arguments"  # not an integer
    assert run(db, "transfer", "u2", "u3", 1.0).code == "bad_arguments"
    assert run(db, "transfer", "u2", "u3", 0).code == "bad_arguments"
    assert run(db, "transfer", "u2", "u3", True).code == "bad_arguments"
    assert run(db, "list_orders", "bob").code == "bad_arguments"  # not an id
    assert call_tool(db, ToolCall(name="find_user", arguments={})).code == "bad_arguments"
    assert call_tool(db, ToolCall(name="find_user", arguments={"name": "bob", "x": 1})).code == "bad_arguments"
    assert call_tool(db, ToolCall(name="drop_table", arguments={})).code == "unknown_tool"


# ----------------------------------------------------------------- syntax


def test_actions_round_trip_through_their_text() -> None:
    text = "find_user(bob);list_orders(u2);cancel_order(o58);place_order(u2,p4,2)"
    calls = parse_actions(text)
    assert calls[3] == ToolCall(name="place_order", arguments={"user_id": "u2", "product_id": "p4", "qty": 2})
    assert format_actions(calls) == text
    assert parse_actions(" find_user( bob ) ;list_orders(u2);") == calls[:2]  # spaces and a trailing ; tolerated
    assert make_call("transfer", "u2", "u3", 5).arguments == {"from_id": "u2", "to_id": "u3", "amount": 5}


@pytest.mark.parametrize(("text", "code"), [
    ("", "bad_actions"),
    ("find_user bob", "bad_actions"),
    ("find_user(bob);;list_orders(u2)", "bad_actions"),
    ("find_user(bob);done()", "bad_actions"),
    ("drop_table(x)", "unknown_tool"),
    ("find_user(bob,ann)", "bad_arguments"),
    ("place_order(u2,p4,two)", "bad_arguments"),
    ("find_user(" + "b" * 17 + ")", "bad_arguments"),
    (";".join(["find_user(bob)"] * 13), "too_many_actions"),
    ("find_user(bob);" * 200, "too_many_actions"),
    ("x" * 10_000, "bad_actions"),
    ("find_user(b\u00f6b)", "bad_arguments"),
])
def test_bad_action_lists_raise_with_a_reason_code(text: str, code: str) -> None:
    with pytest.raises(ActionError) as err:
        parse_actions(text)
    assert err.value.code == code and isinstance(err.value, ValueError)


def test_outputs_format_and_parse() -> None:
    assert parse_outputs("none") == () and parse_outputs("NONE") == () and format_outputs([]) == "none"
    assert parse_outputs("12, Lamp") == ("12", "lamp") and format_outputs(["012", "lamp"]) == "12,lamp"
    for bad in ("1,2,3,4,5", "a b", "x" * 200, "\u00e9"):
        with pytest.raises(ActionError, match="bad_outputs"):
            parse_outputs(bad)


@pytest.mark.parametrize(("text", "call"), [
    ("find_user(bob)", ToolCall(name="find_user", arguments={"name": "bob"})),
    ("  place_order(u2,p4,2)\n", ToolCall(name="place_order", arguments={"user_id": "u2", "product_id": "p4", "qty": 2})),
    ("done()", ToolCall(name="done", arguments={"values": []})),
    ("done(none)", ToolCall(name="done", arguments={"values": []})),
    ("done(012,Lamp)", ToolCall(name="done", arguments={"values": ["12", "lamp"]})),
    ('I will look. {"name": "find_user", "arguments": {"name": "bob"}} ok',
     ToolCall(name="find_user", arguments={"name": "bob"})),
    ('{"name": "transfer", "arguments": {"from_id": "u2", "to_id": "u3", "amount": 5}}',
     ToolCall(name="transfer", arguments={"from_id": "u2", "to_id": "u3", "amount": 5})),
    ('{"name": "transfer", "arguments": ["u2", "u3", "5"]}',
     ToolCall(name="transfer", arguments={"from_id": "u2", "to_id": "u3", "amount": 5})),
    ('{"name": "find_user", "arguments": "{\\"name\\": \\"bob\\"}"}', ToolCall(name="find_user", arguments={"name": "bob"})),
    ('{"name": "done", "arguments": {"outputs": [12]}}', ToolCall(name="done", arguments={"values": ["12"]})),
])
def test_agent_turns_parse_in_both_syntaxes(text: str, call: ToolCall) -> None:
    assert parse_turn(text).call == call


@pytest.mark.parametrize(("text", "code"), [
    ("", "bad_call"),
    ("hello there", "bad_call"),
    ("find_user(bob)find_user(ann)", "multiple_calls"),
    ("find_user(bob)\nlist_orders(u2)", "multiple_calls"),
    ("find_user(bob) please", "bad_call"),
    ("drop_table()", "unknown_tool"),
    ("find_user()", "bad_arguments"),
    ("place_order(u2,p4,-1)", "bad_arguments"),
    ("find_user(" + "b" * 10_000 + ")", "bad_call"),
    ("find_user(" + "b" * 300 + ")", "bad_call"),
    ("find_user(\u00df\u00f6b)", "bad_arguments"),
    ("\u202efind_user(bob)", "bad_call"),
    ("done(1,2,3,4,5)", "bad_arguments"),
    ('{"name": "find_user", "arguments": {"name": {"name": {"name": "bob"}}}}', "bad_arguments"),
    ('{"name": "find_user", "arguments": {"name": "bob"', "bad_call"),
    ('{"a": ' * 250 + "1" + "}" * 250, "bad_call"),
    ("[" * 550 + "{", "bad_call"),
    ('{"name": "find_user", "arguments": 5}', "bad_arguments"),
    ('{"name": "eval", "arguments": {}}', "unknown_tool"),
    ('{"name": "transfer", "arguments": {"from_id": "u2", "to_id": "u3", "amount": 1.5}}', "bad_arguments"),
    ('{"name": "done", "arguments": {"outputs": [[1]]}}', "bad_arguments"),
])
def test_hostile_turns_are_turn_errors_with_a_code(text: str, code: str) -> None:
    with pytest.raises(TurnError) as err:
        parse_turn(text)
    assert err.value.code == code
