"""EvoSyn's rounds and RFT: round layout, what a task contributes to SFT, accumulation, GRPO per round."""

from __future__ import annotations

import dataclasses
import json
import random

import pytest

from synco.grading.answers import AnswerChecker
from synco.domains.base import reasoner_prompts
from synco.cotrain.engine import CoTrainState, StepPlan, StepSettings
from synco.core.policy import Completion, UpdateStats
from synco.core.pool import TaskPool
from synco.cotrain.protocols.config import RoundsConfig
from synco.cotrain.protocols.rounds import (
    reference_response,
    round_ends,
    round_of,
    round_plan,
    rounds_step,
    sft_completions,
    sft_examples,
    training_steps,
)
from synco.core.records import Rollout, TaskCard, TaskRecord, Verdict
from synco.core.report import build_report
from synco.grading.verifier import TaskVerifier, VerifierConfig
from synco.domains.arith import ArithDomain

DOMAIN = ArithDomain()


def _stats(**kw: object) -> UpdateStats:
    base = dict(loss=0.5, n_sequences=1, n_tokens=1, n_skipped_zero_adv=0, grad_norm=0.1, clip_frac=0.0, kl=0.0,
                lr=1e-3, nan_skipped=False, stepped=True)
    return UpdateStats(**{**base, **kw})  # type: ignore[arg-type]


class HalfRightReasoner:
    """A stand-in Reasoner: half of the attempts at a problem are right; records every update it is asked for."""

    def __init__(self) -> None:
        self.sft: list[tuple[list, float | None]] = []
        self.grpo: list[list] = []

    def format_prompt(self, text: str, system: str | None = None) -> str:
        return text

    def generate(self, prompts, n, params=None):  # noqa: ANN001, ANN201
        out = []
        for p in prompts:
            ans = int(DOMAIN.answer(p[len("Q:"):].split("\n")[0]))
            out.append([Completion(text=f"{ans if j < n // 2 else ans + 1}}}", prompt_ids=[1], completion_ids=[5, 6],
                                   logprobs=[-0.1, -0.1], truncated=False, finish_reason="stop") for j in range(n)])
        return out

    def update(self, batch):  # noqa: ANN001, ANN201
        self.grpo.append(list(batch))
        return _stats(n_sequences=len(batch))

    def sft_update(self, batch, lr=None):  # noqa: ANN001, ANN201
        self.sft.append((list(batch), lr))
        return _stats(n_sequences=len(batch))


class SeedRecordingReasoner(HalfRightReasoner):
    """HalfRightReasoner that takes per-request seeds (as HFPolicy and RayPolicy do) and records each request's."""

    def __init__(self) -> None:
        super().__init__()
        self.requests: list[tuple[int, int | None]] = []  # (rows asked for, seed)

    def generate(self, prompts, n, params=None, seed=None):  # noqa: ANN001, ANN201
        self.requests.append((len(prompts) * n, seed))
        return super().generate(prompts, n, params)


class DrawLog(random.Random):
    """The run's rng, logging the 63-bit draws (request seeds; sampling the corpus draws fewer bits)."""

    def __init__(self, seed: int) -> None:
        super().__init__(seed)
        self.seeds: list[int] = []

    def getrandbits(self, k: int) -> int:
        value = super().getrandbits(k)
        if k == 63:
            self.seeds.append(value)
        return value


def fixed_corpus_state(tmp_path, seed: int = 0, seed_per_request: bool = False) -> CoTrainState:  # noqa: ANN001
    """An rft-style state: 4 cards a step from a fixed corpus of 10, solved 4 times each; no models."""
    checker = AnswerChecker(use_math_verify=False)
    return CoTrainState(
        settings=StepSettings(mode="static", n_cards=4, k=4, seed_per_request=seed_per_request), domain=DOMAIN,
        synthesizer=None,  # type: ignore[arg-type]
        reasoner=SeedRecordingReasoner() if seed_per_request else HalfRightReasoner(),  # type: ignore[arg-type]
        verifier=TaskVerifier(VerifierConfig(max_problem_chars=40), checker=checker, oracle=DOMAIN.oracle),
        checker=checker, pool=TaskPool(tmp_path / f"pool-{seed}.sqlite"), report=build_report([]),
        rng=DrawLog(seed) if seed_per_request else random.Random(seed), corpus=DOMAIN.static_cards(random.Random(1), 10))


def run_rounds(state: CoTrainState, cfg: RoundsConfig, steps: int, seed: int = 0) -> list:
    return [rounds_step(state, step, cfg, total_steps=steps, seed=seed, protocol="rft") for step in range(steps)]


def expected_pairs(state: CoTrainState, steps: range) -> set[tuple[str, str]]:
    """(prompt, completion) of every valid task of ``steps`` with a correct attempt, from the pool."""
    out = set()
    for step in steps:
        for rec in state.pool.by_step(step):
            if rec.valid and any(r.correct for r in rec.rollouts):
                out.add((DOMAIN.reasoner_prompt(rec.card.problem) + "\\boxed{", DOMAIN.answer(rec.card.problem) + "}"))
    return out


# --------------------------------------------------------------------------- the layout of rounds


def test_round_layout() -> None:
    cfg = RoundsConfig(steps_per_round=3)
    assert [round_of(s, cfg) for s in range(7)] == [0, 0, 0, 1, 1, 1, 2]
    assert [s for s in range(7) if round_ends(s, cfg, total_steps=7)] == [2, 5, 6]  # the last step closes round 2
    assert training_steps(5, cfg) == range(3, 6)
    assert training_steps(5, cfg.model_copy(update={"accumulate": True})) == range(0, 6)
    assert training_steps(6, cfg) == range(6, 7)


def test_a_rounds_step_plans_collection_then_training_and_never_updates_the_reasoner_in_the_step() -> None:
    cfg = RoundsConfig(steps_per_round=2)
    plans = [round_plan(s, cfg, total_steps=3, protocol="rft") for s in range(3)]
    assert plans == [StepPlan(update_reasoner=False, protocol="rft", round=0, phase="collect"),
                     StepPlan(update_reasoner=False, protocol="rft", round=0, phase="train"),
                     StepPlan(update_reasoner=False, protocol="rft", round=1, phase="train")]  # the run's last step
    assert all(p.update_synthesizer for p in plans)  # the Synthesizer trains as its mode says


# --------------------------------------------------------------------------- what a task contributes


def _card(problem: str) -> TaskCard:
    return TaskCard.model_validate_json(DOMAIN.format_card(problem, "L1", DOMAIN.answer(problem)))


def _record(problem: str, texts: list[tuple[str, bool, bool]], valid: bool = True) -> TaskRecord:
    rollouts = [Rollout(text=t, correct=ok, truncated=cut) for t, ok, cut in texts]
    return TaskRecord(step=0, slot=0, raw="", card=_card(problem), rollouts=rollouts,
                      verdict=Verdict(valid=valid, reference=DOMAIN.answer(problem)))


def test_sft_completions_keep_distinct_correct_untruncated_attempts_without_the_prefix() -> None:
    rec = _record("15+43", [("\\boxed{57}", False, False), ("\\boxed{58}", True, False), ("\\boxed{58}", True, False),
                            ("\\boxed{58}}}}", True, True),  # truncated: left out even though it was graded correct
                            ("\\boxed{ 58}", True, False), ("58", True, False)])  # no prefix: not a continuation
    assert sft_completions(rec, DOMAIN, RoundsConfig()) == ["58}"]
    assert sft_completions(rec, DOMAIN, RoundsConfig(per_task=5)) == ["58}", " 58}"]
    assert sft_completions(rec, DOMAIN, RoundsConfig(target="reference")) == ["58}"]
    wrong_only = _record("15+43", [("\\boxed{57}", False, False)])
    assert sft_completions(wrong_only, DOMAIN, RoundsConfig()) == []
    assert sft_completions(wrong_only, DOMAIN, RoundsConfig(target="reference")) == ["58}"]  # the verified answer
    invalid = _record("15+43", [("\\boxed{58}", True, False)], valid=False)
    assert sft_completions(invalid, DOMAIN, RoundsConfig(target="reference")) == []


def test_reference_response_uses_the_domains_answer_format_else_solution_and_box() -> None:
    card = _card("623*7")
    assert reference_response(DOMAIN, card, "4361") == "\\boxed{4361}"
    plain = object()  # a domain without format_reasoner_answer
    assert reference_response(plain, card, "4361") == card.solution.strip() + "\n\n\\boxed{4361}"  # type: ignore[arg-type]


def test_sft_examples_are_distinct_and_prompted_as_solve_prompts() -> None:
    reasoner = HalfRightReasoner()
    records = [_record("15+43", [("\\boxed{58}", True, False)]), _record("15+43", [("\\boxed{58}", True, False)]),
               _record("623*7", [("\\boxed{4361}", True, False)])]
    examples = sft_examples(records, reasoner, DOMAIN, RoundsConfig())  # type: ignore[arg-type]
    assert [(e.prompt, e.completion) for e in examples] == [("Q:15+43\nA:\\boxed{", "58}"),
                                                            ("Q:623*7\nA:\\boxed{", "4361}")]
    solve_prompts = reasoner_prompts(reasoner, DOMAIN, ["15+43", "623*7"])  # type: ignore[arg-type]
    assert [e.prompt for e in examples] == solve_prompts


# --------------------------------------------------------------------------- rounds on a fixed corpus


@pytest.mark.parametrize("accumulate", [False, True])
def test_rounds_accumulate_data_as_configured(tmp_path, accumulate: bool) -> None:  # noqa: ANN001
    state = fixed_corpus_state(tmp_path)
    cfg = RoundsConfig(steps_per_round=2, batch_size=1000, accumulate=accumulate, lr=0.01)
    stats = run_rounds(state, cfg, steps=4)
    reasoner = state.reasoner
    assert reasoner.grpo == []  # the Reasoner never takes a GRPO step: it only solves while collecting
    assert [(s.round, s.phase) for s in stats] == [(0, "collect"), (0, "train"), (1, "collect"), (1, "train")]
    assert [s.round_examples is not None for s in stats] == [False, True, False, True]
    assert len(reasoner.sft) == 2 and all(lr == 0.01 for _, lr in reasoner.sft)
    first, second = ({(e.prompt, e.completion) for e in batch} for batch, _ in reasoner.sft)
    assert first == expected_pairs(state, range(0, 2)) and first
    assert second == expected_pairs(state, range(0 if accumulate else 2, 4))
    assert stats[3].round_examples == len(reasoner.sft[1][0]) == len(second)  # distinct pairs only
    if accumulate:
        assert first <= second
    # the pool records every step's round and phase
    layout = [(0, "collect"), (0, "train"), (1, "collect"), (1, "train")]
    assert [m for _, m in state.pool.steps_metrics()] == [{"protocol": "rft", "round": r, "phase": p} for r, p in layout]
    line = json.loads(stats[3].model_dump_json())
    assert (line["protocol"], line["round"], line["phase"], line["round_updates"]) == ("rft", 1, "train", 1)


def test_epochs_and_batches_are_shuffled_from_the_seed_and_the_round(tmp_path) -> None:  # noqa: ANN001
    cfg = RoundsConfig(steps_per_round=3, batch_size=2, epochs=2)
    a, b = fixed_corpus_state(tmp_path, seed=0), fixed_corpus_state(tmp_path, seed=1)
    b.rng = random.Random(0)  # the same tasks in both
    run_rounds(a, cfg, steps=3)
    run_rounds(b, cfg, steps=3)
    batches = [[(e.prompt, e.completion) for e in batch] for batch, _ in a.reasoner.sft]
    assert batches == [[(e.prompt, e.completion) for e in batch] for batch, _ in b.reasoner.sft]
    c = fixed_corpus_state(tmp_path, seed=2)
    c.rng = random.Random(0)
    run_rounds(c, cfg, steps=3, seed=5)  # another run seed: the same examples, shuffled otherwise
    assert batches != [[(e.prompt, e.completion) for e in batch] for batch, _ in c.reasoner.sft]
    n = len(expected_pairs(a, range(3)))
    assert sum(map(len, batches)) == 2 * n and all(len(x) <= 2 for x in batches)
    assert [sorted(x) for x in (sum(batches[:len(batches) // 2], []), sum(batches[len(batches) // 2:], []))] \
        == [sorted(expected_pairs(a, range(3)))] * 2  # each epoch passes over every example once


def test_grpo_rounds_take_fresh_attempts_at_the_rounds_tasks(tmp_path) -> None:  # noqa: ANN001
    state = fixed_corpus_state(tmp_path)
    cfg = RoundsConfig(steps_per_round=2, update="grpo", batch_size=3)
    stats = run_rounds(state, cfg, steps=2)
    tasks = {r.card.problem for s in range(2) for r in state.pool.by_step(s) if r.valid}
    batches = state.reasoner.grpo
    assert state.reasoner.sft == [] and len(batches) == -(-len(tasks) // 3)
    assert sum(len(b) for b in batches) == 4 * len(tasks) == stats[1].round_rollouts
    for b in batches:  # each task's 4 attempts: half right, so two equal positive and two equal negative advantages
        adv = sorted(e.advantage for e in b[:4])
        assert adv[0] == adv[1] == -adv[2] == -adv[3] < 0
    assert stats[1].round_examples == len(tasks) and stats[1].round_updates == len(batches)


# --------------------------------------------------------------------------- request seeds and shared settings


def test_every_request_of_a_round_is_seeded_from_the_runs_rng_like_a_steps(tmp_path) -> None:  # noqa: ANN001
    """With seed_per_request, the round's own GRPO requests draw their seeds where the step's requests do:
    each request's seed is the run rng's next 63-bit draw (engine.request_seed), so a Ray run samples alike."""
    state = fixed_corpus_state(tmp_path, seed_per_request=True)
    cfg = RoundsConfig(steps_per_round=2, update="grpo", batch_size=3)
    stats = run_rounds(state, cfg, steps=2)
    requests = state.reasoner.requests
    n_tasks = stats[1].round_examples
    assert n_tasks > 3  # the round's update takes more than one request
    steps_rows = [4 * stats[s].n_valid for s in range(2)]
    round_rows = [4 * min(3, n_tasks - i) for i in range(0, n_tasks, 3)]
    assert [rows for rows, _ in requests] == steps_rows + round_rows  # two steps' attempts, then the round's
    assert [seed for _, seed in requests] == state.rng.seeds  # every seed drawn, in order, none left unused
    assert len(set(state.rng.seeds)) == len(requests)


def test_without_seed_per_request_a_round_draws_nothing_from_the_runs_rng(tmp_path) -> None:  # noqa: ANN001
    """The default path is as before: no seed is passed, and the round's update leaves the run's rng alone."""
    cfg = RoundsConfig(steps_per_round=2, update="grpo", batch_size=3)
    state = fixed_corpus_state(tmp_path)
    run_rounds(state, cfg, steps=1)  # step 0 collects only
    after_collect = state.rng.getstate()
    state.reasoner.generate = lambda prompts, n, params=None: HalfRightReasoner.generate(  # no seed= accepted
        state.reasoner, prompts, n, params)
    rounds_step(state, 1, cfg, total_steps=2, seed=0, protocol="rft")
    replay = fixed_corpus_state(tmp_path, seed=1)
    replay.rng.setstate(after_collect)
    replay.rng.sample(replay.corpus, 4)  # what step 1 itself draws: its 4 cards
    assert state.rng.getstate() == replay.rng.getstate()


def test_a_protocol_leaves_the_runs_settings_as_they_were(tmp_path) -> None:  # noqa: ANN001
    state = fixed_corpus_state(tmp_path)
    before = state.settings
    copy = dataclasses.replace(before)
    run_rounds(state, RoundsConfig(steps_per_round=2), steps=2)
    assert state.settings is before and state.settings == copy
    with pytest.raises(dataclasses.FrozenInstanceError):
        state.settings.k = 2  # type: ignore[misc]
