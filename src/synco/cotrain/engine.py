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

import math
import random
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Collection, Literal, Sequence

from pydantic import BaseModel, model_serializer

from synco.grading.checker import AnswerChecker
from synco.grading.extract import extract_answer
from synco.grading.grade import Graded, grade
from synco.core.episodes import Episode, EpisodeLimits, ToolCall
from synco.domains.base import Domain, HasEnvironment, HasTrajectories, answer_extractor, solve
from synco.evosyn.config import EvoSynConfig
from synco.evosyn.control import factor_control
from synco.evosyn.run import EvoState
from synco.evosyn.designer import allocate, cell_needs, cell_stats
from synco.evosyn.metrics import balance, controlled, coverage, spearman
from synco.evosyn.trajectory import (
    DistinctSequences,
    contrastive_support,
    distinct_action_sequences,
    first_wrong_call,
    interaction_coverage,
    pattern,
    possible_patterns,
    trajectory_diversity,
)
from synco.evosyn.space import Cell, FactorDef, cell_key, factor_subject, factor_values, parse_cell_key
from synco.learn.grpo import group_advantages
from synco.core.policy import Completion, Experience, Policy, SamplingParams, UpdateStats, generate_seeded
from synco.core.pool import TaskPool
from synco.core.records import Rollout, TaskCard, TaskRecord, Verdict
from synco.core.report import CapabilityReport, build_report
from synco.core.rewards import (
    ReasonerRewardConfig,
    SynthesizerRewardConfig,
    card_alignment,
    is_gradient_bearing,
    off_target,
    reasoner_reward,
    report_focus,
    synthesizer_reward,
)
from synco.grading.verifier import TaskVerifier
from synco.rollout.episodes import act

Mode = Literal["cotrain", "frozen", "static", "uniform"]


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
    controllability: float | None = None  # share of valid targeted cards whose realised cell is the requested one
    controllability_by_factor: dict[str, float] | None = None  # per factor asked for: share realising its bucket
    factor_coverage: float | None = None  # share of the space's feasible cells hit by a valid card
    factor_balance: float | None = None  # normalised entropy of valid cards over the feasible cells
    allocation: dict[str, int] | None = None  # Designer: cell -> card slots (Designer on)
    allocation_gap_spearman: float | None = None  # Spearman rho between each cell's need (gap) and its slots
    space_version: int | None = None
    protocol: str = "online"  # synco.cotrain.protocols: online, rounds, alternating, rft
    # the protocol's place of this step, and what a round's last step trained (absent from online runs' lines)
    round: int | None = None  # round (rounds, rft) or phase index (alternating)
    phase: str | None = None  # collect / train (rounds, rft); the agent that learns (alternating)
    round_examples: int | None = None  # SFT examples (update=sft) or tasks (update=grpo) the round trained on
    round_updates: int | None = None  # optimizer steps the round's training took
    round_loss: float | None = None  # their mean loss
    round_rollouts: int | None = None  # fresh Reasoner attempts the round's GRPO update sampled (0 for SFT)
    round_retokenized: int | None = None  # SFT attempts without stored sampled ids (an old pool's): text re-tokenised
    # domains with an environment (absent from single-turn runs' lines)
    mean_turns: float | None = None  # agent turns per episode
    finishes: dict[str, int] | None = None  # episodes per finish: done / max_turns / token_budget
    interaction_coverage: float | None = None  # valid tasks' gold trajectories: share of the possible tool-to-tool transitions made
    trajectory_diversity: float | None = None  # evenness of the gold tool-use patterns
    distinct_action_sequences: int | None = None  # distinct gold tool-call sequences so far in the run
    contrastive_support: float | None = None  # share of gold tool compositions seen in more than one order

    @model_serializer(mode="wrap")
    def _omit_unused_protocol_fields(self, handler: Any) -> dict[str, Any]:
        """Leave the protocol-only and episode-only fields out while unset, so an online single-turn run's lines
        keep their keys."""
        data = handler(self)
        for key in _OMITTED_WHEN_UNSET:
            if data.get(key, 0) is None:
                del data[key]
        return data


_OMITTED_WHEN_UNSET = ("round", "phase", "round_examples", "round_updates", "round_loss", "round_rollouts",
                  "round_retokenized", "mean_turns", "finishes", "interaction_coverage", "trajectory_diversity",
                  "distinct_action_sequences", "contrastive_support")


@dataclass(frozen=True)
class StepSettings:
    """The per-step knobs of the loop (a view of the run config), the same for every step of a run.

    Frozen: what a protocol changes per step is a :class:`StepPlan`; a different setting is a new object
    (``dataclasses.replace``).
    """

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
    evosyn: EvoSynConfig = field(default_factory=lambda: EvoSynConfig(designer=False, reflector=False))
    window: int = 500  # recent pool records the Designer measures cells on
    seed_per_request: bool = False  # every generate call gets its own seed from the run's rng (see request_seed)
    max_turns: int = 6  # domains with an environment: agent turns per episode
    max_episode_tokens: int = 384  # domains with an environment: ids after the prompt per episode
    episode_group_size: int = 64  # episodes per job (one lockstep batch, one seed): the Reasoner's generation_batch_size


@dataclass(frozen=True)
class StepPlan:
    """What a training protocol decides for one step (``synco.cotrain.protocols``); the default is online co-training."""

    update_synthesizer: bool = True  # False: the Synthesizer takes no GRPO step (alternating: the Reasoner's phases)
    update_reasoner: bool = True  # False: the Reasoner only solves (rounds / rft collection, the Synthesizer's phases)
    protocol: str = "online"
    round: int | None = None  # recorded with the step (pool and metrics) when set
    phase: str | None = None


ONLINE = StepPlan()


@dataclass
class ContextPlan:
    """One Synthesizer context of a step: its target cell (None: no target) and its number of cards."""

    target: Cell | None
    n: int


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
    evo: EvoState | None = None  # the factor space (domains that offer factors)
    corpus: list[str] | None = None  # static mode: the fixed corpus of raw cards, revisited
    sequences: DistinctSequences | None = None  # trajectory domains: the run's distinct gold action sequences so far


class _Timer:
    def __init__(self) -> None:
        self.t = {"generate": 0.0, "train": 0.0}

    def add(self, key: str, start: float) -> None:
        self.t[key] += time.perf_counter() - start


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
        card.factors.update(factor_values(factor_subject(domain, card), defs))
    reason = domain.reject_reason(card)
    if reason is None:
        return verdict
    return verdict.model_copy(update={"valid": False, "reasons": [reason, *verdict.reasons]})


def cotrain_step(state: CoTrainState, step: int, plan: StepPlan = ONLINE) -> StepStats:
    """Run one co-training step and record it; never raises on bad model output.

    ``plan``: which agents update and the protocol's round and phase of the step (online co-training by default).
    """
    s, timer, t0 = state.settings, _Timer(), time.perf_counter()

    # 1. Design and synthesize: the Designer splits the N slots over factor cells (one context per cell,
    #    its prompt names the cell), or every context gets the same report-only prompt (plain SynCo).
    contexts, allocation, gaps = _plan_contexts(state)
    synth_samples: list[Completion | None]
    context_of: list[int]
    if s.mode in ("static", "uniform"):
        raws = _fixed_cards(state, s.n_cards)
        synth_samples, context_of = [None] * len(raws), [0] * len(raws)
    else:
        report = state.report if s.evosyn.feedback else build_report([])
        system = state.domain.synthesizer_system_prompt()
        prompts = [state.synthesizer.format_prompt(state.domain.synthesizer_prompt(report, target=c.target), system=system)
                   for c in contexts]
        t = time.perf_counter()
        if len({c.n for c in contexts}) == 1:
            groups = generate_seeded(state.synthesizer, prompts, contexts[0].n, s.synth_sampling, request_seed(state))
        else:  # contexts of different sizes: one row per card, regrouped by context
            flat = generate_seeded(state.synthesizer, [p for p, c in zip(prompts, contexts) for _ in range(c.n)], 1,
                                   s.synth_sampling, request_seed(state))
            it = iter(g[0] for g in flat)
            groups = [[next(it) for _ in range(c.n)] for c in contexts]
        timer.add("generate", t)
        synth_samples = [c for g in groups for c in g]
        context_of = [ci for ci, g in enumerate(groups) for _ in g]
        raws = [c.text for c in synth_samples]
    targets = [contexts[ci].target if s.mode not in ("static", "uniform") else None for ci in context_of]

    # 2. Verify: parse, checks, novelty against the pool (its last novelty_window steps, when set) and the rest of
    #    this step, oracle. Then the domain's part: factors stamped from the card itself, its hard rejections
    #    (held-out problems).
    window = state.verifier.config.novelty_window
    if window is not None and s.mode != "static":
        state.verifier.reset_pool(state.pool.valid_problems(since_step=step - window))
    checked = state.verifier.verify_batch(raws)
    cards: list[TaskCard | None] = [card for card, _ in checked]
    defs = state.evo.defs if state.evo is not None else None
    verdicts: list[Verdict] = [screen_card(state.domain, defs, card, verdict) for card, verdict in checked]
    valid_idx = [i for i, v in enumerate(verdicts) if v.valid]
    use_checker = s.consensus and not state.domain.has_oracle and state.consensus_checker is not None

    # 2b. Consensus by a separate frozen checker (when configured): M independent answers per valid
    #     card; a card it rejects gets no Reasoner rollouts.
    if use_checker and valid_idx:
        checker = state.consensus_checker
        assert checker is not None
        t = time.perf_counter()
        answer_groups = solve(checker, state.domain, [cards[i].problem for i in valid_idx],  # type: ignore[union-attr]
                              s.consensus_m, s.checker_sampling, request_seed(state))
        timer.add("generate", t)
        read = answer_extractor(state.domain) or extract_answer
        judged = state.verifier.consensus_batch([verdicts[i] for i in valid_idx],
                                                [[read(c.text) for c in group] for group in answer_groups])
        for i, verdict in zip(valid_idx, judged):
            verdicts[i] = verdict
        valid_idx = [i for i in valid_idx if verdicts[i].valid]

    # 3. Solve: the Reasoner answers every valid card K times, or, in a domain with an environment, acts on
    #    a fresh environment per attempt over several turns (an episode, graded by its environment).
    references = [verdicts[i].reference or cards[i].final_answer for i in valid_idx]  # type: ignore[union-attr]
    attempts: Sequence[Sequence[Completion | Episode]] = []
    rollouts: dict[int, list[Rollout]] = {}
    episodic = isinstance(state.domain, HasEnvironment)
    if valid_idx and episodic:
        t = time.perf_counter()
        episodes = act(state.reasoner, state.domain, [cards[i] for i in valid_idx], references,  # type: ignore[misc]
                       s.k, s.reasoner_sampling, EpisodeLimits(s.max_turns, s.max_episode_tokens), request_seed(state),
                       s.episode_group_size)
        timer.add("generate", t)
        attempts = episodes
        rollouts = {i: [episode_rollout(e, *_gold(state.domain, cards[i])) for e in group]  # type: ignore[arg-type]
                    for i, group in zip(valid_idx, episodes)}
    elif valid_idx:
        t = time.perf_counter()
        attempts = solve(state.reasoner, state.domain, [cards[i].problem for i in valid_idx],  # type: ignore[union-attr]
                         s.k, s.reasoner_sampling, request_seed(state))
        timer.add("generate", t)

    # 4. Grade each answer against the verdict's reference (the step's answer checks in one batch: a
    #    Ray-backed checker fans them out); 5. consensus on the same attempts, reusing those checks
    #    (unless a separate checker already judged the card in 2b).
    answered = [] if episodic else attempts  # episodes were graded by their environments in 3
    marks = _grade_attempts(state.checker, answered, references[:len(answered)],  # type: ignore[arg-type]
                            answer_extractor(state.domain))
    for i, reference, group, graded in zip(valid_idx, references, answered, marks):
        rs = [_rollout(c, g, s.reasoner_rewards) for c, g in zip(group, graded)]
        if s.consensus and not state.domain.has_oracle and not use_checker:
            # the checks count as agreement when they were made against consensus's reference
            agree = [g.correct for g in graded] if verdicts[i].reference == reference else None
            verdicts[i] = state.verifier.apply_consensus(verdicts[i], [r.answer for r in rs], agree=agree)
        rollouts[i] = rs

    # 6. Rewards: Reasoner per attempt, Synthesizer per card (a valid card that missed its requested
    #    cell, as the domain recomputes it, is penalised so RL teaches the Synthesizer to follow the Designer).
    records: list[TaskRecord] = []
    # alignment: the target cell hit, or (no target) a factor value the report the Synthesizer saw asks for
    focus = report_focus(state.report) if s.evosyn.feedback and s.mode not in ("static", "uniform") else frozenset()
    for i, raw in enumerate(raws):
        rs = rollouts.get(i, [])  # kept for consensus-rejected cards too: every attempt is recorded
        p = sum(r.correct for r in rs) / len(rs) if rs else None
        sr = synthesizer_reward(
            verdicts[i].valid,
            verdicts[i].quality,
            verdicts[i].reliability,
            p,
            novelty=verdicts[i].scores.get("novelty", 1.0),
            alignment=card_alignment(cards[i], targets[i], focus) if verdicts[i].valid else None,
            reason_codes=verdicts[i].reason_codes,
            config=s.synth_rewards,
        )
        target, on_target = targets[i], None
        if target is not None and verdicts[i].valid and cards[i] is not None:
            on_target = controlled(target, cards[i].factors)  # type: ignore[union-attr]
            if not on_target:
                sr = off_target(sr, s.evosyn.control_penalty, s.synth_rewards.invalid_penalty, s.evosyn.control_gate)
        records.append(TaskRecord(step=step, slot=i, context_id=context_of[i], raw=raw, card=cards[i],
                                  verdict=verdicts[i], rollouts=rs, success_rate=p, synth_reward=sr,
                                  target=cell_key(target) if target is not None else None, on_target=on_target))

    # 7. GRPO updates. Reasoner groups: the K attempts at one task. Synthesizer groups: one context's cards.
    stats = StepStats(step=step, mode=s.mode, protocol=plan.protocol, round=plan.round, phase=plan.phase)
    r_batch, stats.reasoner_groups_skipped = reasoner_batch(records, valid_idx, attempts, s.reasoner_scale_by_std)
    t = time.perf_counter()
    r_update = state.reasoner.update(r_batch) if r_batch and plan.update_reasoner else None
    timer.add("train", t)
    s_update = None
    if s.mode == "cotrain" and plan.update_synthesizer:
        s_batch, stats.synth_groups_skipped = synth_batch(records, synth_samples, s.synth_scale_by_std)
        t = time.perf_counter()
        s_update = state.synthesizer.update(s_batch) if s_batch else None
        timer.add("train", t)

    # 8. Record the whole step in one transaction, then admit its valid problems to the novelty index.
    _fill_stats(stats, records, synth_samples, r_update, s_update, s.group_factor)
    _fill_evosyn_stats(stats, records, state.evo, allocation, gaps)
    _fill_trajectory_stats(stats, records, state.domain, state.sequences)
    state.pool.record_step(step, records, metrics=_step_tags(plan))
    for rec in records:
        if rec.valid and rec.card is not None and s.mode != "static":  # a fixed corpus is revisited on purpose
            state.verifier.admit(rec.task_id, rec.card.problem)

    stats.t_generate, stats.t_train = timer.t["generate"], timer.t["train"]
    stats.t_other = time.perf_counter() - t0 - stats.t_generate - stats.t_train
    return stats


def request_seed(state: CoTrainState) -> int | None:
    """The seed of the next generate call of a step (or of a protocol's own request), drawn from the run's
    rng, when ``seed_per_request`` is on; every request of a run draws its seed here, in call order.

    Off (the default), generation draws from the global torch RNG as it always did, and the run's rng
    does not move. On, each call's samples depend only on the weights, the prompts and this seed, so a
    Ray run (rollout workers in other processes) records the same step as the in-process one; the rng
    is checkpointed, so resume stays exact.
    """
    return state.rng.getrandbits(63) if state.settings.seed_per_request else None


def _step_tags(plan: StepPlan) -> dict[str, Any] | None:
    """What the pool's ``steps`` row records of the step's protocol: its round and phase (None: online)."""
    if plan.round is None:
        return None
    return {"protocol": plan.protocol, "round": plan.round, "phase": plan.phase}


def _plan_contexts(state: CoTrainState) -> tuple[list[ContextPlan], dict[Cell, int] | None, dict[Cell, float]]:
    """The step's contexts: one per cell with slots (Designer on), else ``n_contexts`` equal-as-possible ones.

    Never drops or adds a card: the context sizes always sum to ``n_cards``.
    """
    s, evo = state.settings, state.evo
    if s.evosyn.designer and evo is not None and evo.cells and s.mode in ("cotrain", "frozen"):
        cfg = s.evosyn.designer_settings
        stats = cell_stats(state.pool.recent(s.window), evo.space) if s.evosyn.feedback else {}
        slots = allocate(evo.cells, stats, s.n_cards, cfg, feedback=s.evosyn.feedback, offset=state.rng.random())
        gaps = cell_needs(evo.cells, stats, cfg, s.evosyn.feedback)
        return [ContextPlan(c or None, n) for c, n in slots.items() if n > 0], slots, gaps  # () = no target
    n_ctx = min(s.n_contexts, s.n_cards)
    base, extra = divmod(s.n_cards, n_ctx)
    return [ContextPlan(None, base + (i < extra)) for i in range(n_ctx)], None, {}


def _fixed_cards(state: CoTrainState, n: int) -> list[str]:
    """``static``: n cards from the fixed corpus (distinct within the step while it lasts); ``uniform``: fresh draws."""
    if state.settings.mode == "uniform" or not state.corpus:
        return state.domain.static_cards(state.rng, n)
    corpus = state.corpus
    out: list[str] = []
    while len(out) < n:
        out += state.rng.sample(corpus, min(len(corpus), n - len(out)))
    return out


def _grade_attempts(checker: AnswerChecker, attempts: Sequence[Sequence[Completion]],
                    references: Sequence[str], extract: Callable[[str], str | None] | None = None) -> list[list[Graded]]:
    """Every attempt graded (reward mode, or the domain's own reader ``extract``) against its group's reference,
    in ONE :func:`grade` call, regrouped.

    One batch for the whole step, so a checker that fans checks out (``synco.distributed.ray_checks``)
    sees it at once.
    """
    flat = grade(checker, [(c.text, ref) for group, ref in zip(attempts, references, strict=True) for c in group],
                 mode="reward", extract=extract)
    it = iter(flat)
    return [[next(it) for _ in group] for group in attempts]


def grade_group(checker: AnswerChecker, group: Sequence[Completion], reference: str,
                cfg: ReasonerRewardConfig, extract: Callable[[str], str | None] | None = None) -> list[Rollout]:
    """Grade (one batch; ``extract``: the domain's own answer reader, if any) and reward a group of Reasoner
    attempts at one task."""
    [graded] = _grade_attempts(checker, [group], [reference], extract)
    return [_rollout(c, g, cfg) for c, g in zip(group, graded)]


def episode_rollout(ep: Episode, gold: Sequence[ToolCall] | None = None, tools: Collection[str] = ()) -> Rollout:
    """The rollout record of one graded episode: its transcript, ids (agent and environment), reward and parts.

    ``answer`` is the text of the last agent turn (the final message, when the episode ended on one);
    ``truncated`` means the episode ended on a limit (turns or tokens) instead of finishing. With the task's
    ``gold`` trajectory and the domain's ``tools``, a failed episode records where its calls first left it
    (``first_wrong``, for the capability report): its calls of those tools, and the turns that did not parse as
    a call; a call outside the inventory (the final message, e.g. ``done``) is no step of the trajectory. An episode
    its environment graded against another gold trajectory (``EpisodeGrade.gold_actions``: a database variant's) is
    measured against that one.
    """
    g = ep.grade
    assert g is not None, "an episode is graded before it is recorded"
    agent = [t for t in ep.turns if t.role == "agent"]
    first_wrong = None
    if gold is not None and g.gold_actions is not None:
        gold = g.gold_actions
    if gold is not None and not g.correct:
        calls = [t.tool_call for t in agent if t.tool_call is None or t.tool_call.name in tools]
        wrong = first_wrong_call(calls, gold)
        first_wrong = wrong[1] if wrong is not None else None
    return Rollout(text=ep.text, answer=agent[-1].text[:200] if agent else None, correct=g.correct, reward=g.reward,
                   truncated=ep.finish != "done", n_tokens=sum(ep.mask), completion_ids=list(ep.completion_ids),
                   turns=list(ep.turns), finish=ep.finish, reward_parts=dict(g.parts), first_wrong=first_wrong,
                   episode_info=dict(g.info) or None)


def _gold(domain: Domain, card: TaskCard) -> tuple[list[ToolCall] | None, Collection[str]]:
    """The card's gold trajectory and the tool inventory in a :class:`HasTrajectories` domain (``(None, ())``
    otherwise, or when the actions do not parse)."""
    if not isinstance(domain, HasTrajectories):
        return None, ()
    try:
        return domain.gold_actions(card), domain.tool_kinds.keys()
    except ValueError:
        return None, ()


def _rollout(c: Completion, graded: Graded, cfg: ReasonerRewardConfig) -> Rollout:
    """The rollout of one Reasoner attempt, from its grade (answer, method, boxed answers, correct) and its reward.

    It keeps the sampled ids, so a supervised update on the attempt (``synco.cotrain.protocols.rounds``) trains
    the tokens that were sampled and scored, not a re-tokenisation of the decoded text.
    """
    return Rollout(text=c.text, answer=graded.answer, method=graded.method, correct=graded.correct,
                   reward=reasoner_reward(graded.correct, graded.boxed, cfg), truncated=c.truncated,
                   n_tokens=len(c.completion_ids), completion_ids=list(c.completion_ids))


def advantages(rewards: Sequence[float], scale_by_std: bool) -> list[float]:
    """GRPO advantages of one group's rewards (:func:`synco.learn.grpo.group_advantages`, in float64)."""
    import torch

    return group_advantages(torch.tensor(rewards, dtype=torch.float64), scale_by_std=scale_by_std).tolist()


def group_experiences(samples: Sequence[Completion | Episode | None], rewards: Sequence[float],
                      scale_by_std: bool) -> list[Experience]:
    """One GRPO group's experiences: :func:`advantages` of its rewards, or all 0 when the rewards are equal
    (kept, so the loss is normalised over the whole batch). A sample that is None (a card of a fixed
    corpus, which no model wrote) gets no experience."""
    if len(samples) != len(rewards):
        raise ValueError(f"a group of {len(samples)} samples has {len(rewards)} rewards")
    advs = advantages(rewards, scale_by_std) if is_gradient_bearing(rewards) else [0.0] * len(rewards)
    return [c.to_experience(a) for c, a in zip(samples, advs) if c is not None]


def groups_batch(groups: Sequence[Sequence[Completion | Episode | None]], rewards: Sequence[Sequence[float]],
                 scale_by_std: bool) -> tuple[list[Experience], int]:
    """The GRPO batch of several groups and the number of groups skipped for equal rewards.

    Empty when no advantage is non-zero: then there is nothing to learn and no update is taken.
    """
    batch = [e for group, rs in zip(groups, rewards) for e in group_experiences(group, rs, scale_by_std)]
    skipped = sum(not is_gradient_bearing(rs) for rs in rewards)
    if not any(e.advantage != 0.0 for e in batch):
        return [], skipped
    return batch, skipped


def reasoner_batch(records: Sequence[TaskRecord], valid_idx: Sequence[int],
                   attempts: Sequence[Sequence[Completion | Episode]],
                   scale_by_std: bool) -> tuple[list[Experience], int]:
    """The Reasoner's GRPO batch of a step: one group per solved task (its K attempts, rewarded as recorded),
    tasks that consensus rejected after solving left out; and the groups skipped for equal rewards."""
    kept = [(group, [r.reward for r in records[i].rollouts]) for i, group in zip(valid_idx, attempts)
            if records[i].valid]
    return groups_batch([g for g, _ in kept], [rs for _, rs in kept], scale_by_std)


def synth_batch(records: Sequence[TaskRecord], samples: Sequence[Completion | None],
                scale_by_std: bool) -> tuple[list[Experience], int]:
    """The Synthesizer's GRPO batch of a step: one group per context (its cards' rewards); and the groups
    skipped for equal rewards."""
    by_context: dict[int, list[int]] = {}
    for i, rec in enumerate(records):
        by_context.setdefault(rec.context_id, []).append(i)
    groups = list(by_context.values())
    return groups_batch([[samples[i] for i in idx] for idx in groups],
                        [[records[i].synth_reward.total for i in idx] for idx in groups],  # type: ignore[union-attr]
                        scale_by_std)


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
    episodes = [ro for ro in rollouts if ro.turns is not None]
    if episodes:
        stats.mean_turns = sum(sum(t.role == "agent" for t in ro.turns or []) for ro in episodes) / len(episodes)
        stats.finishes = {}
        for ro in episodes:
            stats.finishes[str(ro.finish)] = stats.finishes.get(str(ro.finish), 0) + 1
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


def _fill_trajectory_stats(stats: StepStats, records: list[TaskRecord], domain: Domain,
                           sequences: DistinctSequences | None) -> None:
    """The valid tasks' gold trajectories (:class:`HasTrajectories` domains): interaction coverage of the tool
    inventory, evenness of their patterns, contrastive support, and the run's distinct action sequences so far."""
    if not isinstance(domain, HasTrajectories):
        return
    gold = []
    for r in records:
        if r.valid and r.card is not None:
            try:
                gold.append(domain.gold_actions(r.card))
            except ValueError:  # a valid card's actions parse; never let a metric end the step
                continue
    kinds = domain.tool_kinds
    stats.interaction_coverage = interaction_coverage(gold, kinds)
    stats.trajectory_diversity = trajectory_diversity([pattern(g, kinds) for g in gold], possible_patterns(domain))
    stats.contrastive_support = contrastive_support(gold)
    if sequences is not None:
        sequences.update(gold)
        stats.distinct_action_sequences = len(sequences)
    else:
        stats.distinct_action_sequences = distinct_action_sequences(gold)


def _fill_evosyn_stats(stats: StepStats, records: list[TaskRecord], evo: EvoState | None,
                       allocation: dict[Cell, int] | None, gaps: dict[Cell, float]) -> None:
    """Controllability, coverage and balance over the space's cells; the allocation and its rho with the gap."""
    if evo is None:
        return
    realised = [evo.space.cell_of(r.card.factors) for r in records if r.valid and r.card is not None]
    stats.factor_coverage = coverage(realised, evo.cells)
    stats.factor_balance = balance(realised, evo.cells)
    stats.space_version = evo.space.version
    judged = [r.on_target for r in records if r.on_target is not None]
    stats.controllability = sum(judged) / len(judged) if judged else None
    asked = list(dict.fromkeys(name for r in records if r.on_target is not None and r.target
                               for name, _ in parse_cell_key(r.target)))
    if asked:
        stats.controllability_by_factor = {name: factor_control(records, name).rate for name in asked}
    if allocation is not None:
        stats.allocation = {cell_key(c): n for c, n in allocation.items()}
        cells = list(allocation)
        stats.allocation_gap_spearman = spearman([gaps[c] for c in cells], [float(allocation[c]) for c in cells])
