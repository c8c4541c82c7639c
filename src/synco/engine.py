"""One co-training step, top to bottom.

    report ─▶ Synthesizer samples N cards ─▶ verifier (parse, checks, novelty, oracle)
          [─▶ consensus by a separate frozen checker, M answers per valid card]
          ─▶ Reasoner solves each valid card K times ─▶ grade ─▶ consensus (on the K attempts)
          ─▶ rewards for both ─▶ GRPO update of the Reasoner (and of the Synthesizer
             in ``cotrain`` mode) ─▶ the whole step into the pool, one transaction

``cotrain_step`` is the function to read; everything it calls is either a pure
function (rewards, advantages) or a component with one job (policy, verifier,
pool). Modes: ``cotrain`` updates both agents, ``frozen`` keeps the Synthesizer
fixed (the paper's control) and ``static`` draws cards from the domain's fixed
generator instead of the Synthesizer (the static-corpus baseline).
"""

from __future__ import annotations

import math
import random
import time
from dataclasses import dataclass, field
from typing import Literal, Sequence

from pydantic import BaseModel

from synco.answers import AnswerChecker, extract_answer, extract_answer_with_method
from synco.domain import Domain, solve
from synco.grpo import group_advantages
from synco.policy import Completion, Experience, Policy, SamplingParams, UpdateStats
from synco.pool import TaskPool
from synco.records import Rollout, TaskCard, TaskRecord, Verdict
from synco.report import CapabilityReport
from synco.rewards import (
    ReasonerRewardConfig,
    SynthesizerRewardConfig,
    is_gradient_bearing,
    reasoner_reward,
    synthesizer_reward,
)
from synco.verifier import TaskVerifier

Mode = Literal["cotrain", "frozen", "static"]


class StepStats(BaseModel):
    """Metrics of one step; one line of ``metrics.jsonl``."""

    step: int
    mode: str
    n_cards: int = 0
    n_valid: int = 0
    valid_rate: float = 0.0
    n_distinct: int = 0
    n_gradient_bearing: int = 0
    gradient_share: float = 0.0  # gradient-bearing share of valid tasks
    n_synth_truncated: int = 0
    n_reasoner_truncated: int = 0
    reasoner_reward: float = 0.0
    reasoner_accuracy: float = 0.0
    synth_reward: float = 0.0
    synth_groups_skipped: int = 0
    reasoner_groups_skipped: int = 0
    label_agreement: float | None = None  # mean consensus agreement over the cards consensus judged (no-oracle domains)
    reasoner_loss: float | None = None
    synth_loss: float | None = None
    reasoner_grad_norm: float | None = None
    synth_grad_norm: float | None = None
    nan_skipped: int = 0
    t_generate: float = 0.0
    t_train: float = 0.0
    t_other: float = 0.0
    reasons: dict[str, int] = {}
    groups: dict[str, int] = {}  # valid cards per factor value of ``group_factor``


@dataclass
class StepSettings:
    """The per-step knobs of the loop (a view of the run config)."""

    mode: Mode = "cotrain"
    n_cards: int = 32
    n_contexts: int = 1
    k: int = 4
    group_factor: str = "level"
    synth_sampling: SamplingParams = field(default_factory=SamplingParams)
    reasoner_sampling: SamplingParams = field(default_factory=SamplingParams)
    reasoner_rewards: ReasonerRewardConfig = field(default_factory=ReasonerRewardConfig)
    synth_rewards: SynthesizerRewardConfig = field(default_factory=SynthesizerRewardConfig)
    synth_scale_by_std: bool = True
    reasoner_scale_by_std: bool = True
    consensus: bool = True  # apply the verifier's consensus check (no-oracle domains)
    consensus_m: int = 4  # answers the separate consensus checker samples per valid card
    checker_sampling: SamplingParams = field(default_factory=SamplingParams)


@dataclass
class CoTrainState:
    """Everything a step reads and writes."""

    settings: StepSettings
    domain: Domain
    synthesizer: Policy
    reasoner: Policy
    verifier: TaskVerifier
    checker: AnswerChecker
    pool: TaskPool
    report: CapabilityReport
    rng: random.Random
    consensus_checker: Policy | None = None  # frozen model answering for consensus; None: reuse the K attempts


class _Timer:
    def __init__(self) -> None:
        self.t = {"generate": 0.0, "train": 0.0}

    def add(self, key: str, start: float) -> None:
        self.t[key] += time.perf_counter() - start


def cotrain_step(state: CoTrainState, step: int) -> StepStats:
    """Run one co-training step and record it; never raises on bad model output."""
    s, timer, t0 = state.settings, _Timer(), time.perf_counter()

    # 1. Synthesize: N cards from the latest report (or the fixed generator in static mode).
    synth_prompt = state.domain.synthesizer_prompt(state.report)
    synth_samples: list[Completion | None]
    context_of: list[int]
    if s.mode == "static":
        raws = state.domain.static_cards(state.rng, s.n_cards)
        synth_samples, context_of = [None] * len(raws), [0] * len(raws)
    else:
        per_context = max(1, s.n_cards // s.n_contexts)
        t = time.perf_counter()
        prompt = state.synthesizer.format_prompt(synth_prompt, system=state.domain.synthesizer_system_prompt())
        groups = state.synthesizer.generate([prompt] * s.n_contexts, per_context, s.synth_sampling)
        timer.add("generate", t)
        synth_samples = [c for g in groups for c in g]
        context_of = [ci for ci, g in enumerate(groups) for _ in g]
        raws = [c.text for c in synth_samples]

    # 2. Verify: parse, checks, novelty against the pool and the rest of this step, oracle.
    checked = state.verifier.verify_batch(raws)
    cards: list[TaskCard | None] = []
    verdicts: list[Verdict] = []
    for card, verdict in checked:
        if card is not None and verdict.valid:
            card.factors.update(state.domain.card_factors(card))
            domain_reason = state.domain.reject_reason(card)
            if domain_reason is not None:
                verdict = verdict.model_copy(update={"valid": False, "reasons": [domain_reason, *verdict.reasons]})
        cards.append(card)
        verdicts.append(verdict)
    valid_idx = [i for i, v in enumerate(verdicts) if v.valid]
    use_checker = s.consensus and not state.domain.has_oracle and state.consensus_checker is not None

    # 2b. Consensus by a separate frozen checker (when configured): M independent answers per valid
    #     card; a card it rejects gets no Reasoner rollouts.
    if use_checker and valid_idx:
        checker = state.consensus_checker
        assert checker is not None
        t = time.perf_counter()
        answer_groups = solve(checker, state.domain, [cards[i].problem for i in valid_idx],  # type: ignore[union-attr]
                              s.consensus_m, s.checker_sampling)
        timer.add("generate", t)
        for i, group in zip(valid_idx, answer_groups):
            verdicts[i] = state.verifier.apply_consensus(verdicts[i], [extract_answer(c.text) for c in group])
        valid_idx = [i for i in valid_idx if verdicts[i].valid]

    # 3. Solve: the Reasoner answers every valid card K times.
    attempts: list[list[Completion]] = []
    if valid_idx:
        t = time.perf_counter()
        attempts = solve(state.reasoner, state.domain, [cards[i].problem for i in valid_idx],  # type: ignore[union-attr]
                         s.k, s.reasoner_sampling)
        timer.add("generate", t)

    # 4. Grade each attempt against the verdict's reference; 5. consensus on the same attempts
    #    (unless a separate checker already judged the card in 2b).
    rollouts: dict[int, list[Rollout]] = {}
    for i, group in zip(valid_idx, attempts):
        reference = verdicts[i].reference or cards[i].final_answer  # type: ignore[union-attr]
        graded = [_grade(c, reference, state.checker, s.reasoner_rewards) for c in group]
        if s.consensus and not state.domain.has_oracle and not use_checker:
            verdicts[i] = state.verifier.apply_consensus(verdicts[i], [r.answer for r in graded])
        rollouts[i] = graded

    # 6. Rewards: Reasoner per attempt, Synthesizer per card.
    records: list[TaskRecord] = []
    for i, raw in enumerate(raws):
        rs = rollouts.get(i, [])  # kept for consensus-rejected cards too: every attempt is recorded
        p = sum(r.correct for r in rs) / len(rs) if rs else None
        sr = synthesizer_reward(
            verdicts[i].valid,
            verdicts[i].quality,
            verdicts[i].reliability,
            p,
            novelty=verdicts[i].scores.get("novelty", 1.0),
            reason_codes=verdicts[i].reason_codes,
            config=s.synth_rewards,
        )
        records.append(TaskRecord(step=step, slot=i, context_id=context_of[i], raw=raw, card=cards[i],
                                  verdict=verdicts[i], rollouts=rs, success_rate=p, synth_reward=sr))

    # 7. GRPO updates. Reasoner groups: the K attempts at one task. Synthesizer groups: one context's cards.
    stats = StepStats(step=step, mode=s.mode)
    r_batch, stats.reasoner_groups_skipped = _reasoner_batch(records, valid_idx, attempts, s.reasoner_scale_by_std)
    t = time.perf_counter()
    r_update = state.reasoner.update(r_batch) if r_batch else None
    timer.add("train", t)
    s_update = None
    if s.mode == "cotrain":
        s_batch, stats.synth_groups_skipped = _synth_batch(records, synth_samples, s.synth_scale_by_std)
        t = time.perf_counter()
        s_update = state.synthesizer.update(s_batch) if s_batch else None
        timer.add("train", t)

    # 8. Record the whole step in one transaction, then admit its valid problems to the novelty index.
    _fill_stats(stats, records, synth_samples, r_update, s_update, s.group_factor)
    state.pool.record_step(step, records, metrics=None)
    for rec in records:
        if rec.valid and rec.card is not None:
            state.verifier.admit(rec.task_id, rec.card.problem)

    stats.t_generate, stats.t_train = timer.t["generate"], timer.t["train"]
    stats.t_other = time.perf_counter() - t0 - stats.t_generate - stats.t_train
    return stats


def _grade(c: Completion, reference: str, checker: AnswerChecker, cfg: ReasonerRewardConfig) -> Rollout:
    """Extract, check and reward one Reasoner attempt."""
    ext = extract_answer_with_method(c.text)
    correct = ext.answer is not None and checker.match(ext.answer, reference)
    return Rollout(text=c.text, answer=ext.answer, method=ext.method, correct=correct,
                   reward=reasoner_reward(correct, ext.boxed, cfg), truncated=c.truncated,
                   n_tokens=len(c.completion_ids))


def _advantages(rewards: Sequence[float], scale_by_std: bool) -> list[float]:
    import torch

    return group_advantages(torch.tensor(rewards, dtype=torch.float64), scale_by_std=scale_by_std).tolist()


def _reasoner_batch(records: list[TaskRecord], valid_idx: list[int], attempts: list[list[Completion]],
                    scale_by_std: bool) -> tuple[list[Experience], int]:
    """Experiences of every gradient-bearing task; counts the groups skipped for equal rewards."""
    batch: list[Experience] = []
    skipped = 0
    for i, group in zip(valid_idx, attempts):
        rec = records[i]
        if not rec.valid:  # rejected by consensus after solving: no Reasoner training on it
            continue
        rewards = [r.reward for r in rec.rollouts]
        if not is_gradient_bearing(rewards):
            skipped += 1
            # equal rewards: zero advantage, kept so the loss is normalised over the whole batch
            batch.extend(Experience(c.prompt_ids, c.completion_ids, 0.0, c.logprobs) for c in group)
            continue
        for c, a in zip(group, _advantages(rewards, scale_by_std)):
            batch.append(Experience(c.prompt_ids, c.completion_ids, a, c.logprobs))
    if not any(e.advantage != 0.0 for e in batch):
        return [], skipped
    return batch, skipped


def _synth_batch(records: list[TaskRecord], samples: Sequence[Completion | None],
                 scale_by_std: bool) -> tuple[list[Experience], int]:
    """Experiences of each context group whose card rewards differ."""
    by_context: dict[int, list[int]] = {}
    for i, rec in enumerate(records):
        by_context.setdefault(rec.context_id, []).append(i)
    batch: list[Experience] = []
    skipped = 0
    for idx in by_context.values():
        rewards = [records[i].synth_reward.total for i in idx]  # type: ignore[union-attr]
        advs = _advantages(rewards, scale_by_std) if is_gradient_bearing(rewards) else [0.0] * len(idx)
        skipped += not is_gradient_bearing(rewards)
        for i, a in zip(idx, advs):
            c = samples[i]
            if c is not None:
                batch.append(Experience(c.prompt_ids, c.completion_ids, a, c.logprobs))
    if not any(e.advantage != 0.0 for e in batch):
        return [], skipped
    return batch, skipped


def _fill_stats(stats: StepStats, records: list[TaskRecord], synth_samples: Sequence[Completion | None],
                r_update: UpdateStats | None, s_update: UpdateStats | None, group_factor: str) -> None:
    valid = [r for r in records if r.valid]
    stats.n_cards = len(records)
    stats.n_valid = len(valid)
    stats.valid_rate = len(valid) / max(1, len(records))
    stats.n_distinct = len({r.card.problem for r in records if r.card is not None})
    stats.n_gradient_bearing = sum(r.gradient_bearing for r in valid)
    stats.gradient_share = stats.n_gradient_bearing / max(1, len(valid))
    rollouts = [ro for r in valid for ro in r.rollouts]
    stats.reasoner_reward = sum(ro.reward for ro in rollouts) / max(1, len(rollouts))
    stats.reasoner_accuracy = sum(ro.correct for ro in rollouts) / max(1, len(rollouts))
    stats.n_reasoner_truncated = sum(ro.truncated for ro in rollouts)
    stats.n_synth_truncated = sum(1 for c in synth_samples if c is not None and c.truncated)
    stats.synth_reward = sum(r.synth_reward.total for r in records if r.synth_reward) / max(1, len(records))
    agreements = [r.verdict.agreement for r in records if r.verdict.agreement is not None]
    stats.label_agreement = sum(agreements) / len(agreements) if agreements else None
    for rec in records:
        for code in rec.verdict.reason_codes:
            stats.reasons[code] = stats.reasons.get(code, 0) + 1
        if rec.valid and rec.card is not None:
            g = rec.card.factors.get(group_factor, rec.card.difficulty_estimate)
            stats.groups[g] = stats.groups.get(g, 0) + 1
    for upd, prefix in ((r_update, "reasoner"), (s_update, "synth")):
        if upd is None:
            continue
        stats.nan_skipped += int(upd.nan_skipped)
        if not upd.nan_skipped and math.isfinite(upd.loss):
            setattr(stats, f"{prefix}_loss", upd.loss)
            setattr(stats, f"{prefix}_grad_norm", upd.grad_norm)
