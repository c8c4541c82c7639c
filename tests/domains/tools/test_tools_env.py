"""synco.domains.tools.env: episodes on a private database copy, graded by end state and stated outputs."""

from __future__ import annotations

import json
import random

import pytest

from synco.core.episodes import Environment, EnvStep
from synco.core.records import TaskCard
from synco.domains.tools import ToolsDomain
from synco.domains.tools.env import MAX_OBSERVATION_CHARS, ToolsEnv
from synco.domains.tools.syntax import format_call, format_outputs
from synco.domains.tools.tasks import FAMILY_NAMES, Task
from synco.learn.charlm import CHARSET

DOMAIN = ToolsDomain()
CANCEL = "find_user(bob);list_orders(u2);cancel_order(o58);cancel_order(o61)"  # bob's two pending orders


def card_of(task: Task, family: str = "x") -> TaskCard:
    return TaskCard(**json.loads(DOMAIN.format_card(task.instruction, task.actions, task.outputs, family)))


def env_for(instruction: str, solution: str, answer: str = "none") -> ToolsEnv:
    card = TaskCard(**json.loads(DOMAIN.format_card(instruction, solution, answer, "x")))
    return DOMAIN.environment(card, DOMAIN.oracle(card))


def play(env: ToolsEnv, turns: list[str]) -> list[EnvStep]:
    return [env.step(t) for t in turns]


def gold_episode(task: Task) -> tuple[ToolsEnv, str]:
    """The gold actions then done(outputs) on a fresh environment, and the transcript after the prompt."""
    env = DOMAIN.environment(card_of(task), format_outputs(task.outputs))
    text = ""
    for turn in [format_call(a) for a in task.actions] + [f"done({','.join(task.outputs)})"]:
        text += turn + env.step(turn).observation
    return env, text


@pytest.mark.parametrize("family", FAMILY_NAMES)
def test_every_familys_gold_replay_grades_one(family: str) -> None:
    rng = random.Random(family)
    for _ in range(20):
        task = DOMAIN.sample_task(rng, family)
        assert DOMAIN.oracle(card_of(task, family)) == format_outputs(task.outputs)
        env, _ = gold_episode(task)
        grade = env.grade()
        assert grade.reward == 1.0 and grade.correct and grade.parts == {"state": 1.0, "outputs": 1.0, "done": 1.0}


def test_the_transcript_hand_written() -> None:
    env = env_for("cancel all of bob's pending orders", CANCEL)
    assert isinstance(env, Environment)
    steps = play(env, ["find_user(bob)", "list_orders(u2)", "cancel_order(o58)", "cancel_order(o22)",
                       "cancel_order(o61)", "done()"])
    assert [s.observation for s in steps] == ["\n=u2,24\n", "\n=o22:shipped,o29:shipped,o58:pending,o61:pending\n",
                                              "\n=ok\n", "\n!policy_violation:not_pending\n", "\n=ok\n", ""]
    assert [s.error for s in steps] == [None, None, None, "policy_violation", None, None]
    assert [s.done for s in steps] == [False] * 5 + [True]
    assert steps[0].tool_call is not None and steps[0].tool_call.arguments == {"name": "bob"}
    assert env.grade().reward == 1.0  # the failed write changed nothing


def test_another_path_to_the_same_end_state_passes() -> None:
    env = env_for("cancel all of bob's pending orders", CANCEL)
    play(env, ["get_order(o61)", "cancel_order(o61)", "find_product(lamp)", "cancel_order(o58)",
               '{"name": "done", "arguments": {}}'])  # another order, extra reads, no lookup of bob (ids guessed)
    assert env.grade().reward == 1.0


@pytest.mark.parametrize("turns", [
    ["cancel_order(o58)", "done()"],                                         # one of two
    ["cancel_order(o58)", "cancel_order(o61)", "ship_order(o20)", "done()"],  # one write too many
    ["find_user(bob)", "done()"],                                            # nothing changed
])
def test_a_different_end_state_fails(turns: list[str]) -> None:
    env = env_for("cancel all of bob's pending orders", CANCEL)
    play(env, turns)
    grade = env.grade()
    assert grade.reward == 0.0 and not grade.correct and grade.parts["state"] == 0.0 and grade.parts["done"] == 1.0


def test_place_then_cancel_is_not_the_initial_state() -> None:
    env = env_for("what does the lamp cost?", "find_product(lamp)", "26")
    play(env, ["place_order(u3,p1,1)", "cancel_order(o65)", "done(26)"])  # money and stock back, but a record stays
    assert env.grade().parts == {"state": 0.0, "outputs": 1.0, "done": 1.0}


@pytest.mark.parametrize(("done", "outputs", "reward"), [
    ("done(26)", 1.0, 1.0),
    ("done(026)", 1.0, 1.0),
    ('{"name": "done", "arguments": {"outputs": [26]}}', 1.0, 1.0),
    ("done(25)", 0.0, 0.0),
    ("done()", 0.0, 0.0),
    ("done(26,6)", 0.0, 0.0),  # more values than required: no guessing by listing
])
def test_outputs_must_be_stated_in_done(done: str, outputs: float, reward: float) -> None:
    env = env_for("what does the lamp cost?", "find_product(lamp)", "26")
    play(env, ["find_product(lamp)", done])
    assert env.grade().parts["outputs"] == outputs and env.grade().reward == reward


def test_no_done_is_no_reward_even_in_the_right_state() -> None:
    env = env_for("cancel all of bob's pending orders", CANCEL)
    play(env, ["cancel_order(o58)", "cancel_order(o61)"])
    assert env.grade().parts == {"state": 1.0, "outputs": 1.0, "done": 0.0} and env.grade().reward == 0.0


HOSTILE = [
    "", "\n\n", "garbage !!! ((", "find_user(bob", "find_user(bob))", "drop_table(x)", "__import__('os')",
    "find_user(bob)find_user(ann)", "place_order(u2,p1,lots)", "place_order(u2,p1)", "transfer(u2,u3,-5)",
    "find_user(" + "a" * 10_000 + ")", "x" * 10_000, "find_user(\u0431\u043e\u0431)", "\u00e9\u00e8\u2603\U0001f600",
    '{"name": "find_user", "arguments": {"name": {"name": ["bob"]}}}', '{"name": ' * 200, "{" * 599,
    '{"name": "find_user", "arguments": {"name": "bob", "extra": 1}}', '{"name": null}', "[1, 2, 3] {}",
    "find_user(bob)\x00", "\x1b[31mfind_user(bob)",
]


def test_hostile_turns_never_raise_and_answer_with_an_error_observation() -> None:
    env = env_for("cancel all of bob's pending orders", CANCEL)
    before = env.db.state_hash()
    for turn in HOSTILE:
        step = env.step(turn)
        assert step.error is not None and not step.done, turn[:40]
        assert step.observation.startswith("\n!") and step.observation.endswith("\n")
        assert len(step.observation) <= MAX_OBSERVATION_CHARS and set(step.observation) <= set(CHARSET)
    assert env.db.state_hash() == before
    assert env.grade().reward == 0.0


def test_an_agent_that_never_stops_is_ended_by_the_environment() -> None:
    env = ToolsEnv(DOMAIN.db, DOMAIN.db.state_hash(), (), max_steps=5)
    steps = play(env, ["find_user(bob)"] * 7)
    assert [s.done for s in steps] == [False] * 4 + [True] * 3 and steps[-1].error == "episode_over"
    assert env.grade().parts["done"] == 0.0


def test_no_state_leaks_between_two_environments_or_into_the_domain() -> None:
    card = TaskCard(**json.loads(DOMAIN.format_card("cancel all of bob's pending orders", CANCEL, "none", "x")))
    first, second = DOMAIN.environment(card, "none"), DOMAIN.environment(card, "none")
    play(first, ["cancel_order(o58)", "cancel_order(o61)", "done()"])
    assert second.step("get_order(o58)").observation == "\n=u2,p11,3,36,pending\n"
    assert DOMAIN.db.orders["o58"].status == "pending"
    assert first.grade().reward == 1.0 and second.grade().reward == 0.0


def test_every_text_the_world_writes_is_in_the_tiny_models_charset() -> None:
    charset = set(CHARSET)
    rng = random.Random(0)
    for family in FAMILY_NAMES:
        for _ in range(10):
            task = DOMAIN.sample_task(rng, family)
            card = DOMAIN.format_card(task.instruction, task.actions, task.outputs, family)
            _, transcript = gold_episode(task)
            prompt = DOMAIN.reasoner_prompt(task.instruction)
            for text in (card, transcript, prompt, DOMAIN.synthesizer_prompt("L1 0.5", (("pattern", "rw"),))):
                assert set(text) <= charset, text
    env = env_for("cancel all of bob's pending orders", CANCEL)
    for turn in HOSTILE + ["find_user(zed)", "place_order(u1,p4,1)", "transfer(u2,u3,99999)"]:
        assert set(env.step(turn).observation) <= charset


def test_the_longest_episode_fits_a_512_position_context() -> None:
    rng = random.Random(1)
    longest = max(len(DOMAIN.reasoner_prompt(t.instruction)) + len(gold_episode(t)[1])
                  for f in FAMILY_NAMES for t in (DOMAIN.sample_task(rng, f) for _ in range(60)))
    assert 200 < longest <= 300  # measured 255 chars (``total`` with three get_order calls); ~400 is the budget
