"""synco.domains.arith_chat: the arithmetic world asked in words, its equation prefix and its answer reader."""

from __future__ import annotations

import pytest

from synco.domains.arith import ArithDomain
from synco.domains.arith_chat import (ANSWER_SCAN_CHARS, EQUATION_SCAN_CHARS, HELDOUT_LEVELS, ArithChatDomain,
                                      read_equation_answer, spoken_problem)
from synco.domains.base import (Domain, HasAnswerExtractor, HasAnswerFormat, HasFactorSpace, HasProblemResponsePrefix,
                                problem_response_prefix, response_prefix)

DOMAIN = ArithChatDomain()


def test_spoken_problem_spaces_the_operators() -> None:
    assert spoken_problem("964+6") == "964 + 6"
    assert spoken_problem("812-347") == "812 - 347"
    assert spoken_problem("347*6") == "347 * 6"
    assert spoken_problem("347*6", "×") == "347 × 6"
    assert spoken_problem(" (3+4)*5 ") == "(3 + 4) * 5"


def test_the_reasoner_is_asked_in_words_and_its_response_starts_with_the_equation() -> None:
    assert DOMAIN.reasoner_prompt("964+6") == "What is 964 + 6?"
    assert DOMAIN.reasoner_response_prefix_for("964+6") == "964 + 6 = "
    assert problem_response_prefix(DOMAIN, "47*58") == "47 * 58 = " and response_prefix(DOMAIN) == ""
    assert ArithChatDomain(mul_sign="×").reasoner_prompt("47*58") == "What is 47 × 58?"
    assert DOMAIN.format_reasoner_answer(970) == "970"
    assert DOMAIN.reasoner_system_prompt() is None  # the chat model's own default system prompt


@pytest.mark.parametrize(("response", "answer"), [
    ("964 + 6 = 970", "970"),
    ("964 + 6 = 970.", "970"),                      # a full stop is no decimal point
    ("964 + 6 = 1020.\n\nThis is a classic", "1020"),
    ("964 + 6 = 22\n\nThis is a classic", "22"),
    ("964 + 6 =970", "970"),
    ("964 + 6 = 1,020", "1020"),                    # thousands commas dropped
    ("347 * 6 = 2293.91\n", "2293.91"),             # a decimal stays whole: no integer matches it
    ("964 - 58 = -906", "-906"),
    ("964 + 6 = about 970", "970"),                 # the first number on the line
    ("964 + 6 = 970 = 971", "970"),
    ("964 + 6 = \n970", None),                      # nothing on the equation's line
    ("964 + 6 = ", None),
    ("964 + 6 = seventy", None),
    ("970", "970"),                                 # no '=': read from the start
    ("", None),
])
def test_read_equation_answer_hand_computed(response: str, answer: str | None) -> None:
    assert read_equation_answer(response) == answer


def test_read_equation_answer_reads_a_bounded_window_of_hostile_output() -> None:
    assert read_equation_answer("964 + 6 = " + " " * ANSWER_SCAN_CHARS + "970") is None  # beyond the window
    assert read_equation_answer("964 + 6 = " + " " * (ANSWER_SCAN_CHARS - 4) + "970") == "970"
    assert read_equation_answer("x" * EQUATION_SCAN_CHARS + "= 970") is None  # the '=' is beyond the search
    huge = "964 + 6 = " + "9" * 10_000_000
    assert read_equation_answer(huge) == "9" * (ANSWER_SCAN_CHARS - 1)  # the space and 31 digits, no 10 MB number
    assert read_equation_answer("=" * 10_000_000) is None
    assert read_equation_answer("\x00\ufffd = \u0969\u0967") is None  # only ASCII digits count


def test_everything_but_the_reasoner_side_is_the_arith_world() -> None:
    arith = ArithDomain()
    assert isinstance(DOMAIN, Domain) and DOMAIN.name == "arith-chat"
    for cap in (HasProblemResponsePrefix, HasAnswerExtractor, HasAnswerFormat, HasFactorSpace):
        assert isinstance(DOMAIN, cap)
    assert DOMAIN.levels == arith.levels and DOMAIN.has_oracle and DOMAIN.answer("964+6") == "970"
    assert [d.name for d in DOMAIN.factor_defs()] == [d.name for d in arith.factor_defs()]
    assert DOMAIN.synthesizer_prompt("ok") == arith.synthesizer_prompt("ok")
    import random

    assert DOMAIN.static_cards(random.Random(3), 4) == arith.static_cards(random.Random(3), 4)
    assert DOMAIN.is_heldout("5+347") == arith.is_heldout("5+347")


def test_heldout_is_the_arith_worlds_on_the_chosen_levels() -> None:
    items = DOMAIN.heldout(5, seed=1)
    assert [it.group for it in items] == [lv for lv in HELDOUT_LEVELS for _ in range(5)]
    same = [it for it in ArithDomain().heldout(5, seed=1) if it.group in HELDOUT_LEVELS]
    assert items == same and all(DOMAIN.is_heldout(it.problem) for it in items)
    assert [it.group for it in ArithChatDomain(heldout_levels=["L8"]).heldout(3, 0)] == ["L8"] * 3


@pytest.mark.parametrize(("kwargs", "field"), [({"heldout_levels": ["L12"]}, "heldout_levels"),
                                                ({"heldout_levels": []}, "heldout_levels"),
                                                ({"mul_sign": " "}, "mul_sign")])
def test_bad_settings_name_the_field(kwargs: dict, field: str) -> None:
    with pytest.raises(ValueError, match=field):
        ArithChatDomain(**kwargs)
