"""synco.domains.tools.domain: the domain contract, cards, held-out bucket, factors and environments."""

from __future__ import annotations

import json
import pickle
import random
from collections import Counter

import pytest

from synco.core.records import CardRejected, TaskCard
from synco.domains.base import Domain, HasEnvironment, HasFactorSpace, HasResponsePrefix, HeldoutItem
from synco.domains.tools import ToolsDomain
from synco.domains.tools.domain import OTHER_GROUP
from synco.domains.tools.db import build_db, episode_variant
from synco.domains.tools.payload import ToolsPayload
from synco.domains.tools.settings import ToolsSettings
from synco.domains.tools.syntax import format_call, format_outputs, parse_actions
from synco.domains.tools.verify import replay
from synco.domains.tools.tasks import (
    FAMILY_NAMES,
    HELDOUT_GROUPS,
    family_of_instruction,
    is_heldout_task,
    raw_task,
    task_key,
    task_of_instruction,
    writes_group,
)
from synco.evosyn.space import FactorSpace, factor_subject, feasible_cells

DOMAIN = ToolsDomain()


def card(text: str) -> TaskCard:
    return TaskCard(**json.loads(text))


def make(instruction: str, solution: str, answer: str = "none", family: str = "x") -> TaskCard:
    return card(DOMAIN.format_card(instruction, solution, answer, family))


def test_the_domain_contract_and_its_capabilities() -> None:
    assert isinstance(DOMAIN, Domain) and isinstance(DOMAIN, HasEnvironment) and isinstance(DOMAIN, HasFactorSpace)
    assert not isinstance(DOMAIN, HasResponsePrefix)
    assert DOMAIN.name == "tools" and DOMAIN.has_oracle and not DOMAIN.needs.chat_model
    assert DOMAIN.synthesizer_system_prompt() is None and DOMAIN.reasoner_system_prompt() is None


def test_prompts_are_compact() -> None:
    assert DOMAIN.reasoner_prompt("cancel bob's pending order") == "T:cancel bob's pending order\n"
    assert DOMAIN.synthesizer_prompt("acc 0.50\n by pattern", None) == "acc 0.50 by pattern\nCARD:"
    target = (("num_write", "2"), ("pattern", "rw+"))  # written in the world's factor order
    assert DOMAIN.synthesizer_prompt("r", target) == "r\nDO:pattern=rw+,num_write=2\nCARD:"


def test_the_card_layout() -> None:
    text = DOMAIN.format_card("cancel bob's pending order", parse_actions("find_user(bob);list_orders(u2)"), (), "cancel")
    assert text == ('{"teaching_intent":"tools","target_reasoning_style":"act","expected_reasoner_weakness":"lookup",'
                    '"difficulty_estimate":"cancel","problem":"cancel bob\'s pending order",'
                    '"solution":"find_user(bob);list_orders(u2)","final_answer":"none","verification_notes":"x",'
                    '"novelty_notes":"x"}')


def test_static_cards_verify_cover_every_family_and_are_never_held_out() -> None:
    texts = DOMAIN.static_cards(random.Random(0), 400)
    families = Counter()
    for text in texts:
        c = card(text)
        assert DOMAIN.oracle(c) == c.payload.claimed_answer() and DOMAIN.reject_reason(c) is None
        assert len(c.payload.prompt_text()) <= DOMAIN.max_problem_chars and len(text) <= 400
        families[c.difficulty_estimate] += 1
    assert set(families) == set(FAMILY_NAMES)
    assert DOMAIN.static_cards(random.Random(0), 5) == texts[:5]


def test_sample_task_is_never_held_out() -> None:
    rng = random.Random(1)
    for family in FAMILY_NAMES:
        for _ in range(100):
            task = DOMAIN.sample_task(rng, family)
            assert not is_heldout_task(task.actions, task.outputs)
    with pytest.raises(ValueError, match="unknown family 'nope'"):
        DOMAIN.sample_task(rng, "nope")


def test_the_heldout_bucket_is_stable_and_keyed_on_what_the_task_does() -> None:
    _, pam = task_of_instruction(DOMAIN.db, "buy a pen for pam")  # type: ignore[misc]
    _, lamp = task_of_instruction(DOMAIN.db, "what does the lamp cost?")  # type: ignore[misc]
    assert is_heldout_task(pam.actions, pam.outputs) and not is_heldout_task(lamp.actions, lamp.outputs)
    assert task_key(pam.actions, pam.outputs) == "W:place_order(u16,p3,1)|R:|O:none"
    # another wording, an extra read, reordered reads: the same task, so the same bucket
    same = make("buy pam a pen if affordable, else a mug",
                "find_product(pen);find_user(pam);find_user(bob);place_order(u16,p3,1)")
    assert DOMAIN.reject_reason(same) == "heldout_task"
    gift = parse_actions("find_user(rex);find_user(bob);find_user(tom);find_user(cal);transfer(u17,u2,30);"
                         "transfer(u17,u19,30);transfer(u17,u3,30)")
    assert task_key(gift, ()) == task_key(gift[:4] + gift[4:][::-1], ())
    assert DOMAIN.reject_reason(make("x", "not actions")) is None  # the oracle rejects it instead


def _solves_its_item(domain: ToolsDomain, item: HeldoutItem) -> None:
    """The item's rebuilt card is a held-out task whose gold actions, replayed in its environment, score 1."""
    c = domain.heldout_card(item)
    actions = parse_actions(c.payload.solution_text())
    assert c.payload.prompt_text() == item.problem
    assert domain.oracle(c) == item.answer and domain.reject_reason(c) == "heldout_task"
    env = domain.environment(c, item.answer)
    for a in actions:
        env.step(format_call(a))
    env.step(f"done({'' if item.answer == 'none' else item.answer})")
    assert env.grade().reward == 1.0


def test_heldout_items_are_grouped_by_family_capped_at_the_bucket_and_rebuild_their_cards() -> None:
    items = DOMAIN.heldout(6, seed=3)
    assert items == DOMAIN.heldout(6, seed=3) and items != DOMAIN.heldout(6, seed=4)
    assert len({i.problem for i in items}) == len(items)
    sizes = Counter(i.group for i in items)
    by_family = Counter(family_of_instruction(i.problem) for i in items)
    # a family whose bucket holds 6 is a group of 6; the smaller ones give all they have (counted by brute force
    # below) to the group `other`
    rng = random.Random(0)
    small = 0
    for family in FAMILY_NAMES:
        bucket = {t.instruction for t in (raw_task(DOMAIN.db, rng, family) for _ in range(3000))
                  if is_heldout_task(t.actions, t.outputs)}
        assert by_family.get(family, 0) == min(6, len(bucket)), family
        assert sizes.get(family, 0) == (6 if len(bucket) >= 6 else 0), family
        small += len(bucket) if len(bucket) < 6 else 0
    assert sizes[OTHER_GROUP] == small and by_family["lookup"] == 4 and "cancel" not in by_family
    for item in items:
        assert item.group in (family_of_instruction(item.problem), OTHER_GROUP)
        _solves_its_item(DOMAIN, item)
    # a family's items come from its own stream: dropping other families does not change them
    only = ToolsDomain()
    only.families = ["transfer"]
    assert only.heldout(6, seed=3) == [i for i in items if i.group == "transfer"]


def test_heldout_items_grouped_by_writes_rebuild_their_cards() -> None:
    by_writes = ToolsDomain(ToolsSettings(heldout_groups="writes"))
    items = by_writes.heldout(6, seed=3)
    assert items == by_writes.heldout(6, seed=3) and items != by_writes.heldout(6, seed=4)
    assert Counter(i.group for i in items) == {g: 6 for g in HELDOUT_GROUPS}
    assert len({i.problem for i in items}) == len(items)
    for item in items:
        assert writes_group(parse_actions(by_writes.heldout_card(item).payload.solution_text())) == item.group
        _solves_its_item(by_writes, item)


def test_heldout_says_when_a_group_runs_out() -> None:
    with pytest.raises(ValueError, match=r"held-out group w0: found \d+ distinct tasks, 250 requested"):
        ToolsDomain(ToolsSettings(heldout_groups="writes")).heldout(250, seed=0)
    with pytest.raises(ValueError, match="not an instruction of this world"):
        DOMAIN.heldout_card(HeldoutItem(problem="fly me to the moon", answer="none", group="w0"))


@pytest.mark.parametrize(("instruction", "solution", "factors"), [
    ("what does the lamp cost?", "find_product(lamp)",
     {"pattern": "r", "num_write": "0", "num_read": "1", "computation": "no", "distinct_tools": "1",
      "family": "lookup"}),
    ("how much do 3 lamps cost?", "find_product(lamp)",
     {"pattern": "r", "num_write": "0", "num_read": "1", "computation": "yes", "distinct_tools": "1",
      "family": "cost_n"}),
    ("buy cal a lamp or a mug, whichever is cheaper", "find_user(cal);find_product(lamp);find_product(mug);"
     "place_order(u3,p2,1)",  # the mug is out of stock: the factors do not care that it fails
     {"pattern": "rw", "num_write": "1", "num_read": "3-4", "distinct_tools": "3", "family": "buy_cheaper"}),
    ("buy cal a lamp or a cup, whichever is cheaper", "find_user(cal);find_product(lamp);find_product(cup);"
     "place_order(u3,p4,1)",  # the lamp read only decides: a comparison
     {"pattern": "rw", "num_write": "1", "num_read": "3-4", "computation": "yes", "distinct_tools": "3",
      "family": "buy_cheaper"}),
    ("cancel oli's pending order and say oli's new balance", "find_user(oli);list_orders(u15);cancel_order(o30);"
     "find_user(oli)",  # the last read reports the output: no decision
     {"pattern": "rwr", "num_write": "1", "num_read": "3-4", "computation": "no", "distinct_tools": "3",
      "family": "cancel_balance"}),
    ("cancel oli's pending order, then buy oli a tray", "find_user(oli);list_orders(u15);cancel_order(o30);"
     "find_product(tray);place_order(u15,p16,1)",
     {"pattern": "rw+", "num_write": "2", "num_read": "3-4", "computation": "no", "distinct_tools": "4+",
      "family": "cancel_buy"}),
    ("cancel all of ann's pending orders", "find_user(ann);list_orders(u1);cancel_order(o20);cancel_order(o21);"
     "cancel_order(o38)",
     {"pattern": "rw", "num_write": "3-4", "num_read": "2", "computation": "no", "distinct_tools": "3",
      "family": "cancel_all"}),
    ("please tidy up", "find_user(bob);list_orders(u2);get_order(o22);get_order(o29);get_order(o58)",
     {"pattern": "r", "num_write": "0", "num_read": "5+", "computation": "yes", "distinct_tools": "3"}),
])
def test_card_factors_are_computed_from_the_trajectory(instruction: str, solution: str,
                                                       factors: dict[str, str]) -> None:
    c = make(instruction, solution, "none", family="lookup")  # the claimed family is ignored
    assert DOMAIN.card_factors(c) == factors
    assert factor_subject(c, ToolsPayload) == f"{instruction}\n{solution}"


def test_factor_extractors_never_raise_on_bad_subjects() -> None:
    for subject in ("", "\n", "x\nnot actions", "x\n" + "find_user(bob);" * 50, "\u00e9\n\u00e9", "x\ncancel_order(o1)"):
        for d in DOMAIN.factor_defs():
            d.value(subject)
    assert [d.name for d in DOMAIN.factor_defs()][: len(DOMAIN.builtin_factors)] == list(DOMAIN.builtin_factors)


def test_the_generator_realises_every_bucket_of_the_builtin_and_num_write() -> None:
    defs = DOMAIN.factor_defs()
    cells = feasible_cells(FactorSpace.from_defs([d for d in defs if d.name == "pattern"]), defs, DOMAIN.sample_any,
                           n=600)
    assert {dict(c)["pattern"] for c in cells} == {"r", "rw", "rwr", "rw+"}
    rng = random.Random(0)
    num_write = {d.name: d for d in defs}["num_write"]
    assert {num_write.value(DOMAIN.sample_any(rng)) for _ in range(600)} == {"0", "1", "2", "3-4"}


def test_environment_replays_the_cards_actions_for_the_gold_hash_and_caches_it() -> None:
    c = make("cancel bob's pending orders", "find_user(bob);list_orders(u2);cancel_order(o58);cancel_order(o61)")
    ref = DOMAIN.oracle(c)
    gold = DOMAIN.gold_hash(c.payload.solution_text())
    assert gold == DOMAIN.gold_hash(" find_user(bob) ;list_orders(u2);cancel_order(o58);cancel_order(o61)")
    assert gold != DOMAIN.db.state_hash()
    assert DOMAIN.environment(c, ref).gold_hash == gold
    with pytest.raises(CardRejected, match="policy_violation"):
        DOMAIN.gold_hash("cancel_order(o22)")


def test_the_gold_trajectory_and_tool_kinds_feed_the_trajectory_metrics() -> None:
    from synco.evosyn.trajectory import interaction_coverage, trajectory_factors

    c = make("cancel oli's pending order and say oli's new balance",
             "find_user(oli);list_orders(u15);cancel_order(o30);find_user(oli)", "69")
    gold = DOMAIN.gold_actions(c)
    assert [a.name for a in gold] == ["find_user", "list_orders", "cancel_order", "find_user"]
    assert trajectory_factors(gold, DOMAIN.tool_kinds) == {"num_write": "1", "num_read": "3-4", "pattern": "rwr",
                                                           "distinct_tools": "3"}
    assert DOMAIN.oracle(c) == "69"  # 17 + 52 refunded
    # 4 transitions (^ -> find_user -> list_orders -> cancel_order -> find_user) of 8 * 9 possible
    assert interaction_coverage([gold], DOMAIN.tool_kinds) == pytest.approx(4 / 72)
    with pytest.raises(CardRejected, match="bad_actions"):
        DOMAIN.gold_actions(make("x", "nope"))


def test_the_domain_pickles_for_rollout_workers() -> None:
    import pickle

    copy = pickle.loads(pickle.dumps(DOMAIN))
    c = make("cancel all of bob's pending orders", "find_user(bob);list_orders(u2);cancel_order(o58);cancel_order(o61)")
    assert copy.db.state_hash() == DOMAIN.db.state_hash() and copy.gold_hash(c.payload.solution_text()) == DOMAIN.gold_hash(c.payload.solution_text())


# ----------------------------------------------------------------- database variants (tools.db_variants)

VARIANTS = ToolsDomain(ToolsSettings(db_variants=8))


def play_gold(env, actions, outputs) -> float:  # noqa: ANN001 - a ToolsEnv and a task's actions
    for a in actions:
        env.step(format_call(a))
    env.step(f"done({','.join(outputs)})")
    return env.grade().reward


def test_variants_off_is_the_fixed_world_whatever_the_attempt() -> None:
    c = make("what does the lamp cost?", "find_product(lamp)")
    for domain in (DOMAIN, ToolsDomain(ToolsSettings())):
        for attempt in range(4):
            env = domain.environment(c, domain.oracle(c), attempt)
            assert env.db.state_hash() == build_db().state_hash() and env.outputs == ("26",)
            assert env.variant is None and env.gold_actions is None
            assert play_gold(env, parse_actions(c.payload.solution_text()), ["26"]) == 1.0
            assert env.grade().info == {} and env.grade().gold_actions is None  # nothing new in the records


def test_the_attempts_at_one_card_run_on_different_variants_deterministically() -> None:
    key = "what does the lamp cost?"
    c = make(key, "find_product(lamp)")
    ref = VARIANTS.oracle(c)
    envs = [VARIANTS.environment(c, ref, a) for a in range(8)]
    assert [e.variant for e in envs] == [episode_variant(key, a, 8) for a in range(8)]
    assert sorted(e.variant for e in envs) == list(range(1, 9))  # 8 attempts, 8 databases
    for e in envs:
        assert e.db.state_hash() == build_db(e.variant).state_hash()
        assert e.outputs == (str(build_db(e.variant).products["p1"].price),)  # the lamp's price there
    again = ToolsDomain(ToolsSettings(db_variants=8))  # another process builds the same environments
    assert [again.environment(c, ref, a).variant for a in range(8)] == [e.variant for e in envs]
    assert [pickle.loads(pickle.dumps(VARIANTS)).environment(c, ref, a).gold_hash for a in range(8)] == \
        [e.gold_hash for e in envs]


def test_on_variant_one_the_lamp_costs_24_and_recalling_26_fails() -> None:
    key = "what does the lamp cost?"
    c = make(key, "find_product(lamp)")
    attempt = next(a for a in range(8) if episode_variant(key, a, 8) == 1)
    recalled = VARIANTS.environment(c, VARIANTS.oracle(c), attempt)
    assert recalled.step("find_product(lamp)").observation == "\n=p1,24,9\n"  # build_db(1): lamp 24, stock 9
    recalled.step("done(26)")  # the fixed world's answer
    assert recalled.grade().reward == 0.0 and recalled.grade().parts["outputs"] == 0.0
    read = VARIANTS.environment(c, VARIANTS.oracle(c), attempt)  # a fresh database: nothing of the first episode
    read.step("find_product(lamp)")
    read.step("done(24)")
    grade = read.grade()
    assert grade.reward == 1.0 and grade.info == {"db_variant": "1", "gold_outputs": "24"}


@pytest.mark.parametrize("family", FAMILY_NAMES)
def test_a_variants_gold_scores_one_there_and_the_fixed_worlds_gold_scores_zero_where_it_differs(family: str) -> None:
    rng = random.Random(f"variants-{family}")
    differs = 0
    for _ in range(6):
        task = DOMAIN.sample_task(rng, family)
        c = make(task.instruction, ";".join(format_call(a) for a in task.actions), ",".join(task.outputs) or "none")
        ref = VARIANTS.oracle(c)
        assert ref == DOMAIN.oracle(c) and VARIANTS.card_factors(c) == DOMAIN.card_factors(c)  # verified on variant 0
        for attempt in range(8):
            v = episode_variant(task.instruction, attempt, 8)
            solved = task_of_instruction(build_db(v), task.instruction)
            env = VARIANTS.environment(c, ref, attempt)
            if solved is None:  # the variant cannot pose this task: the fixed world, today's gold
                assert env.variant == 0 and env.gold_hash == DOMAIN.gold_hash(c.payload.solution_text()) and env.outputs == task.outputs
                continue
            gold = solved[1]
            assert env.variant == v and env.gold_actions == list(gold.actions)
            assert play_gold(env, gold.actions, gold.outputs) == 1.0
            assert env.grade().info == {"db_variant": str(v), "gold_outputs": format_outputs(gold.outputs)}
            end = replay(build_db(v), task.actions)[0].state_hash() if _runs(build_db(v), task.actions) else None
            if gold.outputs != task.outputs or end != env.gold_hash:  # the fixed world's gold is wrong here
                differs += 1
                assert play_gold(VARIANTS.environment(c, ref, attempt), task.actions, task.outputs) == 0.0
    if family in ("lookup", "cost_n", "sum2", "afford", "total", "cancel_balance", "transfer_all"):
        assert differs > 0  # a value (or, for transfer_all, the amount moved) depends on the variant


def _runs(db, actions) -> bool:  # noqa: ANN001 - a DB and a task's actions
    try:
        replay(db, actions)
    except CardRejected:
        return False
    return True


def test_an_instruction_outside_the_templates_or_unsolvable_on_its_variant_runs_on_the_fixed_world() -> None:
    free = make("what is the total of the first order of bob?", "find_user(bob);list_orders(u2);get_order(o22)", "66")
    env = VARIANTS.environment(free, VARIANTS.oracle(free), 3)
    assert env.variant == 0 and env.db.state_hash() == build_db().state_hash() and env.outputs == ("66",)
    assert play_gold(env, parse_actions(free.payload.solution_text()), ["66"]) == 1.0 and env.grade().info["db_variant"] == "0"
    # pam has 109 in the fixed world; her variants for this instruction are 6, 7, 8, 1, ...: on 6 she has 60 or
    # more, on 8 less (task_of_instruction finds no task there), so attempt 2 runs on the fixed world
    send = make("send 60 from pam to ann", "find_user(pam);find_user(ann);transfer(u16,u1,60)")
    ref = VARIANTS.oracle(send)
    assert [episode_variant(send.payload.prompt_text(), a, 8) for a in range(3)] == [6, 7, 8]
    assert build_db(6).users["u16"].balance >= 60 > build_db(8).users["u16"].balance
    assert VARIANTS.environment(send, ref, 0).variant == 6
    fallback = VARIANTS.environment(send, ref, 2)
    assert fallback.variant == 0 and fallback.gold_hash == DOMAIN.gold_hash(send.payload.solution_text())


def test_held_out_items_run_on_variants_per_item_and_sample() -> None:
    items = VARIANTS.heldout(3, seed=3)
    assert items == DOMAIN.heldout(3, seed=3)  # the held-out set is the fixed world's
    seen = set()
    for item in items:
        c = VARIANTS.heldout_card(item)
        for sample in range(2):
            env = VARIANTS.environment(c, item.answer, sample)
            v = episode_variant(item.problem, sample, 8)
            assert env.variant in (v, 0)
            assert env.variant == (v if task_of_instruction(build_db(v), item.problem) is not None else 0)
            seen.add(env.variant)
    assert len(seen) > 3
