"""synco.domains.tau2.factors: EvoSyn's factors of hand-picked airline gold trajectories, and the pure pieces."""

from __future__ import annotations

import pytest

from synco.domains.tau2.factors import (
    BUILTIN_FACTORS,
    argument_numbers,
    computation,
    family,
    numbers_in,
    tau2_factor_defs,
)
from synco.domains.tau2.payload import Tau2Payload
from synco.domains.tau2.tasks import Tau2Action, card_of_task
from synco.evosyn.space import factor_subject

pytest.importorskip("tau2")

from tau2.domains.airline.environment import get_tasks  # noqa: E402

from synco.domains.tau2.verify import tool_kinds  # noqa: E402

AIRLINE = {t.id: t for t in get_tasks(None)}
KINDS = tool_kinds("airline")
DEFS = tau2_factor_defs(KINDS, "airline")


def factors(task_id: str) -> dict[str, str | None]:
    subject = factor_subject(card_of_task(AIRLINE[task_id]), Tau2Payload)
    return {d.name: d.value(subject) for d in DEFS}


@pytest.mark.parametrize(("task_id", "expected"), [
    # a refusal: no call at all
    ("0", {"pattern": "none", "num_write": "0", "num_read": "0", "family": "none", "computation": "no",
           "distinct_tools": "0"}),
    # get_user_details only
    ("5", {"pattern": "r", "num_write": "0", "num_read": "1", "family": "none", "computation": "no",
           "distinct_tools": "1"}),
    # 1 reservation read + 2 searches + calculate (generic: not counted as a read) + a baggage update
    ("12", {"pattern": "rw", "num_write": "1", "num_read": "3-4", "family": "baggage", "computation": "yes",
            "distinct_tools": "4+"}),
    # cancel_reservation(Z7GOZK) alone: nothing to work out
    ("19", {"pattern": "w", "num_write": "1", "num_read": "0", "family": "cancel", "computation": "no",
            "distinct_tools": "1"}),
    # cancel then book, paying 1786 on a card (the fare total less the certificate and gift cards): derived
    ("14", {"pattern": "w", "num_write": "2", "num_read": "0", "family": "mixed", "computation": "yes",
            "distinct_tools": "2"}),
    # 3 reads then send_certificate(amount=50): $50 per passenger, stated nowhere on the user side
    ("2", {"pattern": "rw", "num_write": "1", "num_read": "3-4", "family": "compensation", "computation": "yes",
           "distinct_tools": "3"}),
])
def test_airline_factors(task_id: str, expected: dict[str, str]) -> None:
    assert factors(task_id) == expected


def test_builtin_is_pattern_first() -> None:
    assert BUILTIN_FACTORS == ("pattern",)
    assert [d.name for d in DEFS][0] == "pattern"
    family_def = next(d for d in DEFS if d.name == "family")
    assert family_def.buckets == ("baggage", "book", "cancel", "change_flights", "compensation", "passengers",
                                  "mixed", "none")


def test_a_subject_that_does_not_parse_has_no_factors() -> None:
    assert all(d.value("not json") is None for d in DEFS)
    bad_tool = '{"scenario":"Mark task_1 done.","actions":"[{\\"name\\":\\"teleport\\",\\"arguments\\":{}}]"}'
    assert all(d.value(bad_tool) is None for d in DEFS)


def test_computation_pieces() -> None:
    kinds = {"send_certificate": "write", "get_user_details": "read", "calculate": "generic"}
    pay = Tau2Action(name="send_certificate", arguments={"user_id": "u", "amount": 150})
    assert computation("I flew with 3 people.", [pay], kinds) == "yes"
    assert computation("I want $150 back.", [pay], kinds) == "no"                      # copied from the user
    look = Tau2Action(name="get_user_details", arguments={"user_id": "u"})
    assert computation("", [look, pay], kinds, observations=['{"balance": 150}']) == "no"   # copied from a read
    assert computation("", [look, pay], kinds, observations=['{"balance": 100}']) == "yes"
    flag = Tau2Action(name="send_certificate", arguments={"user_id": "u", "amount": 1})
    assert computation("", [flag], kinds) == "no"                                       # 0 and 1 do not count
    assert computation("", [Tau2Action(name="calculate", arguments={"expression": "1+1"})], kinds) == "yes"
    assert numbers_in("total is $1,628 or 2.5") == {1628.0, 2.5}
    assert argument_numbers({"a": [1, {"b": 2.5}], "c": True, "d": "3"}) == [1.0, 2.5]


def test_family_pieces() -> None:
    kinds = {"cancel_reservation": "write", "book_reservation": "write", "get_user_details": "read"}
    fams = {"cancel_reservation": "cancel", "book_reservation": "book"}
    cancel = Tau2Action(name="cancel_reservation", arguments={})
    book = Tau2Action(name="book_reservation", arguments={})
    assert family([cancel, cancel], kinds, fams) == "cancel"
    assert family([cancel, book], kinds, fams) == "mixed"
    assert family([Tau2Action(name="get_user_details", arguments={})], kinds, fams) == "none"
    assert family([cancel], kinds, {}) == "cancel_reservation"                         # no table: the tool's name
