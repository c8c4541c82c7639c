"""synco.domains.tau2.verify: τ²'s own tasks replay and pass; corrupted copies fail with the right reason code."""

from __future__ import annotations

import json
from typing import Any

import pytest

from synco.core.records import CardRejected, TaskCard
from synco.domains.tau2.tasks import card_of_task
from synco.domains.tau2.verify import airline_policy, id_values, verify_card, verify_task

pytest.importorskip("tau2")

from tau2.domains.airline.environment import get_environment  # noqa: E402
from tau2.domains.airline.environment import get_tasks as airline_tasks  # noqa: E402
from tau2.domains.mock.environment import get_tasks as mock_tasks  # noqa: E402
from tau2.evaluator.evaluator_env import EnvironmentEvaluator  # noqa: E402

AIRLINE = {t.id: t for t in airline_tasks(None)}
MOCK = mock_tasks(None)


@pytest.fixture(scope="module")
def airline_verdicts() -> dict[str, Any]:
    """Every airline task verified once (about 20 s: a fresh database per task that writes)."""
    out: dict[str, Any] = {}
    for tid, task in AIRLINE.items():
        try:
            out[tid] = verify_task("airline", task)
        except CardRejected as err:
            out[tid] = err
    return out


def test_every_airline_task_is_accepted(airline_verdicts: dict[str, Any]) -> None:
    rejected = {tid: str(v) for tid, v in airline_verdicts.items() if isinstance(v, CardRejected)}
    assert rejected == {}
    assert len(airline_verdicts) == 50


def test_gold_hash_is_tau2s(airline_verdicts: dict[str, Any]) -> None:
    """The verdict's final hash is the one τ²'s evaluator computes for the gold replay (task 7: five actions)."""
    task = AIRLINE["7"]
    env = get_environment()
    for a in task.evaluation_criteria.actions:
        env.make_tool_call(a.name, requestor=a.requestor, **a.arguments)
    assert airline_verdicts["7"].final_hash == env.get_db_hash()
    assert airline_verdicts["7"].reference == ("1628",)
    assert len(airline_verdicts["7"].observations) == 5
    assert EnvironmentEvaluator is not None  # τ²'s evaluator imports without litellm


def test_every_mock_task_is_accepted() -> None:
    """All 9 mock tasks, with their initial states (message history, initialization data and actions)."""
    verdicts = [verify_task("mock", t) for t in MOCK]
    assert len(verdicts) == 9
    by_id = {t.id: v for t, v in zip(MOCK, verdicts)}
    assert by_id["create_task_1_nl_eval"].observations == ()


def _card(task_id: str = "12", **changes: str) -> TaskCard:
    """The card of airline task ``task_id`` with some fields replaced."""
    return card_of_task(AIRLINE[task_id]).with_fields(**changes)


def _with_action(task_id: str, index: int, **fields: Any) -> TaskCard:
    """Task ``task_id``'s card with action ``index`` changed (``arguments`` merged)."""
    actions = json.loads(_card(task_id).payload.solution_text())
    args = fields.pop("arguments", None)
    actions[index].update(fields)
    if args is not None:
        actions[index]["arguments"] = {**actions[index]["arguments"], **args}
    return _card(task_id, solution=json.dumps(actions))


def _told(card: TaskCard, text: str) -> TaskCard:
    """``card`` with ``text`` added to what the user knows (so an id in it is grounded)."""
    scenario = json.loads(card.payload.prompt_text())
    scenario["known_info"] = f"{scenario['known_info']} {text}"
    return card.with_fields(problem=json.dumps(scenario))


def test_a_card_verifies_like_its_task() -> None:
    """Task 12 (read the reservation, add two bags) as a synco card: accepted, the same hash as the task."""
    assert verify_card("airline", _card("12")).final_hash == verify_task("airline", AIRLINE["12"]).final_hash


@pytest.mark.parametrize(("card", "code", "detail"), [
    (lambda: _with_action("12", -1, name="add_bags"), "unknown_tool", "'add_bags'"),
    (lambda: _with_action("12", -1, arguments={"reservation_id": "ZZZZZZ"}), "unknown_id", "ZZZZZZ"),  # no record has it
    (lambda: _with_action("12", -1, arguments={"total_baggages": "2"}), "bad_arguments", "total_baggages='2'"),
    (lambda: _with_action("12", -1, arguments={"bags": 2}), "bad_arguments", "unknown argument 'bags'"),
    (lambda: _card("12", solution="update_reservation_baggages(...)"), "bad_actions", "not key=value"),
    (lambda: _with_action("12", -1, arguments={"total_baggages": 0, "nonfree_baggages": 0}),
     "no_state_change", "leaves the database as it was"),
    (lambda: _with_action("12", -1, arguments={"nonfree_baggages": 3}), "policy_violation", "nonfree_baggages=3"),
    (lambda: _with_action("12", -1, arguments={"payment_id": "credit_card_4421486"}),
     "ungrounded_argument", "credit_card_4421486"),
    (lambda: _told(_with_action("12", -1, arguments={"payment_id": "credit_card_4421486"}), "credit_card_4421486"),
     "policy_violation", "belongs to mia_li_3668"),
    (lambda: _with_action("12", -1, arguments={"payment_id": "gift_card_0000000"}), "unknown_id",
     "gift_card_0000000"),  # nobody's: does not exist (another user's existing card is ungrounded, above)
    (lambda: _card("12", verification_notes='{"reward_basis":["COMMUNICATE"]}'), "nothing_to_check", "COMMUNICATE"),
])
def test_corrupted_cards_are_rejected(card: Any, code: str, detail: str) -> None:
    with pytest.raises(CardRejected) as err:
        verify_card("airline", card())
    assert err.value.code == code, str(err.value)
    assert detail in str(err.value)


def test_unknown_id_is_told_from_other_failures() -> None:
    """An id stated by the user side but missing from the database is ``unknown_id`` (τ²'s "... not found"); a
    call the tool refuses otherwise is ``action_failed``."""
    ghost = _card("12", problem=json.dumps({"reason_for_call": "Add bags to reservation QQQQQQ.",
                                            "known_info": None, "unknown_info": None, "task_instructions": "x"}),
                  solution=json.dumps([{"name": "get_reservation_details", "arguments": {"reservation_id": "QQQQQQ"}}]))
    with pytest.raises(CardRejected) as err:
        verify_card("airline", ghost)
    assert err.value.code == "unknown_id" and "Reservation QQQQQQ not found" in str(err.value)
    # task 23 books three reservations in one task; a fourth is refused by the tool ("Too many reservations")
    actions = json.loads(_card("23").payload.solution_text())
    booking = next(a for a in actions if a["name"] == "book_reservation")
    with pytest.raises(CardRejected) as err:
        verify_card("airline", _card("23", solution=json.dumps(actions + [booking])))
    assert err.value.code in ("action_failed", "policy_violation")


def test_calculate_is_bounded() -> None:
    card = _card("12", solution=json.dumps([{"name": "calculate", "arguments": {"expression": "9**9**9**9"}}]),
                 final_answer='["1"]')
    with pytest.raises(CardRejected) as err:
        verify_card("airline", card)
    assert err.value.code == "bad_arguments" and "'**'" in str(err.value)


def test_no_write_only_when_required() -> None:
    reads = _card("5")  # get_user_details only: a τ² task whose check is "change nothing"
    assert verify_card("airline", reads).observations
    with pytest.raises(CardRejected) as err:
        verify_card("airline", reads, require_write=True)
    assert err.value.code == "no_write"


def test_bad_task_json() -> None:
    with pytest.raises(CardRejected) as err:
        verify_task("airline", {"id": "1", "evaluation_criteria": {}})
    assert err.value.code == "bad_task" and "user_scenario" in str(err.value)


# --------------------------------------------------------------------- the airline policy, one rule at a time


@pytest.fixture(scope="module")
def db() -> Any:
    return get_environment().tools.db


def _act(name: str, **arguments: Any) -> Any:
    from synco.domains.tau2.tasks import Tau2Action

    return Tau2Action(name=name, arguments=arguments)


def test_basic_economy_keeps_its_flights(db: Any) -> None:
    # XEHM4B is basic economy on HAT005 (2024-05-20) and HAT178 (2024-05-30)
    same = [{"flight_number": "HAT005", "date": "2024-05-20"}, {"flight_number": "HAT178", "date": "2024-05-30"}]
    assert airline_policy(db, _act("update_reservation_flights", reservation_id="XEHM4B", cabin="economy",
                                   flights=same, payment_id="credit_card_2408938")) is None
    other = [same[0], {"flight_number": "HAT178", "date": "2024-05-29"}]
    assert "basic economy" in airline_policy(db, _act("update_reservation_flights", reservation_id="XEHM4B",
                                                      cabin="basic_economy", flights=other,
                                                      payment_id="credit_card_2408938"))


def test_bags_are_only_added(db: Any) -> None:
    # 8C8K4E has 0 bags; LU15PA has 4
    assert "cannot be removed" in airline_policy(db, _act("update_reservation_baggages", reservation_id="LU15PA",
                                                          total_baggages=3, nonfree_baggages=0,
                                                          payment_id="gift_card_7397998"))


def test_certificates(db: Any) -> None:
    assert "multiple of $50" in airline_policy(db, _act("send_certificate", user_id="noah_muller_9847", amount=70))
    assert airline_policy(db, _act("send_certificate", user_id="noah_muller_9847", amount=50)) is None


def test_booking_limits(db: Any) -> None:
    five = [{"first_name": "A", "last_name": "B", "dob": "2000-01-01"}] * 6
    assert "1 to 5 passengers" in airline_policy(db, _act("book_reservation", user_id="mia_li_3668", passengers=five))


def test_cancelled_is_not_cancelled_again() -> None:
    """Task 19 cancels Z7GOZK; cancelling it a second time is a violation (the write would change the payments)."""
    actions = json.loads(_card("19").payload.solution_text())
    assert actions[-1] == {"name": "cancel_reservation", "arguments": {"reservation_id": "Z7GOZK"}}
    with pytest.raises(CardRejected) as err:
        verify_card("airline", _card("19", solution=json.dumps(actions + actions[-1:])))
    assert err.value.code == "policy_violation" and "already cancelled" in str(err.value)


def test_id_values() -> None:
    args = {"user_id": "u1", "flights": [{"flight_number": "HAT1"}], "payment_methods": [{"payment_id": "p1"}],
            "item_ids": ["i1", "i2"], "amount": 3}
    assert id_values(args) == [("user_id", "u1"), ("payment_id", "p1"), ("item_ids", "i1"), ("item_ids", "i2")]
