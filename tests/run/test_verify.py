"""`synco verify`'s core: input lines to card texts, and verdicts as one training step's verification gives them."""

from __future__ import annotations

import json
import random

from synco.config import load_config
from synco.domains.arith import ArithDomain
from synco.run.verify import card_text, read_lines, verify_cards

DOMAIN = ArithDomain()


def test_card_text_decodes_a_json_string_line_and_keeps_everything_else() -> None:
    raw = '<think>\nfine\n</think>\n{"problem": "1+1"}'
    assert card_text(json.dumps(raw)) == raw  # a raw output with newlines, one line in the file
    assert card_text('{"problem": "1+1"}') == '{"problem": "1+1"}'  # a card object: as it stands
    assert card_text('"unterminated') == '"unterminated'  # not a JSON string: as it stands
    assert card_text('"a" "b"') == '"a" "b"'
    assert card_text("free text") == "free text"


def test_read_lines_skips_blank_lines_but_counts_them() -> None:
    assert read_lines(["a\n", "\n", "   \r\n", '"b"\r\n', "c"]) == [(1, "a"), (4, "b"), (5, "c")]
    assert read_lines([]) == []


def test_verify_cards_gives_the_steps_verdicts_in_order() -> None:
    cards = DOMAIN.static_cards(random.Random(0), 3)
    held = DOMAIN.heldout(1, seed=1)[0]
    obj = json.loads(cards[0])
    held_card = json.dumps({**obj, "problem": held.problem, "final_answer": held.answer})
    wrong = json.dumps({**json.loads(cards[1]), "final_answer": "0"})  # the oracle corrects it, softly
    lines = [(1, cards[0]), (2, "not a card"), (4, cards[0]), (5, held_card), (6, wrong), (7, cards[2])]
    out = verify_cards(load_config("arith"), lines)
    assert [v.line for v in out] == [1, 2, 4, 5, 6, 7]
    assert [v.valid for v in out] == [True, False, False, False, True, True]
    assert out[0].reasons == [] and out[0].reference == json.loads(cards[0])["final_answer"]
    assert out[0].factors["level"] == DOMAIN.level_of(obj["problem"])  # computed by the domain
    assert out[1].reasons == ["no_json"] and out[1].factors == {} and out[1].reference is None
    assert out[2].reasons == ["duplicate_in_step"]  # the file is one batch
    assert out[3].reasons == ["heldout_problem"] and out[3].reference == held.answer  # the domain's rejection
    assert out[4].reasons == ["reference_corrected"] and out[4].reference == json.loads(cards[1])["final_answer"]
    assert verify_cards(load_config("arith"), []) == []


# --------------------------------------------------------------------------- τ² task JSON lines (domain=tau2)

TAU2_TASKS = "tau2/data/tau2/domains/{}/tasks.json"


def _tau2_tasks(domain: str) -> dict[str, dict]:
    """τ²'s own task JSON objects of ``domain`` by id, read from the installed package's data."""
    import importlib.util
    from pathlib import Path

    spec = importlib.util.find_spec("tau2")
    assert spec is not None and spec.origin is not None
    path = Path(spec.origin).parent.parent / TAU2_TASKS.format(domain)
    return {t["id"]: t for t in json.loads(path.read_text())}


def test_tau2_task_object_recognises_task_lines_only() -> None:
    from synco.domains.tau2.tasks import task_object

    assert task_object('{"id": "1", "user_scenario": {}}') == {"id": "1", "user_scenario": {}}
    assert task_object('{"id": "1", "evaluation_criteria": null}') is not None
    assert task_object('{"problem": "1+1"}') is None           # a synco card
    assert task_object('{"id": "1"') is None                    # bad JSON
    assert task_object('["id", "user_scenario"]') is None


def _tau2_config(domain: str):  # noqa: ANN202
    return load_config("arith", overrides=["domain=tau2", f"tau2.domain={domain}"])


def test_the_tau2_domain_replays_its_task_lines_and_rejects_corrupted_copies() -> None:
    """τ²'s task JSON lines are the τ² domain's own format (HasNativeTasks): replayed with their initial state."""
    import pytest

    pytest.importorskip("tau2")
    tasks = _tau2_tasks("airline")
    good = tasks["19"]  # cancel_reservation(Z7GOZK)
    unknown_tool = json.loads(json.dumps(good))
    unknown_tool["evaluation_criteria"]["actions"][0]["name"] = "cancel_everything"
    ghost = json.loads(json.dumps(tasks["7"]).replace("XEHM4B", "ZZZ999"))  # the user names it too: told, not there
    stray = json.loads(json.dumps(good))
    stray["evaluation_criteria"]["actions"][0]["arguments"]["reservation_id"] = "ZZZ999"  # action only: no such id
    wrong_type = json.loads(json.dumps(tasks["12"]))
    wrong_type["evaluation_criteria"]["actions"][-1]["arguments"]["total_baggages"] = "2"
    lines = [(1, json.dumps(good)), (2, json.dumps(unknown_tool)), (3, json.dumps(ghost)), (4, json.dumps(stray)),
             (5, json.dumps(wrong_type)), (6, '{"id": "7", "user_scenario": '), (8, json.dumps(tasks["5"]))]
    out = verify_cards(_tau2_config("airline"), lines)
    assert [v.line for v in out] == [1, 2, 3, 4, 5, 6, 8]
    assert [v.valid for v in out] == [True, False, False, False, False, False, True]
    assert [v.reasons for v in out[:5]] == [[], ["unknown_tool"], ["unknown_id"], ["unknown_id"], ["bad_arguments"]]
    assert out[5].reasons and out[5].factors == {}  # not a τ² task (broken JSON): verified as a card, and refused
    assert out[0].reference == "[]" and out[0].factors["family"] == "cancel"
    assert "Reservation ZZZ999 not found" in out[2].details[0]


def test_verify_cards_routes_native_lines_and_keeps_line_order() -> None:
    """A mixed file on a τ² run (mock): τ²'s task lines replayed by the domain, the rest verified as the run's cards."""
    import pytest

    pytest.importorskip("tau2")
    card = DOMAIN.static_cards(random.Random(0), 1)[0]  # an arith card: no τ² card
    mock = _tau2_tasks("mock")
    lines = [(1, json.dumps(mock["create_task_1"])), (2, card), (3, json.dumps(mock["update_task_with_message_history"]))]
    out = verify_cards(_tau2_config("mock"), lines)
    assert [(v.line, v.valid) for v in out] == [(1, True), (2, False), (3, True)]
    assert out[0].factors["family"] == "create" and out[1].factors == {} and out[1].reasons
