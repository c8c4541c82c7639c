"""The task record's derived values, each computed in one place: the reference a task is graded against and a task's
success rate (hand-counted)."""

from __future__ import annotations

from synco.core.records import CARD_FIELDS, Attempt, TaskCard, TaskRecord, Verdict, success_rate


def card(answer: str) -> TaskCard:
    return TaskCard(**{**{f: "x" for f in CARD_FIELDS}, "final_answer": answer})


def test_the_reference_is_the_verifiers_else_the_cards_claim() -> None:
    assert TaskRecord(step=0, slot=0, raw="", card=card("7"), verdict=Verdict(valid=True)).reference == "7"
    corrected = TaskRecord(step=0, slot=0, raw="", card=card("7"), verdict=Verdict(valid=True, reference="8"))
    assert corrected.reference == "8"  # the oracle replaced the card's claim
    assert TaskRecord(step=0, slot=0, raw="junk", verdict=Verdict(valid=False)).reference is None  # no card


def test_success_rate_is_the_share_of_correct_attempts() -> None:
    attempts = [Attempt(text=t, correct=ok) for t, ok in (("a", True), ("b", False), ("c", True), ("d", True))]
    assert success_rate(attempts) == 0.75
    assert success_rate(attempts[1:2]) == 0.0
    assert success_rate([]) is None
