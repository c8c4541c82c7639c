"""Every built-in domain's card is the shared header plus the domain's own payload, each field named for what it holds."""

from __future__ import annotations

import json
import random

import pytest

from synco.core.records import CARD_FIELDS, HEADER_FIELDS, WIRE_PAYLOAD_FIELDS, ProblemPayload, TaskCard, TaskPayload
from synco.domains.arith import ArithDomain
from synco.domains.arith_chat import ArithChatDomain
from synco.domains.math import MathDomain
from synco.domains.rgym.domain import RgymDomain
from synco.domains.rgym.payload import RgymPayload
from synco.domains.spec import DomainContext
from synco.domains.registry import get_domain
from synco.domains.tau2.domain import Tau2Domain
from synco.domains.tau2.payload import Tau2Payload
from synco.domains.tau2.settings import Tau2Settings
from synco.domains.tools.domain import ToolsDomain
from synco.domains.tools.payload import ToolsPayload
from synco.grading.cards import parse_task_card

BUILTIN = {"arith": ArithDomain, "arith-chat": ArithChatDomain, "math": MathDomain, "tools": ToolsDomain,
           "tau2": Tau2Domain, "rgym": RgymDomain}


def test_every_builtin_domain_is_walked() -> None:
    from synco.domains.builtins import BUILTIN_DOMAINS  # the one list of built-in domains

    assert set(BUILTIN_DOMAINS) == set(BUILTIN)


def test_a_card_holds_only_the_header_and_a_payload() -> None:
    assert set(TaskCard.model_fields) == {*HEADER_FIELDS, "notes", "payload", "factors", "extra"}


@pytest.mark.parametrize("name", sorted(BUILTIN))
def test_no_domain_stores_data_in_a_field_named_for_something_else(name: str) -> None:
    """A payload field named as a card field is that card field, and only a problem with its solution and answer has
    fields named ``problem`` and ``solution``: an instruction's gold actions are ``actions``, not a ``solution``."""
    payload = BUILTIN[name].payload_type
    assert issubclass(payload, TaskPayload) and payload.model_fields["kind"].default
    for field, card_field in payload.wire_names.items():
        assert field in payload.model_fields and card_field in WIRE_PAYLOAD_FIELDS
        if field in CARD_FIELDS:
            assert field == card_field, f"{name}: payload field {field!r} is written as card field {card_field!r}"
    for read in (payload.prompt_field, payload.solution_field, payload.answer_field):  # what generic code reads
        assert not read or read in payload.model_fields, f"{name}: {read!r} is not a field of {payload.__name__}"
    if payload is not ProblemPayload:
        assert not {"problem", "solution", "final_answer", "answer"} & set(payload.wire_names), name
        assert payload.__module__.startswith(BUILTIN[name].__module__.rsplit(".", 1)[0]), name  # the domain's package


def _round_trip(card: TaskCard, payload_type: type[TaskPayload]) -> TaskCard:
    text = json.dumps(card.wire(), separators=(",", ":"))
    parsed = parse_task_card(text, payload_type)
    assert isinstance(parsed.payload, payload_type)
    assert parsed.wire() == card.wire()  # the model-facing fields read back byte for byte
    back = TaskCard.from_json(parsed.to_json())
    assert back == parsed and type(back.payload) is payload_type
    return parsed


def test_tools_and_arith_cards_read_back_as_their_payloads() -> None:
    for domain in (ArithDomain(), ToolsDomain()):
        raw = domain.static_cards(random.Random(0), 1)[0]
        card = _round_trip(parse_task_card(raw), domain.payload_type)
        if isinstance(card.payload, ToolsPayload):
            assert card.payload.instruction == card.payload.prompt_text() and card.payload.actions == card.wire()["solution"]
            assert domain.gold_actions(card)  # the gold actions read from the payload


def test_a_tau2_card_keeps_its_criteria_in_the_payload_not_in_the_header_notes() -> None:
    domain = get_domain("tau2", DomainContext(settings=Tau2Settings(domain="mock")))
    card = _round_trip(TaskCard(**json.loads(domain.static_cards(random.Random(0), 1)[0])), Tau2Payload)
    assert isinstance(card.payload, Tau2Payload) and card.notes == ""
    assert card.payload.criteria == card.wire()["verification_notes"] and card.payload.actions.startswith("[")


def test_an_rgym_payload_is_a_config_until_the_oracle_materialises_it() -> None:
    config = '{"family":"chain_sum","config":{"max_terms":3,"min_terms":2}}'
    fields = {**{k: "x" for k in CARD_FIELDS}, "problem": config, "final_answer": "7"}
    card = _round_trip(TaskCard(**fields), RgymPayload)
    assert card.payload == RgymPayload(config=config, claim="7", sketch="x")
    done = card.model_copy(update={"payload": RgymPayload(config=config, seed=4, question="2 + 3 = ?", answer="5")})
    assert done.payload.prompt_text() == "2 + 3 = ?" and done.payload.claimed_answer() == "5"
    assert json.loads(done.wire()["solution"]) == {**json.loads(config), "seed": 4}
    assert _round_trip(done, RgymPayload).payload == done.payload


# what generic code reads of each payload (the verifier, novelty, rounds, exports, the factor space), by meaning:
# (what the Reasoner is asked, how the card says it is solved, the answer it claims)
READS = {
    ProblemPayload: (ProblemPayload(problem="2+3", solution="add", answer="5"), ("2+3", "add", "5")),
    ToolsPayload: (ToolsPayload(instruction="cancel o1", actions="cancel_order(o1)", outputs="none"),
                   ("cancel o1", "cancel_order(o1)", "none")),
    Tau2Payload: (Tau2Payload(scenario='{"instructions":"x"}', actions="[]", outputs='["1"]', criteria="{}"),
                  ('{"instructions":"x"}', "[]", '["1"]')),
    RgymPayload: (RgymPayload(config='{"family":"f","config":{}}', claim="7", sketch="so 7"),
                  ('{"family":"f","config":{}}', "so 7", "7")),
}


def test_generic_code_reads_a_payload_by_what_it_means_not_by_a_card_field() -> None:
    """The card has no ``problem`` / ``solution`` / ``final_answer`` / ``verification_notes`` to read as if every task
    were a math problem; every built-in payload type says what the Reasoner is asked, how the task is solved and what
    answer it claims, from its own fields (a materialised reasoning-gym item: its question and generated answer)."""
    assert not {"problem", "solution", "final_answer", "verification_notes"} & set(dir(TaskCard))
    assert {BUILTIN[name].payload_type for name in BUILTIN} == set(READS)
    for kind, (payload, (prompt, solution, claim)) in READS.items():
        assert (payload.prompt_text(), payload.solution_text(), payload.claimed_answer()) == (prompt, solution, claim)
    assert READS[ProblemPayload][0].factor_subject() == "2+3"  # a problem's factors read the problem
    assert READS[ToolsPayload][0].factor_subject() == "cancel o1\ncancel_order(o1)"  # an instruction's: its gold actions too
    assert json.loads(READS[Tau2Payload][0].factor_subject()) == {"scenario": '{"instructions":"x"}', "actions": "[]"}
    item = RgymPayload(config='{"family":"f","config":{}}', seed=2, question="2 + 3 = ?", answer="5")
    assert (item.prompt_text(), item.solution_text(), item.claimed_answer()) == ("2 + 3 = ?", "", "5")
    assert item.factor_subject() == item.config  # factors read the config, not the question
    assert ToolsPayload.solution_is_gold and Tau2Payload.solution_is_gold and not ProblemPayload.solution_is_gold


@pytest.mark.parametrize("name", ["arith", "arith-chat", "math", "tools", "tau2"])
def test_a_domains_own_cards_are_read_through_its_payload(name: str) -> None:
    """A card each domain's own generator writes, parsed as the verifier parses it: the payload is the domain's type
    and what generic code reads of it is what the model wrote in the card fields of that meaning."""
    context = DomainContext(settings=Tau2Settings(domain="mock")) if name == "tau2" else None
    domain = get_domain(name, context) if context is not None else BUILTIN[name]()
    raw = domain.static_cards(random.Random(0), 1)[0]
    card = parse_task_card(raw, BUILTIN[name].payload_type)
    wire = json.loads(raw) if raw.lstrip().startswith("{") else card.wire()
    task = card.payload
    assert type(task) is BUILTIN[name].payload_type
    assert (task.prompt_text(), task.claimed_answer()) == (wire["problem"], wire["final_answer"])
