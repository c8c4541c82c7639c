"""Answer checking and card verification as Ray tasks (``synco.distributed.ray_checks``) on local Ray.

The Ray-backed checker and verifier must return exactly what the in-process ones return, on hostile input
too (bad JSON, leaked answers, code-like and huge answers, checks that time out), and a task that fails is a
rejected card or a chunk checked in the driver, never a crashed step. Check workers are started once per
module (a few seconds each on 2 cores), with 0.25 CPU each.
"""

from __future__ import annotations

import json
import re
import sys
import time

import pytest

from synco.grading.checker import AnswerChecker
from synco.config.ray import RayCheckSettings, RaySettings
from synco.core.records import CARD_FIELDS, TaskCard
from synco.grading.verifier import TaskVerifier, VerifierConfig

ray = pytest.importorskip("ray", reason="ray is in the test dependencies (pip install -e '.[test]')")

from synco.distributed.ray_checks import (  # noqa: E402 - after the importorskip
    CheckerSettings,
    CheckPool,
    RayAnswerChecker,
    RayTaskVerifier,
    build_ray_checks,
    chunk_deadline,
    chunks,
)

PROBLEM = ("A baker makes 24 muffins in the morning and 18 in the afternoon. She sells 30 of them "
           "and gives 5 to a neighbour. How many muffins does she have left?")
SOLUTION = "She makes 24 + 18 = 42 muffins. After selling 30 and giving away 5 she has 42 - 35 = 7. \\boxed{7}"
OTHER = "Find the smallest positive integer n such that n^2 leaves remainder 4 when divided by 7 and n > 10."


def raw(**over: str) -> str:
    data = {name: f"the {name.replace('_', ' ')}" for name in CARD_FIELDS}
    data.update(problem=PROBLEM, solution=SOLUTION, final_answer="7")
    data.update(over)
    return json.dumps(data)


HOSTILE_CARDS = [
    raw(),
    "I cannot write a card today.",
    raw()[:-20],  # truncated JSON
    "<think>" + raw(),  # unclosed think block
    "```json\n" + raw(problem=OTHER, solution="n = 12", final_answer="12").replace('"}', '",}') + "\n```",
    raw(problem=PROBLEM + " (The answer is 7.)"),  # answer leaked
    raw(problem=PROBLEM.replace("neighbour", "friend")),  # near-duplicate of slot 0
    raw(problem="Compute 1/2 + 1/4 as a fraction in lowest terms, showing each step.",
        solution="1/2 + 1/4 = 3/4, so \\boxed{\\frac{3}{4}}", final_answer="0.75"),
    raw(problem="What is the square root of two over two, written another way?",
        solution="It is \\boxed{\\frac{\\sqrt{2}}{2}}", final_answer="\\frac{1}{\\sqrt{2}}"),  # math-verify
    raw(problem="What is 6 times 7, in the usual decimal notation today?", solution="6*7 = 42", final_answer="43"),
    raw(problem="Name a number that is the answer to the question here.", final_answer="see the solution above"),
    raw(problem="A GSM8K question: how many apples are in the basket today?", final_answer="__import__('os')"),
    raw(problem="x" * 5000),  # too long
    "{" * 10_000,  # deeply nested
    raw(problem=PROBLEM.replace("24", "25").replace("18", "17")),  # contaminated (the benchmark below)
    raw(problem=OTHER, solution="n = 12", final_answer="12"),  # duplicate of slot 4 when that one parsed
]

HOSTILE_PAIRS = [
    ("7", "7"), ("7.0", "7"), ("8", "7"), ("1,000", "1000"), ("1.000", "1000"), ("50\\%", "0.5"),
    ("\\frac{\\sqrt{2}}{2}", "\\frac{1}{\\sqrt{2}}"), ("(x+1)^2", "x^2+2x+1"), ("1 - \\frac{1}{e}", "1 + \\frac{1}{e}"),
    ("__import__('os').system('true')", "0"), ("lambda: 1", "1"), ("x" * 5000, "x"), ("7\u200b", "7"),
    ("\\boxed{", "7"), ("", "7"), ("(1,2)", "[1,2]"), ("\\{-3, 2\\}", "2, -3"), ("A", "(A)"), ("52_8", "52"),
]


def exploding_oracle(card: TaskCard) -> str | None:
    """The sum of an 'a+b' problem; raises on a problem that says EXPLODE (a domain bug), None otherwise."""
    if "EXPLODE" in card.payload.prompt_text():
        raise RuntimeError("domain bug")
    m = re.fullmatch(r"\s*(\d+)\s*\+\s*(\d+)\s*", card.payload.prompt_text())
    return str(int(m.group(1)) + int(m.group(2))) if m else None


# --------------------------------------------------------------------------- without a cluster


def test_chunks_and_deadlines():
    assert chunks([1, 2, 3, 4, 5], 2) == [[1, 2], [3, 4], [5]] and chunks([], 3) == []
    with pytest.raises(ValueError, match="chunk size must be at least 1, got 0"):
        chunks([1], 0)
    # chunks 0 and 2 queue on worker 0: 3 + 1 items of 2 s, plus the fixed extra
    assert chunk_deadline([3, 3, 1], 2, 2.0, 10.0) == 18.0
    assert chunk_deadline([3], 4, 2.0, 0.0) == 6.0


def test_checker_settings_round_trip():
    c = AnswerChecker(3.0, use_math_verify=False, memory_limit_mb=512, startup_timeout=9.0, warm_up=False)
    built = CheckerSettings.of(c).build()
    assert (built.timeout, built.use_math_verify, built.memory_limit_mb, built.startup_timeout, built.warm_up) == (
        3.0, False, 512, 9.0, False)


def test_check_workers_are_counted_in_the_resources_asked_for():
    s = RaySettings(checks=RayCheckSettings(workers=3, worker={"num_cpus": 0.5, "resources": {"checks": 1}}))
    assert s.requested() == {"CPU": 2 + 2 + 1.5, "checks": 3.0}
    assert RaySettings(checks=RayCheckSettings(workers=0)).requested() == {"CPU": 4.0}
    assert all(f.description for f in RayCheckSettings.model_fields.values())


# --------------------------------------------------------------------------- on local Ray


@pytest.fixture(scope="module", autouse=True)
def _oracles_by_value():
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the test oracles travel by value


def settings(workers: int, answers: int = 3, cards: int = 2) -> RaySettings:
    return RaySettings(max_restarts=0, checks=RayCheckSettings(workers=workers, worker={"num_cpus": 0.25},
                                                               answers_per_task=answers, cards_per_task=cards))


@pytest.fixture(scope="module")
def bench(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("bench") / "mybench" / "test.jsonl"
    path.parent.mkdir()
    path.write_text(json.dumps({"id": "q1", "question": PROBLEM, "answer": "7"}) + "\n")
    return str(path.parent.parent)


@pytest.fixture(scope="module")
def checks(local_ray, bench):
    """Two check workers, math-verify on (a generous timeout, so a loaded machine decides like an idle one)."""
    cfg = VerifierConfig(benchmark_paths=[bench], card_timeout=60.0)
    checker, verifier = build_ray_checks(settings(2), cfg, None, AnswerChecker(timeout=30.0))
    yield checker, verifier
    checker.close_remote()


def in_process(cfg: VerifierConfig, oracle=None, timeout: float = 30.0) -> TaskVerifier:  # noqa: ANN001
    return TaskVerifier(cfg, checker=AnswerChecker(timeout=timeout), oracle=oracle)


def test_ray_answer_checks_equal_the_in_process_ones(checks):
    checker, _ = checks
    assert isinstance(checker, RayAnswerChecker) and len(checker.pool.actors) == 2
    here = AnswerChecker(timeout=30.0)
    before = checker.pool.n_remote_chunks
    assert checker.match_many(HOSTILE_PAIRS) == here.match_many(HOSTILE_PAIRS)
    assert checker.pool.n_remote_chunks - before == 7 and checker.pool.n_local_chunks == 0  # 19 pairs, 3 a task
    assert here.match_many(HOSTILE_PAIRS)[:3] == [True, True, False]
    # a check that cannot finish in time is a wrong answer there as here, not an error
    slow = [("9^{9^{9^{9^{9}}}}", "1"), ("7", "7")]
    assert checker.match_many(slow, timeout=0.5) == here.match_many(slow, timeout=0.5) == [False, True]
    assert checker.match_many([]) == []
    with pytest.raises(ValueError, match="timeout must be a positive number"):
        checker.match_many([("1", "1")], timeout=-1)
    # a relative tolerance (synco eval's rounded references) reaches the workers' checks
    rounded = [("1.602e-19", "1.6e-19"), ("1.7e-19", "1.6e-19")]
    assert checker.match_many(rounded) == here.match_many(rounded) == [False, False]
    assert checker.match_many(rounded, rel_tol=0.01) == here.match_many(rounded, rel_tol=0.01) == [True, False]
    with pytest.raises(ValueError, match="rel_tol must be a number"):
        checker.match_many([], rel_tol=2.0)


def test_ray_verification_equals_the_in_process_verdicts(checks, bench):
    _, verifier = checks
    assert isinstance(verifier, RayTaskVerifier) and verifier.n_benchmark_questions == 1
    here = in_process(VerifierConfig(benchmark_paths=[bench], card_timeout=60.0))
    for v in (verifier, here):
        v.admit(77, OTHER)  # the pool index lives in the driver: slot 15 is a near-duplicate of it
    ours, theirs = verifier.verify_batch(HOSTILE_CARDS), here.verify_batch(HOSTILE_CARDS)
    assert ours == theirs
    reasons = {code for _, v in ours for code in v.reason_codes}
    assert {"no_json", "truncated_json", "unclosed_think", "answer_leaked", "duplicate_in_step", "near_duplicate",
            "answer_inconsistent", "answer_unparseable", "banned_term", "problem_too_long", "contaminated"} <= reasons
    assert ours[0][1].reasons == ["contaminated: mybench/q1 sim=1.00"]  # benchmarks are screened in the driver
    assert ours[7][1].valid and ours[8][1].valid  # 0.75 == 3/4, and 1/sqrt(2) by math-verify in the worker
    assert verifier.n_internal_errors == here.n_internal_errors == 0


def test_consensus_checks_are_batched_on_ray_and_equal(checks):
    checker, verifier = checks
    here = in_process(VerifierConfig())
    (_, v), = here.verify_batch([raw()])
    answers = [["8", "8.0", "8", "7"], ["7", None, "\\frac{14}{2}", "9"]]
    before = checker.pool.n_remote_chunks
    assert verifier.consensus_batch([v, v], answers) == [here.apply_consensus(v, a) for a in answers]
    assert checker.pool.n_remote_chunks - before == 3  # 7 agreement checks, 3 a task


def test_card_time_budget_is_kept_on_the_check_workers(local_ray):
    cfg = VerifierConfig(card_timeout=1e-6)  # every parsed card is out of time before its first check
    checker, verifier = build_ray_checks(settings(1, cards=4), cfg, None, AnswerChecker(use_math_verify=False))
    try:
        ours = verifier.verify_batch(HOSTILE_CARDS)
        assert ours == in_process(cfg, timeout=2.0).verify_batch(HOSTILE_CARDS)
        assert [v.reason_codes[-1] for card, v in ours if card is not None] == ["check_timeout"] * len(
            [c for c, _ in ours if c is not None]) and ours[0][0] is not None
        # a timed-out card is not in the batch index: its copy two slots on is no duplicate
        assert "duplicate_in_step" not in {code for _, v in ours for code in v.reason_codes}
    finally:
        checker.close_remote()


def kill_and_wait(actor) -> None:  # noqa: ANN001
    """Kill ``actor`` for good and return once Ray reports it dead (a kill is asynchronous)."""
    ray.kill(actor, no_restart=True)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            ray.get(actor.pid.remote(), timeout=10)
        except ray.exceptions.RayActorError:
            return
        time.sleep(0.1)
    pytest.fail("the killed check worker still answers")


def test_a_card_whose_checks_raise_is_rejected_and_a_dead_worker_is_replaced_by_the_driver(local_ray, caplog):
    cards = [raw(problem="365+8", solution="365+8=373", final_answer="373"), raw(problem="EXPLODE 1+1"),
             raw(problem="2+2", solution="2+2=5", final_answer="5"), "junk"]
    cfg = VerifierConfig()
    checker, verifier = build_ray_checks(settings(1), cfg, exploding_oracle, AnswerChecker(use_math_verify=False))
    try:
        here = TaskVerifier(cfg, checker=AnswerChecker(use_math_verify=False), oracle=exploding_oracle)
        ours = verifier.verify_batch(cards)
        assert ours == here.verify_batch(cards)
        assert ours[1][0] is None and ours[1][1].reasons == ["internal_error: RuntimeError: domain bug"]
        assert ours[2][1].reference == "4" and ours[0][1].valid
        assert verifier.n_internal_errors == here.n_internal_errors == 1  # counted in the driver
        # the worker dies: its chunks are checked in the driver, same verdicts, and it is dropped
        [actor] = checker.pool.actors
        kill_and_wait(actor)
        again = verifier.verify_batch(cards)
        assert again == here.verify_batch(cards)
        assert checker.pool.n_local_chunks == 2 and checker.pool.actors == []  # both chunks, then it is dropped
        assert checker.match_many([("7", "7"), ("8", "7")]) == [True, False]
        assert "checking it in the driver" in caplog.text
    finally:
        checker.close_remote()


def test_strict_mode_raises_the_cards_error_from_the_worker(local_ray):
    cfg = VerifierConfig(strict=True)
    checker, verifier = build_ray_checks(settings(1), cfg, exploding_oracle, AnswerChecker(use_math_verify=False))
    try:
        with pytest.raises(RuntimeError, match="domain bug"):
            verifier.verify_batch([raw(problem="EXPLODE")])
        assert checker.pool.n_local_chunks == 0  # raised, not quietly redone in the driver
    finally:
        checker.close_remote()


def test_a_worker_that_cannot_start_is_a_clear_error(local_ray):
    from synco.distributed.ray_backend import RayBackendError

    bad = CheckerSettings(timeout=0.0, use_math_verify=False, memory_limit_mb=256, startup_timeout=1.0, warm_up=False)
    pool = CheckPool(RayCheckSettings(workers=1, worker={"num_cpus": 0.25}), 0, bad, VerifierConfig(), None)
    try:
        with pytest.raises(RayBackendError, match="check worker 0 could not start: .*timeout must be a positive"):
            pool.wait_ready()
    finally:
        pool.close()


class StuckWorker:
    """A check worker whose answer checks never come back in time (a wedged math-verify, a hung process)."""

    def pid(self) -> int:
        import os

        return os.getpid()

    def match_many(self, pairs, timeout):  # noqa: ANN001, ANN201
        time.sleep(60)
        return [False] * len(pairs)


def test_a_stuck_chunk_is_checked_in_the_driver_after_its_deadline(local_ray, caplog):
    fast = CheckerSettings(timeout=0.1, use_math_verify=False, memory_limit_mb=256, startup_timeout=0.5, warm_up=False)
    pool = CheckPool(RayCheckSettings(workers=1, worker={"num_cpus": 0.25}, task_timeout_s=1.0), 0, fast,
                     VerifierConfig(), None)
    pool.close()
    pool.actors = [ray.remote(StuckWorker).options(num_cpus=0.25).remote()]
    here = AnswerChecker(use_math_verify=False)
    pairs = [("7", "7"), ("8", "7"), ("1/2", "0.5")]
    try:
        ray.get(pool.actors[0].pid.remote())
        start = time.monotonic()
        got = pool.run("match_many", [(pairs, 0.1)], [len(pairs)], 0.1, lambda p, t: here.match_many(p, timeout=t))
        waited = time.monotonic() - start
        assert got == [True, False, True]  # the driver's own verdicts, not the stuck worker's
        assert pool.n_local_chunks == 1 and pool.n_remote_chunks == 0
        assert waited < 30  # the deadline (3 x 0.1 s + 0.5 s start-up + 1 s) cut it, not the worker's 60 s sleep
        assert "no answer within 1 s" in caplog.text
    finally:
        pool.close()
