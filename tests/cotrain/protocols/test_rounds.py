"""EvoSyn's rounds and RFT: round layout, what a task contributes to SFT, accumulation, GRPO per round."""

from __future__ import annotations

import dataclasses
import json
import random
import sqlite3
from types import SimpleNamespace

import pytest

import torch

from synco.grading.checker import AnswerChecker
from synco.config import load_config
from synco.domains.base import reasoner_prompts, solve
from synco.cotrain.engine import CoTrainState
from synco.cotrain.settings import StepPlan, StepSettings
from synco.rollout.attempts import AnswerSolver, Task
from synco.learn.hf_policy import HFPolicy
from synco.learn.models import unavailable_reason
from synco.core.policy import GRPOConfig, PolicyConfig, UpdateStats
from synco.core.sampling import Completion, Experience, SamplingParams
from synco.core.pool import TaskPool
from synco.cotrain.protocols.config import SFT_LR, RoundsConfig
from synco.cotrain.protocols.rounds import (
    SFTCompletion,
    reference_response,
    round_ends,
    round_of,
    round_plan,
    sft_completions,
    sft_examples,
    training_steps,
)
from synco.core.sampling import SFTExample
from synco.cotrain.protocols.rft import RFT
from synco.cotrain.protocols.rounds import Rounds
from synco.run.steps import protocol_step
from synco.core.records import CARD_FIELDS, Attempt, TaskCard, TaskRecord, Verdict
from synco.core.report import build_report
from synco.core.rewards import ReasonerRewardConfig
from synco.grading.verifier import TaskVerifier, VerifierConfig
from synco.domains.arith import ArithDomain
from synco.learn.charlm import tiny_llama

DOMAIN = ArithDomain()


def rounds_step(state: CoTrainState, step: int, cfg: RoundsConfig, total_steps: int, seed: int,
                protocol: str = "rounds"):  # noqa: ANN201
    """One step of the run as the loop assembles it from the protocol object (rounds, or rft)."""
    made = (RFT if protocol == "rft" else Rounds)(steps=total_steps, rounds=cfg, seed=seed)
    return protocol_step(made)(state, step)
_SMOL = unavailable_reason("smollm2")


def _stats(**kw: object) -> UpdateStats:
    base = dict(loss=0.5, n_sequences=1, n_tokens=1, n_skipped_zero_adv=0, grad_norm=0.1, clip_frac=0.0, kl=0.0,
                lr=1e-3, nan_skipped=False, stepped=True)
    return UpdateStats(**{**base, **kw})  # type: ignore[arg-type]


class HalfRightReasoner:
    """A stand-in Reasoner: half of the attempts at a problem are right; records every update it is asked for."""

    policy_version = 0  # a test double never steps its optimizer

    def __init__(self) -> None:
        self.sft: list[tuple[list, float | None]] = []
        self.grpo: list[list] = []
        self.published: list[int] = []

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

    def publish(self) -> int:
        self.published.append(len(self.grpo))  # the updates taken when it was published
        return self.policy_version


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


def fixed_corpus_state(tmp_path, seed: int = 0, seed_per_request: bool = False, reasoner: object = None,  # noqa: ANN001
                       settings: StepSettings | None = None) -> CoTrainState:
    """An rft-style state: 4 cards a step from a fixed corpus of 10, solved 4 times each; no models by default."""
    checker = AnswerChecker(use_math_verify=False)
    default_reasoner = SeedRecordingReasoner() if seed_per_request else HalfRightReasoner()
    return CoTrainState(
        settings=settings or StepSettings(mode="static", n_cards=4, k=4, seed_per_request=seed_per_request),
        domain=DOMAIN,
        synthesizer=None,  # type: ignore[arg-type]
        reasoner=reasoner or default_reasoner,  # type: ignore[arg-type]
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
                out.add((DOMAIN.reasoner_prompt(rec.card.payload.prompt_text()) + "\\boxed{", DOMAIN.answer(rec.card.payload.prompt_text()) + "}"))
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


def _record(problem: str, texts: list[tuple[str, bool, bool]], valid: bool = True,
            ids: list[list[int] | None] | None = None) -> TaskRecord:
    ids = ids or [None] * len(texts)
    rollouts = [Attempt(text=t, correct=ok, truncated=cut, completion_ids=i) for (t, ok, cut), i in zip(texts, ids)]
    return TaskRecord(step=0, slot=0, raw="", card=_card(problem), rollouts=rollouts,
                      verdict=Verdict(valid=valid, reference=DOMAIN.answer(problem)))


def texts(completions: list[SFTCompletion]) -> list[str]:
    return [c.text for c in completions]


def test_sft_completions_keep_distinct_correct_untruncated_attempts_without_the_prefix() -> None:
    rec = _record("15+43", [("\\boxed{57}", False, False), ("\\boxed{58}", True, False), ("\\boxed{58}", True, False),
                            ("\\boxed{58}}}}", True, True),  # truncated: left out even though it was graded correct
                            ("\\boxed{ 58}", True, False), ("58", True, False)])  # no prefix: not a continuation
    assert texts(sft_completions(rec, DOMAIN, RoundsConfig())) == ["58}"]
    assert texts(sft_completions(rec, DOMAIN, RoundsConfig(per_task=5))) == ["58}", " 58}"]
    assert sft_completions(rec, DOMAIN, RoundsConfig(target="reference")) == [SFTCompletion("58}", None)]
    wrong_only = _record("15+43", [("\\boxed{57}", False, False)])
    assert sft_completions(wrong_only, DOMAIN, RoundsConfig()) == []
    assert texts(sft_completions(wrong_only, DOMAIN, RoundsConfig(target="reference"))) == ["58}"]  # verified answer
    invalid = _record("15+43", [("\\boxed{58}", True, False)], valid=False)
    assert sft_completions(invalid, DOMAIN, RoundsConfig(target="reference")) == []


def test_sft_completions_carry_the_ids_the_attempt_was_sampled_as() -> None:
    # the same text sampled twice as different ids: the first attempt's ids go with the text
    rec = _record("15+43", [("\\boxed{57}", False, False), ("\\boxed{58}", True, False), ("\\boxed{58}", True, False),
                            ("\\boxed{ 58}", True, False)],
                  ids=[[9, 9, 2], [40, 41, 42, 2], [40, 99, 2], None])  # the last: stored without ids (old pool)
    assert sft_completions(rec, DOMAIN, RoundsConfig(per_task=5)) == [SFTCompletion("58}", (40, 41, 42, 2)),
                                                                     SFTCompletion(" 58}", None)]


def test_an_episode_is_trained_as_it_ran_with_the_agents_ids_only() -> None:
    """A correct episode contributes its ids (agent and environment turns in order) and the mask that trains the
    agent's ids; one stored without ids cannot be rebuilt token for token and is left out."""
    from synco.core.episodes import Turn

    def episode(text: str, ok: bool, ids: list[int] | None, split: tuple[int, int, int]) -> Attempt:
        a, e, b = split
        turns = [Turn(role="agent", text="f(x)", n_tokens=a), Turn(role="env", text="=1", n_tokens=e),
                 Turn(role="agent", text=text, n_tokens=b)]
        return Attempt(text="f(x)=1" + text, correct=ok, completion_ids=ids, turns=turns, finish="done")

    rec = _record("15+43", [])
    rec = rec.model_copy(update={"rollouts": [
        episode("done(1)", False, [7, 8, 9, 5, 3], (2, 1, 2)),  # wrong: never trained
        episode("done(2)", True, [7, 8, 9, 4, 3], (2, 1, 2)),
        episode("done(3)", True, None, (2, 1, 2)),  # no ids stored
        episode("done(2)", True, [7, 8, 9, 6, 3], (2, 1, 2)),  # the same text again: the first one's ids
    ]})
    acting = SimpleNamespace(reasoner_response_prefix="")  # an episode's first turn starts after the prompt
    assert sft_completions(rec, acting, RoundsConfig(per_task=5)) == [  # type: ignore[arg-type]
        SFTCompletion("f(x)=1done(2)", (7, 8, 9, 4, 3), (1, 1, 0, 1, 1))]


def test_a_corrected_cards_solution_is_no_reference_response() -> None:
    """target=reference on a domain that builds the response from the card's solution: where the oracle corrected
    the card's answer that solution argues for the wrong one, so the task contributes nothing."""
    plain = SimpleNamespace(reasoner_response_prefix="")  # no format_reasoner_answer
    rec = _record("15+43", [("58", True, False)])
    corrected = rec.model_copy(update={"verdict": rec.verdict.model_copy(
        update={"reasons": ["reference_corrected: card=57 oracle=58"]})})
    assert texts(sft_completions(rec, plain, RoundsConfig(target="reference"))) == [  # type: ignore[arg-type]
        rec.card.payload.solution_text().strip() + "\n\n\\boxed{58}"]
    assert sft_completions(corrected, plain, RoundsConfig(target="reference")) == []  # type: ignore[arg-type]
    assert texts(sft_completions(corrected, DOMAIN, RoundsConfig(target="reference"))) == ["58}"]  # answer only


def test_reference_response_uses_the_domains_answer_format_else_solution_and_box() -> None:
    card = _card("623*7")
    assert reference_response(DOMAIN, card, "4361") == "\\boxed{4361}"
    plain = object()  # a domain without format_reasoner_answer
    assert reference_response(plain, card, "4361") == card.payload.solution_text().strip() + "\n\n\\boxed{4361}"  # type: ignore[arg-type]


def test_sft_examples_are_distinct_and_prompted_as_solve_prompts() -> None:
    reasoner = HalfRightReasoner()
    records = [_record("15+43", [("\\boxed{58}", True, False)]), _record("15+43", [("\\boxed{58}", True, False)]),
               _record("623*7", [("\\boxed{4361}", True, False)])]
    examples = sft_examples(records, reasoner, DOMAIN, RoundsConfig())  # type: ignore[arg-type]
    assert [(e.prompt, e.completion) for e in examples] == [("Q:15+43\nA:\\boxed{", "58}"),
                                                            ("Q:623*7\nA:\\boxed{", "4361}")]
    solve_prompts = reasoner_prompts(reasoner, DOMAIN, ["15+43", "623*7"])  # type: ignore[arg-type]
    assert [e.prompt for e in examples] == solve_prompts
    sampled = [_record("15+43", [("\\boxed{58}", True, False)], ids=[[7, 8, 2]]),
               _record("15+43", [("\\boxed{58}", True, False)], ids=[[7, 3, 8, 2]])]  # the same pair again: first kept
    assert [(e.completion, e.completion_ids) for e in sft_examples(sampled, reasoner, DOMAIN, RoundsConfig())] == [
        ("58}", (7, 8, 2))]  # type: ignore[arg-type]


# --------------------------------------------------------------------------- rounds on a fixed corpus


@pytest.mark.parametrize("accumulate", [False, True])
def test_rounds_accumulate_data_as_configured(tmp_path, accumulate: bool) -> None:  # noqa: ANN001
    state = fixed_corpus_state(tmp_path)
    cfg = RoundsConfig(steps_per_round=2, batch_size=1000, accumulate=accumulate, lr=0.01)
    stats = run_rounds(state, cfg, steps=4)
    reasoner = state.reasoner
    assert reasoner.grpo == []  # the Reasoner never takes a GRPO step: it only solves while collecting
    assert [(s.round, s.phase) for s in stats] == [(0, "collect"), (0, "train"), (1, "collect"), (1, "train")]
    assert [s.training is not None for s in stats] == [False, True, False, True]
    assert len(reasoner.sft) == 2 and all(lr == 0.01 for _, lr in reasoner.sft)
    assert all(e.completion_ids == (5, 6) for batch, _ in reasoner.sft for e in batch)  # the sampled ids, from the pool
    assert [s.training and s.training.round_retokenized for s in stats] == [None, 0, None, 0]
    first, second = ({(e.prompt, e.completion) for e in batch} for batch, _ in reasoner.sft)
    assert first == expected_pairs(state, range(0, 2)) and first
    assert second == expected_pairs(state, range(0 if accumulate else 2, 4))
    assert stats[3].training.round_examples == len(reasoner.sft[1][0]) == len(second)  # distinct pairs only
    if accumulate:
        assert first <= second
    # the pool records every step's round and phase
    layout = [(0, "collect"), (0, "train"), (1, "collect"), (1, "train")]
    assert [m for _, m in state.pool.steps_metrics()] == [{"protocol": "rft", "round": r, "phase": p} for r, p in layout]
    line = json.loads(stats[3].model_dump_json())
    assert (line["protocol"], line["round"], line["phase"], line["round_updates"]) == ("rft", 1, "train", 1)


def test_the_sft_rate_is_rounds_sft_lr(tmp_path) -> None:  # noqa: ANN001
    state = fixed_corpus_state(tmp_path)
    rounds_step(state, 0, RoundsConfig(steps_per_round=1), total_steps=2, seed=0)
    rounds_step(state, 1, RoundsConfig(steps_per_round=1, sft_lr=None), total_steps=2, seed=0)
    assert [lr for _, lr in state.reasoner.sft] == [SFT_LR, None]  # None: the policy's scheduled (GRPO) rate


def test_attempts_of_a_pool_without_ids_are_re_tokenised_counted_and_warned(tmp_path) -> None:  # noqa: ANN001
    state = fixed_corpus_state(tmp_path)
    cfg = RoundsConfig(steps_per_round=2, batch_size=1000)
    rounds_step(state, 0, cfg, total_steps=2, seed=0, protocol="rft")  # step 0 collects
    with sqlite3.connect(state.pool.path) as db:  # as a pool written before ids were kept would hold them
        db.execute("UPDATE rollouts SET token_ids = NULL")
    with pytest.warns(UserWarning, match=r"round 0: \d+ of \d+ SFT attempts have no stored token ids"):
        stats = rounds_step(state, 1, cfg, total_steps=2, seed=0, protocol="rft")
    [(batch, _)] = state.reasoner.sft
    old = {e.completion for e in batch if e.completion_ids is None}
    assert old and stats.training.round_retokenized == len(old) < len(batch)  # step 1's attempts still have their ids
    assert {e.completion_ids for e in batch if e.completion_ids is not None} == {(5, 6)}


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
    tasks = {r.card.payload.prompt_text() for s in range(2) for r in state.pool.by_step(s) if r.valid}
    batches = state.reasoner.grpo
    assert state.reasoner.sft == [] and len(batches) == -(-len(tasks) // 3)
    assert sum(len(b) for b in batches) == 4 * len(tasks) == stats[1].training.round_rollouts
    for b in batches:  # each task's 4 attempts: half right, so two equal positive and two equal negative advantages
        adv = sorted(e.advantage for e in b[:4])
        assert adv[0] == adv[1] == -adv[2] == -adv[3] < 0
    assert stats[1].training.round_examples == len(tasks) and stats[1].training.round_updates == len(batches)
    assert state.reasoner.published == list(range(1, len(batches) + 1))  # each update published before the next samples


# --------------------------------------------------------------------------- request seeds and shared settings


def test_every_request_of_a_round_is_seeded_from_the_runs_rng_like_a_steps(tmp_path) -> None:  # noqa: ANN001
    """With seed_per_request, the round's own GRPO requests draw their seeds where the step's requests do:
    each request's seed is the run rng's next 63-bit draw (engine.request_seed), so a Ray run samples alike."""
    state = fixed_corpus_state(tmp_path, seed_per_request=True)
    cfg = RoundsConfig(steps_per_round=2, update="grpo", batch_size=3)
    stats = run_rounds(state, cfg, steps=2)
    requests = state.reasoner.requests
    n_tasks = stats[1].training.round_examples
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
# --------------------------------------------------------------------------- SFT trains the sampled ids (real policies)


def spy_on(policy: HFPolicy) -> tuple[list[Completion], list[Experience]]:
    """Record every completion ``policy`` samples and every row its ``sft_update`` trains (the real methods run)."""
    sampled: list[Completion] = []
    trained: list[Experience] = []
    generate, sft_update = policy.generate, policy.sft_update

    def recording_generate(prompts, n, params=None, seed=None):  # noqa: ANN001, ANN202
        out = generate(prompts, n, params, seed=seed)
        sampled.extend(c for group in out for c in group)
        return out

    def recording_sft_update(batch, lr=None):  # noqa: ANN001, ANN202
        trained.extend(policy.encode_sft(e) for e in batch)
        return sft_update(batch, lr)

    policy.generate, policy.sft_update = recording_generate, recording_sft_update  # type: ignore[method-assign]
    return sampled, trained


@pytest.mark.slow
def test_a_round_trains_the_ids_the_default_worlds_reasoner_sampled(tmp_path, one_thread) -> None:  # noqa: ANN001
    from synco.learn.build import build_policy

    cfg = load_config("arith")
    reasoner = build_policy(cfg.reasoner)
    sampled, trained = spy_on(reasoner)
    settings = StepSettings(mode="static", n_cards=8, k=4, reasoner_sampling=cfg.reasoner.sampling)
    state = fixed_corpus_state(tmp_path, reasoner=reasoner, settings=settings)
    [stats] = run_rounds(state, RoundsConfig(steps_per_round=1, per_task=4, sft_lr=cfg.rounds.sft_lr), steps=1)
    assert stats.training.round_updates == 1 and stats.training.round_retokenized == 0 and stats.training.round_examples == len(trained) > 0
    pairs = {(tuple(c.prompt_ids), tuple(c.completion_ids)) for c in sampled if not c.truncated}
    assert all((tuple(r.prompt_ids), tuple(r.completion_ids)) in pairs for r in trained)  # exactly as sampled
    assert all(r.completion_ids[-1] in reasoner.eos_ids for r in trained)  # with the EOS that stopped it
    # the prefilled "\boxed{" is the prompt's: the trained completion starts after it
    assert all(reasoner.tokenizer.decode(r.prompt_ids).endswith("\\boxed{") for r in trained)


def _smollm2_tokenizer():  # noqa: ANN202
    """SmolLM2's BPE tokenizer alone: the converted folder when cached, else read from the package's GGUF
    (~7 s; converting the weights as well would take 15-80 s)."""
    from transformers import AutoTokenizer

    from synco.learn.models import find_gguf, preset_cache_dir

    cached = preset_cache_dir("smollm2")
    if (cached / "config.json").is_file():
        return AutoTokenizer.from_pretrained(str(cached))
    gguf = find_gguf("smollm2")
    return AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)


@pytest.fixture(scope="module")
def smol_tokenizer():  # noqa: ANN201
    return _smollm2_tokenizer()


@pytest.fixture()
def smol_policy(smol_tokenizer) -> HFPolicy:  # noqa: ANN001
    """A tiny random Llama over SmolLM2's real tokenizer and chat template: the tokenisation is the real model's."""
    tok = smol_tokenizer
    model = tiny_llama(tok, seed=0, hidden_size=16, num_layers=1, num_heads=2)
    return HFPolicy(model, tok, PolicyConfig(model_path="smollm2-tokenizer", device="cpu", grpo=GRPOConfig(lr=1e-3)))


ROUGH_TEXTS = (
    "x = 3 , y = 4 .",  # spaces before punctuation: " ," and " ." are tokens of their own
    "The answer is 1234567 , not 12 345.",  # digits
    "\\frac{12}{34} + \\sqrt{2} = \\boxed{1.5}",  # LaTeX
    "<think>\nLet me think . 2 + 2 = 4\n</think>\n\\boxed{4}",  # a think block (no special tokens in SmolLM2)
)


def rough_samples(tok) -> list[list[int]]:  # noqa: ANN001
    """Completions a BPE model can sample that are not the canonical tokenisation of their own decoded text."""
    canon = [tok(t, add_special_tokens=False)["input_ids"] for t in ROUGH_TEXTS]
    im_end, im_start, endoftext = tok.convert_tokens_to_ids(["<|im_end|>", "<|im_start|>", "<|endoftext|>"])
    per_char = [[i for ch in t for i in tok(ch, add_special_tokens=False)["input_ids"]] + [im_end] for t in ROUGH_TEXTS]
    with_special = [c[:3] + [im_start] + c[3:] + [im_end] for c in canon]  # a special token the decoder drops
    other_eos = [c + [endoftext] for c in canon]  # stopped at another EOS id than the one re-tokenising appends
    return per_char + with_special + other_eos


@pytest.mark.slow
@pytest.mark.skipif(_SMOL is not None, reason=f"SmolLM2 tokenizer unavailable: {_SMOL}")
def test_sft_on_a_bpe_tokenizer_trains_the_sampled_ids_not_a_re_tokenisation(tmp_path, smol_policy, one_thread) -> None:  # noqa: ANN001, E501
    from synco.domains.math import MathDomain

    pol, tok, domain = smol_policy, smol_policy.tokenizer, MathDomain()
    samples = rough_samples(tok)
    texts_ = [tok.decode(ids, skip_special_tokens=True) for ids in samples]  # as the generator stores the text
    assert texts_ == list(ROUGH_TEXTS) * 3  # each decodes to its text exactly...
    retok = [tok(t, add_special_tokens=False)["input_ids"] + [pol.eos_ids[0]] for t in texts_]
    assert all(r != ids for r, ids in zip(retok, samples))  # ...and tokenising that text again gives other ids
    # one task per sample (the same text samples apart), its attempt correct and stopped, through the pool
    records = []
    for i, ids in enumerate(samples):
        card = TaskCard(**{name: f"{name} {i}" for name in CARD_FIELDS})
        records.append(TaskRecord(step=0, slot=i, raw="", card=card, verdict=Verdict(valid=True, reference="4"),
                                  rollouts=[Attempt(text=texts_[i], correct=True, n_tokens=len(ids),
                                                    completion_ids=ids)]))
    with TaskPool(tmp_path / "pool.sqlite") as pool:
        pool.record_step(0, records)
        back = pool.by_step(0, token_ids=True)
    examples = sft_examples(back, pol, domain, RoundsConfig())
    rows = [pol.encode_sft(e) for e in examples]
    assert [r.completion_ids for r in rows] == samples  # the SFT batch holds the sampled ids
    assert [pol.encode_sft(SFTExample(e.prompt, e.completion)).completion_ids for e in examples] == retok  # not these
    # the prompt ids are the ones sampling conditioned on: generate encodes the same prompt text the same way
    [[c]] = solve(pol, domain, [records[0].card.payload.prompt_text()], 1, SamplingParams(max_new_tokens=1), seed=0)
    assert rows[0].prompt_ids == c.prompt_ids and tok.decode(c.prompt_ids).startswith("<|im_start|>system")
    # and the update's loss is the NLL of exactly those ids
    before = nll(pol, rows)
    stats = pol.sft_update(examples)
    assert stats.stepped and stats.n_tokens == sum(map(len, samples))
    assert stats.loss == pytest.approx(before, rel=1e-5)
    assert before != pytest.approx(nll(pol, [pol.encode_sft(SFTExample(e.prompt, e.completion)) for e in examples]))


@pytest.mark.slow
@pytest.mark.skipif(_SMOL is not None, reason=f"SmolLM2 tokenizer unavailable: {_SMOL}")
def test_sampled_bpe_ids_reach_the_pool_unchanged(tmp_path, smol_policy, one_thread) -> None:  # noqa: ANN001
    """Natural sampling over a BPE vocabulary produces id sequences that are not their text's tokenisation;
    the attempt the engine grades keeps them, and the pool gives them back."""
    from synco.domains.math import MathDomain

    pol, tok = smol_policy, smol_policy.tokenizer
    [group] = solve(pol, MathDomain(), ["What is 2 + 2?"], 8, SamplingParams(max_new_tokens=12), seed=3)
    eos = set(pol.eos_ids)
    assert any(tok(c.text, add_special_tokens=False)["input_ids"] != [t for t in c.completion_ids if t not in eos]
               for c in group)  # a random model's samples: several are not canonical
    solver = AnswerSolver(MathDomain(), AnswerChecker(use_math_verify=False), ReasonerRewardConfig())
    [rollouts] = solver.attempts(pol, [Task("What is 2 + 2?", "4")], 8, SamplingParams(max_new_tokens=12), seed=3)
    assert [r.completion_ids for r in rollouts] == [c.completion_ids for c in group]
    card = TaskCard(**{name: name for name in CARD_FIELDS})
    with TaskPool(tmp_path / "pool.sqlite") as pool:
        pool.record_step(0, [TaskRecord(step=0, slot=0, raw="", card=card, rollouts=rollouts,
                                        verdict=Verdict(valid=True, reference="4"))])
        [back] = pool.by_step(0, token_ids=True)
    assert [r.completion_ids for r in back.rollouts] == [c.completion_ids for c in group]


def nll(policy: HFPolicy, rows: list[Experience]) -> float:
    """Token-mean NLL of each row's completion ids after its prompt ids, from plain one-row forward passes."""
    total, n = 0.0, 0
    with torch.no_grad():
        for r in rows:
            ids = torch.tensor([r.prompt_ids + r.completion_ids])
            logp = torch.log_softmax(policy.model(input_ids=ids).logits[0, :-1].float(), -1)
            lp = logp.gather(-1, ids[0, 1:, None])[:, 0][len(r.prompt_ids) - 1:]
            total, n = total - lp.sum().item(), n + len(r.completion_ids)
    return total / n
