"""Episode and gold-trajectory numbers in a run analysis (domains with an environment, e.g. the tools world).

``trajectory_analysis`` turns a ``RunData`` into a ``TrajectoryAnalysis`` (None for
single-turn runs, whose metrics.jsonl lines have none of these keys), which
``run.analyze_run`` puts in summary.json and ``plots`` / ``html`` draw. Everything
comes from metrics.jsonl, where the engine records per step: agent turns per
episode and how the episodes ended, and over the valid tasks' gold trajectories
EvoSyn's structural metrics (interaction coverage, pattern diversity, tool-order
contrastive support, the run's cumulative distinct action sequences).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import get_args

from pydantic import BaseModel

from synco.analysis.evosyn import edge_windows
from synco.analysis.rundata import MetricsLine, RunData
from synco.analysis.stats import mean
from synco.core.episodes import Finish

FINISH_ORDER: tuple[str, ...] = get_args(Finish)
"""How an episode can end, in display order; finishes not in it follow, sorted."""

TRAJECTORY_SERIES: tuple[tuple[str, str], ...] = (
    ("interaction_coverage", "interaction coverage"),
    ("trajectory_diversity", "trajectory diversity"),
    ("contrastive_support", "contrastive support"),
    ("mean_turns", "turns per episode"),
)
"""(MetricsLine / TrajectoryAnalysis field, label) of the per-step series summarised as first/last/mean."""


class SeriesSummary(BaseModel):
    """One per-step number over a run: its values and their means at the start, the end and overall."""

    values: list[float | None]  # per step of ``TrajectoryAnalysis.steps`` (None: not recorded at that step)
    first: float | None  # mean over the first 10 % of the steps (at least one) that recorded it
    last: float | None  # mean over the last 10 %
    mean: float | None  # mean over every step that recorded it


class TrajectoryAnalysis(BaseModel):
    """The episodes' and gold trajectories' part of summary.json (present only for runs that recorded them)."""

    steps: list[int]  # metrics steps that recorded any episode or trajectory number
    interaction_coverage: SeriesSummary  # share of possible tool transitions the valid tasks' gold actions make
    trajectory_diversity: SeriesSummary  # evenness of the gold tool-use patterns
    contrastive_support: SeriesSummary  # share of gold tool compositions seen in more than one order
    mean_turns: SeriesSummary  # agent turns per episode
    distinct_action_sequences: list[int | None]  # cumulative over the run, per step
    distinct_action_sequences_final: int | None  # the last recorded value: the run's distinct gold sequences
    n_episodes: int  # episodes over the run (sum of the finishes)
    finishes: dict[str, int]  # finish -> episodes over the run
    finish_shares: dict[str, float]  # finish -> share of the episodes ({} without episodes)


def trajectory_analysis(data: RunData) -> TrajectoryAnalysis | None:
    """Episode and trajectory numbers of a run; None when no metrics line recorded any."""
    rows = [m for m in data.metrics if m.has_trajectory]
    if not rows:
        return None
    first, last = edge_windows(rows)
    totals = finish_totals(rows)
    n = sum(totals.values())
    return TrajectoryAnalysis(
        steps=[m.step for m in rows],
        interaction_coverage=series_summary(rows, first, last, "interaction_coverage"),
        trajectory_diversity=series_summary(rows, first, last, "trajectory_diversity"),
        contrastive_support=series_summary(rows, first, last, "contrastive_support"),
        mean_turns=series_summary(rows, first, last, "mean_turns"),
        distinct_action_sequences=[m.distinct_action_sequences for m in rows],
        distinct_action_sequences_final=next(
            (m.distinct_action_sequences for m in reversed(rows) if m.distinct_action_sequences is not None), None),
        n_episodes=n,
        finishes=totals,
        finish_shares={k: v / n for k, v in totals.items()} if n else {},
    )


def series_summary(rows: Sequence[MetricsLine], first: Sequence[MetricsLine], last: Sequence[MetricsLine],
                   key: str) -> SeriesSummary:
    """Field ``key`` of every row, and its mean over the ``first`` / ``last`` windows and all rows (None where the
    rows did not record it)."""

    def avg(window: Sequence[MetricsLine]) -> float | None:
        return mean([v for m in window if (v := getattr(m, key)) is not None])

    return SeriesSummary(values=[getattr(m, key) for m in rows], first=avg(first), last=avg(last), mean=avg(rows))


def finish_totals(rows: Sequence[MetricsLine]) -> dict[str, int]:
    """Episodes per finish summed over the rows, in ``FINISH_ORDER`` then by name; finishes never seen left out."""
    totals: dict[str, int] = {}
    for m in rows:
        for k, v in (m.finishes or {}).items():
            totals[k] = totals.get(k, 0) + v
    order = {k: i for i, k in enumerate(FINISH_ORDER)}
    return {k: totals[k] for k in sorted(totals, key=lambda k: (order.get(k, len(order)), k))}


def _num(x: float | None, digits: int = 2) -> str:
    return "n/a" if x is None else f"{x:.{digits}f}"


def _edges(s: SeriesSummary) -> str:
    return f"{_num(s.first)} -> {_num(s.last)}"


def format_trajectory(t: TrajectoryAnalysis, label: str) -> str:
    """The trajectories line of ``synco analyze``'s text summary (first -> last 10 % of the steps)."""
    finishes = ", ".join(f"{k} {v:.1%}" for k, v in t.finish_shares.items()) or "none"
    sequences = "n/a" if t.distinct_action_sequences_final is None else str(t.distinct_action_sequences_final)
    return (f"{label} trajectories: interaction coverage {_edges(t.interaction_coverage)}, diversity "
            f"{_edges(t.trajectory_diversity)}, contrastive support {_edges(t.contrastive_support)} "
            f"(first/last 10 %), {sequences} distinct action sequences, turns per episode "
            f"{_num(t.mean_turns.mean)}, {t.n_episodes} episodes (finish: {finishes})")
