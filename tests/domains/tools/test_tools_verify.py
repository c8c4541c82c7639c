"""synco.domains.tools.verify: replay and grounding checks, one handcrafted card per reason code."""

from __future__ import annotations

import json
import time

import pytest

from synco.core.records import CARD_FIELDS, CardRejected, TaskCard
from synco.domains.tools import ToolsDomain
from synco.domains.tools.db import build_db
from synco.domains.tools.verify import _computable, verify_task
from synco.grading.verifier import TaskVerifier

DOMAIN = ToolsDomain()
DB = build_db()


def card(instruction: str, solution: str, answer: str = "none") -> TaskCard:
    return TaskCard(**json.loads(DOMAIN.format_card(instruction, solution, answer, "x")))


@pytest.mark.parametrize(("instruction", "solution", "answer", "reference"), [
    ("cancel bob's pending order o58", "find_user(bob);list_orders(u2);cancel_order(o58)", "none", "none"),
    ("what does the lamp cost?", "find_product(lamp)", "26", "26"),
    ("how much do 3 lamps cost?", "find_product(lamp)", "78", "78"),                 # 26 * 3
    ("how much do 5 cups cost?", "find_product(cup)", "25", "25"),                   # 5 * 5: a number used twice
    ("how much has val paid in total?", "find_user(val);list_orders(u21);get_order(o2);get_order(o23);"
     "get_order(o54)", "47", "47"),                                                   # 17 + 15 + 15
    ("how much has bob paid in total?", "find_user(bob);list_orders(u2);get_order(o22);get_order(o29);"
     "get_order(o58);get_order(o61)", "177", "177"),                                  # 66 + 13 + 36 + 62
    ("who has more money, bob or cal?", "find_user(bob);find_user(cal)", "Cal", "cal"),
    ("buy cal a lamp", "find_user(cal);find_product(lamp);place_order(u3,p1,1)", "none", "none"),
    ("buy two cups for bob", "find_user(bob);find_product(cup);place_order(u2,p4,2)", "none", "none"),
    ("give all of bob's money to cal", "find_user(bob);find_user(cal);transfer(u2,u3,24)", "none", "none"),
    ("buy cal a lamp and say its id", "find_user(cal);find_product(lamp);place_order(u3,p1,1)", "o65", "o65"),
])
def test_a_grounded_task_verifies_and_the_reference_is_its_outputs(instruction: str, solution: str, answer: str,
                                                                    reference: str) -> None:
    assert DOMAIN.oracle(card(instruction, solution, answer)) == reference


@pytest.mark.parametrize(("instruction", "solution", "answer", "code"), [
    ("cancel bob's order", "find_user(bob) list_orders(u2)", "none", "bad_actions"),
    ("cancel bob's order", "find_user(bob);" * 13, "none", "too_many_actions"),
    ("cancel bob's order", "find_user(bob);delete_order(o58)", "none", "unknown_tool"),
    ("cancel bob's order", "find_user(bob);cancel_order(o58,2)", "none", "bad_arguments"),
    ("what does the lamp cost?", "find_product(lamp)", "1,2,3,4,5", "bad_outputs"),
    ("what does the lamp cost?", "find_product(lamp)", "a lot", "bad_outputs"),
    ("what does the zed cost?", "find_product(zed)", "3", "action_failed"),           # no such product
    ("cancel bob's shipped order", "find_user(bob);list_orders(u2);cancel_order(o22)", "none", "policy_violation"),
    ("buy bob a lamp", "find_user(bob);find_product(lamp);place_order(u2,p1,1)", "none", "policy_violation"),
    ("cancel order o58", "cancel_order(o58)", "none", "ungrounded_argument"),         # an id from the instruction
    ("cancel bob's order", "find_user(bob);list_orders(u2);cancel_order(o61);cancel_order(o60)", "none",
     "ungrounded_argument"),                                                          # o60 was never observed
    ("buy a lamp for cal", "find_user(bob);find_product(lamp);place_order(u3,p1,1)", "none",
     "ungrounded_argument"),                                                          # bob is not named
    ("buy lamps for cal", "find_user(cal);find_product(lamp);place_order(u3,p1,2)", "none",
     "ungrounded_argument"),                                                          # 2 is stated nowhere
    ("what does the lamp cost?", "find_product(lamp)", "999", "ungrounded_output"),
    ("what does the lamp cost?", "find_product(lamp)", "blue", "ungrounded_output"),
    ("cancel bob's pending order", "find_user(bob);list_orders(u2)", "none", "no_write"),
    ("what does bob have?", "find_user(bob);list_orders(u2);cancel_order(o58)", "none", "unasked_write"),
    ("look up bob for me", "find_user(bob)", "none", "nothing_to_check"),
    ("x", "find_user(bob)", "24", "bad_instruction"),
    ("what does bob have?\nnow", "find_user(bob)", "24", "bad_instruction"),
    ("what does b\u00f6b have?", "find_user(bob)", "24", "bad_instruction"),
    ("what does bob have? " + "really " * 12, "find_user(bob)", "24", "bad_instruction"),
])
def test_each_reason_code_on_a_handcrafted_card(instruction: str, solution: str, answer: str, code: str) -> None:
    """Execution and grounding (what any instruction gets; a template instruction's outputs are corrected instead)."""
    with pytest.raises(CardRejected) as err:
        verify_task(DB, instruction, solution, answer)
    assert err.value.code == code
    c = card(instruction, solution, answer)
    if code not in ("bad_outputs", "ungrounded_output") or DOMAIN.family_of(c) is None:
        with pytest.raises(CardRejected) as err:
            DOMAIN.oracle(c)
        assert err.value.code == code


def test_a_template_instructions_outputs_are_the_solved_tasks_whatever_the_card_claims() -> None:
    """The oracle solves the world's own instructions: wrong claimed outputs are corrected (the verifier records
    reference_corrected, soft), and actions that end elsewhere than the instruction asks are refused."""
    assert DOMAIN.oracle(card("what does the lamp cost?", "find_product(lamp)", "999")) == "26"
    assert DOMAIN.oracle(card("how much do 3 lamps cost?", "find_product(lamp)", "a lot")) == "78"
    verdict = TaskVerifier(oracle=DOMAIN.oracle).verify_batch(
        [DOMAIN.format_card("what does the lamp cost?", "find_product(lamp)", "999", "lookup")])[0][1]
    assert verdict.valid and verdict.reference == "26" and verdict.reason_codes == ["reference_corrected"]
    # bob has two pending orders (o58, o61): "cancel all" that cancels one ends elsewhere
    with pytest.raises(CardRejected) as err:
        DOMAIN.oracle(card("cancel all of bob's pending orders", "find_user(bob);list_orders(u2);cancel_order(o58)"))
    assert err.value.code == "wrong_end_state"
    ok = card("cancel all of bob's pending orders", "find_user(bob);list_orders(u2);cancel_order(o61);cancel_order(o58)")
    assert DOMAIN.oracle(ok) == "none"  # another order of the same writes: the same end state


def test_a_held_out_task_cannot_escape_the_bucket_with_wrong_outputs() -> None:
    item = DOMAIN.heldout(1, seed=4)[0]
    c = DOMAIN.heldout_card(item)
    wrong = c.with_fields(final_answer="12345")
    assert DOMAIN.reject_reason(c) == DOMAIN.reject_reason(wrong) == "heldout_task"


def test_the_verifier_records_the_reason_code_and_accepts_a_good_card() -> None:
    verifier = TaskVerifier(oracle=DOMAIN.oracle)
    good = DOMAIN.format_card("cancel bob's pending orders", "find_user(bob);list_orders(u2);cancel_order(o58);"
                              "cancel_order(o61)", "none", "cancel_all")
    bad = DOMAIN.format_card("cancel bob's shipped order", "find_user(bob);list_orders(u2);cancel_order(o22)",
                             "none", "cancel")
    (c1, v1), (c2, v2) = verifier.verify_batch([good, bad])
    assert v1.valid and v1.reference == "none"
    assert not v2.valid and any(r.startswith("policy_violation:") for r in v2.reasons)


def test_replay_runs_in_order_so_a_cancel_frees_money_for_a_later_buy() -> None:
    # cancelling frees bob's money (36 back: 24 -> 60), so a lamp (26) becomes affordable
    ok = card("cancel bob's order o58 and buy him a lamp",
              "find_user(bob);list_orders(u2);cancel_order(o58);find_product(lamp);place_order(u2,p1,1)")
    assert DOMAIN.oracle(ok) == "none"
    rep = verify_task(DB, ok.payload.prompt_text(), ok.payload.solution_text(), ok.payload.claimed_answer())
    assert rep.observations == ("u2,24", "o22:shipped,o29:shipped,o58:pending,o61:pending", "ok", "p1,26,6", "o65")


def test_computable_outputs_hand_computed() -> None:
    nums = [26, 3, 13]
    assert _computable(26, nums) and _computable(78, nums) and _computable(39, nums)  # 26*3, 26+13
    assert _computable(2, nums) and _computable(42, nums) and _computable(13 - 3, nums)  # 26//13, 26+13+3
    assert not _computable(1000, nums) and not _computable(27, nums)
    assert not _computable(26 + 26, nums) and _computable(26 + 26, nums + [26])  # each entry used once


def test_verification_is_bounded_in_time() -> None:
    numbers = ";".join(f"find_product({p})" for p in ("lamp", "mug", "pen", "cup", "hat", "bag", "fan", "map",
                                                      "kit", "jar", "pad", "rug"))
    instruction = "lamp mug pen cup hat bag fan map kit jar pad rug"
    start = time.perf_counter()
    for _ in range(5):
        with pytest.raises(CardRejected, match="ungrounded_output"):  # the worst case: every search fails
            verify_task(DB, instruction, numbers, "99991,99992,99993,99994")
    assert (time.perf_counter() - start) / 5 < 0.5


def test_a_card_has_exactly_the_nine_fields() -> None:
    assert set(json.loads(DOMAIN.format_card("what does the lamp cost?", "find_product(lamp)", "26", "lookup"))) \
        == set(CARD_FIELDS)
