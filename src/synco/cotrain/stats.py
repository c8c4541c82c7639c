"""What one step measured: :class:`StepStats`, one line of ``metrics.jsonl``.

The core fields every step has; then one small record per feature, filled by the feature that the run chose at
setup (:class:`StepMetric`): EvoSyn's factor space (:class:`EvoSynStats`), episodes (:class:`EpisodeStats`),
gold trajectories (:class:`TrajectoryStats`), a round's training (:class:`RoundStats`), the asynchronous pipeline
(:class:`PipelineStats`). A metrics line is flat:
the feature records' fields sit beside the core ones (EvoSyn's always, as None when the run has no factor space;
the others only when their feature ran), and :meth:`StepStats.model_validate` reads such a line back.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from collections.abc import Sequence
from typing import Any, Protocol

from pydantic import BaseModel, Field, model_serializer, model_validator

from synco.core.policy import UpdateStats
from synco.core.records import TaskRecord
from synco.domains.base import Domain, HasTrajectories
from synco.evosyn.control import factor_control
from synco.evosyn.metrics import balance, coverage, spearman
from synco.evosyn.run import EvoState
from synco.evosyn.space import Cell, cell_key, parse_cell_key
from synco.evosyn.trajectory import (
    DistinctSequences,
    contrastive_support,
    distinct_action_sequences,
    interaction_coverage,
    pattern,
    possible_patterns,
    trajectory_diversity,
)


class EvoSynStats(BaseModel):
    """EvoSyn's factor space: controllability, coverage and balance over its cells, the Designer's allocation."""

    controllability: float | None = None  # share of valid targeted cards whose realised cell is the requested one
    controllability_by_factor: dict[str, float] | None = None  # per factor asked for: share realising its bucket
    factor_coverage: float | None = None  # share of the space's feasible cells hit by a valid card
    factor_balance: float | None = None  # normalised entropy of valid cards over the feasible cells
    allocation: dict[str, int] | None = None  # Designer: cell -> card slots (Designer on)
    allocation_gap_spearman: float | None = None  # Spearman rho between each cell's need (gap) and its slots
    space_version: int | None = None


class EpisodeStats(BaseModel):
    """Domains with an environment: how the step's episodes went."""

    mean_turns: float | None = None  # agent turns per episode
    finishes: dict[str, int] | None = None  # episodes per finish: done / max_turns / token_budget
    episode_notes: dict[str, int] | None = None  # episodes per environment note ``key=value`` (rgym: ``scorer=error``)


class TrajectoryStats(BaseModel):
    """Domains whose cards carry a gold trajectory: the structure of the valid tasks' trajectories."""

    interaction_coverage: float | None = None  # share of the possible tool-to-tool transitions made
    trajectory_diversity: float | None = None  # evenness of the gold tool-use patterns
    distinct_action_sequences: int | None = None  # distinct gold tool-call sequences so far in the run
    contrastive_support: float | None = None  # share of gold tool compositions seen in more than one order


class RoundStats(BaseModel):
    """What a round's last step trained (``protocol=rounds`` / ``rft``)."""

    round_examples: int | None = None  # SFT examples (update=sft) or tasks (update=grpo) the round trained on
    round_updates: int | None = None  # optimizer steps the round's training took
    round_loss: float | None = None  # their mean loss
    round_rollouts: int | None = None  # fresh Reasoner attempts the round's GRPO update sampled (0 for SFT)
    round_retokenized: int | None = None  # SFT attempts without stored sampled ids (an old pool's): text re-tokenised


class PipelineStats(BaseModel):
    """Asynchronous co-training (``max_staleness`` >= 1, :mod:`synco.cotrain.pipeline`): how far behind the step's
    attempts were, what was left out as too stale and how much of the update ran beside the next collection."""

    max_staleness: int | None = None
    collected_ahead: int | None = None  # steps collected and not yet trained after this one
    staleness: float | None = None  # mean published versions the step's attempts were behind the Reasoner
    stale_attempts_dropped: int | None = None  # attempts too stale to train the Reasoner on
    stale_cards_dropped: int | None = None  # cards too stale to train the Synthesizer on
    t_overlap: float | None = None  # seconds the update ran beside the next step's collection
    t_step: float | None = None  # the step's wall-clock seconds (its phases overlap: not t_generate + t_train + ...)
    reasoner_is_weight_mean: float | None = None  # the Reasoner update's importance weights (before truncation)
    reasoner_is_weight_std: float | None = None  # ... their spread
    reasoner_is_truncated: float | None = None  # ... the share truncated at grpo.is_cap
    synth_is_weight_mean: float | None = None  # the same for the Synthesizer's update
    synth_is_weight_std: float | None = None
    synth_is_truncated: float | None = None


class UpdateDetailStats(BaseModel):
    """What each agent's update did beyond its loss and gradient norm (:class:`~synco.core.policy.UpdateStats`), for a
    step whose update ran: the share of clipped tokens, the KL estimate to the reference, the mean probability ratio,
    the learning rate it stepped with and the largest importance weight (the decoupled objective only)."""

    reasoner_clip_frac: float | None = None
    reasoner_kl: float | None = None
    reasoner_ratio_mean: float | None = None
    reasoner_lr: float | None = None
    reasoner_is_weight_max: float | None = None
    synth_clip_frac: float | None = None
    synth_kl: float | None = None
    synth_ratio_mean: float | None = None
    synth_lr: float | None = None
    synth_is_weight_max: float | None = None


_PARTS: dict[str, type[BaseModel]] = {"evosyn": EvoSynStats, "episodes": EpisodeStats, "trajectory": TrajectoryStats,
                                      "training": RoundStats, "pipeline": PipelineStats, "update": UpdateDetailStats}
UPDATE_DETAILS = ("clip_frac", "kl", "ratio_mean", "lr", "is_weight_max")
"""The :class:`~synco.core.policy.UpdateStats` fields a metrics line carries per agent (:class:`UpdateDetailStats`)."""
_ALWAYS = ("evosyn",)  # flattened into every line (None values included), as lines have always carried them


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
    protocol: str = "online"  # synco.cotrain.protocols: online, rounds, alternating, rft
    round: int | None = None  # round (rounds, rft) or phase index (alternating); absent from online runs' lines
    phase: str | None = None  # collect / train (rounds, rft); the agent that learns (alternating)
    evosyn: EvoSynStats = Field(default_factory=EvoSynStats)
    episodes: EpisodeStats | None = None
    trajectory: TrajectoryStats | None = None
    training: RoundStats | None = None
    pipeline: PipelineStats | None = None
    update: UpdateDetailStats | None = None

    @model_validator(mode="before")
    @classmethod
    def _nest(cls, data: Any) -> Any:
        """A flat metrics line: each feature's fields back into its record."""
        if not isinstance(data, dict):
            return data
        data = dict(data)
        for name, part in _PARTS.items():
            if name in data:
                continue
            found = {k: data.pop(k) for k in list(part.model_fields) if k in data}
            if any(v is not None for v in found.values()) or (found and name in _ALWAYS):
                data[name] = found
        return data

    @model_serializer(mode="wrap")
    def _flatten(self, handler: Any) -> dict[str, Any]:
        """One flat line: the feature records' fields beside the core ones; a feature that did not run leaves no
        keys (EvoSyn's are always there), nor do ``round`` / ``phase`` of an online step."""
        data = handler(self)
        for name in _PARTS:
            part = data.pop(name, None)
            if part is not None:
                data.update(part)
            elif name in _ALWAYS:
                data.update(_PARTS[name]().model_dump())
        for key in ("round", "phase"):
            if data.get(key, 0) is None:
                del data[key]
        return data


def core_stats(stats: StepStats, records: Sequence[TaskRecord], r_update: UpdateStats | None,
               s_update: UpdateStats | None, group_factor: str) -> None:
    """The fields every step has: cards, validity, attempts, rewards, reasons, groups and both updates."""
    valid = [r for r in records if r.valid]
    stats.n_cards = len(records)
    stats.n_valid = len(valid)
    stats.valid_rate = len(valid) / max(1, len(records))
    stats.n_distinct = len({r.card.payload.prompt_text() for r in records if r.card is not None})
    stats.n_gradient_bearing = sum(r.gradient_bearing for r in valid)
    stats.gradient_share = stats.n_gradient_bearing / max(1, len(valid))
    attempts = [a for r in valid for a in r.rollouts]
    stats.reasoner_reward = sum(a.reward for a in attempts) / max(1, len(attempts))
    stats.reasoner_accuracy = sum(a.correct for a in attempts) / max(1, len(attempts))
    stats.n_reasoner_truncated = sum(a.truncated for a in attempts)
    stats.n_synth_truncated = sum(1 for r in records if r.sample is not None and r.sample.truncated)
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
            stats.update = stats.update or UpdateDetailStats()
            for name in UPDATE_DETAILS:
                setattr(stats.update, f"{prefix}_{name}", getattr(upd, name))


class StepMetric(Protocol):
    """A feature's metrics of one step, filled into its own record of ``stats``."""

    def fill(self, stats: StepStats, records: Sequence[TaskRecord], design: "Design") -> None: ...


@dataclass(frozen=True)
class Design:
    """What the Designer decided for a step: slots per cell and each cell's need (empty without a Designer)."""

    allocation: dict[Cell, int] | None = None
    gaps: dict[Cell, float] = field(default_factory=dict)


class EvoSynMetrics:
    """Controllability, coverage and balance over the space's cells; the allocation and its rho with the gap."""

    def __init__(self, evo: EvoState) -> None:
        self.evo = evo

    def fill(self, stats: StepStats, records: Sequence[TaskRecord], design: Design) -> None:
        evo, out = self.evo, stats.evosyn
        realised = [evo.space.cell_of(r.card.factors) for r in records if r.valid and r.card is not None]
        out.factor_coverage = coverage(realised, evo.cells)
        out.factor_balance = balance(realised, evo.cells)
        out.space_version = evo.space.version
        judged = [r.on_target for r in records if r.on_target is not None]
        out.controllability = sum(judged) / len(judged) if judged else None
        asked = list(dict.fromkeys(name for r in records if r.on_target is not None and r.target
                                   for name, _ in parse_cell_key(r.target)))
        if asked:
            out.controllability_by_factor = {name: factor_control(records, name).rate for name in asked}
        if design.allocation is not None:
            out.allocation = {cell_key(c): n for c, n in design.allocation.items()}
            cells = list(design.allocation)
            out.allocation_gap_spearman = spearman([design.gaps[c] for c in cells],
                                                   [float(design.allocation[c]) for c in cells])


class EpisodeMetrics:
    """Agent turns per episode and episodes per finish, over the valid tasks' attempts."""

    def fill(self, stats: StepStats, records: Sequence[TaskRecord], design: Design) -> None:
        episodes = [a for r in records if r.valid for a in r.rollouts]
        if not episodes:
            return
        finishes: dict[str, int] = {}
        notes: dict[str, int] = {}
        for a in episodes:
            finishes[str(a.finish)] = finishes.get(str(a.finish), 0) + 1
            for key, value in (a.episode_info or {}).items():
                notes[f"{key}={value}"] = notes.get(f"{key}={value}", 0) + 1
        stats.episodes = EpisodeStats(
            mean_turns=sum(sum(t.role == "agent" for t in a.turns or []) for a in episodes) / len(episodes),
            finishes=finishes, episode_notes=notes or None)


class TrajectoryMetrics:
    """The valid tasks' gold trajectories (:class:`HasTrajectories` domains): interaction coverage of the tool
    inventory, evenness of their patterns, contrastive support, and the run's distinct action sequences so far."""

    def __init__(self, domain: HasTrajectories, sequences: DistinctSequences | None) -> None:
        self.domain, self.sequences = domain, sequences

    def fill(self, stats: StepStats, records: Sequence[TaskRecord], design: Design) -> None:
        gold = []
        for r in records:
            if r.valid and r.card is not None:
                try:
                    gold.append(self.domain.gold_actions(r.card))
                except ValueError:  # a valid card's actions parse; never let a metric end the step
                    continue
        kinds = self.domain.tool_kinds
        out = TrajectoryStats(interaction_coverage=interaction_coverage(gold, kinds),
                              trajectory_diversity=trajectory_diversity([pattern(g, kinds) for g in gold],
                                                                        possible_patterns(self.domain)),
                              contrastive_support=contrastive_support(gold))
        if self.sequences is not None:
            self.sequences.update(gold)
            out.distinct_action_sequences = len(self.sequences)
        else:
            out.distinct_action_sequences = distinct_action_sequences(gold)
        stats.trajectory = out


def step_metrics(domain: Domain, episodic: bool, evo: EvoState | None,
                 sequences: DistinctSequences | None) -> tuple[StepMetric, ...]:
    """The metrics a run's features add to each step, chosen once at setup."""
    out: list[StepMetric] = []
    if evo is not None:
        out.append(EvoSynMetrics(evo))
    if episodic:
        out.append(EpisodeMetrics())
    if isinstance(domain, HasTrajectories):
        out.append(TrajectoryMetrics(domain, sequences))
    return tuple(out)
