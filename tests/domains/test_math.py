"""The math domain: prompts (braces, system prompts), factors, the static generator, held-out set, consensus checker."""

from __future__ import annotations

import json
import random
from dataclasses import replace
from pathlib import Path

import pytest

from synco.grading.checker import AnswerChecker
from synco.grading.extract import extract_answer
from synco.grading.cards import parse_task_card
from synco.config import load_config
from synco.domains.base import Domain
from synco.cotrain.engine import CoTrainState, cotrain_step
from synco.cotrain.settings import StepSettings
from synco.core.policy import UpdateStats
from synco.core.sampling import Completion, SamplingParams
from synco.core.pool import TaskPool
from synco.core.prompts import PROMPTS_ENV, PromptError, load_prompt
from synco.core.records import CARD_FIELDS, TaskCard, TaskRecord, Verdict
from synco.core.report import CapabilityReport, ReasonCount, build_report
from synco.cotrain.stats import StepStats
from synco.learn.build import resolve_model_path
from synco.run.build import build_consensus_checker, build_domain
from synco.run.loop import progress_postfix
from synco.grading.verifier import TaskVerifier, VerifierConfig
from synco.domains.arith import ArithDomain
from synco.domains.math import (
    HELDOUT_BANK_PER_TOPIC,
    TEMPLATES,
    TOPICS,
    MathDomain,
    card_schema,
    difficulty_of,
    example_card,
    fmt,
    fraction_text,
    generate,
    in_heldout_bucket,
    problem_key,
    topic_of,
)


@pytest.fixture(autouse=True)
def _no_user_prompt_dir(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(PROMPTS_ENV, raising=False)


@pytest.fixture(scope="module")
def checker():  # noqa: ANN201 - a fixture
    with AnswerChecker() as c:
        yield c


def card(problem: str = "A shop sells 3 pens for 2 dollars. How much do 12 pens cost?", answer: str = "8", **kw: str) -> TaskCard:
    values = {f: "x" for f in CARD_FIELDS}
    values.update(problem=problem, solution="12/3*2 = \\boxed{" + answer + "}", final_answer=answer)
    values.update(kw)
    return TaskCard(**values)


# ----------------------------------------------------------------- protocol and prompts


def test_math_domain_implements_the_protocol_and_is_built_from_config() -> None:
    d = build_domain(load_config("smollm2"))
    assert isinstance(d, MathDomain) and isinstance(d, Domain)
    assert d.name == "math" and d.has_oracle is False and d.oracle(card()) is None
    assert isinstance(ArithDomain(), Domain)


def test_arith_sends_no_system_prompt() -> None:
    assert ArithDomain().synthesizer_system_prompt() is None and ArithDomain().reasoner_system_prompt() is None


def test_synthesizer_prompts_carry_role_goals_report_and_schema() -> None:
    d = MathDomain()
    system = d.synthesizer_system_prompt()
    assert system is not None and system == load_prompt("synthesizer_system")
    for goal in ("Well-posed", "exactly one correct final answer", "Non-trivial", "different from the recent tasks",
                 "weaknesses", "solved by some attempts and missed by others"):
        assert goal in system
    report = CapabilityReport(
        step=5, n_records=10, n_valid=4, valid_rate=0.4,
        top_reasons=[ReasonCount(code="answer_inconsistent", count=3), ReasonCount(code="weird_code", count=1)],
        recommendations=["target the Reasoner's weak spots: topic=algebra (0.10)"],
        recent_problems=["Solve for x: 2x + 1 = 7."],
    )
    prompt = d.synthesizer_prompt(report)
    assert report.render() in prompt
    assert "- answer_inconsistent (3): the boxed answer of the solution must equal final_answer" in prompt
    assert "- weird_code (1)" in prompt
    assert "- Solve for x: 2x + 1 = 7." in prompt
    assert all(example_card(g) in prompt for g in d.examples(report))  # the format, by example
    assert all(prompt.count(f'"{f}": ') == d.n_examples for f in CARD_FIELDS)
    empty = d.synthesizer_prompt(build_report([]))
    assert empty.count("- none yet") == 2


def test_rendering_never_mangles_latex_or_double_braces() -> None:
    d = MathDomain()
    nasty = r"Compute \frac{a}{b} with {{x}} and {{report}} and {0} {}"
    report = CapabilityReport(n_records=1, recommendations=[nasty], recent_problems=[nasty],
                              top_reasons=[ReasonCount(code="{{schema}}", count=1)])
    prompt = d.synthesizer_prompt(report)
    assert prompt.count(nasty) == 2  # the recommendation and the recent task, verbatim
    assert "- {{schema}} (1)" in prompt  # a value's placeholder is never substituted again
    assert prompt.count('"teaching_intent"') == d.n_examples
    assert r"\boxed{}" in prompt
    problem = r"Let $f(x) = \frac{x^{2}}{\sqrt{x}}$ and {{problem}}; find f(4)."
    rp = d.reasoner_prompt(problem)
    assert rp.startswith(problem + "\n") and "\\boxed{}" in rp and rp.count("{{problem}}") == 1


def test_reasoner_prompt_is_the_shipped_template_and_system_prompt_is_optional(tmp_path: Path) -> None:
    d = MathDomain()
    assert d.reasoner_prompt("What is 2+3?") == load_prompt("reasoner").replace("{{problem}}", "What is 2+3?")
    assert d.reasoner_system_prompt() is None  # the shipped reasoner_system.txt is empty
    (tmp_path / "reasoner_system.txt").write_text("Answer briefly.\n")
    (tmp_path / "synthesizer.txt").write_text("R: {{report}}\nS: {{schema}}\n")  # optional blocks dropped
    custom = MathDomain(prompts_dir=tmp_path)
    assert custom.reasoner_system_prompt() == "Answer briefly."
    assert custom.synthesizer_prompt("plain report").startswith("R: plain report\nS: {")
    assert custom.synthesizer_prompt("plain report").endswith(card_schema())
    (tmp_path / "synthesizer.txt").write_text("no placeholders here\n")
    with pytest.raises(PromptError, match="report"):
        MathDomain(prompts_dir=tmp_path)
    (tmp_path / "synthesizer.txt").write_text("{{report}} and nothing about the card\n")
    with pytest.raises(PromptError, match=r"\{\{schema\}\} or \{\{examples\}\}"):
        MathDomain(prompts_dir=tmp_path)


class RecordingPolicy:
    """A stand-in policy: records format_prompt arguments, returns scripted completions."""

    policy_version = 0  # a test double never steps its optimizer

    def __init__(self, texts=None, answer_fn=None):
        self.texts = list(texts or [])
        self.answer_fn = answer_fn
        self.formatted: list[tuple[str, str | None]] = []
        self.generated: list[tuple[list[str], int]] = []
        self.updates = 0

    def format_prompt(self, user_text, system=None):
        self.formatted.append((user_text, system))
        return f"<sys>{system}</sys><user>{user_text}</user>"

    def generate(self, prompts, n, params=None):
        self.generated.append((list(prompts), n))
        out = []
        for pi, p in enumerate(prompts):
            group = []
            for j in range(n):
                text = self.answer_fn(p, j) if self.answer_fn else self.texts[(pi * n + j) % len(self.texts)]
                group.append(Completion(text=text, prompt_ids=[1, 2], completion_ids=[3, 4], logprobs=[-0.5, -0.5],
                                        truncated=False, finish_reason="stop"))
            out.append(group)
        return out

    def update(self, batch):
        self.updates += 1
        return UpdateStats(loss=0.0, n_sequences=len(batch), n_tokens=2 * len(batch), n_skipped_zero_adv=0,
                           grad_norm=0.0, clip_frac=0.0, kl=0.0, lr=1e-6, nan_skipped=False, stepped=True)

    def trainable_parameters(self):
        return []


def make_state(tmp_path: Path, checker: AnswerChecker, synth, reasoner, consensus_checker=None, n_cards=3, k=2, m=3,
               mode="cotrain") -> CoTrainState:
    settings = StepSettings(mode=mode, n_cards=n_cards, k=k, group_factor="topic", consensus_m=m,
                            checker_sampling=SamplingParams(max_new_tokens=7))
    verifier = TaskVerifier(VerifierConfig(min_problem_chars=20, strict=True), checker=checker)
    return CoTrainState(settings=settings, domain=MathDomain(), synthesizer=synth, reasoner=reasoner,
                        verifier=verifier, checker=checker, pool=TaskPool(tmp_path / "pool.sqlite"),
                        report=build_report([]), rng=random.Random(0), consensus_checker=consensus_checker)


def raw_card(problem: str, answer: str, difficulty: str = "medium") -> str:
    values = {f: "x" for f in CARD_FIELDS}
    values.update(problem=problem, solution="Work it out: \\boxed{" + answer + "}", final_answer=answer,
                  difficulty_estimate=difficulty, teaching_intent="practice")
    return json.dumps(values)


CARDS = [
    raw_card("A fair coin is tossed 3 times. What is the probability of exactly 2 heads?", "3/8"),
    raw_card("Solve for x: 3x + 4 = 19. What is x?", "5", "easy"),
    raw_card("What is the remainder when 7^5 is divided by 10, written as a whole number?", "7", "hard"),
]


def test_engine_sends_both_system_prompts(tmp_path: Path, checker: AnswerChecker, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(PROMPTS_ENV, str(tmp_path))
    (tmp_path / "reasoner_system.txt").write_text("You solve problems.")
    synth = RecordingPolicy(CARDS)
    reasoner = RecordingPolicy(["\\boxed{5}", "no idea"])
    state = make_state(tmp_path, checker, synth, reasoner)
    stats = cotrain_step(state, 0)
    assert synth.formatted == [(state.domain.synthesizer_prompt(state.report), state.domain.synthesizer_system_prompt())]
    assert synth.formatted[0][1] is not None and "Synthesizer" in synth.formatted[0][1]
    assert reasoner.formatted and all(sys == "You solve problems." for _, sys in reasoner.formatted)
    assert {u for u, _ in reasoner.formatted} == {state.domain.reasoner_prompt(c.card.payload.prompt_text())
                                                 for c in state.pool.by_step(0) if c.card is not None}
    assert stats.n_valid >= 1


def test_factors_group_cards_by_topic_and_difficulty(tmp_path: Path, checker: AnswerChecker) -> None:
    synth = RecordingPolicy(CARDS)
    state = make_state(tmp_path, checker, synth, RecordingPolicy(["\\boxed{1}"]), n_cards=3)
    cotrain_step(state, 0)
    factors = {r.card.payload.prompt_text()[:12]: r.card.factors for r in state.pool.by_step(0) if r.card is not None}
    assert factors == {
        "A fair coin ": {"topic": "probability", "difficulty": "medium"},
        "Solve for x:": {"topic": "algebra", "difficulty": "easy"},
        "What is the ": {"topic": "number_theory", "difficulty": "hard"},
    }


@pytest.mark.parametrize("problem,intent,topic", [
    ("How many ways can 5 books be arranged on a shelf?", "", "combinatorics"),
    ("A circle has radius 3. What is its area divided by pi?", "", "geometry"),
    ("What is 15% of 80?", "", "fractions_percent"),
    ("A car travels at 60 km/h for 2 hours. How far does it go?", "", "rates"),
    ("The 5th term of the sequence 2, 5, 8, ... is what?", "", "sequences"),
    ("Is 91 a prime? Give its smallest prime factor.", "", "number_theory"),
    ("Compute 37 + 48 - 12.", "", "arithmetic"),
    ("Compute 37 + 48 - 12.", "probability warm-up", "arithmetic"),  # the problem outweighs the intent
    ("Find it.", "quadratic equations", "algebra"),  # only the intent speaks
    ("Tell me a story.", "", "other"),
])
def test_topic_classifier(problem: str, intent: str, topic: str) -> None:
    assert topic_of(problem, intent) == topic


@pytest.mark.parametrize("estimate,label", [
    ("easy", "easy"), ("Medium", "medium"), ("medium-hard", "hard"), ("too hard", "hard"), ("learnable", "medium"),
    ("3/10", "easy"), ("7/10", "hard"), ("0.5", "medium"), ("2", "medium"), ("9", "hard"), ("level 1", "easy"),
    ("", "unknown"), ("?", "unknown"), ("250", "unknown"),
])
def test_difficulty_buckets(estimate: str, label: str) -> None:
    assert difficulty_of(estimate) == label


def test_classifier_is_bounded_on_hostile_input() -> None:
    assert topic_of("probability " * 100_000) == "probability"
    assert difficulty_of("9" * 100_000) == "unknown"


# ----------------------------------------------------------------- generator, static cards, held-out


def test_every_family_is_classified_under_its_own_topic() -> None:
    rng = random.Random(0)
    assert {t.topic for t in TEMPLATES} == set(TOPICS)
    for spec in TEMPLATES:
        for _ in range(20):
            g = generate(rng, spec)
            assert topic_of(g.problem) == spec.topic, g.problem


def test_static_cards_pass_verification_with_exact_answers(checker: AnswerChecker) -> None:
    d = MathDomain()
    raws = d.static_cards(random.Random(3), 40)
    verifier = TaskVerifier(VerifierConfig(min_problem_chars=20, novelty_threshold=1.0, strict=True), checker=checker)
    for raw, (c, v) in zip(raws, verifier.verify_batch(raws)):
        assert v.valid, (v.reasons, raw)
        assert c is not None and d.reject_reason(c) is None
        assert checker.match(extract_answer(c.payload.solution_text()) or "", c.payload.claimed_answer())
    # deterministic in the rng
    assert d.static_cards(random.Random(3), 5) == raws[:5]


def test_generated_answers_are_exact() -> None:
    from fractions import Fraction

    assert fmt(7) == "7" and fmt(Fraction(3, 8)) == "0.375" and fraction_text(Fraction(3, 8)) == "3/8"
    assert fmt(Fraction(183, 2)) == "91.5" and fmt(Fraction(-1, 40)) == "-0.025" and fmt(Fraction(1, 3)) == "1/3"
    for spec in TEMPLATES:  # "give the answer as a fraction" problems get a/b answers
        g = generate(random.Random(5), spec)
        if "as a fraction" in g.problem:
            assert "." not in g.answer, g
    spec = next(t for t in TEMPLATES if t.make.__name__ == "_t_power_mod")
    g = generate(random.Random(1), spec)
    a, rest = g.problem.split("when ")[1].split("^")
    n, m = rest.split(" is divided by ")
    assert g.answer == str(pow(int(a), int(n), int(m.rstrip("?"))))


def test_heldout_is_disjoint_from_every_training_path() -> None:
    d = MathDomain()
    items = d.heldout(3, seed=7)
    assert len(items) == 3 * len(TOPICS) and {it.group for it in items} == set(TOPICS)
    assert items == d.heldout(3, seed=7) and items != d.heldout(3, seed=8)
    bank = {problem_key(g.problem) for gs in d.heldout_bank().values() for g in gs}
    assert len(bank) == HELDOUT_BANK_PER_TOPIC * len(TOPICS)
    assert all(problem_key(it.problem) in bank and in_heldout_bucket(it.problem) for it in items)
    # the static generator never writes one (it never draws from the bucket at all)
    for raw in d.static_cards(random.Random(0), 300):
        problem = json.loads(raw)["problem"]
        assert not in_heldout_bucket(problem) and problem_key(problem) not in bank
    # a Synthesizer card that copies a held-out problem (case and spacing changed) is refused
    it = items[0]
    assert d.reject_reason(card(problem="  " + it.problem.upper().replace(" ", "   "), answer=it.answer)) == "heldout_problem"
    assert d.reject_reason(card()) is None
    with pytest.raises(ValueError):
        d.heldout(HELDOUT_BANK_PER_TOPIC + 1, seed=0)


def test_static_mode_runs_on_math(tmp_path: Path, checker: AnswerChecker) -> None:
    reasoner = RecordingPolicy(answer_fn=lambda p, j: "\\boxed{0}" if j else "I think 3")
    synth = RecordingPolicy(["unused"])
    state = make_state(tmp_path, checker, synth, reasoner, n_cards=4, mode="static")
    state.verifier = TaskVerifier(VerifierConfig(min_problem_chars=20, novelty_threshold=1.0, strict=True), checker=checker)
    stats = cotrain_step(state, 0)
    assert stats.n_cards == 4 and synth.generated == [] and synth.updates == 0
    assert set(stats.groups) <= set(TOPICS)


# ----------------------------------------------------------------- consensus


def test_consensus_with_a_separate_checker(tmp_path: Path, checker: AnswerChecker) -> None:
    # the checker agrees with cards 0 and 1 and finds another answer for card 2 (a wrong reference)
    answers = {"coin": "\\boxed{3/8}", "Solve": "\\boxed{5}", "remainder": "\\boxed{3}"}

    def checker_answer(prompt: str, j: int) -> str:
        return next(a for key, a in answers.items() if key in prompt)

    consensus = RecordingPolicy(answer_fn=checker_answer)
    reasoner = RecordingPolicy(answer_fn=lambda p, j: "\\boxed{5}" if j == 0 else "\\boxed{4}")
    state = make_state(tmp_path, checker, RecordingPolicy(CARDS), reasoner, consensus_checker=consensus, m=3, k=2)
    stats = cotrain_step(state, 0)
    assert [n for _, n in consensus.generated] == [3]  # one batched call, M answers per valid card
    assert len(consensus.generated[0][0]) == 3
    assert all(sys is None for _, sys in consensus.formatted)  # the shipped reasoner system prompt is empty
    records = state.pool.by_step(0)
    assert [r.verdict.agreement for r in records] == [1.0, 1.0, 0.0]
    assert [r.valid for r in records] == [True, True, False]
    assert "consensus_disagrees" in records[2].verdict.reason_codes
    assert records[2].rollouts == []  # rejected before solving: no Reasoner rollouts
    assert len(reasoner.generated[0][0]) == 2 and all(len(r.rollouts) == 2 for r in records[:2])
    assert records[0].verdict.reliability == 1.0  # the Reasoner's own mixed results do not lower it
    assert stats.label_agreement == pytest.approx(2 / 3)
    assert stats.reasons.get("consensus_disagrees") == 1
    assert progress_postfix(stats)["agree"] == "0.67"


def test_progress_bar_shows_agreement_only_when_consensus_ran() -> None:
    assert "agree" not in progress_postfix(StepStats(step=0, mode="cotrain"))
    shown = progress_postfix(StepStats(step=0, mode="cotrain", label_agreement=0.5, valid_rate=0.25))
    assert shown["agree"] == "0.50" and shown["valid"] == "0.25"


def test_consensus_reusing_the_reasoner_attempts(tmp_path: Path, checker: AnswerChecker) -> None:
    reasoner = RecordingPolicy(answer_fn=lambda p, j: "\\boxed{9}")  # every attempt agrees on another answer
    state = make_state(tmp_path, checker, RecordingPolicy(CARDS), reasoner, k=2)
    stats = cotrain_step(state, 0)
    records = state.pool.by_step(0)
    assert all(not r.valid and "consensus_disagrees" in r.verdict.reason_codes for r in records)
    assert all(len(r.rollouts) == 2 for r in records)  # kept: every attempt is recorded
    assert stats.label_agreement == 0.0 and stats.n_valid == 0


def test_checker_is_built_only_when_it_applies(monkeypatch: pytest.MonkeyPatch) -> None:
    built = []
    monkeypatch.setattr("synco.run.build.build_policy", lambda cfg, model_path=None, role="agent", frozen=None: built.append(cfg) or "policy")
    math_cfg = load_config("smollm2", overrides=["consensus_solver=checker", "consensus_m=3"])
    assert build_consensus_checker(load_config("smollm2"), MathDomain()) is None
    assert build_consensus_checker(load_config("arith", overrides=["consensus_solver=checker"]), ArithDomain()) is None
    assert build_consensus_checker(math_cfg, MathDomain()) == "policy"
    assert built[-1].trainable is False and built[-1].model_path == "smollm2"
    custom = load_config("smollm2", overrides=["consensus_solver=checker", "checker.model_path=other",
                                               "checker.sampling.max_new_tokens=5"])
    build_consensus_checker(custom, MathDomain())
    assert built[-1].trainable is False and built[-1].model_path == "other" and built[-1].sampling.max_new_tokens == 5


# ----------------------------------------------------------------- config and presets


def test_presets_and_model_resolution() -> None:
    cfg = load_config("smollm2")
    assert cfg.domain == "math" and cfg.group_factor == "topic"
    assert cfg.synthesizer.model_path == cfg.reasoner.model_path == "smollm2"
    assert cfg.synthesizer.sampling.max_new_tokens <= 288 and cfg.reasoner.sampling.max_new_tokens <= 128
    assert cfg.synth_decoding == "card"  # cards end at their closing brace: the budget is a bound, not the length
    assert cfg.n_cards <= 8 and cfg.k <= 4 and cfg.heldout_per_group <= 2
    assert load_config("paper", overrides=["verifier.benchmark_paths=[]"]).domain == "math"  # no benchmark folder here
    assert resolve_model_path("Qwen/Qwen3-8B") == "Qwen/Qwen3-8B"  # not a preset: unchanged


def test_report_keeps_recent_valid_problems() -> None:
    def rec(i: int, valid: bool) -> TaskRecord:
        return TaskRecord(step=0, slot=i, raw="", card=card(problem=f"Problem number {i} about apples"),
                          verdict=Verdict(valid=valid))

    report = build_report([rec(i, i % 2 == 0) for i in range(10)])
    assert report.recent_problems == [f"Problem number {i} about apples" for i in (2, 4, 6, 8)]
    assert CapabilityReport.from_json(report.to_json()).recent_problems == report.recent_problems
    parsed = parse_task_card(raw_card("Solve for x: 3x + 4 = 19. What is x?", "5"))
    assert parsed.payload.claimed_answer() == "5"


# ----------------------------------------------------------------- the factor space (EvoSyn)


@pytest.mark.parametrize("problem,expected", [
    # numbers 12, 7, 3 -> 3 quantities, largest 12; 15 words
    ("A box holds 12 apples and 7 pears. How many fruits are in 3 boxes?",
     {"quantities": "3-4", "magnitude": "<100", "length": "short"}),
    # 2.5 is one number; the largest is 1000
    ("What is 2.5 times 1000?", {"quantities": "0-2", "magnitude": "1000+", "length": "short"}),
    # no numbers: no magnitude at all (the factor does not apply)
    ("Find the derivative of x squared.", {"quantities": "0-2", "length": "short"}),
    ("Add " + " and ".join(str(i) for i in range(1, 7)) + ".", {"quantities": "5+", "magnitude": "<10",
                                                                  "length": "short"}),
    (" ".join(["word"] * 30) + " 999", {"quantities": "0-2", "magnitude": "<1000", "length": "medium"}),
    (" ".join(["word"] * 60), {"quantities": "0-2", "length": "long"}),
])
def test_math_factor_extractors_on_hand_examples(problem: str, expected: dict[str, str]) -> None:
    from synco.evosyn.space import factor_values
    from synco.domains.math import MATH_FACTORS

    values = factor_values(problem, MATH_FACTORS)
    assert {k: v for k, v in values.items() if k != "topic"} == expected
    assert values["topic"] == topic_of(problem)  # from the problem alone, never the card's teaching intent


def test_math_factor_space_hooks_and_target_line() -> None:
    domain = MathDomain()
    assert domain.builtin_factors == ("topic",)
    assert [d.name for d in domain.factor_defs()] == ["topic", "quantities", "magnitude", "length"]
    assert set(domain.factor_defs()[0].buckets) == {*TOPICS, "other"}
    problem = domain.sample_any(random.Random(3))
    assert isinstance(problem, str) and problem == domain.sample_any(random.Random(3))
    report = build_report([])
    plain = domain.synthesizer_prompt(report)
    cell = (("topic", "geometry"), ("quantities", "3-4"))
    targeted = domain.synthesizer_prompt(report, target=cell)
    assert targeted.endswith("exactly these properties): topic=geometry, quantities=3-4")
    assert all(example_card(g) in targeted and g.topic == "geometry" for g in domain.examples(report, cell))
    assert targeted.startswith(plain.split("Example task cards")[0])  # only the examples and the target line differ
    assert domain.synthesizer_prompt(report, target=None) == plain


# ----------------------------------------------------------------- few-shot example cards


def test_example_cards_are_correct_cards_the_verifier_accepts(checker: AnswerChecker) -> None:
    """Each example is a generator problem: its answer is the exact one, its solution boxes it, the verifier passes it."""
    d = MathDomain()
    report = build_report([])
    shown = [g for step in range(6) for g in d.examples(report.model_copy(update={"step": step}))]
    assert len(shown) == 6 * d.n_examples >= 12
    verifier = TaskVerifier(VerifierConfig(min_problem_chars=20, strict=True), checker=checker)
    for g, (card, verdict) in zip(shown, verifier.verify_batch([example_card(g) for g in shown]), strict=True):
        assert card is not None and verdict.valid, (g.problem, verdict.reasons)
        assert card.payload.claimed_answer() == g.answer and extract_answer(card.payload.solution_text()) == g.answer
        assert checker.match(g.answer, g.answer) and not in_heldout_bucket(g.problem)
        exact = [spec for spec in TEMPLATES if spec.intent == g.intent]
        assert exact and generate(random.Random(0), exact[0]).topic == g.topic  # it came from a generator family
    assert len({g.problem for g in shown}) == len(shown)


def test_examples_depend_only_on_report_step_and_target() -> None:
    d, other = MathDomain(), MathDomain()
    report = build_report([])
    assert [g.problem for g in d.examples(report)] == [g.problem for g in other.examples(report)]
    later = report.model_copy(update={"step": 4})
    assert [g.problem for g in d.examples(later)] != [g.problem for g in d.examples(report)]
    for topic in ("geometry", "probability"):
        assert {g.topic for g in d.examples(report, target=(("topic", topic),))} == {topic}
    assert d.synthesizer_prompt(later) == other.synthesizer_prompt(later)  # a rebuilt prompt is the same prompt


def test_a_copied_example_with_another_answer_is_rejected() -> None:
    d = MathDomain()
    report = build_report([])
    assert d.reject_reason(card(problem=d.examples(report)[0].problem, answer="-1")) is None  # nothing shown yet
    d.synthesizer_prompt(report)
    shown = d.examples(report)
    wrong = "-1"
    assert all(g.answer != wrong for g in shown)
    assert d.reject_reason(card(problem=shown[0].problem, answer=wrong)) == "copied_example"
    assert d.reject_reason(card(problem="  " + shown[1].problem.upper() + " ", answer=wrong)) == "copied_example"
    assert d.reject_reason(card(problem=shown[0].problem, answer=shown[0].answer)) is None  # right answer: a correct card
    assert d.reject_reason(card(problem=shown[0].problem.replace("?", " exactly?"), answer=wrong)) is None  # a variant
    assert d.reject_reason(card()) is None
    d.synthesizer_prompt(report.model_copy(update={"step": 7}))  # a new report step forgets the old examples
    assert d.reject_reason(card(problem=shown[0].problem, answer=wrong)) is None


@pytest.mark.parametrize("answer, exact, same", [
    ("8", "8", True), (" 0.5", "1/2", True), ("2/4", "1/2", True), ("-3", "-3.0", True), ("1 / 2", "1/2", True),
    ("7", "8", False), ("1e999999", "1", False), ("x", "1", False), ("1/0", "1", False), ("9" * 50, "9" * 50, True),
])
def test_same_value_compares_plain_numbers_only(answer: str, exact: str, same: bool) -> None:
    from synco.domains.math import same_value

    assert same_value(answer, exact) is same


def test_engine_rejects_a_copied_example(tmp_path: Path, checker: AnswerChecker) -> None:
    d = MathDomain()
    g = d.examples(build_report([]))[0]
    copied = d.format_card(replace(g, answer=g.answer + "1"))  # the prompt's own example, with a wrong answer
    synth = RecordingPolicy([copied, CARDS[1]])
    state = make_state(tmp_path, checker, synth, RecordingPolicy(["\\boxed{5}"]), n_cards=2)
    stats = cotrain_step(state, 0)
    records = state.pool.by_step(0)
    assert [r.valid for r in records] == [False, True] and records[0].verdict.reasons[0] == "copied_example"
    assert stats.reasons.get("copied_example") == 1
