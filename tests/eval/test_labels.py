"""The label-accuracy harness: exact, seeded corruption; the confusion maths; real steps with scripted solvers."""

from __future__ import annotations

import json
import math
import random

import pytest

from synco.grading.checker import AnswerChecker
from synco.grading.extract import extract_answer
from synco.grading.cards import parse_task_card
from synco.eval.labels import (
    CORRUPTION_KINDS,
    CardOutcome,
    Confusion,
    HarnessSettings,
    LabelledCard,
    Rate,
    answer_value,
    corrupt_answer,
    corruption_candidate,
    could_judge,
    draw_labelled_cards,
    format_table,
    n_corrupted,
    run_label_harness,
    summarize,
)
from synco.core.policy import UpdateStats
from synco.core.sampling import Completion
from synco.grading.verifier import TaskVerifier, VerifierConfig
from synco.domains.math import MathDomain


@pytest.fixture(scope="module")
def domain() -> MathDomain:
    return MathDomain()


@pytest.fixture(scope="module")
def checker():  # noqa: ANN201 - a fixture
    with AnswerChecker() as c:
        yield c


# ----------------------------------------------------------------- corruption


@pytest.mark.parametrize(("n", "share", "expected"), [(200, 0.3, 60), (10, 0.25, 3), (7, 0.0, 0), (5, 1.0, 5), (3, 0.1, 0)])
def test_corrupted_count_is_the_share_rounded_half_up(n: int, share: float, expected: int) -> None:
    assert n_corrupted(n, share) == expected


def test_corrupt_share_out_of_range_is_named() -> None:
    with pytest.raises(ValueError, match="corrupt share must be in \\[0, 1\\], got 1.5"):
        n_corrupted(10, 1.5)


def test_corruption_is_exact_and_reproducible(domain: MathDomain) -> None:
    cards = draw_labelled_cards(domain, 50, 0.3, seed=3)
    assert sum(c.corrupted for c in cards) == 15
    assert cards == draw_labelled_cards(domain, 50, 0.3, seed=3)
    other = draw_labelled_cards(domain, 50, 0.3, seed=4)
    assert [c.problem for c in other] != [c.problem for c in cards]
    clean = draw_labelled_cards(domain, 50, 0.0, seed=3)
    assert [c.problem for c in clean] == [c.problem for c in cards]  # the share never changes the problems
    assert not any(c.corrupted for c in clean) and all(c.label == c.truth for c in clean)
    assert len({c.problem for c in cards}) == 50  # distinct problems
    for c in cards:
        if c.corrupted:
            assert c.corruption in CORRUPTION_KINDS
            assert answer_value(c.label) != answer_value(c.truth)  # wrong in value, not only in form
        else:
            assert c.label == c.truth
    assert all(c.corrupted for c in draw_labelled_cards(domain, 12, 1.0, seed=0))


def test_kinds_can_be_restricted_and_are_validated(domain: MathDomain) -> None:
    cards = draw_labelled_cards(domain, 30, 0.5, seed=1, kinds=["sign_flip", "off_by_one"])
    assert {c.corruption for c in cards if c.corrupted} <= {"sign_flip", "off_by_one"}
    with pytest.raises(ValueError, match="kinds must be a non-empty subset"):
        draw_labelled_cards(domain, 3, 0.5, seed=1, kinds=["typo"])


@pytest.mark.parametrize(("kind", "truth", "problem", "allowed"), [
    ("off_by_one", "7", "", {"6", "8"}),
    ("off_by_one", "3/8", "", {"1/4", "1/2"}),  # the numerator slips, the result in lowest terms
    ("off_by_one", "12.5", "", {"11.5", "13.5"}),
    ("sign_flip", "7", "", {"-7"}),
    ("sign_flip", "0", "", {None}),
    ("problem_number", "7", "Tom has 3 apples and 7 pears.", {"3"}),
    ("problem_number", "7", "Tom has 7 pears.", {None}),
    ("double_or_half", "5", "", {"10", "2.5"}),
    ("double_or_half", "3/8", "", {"3/4", "3/16"}),
    ("reciprocal", "3/8", "", {"8/3"}),
    ("reciprocal", "12.5", "", {"0.08"}),
    ("reciprocal", "7", "", {None}),
    ("digit_swap", "45", "", {"54"}),
    ("digit_swap", "-120", "", {"-210", "-102"}),
    ("digit_swap", "100", "", {None}),  # no leading zero, equal digits are not a swap
    ("digit_swap", "7", "", {None}),
])
def test_each_corruption_kind_on_hand_cases(kind: str, truth: str, problem: str, allowed: set) -> None:
    seen = {corruption_candidate(kind, truth, problem, random.Random(s)) for s in range(20)}
    assert seen <= allowed and seen


def test_unknown_kind_and_hopeless_answer_are_named() -> None:
    with pytest.raises(ValueError, match="corruption kind 'typo' is unknown"):
        corruption_candidate("typo", "3", "", random.Random(0))
    with pytest.raises(ValueError, match="no corruption .* applies to answer '0'"):
        corrupt_answer("0", "nothing here", random.Random(0), kinds=["sign_flip", "reciprocal"])
    with pytest.raises(ValueError, match="answer 'x' is not an exact number"):
        answer_value("x")


def test_consistent_cards_state_the_wrong_answer_everywhere(domain: MathDomain, checker: AnswerChecker) -> None:
    cards = draw_labelled_cards(domain, 20, 0.5, seed=2)
    verifier = TaskVerifier(VerifierConfig(novelty_threshold=1.0, strict=True), checker=checker)
    verdicts = verifier.verify_batch([c.raw for c in cards])
    for c, (card, verdict) in zip(cards, verdicts):
        assert card is not None and card.payload.claimed_answer() == c.label
        assert extract_answer(card.payload.solution_text()) == c.label
        assert verdict.valid, verdict.reasons  # the screen alone cannot tell: the card is self-consistent


def test_label_only_cards_keep_the_true_solution(domain: MathDomain) -> None:
    cards = draw_labelled_cards(domain, 10, 0.5, seed=2, consistent=False)
    for c in cards:
        card = parse_task_card(c.raw)
        assert card.payload.claimed_answer() == c.label and extract_answer(card.payload.solution_text()) == c.truth
        assert json.loads(c.raw)["problem"] == c.problem


# ----------------------------------------------------------------- metrics on hand-made verdicts


def outcome(i: int, kind: str | None, stage: str | None, n: int = 4, extracted: int = 4,
            reasons: tuple[str, ...] = ()) -> CardOutcome:
    cfg = VerifierConfig()
    return CardOutcome(index=i, corruption=kind, rejected=stage is not None, stage=stage, reasons=reasons,  # type: ignore[arg-type]
                       n_answers=n, n_extracted=extracted, judged=n > 0 and could_judge(n, extracted, cfg),
                       agreement=None)


def test_confusion_maths_on_hand_made_outcomes() -> None:
    outcomes = [
        outcome(0, "sign_flip", "consensus", reasons=("consensus_disagrees",)),  # TP (consensus)
        outcome(1, "off_by_one", "screen", n=0, extracted=0, reasons=("answer_leaked",)),  # TP (screen)
        outcome(2, "off_by_one", None),  # FN, judged
        outcome(3, "sign_flip", None, extracted=1),  # FN, not judged (1 of 4 extracted)
        outcome(4, None, "consensus", reasons=("consensus_disagrees",)),  # FP
        outcome(5, None, None),  # TN
        outcome(6, None, None),  # TN
        outcome(7, None, None, extracted=2),  # TN, not judged (2 of 4 is no clear majority)
    ]
    r = summarize(outcomes, {"solver": "reasoner"})
    assert (r.overall.tp, r.overall.fp, r.overall.fn, r.overall.tn) == (2, 1, 2, 3)
    assert r.overall.precision == Rate(2, 3) and r.overall.recall == Rate(2, 4)
    assert r.overall.false_rejection == Rate(1, 4)
    # consensus alone, on the judged cards 0, 2, 4, 5, 6
    assert (r.consensus.tp, r.consensus.fp, r.consensus.fn, r.consensus.tn) == (1, 1, 1, 2)
    assert r.n_cards == 8 and r.n_corrupted == 4
    assert r.screen_rejected == Rate(1, 8) and r.reached == Rate(7, 8) and r.judged == Rate(5, 7)
    assert r.extracted == Rate(4 * 5 + 1 + 2, 4 * 7)
    assert r.by_kind == {"off_by_one": Rate(1, 2), "sign_flip": Rate(1, 2)}
    assert r.screen_reasons == {"answer_leaked": 1}
    data = r.to_dict()
    assert data["overall"]["recall"] == {"hits": 2, "total": 4, "value": 0.5, "se": 0.25}
    assert data["settings"] == {"solver": "reasoner"}
    table = format_table(r)
    assert "TP=2 FP=1 FN=2 TN=3" in table and "0.667 ± 0.272 (2/3)" in table


def test_rate_standard_error_and_empty_rates() -> None:
    assert Rate(3, 4).value == 0.75 and Rate(3, 4).se == pytest.approx(math.sqrt(0.75 * 0.25 / 4))
    assert Rate(0, 0).value is None and Rate(0, 0).se is None and "n/a" in str(Rate(0, 0))
    c = Confusion.of([])
    assert c.precision.value is None and c.recall.value is None


@pytest.mark.parametrize(("n", "extracted", "judged"), [(4, 3, True), (4, 2, False), (2, 2, True), (1, 1, False), (3, 2, True)])
def test_consensus_can_judge_only_with_a_possible_clear_majority(n: int, extracted: int, judged: bool) -> None:
    assert could_judge(n, extracted, VerifierConfig()) is judged


# ----------------------------------------------------------------- the harness on real steps


class ScriptedSolver:
    """Answers each problem with ``answer_of(problem, j)`` (None: a response without an answer)."""

    def __init__(self, cards: list[LabelledCard], answer_of) -> None:  # noqa: ANN001
        self.cards = cards
        self.answer_of = answer_of
        self.calls: list[int] = []
        self.updates = 0

    def format_prompt(self, user_text: str, system: str | None = None) -> str:
        return f"<user>{user_text}</user>"

    def generate(self, prompts, n, params=None):  # noqa: ANN001, ANN201
        self.calls.append(n)
        out = []
        for p in prompts:
            card = next(c for c in self.cards if c.problem in p)
            texts = [self.answer_of(card, j) for j in range(n)]
            out.append([Completion(text="I think." if t is None else f"So \\boxed{{{t}}}.", prompt_ids=[1], completion_ids=[2],
                                   logprobs=[-1.0], truncated=False, finish_reason="stop") for t in texts])
        return out

    def update(self, batch):  # noqa: ANN001, ANN201
        self.updates += 1
        return UpdateStats(loss=0.0, n_sequences=len(batch), n_tokens=1, n_skipped_zero_adv=0, grad_norm=0.0,
                           clip_frac=0.0, kl=0.0, lr=1.0, nan_skipped=False, stepped=True)


@pytest.mark.parametrize("solver", ["reasoner", "checker"])
def test_a_solver_that_knows_the_truth_catches_every_wrong_label(domain: MathDomain, checker: AnswerChecker,
                                                                 solver: str) -> None:
    cards = draw_labelled_cards(domain, 20, 0.3, seed=5)
    fake = ScriptedSolver(cards, lambda c, j: c.truth)
    settings = HarnessSettings(solver=solver, n_answers=3, batch_size=8)  # type: ignore[arg-type]
    outcomes = run_label_harness(cards, fake, settings, domain=domain, checker=checker)
    r = summarize(outcomes)
    assert (r.overall.tp, r.overall.fp, r.overall.fn, r.overall.tn) == (6, 0, 0, 14)
    assert r.overall.recall.value == 1.0 and r.overall.false_rejection.value == 0.0
    assert all(o.stage == "consensus" for o in outcomes if o.corrupted)
    assert r.judged == Rate(20, 20) and r.extracted == Rate(60, 60)
    assert fake.calls == [3, 3, 3] and fake.updates == 0  # three steps (8 + 8 + 4 cards), M or K answers, no training


@pytest.mark.parametrize("solver", ["reasoner", "checker"])
def test_a_solver_that_echoes_the_label_detects_nothing(domain: MathDomain, checker: AnswerChecker, solver: str) -> None:
    cards = draw_labelled_cards(domain, 12, 0.5, seed=6)
    fake = ScriptedSolver(cards, lambda c, j: c.label)
    outcomes = run_label_harness(cards, fake, HarnessSettings(solver=solver, n_answers=2), domain=domain,  # type: ignore[arg-type]
                                 checker=checker)
    r = summarize(outcomes)
    assert (r.overall.tp, r.overall.fp, r.overall.fn, r.overall.tn) == (0, 0, 6, 6)
    assert r.judged == Rate(12, 12) and not any(o.rejected for o in outcomes)


def test_a_split_vote_or_no_answers_rejects_nothing(domain: MathDomain, checker: AnswerChecker) -> None:
    cards = draw_labelled_cards(domain, 8, 0.5, seed=7)
    split = ScriptedSolver(cards, lambda c, j: c.truth if j % 2 else c.label)  # 2 of 4: no clear majority
    r = summarize(run_label_harness(cards, split, HarnessSettings(n_answers=4), domain=domain, checker=checker))
    assert r.overall.tp == 0 and r.overall.fp == 0 and r.judged == Rate(8, 8)
    silent = ScriptedSolver(cards, lambda c, j: None)
    r = summarize(run_label_harness(cards, silent, HarnessSettings(n_answers=4), domain=domain, checker=checker))
    assert r.overall.tp == 0 and r.judged == Rate(0, 8) and r.extracted == Rate(0, 32)


def test_label_only_corruption_is_caught_by_the_screen(domain: MathDomain, checker: AnswerChecker) -> None:
    cards = draw_labelled_cards(domain, 10, 0.4, seed=8, consistent=False)
    silent = ScriptedSolver(cards, lambda c, j: None)
    outcomes = run_label_harness(cards, silent, HarnessSettings(n_answers=2), domain=domain, checker=checker)
    for o in outcomes:
        if o.corrupted:
            assert o.stage == "screen" and "answer_inconsistent" in o.reasons and o.n_answers == 0
        else:
            assert not o.rejected and o.n_answers == 2
    assert summarize(outcomes).screen_reasons == {"answer_inconsistent": 4}


@pytest.mark.slow
def test_harness_runs_a_real_tiny_model(domain: MathDomain, checker: AnswerChecker, one_thread: None) -> None:
    import torch

    from synco.learn.hf_policy import HFPolicy
    from synco.core.policy import PolicyConfig
    from synco.core.sampling import SamplingParams
    from synco.learn.charlm import char_tokenizer, tiny_llama

    torch.manual_seed(0)
    tok = char_tokenizer()
    sampling = SamplingParams(max_new_tokens=8)
    policy = HFPolicy(tiny_llama(tok, seed=0, hidden_size=32, num_layers=2), tok,
                      PolicyConfig(model_path="tiny", device="cpu", trainable=False, sampling=sampling))
    before = {n: p.detach().clone() for n, p in policy.model.named_parameters()}
    cards = draw_labelled_cards(domain, 4, 0.5, seed=0)
    outcomes = run_label_harness(cards, policy, HarnessSettings(n_answers=2, sampling=sampling), domain=domain,
                                 checker=checker)
    assert [o.n_answers for o in outcomes] == [2, 2, 2, 2]  # every card reached consensus with K answers
    assert all(torch.equal(p, before[n]) for n, p in policy.model.named_parameters())  # nothing trained
