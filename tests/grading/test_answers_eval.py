"""Tests for synco.grading.extract and synco.grading.checker's evaluation options: eval-mode extraction, boxed="all", matrices, rel_tol, near misses."""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from synco.grading.equivalence import _free_letters, _is_prose
from synco.grading.checker import AnswerChecker, answers_match
from synco.grading.extract import extract_answer, extract_answer_with_method

RESPONSES_PATH = Path(__file__).parent / "data" / "answer_responses.jsonl"
BOUND_S = 10.0
"""Generous bound for extraction of hostile megabyte inputs (measured: well under a second)."""
REWARD_METHODS = {"boxed", "boxed_all", "final_answer_line", "answer_line", "none"}


@pytest.fixture(scope="module")
def checker() -> AnswerChecker:
    """One math-verify worker for the file; a generous timeout so a slow machine never flips a verdict."""
    with AnswerChecker(timeout=10.0, warm_up=False) as c:
        yield c


@pytest.fixture(scope="module")
def fast_only() -> AnswerChecker:
    return AnswerChecker(use_math_verify=False)


def load_responses() -> list[dict]:
    return [json.loads(line) for line in RESPONSES_PATH.read_text().splitlines() if line.strip()]


# ---------------------------------------------------------------------------
# Eval-mode extraction, form by form; what reward mode does with the same text
# ---------------------------------------------------------------------------

# (response, eval answer, eval method, reward answer, reward method)
EXTRACTION_CASES = [
    # a final-answer line with text after the answer on the same line
    ("Final Answer: The final answer is $10,455$. I hope it is correct.", "10,455", "final_answer_line",
     "10,455", "final_answer_line"),
    ("The final answer is $\\frac{7}{12}$, which cannot be simplified.", "\\frac{7}{12}", "final_answer_line",
     "$\\frac{7}{12}$, which cannot be simplified", "final_answer_line"),
    ("The final answer is 24 since (3+1)(2+1)(1+1) = 24.", "24", "final_answer_line",
     "24 since (3+1)(2+1)(1+1) = 24", "final_answer_line"),
    ("Answer: 9. Squaring both sides confirms it.", "9", "answer_line",
     "9. Squaring both sides confirms it", "answer_line"),
    ("Final answer: $(2,-3)$ -- the vertex.", "(2,-3)", "final_answer_line", "$(2,-3)$ -- the vertex", "final_answer_line"),
    ("The answer is that she has 18 apples left.", "18", "answer_line", "that she has 18 apples left", "answer_line"),
    # a qualifier between the marker and its colon, a unit aside after the answer (reward mode stays strict)
    ("So she pays 3*4=12. Answer (in dollars): 12", "12", "answer_line", None, "none"),
    ("Final answer (rounded to the nearest cent): $4.50.", "$4.50", "final_answer_line", None, "none"),
    ("Answer: 12 (dollars)", "12", "answer_line", "12 (dollars)", "answer_line"),
    ("Answer: 5 (a)", "5 (a)", "answer_line", "5 (a)", "answer_line"),  # one letter in brackets is no unit
    ("The final answer is 7, not 5.", "7", "final_answer_line", "7, not 5", "final_answer_line"),  # a correction aside
    # chat-template tokens after it (both modes: the token ends the line)
    ("So 5 + 7 = 12.\nThe final answer is 12<|im_end|>", "12", "final_answer_line", "12", "final_answer_line"),
    ("Final Answer: The final answer is $72$. I hope it is correct.<|eot_id|>", "72", "final_answer_line",
     "72", "final_answer_line"),
    ("Answer: 24</s>", "24", "answer_line", "24", "answer_line"),
    ("The answer is $7$.<|im_end|>\n<|endoftext|>", "7", "answer_line", "7", "answer_line"),
    ("Answer: 3<\uff5cend\u2581of\u2581sentence\uff5c>", "3", "answer_line", "3", "answer_line"),
    # "Answer" without a colon or with odd spacing
    ("We solve it.\n\nAnswer $ 9 $", "9", "answer_line", None, "none"),
    ("**Answer** $\\frac{3}{4}$", "\\frac{3}{4}", "answer_line", None, "none"),
    ("The train covers it.\nAnswer 150", "150", "answer_line", None, "none"),
    ("Answer:   $-96$", "-96", "answer_line", "-96", "answer_line"),
    ("## Final Answer\n\n$\\frac{3}{4}$", "\\frac{3}{4}", "final_answer_line", None, "none"),
    # GSM8K's #### marker (a Markdown heading "#### Step 1" is not one)
    ("Natalia sold 48/2 = 24 clips in May.\nNatalia sold 48+24 = 72 clips.\n#### 72", "72", "gsm8k_marker", None, "none"),
    ("45 * 24 = 1,080\n#### 1,080", "1,080", "gsm8k_marker", None, "none"),
    ("#### Step 1: cost per pen\n12 / 4 = 3\n#### Step 2: total\n5 * 3 = 15\n#### 15", "15", "gsm8k_marker", None, "none"),
    # the answer stated in the last sentence, no marker: eval mode only
    ("She started with 25 apples and gave away 7, so she has 18 apples left.", "18", "last_sentence", None, "none"),
    ("So there are 15 boys. The number of girls is 25.\n\nI hope this helps!", "25", "last_sentence", None, "none"),
    ("Setting the derivative to zero gives $2x - 6 = 0$. Thus the minimum is at $x = 3$.", "x = 3", "last_sentence",
     None, "none"),  # an assignment stays whole (it still matches 3, and never y = 3)
    ("Adding up, $3 + 4 = 7$.", "7", "last_sentence", None, "none"),
    ("Each ticket costs $12.50 and they bought 4. The total is $50.", "50", "last_sentence", None, "none"),
    ("The total comes to 1,250 dollars.", "1,250 dollars", "last_sentence", None, "none"),  # the unit goes to the check
    ("Let me check the answer again. Everything is consistent.", None, "none", None, "none"),
    # the last box versus a later explicit final-answer line: in eval mode the later line wins
    ("We get $\\boxed{5}$.\nWait, I dropped a term.\nThe final answer is 6.", "6", "final_answer_line", "5", "boxed"),
    ("We get $\\boxed{5}$.\n#### 6", "6", "gsm8k_marker", "5", "boxed"),
    ("First guess \\boxed{(B)}; it double counts.\nFinal answer: (C)", "(C)", "final_answer_line", "(B)", "boxed"),
    # ... but a box after the line, a line around the box, or a remark after it leaves the box
    ("**Final Answer**\n\n\\[\n\\boxed{\\dfrac{2}{9}}\n\\]", "\\dfrac{2}{9}", "boxed", "\\dfrac{2}{9}", "boxed"),
    ("Final answer: \\boxed{5}. I hope it is correct.", "5", "boxed", "5", "boxed"),
    ("The roots sum to \\boxed{3}.\nTo double-check the answer: plug in x = 8 and both sides agree.", "3", "boxed",
     "3", "boxed"),
    ("The sum is \\boxed{3}.\nThe answer is correct.", "3", "boxed", "3", "boxed"),
    # unfinished thinking is no answer in either mode
    ("<think>so the answer is \\boxed{12}, but let me check", None, "none", None, "none"),
]


@pytest.mark.parametrize(("response", "eval_answer", "eval_method", "reward_answer", "reward_method"), EXTRACTION_CASES)
def test_eval_and_reward_extraction(
    response: str, eval_answer: str | None, eval_method: str, reward_answer: str | None, reward_method: str
) -> None:
    got = extract_answer_with_method(response, mode="eval")
    assert (got.answer, got.method) == (eval_answer, eval_method)
    assert extract_answer(response, mode="eval") == eval_answer
    strict = extract_answer_with_method(response)  # the default is the reward mode
    assert (strict.answer, strict.method) == (reward_answer, reward_method)
    assert extract_answer_with_method(response, mode="reward") == strict


@pytest.mark.parametrize(
    "response",
    [
        "She started with 25 apples and gave away 7, so she has 18 apples left.",
        "The perimeter is 2(8 + 5) = 26 cm. Therefore the perimeter is 26 cm.",
        "Thus $x = 3$.",
        "Let me check the answer again. It is 5",
        "Weng earned 0.2 x 50 = 10 dollars.\n#### 10",
    ],
)
def test_reward_mode_never_guesses_from_prose(response: str) -> None:
    """The last-sentence fallback and the #### marker exist for evaluation only: no reward from an unmarked number."""
    assert extract_answer_with_method(response).answer is None
    assert extract_answer_with_method(response, mode="eval").answer is not None


@settings(max_examples=300, deadline=None)
@given(response=st.one_of(
    st.text(max_size=400),
    st.lists(st.sampled_from(["answer", "Final Answer", " is ", ": ", "$", "5", "x", ". ", "\n", "####", "\\boxed{",
                              "}", "**", "<|im_end|>", "</think>", "<think>", "so she has ", "\\(", "\\)", ","]),
             max_size=40).map("".join),
))
def test_extraction_modes_never_raise(response: str) -> None:
    for mode in ("reward", "eval"):
        for boxed in ("last", "all"):
            got = extract_answer_with_method(response, mode=mode, boxed=boxed)
            assert (got.answer is None) == (got.method == "none")
            if mode == "reward":
                assert got.method in REWARD_METHODS


def test_unknown_options_are_clear_errors() -> None:
    with pytest.raises(ValueError, match="mode"):
        extract_answer_with_method("\\boxed{1}", mode="strict")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="boxed"):
        extract_answer_with_method("\\boxed{1}", boxed="first")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="mode"):
        AnswerChecker(use_math_verify=False).grade("\\boxed{1}", "1", mode="loose")  # type: ignore[arg-type]


MB = 1_000_000
HOSTILE_EVAL = {
    "hashes": "####" * (MB // 4),
    "hash_lines": "#### 5 x\n" * (MB // 9),
    "answer_words": "answer " * (MB // 7),
    "answer_is_correct": "the answer is correct\n" * (MB // 22),
    "dollars": "$" * MB,
    "numbers": "1 " * (MB // 2),
    "headings": "## Final Answer\n" * (MB // 16),
    "open_spans": "\\(" * (MB // 2),
    "special_tokens": "<|im_end|>" * (MB // 10),
    "half_tokens": "<|" * (MB // 2),
    "answer_spaces": "answer" + " " * MB + "x",
}


@pytest.mark.parametrize("name", sorted(HOSTILE_EVAL))
def test_eval_extraction_is_bounded_on_hostile_input(name: str) -> None:
    start = time.monotonic()
    for mode in ("reward", "eval"):
        extract_answer_with_method(HOSTILE_EVAL[name], mode=mode, boxed="all")
    assert time.monotonic() - start < BOUND_S


# ---------------------------------------------------------------------------
# Several boxed answers
# ---------------------------------------------------------------------------


def test_boxed_all_is_the_collection_of_distinct_boxes(checker: AnswerChecker) -> None:
    text = "So $x = \\boxed{2}$ or $x = \\boxed{-3}$."
    last = extract_answer_with_method(text)
    assert (last.answer, last.method, last.hedged) == ("-3", "boxed", True)  # reward default: last box, hedging kept
    both = extract_answer_with_method(text, boxed="all")
    assert (both.answer, both.method, both.boxed) == ("2, -3", "boxed_all", ("2", "-3"))
    assert checker.grade(text, "-3, 2", boxed="all")[1] is True
    assert checker.grade(text, "\\{-3, 2\\}", mode="eval", boxed="all")[1] is True
    assert checker.grade(text, "-3, 2")[1] is False  # the default reads only the last box
    assert checker.grade(text, "-3", boxed="all")[1] is False  # a list of two is not one of them
    assert checker.grade("So $x = \\boxed{2}$ or $x = \\boxed{3}$.", "-3, 2", boxed="all")[1] is False
    assert checker.grade("The only solution is $x = \\boxed{2}$.", "-3, 2", boxed="all")[1] is False


def test_boxed_all_merges_the_same_answer_written_twice() -> None:
    same = extract_answer_with_method("\\boxed{\\frac12}, i.e. \\boxed{0.5}, or \\boxed{\\dfrac{1}{2}}", boxed="all")
    assert (same.answer, same.method) == ("\\frac12", "boxed")
    eq = extract_answer_with_method("\\boxed{x = 2} and \\boxed{2} and \\boxed{x=-3}", boxed="all")
    assert eq.answer == "x = 2, x=-3"


# ---------------------------------------------------------------------------
# Matrices: the prose detector no longer stops them before math-verify
# ---------------------------------------------------------------------------

HALF_ROOT2_THIRD = "\\begin{pmatrix} \\frac{\\sqrt{2}}{2} \\\\ \\frac13 \\end{pmatrix}"
MATRIX_CASES = [
    ("\\begin{pmatrix} \\sqrt{2}/2 \\\\ 1/3 \\end{pmatrix}", HALF_ROOT2_THIRD, True),
    ("\\begin{pmatrix} \\sqrt{2}/2 \\\\ 1/4 \\end{pmatrix}", HALF_ROOT2_THIRD, False),
    ("\\begin{pmatrix} \\sqrt{3}/2 \\\\ 1/3 \\end{pmatrix}", HALF_ROOT2_THIRD, False),
    ("\\begin{bmatrix} \\sqrt{2}/2 \\\\ 1/3 \\end{bmatrix}", HALF_ROOT2_THIRD, True),
    ("\\left(\\begin{array}{c} \\frac{1}{\\sqrt{2}} \\\\ \\frac{1}{3} \\end{array}\\right)", HALF_ROOT2_THIRD, True),
    ("\\left(\\begin{array}{c} \\frac{1}{\\sqrt{2}} \\\\ -\\frac{1}{3} \\end{array}\\right)", HALF_ROOT2_THIRD, False),
    ("\\begin{pmatrix} \\frac{\\sqrt{3}}{2} & -\\frac12 \\\\ \\frac12 & \\frac{\\sqrt{3}}{2} \\end{pmatrix}",
     "\\begin{bmatrix} \\sqrt{3}/2 & -1/2 \\\\ 1/2 & \\sqrt{3}/2 \\end{bmatrix}", True),
    ("\\begin{pmatrix} \\frac{\\sqrt{3}}{2} & \\frac12 \\\\ \\frac12 & \\frac{\\sqrt{3}}{2} \\end{pmatrix}",
     "\\begin{bmatrix} \\sqrt{3}/2 & -1/2 \\\\ 1/2 & \\sqrt{3}/2 \\end{bmatrix}", False),
    ("\\begin{array}{cc} \\sqrt{3} & -1 \\\\ 1 & \\sqrt{3} \\end{array}",
     "\\begin{pmatrix} \\sqrt{3} & -1 \\\\ 1 & \\sqrt{3} \\end{pmatrix}", True),
    ("\\begin{vmatrix} 1 & 2 \\\\ 3 & 4 \\end{vmatrix}", "-2", True),  # a determinant
    ("\\begin{vmatrix} 1 & 2 \\\\ 3 & 4 \\end{vmatrix}", "2", False),
    ("\\begin{pmatrix} x \\\\ 2x \\end{pmatrix}", "\\begin{pmatrix} x \\\\ x + x \\end{pmatrix}", True),
    ("\\begin{pmatrix} x \\\\ 2x \\end{pmatrix}", "\\begin{pmatrix} y \\\\ 2y \\end{pmatrix}", False),
]


@pytest.mark.parametrize(("pred", "ref", "expected"), MATRIX_CASES)
def test_matrices_with_surds_and_fractions(checker: AnswerChecker, pred: str, ref: str, expected: bool) -> None:
    assert checker.match(pred, ref) is expected
    assert checker.match(ref, pred) is expected


def test_environment_names_are_not_prose() -> None:
    assert not _is_prose("\\begin{pmatrix} \\sqrt{2}/2 \\\\ 1/3 \\end{pmatrix}")
    assert not _is_prose("\\begin{array}{ccc} a & b & c \\end{array}")
    assert _is_prose("the vector points along the diagonal")
    assert _is_prose("\\begin{pmatrix} 1 \\end{pmatrix} is the vector we wanted")
    assert _free_letters("\\begin{bmatrix} 1 & 0 \\\\ 0 & 1 \\end{bmatrix}") == frozenset()


# ---------------------------------------------------------------------------
# Relative tolerance
# ---------------------------------------------------------------------------

TOLERANCE_CASES = [
    ("1.602e-19", "1.6e-19", 0.01, True),
    ("1.602e-19", "1.6e-19", 0.0, False),
    ("6.674 \\times 10^{-11}", "6.67 \\times 10^{-11}", 0.01, True),
    ("6.674 \\times 10^{-11}", "6.67 \\times 10^{-11}", 0.0, False),
    ("4.1 \\times 10^{-7}", "4.2 \\times 10^{-7}", 0.01, False),
    ("1.6e19", "1.6e-19", 0.01, False),
    ("-1.6e-19", "1.6e-19", 0.01, False),
    ("5730", "5700", 0.01, True),
    ("5730", "5700", 0.001, False),
    ("(1.60, 2.99)", "(1.602, 3)", 0.01, True),
    ("(2.99, 1.60)", "(1.602, 3)", 0.01, False),
    ("\\{2.99, 1.60\\}", "\\{1.602, 3\\}", 0.01, True),
    ("\\frac{\\pi}{3}", "1.047", 0.001, True),  # a constant expression: math-verify's side
    ("\\frac{\\pi}{3}", "1.047", 0.0, False),
    ("\\frac{\\pi}{3}", "1.06", 0.001, False),
    ("2\\pi\\sqrt{0.25}", "3.14", 0.01, True),
    ("x + 1.001", "x + 1", 0.01, False),  # only numbers and constant expressions are compared loosely
]


@pytest.mark.parametrize(("pred", "ref", "rel_tol", "expected"), TOLERANCE_CASES)
def test_relative_tolerance(checker: AnswerChecker, pred: str, ref: str, rel_tol: float, expected: bool) -> None:
    assert checker.match(pred, ref, rel_tol=rel_tol) is expected


def test_tolerance_reaches_grade_and_answers_match(checker: AnswerChecker) -> None:
    response = "The charge is about $1.602 \\times 10^{-19}$ C, so the answer is $\\boxed{1.602e-19}$."
    assert checker.grade(response, "1.6e-19")[1] is False
    assert checker.grade(response, "1.6e-19", rel_tol=0.01)[1] is True
    assert answers_match("11.19", "11.2", rel_tol=0.01) is True
    assert answers_match("11.19", "11.2") is False


@pytest.mark.parametrize("bad", [-0.01, float("nan"), float("inf"), -float("inf"), 1.0, 5, True, "0.01", None, 10**400])
def test_bad_rel_tol_is_a_clear_error(fast_only: AnswerChecker, bad: object) -> None:
    with pytest.raises(ValueError, match="rel_tol"):
        fast_only.match("1", "1", rel_tol=bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="rel_tol"):
        fast_only.grade("\\boxed{1}", "1", rel_tol=bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="rel_tol"):
        answers_match("1", "1", rel_tol=bad)  # type: ignore[arg-type]


# ---------------------------------------------------------------------------
# Near misses stay wrong
# ---------------------------------------------------------------------------

NEAR_MISSES = [
    ("1 + \\frac{1}{e}", "1 - \\frac{1}{e}"),
    ("1+\\frac1e", "1-\\frac1e"),
    ("1 + e^{-1}", "1 - e^{-1}"),
    ("1 - \\frac{1}{e^2}", "1 - \\frac{1}{e}"),
    ("\\frac{1}{2} + \\frac{1}{e}", "\\frac{1}{2} - \\frac{1}{e}"),
    ("\\frac{e+1}{e}", "\\frac{e-1}{e}"),
    ("\\frac{1}{e-1}", "\\frac{1}{1-e}"),
    ("e^{2}", "e^{-2}"),
    ("\\sqrt{3} - 2", "2 - \\sqrt{3}"),
    ("\\sqrt{2} + 1", "\\sqrt{2} - 1"),
    ("-\\frac{\\pi}{3}", "\\frac{\\pi}{3}"),
    ("3 + 2i", "3 - 2i"),
    ("(x+1)^2", "(x-1)^2"),
    ("x + \\frac{1}{x}", "x - \\frac{1}{x}"),
    ("1 + \\frac{\\sqrt{3}}{2}", "1 - \\frac{\\sqrt{3}}{2}"),
    ("\\log_3 2", "\\log_2 3"),
    ("-\\cos\\frac{\\pi}{5}", "\\cos\\frac{\\pi}{5}"),
    ("\\{1+\\sqrt{2}\\}", "\\{1-\\sqrt{2}, 1+\\sqrt{2}\\}"),
]


@pytest.mark.parametrize(("pred", "ref"), NEAR_MISSES)
def test_near_misses_are_not_equal(checker: AnswerChecker, pred: str, ref: str) -> None:
    assert checker.match(pred, ref) is False
    assert checker.match(ref, pred) is False
    assert checker.match(pred, ref, rel_tol=0.01) is False


@pytest.mark.parametrize(
    ("pred", "ref"),
    [("\\frac{e-1}{e}", "1 - \\frac{1}{e}"), ("1 - e^{-1}", "1-\\frac1e"), ("-\\frac{1}{e-1}", "\\frac{1}{1-e}"),
     ("(x-1)(x+1)", "x^2 - 1"), ("\\frac{x^2-1}{x-1}", "x + 1"), ("2\\cos^2 x - 1", "\\cos 2x")],
)
def test_the_numeric_guard_keeps_true_equivalences(checker: AnswerChecker, pred: str, ref: str) -> None:
    assert checker.match(pred, ref) is True


def test_worker_guard_vetoes_a_sign_flip_and_keeps_identities() -> None:
    """Bare math-verify reads un-delimited LaTeX with its plain-expression reader, which keeps the leading ``1`` of
    ``1 - \\frac{1}{e}`` and ``1 + \\frac{1}{e}``: equal. The worker wraps answers in ``$..$`` (the whole expression
    is read) and vetoes any True whose two sides differ numerically."""
    import sympy as sp

    from synco.grading import _mathverify_worker as worker

    mv = worker._Checker()
    assert mv.parse("1 - \\frac{1}{e}") != mv.parse("1 + \\frac{1}{e}")
    x = sp.Symbol("x")
    assert mv._numeric_guard(1 - 1 / sp.E, 1 + 1 / sp.E, worker.REL_TOL) is False
    assert mv._numeric_guard(1 - 1 / sp.E, (sp.E - 1) / sp.E, worker.REL_TOL) is True
    assert mv._numeric_guard((x - 1) ** 2, (x + 1) ** 2, worker.REL_TOL) is False
    assert mv._numeric_guard((x - 1) * (x + 1), x**2 - 1, worker.REL_TOL) is True
    assert mv._numeric_guard(sp.Matrix([[1, sp.sqrt(2)]]), sp.Matrix([[1, -sp.sqrt(2)]]), worker.REL_TOL) is False
    assert mv._numeric_guard(sp.Float("0.000001"), sp.Float("0.0000014"), worker.REL_TOL) is False
    assert mv.match("1 - \\frac{1}{e}", "0.632", rel_tol=0.001) is True
    assert mv.match("1 - \\frac{1}{e}", "0.632") is False
    assert math.isclose(worker._rel_tol("0.5"), 0.5) and worker._rel_tol(-1) == 0.0 and worker._rel_tol("nan") == 0.0


# ---------------------------------------------------------------------------
# Labelled full responses (the set bench/bench_answers.py reports on)
# ---------------------------------------------------------------------------


def test_response_set_is_balanced_and_covers_every_form() -> None:
    rows = load_responses()
    assert len(rows) >= 60
    assert len({r["id"] for r in rows}) == len(rows)
    assert 0.25 <= sum(not r["equal"] for r in rows) / len(rows) <= 0.6
    for form in ["final_line_trailing", "chat_tokens", "answer_no_colon", "gsm8k_marker", "last_sentence",
                 "box_then_line", "multi_boxed", "matrix", "tolerance", "near_miss"]:
        assert {True, False} <= {r["equal"] for r in rows if r["form"] == form}, form


def test_response_set_graded_in_both_modes(checker: AnswerChecker) -> None:
    """Eval mode agrees with every label; reward mode never calls a wrong response right, except where it reads
    the box before a later correction by design (``box_then_line``), and it agrees less (no fallbacks)."""
    rows = load_responses()
    verdicts: dict[str, list[bool]] = {}
    for mode in ("eval", "reward"):
        verdicts[mode] = [
            checker.grade(r["response"], r["ref"], mode=mode, boxed=r.get("boxed", "last"),
                          rel_tol=r.get("rel_tol", 0.0))[1]
            for r in rows
        ]
    wrong = [(r["id"], got) for r, got in zip(rows, verdicts["eval"]) if got != r["equal"]]
    assert wrong == []
    reward_fp = [r["id"] for r, got in zip(rows, verdicts["reward"]) if got and not r["equal"]]
    assert all(i.startswith("box_then_line") for i in reward_fp), reward_fp
    reward_agree = sum(g == r["equal"] for r, g in zip(rows, verdicts["reward"]))
    assert reward_agree < len(rows)
