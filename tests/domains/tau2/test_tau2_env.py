"""synco.domains.tau2.env: τ² episodes through synco's Environment protocol, graded by τ²'s own evaluators."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from synco.core.episodes import Environment
from synco.domains.tau2.calls import format_call
from synco.domains.tau2.env import (AGENT_STOP, GREETING, MAX_OBSERVATION_CHARS, Tau2Env, UserSim, bound,
                                    guard_arguments)
from synco.domains.tau2.world import load_world

pytest.importorskip("tau2")

AIRLINE = load_world("airline")
MOCK = load_world("mock")
TELECOM = load_world("telecom")

GOLD_UNREACHABLE = {
    # gold actions are empty but the env assertion wants a completed task: replaying them cannot pass
    ("mock", "update_task_with_history_and_env_assertions", False),  # (no ticket: not run solo)
    # COMMUNICATE in the basis, but a solo agent may not send messages
    ("mock", "update_task_with_initialization_data", True),
}


class ScriptedUser:
    """A deterministic user (tests only): states its need, then agrees to everything; optionally stops at once."""

    def __init__(self, stop_after: int | None = None) -> None:
        self.calls = 0
        self.stop_after = stop_after
        self.seen: list[int] = []

    def reply(self, task, transcript: Sequence) -> str:
        self.calls += 1
        self.seen.append(len(transcript))
        if self.stop_after is not None and self.calls > self.stop_after:
            return "Thanks, bye. ###STOP###"
        return "I need help with my booking." if self.calls == 1 else "Yes, please go ahead."


def final_message(task) -> str:
    """The gold agent's last message: each required piece of information, then the stop token."""
    info = task.evaluation_criteria.communicate_info or []
    return ("To confirm: " + "; ".join(info) + ". " if info else "All done. ") + AGENT_STOP


def gold_turns(task, solo: bool) -> list[str]:
    """The gold agent's turns: each gold action as a call, then the final message (or the ``done`` call, solo)."""
    calls = [format_call(a.name, a.arguments) for a in task.evaluation_criteria.actions or []]
    return calls + [format_call("done", {}) if solo else final_message(task)]


def play(env: Tau2Env, turns: Sequence[str]) -> list:
    steps = []
    for text in turns:
        steps.append(env.step(text))
        if steps[-1].done:
            break
    return steps


@pytest.mark.parametrize("task", AIRLINE.tasks("base"), ids=lambda t: f"airline-{t.id}")
def test_gold_replay_scores_one_on_every_airline_task(task) -> None:
    env = Tau2Env(AIRLINE, task, ScriptedUser())
    steps = play(env, gold_turns(task, solo=False))
    assert steps[-1].done and env.termination == "agent_stop"
    assert all(s.role == "tool" and len(s.observation) <= MAX_OBSERVATION_CHARS for s in steps[:-1])
    grade = env.grade()
    assert grade.parts == {"DB": 1.0, "COMMUNICATE": 1.0, "stop": 1.0} and grade.reward == 1.0 and grade.correct


@pytest.mark.parametrize("solo", [False, True], ids=["user", "solo"])
def test_gold_replay_on_every_mock_task(solo: bool) -> None:
    tasks = [t for t in MOCK.tasks("base") if not solo or MOCK.solo_ok(t)]
    scores = {}
    for task in tasks:
        env = Tau2Env(MOCK, task, None if solo else ScriptedUser(), solo=solo)
        play(env, gold_turns(task, solo))
        scores[task.id] = env.grade().reward
    unreachable = {t for (d, t, s) in GOLD_UNREACHABLE if d == "mock" and s == solo}
    assert {t for t, r in scores.items() if r != 1.0} == unreachable
    assert len(scores) == (7 if solo else 9) and sum(scores.values()) == len(scores) - len(unreachable)


def test_telecom_solo_gold_replay() -> None:
    """Telecom: every task has a ticket; its gold actions are mostly the user's (the phone): a solo agent calls them."""
    tasks = TELECOM.tasks("small")
    for task in tasks:
        env = Tau2Env(TELECOM, task, solo=True)
        steps = play(env, gold_turns(task, solo=True))
        assert env.termination == "agent_stop" and not any(s.error for s in steps), task.id
        grade = env.grade()
        assert grade.reward == 1.0 and grade.parts["ENV_ASSERTION"] == 1.0, (task.id, grade.parts)
    assert any(a.requestor == "user" for t in tasks for a in t.evaluation_criteria.actions or [])


def test_env_is_an_environment_and_opens_the_conversation() -> None:
    user = ScriptedUser()
    env = Tau2Env(AIRLINE, AIRLINE.tasks("base")[0], user)
    assert isinstance(env, Environment)
    assert env.opening == "I need help with my booking." and user.seen == [1]  # the user saw τ²'s greeting
    assert env.transcript[0].content == GREETING
    step = env.step("Could you give me your user id?")
    assert step.role == "user" and step.observation == "Yes, please go ahead." and not step.done
    assert Tau2Env(MOCK, MOCK.task("create_task_1"), solo=True).opening is None


def test_user_stop_ends_and_a_missing_stop_scores_zero() -> None:
    task = AIRLINE.tasks("base")[0]
    env = Tau2Env(AIRLINE, task, ScriptedUser(stop_after=1))
    last = env.step("Hello, how may I help?")
    assert last.done and last.observation == "" and env.termination == "user_stop"
    assert env.step("more").error == "episode_over"
    # every gold action but no stop: the turn limit ends it, and τ² scores an unfinished episode 0
    env = Tau2Env(AIRLINE, task, ScriptedUser(), max_turns=len(task.evaluation_criteria.actions or []) + 1)
    calls = [format_call(a.name, a.arguments) for a in task.evaluation_criteria.actions or []]
    steps = play(env, calls + ["I have done everything."])
    assert steps[-1].done and env.termination == "max_turns"
    grade = env.grade()
    assert grade.parts["stop"] == 0.0 and grade.reward == 0.0


def _write_task():
    """An airline task whose gold actions include a write, and the index of its first write."""
    for task in AIRLINE.tasks("base"):
        actions = task.evaluation_criteria.actions or []
        writes = [i for i, a in enumerate(actions) if AIRLINE.tool_kinds[a.name] == "write"]
        if writes and any("reservation_id" in actions[i].arguments for i in writes):
            return task, next(i for i in writes if "reservation_id" in actions[i].arguments)
    raise AssertionError("no airline task with a reservation write")


def _corrupt(kind: str, name: str, arguments: dict) -> str:
    if kind == "unknown_tool":
        return format_call("delete_all_reservations", arguments)
    if kind == "missing_id":
        return format_call(name, {**arguments, "reservation_id": "ZZZZZZ"})
    if kind == "wrong_type":
        return format_call(name, {**arguments, "reservation_id": ["not", "a", "string"]})
    if kind == "unknown_argument":
        return format_call(name, {**arguments, "force": True})
    if kind == "bad_json":
        return format_call(name, arguments)[:-20]
    if kind == "giant":
        return "<tool_call>" + "x" * 1_000_000
    raise ValueError(kind)


@pytest.mark.parametrize("kind,code", [("unknown_tool", "unknown_tool"), ("missing_id", "tool_error"),
                                       ("wrong_type", "bad_arguments"), ("unknown_argument", "bad_arguments"),
                                       ("bad_json", "bad_json"), ("giant", "too_long")])
def test_corrupt_call_is_an_error_observation_and_scores_zero(kind: str, code: str) -> None:
    task, at = _write_task()
    turns = gold_turns(task, solo=False)
    action = task.evaluation_criteria.actions[at]
    turns[at] = _corrupt(kind, action.name, action.arguments)
    env = Tau2Env(AIRLINE, task, ScriptedUser())
    steps = play(env, turns)
    bad = steps[at]
    assert bad.error == code and bad.role == "tool" and bad.observation.startswith("Error") and not bad.done
    assert len(bad.observation) <= MAX_OBSERVATION_CHARS and "x" * 100 not in bad.observation
    assert env.termination == "agent_stop"
    grade = env.grade()
    assert grade.parts["DB"] == 0.0 and grade.reward == 0.0 and not grade.correct


def test_calculate_is_guarded_and_solo_messages_end_the_episode() -> None:
    env = Tau2Env(AIRLINE, AIRLINE.tasks("base")[0], ScriptedUser())
    assert env.step(format_call("calculate", {"expression": "9**9**9**9"})).error == "bad_arguments"
    ok = env.step(format_call("calculate", {"expression": "(2 + 3) * 4"}))
    assert ok.error is None and ok.observation == "20.0"
    solo = Tau2Env(MOCK, MOCK.task("create_task_1"), solo=True)
    step = solo.step("I created the task.")
    assert step.done and step.error == "solo_message" and solo.termination == "agent_error"
    assert solo.grade().reward == 0.0


def test_too_many_errors_end_the_episode() -> None:
    env = Tau2Env(AIRLINE, AIRLINE.tasks("base")[0], ScriptedUser(), max_errors=3)
    steps = play(env, ["{bad"] * 5)
    assert len(steps) == 3 and steps[-1].done and env.termination == "too_many_errors"
    assert env.grade().reward == 0.0


def test_episodes_are_isolated() -> None:
    task, at = _write_task()
    a = Tau2Env(AIRLINE, task, ScriptedUser())
    b = Tau2Env(AIRLINE, task, ScriptedUser())
    pristine = AIRLINE.fresh_env().get_db_hash()
    play(a, gold_turns(task, solo=False))
    assert a.env.get_db_hash() != pristine and b.env.get_db_hash() == pristine
    assert a.grade().reward == 1.0
    play(b, [final_message(task)])  # b did nothing: its database is untouched, so it fails the DB check
    assert b.grade().parts["DB"] == 0.0


def test_guard_and_bound() -> None:
    tool = {t.name: t for t in AIRLINE.fresh_env().get_tools()}["get_user_details"]
    assert guard_arguments(tool, "get_user_details", {"user_id": "mia_li_3668"}) is None
    assert "user_id" in guard_arguments(tool, "get_user_details", {"user_id": 5})
    assert "unknown argument" in guard_arguments(tool, "get_user_details", {"user_id": "a", "x": 1})
    assert "user_id" in guard_arguments(tool, "get_user_details", {})
    assert bound("abc", 10) == "abc" and len(bound("a" * 50, 20)) == 20 and bound("a" * 50, 20).endswith("[cut]")


def test_constructor_errors() -> None:
    with pytest.raises(ValueError, match="cannot run solo"):
        Tau2Env(AIRLINE, AIRLINE.tasks("base")[0], solo=True)
    with pytest.raises(ValueError, match="needs a UserSim"):
        Tau2Env(AIRLINE, AIRLINE.tasks("base")[0])
    assert isinstance(ScriptedUser(), UserSim)
