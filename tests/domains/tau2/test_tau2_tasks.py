"""synco.domains.tau2.tasks: the τ² task card, its bounded parser, and the export τ²'s own loader reads."""

from __future__ import annotations

import json

import pytest

from synco.core.records import CardRejected, TaskCard
from synco.domains.tau2.tasks import (
    MAX_ACTIONS,
    MAX_TEXT_CHARS,
    card_of_task,
    parse_actions,
    parse_card,
    parse_criteria,
    parse_outputs,
    parse_scenario,
    task_json,
)

pytest.importorskip("tau2")

from tau2.data_model.tasks import Task  # noqa: E402
from tau2.domains.airline.environment import get_tasks as airline_tasks  # noqa: E402
from tau2.domains.mock.environment import get_tasks as mock_tasks  # noqa: E402

AIRLINE = airline_tasks(None)
MOCK = mock_tasks(None)


def _actions(task: Task) -> list[tuple]:
    return [(a.name, a.arguments, a.requestor, a.compare_args) for a in task.evaluation_criteria.actions or []]


@pytest.mark.parametrize(("domain", "tasks"), [("airline", AIRLINE), ("mock", MOCK)])
def test_round_trip_through_tau2_loader(domain: str, tasks: list[Task]) -> None:
    """card_of_task -> task_json -> τ²'s Task.model_validate keeps scenario, ticket, actions, information, basis."""
    assert len(tasks) == {"airline": 50, "mock": 9}[domain]
    for task in tasks:
        back = Task.model_validate(task_json(card_of_task(task), task.id, domain))
        crit, crit2 = task.evaluation_criteria, back.evaluation_criteria
        assert back.id == task.id
        assert back.user_scenario == task.user_scenario, task.id
        assert back.ticket == task.ticket
        assert _actions(back) == _actions(task), task.id
        assert crit2.communicate_info == (crit.communicate_info or [])
        assert crit2.reward_basis == crit.reward_basis
        assert crit2.env_assertions == crit.env_assertions
        assert (crit2.nl_assertions or []) == (crit.nl_assertions or [])


def test_card_fields_of_an_airline_task() -> None:
    """Airline task 7: scenario as compact JSON, actions as a JSON list, its one communicate string, τ²'s default basis."""
    task = next(t for t in AIRLINE if t.id == "7")
    card = card_of_task(task)
    scenario = json.loads(card.payload.prompt_text())
    assert set(scenario) == {"reason_for_call", "known_info", "unknown_info", "task_instructions"}
    assert scenario["known_info"] == "Your user id is 'daiki_muller_1116'."
    actions = json.loads(card.payload.solution_text())
    assert [a["name"] for a in actions] == ["get_reservation_details", "get_reservation_details",
                                            "update_reservation_flights", "cancel_reservation", "cancel_reservation"]
    assert actions[3] == {"name": "cancel_reservation", "arguments": {"reservation_id": "XEHM4B"}}
    assert json.loads(card.payload.claimed_answer()) == ["1628"]
    assert json.loads(card.wire()["verification_notes"])["reward_basis"] == ["DB", "COMMUNICATE"]
    exported = task_json(card, "x1", "airline")
    assert exported["evaluation_criteria"]["actions"][2]["action_id"] == "x1_2"
    assert exported["user_scenario"]["instructions"]["domain"] == "airline"


def test_solo_card_is_the_ticket() -> None:
    task = next(t for t in MOCK if t.id == "update_task_1")
    card = card_of_task(task, solo=True)
    assert card.payload.prompt_text() == "User needs to update the status of task_1 to completed."
    parsed = parse_card(card)
    assert parsed.scenario is None and parsed.ticket == card.payload.prompt_text()
    back = Task.model_validate(task_json(card, "s", "mock"))
    assert back.ticket == card.payload.prompt_text() and back.user_scenario.instructions == card.payload.prompt_text()
    with pytest.raises(ValueError, match="no ticket|none"):
        card_of_task(AIRLINE[0], solo=True)


def _card(**fields: str) -> TaskCard:
    base = dict(teaching_intent="t", target_reasoning_style="act", expected_reasoner_weakness="w",
                difficulty_estimate="1", problem="Mark task_1 as completed.",
                solution='[{"name":"update_task_status","arguments":{"task_id":"task_1","status":"completed"}}]',
                final_answer="[]", verification_notes="free notes", novelty_notes="n")
    return TaskCard(**{**base, **fields})


def test_free_notes_mean_the_default_basis() -> None:
    parsed = parse_card(_card())
    assert parsed.reward_basis == ("DB", "COMMUNICATE")
    assert parsed.actions[0].arguments == {"task_id": "task_1", "status": "completed"}


@pytest.mark.parametrize(("field", "value", "code", "detail"), [
    ("problem", "", "bad_scenario", "got nothing"),
    ("problem", "{not json", "bad_scenario", "not JSON"),
    ("problem", "{}", "bad_scenario", "problem.reason_for_call"),
    ("problem", '{"reason_for_call":"x","task_instructions":"y","mood":"z"}', "bad_scenario", "'mood'"),
    ("problem", '{"reason_for_call":"x"}', "bad_scenario", "problem.task_instructions"),
    ("problem", '{"reason_for_call":"' + "x" * (MAX_TEXT_CHARS + 1) + '","task_instructions":"y"}', "bad_scenario",
     "at most 2000"),
    ("solution", "cancel(XEHM4B)", "bad_actions", "not key=value"),
    ("solution", '{"name":"a"}', "bad_actions", "JSON list"),
    ("solution", '[{"name":"a b","arguments":{}}]', "bad_actions", "not a tool name"),
    ("solution", '[{"name":"a","arguments":[1]}]', "bad_actions", "must be an object"),
    ("solution", '[{"name":"a","arguments":{},"why":1}]', "bad_actions", "'why'"),
    ("solution", '[{"name":"a","arguments":{"x":' + "[" * 8 + "]" * 8 + "}}]", "bad_actions", "deeper"),
    ("solution", json.dumps([{"name": "a", "arguments": {}}] * (MAX_ACTIONS + 1)), "too_many_actions", "at most 24"),
    ("final_answer", '{"a": 1}', "bad_outputs", "list"),
    ("final_answer", '["ok", 3]', "bad_outputs", "final_answer[1]"),
    ("verification_notes", '{"reward_basis":["DB","VIBES"]}', "bad_criteria", "VIBES"),
    ("verification_notes", '{"reward_basis":[]}', "bad_criteria", "reward_basis"),
    ("verification_notes", '{"env_assertions":[{"func_name":"update_db","arguments":{}}]}', "bad_criteria",
     "assert_"),
])
def test_hostile_fields_are_rejected_with_codes(field: str, value: str, code: str, detail: str) -> None:
    with pytest.raises(CardRejected) as err:
        parse_card(_card(**{field: value}))
    assert err.value.code == code
    assert detail in str(err.value)


def test_parsers_on_their_own() -> None:
    scenario, ticket = parse_scenario('{"instructions":"hi there","persona":"terse","ticket":"T"}')
    assert scenario is not None and scenario.instructions == "hi there" and scenario.persona == "terse"
    assert ticket == "T"
    assert parse_actions("[]") == ()
    assert parse_actions('[{"name":"x","arguments":{},"requestor":"user","compare_args":[]}]')[0].compare_args == ()
    assert parse_outputs("[]") == ()
    assert parse_criteria('{"reward_basis":["DB"],"nl_assertions":["a"]}')[:2] == (("DB",), ("a",))


# ----------------------------------------------------------------- the compact syntax of a card template's slots


def test_compact_actions_parse_to_the_same_actions_as_json() -> None:
    from synco.domains.tau2.tasks import format_compact_actions, parse_actions

    compact = "create_task(user_id=user_1, title=Buy milk), update_task_status(task_id=task_1, status=completed);"
    as_json = ('[{"name":"create_task","arguments":{"user_id":"user_1","title":"Buy milk"}},'
               '{"name":"update_task_status","arguments":{"task_id":"task_1","status":"completed"}}]')
    assert parse_actions(compact) == parse_actions(as_json)
    assert format_compact_actions(parse_actions(as_json)) == \
        "create_task(user_id=user_1, title=Buy milk); update_task_status(task_id=task_1, status=completed)"
    typed = parse_actions("f(n=2, x=1.5, ok=true, none=null, id=007x)")[0].arguments
    assert typed == {"n": 2, "x": 1.5, "ok": True, "none": None, "id": "007x"}


@pytest.mark.parametrize("text", ["create_task(user_id=user_1, title=Important Meeting, tasks=[",
                                  "a(x=1) junk b()", "a(x)", "a(=1)", "just words", "a(x=1" + ")" * 3])
def test_a_bad_compact_solution_is_bad_actions(text: str) -> None:
    from synco.domains.tau2.tasks import parse_actions

    with pytest.raises(CardRejected) as err:
        parse_actions(text)
    assert err.value.code == "bad_actions"


def test_actions_that_do_not_fit_the_compact_syntax_stay_json() -> None:
    from synco.domains.tau2.tasks import Tau2Action, format_compact_actions

    assert format_compact_actions([Tau2Action(name="book", arguments={"passengers": [{"n": "a"}]})]) is None
    assert format_compact_actions([Tau2Action(name="f", arguments={"note": "a, b"})]) is None
    assert format_compact_actions([Tau2Action(name="f", arguments={"id": "12"})]) is None  # "12" would read as 12


def test_compact_outputs() -> None:
    from synco.domains.tau2.tasks import parse_outputs

    assert parse_outputs("none") == () and parse_outputs(" ") == ()
    assert parse_outputs("12; UA 101") == ("12", "UA 101") and parse_outputs('["a; b"]') == ("a; b",)
