import json
import re
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from synco.grading.checker import AnswerChecker
from synco.core.records import CARD_FIELDS, CHECK_NAMES, TaskCard, Verdict
from synco.grading.verifier import TaskVerifier, VerifierConfig, answer_leak, solution_answer

PROBLEM = ("A baker makes 24 muffins in the morning and 18 in the afternoon. She sells 30 of them "
           "and gives 5 to a neighbour. How many muffins does she have left?")
SOLUTION = "She makes 24 + 18 = 42 muffins. After selling 30 and giving away 5 she has 42 - 35 = 7. \\boxed{7}"
OTHER_PROBLEM = "Find the smallest positive integer n such that n^2 leaves remainder 4 when divided by 7 and n > 10."


@pytest.fixture(scope="module")
def checker() -> AnswerChecker:
    return AnswerChecker(use_math_verify=False)  # fast path only: deterministic, no worker process


def raw(**over: str) -> str:
    data = {name: f"the {name.replace('_', ' ')}" for name in CARD_FIELDS}
    data.update(problem=PROBLEM, solution=SOLUTION, final_answer="7")
    data.update(over)
    return json.dumps(data)


def make(checker: AnswerChecker, oracle=None, **cfg: object) -> TaskVerifier:
    return TaskVerifier(VerifierConfig(strict=True, **cfg), checker=checker, oracle=oracle)  # type: ignore[arg-type]


def one(verifier: TaskVerifier, text: str) -> tuple[TaskCard | None, Verdict]:
    [result] = verifier.verify_batch([text])
    return result


def codes(verdict: Verdict) -> list[str]:
    return verdict.reason_codes


# --- config ------------------------------------------------------------------------------------


def test_config_defaults_and_descriptions():
    cfg = VerifierConfig()
    assert (cfg.w_schema, cfg.w_problem, cfg.w_answer, cfg.w_format, cfg.w_dedup) == (0.30, 0.30, 0.25, 0.05, 0.10)
    assert cfg.novelty_threshold == 0.8 and cfg.consensus_majority == 0.5
    assert all(f.description for f in VerifierConfig.model_fields.values())


@pytest.mark.parametrize("kw", [{"min_problem_chars": 50, "max_problem_chars": 10}, {"bands": 15}, {"num_perm": 60, "bands": 4},
                                {"w_format": 0, "w_schema": 0, "w_problem": 0, "w_answer": 0, "w_dedup": 0},
                                {"unknown_key": 1}])
def test_config_rejects_bad_values(kw):
    with pytest.raises(ValueError):
        VerifierConfig(**kw)


# --- a good card ---------------------------------------------------------------------------------


def test_valid_card(checker):
    card, v = one(make(checker), raw())
    assert card is not None and card.payload.prompt_text() == PROBLEM
    assert v.valid and v.reasons == []
    assert set(v.scores) == set(CHECK_NAMES)
    assert v.scores == {"format": 1.0, "schema": 1.0, "problem": 1.0, "answer": 1.0, "novelty": 1.0, "reliability": 1.0}
    assert v.quality == pytest.approx(1.0)
    assert v.reliability == 1.0 and v.reference == "7" and v.agreement is None


# --- format / schema ----------------------------------------------------------------------------


def test_no_json(checker):
    card, v = one(make(checker), "I cannot write a card today.")
    assert card is None and not v.valid and codes(v) == ["no_json"]
    assert v.scores["format"] == 0.0 and v.scores["schema"] == 0.0 and v.quality == 0.0
    assert v.reference is None and v.reliability == 0.0


def test_missing_field_gets_partial_schema(checker):
    data = json.loads(raw())
    del data["novelty_notes"]
    card, v = one(make(checker), json.dumps(data))
    assert card is None and codes(v) == ["missing_field"]
    assert v.reasons[0] == "missing_field: missing field 'novelty_notes'"
    assert v.scores["format"] == 1.0 and v.scores["schema"] == pytest.approx(8 / 9)
    assert v.quality == pytest.approx(0.05 + 0.30 * 8 / 9)


def test_unclosed_think_and_truncated(checker):
    verifier = make(checker)
    assert codes(one(verifier, "<think>planning " + raw())[1]) == ["unclosed_think"]
    assert codes(one(verifier, raw()[:-30])[1]) == ["truncated_json"]


# --- problem checks -------------------------------------------------------------------------------


def test_problem_length_bounds(checker):
    verifier = make(checker, min_problem_chars=20, max_problem_chars=300)
    _, short = one(verifier, raw(problem="2+2?", solution="4", final_answer="4"))
    assert codes(short) == ["problem_too_short"] and short.reasons[0] == "problem_too_short: 4 chars < 20"
    assert short.scores["problem"] == 0.75 and not short.valid
    _, long = one(verifier, raw(problem=PROBLEM + " Also," * 60))
    assert codes(long) == ["problem_too_long"]


@pytest.mark.parametrize("text", [
    "In the figure shown, ABCD is a square of side 4. Find the area of triangle ABE.",
    "Using the table below, compute the mean number of cars sold per day.",
    "As shown, two circles are tangent at P. Find the radius of the smaller one.",
    "According to the diagram, how many edges does the solid have?",
    "The graph shown in the figure is y = f(x). Find f(2).",
])
def test_figure_references_rejected(checker, text):
    _, v = one(make(checker), raw(problem=text))
    assert "references_figure" in codes(v) and not v.valid


def test_ordinary_table_is_fine(checker):
    text = "Tom puts 3 apples on the table and Ann puts 4 more on the table. How many apples are on the table?"
    _, v = one(make(checker), raw(problem=text, solution="3 + 4 = 7", final_answer="7"))
    assert v.valid, v.reasons


@pytest.mark.parametrize("problem,solution,answer,expected", [
    ("Compute 12*3. The answer is 36.", "12*3=36", "36", "states the answer"),
    ("Compute 12*3 (answer: 36)", "12*3=36", "36", "states the answer"),
    ("Evaluate 876-530=346", "876-530=346", "346", "contains the solution"),
    ("What is 11 + 12? Hint: \\boxed{23}", "11+12=23", "23", "boxed"),
    ("Evaluate 5 + 6 = 11.", "Add: 11", "11", "ends with ="),
])
def test_answer_leaks(problem, solution, answer, expected):
    leak = answer_leak(problem, solution, answer)
    assert leak is not None and expected in leak


@pytest.mark.parametrize("problem,solution,answer", [
    ("A pair of socks has 2 socks. How many socks are in 1 pair?", "One pair has 2 socks.", "2"),
    ("Compute 2 + 2 = ?", "2+2=4", "4"),
    ("The answer is 25 more than x = 3. What is it?", "28", "2"),
    ("876-530", "876-530=346", "346"),
    ("Find n if n + 5 = 12.", "n = 7", "7"),
])
def test_not_leaks(problem, solution, answer):
    assert answer_leak(problem, solution, answer) is None


def test_leaked_card_rejected(checker):
    _, v = one(make(checker), raw(problem=PROBLEM + " (The answer is 7.)"))
    assert codes(v) == ["answer_leaked"] and v.scores["problem"] == 0.75


def test_banned_terms(checker):
    verifier = make(checker)
    _, v = one(verifier, raw(problem="This GSM8K-style problem: " + PROBLEM))
    assert codes(v) == ["banned_term"] and v.reasons[0] == "banned_term: GSM8K"
    _, ok = one(verifier, raw(problem="Maya claimed " + PROBLEM))  # "aime" inside a word is fine
    assert ok.valid, ok.reasons


def test_several_problem_failures_lower_the_score(checker):
    _, v = one(make(checker), raw(problem="AIME: in the figure shown the answer is 7"))
    assert codes(v) == ["references_figure", "answer_leaked", "banned_term"]
    assert v.scores["problem"] == 0.25


# --- answer checks -------------------------------------------------------------------------------


def test_solution_answer_extraction():
    assert solution_answer("so x = 3. \\boxed{3}") == "3"
    assert solution_answer("876-530=346") == "346"
    assert solution_answer("5-9=-4") == "-4"
    assert solution_answer("Final answer: 3/4") == "3/4"
    assert solution_answer("In total 1,250 dollars") == "1,250"
    assert solution_answer("Just add them.") is None


def test_unparseable_answer(checker):
    _, v = one(make(checker), raw(final_answer="see the solution above for details"))
    assert codes(v) == ["answer_unparseable"] and not v.valid
    assert v.scores["answer"] == 0.0 and v.reliability == 0.0


def test_inconsistent_answer(checker):
    _, v = one(make(checker), raw(final_answer="8"))
    assert codes(v) == ["answer_inconsistent"] and v.reasons[0] == "answer_inconsistent: solution=7 final=8"
    assert not v.valid and v.scores["answer"] == 0.25 and v.reliability == 0.0
    _, soft = one(make(checker, require_consistent_answer=False), raw(final_answer="8"))
    assert soft.valid and codes(soft) == ["answer_inconsistent"]


def test_last_number_is_a_check_not_the_answer(checker):
    solution = "24 + 18 - 30 - 5 = 7 muffins are left (check: 7 + 35 = 42)."
    _, v = one(make(checker), raw(solution=solution))
    assert v.valid and codes(v) == ["solution_answer_unclear"] and v.scores["answer"] == 0.5 and v.reliability == 0.5
    _, bad = one(make(checker), raw(solution="24 + 18 - 30 - 5 = 6 muffins are left (check: 6 + 35 = 41)."))
    assert not bad.valid and bad.reasons == ["answer_inconsistent: solution=41 final=7"]


def test_equivalent_forms_are_consistent(checker):
    _, v = one(make(checker), raw(solution="Half of it: \\boxed{\\frac{1}{2}}", final_answer="0.5"))
    assert v.valid and v.scores["answer"] == 1.0


def test_solution_without_answer_is_soft(checker):
    _, v = one(make(checker), raw(solution="Add the two batches, then subtract what left the shop."))
    assert v.valid and codes(v) == ["solution_no_answer"]
    assert v.scores["answer"] == 0.5 and v.reliability == 0.5
    assert v.quality == pytest.approx(1.0 - 0.25 * 0.5)


def test_solution_without_answer_is_hard_when_required(checker):
    """require_solution_answer: a card whose final_answer nothing in its solution supports is rejected, same score."""
    text = raw(solution="Add the two batches, then subtract what left the shop.")
    _, v = one(make(checker, require_solution_answer=True), text)
    assert not v.valid and codes(v) == ["solution_no_answer"] and v.scores["answer"] == 0.5
    _, ok = one(make(checker, require_solution_answer=True), raw(solution="24 + 18 - 30 - 5 = 7. The answer is \\boxed{7}."))
    assert ok.valid


# --- novelty -------------------------------------------------------------------------------------


def test_duplicate_within_batch(checker):
    verifier = make(checker)
    variant = PROBLEM.replace("neighbour", "friend")
    results = verifier.verify_batch([raw(), raw(problem=OTHER_PROBLEM, solution="n = 12", final_answer="12"),
                                     raw(problem=variant)])
    (_, first), (_, other), (_, dup) = results
    assert first.valid and other.valid
    assert not dup.valid and codes(dup) == ["duplicate_in_step"]
    sim = float(re.search(r"sim=([\d.]+)", dup.reasons[0]).group(1))  # type: ignore[union-attr]
    assert dup.reasons[0].endswith("slot=0") and 0.8 <= sim < 1.0
    assert dup.scores["novelty"] == pytest.approx(1 - sim, abs=0.005)
    # a new batch starts clean
    assert one(verifier, raw(problem=variant))[1].valid


def test_pool_duplicate_after_admit(checker):
    verifier = make(checker)
    assert one(verifier, raw())[1].valid
    verifier.admit(41, PROBLEM)
    assert verifier.pool_size == 1
    _, v = one(verifier, raw())
    assert not v.valid and v.reasons == ["near_duplicate: sim=1.00 task=41"] and v.scores["novelty"] == 0.0
    assert one(verifier, raw(problem=OTHER_PROBLEM, solution="12", final_answer="12"))[1].valid


def test_duplicates_are_soft_when_not_rejected(checker):
    # rgym: a small cell repeats its questions whatever the Synthesizer writes; the repeat only scores novelty 0
    verifier = make(checker, reject_duplicates=False)
    verifier.admit(41, PROBLEM)
    (_, pooled), (_, again) = verifier.verify_batch([raw(), raw()])
    assert pooled.valid and pooled.reasons == ["near_duplicate: sim=1.00 task=41"] and pooled.scores["novelty"] == 0.0
    assert again.valid and codes(again) == ["duplicate_in_step", "near_duplicate"]


def test_load_pool(checker):
    verifier = make(checker)
    assert verifier.load_pool(iter([(3, OTHER_PROBLEM), (9, PROBLEM)])) == 2
    assert one(verifier, raw())[1].reasons == ["near_duplicate: sim=1.00 task=9"]


def test_reset_pool_replaces_the_index(checker):
    verifier = make(checker)
    verifier.load_pool(iter([(9, PROBLEM)]))
    assert verifier.reset_pool(iter([(3, OTHER_PROBLEM)])) == 1 and verifier.pool_size == 1
    assert one(verifier, raw())[1].valid  # PROBLEM left the index
    assert verifier.reset_pool(iter([])) == 0 and verifier.pool_size == 0


def test_short_duplicate_problems(checker):
    verifier = make(checker)
    results = verifier.verify_batch([raw(problem="365+8", solution="365+8=373", final_answer="373")] * 2)
    assert results[0][1].valid and codes(results[1][1]) == ["duplicate_in_step"]


# --- contamination ---------------------------------------------------------------------------------


def bench_dir(tmp_path: Path) -> Path:
    rows = [{"id": "q1", "question": PROBLEM, "answer": "7"},
            {"id": "q2", "question": "What is the capital letter after B in the alphabet?", "answer": "C"}]
    path = tmp_path / "mybench" / "test.jsonl"
    path.parent.mkdir()
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return tmp_path


def test_contamination(checker, tmp_path):
    verifier = make(checker, benchmark_paths=[str(bench_dir(tmp_path))])
    assert verifier.n_benchmark_questions == 2
    copied = PROBLEM.replace("24", "25").replace("18", "17")  # numbers changed, same problem
    _, v = one(verifier, raw(problem=copied))
    assert not v.valid and codes(v) == ["contaminated"] and v.reasons[0].startswith("contaminated: mybench/q1 sim=")
    assert v.scores["novelty"] < 0.5
    assert one(verifier, raw(problem=OTHER_PROBLEM, solution="12", final_answer="12"))[1].valid


def test_contamination_soft(checker, tmp_path):
    verifier = make(checker, benchmark_paths=[str(bench_dir(tmp_path) / "mybench" / "test.jsonl")],
                    reject_contaminated=False)
    _, v = one(verifier, raw())
    assert v.valid and v.reasons == ["contaminated: mybench/q1 sim=1.00"] and v.scores["novelty"] == 0.0


def test_bad_benchmark_path_fails_at_construction(checker, tmp_path):
    with pytest.raises(FileNotFoundError):
        make(checker, benchmark_paths=[str(tmp_path / "nope")])


# --- oracle ------------------------------------------------------------------------------------------


def sum_oracle(card: TaskCard) -> str | None:
    """Toy domain: problems 'a+b' only."""
    m = re.fullmatch(r"\s*(\d+)\s*\+\s*(\d+)\s*", card.payload.prompt_text())
    return str(int(m.group(1)) + int(m.group(2))) if m else None


def test_oracle_agrees(checker):
    _, v = one(make(checker, oracle=sum_oracle), raw(problem="365+8", solution="365+8=373", final_answer="373"))
    assert v.valid and v.reference == "373" and v.reliability == 1.0 and v.scores["answer"] == 1.0


def test_oracle_corrects_the_reference(checker):
    # The card's own answer (and solution) are wrong: the task is still valid, graded against the oracle.
    _, v = one(make(checker, oracle=sum_oracle), raw(problem="365+8", solution="365+8=363", final_answer="363"))
    assert v.valid and v.reference == "373" and v.reliability == 1.0
    assert v.scores["answer"] == 0.5 and v.reasons == ["reference_corrected: card=363 oracle=373"]


def test_oracle_rejects_out_of_domain(checker):
    _, v = one(make(checker, oracle=sum_oracle), raw())
    assert not v.valid and codes(v) == ["oracle_rejected"] and v.reference is None and v.scores["answer"] == 0.0


def test_consensus_is_noop_with_oracle(checker):
    verifier = make(checker, oracle=sum_oracle)
    _, v = one(verifier, raw(problem="365+8", solution="365+8=373", final_answer="373"))
    after = verifier.apply_consensus(v, ["1", "1", "1", "1"])
    assert after == v and after is not v and after.reliability == 1.0


# --- consensus -----------------------------------------------------------------------------------------


def valid_verdict(checker: AnswerChecker) -> tuple[TaskVerifier, Verdict]:
    verifier = make(checker)
    _, v = one(verifier, raw())
    assert v.valid
    return verifier, v


def test_consensus_majority_disagrees(checker):
    verifier, v = valid_verdict(checker)
    after = verifier.apply_consensus(v, ["8", "8.0", "8", "7"])
    assert not after.valid and after.reasons == ["consensus_disagrees: majority=8 share=0.75"]
    assert after.reliability == 0.25 and after.agreement == 0.25 and after.scores["reliability"] == 0.25
    assert v.valid and v.reliability == 1.0  # the input verdict is unchanged


def test_consensus_split_keeps_card(checker):
    verifier, v = valid_verdict(checker)
    after = verifier.apply_consensus(v, ["7", "7.0", "8", "9"])
    # two scattered wrong answers: agreement 0.5, strongest alternative 0.25 -> reliability 0.75
    assert after.valid and after.reasons == [] and after.reliability == 0.75 and after.agreement == 0.5


def test_consensus_exact_half_is_not_a_clear_majority(checker):
    verifier, v = valid_verdict(checker)
    after = verifier.apply_consensus(v, ["8", "8", "7", None])
    # half the attempts back "8": not a clear majority, but strong evidence against "7"
    assert after.valid and after.reliability == 0.5 and after.agreement == 0.25


def test_none_answers_cannot_form_a_majority(checker):
    verifier, v = valid_verdict(checker)
    after = verifier.apply_consensus(v, [None, None, None, "7"])
    # no answer is no evidence against the reference
    assert after.valid and after.reliability == 1.0 and after.agreement == 0.25


def test_consensus_too_few_attempts(checker):
    verifier, v = valid_verdict(checker)
    after = verifier.apply_consensus(v, ["8"])
    assert after == v


def test_reliability_threshold(checker):
    verifier = make(checker, reliability_threshold=0.5)
    _, v = one(verifier, raw())
    scattered = verifier.apply_consensus(v, ["7", "8", "9", "10"])
    assert scattered.valid and scattered.reliability == 0.75  # scattered wrong answers do not contradict "7"
    after = make(checker, reliability_threshold=0.6).apply_consensus(v, ["7", "8", "8", "9"])
    assert not after.valid and codes(after) == ["unreliable"] and after.reliability == 0.5


def test_consensus_on_invalid_verdict_without_reference(checker):
    verifier = make(checker)
    _, v = one(verifier, "no card")
    assert verifier.apply_consensus(v, ["1", "1", "1"]) == v


# --- robustness ----------------------------------------------------------------------------------------


def exploding_oracle(card: TaskCard) -> str | None:
    raise RuntimeError("domain bug")


def test_unexpected_error_is_recorded_not_raised(checker, caplog):
    verifier = TaskVerifier(VerifierConfig(), checker=checker, oracle=exploding_oracle)
    results = verifier.verify_batch([raw(), "junk"])
    assert len(results) == 2
    card, v = results[0]
    assert card is None and not v.valid and v.reasons == ["internal_error: RuntimeError: domain bug"]
    assert set(v.scores) == set(CHECK_NAMES)
    assert codes(results[1][1]) == ["no_json"]
    assert verifier.n_internal_errors == 1
    assert "verifier failed on card 0" in caplog.text


def test_strict_mode_reraises(checker):
    with pytest.raises(RuntimeError, match="domain bug"):
        make(checker, oracle=exploding_oracle).verify_batch([raw()])


class TimeoutChecker:
    """Stand-in checker whose every call times out."""

    def match(self, predicted: str, reference: str) -> bool:
        raise TimeoutError

    def understands(self, answer: str) -> bool:
        raise TimeoutError


def test_checker_timeouts_become_verdicts():
    verifier = TaskVerifier(VerifierConfig(strict=True), checker=TimeoutChecker())  # type: ignore[arg-type]
    _, v = one(verifier, raw())
    assert codes(v) == ["answer_unparseable"] and not v.valid


pieces = st.sampled_from(['{', '}', '"', '\\', ',', '<think>', '</think>', '\\boxed{', 'null', '"problem": ', '\n'])


@st.composite
def hostile(draw: st.DrawFn) -> str:
    base = draw(st.one_of(st.text(max_size=120), st.just(raw()), st.just(raw(problem="1+1", final_answer="2"))))
    chars = list(base)
    for _ in range(draw(st.integers(0, 8))):
        chars.insert(draw(st.integers(0, len(chars))), draw(pieces))
    return "".join(chars)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(st.lists(hostile(), min_size=1, max_size=6))
def test_hostile_batch_gives_one_verdict_each(checker, raws):
    results = make(checker).verify_batch(raws)
    assert len(results) == len(raws)
    for card, v in results:
        assert set(v.scores) == set(CHECK_NAMES)
        assert all(0.0 <= s <= 1.0 for s in v.scores.values())
        assert 0.0 <= v.quality <= 1.0 and 0.0 <= v.reliability <= 1.0
        assert card is not None or not v.valid
        assert all(":" not in code and code for code in v.reason_codes)


# --- per-card time bound ---------------------------------------------------------------------------


class SlowChecker:
    """Stand-in checker whose calls each take 0.2 s; like AnswerChecker it has a timeout and takes timeout=."""

    timeout = 5.0

    def __init__(self) -> None:
        self.given: list[float | None] = []

    def match(self, predicted: str, reference: str, *, timeout: float | None = None) -> bool:
        self.given.append(timeout)
        time.sleep(0.2)
        return False

    def understands(self, answer: str, *, timeout: float | None = None) -> bool:
        self.given.append(timeout)
        time.sleep(0.2)
        return True


def test_card_time_budget_stops_a_slow_card():
    """21 slow checks (4 s) on one card with a 0.3 s budget: rejected as check_timeout, checks capped by the budget."""
    slow = SlowChecker()
    verifier = TaskVerifier(VerifierConfig(strict=True, card_timeout=0.3), checker=slow)  # type: ignore[arg-type]
    solution = " ".join(str(i) for i in range(1, 22))  # no boxed answer: the last 20 numbers are compared one by one
    start = time.monotonic()
    card, v = one(verifier, raw(solution=solution, final_answer="7"))
    elapsed = time.monotonic() - start
    assert card is not None and not v.valid
    assert codes(v)[-1] == "check_timeout"
    assert elapsed < 2.0, f"{elapsed:.1f} s: the budget did not stop the checks"
    assert slow.given and all(t is not None and t <= 0.3 for t in slow.given)
    # the same card with the default budget is checked in full
    slow = SlowChecker()
    _, v = one(TaskVerifier(VerifierConfig(strict=True), checker=slow), raw(solution="so 7 and 8", final_answer="7"))  # type: ignore[arg-type]
    assert "check_timeout" not in codes(v) and slow.given == [None, None, None]


# --- the two phases (what backend=ray runs apart) ----------------------------------------------------


class CountingChecker(AnswerChecker):
    """The fast-path checker, recording every match and match_many call."""

    def __init__(self) -> None:
        super().__init__(use_math_verify=False)
        self.singles: list[tuple[str, str]] = []
        self.batches: list[list[tuple[str, str]]] = []

    def match(self, predicted: str, reference: str, **kw: object) -> bool:  # type: ignore[override]
        self.singles.append((predicted, reference))
        return super().match(predicted, reference, **kw)  # type: ignore[arg-type]

    def match_many(self, pairs, *, timeout=None):  # type: ignore[no-untyped-def, override]
        self.batches.append(list(pairs))
        return [super(CountingChecker, self).match(p, r) for p, r in pairs]


HAND_CARDS = [
    raw(),  # valid
    "not a card at all",  # no_json: settled in phase 1
    raw(problem=PROBLEM + " (The answer is 7.)"),  # answer_leaked (phase 1), and a near copy of slot 0
    raw(problem=PROBLEM.replace("neighbour", "friend")),  # duplicate of slot 0: phase 2
    '{"problem": "What is 2+2?"',  # truncated JSON
    raw(problem=OTHER_PROBLEM, solution="n = 12", final_answer="13"),  # answer_inconsistent
]


def test_phase_one_is_per_card_and_phase_two_adds_novelty_in_slot_order(checker):
    verifier = make(checker)
    checked = verifier.check_cards(HAND_CARDS)
    assert [c.done is not None for c in checked] == [False, True, False, False, True, False]
    # phase 1 alone knows nothing of the other cards: the near-copy in slot 3 has no reason yet
    assert checked[3].checks.reasons == [] and checked[0].checks.scores["novelty"] == 0.0
    assert [c.card.payload.prompt_text() if c.card else None for c in checked] == [
        c.card.payload.prompt_text() if c.card else None for c in (verifier.check_card(r) for r in HAND_CARDS)]
    # phase 1 of each card alone, in reverse order, then phase 2: the same verdicts as verify_batch
    shuffled = [verifier.check_cards([r])[0] for r in reversed(HAND_CARDS)][::-1]
    assert verifier.finish_batch(shuffled) == make(checker).verify_batch(HAND_CARDS)
    verdicts = [v for _, v in verifier.finish_batch(verifier.check_cards(HAND_CARDS))]
    # the leaked card (a phase-1 reason) is still compared with slot 0, and added to the batch index
    assert [codes(v) for v in verdicts] == [[], ["no_json"], ["answer_leaked", "duplicate_in_step"],
                                            ["duplicate_in_step"], ["truncated_json"], ["answer_inconsistent"]]


def test_a_card_settled_in_phase_one_is_not_added_to_the_batch_index(checker):
    # slot 0 runs out of its budget before novelty: a copy of it in slot 1 is then no duplicate
    verifier = make(checker)
    timed_out = verifier.check_card(raw())
    timed_out.checks.fail("check_timeout: test")
    timed_out.done = verifier._verdict(timed_out.checks, timed_out.reference, 0.0)
    (_, first), (_, second) = verifier.finish_batch([timed_out, verifier.check_card(raw())])
    assert codes(first) == ["check_timeout"] and second.valid and second.reasons == []


def test_phase_one_errors_are_counted_once_in_phase_two(checker, caplog):
    verifier = TaskVerifier(VerifierConfig(), checker=checker, oracle=exploding_oracle)
    checked = verifier.check_cards([raw(), "junk"], first_slot=5)
    assert checked[0].error == "internal_error: RuntimeError: domain bug" and checked[1].error is None
    assert "verifier failed on card 5" in caplog.text and verifier.n_internal_errors == 0
    results = verifier.finish_batch(checked)
    assert results[0] == (None, one(TaskVerifier(VerifierConfig(), checker=checker, oracle=exploding_oracle),
                                    raw())[1])
    assert verifier.n_internal_errors == 1


def test_consensus_batch_asks_every_agreement_check_at_once_and_equals_apply_consensus():
    counting = CountingChecker()
    verifier = make(counting)
    _, v = one(verifier, raw())
    _, no_ref = one(verifier, "no card")
    answers = [["8", "8.0", "8", "7"], ["1", "1", "1"], ["7", None, "7.0", "9"], ["7"]]
    verdicts = [v, no_ref, v, v]
    counting.singles.clear()
    batched = verifier.consensus_batch(verdicts, answers)
    assert counting.batches[-1] == [("8", "7"), ("8.0", "7"), ("8", "7"), ("7", "7"), ("7", "7"), ("7.0", "7"),
                                    ("9", "7")]  # cards consensus judges only; None is no check
    assert ("7", "7") not in counting.singles  # no agreement check made twice; only grouping the others
    one_by_one = [verifier.apply_consensus(x, a) for x, a in zip(verdicts, answers)]
    assert batched == one_by_one
    assert not batched[0].valid and batched[2].agreement == 0.5
    with pytest.raises(ValueError, match="2 verdicts but 1 answer lists"):
        verifier.consensus_batch([v, v], [["7"]])
    with pytest.raises(ValueError, match="agree has 1 entries for 2 answers"):
        verifier.apply_consensus(v, ["7", "8"], agree=[True])


def test_given_agreement_replaces_the_checks(checker):
    verifier, v = valid_verdict(checker)
    # the caller's checks are taken as they are: "8" said to agree makes the card's majority agree
    after = verifier.apply_consensus(v, ["8", "8", "8", "9"], agree=[True, True, True, False])
    assert after.valid and after.agreement == 0.75
    assert not verifier.apply_consensus(v, ["8", "8", "8", "9"]).valid


def test_match_many_is_match_in_order():
    plain = AnswerChecker(use_math_verify=False)
    pairs = [("7", "7"), ("0.5", "\\frac{1}{2}"), ("import os", "7"), ("8", "7"), ("x" * 5000, "x")]
    assert plain.match_many(pairs) == [plain.match(p, r) for p, r in pairs] == [True, True, False, False, False]
    assert plain.match_many([]) == []
    with pytest.raises(ValueError, match="timeout must be a positive number"):
        plain.match_many([("1", "1")], timeout=0)
