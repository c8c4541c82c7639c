"""EvoSyn's numbers in a run analysis: controllability, coverage, balance, the Designer's allocation, the
factor-space history and the Reflector's evidence.

``evosyn_analysis`` turns a ``RunData`` into an ``EvoSynAnalysis`` (None for runs
without a factor space), which ``run.analyze_run`` puts in summary.json and
``plots`` / ``html`` draw. Everything comes from metrics.jsonl, factors.jsonl,
reflector.jsonl, factor_space.json and the pool's task factors.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from pydantic import BaseModel

from synco.analysis.rundata import MetricsLine, ReflectionLine, RunData, TaskRow
from synco.analysis.stats import mean, natural_key
from synco.evosyn.designer import need
from synco.evosyn.effect import EffectSummary, Transition, summarize
from synco.evosyn.metrics import spearman
from synco.evosyn.space import FactorChange, parse_cell_key

DEFAULT_TARGET = 0.5
"""The Designer's default target success rate, used when the run's config.yaml cannot be read."""

MAX_ALLOCATION_GROUPS = 12
"""Most areas in the allocation plot: beyond it, cells are grouped by their first factor, else top cells + other."""

OTHER = "other"


class AllocationSeries(BaseModel):
    """The Designer's slot shares per step, in display groups (cells, first-factor buckets or top cells)."""

    grouping: Literal["cell", "first_factor", "top"]
    n_cells: int  # distinct cell keys over the run
    steps: list[int]
    groups: list[str]
    shares: list[list[float]]  # per step, per group: share of that step's slots (0 when the step had none)


class GapPoint(BaseModel):
    """A cell's gap measured on step ``step``'s tasks and its allocation share at the next step."""

    step: int
    cell: str
    n_tasks: int  # valid tasks of the cell at ``step`` with a success rate
    success: float  # their mean success rate
    gap: float  # need(success): 1 at the Designer's target, 0 at success 0 and 1
    next_share: float  # the cell's share of the slots at step + 1


class EvoSynAnalysis(BaseModel):
    """EvoSyn's part of summary.json (present only for runs with a factor space)."""

    steps: list[int]  # metrics steps that recorded EvoSyn numbers
    controllability: list[float | None]
    coverage: list[float | None]
    balance: list[float | None]
    allocation_gap_spearman: list[float | None]  # rho(need, slots) at each step, as the engine logged it
    controllability_first: float | None  # mean over the first 10 % of the steps (at least one)
    controllability_last: float | None  # mean over the last 10 %
    coverage_mean: float | None
    balance_mean: float | None
    allocation_gap_spearman_mean: float | None
    designer_target: float
    allocation: AllocationSeries | None  # None: the Designer was off
    gap_points: list[GapPoint]
    gap_next_spearman: float | None  # rho over every gap point: gap at t vs share at t + 1
    changes: list[FactorChange]
    n_promotions: int
    n_confirmations: int
    n_retirements: int
    last_reflection: ReflectionLine | None  # the newest reflection that measured candidates, else the newest
    n_reflections: int
    space_version: int | None
    n_observed: int  # promoted factors the control check took out of the cells (observe)
    active_factors: list[str]  # factors in use at the end (from factor_space.json); "name (observed)" when not steered
    n_cells: int | None
    learning_effect: EffectSummary | None = None  # EvoSyn's Table 5 over learning_effect.jsonl (None: no transition)
    transitions: list[Transition] = []  # its rows


def evosyn_analysis(data: RunData) -> EvoSynAnalysis | None:
    """EvoSyn's numbers of a run; None when neither its files nor its metrics fields are there."""
    rows = [m for m in data.metrics if m.has_evosyn]
    files = data.evosyn
    if not rows and files is None:
        return None
    target = files.designer_target if files is not None and files.designer_target is not None else DEFAULT_TARGET
    changes = list(files.changes) if files is not None else []
    reflections = list(files.reflections) if files is not None else []
    space = files.space if files is not None else None
    first, last = edge_windows(rows)
    points = gap_points(rows, data.tasks, target)
    return EvoSynAnalysis(
        steps=[m.step for m in rows],
        controllability=[m.controllability for m in rows],
        coverage=[m.factor_coverage for m in rows],
        balance=[m.factor_balance for m in rows],
        allocation_gap_spearman=[m.allocation_gap_spearman for m in rows],
        controllability_first=_mean_of(first, "controllability"),
        controllability_last=_mean_of(last, "controllability"),
        coverage_mean=_mean_of(rows, "factor_coverage"),
        balance_mean=_mean_of(rows, "factor_balance"),
        allocation_gap_spearman_mean=_mean_of(rows, "allocation_gap_spearman"),
        designer_target=target,
        allocation=allocation_series(rows),
        gap_points=points,
        gap_next_spearman=spearman([p.gap for p in points], [p.next_share for p in points]),
        changes=changes,
        n_promotions=sum(c.action == "promote" for c in changes),
        n_confirmations=sum(c.action == "confirm" for c in changes),
        n_retirements=sum(c.action == "retire" for c in changes),
        n_observed=sum(c.action == "observe" for c in changes),
        last_reflection=last_reflection(reflections),
        n_reflections=len(reflections),
        space_version=space.version if space is not None else next(
            (m.space_version for m in reversed(rows) if m.space_version is not None), None),
        active_factors=[f.name if f.steered else f"{f.name} (observed)" for f in space.active()] if space is not None else [],
        n_cells=files.n_cells if files is not None else None,
        learning_effect=summarize(files.effects) if files is not None and files.effects else None,
        transitions=list(files.effects) if files is not None else [],
    )


def edge_windows(rows: Sequence[MetricsLine]) -> tuple[list[MetricsLine], list[MetricsLine]]:
    """The first and last 10 % of the steps (at least one each), as ``synco train``'s summary takes them."""
    w = max(1, len(rows) // 10)
    return list(rows[:w]), list(rows[-w:])


def _mean_of(rows: Sequence[MetricsLine], key: str) -> float | None:
    """Mean of a metrics field over the rows that recorded it."""
    return mean([v for m in rows if (v := getattr(m, key)) is not None])


def last_reflection(reflections: Sequence[ReflectionLine]) -> ReflectionLine | None:
    """The newest reflection that measured candidates (later ones may have had too few tasks), else the newest."""
    with_evidence = [r for r in reflections if r.candidates]
    if with_evidence:
        return with_evidence[-1]
    return reflections[-1] if reflections else None


def _shares(allocation: dict[str, int]) -> dict[str, float]:
    """Each cell's share of a step's slots (all 0 when there were none)."""
    total = sum(allocation.values())
    return {k: (v / total if total else 0.0) for k, v in allocation.items()}


def first_factor(cell: str) -> str:
    """The first ``factor=bucket`` of a cell key (the whole key when it has one factor)."""
    return cell.split(",", 1)[0]


def allocation_series(rows: Sequence[MetricsLine], max_groups: int = MAX_ALLOCATION_GROUPS) -> AllocationSeries | None:
    """Slot shares per step, grouped so a plot stays readable; None when no step has an allocation.

    Up to ``max_groups`` cells: one group per cell. More: one per bucket of the
    first factor (e.g. ``level=L3``; promoted factors come after the built-in
    ones, so this survives a promotion), if that gives at most ``max_groups``;
    else the ``max_groups - 1`` cells with the largest total share and ``other``.
    """
    steps = [m for m in rows if m.allocation is not None]
    if not steps:
        return None
    shares = [_shares(m.allocation or {}) for m in steps]
    cells = sorted({k for s in shares for k in s}, key=natural_key)
    if len(cells) <= max_groups:
        grouping, group_of = "cell", {c: c for c in cells}
    elif len({first_factor(c) for c in cells}) <= max_groups:
        grouping, group_of = "first_factor", {c: first_factor(c) for c in cells}
    else:
        totals = {c: sum(s.get(c, 0.0) for s in shares) for c in cells}
        top = set(sorted(cells, key=lambda c: (-totals[c], natural_key(c)))[: max_groups - 1])
        grouping, group_of = "top", {c: (c if c in top else OTHER) for c in cells}
    groups = sorted(set(group_of.values()), key=lambda g: (g == OTHER, natural_key(g)))
    table = []
    for s in shares:
        acc = dict.fromkeys(groups, 0.0)
        for c, v in s.items():
            acc[group_of[c]] += v
        table.append([acc[g] for g in groups])
    return AllocationSeries(grouping=grouping, n_cells=len(cells), steps=[m.step for m in steps], groups=groups,
                            shares=table)


def in_cell(task: TaskRow, cell: str) -> bool:
    """Whether a task's factor values (computed by the domain, from the pool) match every bucket of ``cell``."""
    try:
        pairs = parse_cell_key(cell)
    except ValueError:
        return False
    return bool(pairs) and all(task.factors.get(k) == v for k, v in pairs)


def gap_points(rows: Sequence[MetricsLine], tasks: Sequence[TaskRow], target: float = DEFAULT_TARGET) -> list[GapPoint]:
    """For each step t whose next step t + 1 has an allocation: every cell of that allocation measured at t.

    The gap is ``need`` of the mean success rate of the cell's valid tasks at step t
    (the Designer itself smooths over a longer window, so this is the gap the data
    showed, not a copy of its input). Cells without a measured task at t are left out.
    """
    by_step: dict[int, list[TaskRow]] = {}
    for t in tasks:
        if t.valid and t.success_rate is not None:
            by_step.setdefault(t.step, []).append(t)
    alloc = {m.step: m.allocation for m in rows if m.allocation is not None}
    out: list[GapPoint] = []
    for step in sorted(alloc):
        measured = by_step.get(step - 1)
        if not measured:
            continue
        for cell, share in _shares(alloc[step]).items():
            rates = [t.success_rate for t in measured if in_cell(t, cell)]
            if not rates:
                continue
            p = sum(rates) / len(rates)  # type: ignore[arg-type]
            out.append(GapPoint(step=step - 1, cell=cell, n_tasks=len(rates), success=p, gap=need(p, target),
                                next_share=share))
    return out


def _num(x: float | None, digits: int = 2) -> str:
    return "n/a" if x is None else f"{x:.{digits}f}"


def format_evosyn(e: EvoSynAnalysis, label: str) -> str:
    """The EvoSyn line of ``synco analyze``'s text summary."""
    return (f"{label} EvoSyn: controllability {_num(e.controllability_first)} -> {_num(e.controllability_last)} "
            f"(first/last 10 %), coverage {_num(e.coverage_mean)}, balance {_num(e.balance_mean)}, "
            f"allocation-gap rho {_num(e.allocation_gap_spearman_mean)} (gap -> next allocation "
            f"{_num(e.gap_next_spearman)}), {e.n_promotions} promotions, {e.n_confirmations} confirmations, "
            f"{e.n_retirements} retirements, {e.n_observed} observed only")


def format_learning_effect(e: EvoSynAnalysis, label: str, max_rows: int = 12) -> str | None:
    """EvoSyn's Table 5 in ``synco analyze``'s text: per transition its targeted cells (allocation raised into the
    training) with the pre gap, the change in allocation and the post gain, then the summary; None without
    transitions."""
    s = e.learning_effect
    if s is None:
        return None
    lines = [f"{label} learning effect (EvoSyn Table 5; learning_effect.jsonl): {s.transitions} transitions, "
             f"targeted cells improved {s.targeted_improved}/{s.targeted} ({_num(s.targeted_rate)}), "
             f"rho(gap, d alloc) {_num(s.gap_allocation_rho)}, rho(d alloc, gain) {_num(s.allocation_gain_rho)}, "
             f"mean gain {_signed(s.mean_gain)} (by share {_signed(s.mean_gain_weighted)})",
             f"  {'steps':>11}  {'targeted cell':<28} {'gap':>5} {'d alloc':>8} {'gain':>7} {'s.e.':>5}"]
    rows = [(t, c) for t in e.transitions for c in t.cells if c.targeted]
    for t, c in rows[-max_rows:]:
        steps = f"{t.pre_steps[0]}-{t.pre_steps[1]}>{t.post_steps[1]}"
        lines.append(f"  {steps:>11}  {c.cell[:28]:<28} {c.gap:5.2f} {c.delta_share or 0.0:+8.3f} {c.gain:+7.3f} "
                     f"{c.gain_se:5.3f}")
    if len(rows) > max_rows:
        lines.append(f"  ({len(rows) - max_rows} earlier targeted rows in summary.json)")
    return "\n".join(lines)


def _signed(v: float | None) -> str:
    return "-" if v is None else f"{v:+.3f}"
