"""The one grading function (synco.grading.grade): hand-made cases, one batch call, and equal to the per-item path."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Sequence
from pathlib import Path

import pytest

from synco.grading.checker import AnswerChecker
from synco.grading.grade import Graded, grade

RESPONSES = Path(__file__).parent / "data" / "answer_responses.jsonl"
SRC = Path(__file__).resolve().parents[2] / "src" / "synco"


class RecordingChecker(AnswerChecker):
    """The fast path only, recording every ``match_many`` call (its pairs and options)."""

    def __init__(self) -> None:
        super().__init__(use_math_verify=False)
        self.calls: list[tuple[list[tuple[str, str]], float | None, float]] = []

    def match_many(self, pairs: Sequence[tuple[str, str]], *, timeout: float | None = None,
                   rel_tol: float = 0.0) -> list[bool]:
        self.calls.append((list(pairs), timeout, rel_tol))
        return super().match_many(pairs, timeout=timeout, rel_tol=rel_tol)


@pytest.fixture()
def rec() -> RecordingChecker:
    return RecordingChecker()


def test_a_batch_is_graded_in_order_with_one_checker_call(rec: RecordingChecker) -> None:
    items = [("so \\boxed{7}", "7"), ("no answer here", "7"), ("Answer: 8", "7"), ("\\boxed{\\frac12}", "0.5")]
    graded = grade(rec, items)
    assert [g.correct for g in graded] == [True, False, False, True]
    assert [g.answer for g in graded] == ["7", None, "8", "\\frac12"]
    assert [g.method for g in graded] == ["boxed", "none", "answer_line", "boxed"]
    assert graded[0].boxed == ("7",) and graded[2].boxed == ()
    # one call for the batch; the response without an answer is wrong without a check
    assert rec.calls == [([("7", "7"), ("8", "7"), ("\\frac12", "0.5")], None, 0.0)]


def test_no_answer_anywhere_makes_no_checker_call(rec: RecordingChecker) -> None:
    assert grade(rec, []) == []
    graded = grade(rec, [("blah", "1"), ("", "2")])
    assert [(g.answer, g.method, g.correct) for g in graded] == [(None, "none", False), (None, "none", False)]
    assert rec.calls == []


def test_reward_mode_is_strict_and_eval_mode_reads_benchmark_forms(rec: RecordingChecker) -> None:
    items = [("#### 12", "12"), ("Adding them gives 18 apples left.", "18")]
    reward = grade(rec, items)  # the default: training rewards
    assert [(g.answer, g.correct) for g in reward] == [(None, False), (None, False)]
    evald = grade(rec, items, mode="eval")
    assert [(g.answer, g.method, g.correct) for g in evald] == [("12", "gsm8k_marker", True), ("18", "last_sentence", True)]
    assert [c[0] for c in rec.calls] == [[("12", "12"), ("18", "18")]]


def test_boxed_policy_last_or_all(rec: RecordingChecker) -> None:
    items = [("Try \\boxed{2} first. Checking again, the roots are 2 and \\boxed{-3}.", "-3, 2")]
    [last] = grade(rec, items, mode="eval")
    assert (last.answer, last.method, last.correct) == ("-3", "boxed", False)
    [every] = grade(rec, items, mode="eval", boxed="all")
    assert (every.answer, every.method, every.correct) == ("2, -3", "boxed_all", True)  # a set of solutions
    assert every.boxed == ("2", "-3")


def test_rel_tol_reaches_the_checks(rec: RecordingChecker) -> None:
    items = [("\\boxed{1.602 \\times 10^{-19}}", "1.6e-19"), ("\\boxed{1.7e-19}", "1.6e-19")]
    assert [g.correct for g in grade(rec, items, mode="eval")] == [False, False]
    assert [g.correct for g in grade(rec, items, mode="eval", rel_tol=0.01)] == [True, False]  # 0.125 % vs 6.25 %
    assert [c[2] for c in rec.calls] == [0.0, 0.01]
    grade(rec, items[:1], timeout=5.0)
    assert rec.calls[-1][1] == 5.0


@pytest.mark.parametrize("options, field", [({"mode": "loose"}, "mode"), ({"boxed": "first"}, "boxed"),
                                            ({"rel_tol": -0.1}, "rel_tol"), ({"rel_tol": 1.0}, "rel_tol"),
                                            ({"rel_tol": float("nan")}, "rel_tol")])
def test_bad_options_are_refused_by_name_even_for_an_empty_batch(rec: RecordingChecker, options: dict,
                                                                  field: str) -> None:
    for items in ([], [("\\boxed{1}", "1")]):
        with pytest.raises(ValueError, match=field):
            grade(rec, items, **options)
    assert rec.calls == []


def test_a_checker_that_loses_answers_is_an_error() -> None:
    class Short:
        def match_many(self, pairs, *, timeout=None, rel_tol=0.0):  # noqa: ANN001, ANN201
            return [True] * (len(pairs) - 1)

    with pytest.raises(RuntimeError, match="answered 1 of 2 checks"):
        grade(Short(), [("\\boxed{1}", "1"), ("\\boxed{2}", "2")])  # type: ignore[arg-type]


@pytest.mark.parametrize("mode", ["reward", "eval"])
def test_hostile_responses_never_break_a_batch(rec: RecordingChecker, mode: str) -> None:
    huge = "x" * 2_000_000 + "\\boxed{" * 50_000 + "1"
    items = [(huge, "1"), ("\\boxed{" + "(" * 10_000 + "}", "1"), ("<think>\\boxed{5}", "5"), ("\\boxed{4}", "4")]
    graded = grade(rec, items, mode=mode)  # type: ignore[arg-type]
    assert len(graded) == 4 and all(isinstance(g, Graded) for g in graded) and graded[-1].correct
    assert not graded[1].correct  # 10,000 open brackets are no answer to check (and cost no math-verify call)
    if mode == "reward":  # no box closes, an unclosed think block: no answer (eval mode may read a last sentence)
        assert (graded[0].answer, graded[2].answer) == (None, None)


@pytest.fixture(scope="module")
def mv_checker() -> AnswerChecker:
    """math-verify on, with a generous timeout so a loaded machine decides like an idle one."""
    with AnswerChecker(timeout=10.0, warm_up=False) as c:
        yield c


def test_equal_to_the_per_item_path_on_the_labelled_responses(mv_checker: AnswerChecker) -> None:
    """Batched grading gives what ``AnswerChecker.grade`` gives response by response, in both modes."""
    rows = [json.loads(line) for line in RESPONSES.read_text().splitlines() if line.strip()]
    for mode in ("reward", "eval"):
        groups: dict[tuple[str, float], list[dict]] = {}
        for r in rows:
            groups.setdefault((r.get("boxed", "last"), r.get("rel_tol", 0.0)), []).append(r)
        for (boxed, rel_tol), group in groups.items():
            graded = grade(mv_checker, [(r["response"], r["ref"]) for r in group], mode=mode, boxed=boxed,
                           rel_tol=rel_tol)  # type: ignore[arg-type]
            one_by_one = [mv_checker.grade(r["response"], r["ref"], mode=mode, boxed=boxed, rel_tol=rel_tol)
                          for r in group]  # type: ignore[arg-type]
            assert [(g.extraction, g.correct) for g in graded] == one_by_one, (mode, boxed, rel_tol)


def test_grep_finds_one_grading_function_and_one_vllm_generator() -> None:
    """Nothing outside the grading layer extracts and checks answers for a grade, and only the rollout layer builds vLLM."""
    def grep(pattern: str) -> set[str]:
        out = subprocess.run(["grep", "-rlE", pattern, str(SRC), "--include=*.py"], capture_output=True, text=True)
        return {str(Path(p).relative_to(SRC)) for p in out.stdout.split()}

    assert grep(r"^def grade\(") == {"grading/grade.py"}
    assert grep(r"\.grade\(|match_many\(") <= {"grading/checker.py", "grading/grade.py", "grading/verifier.py",
                                               "distributed/ray_checks.py",
                                               "rollout/episodes.py",  # env.grade(): an environment scores an episode
                                               "domains/rgym/warm_start.py"}  # the rgym warm start's held-out, likewise
    assert grep(r"checker\.grade\(|match_many\(") <= {"grading/checker.py", "grading/grade.py", "grading/verifier.py",
                                                       "distributed/ray_checks.py"}
    assert grep(r"extract_answer_with_method\(") <= {"grading/checker.py", "grading/extract.py", "grading/grade.py"}
    assert grep(r"vllm\.LLM\(|\bLLM\(\*\*") == {"rollout/vllm_engine.py"}
    assert grep(r"^class \w*VLLM\w*(Generator|Policy)\b") == {"rollout/vllm_engine.py"}


def test_a_domain_reader_replaces_the_extraction_rules(rec: RecordingChecker) -> None:
    """``extract`` (a domain's HasAnswerExtractor) reads every answer, recorded as method ``domain``."""
    from synco.domains.arith_chat import read_equation_answer

    items = [("964 + 6 = 970.", "970"), ("964 + 6 = 971", "970"), ("964 + 6 = \\boxed{970}", "970"),
             ("964 + 6 = no idea", "970")]
    graded = grade(rec, items, extract=read_equation_answer)
    assert [(g.answer, g.method, g.correct, g.boxed) for g in graded] == [
        ("970", "domain", True, ()), ("971", "domain", False, ()), ("970", "domain", True, ()), (None, "none", False, ())]
    assert rec.calls == [([("970", "970"), ("971", "970"), ("970", "970")], None, 0.0)]
    # without it the strict rules read none of the bare equations
    assert [g.answer for g in grade(rec, items[:2])] == [None, None]
