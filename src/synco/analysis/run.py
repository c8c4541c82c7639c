"""The numbers of one run's analysis (paper RQ2, RQ4, RQ5, RQ7, RQ8; appendix D.2, D.4, D.5).

``analyze_run`` turns a ``RunData`` into a ``RunAnalysis``, a typed record that
is written as summary.json and drawn by ``plots``. Unless a field says
otherwise, task statistics are over *valid* (verified) tasks, as in the paper,
and "gradient-bearing" is the pool's flag: the task's rollouts got different
rewards.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field, model_serializer

from synco.analysis.evosyn import EvoSynAnalysis, evosyn_analysis
from synco.analysis.rundata import HeldoutPoint, RunData, TaskRow
from synco.analysis.trajectory import TrajectoryAnalysis, trajectory_analysis
from synco.analysis.stats import (
    DifficultyOrder,
    Histogram,
    PrecisionRecall,
    difficulty_order,
    mean,
    moving_average,
    natural_key,
    pearson,
    precision_recall,
    step_buckets,
    success_histogram,
    top_share,
)

OUTCOMES: tuple[str, ...] = ("gradient_bearing", "all_correct", "all_incorrect", "other")
"""Outcome classes of a valid task, in plotting order (see ``TaskRow.outcome``)."""

SIGNALS: tuple[str, ...] = ("teachability", "synth_reward", "quality", "novelty", "reliability", "difficulty",
                            "success_rate")
"""Synthesis signals compared with gradient-bearing status (RQ4)."""


class AnalyzeOptions(BaseModel):
    """Knobs of ``synco analyze`` (each has a command-line option)."""

    buckets: int = Field(5, ge=1, description="Generation buckets: equal step ranges over the run.")
    window: int = Field(10, ge=1, description="Moving-average window (steps) of the reward curves.")
    factor: str = Field("level", description="Card factor for per-factor Reasoner success; "
                                             "tasks without it fall back to difficulty_estimate.")
    learnable_labels: list[str] = Field(default_factory=lambda: ["learn", "medium"],
                                        description="Difficulty labels that claim a task is learnable.")
    learnable_match: Literal["substring", "exact"] = Field(
        "substring", description="substring: a label containing any pattern (case-insensitive); exact: equal to one.")
    top_fraction: float = Field(0.25, gt=0, le=1, description="Top share of tasks ranked by each signal (RQ4).")


class Outcomes(BaseModel):
    """Valid tasks split by outcome class; shares are None for no tasks."""

    n: int
    counts: dict[str, int]
    shares: dict[str, float | None]


class Bucket(BaseModel):
    """One generation bucket (a range of steps) of the curriculum drift (RQ2)."""

    index: int
    step_lo: int
    step_hi: int
    n_tasks: int  # all cards, valid or not
    n_valid: int
    pass_rate: float | None
    outcomes: Outcomes
    mean_quality: float | None
    mean_novelty: float | None  # over valid tasks whose verdict has a novelty score
    mean_success_rate: float | None


class SignalStats(BaseModel):
    """One synthesis signal against gradient-bearing status (RQ4)."""

    name: str
    n: int  # valid tasks where the signal is defined
    r: float | None  # point-biserial r with gradient-bearing (0/1); None if either side is constant
    r_success_rate: float | None  # Pearson r with the raw success rate
    top_k: int | None
    top_share: float | None  # gradient-bearing share of the top ``top_fraction`` by this signal
    lift: float | None  # top_share / prevalence over the same tasks


class DifficultyGroup(BaseModel):
    """Outcomes of the valid tasks carrying one difficulty label (RQ5)."""

    label: str
    rank: int | None
    learnable: bool
    n: int
    gradient_bearing_rate: float
    all_correct_share: float
    all_incorrect_share: float
    mean_success_rate: float | None


class DifficultyAnalysis(BaseModel):
    """Does the Synthesizer's difficulty label anticipate gradient utility? (RQ5, D.5)"""

    order: DifficultyOrder
    groups: list[DifficultyGroup]
    learnable_patterns: list[str]
    learnable_match: str
    learnable: PrecisionRecall  # the "learnable" label as a predictor of gradient-bearing


class RewardCurve(BaseModel):
    """One agent's mean reward per step and its trailing moving average (RQ8)."""

    steps: list[int]
    values: list[float]
    moving_average: list[float]
    first: float | None
    last_moving_average: float | None  # the end-of-training reward
    max_moving_average: float | None


class RewardCurves(BaseModel):
    window: int
    reasoner: RewardCurve
    synthesizer: RewardCurve


class StepVerification(BaseModel):
    step: int
    n_tasks: int
    n_valid: int
    pass_rate: float | None
    reasons: dict[str, int]  # rejection reason code -> invalid cards of this step


class Verification(BaseModel):
    """Verifier pass rate and rejection reasons (codes of invalid cards) over steps."""

    pass_rate: float | None
    reason_totals: dict[str, int]  # codes of invalid cards, most frequent first
    valid_reason_totals: dict[str, int]  # soft-check codes recorded on valid cards, most frequent first
    per_step: list[StepVerification]


class FactorSuccess(BaseModel):
    """Mean Reasoner success rate per factor value, per bucket."""

    key: str
    n_fallback: int  # valid tasks grouped by difficulty_estimate because they lack the factor
    groups: list[str]  # natural order
    success: list[dict[str, float]]  # one dict per bucket: group -> mean success rate
    counts: list[dict[str, int]]  # one dict per bucket: group -> tasks with a success rate


class RunAnalysis(BaseModel):
    """Everything ``synco analyze`` computes for one run (summary.json)."""

    run: str
    label: str
    mode: str
    options: AnalyzeOptions
    n_steps: int
    first_step: int | None
    last_step: int | None
    n_tasks: int
    n_valid: int
    pass_rate: float | None
    prevalence: float | None  # gradient-bearing share of valid tasks
    outcomes: Outcomes
    buckets: list[Bucket]
    signals: list[SignalStats]
    difficulty: DifficultyAnalysis
    success_histogram: Histogram
    rewards: RewardCurves
    verification: Verification
    factor_success: FactorSuccess
    n_reports: int
    latest_report_step: int | None
    heldout: list[HeldoutPoint] = []  # the Reasoner's greedy held-out accuracy by step (empty without evaluation)
    evosyn: EvoSynAnalysis | None = None  # factor space, Designer and Reflector (None: the run has no EvoSyn)
    # episodes and gold trajectories (domains with an environment); left out of summary.json while None
    trajectory: TrajectoryAnalysis | None = None
    # held-out per family of FAMILY/PART groups (rgym): levels, transfer, Learn / Retain; left out while empty
    heldout_by_family: dict[str, dict[str, Any]] = {}

    @model_serializer(mode="wrap")
    def _omit_absent_trajectory(self, handler: Any) -> dict[str, Any]:
        """Leave ``trajectory`` out while None, so a single-turn run's summary.json keeps its keys."""
        data = handler(self)
        if data.get("trajectory", 0) is None:
            del data["trajectory"]
        if not data.get("heldout_by_family", 1):
            del data["heldout_by_family"]
        return data


def analyze_run(data: RunData, options: AnalyzeOptions | None = None) -> RunAnalysis:
    """All analyses of one run, from its files only."""
    opts = options or AnalyzeOptions()
    valid = [t for t in data.tasks if t.valid]
    steps = data.steps or sorted({t.step for t in data.tasks})
    ranges = step_buckets(steps[0], steps[-1], opts.buckets) if steps else []
    order = difficulty_order([t.difficulty for t in valid if t.difficulty is not None])
    outcomes = outcome_shares(valid)
    return RunAnalysis(
        run=str(data.path),
        label=data.label,
        mode=data.mode,
        options=opts,
        n_steps=len(steps),
        first_step=steps[0] if steps else None,
        last_step=steps[-1] if steps else None,
        n_tasks=len(data.tasks),
        n_valid=len(valid),
        pass_rate=len(valid) / len(data.tasks) if data.tasks else None,
        prevalence=outcomes.shares["gradient_bearing"],
        outcomes=outcomes,
        buckets=curriculum_buckets(data.tasks, ranges),
        signals=signal_stats(valid, order, opts.top_fraction),
        difficulty=difficulty_analysis(valid, order, opts.learnable_labels, opts.learnable_match),
        success_histogram=success_histogram([t.success_rate for t in valid if t.success_rate is not None]),
        rewards=reward_curves(data, opts.window),
        verification=verification(data.tasks, steps),
        factor_success=factor_success(valid, ranges, opts.factor),
        n_reports=data.n_reports,
        latest_report_step=data.latest_report[0] if data.latest_report else None,
        heldout=data.heldout,
        evosyn=evosyn_analysis(data),
        trajectory=trajectory_analysis(data),
        heldout_by_family=heldout_by_family(Path(data.path)),
    )


def heldout_by_family(run_dir: Path) -> dict[str, dict[str, Any]]:
    """The run's held-out per family (``synco.run.summary.family_rows``) from ``heldout_before.json`` and
    ``heldout_after.json``; {} when either is missing or its groups name no family."""
    from synco.run.summary import family_rows

    try:
        before = json.loads((run_dir / "heldout_before.json").read_text())
        after = json.loads((run_dir / "heldout_after.json").read_text())
        return family_rows(before["greedy"], after["greedy"], before["greedy_items"], after["greedy_items"])
    except (OSError, ValueError, KeyError, TypeError):
        return {}


def outcome_shares(valid: Sequence[TaskRow]) -> Outcomes:
    """Counts and shares of each outcome class among valid tasks."""
    counts = Counter(t.outcome for t in valid)
    n = len(valid)
    return Outcomes(n=n, counts={o: counts.get(o, 0) for o in OUTCOMES},
                    shares={o: counts.get(o, 0) / n if n else None for o in OUTCOMES})


def curriculum_buckets(tasks: Sequence[TaskRow], ranges: Sequence[tuple[int, int]]) -> list[Bucket]:
    """Outcome shares, quality and novelty of the valid tasks generated in each step range (RQ2)."""
    out: list[Bucket] = []
    for i, (lo, hi) in enumerate(ranges):
        inside = [t for t in tasks if lo <= t.step <= hi]
        valid = [t for t in inside if t.valid]
        out.append(Bucket(
            index=i, step_lo=lo, step_hi=hi, n_tasks=len(inside), n_valid=len(valid),
            pass_rate=len(valid) / len(inside) if inside else None,
            outcomes=outcome_shares(valid),
            mean_quality=mean([t.quality for t in valid]),
            mean_novelty=mean([t.novelty for t in valid if t.novelty is not None]),
            mean_success_rate=mean([t.success_rate for t in valid if t.success_rate is not None]),
        ))
    return out


def signal_getters(order: DifficultyOrder) -> dict[str, Callable[[TaskRow], float | None]]:
    """How to read each synthesis signal off a task (None where it is undefined)."""

    def difficulty(t: TaskRow) -> float | None:
        rank = order.ranks.get(t.difficulty) if t.difficulty is not None else None
        return None if rank is None else float(rank)

    return {
        "teachability": lambda t: t.teachability,
        "synth_reward": lambda t: t.synth_total,
        "quality": lambda t: t.quality,
        "novelty": lambda t: t.novelty,
        "reliability": lambda t: t.reliability,
        "difficulty": difficulty,
        "success_rate": lambda t: t.success_rate,
    }


def signal_stats(valid: Sequence[TaskRow], order: DifficultyOrder, fraction: float) -> list[SignalStats]:
    """Correlation and top-fraction enrichment of each signal for gradient-bearing status (RQ4)."""
    out: list[SignalStats] = []
    for name, get in signal_getters(order).items():
        rows = [(v, t) for t in valid if (v := get(t)) is not None]
        xs = [v for v, _ in rows]
        gb = [t.gradient_bearing for _, t in rows]
        with_sr = [(v, t.success_rate) for v, t in rows if t.success_rate is not None]
        top = top_share(xs, gb, fraction)
        prev = sum(gb) / len(gb) if gb else None
        out.append(SignalStats(
            name=name,
            n=len(rows),
            r=pearson(xs, [float(g) for g in gb]),
            r_success_rate=pearson([v for v, _ in with_sr], [p for _, p in with_sr]) if with_sr else None,
            top_k=top.k if top else None,
            top_share=top.share if top else None,
            lift=top.share / prev if top is not None and prev else None,
        ))
    return out


def is_learnable_label(label: str, patterns: Sequence[str], match: str) -> bool:
    """Whether a difficulty label claims "learnable" (case-insensitive substring or exact match)."""
    text = label.strip().lower()
    pats = [p.strip().lower() for p in patterns if p.strip()]
    if match == "exact":
        return text in pats
    return any(p in text for p in pats)


def difficulty_analysis(valid: Sequence[TaskRow], order: DifficultyOrder, patterns: Sequence[str],
                        match: str) -> DifficultyAnalysis:
    """Outcomes per difficulty label and the learnable label as a predictor (RQ5)."""
    labelled = [t for t in valid if t.difficulty is not None]
    by_label: dict[str, list[TaskRow]] = {}
    for t in labelled:
        by_label.setdefault(t.difficulty, []).append(t)  # type: ignore[arg-type]

    def sort_key(label: str) -> tuple[int, int, tuple[list[str | int], str]]:
        rank = order.ranks.get(label)
        return (rank is None, rank if rank is not None else 0, natural_key(label))

    groups = []
    for label in sorted(by_label, key=sort_key):
        rows = by_label[label]
        n = len(rows)
        groups.append(DifficultyGroup(
            label=label, rank=order.ranks.get(label), learnable=is_learnable_label(label, patterns, match), n=n,
            gradient_bearing_rate=sum(t.gradient_bearing for t in rows) / n,
            all_correct_share=sum(t.outcome == "all_correct" for t in rows) / n,
            all_incorrect_share=sum(t.outcome == "all_incorrect" for t in rows) / n,
            mean_success_rate=mean([t.success_rate for t in rows if t.success_rate is not None]),
        ))
    learnable = precision_recall([is_learnable_label(t.difficulty or "", patterns, match) for t in labelled],
                                 [t.gradient_bearing for t in labelled])
    return DifficultyAnalysis(order=order, groups=groups, learnable_patterns=list(patterns), learnable_match=match,
                              learnable=learnable)


def _curve(points: list[tuple[int, float]], window: int) -> RewardCurve:
    steps, values = [s for s, _ in points], [v for _, v in points]
    ma = moving_average(values, window)
    return RewardCurve(steps=steps, values=values, moving_average=ma, first=values[0] if values else None,
                       last_moving_average=ma[-1] if ma else None, max_moving_average=max(ma) if ma else None)


def reward_curves(data: RunData, window: int) -> RewardCurves:
    """Both agents' per-step mean rewards from metrics.jsonl with moving averages (RQ8)."""
    reasoner = [(m.step, m.reasoner_reward) for m in data.metrics if m.reasoner_reward is not None]
    synth = [(m.step, m.synth_reward) for m in data.metrics if m.synth_reward is not None]
    return RewardCurves(window=window, reasoner=_curve(reasoner, window),  # type: ignore[arg-type]
                        synthesizer=_curve(synth, window))  # type: ignore[arg-type]


def verification(tasks: Sequence[TaskRow], steps: Sequence[int]) -> Verification:
    """Pass rate and rejection-reason codes (of invalid cards) per step and overall."""
    per_step: list[StepVerification] = []
    by_step: dict[int, list[TaskRow]] = {}
    for t in tasks:
        by_step.setdefault(t.step, []).append(t)
    totals: Counter[str] = Counter()
    for s in steps:
        rows = by_step.get(s, [])
        codes = Counter(c for t in rows if not t.valid for c in t.reason_codes)
        totals.update(codes)
        n_valid = sum(t.valid for t in rows)
        per_step.append(StepVerification(step=s, n_tasks=len(rows), n_valid=n_valid,
                                         pass_rate=n_valid / len(rows) if rows else None,
                                         reasons=dict(sorted(codes.items()))))
    n_valid = sum(t.valid for t in tasks)
    soft = Counter(c for t in tasks if t.valid for c in t.reason_codes)
    return Verification(pass_rate=n_valid / len(tasks) if tasks else None, reason_totals=_by_count(totals),
                        valid_reason_totals=_by_count(soft), per_step=per_step)


def _by_count(counts: Counter[str]) -> dict[str, int]:
    """Most frequent first, ties by name."""
    return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


def factor_success(valid: Sequence[TaskRow], ranges: Sequence[tuple[int, int]], key: str) -> FactorSuccess:
    """Mean success rate per value of factor ``key`` (else difficulty_estimate) in each bucket."""
    grouped: list[tuple[int, str, float]] = []
    n_fallback = 0
    for t in valid:
        group = t.factors.get(key)
        if group is None and t.difficulty is not None:
            group, n_fallback = t.difficulty, n_fallback + 1
        if group is not None and t.success_rate is not None:
            grouped.append((t.step, group, t.success_rate))
    groups = sorted({g for _, g, _ in grouped}, key=natural_key)
    success: list[dict[str, float]] = []
    counts: list[dict[str, int]] = []
    for lo, hi in ranges:
        acc: dict[str, list[float]] = {}
        for s, g, p in grouped:
            if lo <= s <= hi:
                acc.setdefault(g, []).append(p)
        success.append({g: sum(v) / len(v) for g, v in sorted(acc.items(), key=lambda kv: natural_key(kv[0]))})
        counts.append({g: len(v) for g, v in sorted(acc.items(), key=lambda kv: natural_key(kv[0]))})
    return FactorSuccess(key=key, n_fallback=n_fallback, groups=groups, success=success, counts=counts)
