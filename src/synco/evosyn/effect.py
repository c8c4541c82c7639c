"""The learning effect: per factor cell, how the Reasoner's success changed across one training transition.

The loop already pays for a probe the learner has never trained on: every newly synthesized task's first
attempts. A *period* is the stretch of steps that measures one learner (a round of ``protocol=rounds``, in
which the Reasoner does not change; else ``evosyn.effect_every`` steps). Between two periods the Reasoner is
trained, so for each cell measured in both

    gain = success(post period) - success(pre period),

with a standard error from the two periods' task-level spreads. What the training between them received of
the cell is its *share* of the pre period's verified tasks; the Designer raised the cell (``targeted``) when
that share rose over the period before. EvoSyn's Table 5 reads these per transition: the pre-round gap
(1 - success), the change in allocation and the post-round gain; its summary counts the targeted cells that
improved and correlates allocation with gain (:func:`summarize`).

Fed back (:func:`effect_weights`): a cell's gains over its last few transitions, pooled by inverse variance,
give the probability that training on it moves the learner; the Designer's need and the Synthesizer's
``learnability=progress`` reward are scaled by ``floor + (1 - floor) * P(gain > 0)``, so a cell that was
targeted and did not move yields budget to cells that do, and the floor (with the Designer's exploration
share) lets it come back.

All functions are pure: records in, numbers out.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from pydantic import BaseModel

from synco.core.records import TaskRecord, success_rate
from synco.evosyn.metrics import spearman
from synco.evosyn.space import FactorSpace, cell_key

MIN_TASKS = 2
"""Tasks a cell needs in each of the two periods for its gain to be measured (a spread needs two)."""


def task_success(record: TaskRecord) -> float | None:
    """A valid task's share of correct attempts (None: invalid, no card, or no attempt)."""
    if not record.valid or record.card is None or not record.rollouts:
        return None
    return success_rate(record.rollouts)


def standard_error(successes: Sequence[float], attempts: float) -> float:
    """Standard error of the mean of per-task success rates, each over ``attempts`` attempts.

    The sample variance across tasks, floored by the binomial variance one task's rate has at ``attempts``
    attempts, ``q (1 - q) / attempts`` with ``q`` the Laplace-smoothed pooled rate: a cell whose few tasks
    happen to agree is not measured as exact.
    """
    n = len(successes)
    if n == 0:
        raise ValueError("standard_error needs at least one task")
    if attempts <= 0:
        raise ValueError(f"attempts must be > 0, got {attempts!r}")
    m = sum(successes) / n
    sample = sum((x - m) ** 2 for x in successes) / (n - 1) if n > 1 else 0.0
    q = (m * n * attempts + 1) / (n * attempts + 2)
    return math.sqrt(max(sample, q * (1 - q) / attempts) / n)


@dataclass(frozen=True)
class CellMeasure:
    """One cell in one period: its solved valid tasks, their mean success and its s.e., and its share of the
    period's solved valid tasks."""

    n_tasks: int
    success: float
    se: float
    share: float


def measure(records: Iterable[TaskRecord], space: FactorSpace) -> dict[str, CellMeasure]:
    """Per cell (by key) of ``space``: what a period's records say. A record's cell is its realised one (the
    factors the domain computed when verifying it); tasks outside every cell count toward no share."""
    by_cell: dict[str, list[float]] = {}
    attempts: dict[str, list[int]] = {}
    for rec in records:
        p = task_success(rec)
        if p is None:
            continue
        assert rec.card is not None
        cell = space.cell_of(rec.card.factors)
        if cell is None:
            continue
        key = cell_key(cell)
        by_cell.setdefault(key, []).append(p)
        attempts.setdefault(key, []).append(len(rec.rollouts))
    total = sum(len(v) for v in by_cell.values())
    return {k: CellMeasure(n_tasks=len(v), success=sum(v) / len(v),
                           se=standard_error(v, sum(attempts[k]) / len(attempts[k])), share=len(v) / total)
            for k, v in by_cell.items()}


@dataclass(frozen=True)
class Period:
    """One period measured: its first and last step, the mean policy version of its attempts (None: not recorded)
    and its cells (:func:`measure`)."""

    steps: tuple[int, int]
    version: float | None
    cells: dict[str, CellMeasure]


def measure_period(records: Sequence[TaskRecord], space: FactorSpace) -> Period:
    """A period's records, measured on ``space``."""
    steps = [r.step for r in records]
    versions = [a.policy_version for r in records for a in r.rollouts if a.policy_version is not None]
    return Period(steps=(min(steps), max(steps)) if steps else (-1, -1),
                  version=sum(versions) / len(versions) if versions else None, cells=measure(records, space))


class CellEffect(BaseModel):
    """One cell across one transition (a row of EvoSyn's Table 5)."""

    cell: str
    pre: float  # success in the pre period (the learner before the training between the periods)
    pre_n: int
    post: float  # success in the post period, on tasks that training never saw
    post_n: int
    gain: float  # post - pre
    gain_se: float
    share: float  # the cell's share of the pre period's verified tasks (what the training received of it)
    prev_share: float | None = None  # its share in the period before (None: first transition, or not measured)

    @property
    def gap(self) -> float:
        """EvoSyn's pre-round gap: 1 - success."""
        return 1.0 - self.pre

    @property
    def delta_share(self) -> float | None:
        """The change in allocation the training received (None: no period before)."""
        return None if self.prev_share is None else self.share - self.prev_share

    @property
    def targeted(self) -> bool:
        """Whether the cell's allocation rose into the training (EvoSyn's targeted slices)."""
        d = self.delta_share
        return d is not None and d > 0


class Transition(BaseModel):
    """One line of ``learning_effect.jsonl``: the cells measured across one training transition."""

    step: int  # the post period's last step: when it was measured
    period: int  # the post period's index
    pre_steps: tuple[int, int]  # first and last step of the pre period
    post_steps: tuple[int, int]
    pre_version: float | None = None  # mean policy version of the pre period's attempts (None: not recorded)
    post_version: float | None = None
    cells: list[CellEffect]


def transition(pre: Mapping[str, CellMeasure], post: Mapping[str, CellMeasure],
               before: Mapping[str, CellMeasure] | None, min_tasks: int = MIN_TASKS) -> list[CellEffect]:
    """The cells measured on at least ``min_tasks`` tasks in both periods, in key order. ``before``: the
    period before ``pre`` (for the allocation change); a cell absent there had share 0."""
    out = []
    for key in sorted(set(pre) & set(post)):
        a, b = pre[key], post[key]
        if a.n_tasks < min_tasks or b.n_tasks < min_tasks:
            continue
        prev = None if before is None else (before[key].share if key in before else 0.0)
        out.append(CellEffect(cell=key, pre=a.success, pre_n=a.n_tasks, post=b.success, post_n=b.n_tasks,
                              gain=b.success - a.success, gain_se=math.hypot(a.se, b.se), share=a.share,
                              prev_share=prev))
    return out


def pooled_gain(effects: Sequence[tuple[float, float]]) -> tuple[float, float]:
    """Inverse-variance mean of (gain, s.e.) pairs and its s.e. (a zero s.e. counts as 1e-6)."""
    if not effects:
        raise ValueError("pooled_gain needs at least one (gain, se) pair")
    w = [1.0 / max(se, 1e-6) ** 2 for _, se in effects]
    total = sum(w)
    return sum(wi * g for wi, (g, _) in zip(w, effects)) / total, math.sqrt(1.0 / total)


def progress_weight(gain: float, se: float, floor: float) -> float:
    """``floor + (1 - floor) * P(gain > 0)``, with P from a normal of mean ``gain`` and s.d. ``se``."""
    if not 0.0 <= floor <= 1.0:
        raise ValueError(f"floor must be in [0, 1], got {floor!r}")
    p = 0.5 * (1.0 + math.erf(gain / (max(se, 1e-6) * math.sqrt(2.0))))
    return floor + (1.0 - floor) * p


@dataclass(frozen=True)
class EffectWeights:
    """Each measured cell's progress weight (by key) and the weight of a cell never measured: the mean of the
    measured ones (1 when none is), so an unmeasured cell is neither favoured nor starved."""

    weights: dict[str, float]
    default: float = 1.0

    def of(self, key: str | None) -> float:
        return self.default if key is None else self.weights.get(key, self.default)


def effect_weights(transitions: Sequence[Transition], memory: int, floor: float) -> EffectWeights:
    """Progress weights from each cell's gains over the last ``memory`` transitions, pooled."""
    if memory < 1:
        raise ValueError(f"memory must be >= 1, got {memory}")
    gains: dict[str, list[tuple[float, float]]] = {}
    for t in transitions[-memory:]:
        for c in t.cells:
            gains.setdefault(c.cell, []).append((c.gain, c.gain_se))
    weights = {k: progress_weight(*pooled_gain(v), floor) for k, v in gains.items()}
    return EffectWeights(weights, sum(weights.values()) / len(weights) if weights else 1.0)


class EffectSummary(BaseModel):
    """EvoSyn's Table 5 summary over a run's transitions."""

    transitions: int
    cells: int  # (transition, cell) rows
    targeted: int  # rows whose allocation rose into the training
    targeted_improved: int  # ... and whose success then rose
    targeted_rate: float | None  # targeted_improved / targeted
    gap_allocation_rho: float | None  # Spearman: pre gap vs change in allocation
    allocation_gain_rho: float | None  # Spearman: change in allocation vs post gain
    mean_gain: float | None  # mean gain over the rows
    mean_gain_weighted: float | None  # weighted by each cell's share of the training


def summarize(transitions: Sequence[Transition]) -> EffectSummary:
    """Table 5's summary numbers (rows without an allocation change are left out of the targeted counts and
    of both correlations)."""
    rows = [c for t in transitions for c in t.cells]
    moved = [c for c in rows if c.delta_share is not None]
    targeted = [c for c in moved if c.targeted]
    improved = sum(c.gain > 0 for c in targeted)
    share = sum(c.share for c in rows)
    return EffectSummary(
        transitions=len(transitions), cells=len(rows), targeted=len(targeted), targeted_improved=improved,
        targeted_rate=improved / len(targeted) if targeted else None,
        gap_allocation_rho=spearman([c.gap for c in moved], [c.delta_share or 0.0 for c in moved]),
        allocation_gain_rho=spearman([c.delta_share or 0.0 for c in moved], [c.gain for c in moved]),
        mean_gain=sum(c.gain for c in rows) / len(rows) if rows else None,
        mean_gain_weighted=sum(c.gain * c.share for c in rows) / share if share else None)


__all__ = ["CellEffect", "CellMeasure", "EffectSummary", "EffectWeights", "Period", "Transition", "effect_weights",
           "measure", "measure_period",
           "pooled_gain", "progress_weight", "standard_error", "summarize", "task_success", "transition"]
