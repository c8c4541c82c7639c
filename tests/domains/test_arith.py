"""The embedded arithmetic world: exact bounded evaluator, levels, held-out bucket, cards, factors."""

from __future__ import annotations

import json
import random
from collections import Counter

import pytest

from synco.grading.cards import parse_task_card
from synco.core.records import CARD_FIELDS, TaskCard
from synco.domains.arith import (
    LEVEL_SPECS,
    MAX_EXPR_CHARS,
    ArithDomain,
    column_borrows,
    column_carries,
    evaluate,
    product_carries,
)

DOMAIN = ArithDomain()


def card(problem: str) -> TaskCard:
    return TaskCard(**{f: "x" for f in CARD_FIELDS} | {"problem": problem})


# ----------------------------------------------------------------- evaluator


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("347*6", 2082),
        ("(12+7)*3", 57),
        ("2+3*4", 14),
        ("10-3-2", 5),  # left-associative
        ("2*(3-10)", -14),
        ("((((1))))", 1),
        ("0", 0),
        ("999*999", 998001),
        ("100-100", 0),
    ],
)
def test_evaluate_hand_computed(text: str, value: int) -> None:
    assert evaluate(text) == value


def _random_expr(rng: random.Random, depth: int) -> tuple[str, int, int]:
    """(text, exact value, precedence) of a random expression; value computed by explicit int ops."""
    if depth == 0 or rng.random() < 0.3:
        n = rng.randint(0, 10 ** rng.randint(1, 4) - 1)
        return str(n), n, 3
    op = rng.choice("+-*")
    lt, lv, lp = _random_expr(rng, depth - 1)
    rt, rv, rp = _random_expr(rng, depth - 1)
    prec = 2 if op == "*" else 1
    if lp < prec:
        lt = f"({lt})"
    if rp <= prec:  # right operand of an equal-precedence op needs parentheses (a-(b-c))
        rt = f"({rt})"
    if rng.random() < 0.1:
        lt = f"({lt})"
    value = lv + rv if op == "+" else lv - rv if op == "-" else lv * rv
    return f"{lt}{op}{rt}", value, prec


def test_evaluate_matches_int_arithmetic_on_random_expressions() -> None:
    rng = random.Random(7)
    checked = 0
    for _ in range(800):
        text, value, _ = _random_expr(rng, 3)
        if len(text) > MAX_EXPR_CHARS or text.count("(") > 8:
            continue
        assert evaluate(text) == value, text
        checked += 1
    assert checked > 500


@pytest.mark.parametrize(
    "text",
    [
        "", "1+", "+1", "1++2", "(1+2", "1+2)", "()", "01+2", "1 + 2", " 1+2", "-1+2", "1/2", "2**3", "1e3",
        "__import__('os').system('true')", "9" * 10_000, "1" * 10, "(" * 1000 + "1" + ")" * 1000,
        "(" * 9 + "1" + ")" * 9, "+".join(["1"] * 17), "１+２", "1+2\n",
    ],
)
def test_malformed_or_hostile_text_is_rejected(text: str) -> None:
    assert evaluate(text) is None
    assert DOMAIN.level_of(text) is None
    assert DOMAIN.oracle(card(text)) is None
    assert DOMAIN.factors(text) == {} or text.strip() != text


def test_non_strings_are_rejected() -> None:
    assert evaluate(None) is None
    assert evaluate(12) is None
    assert evaluate(b"1+2") is None


# ----------------------------------------------------------------- levels


@pytest.mark.parametrize(
    ("problem", "level"),
    [
        ("347+5", "L1"), ("5+347", "L1"), ("347+0", "L1"), ("347-5", "L2"), ("47+58", "L3"), ("347-58", "L4"),
        ("347+58", "L5"), ("58+347", "L5"), ("347+812", "L6"), ("812-347", "L7"), ("347-347", "L7"),
        ("347*6", "L8"), ("6*347", "L8"), ("47*58", "L9"), ("347*58", "L10"), ("347*812", "L11"),
        (" 347*6 ", "L8"),
        ("5-347", None), ("347-812", None), ("58-347", None), ("1+2", None), ("1000+1", None),
        ("347+5+1", None), ("(347*6)", None), ("(12+7)*3", None), ("47-5", None), ("7*8", None),
    ],
)
def test_level_of(problem: str, level: str | None) -> None:
    assert DOMAIN.level_of(problem) == level


def test_levels_are_l1_to_l11_in_order() -> None:
    assert DOMAIN.levels == [f"L{i}" for i in range(1, 12)]


def test_sampled_problems_have_their_level_and_many_distinct_values() -> None:
    rng = random.Random(0)
    for level in DOMAIN.levels:
        problems = [DOMAIN.sample_problem(rng, level) for _ in range(500)]
        assert {DOMAIN.level_of(p) for p in problems} == {level}
        # the smallest family keeps 0.9 * 8100 problems: ~483 distinct of 500 draws expected
        assert len(set(problems)) > 450, level


def test_smallest_levels_keep_over_7000_training_problems() -> None:
    for spec in LEVEL_SPECS:
        if spec.width_a != 2:
            continue  # 2d+2d and 2d*2d (8,100 each) are the smallest; 3d<op>1d have 9,000, the rest >= 81,000
        lo_a, hi_a = (0, 9) if spec.width_a == 1 else (10 ** (spec.width_a - 1), 10**spec.width_a - 1)
        lo_b, hi_b = (0, 9) if spec.width_b == 1 else (10 ** (spec.width_b - 1), 10**spec.width_b - 1)
        family = [f"{a}{spec.op}{b}" for a in range(lo_a, hi_a + 1) for b in range(lo_b, hi_b + 1)]
        assert {DOMAIN.level_of(p) for p in family} == {spec.name}
        held = sum(DOMAIN.is_heldout(p) for p in family)
        assert len(family) - held >= 7000, spec.name
        assert 0.07 < held / len(family) < 0.13, spec.name


def test_unknown_level_raises() -> None:
    with pytest.raises(ValueError, match="unknown level"):
        DOMAIN.sample_problem(random.Random(0), "L99")


# ----------------------------------------------------------------- held-out


def test_training_paths_never_return_heldout_problems() -> None:
    rng = random.Random(1)
    for level in DOMAIN.levels:
        assert not any(DOMAIN.is_heldout(DOMAIN.sample_problem(rng, level)) for _ in range(300))
    for text in DOMAIN.static_cards(rng, 300):
        assert not DOMAIN.is_heldout(json.loads(text)["problem"])


def test_heldout_items() -> None:
    items = DOMAIN.heldout(20, seed=3)
    assert len(items) == 20 * 11
    assert Counter(it.group for it in items) == {lv: 20 for lv in DOMAIN.levels}
    assert len({it.problem for it in items}) == len(items)
    for it in items:
        assert DOMAIN.is_heldout(it.problem)
        assert DOMAIN.level_of(it.problem) == it.group
        assert str(evaluate(it.problem)) == it.answer
    assert DOMAIN.heldout(20, seed=3) == items
    assert DOMAIN.heldout(20, seed=4) != items


def test_heldout_bucket_is_shared_by_commutative_twins() -> None:
    for it in DOMAIN.heldout(30, seed=5):
        op = "+" if "+" in it.problem else "*" if "*" in it.problem else None
        if op:
            a, b = it.problem.split(op)
            assert DOMAIN.is_heldout(f"{b}{op}{a}")


def test_reject_reason_flags_heldout_problems_only() -> None:
    held = DOMAIN.heldout(1, seed=0)[0].problem
    assert DOMAIN.reject_reason(card(held)) == "heldout_problem"
    train = DOMAIN.sample_problem(random.Random(0), "L8")
    assert DOMAIN.reject_reason(card(train)) is None


# ----------------------------------------------------------------- oracle, cards, prompts


def test_oracle() -> None:
    assert DOMAIN.has_oracle
    assert DOMAIN.oracle(card("347*6")) == "2082"
    assert DOMAIN.oracle(card(" 812-347 ")) == "465"
    assert DOMAIN.oracle(card("1+2")) is None  # well-formed but in no level family
    assert DOMAIN.oracle(card("347-812")) is None
    assert DOMAIN.oracle(card("what is 347*6?")) is None


def test_format_card_is_compact_json_with_nine_fields() -> None:
    text = DOMAIN.format_card("347*6", "L8", "2082")
    obj = json.loads(text)
    assert list(obj) == list(CARD_FIELDS)
    assert all(isinstance(v, str) and v for v in obj.values())
    assert obj["difficulty_estimate"] == "L8"
    assert obj["problem"] == "347*6" and obj["final_answer"] == "2082"
    assert obj["solution"] == "=2082"
    assert " " not in text and len(text) < 240
    # the fields before the level are constants: the level is the first free choice
    other = json.loads(DOMAIN.format_card("47*58", "L9", "2726"))
    first = list(CARD_FIELDS).index("difficulty_estimate")
    assert all(obj[k] == other[k] for k in CARD_FIELDS[:first])


def test_format_card_round_trips_through_the_card_parser() -> None:
    parsed = parse_task_card(DOMAIN.format_card("47*58", "L9", "2726"))
    assert parsed.payload.prompt_text() == "47*58"
    assert DOMAIN.oracle(parsed) == parsed.payload.claimed_answer() == "2726"


def test_static_cards_are_correct_and_uniform_over_levels() -> None:
    texts = DOMAIN.static_cards(random.Random(2), 550)
    levels = Counter()
    for text in texts:
        c = parse_task_card(text)
        assert DOMAIN.oracle(c) == c.payload.claimed_answer()
        assert DOMAIN.level_of(c.payload.prompt_text()) == c.difficulty_estimate
        levels[c.difficulty_estimate] += 1
    assert set(levels) == set(DOMAIN.levels)
    assert all(25 <= n <= 75 for n in levels.values()), levels  # 50 expected


def test_prompts_and_answer_format() -> None:
    assert DOMAIN.reasoner_prompt("347*6") == "Q:347*6\nA:"
    assert DOMAIN.format_reasoner_answer(2082) == "\\boxed{2082}"
    assert DOMAIN.synthesizer_prompt("") == "\nCARD:"
    assert DOMAIN.synthesizer_prompt("weak:l5|ok:0.41") == "weak:l5|ok:0.41\nCARD:"
    long = DOMAIN.synthesizer_prompt("weak:" + ",".join(f"l{i}" for i in range(40)) + "\nsecond line")
    assert len(long) <= 80 and long.endswith("\nCARD:") and long.count("\n") == 1


def test_synthesizer_prompt_renders_a_report_object() -> None:
    class Report:
        def render_compact(self, budget: int = 120) -> str:
            return ("weak:l8|easy:l1|hard:l11|ok:0.40" * 5)[:budget]

    prompt = DOMAIN.synthesizer_prompt(Report())
    assert prompt.startswith("weak:l8|easy:l1") and prompt.endswith("\nCARD:") and len(prompt) <= 80


# ----------------------------------------------------------------- factors


def test_column_counts() -> None:
    assert column_carries(458, 7) == 1  # 8+7=15 carries, 5+1=6 does not
    assert column_carries(999, 1) == 3
    assert column_carries(123, 456) == 0
    assert column_borrows(500, 1) == 2  # 0-1 borrows, 0-0-1 borrows, 5-0-1=4
    assert column_borrows(999, 123) == 0
    assert product_carries(123, 2) == 0
    assert product_carries(347, 6) == 3  # 7*6=42 (4), 4*6+4=28 (2), 3*6+2=20 (2)
    assert product_carries(25, 11) == 0  # 5*1, 2*1 twice


def test_factors_of_a_level_problem() -> None:
    f = DOMAIN.card_factors(card("458+7"))
    assert f == {"level": "L1", "op": "add", "digits": "3x1", "operands": "2", "parens": "0",
                 "answer_digits": "3", "carries": "1"}
    assert DOMAIN.card_factors(card("347*6"))["carries"] == "3+"
    assert DOMAIN.card_factors(card("500-1"))["carries"] == "2"


def test_factors_of_other_expressions() -> None:
    f = DOMAIN.factors("(12+7)*3")
    assert f == {"op": "add+mul", "digits": "2x1x1", "operands": "3", "parens": "1", "answer_digits": "2"}
    assert DOMAIN.factors("2*(3-10)")["answer_digits"] == "2"
    assert DOMAIN.factors("not a problem") == {}


def test_factors_ignore_what_the_model_claims() -> None:
    c = card("347*6")
    c.difficulty_estimate = "L1"
    c.target_reasoning_style = "add"
    assert DOMAIN.card_factors(c)["level"] == "L8"
    assert DOMAIN.card_factors(c)["op"] == "mul"


@pytest.mark.slow
def test_prefilled_answers_are_the_answers_the_warm_start_writes_itself(one_thread) -> None:
    """Prefilling ``\\boxed{`` changes no answer of the shipped Reasoner (char tokens: the same sequence)."""
    from synco.domains.base import solve
    from synco.core.policy import PolicyConfig
    from synco.learn.hf_policy import HFPolicy
    from synco.core.sampling import SamplingParams
    from synco.learn.build import resolve_model_path

    policy = HFPolicy.from_config(PolicyConfig(model_path=resolve_model_path("builtin:arith/reasoner")))
    items = DOMAIN.heldout(6, seed=3)
    greedy = SamplingParams(greedy=True, max_new_tokens=16)
    plain = policy.generate([DOMAIN.reasoner_prompt(it.problem) for it in items], 1, greedy)
    prefilled = solve(policy, DOMAIN, [it.problem for it in items], 1, greedy)
    assert [g[0].text for g in prefilled] == [g[0].text for g in plain]
    assert all(g[0].text.startswith("\\boxed{") for g in prefilled)
    assert sum(len(g[0].completion_ids) for g in prefilled) < sum(len(g[0].completion_ids) for g in plain) - 6 * len(items)


# ----------------------------------------------------------------- the factor space (EvoSyn)


@pytest.mark.parametrize("problem,expected", [
    # 347*6 = 2082: partial-product carries 7*6=42 (4), 4*6+4=28 (2), 3*6+2=20 (2) -> 3 -> "3+"
    ("347*6", {"level": "L8", "carries": "3+", "answer_digits": "4", "zeros": "no", "lead": "1-3", "ones": "high"}),
    # 812-347 = 465: 2-7 borrows, 1-4-1 borrows, 8-3-1 = 4 -> 2 borrows; lead digit of 812 is 8; ones of 347: 7
    ("812-347", {"level": "L7", "carries": "2", "answer_digits": "3", "zeros": "no", "lead": "7-9", "ones": "high"}),
    # 305*4 = 1220: 5*4=20 (2), 0*4+2=2 (0), 3*4=12 (1) -> 2; operands hold a 0; ones of the smaller (4) is low
    ("305*4", {"level": "L8", "carries": "2", "answer_digits": "4", "zeros": "yes", "lead": "1-3", "ones": "low"}),
    # 47+58 = 105: 7+8 carries, 4+5+1 carries -> 2; larger operand 58 leads with 5
    ("47+58", {"level": "L3", "carries": "2", "answer_digits": "3", "zeros": "no", "lead": "4-6", "ones": "high"}),
    # 500-1 = 499: 0-1 borrows, 0-0-1 borrows, 5-0-1 = 4 -> 2
    ("500-1", {"level": "L2", "carries": "2", "answer_digits": "3", "zeros": "yes", "lead": "4-6", "ones": "low"}),
    ("999+1", {"level": "L1", "carries": "3+", "answer_digits": "4", "zeros": "no", "lead": "7-9", "ones": "low"}),
    (" 123+456 ", {"level": "L6", "carries": "0", "answer_digits": "3", "zeros": "no", "lead": "4-6", "ones": "low"}),
])
def test_factor_extractors_on_hand_examples(problem: str, expected: dict[str, str]) -> None:
    from synco.evosyn.space import factor_values

    assert factor_values(problem, DOMAIN.factor_defs()) == expected
    # the built-in carries agree with the card factors the report uses
    assert DOMAIN.factors(problem)["carries"] == expected["carries"]


@pytest.mark.parametrize("problem", ["(1+2)*3", "12-30", "1234+5", "12*3", "hello", "", "7"])
def test_factor_extractors_do_not_apply_outside_the_level_families(problem: str) -> None:
    assert all(d.value(problem) is None for d in DOMAIN.factor_defs())


def test_factor_space_hooks() -> None:
    defs = DOMAIN.factor_defs()
    assert [d.name for d in defs] == ["level", "carries", "answer_digits", "zeros", "lead", "ones"]
    assert DOMAIN.builtin_factors == ("level",)
    assert defs[0].buckets == tuple(f"L{i}" for i in range(1, 12))
    rng_a, rng_b = random.Random(5), random.Random(5)
    drawn = [DOMAIN.sample_any(rng_a) for _ in range(300)]
    assert drawn == [DOMAIN.sample_any(rng_b) for _ in range(300)]
    assert {DOMAIN.level_of(p) for p in drawn} == set(DOMAIN.levels)
    assert not any(DOMAIN.is_heldout(p) for p in drawn)


def test_synthesizer_prompt_names_the_target_cell() -> None:
    assert DOMAIN.synthesizer_prompt("weak:l5", target=(("level", "L8"),)) == "weak:l5\nDO:level=L8\nCARD:"
    # written in the world's factor order (level first), whatever order the space lists the factors in
    cell = (("carries", "0"), ("level", "L8"))
    assert DOMAIN.synthesizer_prompt("weak:l5", target=cell) == "weak:l5\nDO:level=L8,carries=0\nCARD:"
    assert DOMAIN.synthesizer_prompt("weak:l5", target=None) == DOMAIN.synthesizer_prompt("weak:l5") == "weak:l5\nCARD:"
    assert DOMAIN.synthesizer_prompt("weak:l5", target=()) == "weak:l5\nCARD:"
    long = DOMAIN.synthesizer_prompt("x" * 200 + "\nmore", target=(("level", "L10"), ("answer_digits", "5")))
    assert long.split("\n")[1:] == ["DO:level=L10,answer_digits=5", "CARD:"] and len(long) <= 110
