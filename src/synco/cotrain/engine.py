"""One co-training step, top to bottom.

    report ─▶ Synthesizer samples N cards ─▶ verifier (parse, checks, novelty, oracle)
          [─▶ consensus by a separate frozen checker, M answers per valid card]
          ─▶ Reasoner solves each valid card K times ─▶ grade ─▶ consensus (on the K attempts)
          ─▶ rewards for both ─▶ GRPO update of the Reasoner (and of the Synthesizer
             in ``cotrain`` mode) ─▶ the whole step into the pool, one transaction

``cotrain_step`` is the function to read; everything it calls is either a pure
function (rewards, advantages) or a component with one job (policy, verifier,
pool). Modes: ``cotrain`` updates both agents, ``frozen`` keeps the Synthesizer
fixed (the paper's control), ``static`` revisits a fixed, finite corpus drawn
once from the domain's generator (the paper's static-corpus baseline) and
``uniform`` draws fresh cards from that generator every step (an oracle of the
evaluation distribution no real domain has). A training protocol (``synco.cotrain.protocols``:
EvoSyn's rounds, alternating phases, RFT) wraps this step and hands it a ``StepPlan`` per step:
which agents update and the round and phase the step records (the default plan is online
co-training); the run's ``StepSettings`` are frozen and never changed by a protocol.

Everything that samples draws its request seed with :func:`request_seed` and every GRPO batch
is built by :func:`group_experiences` (the protocols' own requests and batches included), so a
``seed_per_request`` run records the same steps in one process as on Ray.

With EvoSyn's factor space (``EvoState``), step 1 asks the Designer to split the
card slots over factor cells: each context is one cell, its prompt names the cell,
and its cards form one Synthesizer GRPO group; step 6 checks that each card landed
in its cell (controllability) and penalises the ones that did not.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from synco.core.policy import Policy, UpdateStats
from synco.core.pool import TaskPool
from synco.core.records import TaskCard, TaskRecord, Verdict, payload_type, success_rate
from synco.core.report import CapabilityReport
from synco.core.rewards import (
    EFFECT_TERMS,
    card_alignment,
    off_target,
    report_focus,
    synthesizer_reward,
)
from synco.cotrain.batches import reasoner_batch, synth_batch
from synco.cotrain.cards import CardSource, Draft, card_source
from synco.cotrain.labels import LabelTrust, label_trust
from synco.cotrain.settings import ONLINE, StepPlan, StepSettings, request_seed
from synco.cotrain.stats import Design, StepMetric, StepStats, core_stats, step_metrics
from synco.domains.base import Domain, HasEnvironment
from synco.evosyn.metrics import controlled
from synco.evosyn.run import EvoState
from synco.evosyn.space import FactorDef, cell_key, factor_subject, factor_values
from synco.evosyn.trajectory import DistinctSequences
from synco.grading.checker import AnswerChecker
from synco.grading.verifier import TaskVerifier
from synco.rollout.attempts import Solver, Task, make_solver

@dataclass
class CoTrainState:
    """Everything a step reads and writes, and the features the run chose, fixed when the state is built: where
    cards come from (``cards``), how labels are trusted (``labels``), how the Reasoner's attempts are sampled and
    graded (``solver``, the rollout seam) and which metrics the step adds (``metrics``)."""

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
    evo: EvoState | None = None  # the factor space (domains that offer factors)
    corpus: list[str] | None = None  # static mode: the fixed corpus of raw cards, revisited
    sequences: DistinctSequences | None = None  # trajectory domains: the run's distinct gold action sequences so far
    cards: CardSource = field(init=False)
    labels: LabelTrust = field(init=False)
    solver: Solver = field(init=False)
    metrics: tuple[StepMetric, ...] = field(init=False)

    def __post_init__(self) -> None:
        """Choose the features from the settings and the domain, once (other settings: a new state,
        ``dataclasses.replace``)."""
        s = self.settings
        self.cards = card_source(s.mode, s.evosyn.designer, self.corpus)
        self.labels = label_trust(s.consensus, self.domain.has_oracle, self.consensus_checker)
        self.solver = make_solver(self.domain, self.checker, s.reasoner_rewards, s.limits, s.episode_group_size)
        self.metrics = step_metrics(self.domain, isinstance(self.domain, HasEnvironment), self.evo, self.sequences)


def screen_card(domain: Domain, defs: Sequence[FactorDef] | None, card: TaskCard | None,
                verdict: Verdict) -> Verdict:
    """The domain's part of verifying one card the verifier passed: stamp its factors, apply ``reject_reason``.

    ``card.factors`` is rewritten in place: the card's own claims for the factors in ``defs`` are dropped
    (they never place it in a cell), then come ``domain.card_factors`` and every factor ``defs`` can compute
    (so the Reflector can test them). ``defs`` is None for a domain without a factor space. A domain
    rejection makes the verdict invalid with the domain's code first. An invalid verdict is returned as is.
    Shared by the step and ``synco verify``, so a file is screened the way training screens it.
    """
    if card is None or not verdict.valid:
        return verdict
    if defs is not None:
        for d in defs:
            card.factors.pop(d.name, None)
    card.factors.update(domain.card_factors(card))
    if defs is not None:
        card.factors.update(factor_values(factor_subject(card, payload_type(domain)), defs))
    reason = domain.reject_reason(card)
    if reason is None:
        return verdict
    return verdict.model_copy(update={"valid": False, "reasons": [reason, *verdict.reasons]})


@dataclass
class Collected:
    """A step's stages 1-6, before any agent learns from it: the records (cards, verdicts, graded attempts,
    rewards), the Designer's decision and the seconds spent sampling. What the asynchronous pipeline
    (:mod:`synco.cotrain.pipeline`) collects ahead while the learners update on an earlier step."""

    step: int
    plan: StepPlan
    records: list[TaskRecord]
    design: Design
    t_generate: float
    t_other: float


@dataclass
class Updates:
    """Stage 7's outcome: each agent's update (None: none taken), the groups left out of the batches and the
    seconds spent training."""

    reasoner: UpdateStats | None = None
    synthesizer: UpdateStats | None = None
    reasoner_groups_skipped: int = 0
    synth_groups_skipped: int = 0
    t_train: float = 0.0


def cotrain_step(state: CoTrainState, step: int, plan: StepPlan = ONLINE) -> StepStats:
    """Run one co-training step and record it; never raises on bad model output.

    ``plan``: which agents update and the protocol's round and phase of the step (online co-training by default).
    Each card slot is one :class:`~synco.core.records.TaskRecord` from verification on; each Reasoner attempt one
    :class:`~synco.core.records.Attempt`, carried by its task's record into the pool and the batch. The three
    phases are separate functions so the asynchronous pipeline can run them overlapped; here they run in order.
    """
    collected = collect(state, step, plan)
    return finish(state, collected, update_agents(state, collected))


def collect(state: CoTrainState, step: int, plan: StepPlan = ONLINE) -> Collected:
    """Stages 1-6: the step's cards, verified, solved and graded, with both agents' rewards; nothing learns."""
    s, t0, t_gen = state.settings, time.perf_counter(), 0.0

    # 1. Cards: the Synthesizer (in one context per Designer cell, or report-only contexts), or a corpus.
    drafts, design, t_gen = state.cards.draw(state)

    # 2. Verify: parse, checks, novelty against the pool and the rest of this step, oracle; the domain's part.
    records = verify(state, step, drafts)

    # 3. Labels a checker model judges before solving (consensus by a separate model; a rejected card gets no
    #    attempts).
    t_gen += state.labels.before_solving(state, records)

    # 4. Solve through the rollout seam: K graded attempts per valid card (one-turn answers graded by the answer
    #    checker in one batch, or episodes graded by their environments), each stamped with the Reasoner's version.
    solved = [r for r in records if r.valid and r.card is not None]
    t = time.perf_counter()
    groups = state.solver.attempts(state.reasoner, [Task.of(r.card, r.reference)
                                                    for r in solved if r.card is not None],
                                   s.k, s.reasoner_sampling, request_seed(state)) if solved else []
    t_gen += time.perf_counter() - t
    for rec, attempts in zip(solved, groups, strict=True):
        rec.rollouts = attempts

    # 5. Labels judged on the attempts (consensus on the Reasoner's own answers, no-oracle domains).
    state.labels.after_solving(state, records)

    # 6. Rewards: the Synthesizer's per card (a valid card that missed its requested cell is penalised, so RL
    #    teaches the Synthesizer to follow the Designer); the Reasoner's were given by the seam.
    reward_cards(state, records)
    return Collected(step, plan, records, design, t_gen, time.perf_counter() - t0 - t_gen)


def update_agents(state: CoTrainState, c: Collected, for_reasoner: Sequence[TaskRecord] | None = None,
                  for_synthesizer: Sequence[TaskRecord] | None = None) -> Updates:
    """Stage 7, the GRPO updates. Reasoner groups: the K attempts at one task. Synthesizer groups: one context's
    cards. ``for_reasoner`` / ``for_synthesizer``: the records each learner may train on (the asynchronous pipeline
    leaves out too stale ones; None: all of the step's). Touches only the learners' weights, so it may run beside
    the next step's :func:`collect`."""
    s, out, t = state.settings, Updates(), time.perf_counter()
    for_r = c.records if for_reasoner is None else for_reasoner
    for_s = c.records if for_synthesizer is None else for_synthesizer
    r_batch, out.reasoner_groups_skipped = reasoner_batch(for_r, s.reasoner_scale_by_std)
    if r_batch and c.plan.update_reasoner:
        out.reasoner = state.reasoner.update(r_batch)
    if s.trains_synthesizer and c.plan.update_synthesizer:
        s_batch, out.synth_groups_skipped = synth_batch(for_s, s.synth_scale_by_std, s.evosyn.control_absolute)
        if s_batch:
            out.synthesizer = state.synthesizer.update(s_batch)
    out.t_train = time.perf_counter() - t
    return out


def finish(state: CoTrainState, c: Collected, updates: Updates) -> StepStats:
    """Stage 8: measure the step and record it in the pool, one transaction, then admit its valid problems to the
    novelty index."""
    s, t0, records, plan = state.settings, time.perf_counter(), c.records, c.plan
    stats = StepStats(step=c.step, mode=s.mode, protocol=plan.protocol, round=plan.round, phase=plan.phase)
    stats.reasoner_groups_skipped, stats.synth_groups_skipped = updates.reasoner_groups_skipped, updates.synth_groups_skipped
    core_stats(stats, records, updates.reasoner, updates.synthesizer, s.group_factor)
    for metric in state.metrics:
        metric.fill(stats, records, c.design)
    state.pool.record_step(c.step, records, metrics=_step_tags(plan))
    if not s.revisits_corpus:  # a fixed corpus is revisited on purpose
        for rec in records:
            if rec.valid and rec.card is not None:
                state.verifier.admit(rec.task_id, rec.card.payload.prompt_text())
    stats.t_generate, stats.t_train = c.t_generate, updates.t_train
    stats.t_other = c.t_other + time.perf_counter() - t0
    return stats


def verify(state: CoTrainState, step: int, drafts: Sequence[Draft]) -> list[TaskRecord]:
    """One record per draft: the verifier's card and verdict (novelty against the pool's last ``novelty_window``
    steps when set), then the domain's part (:func:`screen_card`)."""
    window = state.verifier.config.novelty_window
    if window is not None and not state.settings.revisits_corpus:
        state.verifier.reset_pool(state.pool.valid_problems(since_step=step - window))
    kind = payload_type(state.domain)  # a verifier in another process (Ray's checks) may not have typed its cards
    checked = [(card.typed(kind) if card is not None else None, verdict)
               for card, verdict in state.verifier.verify_batch([d.raw for d in drafts])]
    defs = state.evo.defs if state.evo is not None else None
    return [TaskRecord(step=step, slot=i, context_id=d.context_id, raw=d.raw, card=card,
                       verdict=screen_card(state.domain, defs, card, verdict),
                       target=cell_key(d.target) if d.target is not None else None, target_cell=d.target,
                       synth_version=d.version, sample=d.sample)
            for i, (d, (card, verdict)) in enumerate(zip(drafts, checked, strict=True))]


def reward_cards(state: CoTrainState, records: Sequence[TaskRecord]) -> None:
    """Each record's success rate and Synthesizer reward (gated or additive), with the off-target penalty."""
    s = state.settings
    # alignment: the target cell hit, or (no target) a factor value the report the Synthesizer saw asks for
    focus = report_focus(state.report) if s.evosyn.feedback and s.reads_report else frozenset()
    progress = progress_of(state) if s.synth_rewards.learnability in EFFECT_TERMS else None
    for rec in records:
        v, target = rec.verdict, rec.target_cell
        p = success_rate(rec.rollouts)
        sr = synthesizer_reward(v.valid, v.quality, v.reliability, p, novelty=v.scores.get("novelty", 1.0),
                                alignment=card_alignment(rec.card, target, focus) if v.valid else None,
                                reason_codes=v.reason_codes, config=s.synth_rewards,
                                progress=progress(rec.card) if progress is not None and v.valid else 1.0)
        if target is not None and v.valid and rec.card is not None:
            rec.on_target = controlled(target, rec.card.factors)
            if not rec.on_target:
                sr = off_target(sr, s.evosyn.control_penalty, s.synth_rewards.invalid_penalty, s.evosyn.control_gate)
        rec.success_rate, rec.synth_reward = p, sr


def progress_of(state: CoTrainState) -> Callable[[TaskCard | None], float]:
    """``learnability=progress`` or ``effect``: a card's learning-effect weight, that of the cell it realised (the measured
    transitions so far, :mod:`synco.evosyn.effect`; a card outside every cell gets the unmeasured weight)."""
    if state.evo is None:
        raise ValueError(f"synth_rewards.learnability={state.settings.synth_rewards.learnability} needs a domain with a factor space (its cells' "
                         f"learning effect); domain {state.domain.name!r} has none")
    evo, weights = state.evo, state.evo.effect_weights(state.settings.evosyn.designer_settings)

    def of(card: TaskCard | None) -> float:
        cell = evo.space.cell_of(card.factors) if card is not None else None
        return weights.of(cell_key(cell) if cell is not None else None)

    return of


def _step_tags(plan: StepPlan) -> dict[str, Any] | None:
    """What the pool's ``steps`` row records of the step's protocol: its round and phase (None: online)."""
    if plan.round is None:
        return None
    return {"protocol": plan.protocol, "round": plan.round, "phase": plan.phase}
