"""PNG figures of a run analysis (and overlays of several runs).

Figures are drawn with matplotlib's object API on an Agg canvas, never through
pyplot, so importing or running this changes no global backend state. Every
function writes one PNG and returns its path; a figure without data still gets
written, with a "no data" note, so a report always has the same set of plots.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from synco.analysis.run import OUTCOMES, RunAnalysis
from synco.analysis.trajectory import TRAJECTORY_SERIES, TrajectoryAnalysis
from synco.evosyn.space import SPACE_CHANGES

if TYPE_CHECKING:  # pragma: no cover - typing only
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

DPI = 90
OUTCOME_COLORS = {"gradient_bearing": "#2a9d8f", "all_correct": "#e9c46a", "all_incorrect": "#e76f51",
                  "other": "#adb5bd"}
MAX_GROUPS = 12  # lines / bars per panel before the rest are left out (summary.json keeps all)

SINGLE_PLOTS: dict[str, str] = {
    "curriculum.png": "Curriculum drift: outcome shares of valid tasks, quality and novelty per generation bucket (RQ2).",
    "signals.png": "Synthesis signals vs gradient-bearing status: correlation and top-fraction share (RQ4).",
    "difficulty.png": "Difficulty label vs outcome (RQ5).",
    "success_hist.png": "Reasoner success-rate histogram of valid tasks (RQ7).",
    "rewards.png": "Mean reward per step with moving average, both agents (RQ8).",
    "verification.png": "Verification pass rate and rejection reasons over steps.",
    "factor_success.png": "Reasoner success per factor value over generation buckets.",
    "heldout.png": "The Reasoner's greedy held-out accuracy by training step: mean and per group (heldout_every).",
}
"""File name -> caption of every single-run figure."""

OVERLAY_PLOTS: dict[str, str] = {
    "rewards.png": "Reward moving averages of both agents, runs overlaid (RQ8).",
    "gradient_share.png": "Gradient-bearing share of valid tasks per generation bucket, runs overlaid (RQ2).",
    "verification.png": "Verification pass rate per step (moving average), runs overlaid.",
    "success_hist.png": "Success-rate distribution of valid tasks, runs side by side (RQ7).",
    "signals.png": "Synthesis signals vs gradient-bearing status per run (RQ4).",
    "heldout.png": "The Reasoner's greedy held-out mean accuracy by training step, runs overlaid.",
}
"""File name -> caption of every multi-run overlay figure."""

EVOSYN_PLOTS: dict[str, str] = {
    "evosyn_allocation.png": "EvoSyn Designer: share of each step's card slots per cell (grouped when there are "
                             "many cells); dotted lines mark factor-space changes.",
    "evosyn_gap.png": "EvoSyn Designer: a cell's gap (need of its mean success at step t) vs its share of the slots "
                      "at step t + 1, with Spearman's rho.",
    "evosyn_metrics.png": "EvoSyn data metrics per step: controllability (valid targeted cards on their cell), "
                          "factor coverage and balance.",
    "evosyn_effect.png": "Learning effect (EvoSyn's Table 5): per training transition and cell, the change in its "
                         "share of the training against its success gain on new tasks (± s.e.); filled: targeted.",
}
"""File name -> caption of the EvoSyn figures of one run (drawn only for runs with a factor space)."""

EVOSYN_OVERLAY_PLOTS: dict[str, str] = {
    "evosyn.png": "EvoSyn controllability, factor coverage and balance per step, runs overlaid.",
}
"""File name -> caption of the EvoSyn overlay (drawn only when some run has a factor space)."""

TRAJECTORY_PLOTS: dict[str, str] = {
    "trajectory.png": "Episodes and gold trajectories per step, runs overlaid: interaction coverage (share of the "
                      "possible tool transitions), trajectory (pattern) diversity, tool-order contrastive support, "
                      "cumulative distinct action sequences, agent turns per episode, and how the episodes ended.",
}
"""File name -> caption of the trajectory figure (drawn only when some run recorded episodes or trajectories)."""

FINISH_COLORS = {"done": "#2a9d8f", "max_turns": "#e9c46a", "token_budget": "#e76f51"}


def _figure(ncols: int = 1, width: float = 6.0, height: float = 3.6,
            bottom: float = 0.55) -> tuple["Figure", list["Axes"]]:
    """A figure with ``ncols`` panels and fixed margins in inches.

    Fixed margins instead of a layout engine: constrained layout doubled the
    drawing time, and these figures have a known, simple structure.
    """
    from matplotlib.figure import Figure

    total = width * ncols
    fig = Figure(figsize=(total, height), dpi=DPI)
    fig.subplots_adjust(left=0.75 / total, right=1 - 0.2 / total, bottom=bottom / height, top=1 - 0.4 / height,
                        wspace=0.28)
    axes = fig.subplots(1, ncols, squeeze=False)[0]
    return fig, list(axes)


def _grid(nrows: int, ncols: int, width: float = 4.5, height: float = 3.2) -> tuple["Figure", list["Axes"]]:
    """A figure of ``nrows`` x ``ncols`` panels (``width`` x ``height`` inches each), fixed margins, row by row."""
    from matplotlib.figure import Figure

    w, h = width * ncols, height * nrows
    fig = Figure(figsize=(w, h), dpi=DPI)
    fig.subplots_adjust(left=0.6 / w, right=1 - 0.2 / w, bottom=0.5 / h, top=1 - 0.4 / h, wspace=0.25, hspace=0.4)
    return fig, list(fig.subplots(nrows, ncols, squeeze=False).flat)


def _save(fig: "Figure", path: Path) -> Path:
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    FigureCanvasAgg(fig)
    fig.savefig(path, format="png")
    return path


def _no_data(ax: "Axes", what: str) -> None:
    ax.text(0.5, 0.5, f"no data: {what}", ha="center", va="center", transform=ax.transAxes, color="gray")
    ax.set_xticks([])
    ax.set_yticks([])


def _short(label: str, n: int = 18) -> str:
    return label if len(label) <= n else label[: n - 1] + "…"


def plot_curriculum(a: RunAnalysis, path: Path) -> Path:
    """Stacked outcome shares per bucket; mean quality and novelty per bucket."""
    fig, (ax, ax2) = _figure(2)
    buckets = [b for b in a.buckets if b.outcomes.n]
    if not buckets:
        _no_data(ax, "no valid tasks")
        _no_data(ax2, "no valid tasks")
        return _save(fig, path)
    names = [f"{b.step_lo}-{b.step_hi}" for b in buckets]
    bottom = [0.0] * len(buckets)
    for o in OUTCOMES:
        vals = [b.outcomes.shares[o] or 0.0 for b in buckets]
        if o == "other" and not any(vals):
            continue
        ax.bar(names, vals, bottom=bottom, color=OUTCOME_COLORS[o], label=o.replace("_", " "))
        bottom = [x + v for x, v in zip(bottom, vals)]
    ax.set_ylim(0, 1)
    ax.set_xlabel("generation bucket (steps)")
    ax.set_ylabel("share of valid tasks")
    ax.legend(fontsize=7, loc="upper right")
    ax.set_title(f"{a.label}: outcomes of valid tasks")
    for key, label in (("mean_quality", "quality"), ("mean_novelty", "novelty"), ("mean_success_rate", "success rate")):
        pts = [(n, getattr(b, key)) for n, b in zip(names, buckets) if getattr(b, key) is not None]
        if pts:
            ax2.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=label)
    ax2.set_ylim(0, 1.05)
    ax2.set_xlabel("generation bucket (steps)")
    ax2.legend(fontsize=7)
    ax2.set_title("mean per bucket (valid tasks)")
    return _save(fig, path)


def plot_signals(a: RunAnalysis, path: Path) -> Path:
    """Point-biserial r of each signal; gradient-bearing share of its top fraction vs prevalence."""
    fig, (ax, ax2) = _figure(2, bottom=0.7)
    sigs = [s for s in a.signals if s.n]
    if not sigs:
        _no_data(ax, "no valid tasks")
        _no_data(ax2, "no valid tasks")
        return _save(fig, path)
    names = [s.name.replace("_", "\n") for s in sigs]
    rs = [s.r if s.r is not None else 0.0 for s in sigs]
    ax.bar(names, rs, color=["#2a9d8f" if r >= 0 else "#e76f51" for r in rs])
    for i, s in enumerate(sigs):
        ax.text(i, rs[i], "n/a" if s.r is None else f"{s.r:.2f}", ha="center",
                va="bottom" if rs[i] >= 0 else "top", fontsize=7)
    ax.axhline(0, color="black", lw=0.6)
    ax.set_ylim(-1.05, 1.05)
    ax.set_ylabel("r with gradient-bearing")
    ax.tick_params(axis="x", labelsize=7)
    ax.set_title(f"{a.label}: point-biserial correlation")
    tops = [s.top_share or 0.0 for s in sigs]
    ax2.bar(names, tops, color="#264653")
    if a.prevalence is not None:
        ax2.axhline(a.prevalence, color="#e76f51", ls="--", label=f"pool prevalence {a.prevalence:.1%}")
        ax2.legend(fontsize=7)
    ax2.set_ylim(0, 1)
    ax2.set_ylabel("gradient-bearing share")
    ax2.tick_params(axis="x", labelsize=7)
    ax2.set_title(f"top {a.options.top_fraction:.0%} ranked by each signal")
    return _save(fig, path)


def plot_difficulty(a: RunAnalysis, path: Path) -> Path:
    """Outcome shares and gradient-bearing rate per difficulty label (most frequent labels)."""
    fig, (ax,) = _figure(1, width=8.0, bottom=1.0)
    d = a.difficulty
    groups = sorted(d.groups, key=lambda g: -g.n)[:MAX_GROUPS]
    groups.sort(key=lambda g: d.groups.index(g))
    if not groups:
        _no_data(ax, "no difficulty labels on valid tasks")
        return _save(fig, path)
    names = [_short(g.label) + (" *" if g.learnable else "") for g in groups]
    other = [max(0.0, 1 - g.gradient_bearing_rate - g.all_correct_share - g.all_incorrect_share) for g in groups]
    bottom = [0.0] * len(groups)
    for key, vals in (("gradient_bearing", [g.gradient_bearing_rate for g in groups]),
                      ("all_correct", [g.all_correct_share for g in groups]),
                      ("all_incorrect", [g.all_incorrect_share for g in groups]),
                      ("other", other)):
        if key == "other" and not any(v > 1e-12 for v in vals):
            continue
        ax.bar(names, vals, bottom=bottom, color=OUTCOME_COLORS[key], label=key.replace("_", " "))
        bottom = [x + v for x, v in zip(bottom, vals)]
    for i, g in enumerate(groups):
        ax.text(i, 1.01, f"n={g.n}", ha="center", va="bottom", fontsize=7)
    if a.prevalence is not None:
        ax.axhline(a.prevalence, color="black", ls="--", lw=0.8, label=f"pool prevalence {a.prevalence:.1%}")
    ax.set_ylim(0, 1.12)
    ax.set_xticks(range(len(names)), names, fontsize=7, rotation=30, ha="right")
    ax.legend(fontsize=7, loc="lower right")
    pr = d.learnable
    prec = "n/a" if pr.precision is None else f"{pr.precision:.1%}"
    rec = "n/a" if pr.recall is None else f"{pr.recall:.1%}"
    ax.set_title(f"{a.label}: outcome by difficulty label (* = learnable; precision {prec}, recall {rec})",
                 fontsize=9)
    return _save(fig, path)


def plot_success_hist(a: RunAnalysis, path: Path) -> Path:
    """Bars of the success-rate histogram of valid tasks."""
    fig, (ax,) = _figure(1)
    h = a.success_histogram
    if not sum(h.counts):
        _no_data(ax, "no valid task with rollouts")
        return _save(fig, path)
    ax.bar(h.labels, h.counts, color="#264653")
    ax.set_xlabel("success rate p")
    ax.set_ylabel("valid tasks")
    ax.tick_params(axis="x", labelsize=7)
    ax.set_title(f"{a.label}: success-rate histogram ({sum(h.counts)} tasks)")
    return _save(fig, path)


def plot_rewards(a: RunAnalysis, path: Path) -> Path:
    """Per-step mean reward (faint) and moving average of the Reasoner and the Synthesizer."""
    fig, axes = _figure(2)
    for ax, name, curve in zip(axes, ("Reasoner", "Synthesizer"), (a.rewards.reasoner, a.rewards.synthesizer)):
        if not curve.steps:
            _no_data(ax, "metrics.jsonl has no steps")
            continue
        ax.plot(curve.steps, curve.values, color="#adb5bd", lw=0.8, label="per step")
        ax.plot(curve.steps, curve.moving_average, color="#264653", lw=1.8,
                label=f"moving average ({a.rewards.window})")
        ax.set_xlabel("step")
        ax.set_ylabel("mean reward")
        ax.set_title(f"{a.label}: {name} reward")
        ax.legend(fontsize=7)
    return _save(fig, path)


def plot_verification(a: RunAnalysis, path: Path) -> Path:
    """Pass rate per step; counts of the most frequent rejection codes per step."""
    fig, (ax, ax2) = _figure(2)
    rows = [r for r in a.verification.per_step if r.pass_rate is not None]
    if not rows:
        _no_data(ax, "no cards")
        _no_data(ax2, "no cards")
        return _save(fig, path)
    ax.plot([r.step for r in rows], [r.pass_rate for r in rows], marker=".", color="#264653")
    ax.set_ylim(0, 1.05)
    ax.set_xlabel("step")
    ax.set_ylabel("pass rate")
    ax.set_title(f"{a.label}: verification pass rate ({(a.pass_rate or 0):.1%} overall)")
    codes = list(a.verification.reason_totals)[:8]
    if not codes:
        _no_data(ax2, "no rejected cards")
    else:
        steps = [r.step for r in a.verification.per_step]
        for code in codes:
            ax2.plot(steps, [r.reasons.get(code, 0) for r in a.verification.per_step], marker=".", label=code)
        ax2.set_xlabel("step")
        ax2.set_ylabel("rejected cards")
        ax2.legend(fontsize=7)
        ax2.set_title("rejection reasons (codes)")
    return _save(fig, path)


def plot_factor_success(a: RunAnalysis, path: Path) -> Path:
    """Mean Reasoner success per factor value across buckets (most frequent values)."""
    fig, (ax,) = _figure(1, width=7.0)
    f = a.factor_success
    if not f.groups or not a.buckets:
        _no_data(ax, f"no valid task with factor {f.key!r} or a difficulty label")
        return _save(fig, path)
    totals = {g: sum(c.get(g, 0) for c in f.counts) for g in f.groups}
    shown = [g for g in f.groups if g in sorted(totals, key=lambda g: -totals[g])[:MAX_GROUPS]]
    xs = [(b.step_lo + b.step_hi) / 2 for b in a.buckets]
    for g in shown:
        pts = [(x, s[g]) for x, s in zip(xs, f.success) if g in s]
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=_short(g))
    ax.set_ylim(-0.02, 1.02)
    ax.set_xlabel("bucket centre (step)")
    ax.set_ylabel("mean success rate")
    ax.legend(fontsize=7, ncol=2)
    ax.set_title(f"{a.label}: Reasoner success per {f.key}")
    return _save(fig, path)


def plot_heldout(a: RunAnalysis, path: Path) -> Path:
    """Held-out greedy accuracy by step: the mean (bold) and every group (thin), from the run's evaluations."""
    fig, (ax,) = _figure(1, width=7.0)
    if len(a.heldout) < 2:
        _no_data(ax, "fewer than two held-out evaluations")
        return _save(fig, path)
    steps = [p.step for p in a.heldout]
    groups = list(a.heldout[0].greedy)[:MAX_GROUPS]
    for g in groups:
        ax.plot(steps, [p.greedy.get(g, float("nan")) for p in a.heldout], lw=0.9, alpha=0.7, label=_short(g))
    ax.plot(steps, [p.mean for p in a.heldout], color="black", lw=2.2, marker="o", ms=3, label="mean")
    ax.set_ylim(-0.02, 1.02)
    ax.set_xlabel("step")
    ax.set_ylabel("greedy accuracy")
    ax.set_title(f"{a.label}: held-out accuracy ({a.heldout[0].mean:.3f} -> {a.heldout[-1].mean:.3f})")
    fig.subplots_adjust(right=0.84)  # room for the legend outside the axes
    ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5), frameon=False)
    return _save(fig, path)


SINGLE_FUNCS = {
    "curriculum.png": plot_curriculum,
    "signals.png": plot_signals,
    "difficulty.png": plot_difficulty,
    "success_hist.png": plot_success_hist,
    "rewards.png": plot_rewards,
    "verification.png": plot_verification,
    "factor_success.png": plot_factor_success,
    "heldout.png": plot_heldout,
}


def plot_run(a: RunAnalysis, out: Path) -> list[Path]:
    """Every single-run figure into ``out``; returns the paths in SINGLE_PLOTS order."""
    return [SINGLE_FUNCS[name](a, out / name) for name in SINGLE_PLOTS]


# ------------------------------------------------------------------ EvoSyn

EVOSYN_SERIES: tuple[tuple[str, str], ...] = (("controllability", "controllability"),
                                              ("coverage", "factor coverage"), ("balance", "factor balance"))
"""(EvoSynAnalysis field, label) of the per-step data metrics."""


def _group_colors(groups: Sequence[str]) -> list[object]:
    """A distinct colour per allocation group; ``other`` is grey."""
    from matplotlib import colormaps

    cmap = colormaps["tab20"] if len(groups) > 10 else colormaps["tab10"]
    return ["#adb5bd" if g == "other" else cmap(i % cmap.N) for i, g in enumerate(groups)]


def _mark_changes(ax: "Axes", a: RunAnalysis) -> None:
    """Whole-number step ticks; dotted vertical lines at the factor-space changes (applied from the next step)."""
    from matplotlib.ticker import MaxNLocator

    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    e = a.evosyn
    if e is None or not e.steps:
        return
    for c in e.changes:
        if c.step >= e.steps[-1] or c.action not in SPACE_CHANGES:  # after the last plotted step, or no change
            continue
        ax.axvline(c.step + 0.5, color="black", ls=":", lw=0.8)
        ax.text(c.step + 0.5, 0.98, f"{c.action} {_short(c.factor, 12)}", rotation=90, va="top", ha="left",
                fontsize=6, transform=ax.get_xaxis_transform(),
                bbox={"facecolor": "white", "alpha": 0.7, "linewidth": 0, "pad": 1})


def plot_evosyn_allocation(a: RunAnalysis, path: Path) -> Path:
    """Stacked shares of the card slots per step, one area per cell (or per first-factor bucket / top cell)."""
    fig, (ax,) = _figure(1, width=8.0)
    alloc = a.evosyn.allocation if a.evosyn else None
    if alloc is None or not alloc.steps:
        _no_data(ax, "no Designer allocation in metrics.jsonl (Designer off)")
        return _save(fig, path)
    colors = _group_colors(alloc.groups)
    columns = [[row[i] for row in alloc.shares] for i in range(len(alloc.groups))]
    labels = [_short(g, 22) for g in alloc.groups]
    if len(alloc.steps) == 1:  # an area needs two points
        bottom = 0.0
        for col, lab, color in zip(columns, labels, colors):
            ax.bar(alloc.steps, col, bottom=bottom, color=color, label=lab, width=0.6)
            bottom += col[0]
    else:
        ax.stackplot(alloc.steps, columns, labels=labels, colors=colors)
        ax.set_xlim(alloc.steps[0], alloc.steps[-1])
    _mark_changes(ax, a)
    ax.set_ylim(0, 1)
    ax.set_xlabel("step")
    ax.set_ylabel("share of the step's card slots")
    how = {"cell": "per cell", "first_factor": "grouped by first factor", "top": "top cells + other"}[alloc.grouping]
    ax.set_title(f"{a.label}: Designer allocation {how} ({alloc.n_cells} cells)")
    fig.subplots_adjust(right=0.8)  # room for the legend outside the axes
    ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5), frameon=False, reverse=True)
    return _save(fig, path)


def plot_evosyn_gap(a: RunAnalysis, path: Path) -> Path:
    """Scatter of a cell's gap at step t against its allocation share at t + 1, coloured by step."""
    fig, (ax,) = _figure(1)
    e = a.evosyn
    if e is None or not e.gap_points:
        _no_data(ax, "no cell measured at a step followed by an allocation")
        return _save(fig, path)
    pts = e.gap_points
    sc = ax.scatter([p.gap for p in pts], [p.next_share for p in pts], c=[p.step for p in pts], cmap="viridis",
                    s=[12 + 4 * min(p.n_tasks, 20) for p in pts], alpha=0.75, edgecolors="none")
    fig.colorbar(sc, ax=ax, label="step t")
    ax.set_xlim(-0.03, 1.03)
    ax.set_ylim(bottom=0)
    ax.set_xlabel(f"gap at step t: need(mean success), target {e.designer_target:g}")
    ax.set_ylabel("share of slots at step t + 1")
    rho = "n/a" if e.gap_next_spearman is None else f"{e.gap_next_spearman:.2f}"
    ax.set_title(f"{a.label}: gap vs next allocation (Spearman rho = {rho}, {len(pts)} points)", fontsize=9)
    return _save(fig, path)


def plot_evosyn_metrics(a: RunAnalysis, path: Path) -> Path:
    """Controllability, coverage and balance per step, with the factor-space changes marked."""
    fig, (ax,) = _figure(1, width=7.0)
    e = a.evosyn
    series = [] if e is None else [(label, [(s, v) for s, v in zip(e.steps, getattr(e, field)) if v is not None])
                                   for field, label in EVOSYN_SERIES]
    drawn = False
    for label, pts in series:
        if pts:
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker=".", label=label)
            drawn = True
    if not drawn:
        _no_data(ax, "no EvoSyn metrics in metrics.jsonl")
        return _save(fig, path)
    _mark_changes(ax, a)
    ax.set_ylim(-0.02, 1.05)
    ax.set_xlabel("step")
    ax.set_ylabel("share")
    ax.legend(fontsize=7)
    ax.set_title(f"{a.label}: EvoSyn data metrics")
    return _save(fig, path)


def plot_evosyn_effect(a: RunAnalysis, path: Path) -> Path:
    """Each (transition, cell) of learning_effect.jsonl: change in allocation vs gain with its s.e.; targeted
    cells (allocation raised into the training) filled, the others hollow."""
    fig, (ax,) = _figure(1)
    e = a.evosyn
    rows = [c for t in e.transitions for c in t.cells if c.delta_share is not None] if e is not None else []
    if e is None or e.learning_effect is None or not rows:
        _no_data(ax, "no learning-effect transition with an allocation change (learning_effect.jsonl)")
        return _save(fig, path)
    for targeted in (False, True):
        pts = [c for c in rows if c.targeted == targeted]
        if pts:
            ax.errorbar([c.delta_share for c in pts], [c.gain for c in pts], yerr=[c.gain_se for c in pts], fmt="o",
                        ms=4, alpha=0.7, mfc=None if targeted else "none", elinewidth=0.6,
                        label="targeted" if targeted else "not targeted")
    ax.axhline(0.0, color="grey", lw=0.6)
    ax.axvline(0.0, color="grey", lw=0.6)
    ax.set_xlabel("change in the cell's share of the training")
    ax.set_ylabel("success gain on new tasks after the training")
    s = e.learning_effect
    rate = "n/a" if s.targeted_rate is None else f"{s.targeted_improved}/{s.targeted}"
    rho = "n/a" if s.allocation_gain_rho is None else f"{s.allocation_gain_rho:.2f}"
    ax.set_title(f"{a.label}: learning effect (targeted improved {rate}, rho = {rho})", fontsize=9)
    ax.legend(fontsize=7, frameon=False)
    return _save(fig, path)


EVOSYN_FUNCS = {
    "evosyn_allocation.png": plot_evosyn_allocation,
    "evosyn_gap.png": plot_evosyn_gap,
    "evosyn_metrics.png": plot_evosyn_metrics,
    "evosyn_effect.png": plot_evosyn_effect,
}


def plot_evosyn(a: RunAnalysis, out: Path) -> list[tuple[Path, str]]:
    """The EvoSyn figures of one run into ``out`` with their captions; [] for a run without EvoSyn."""
    if a.evosyn is None:
        return []
    return [(EVOSYN_FUNCS[name](a, out / name), caption) for name, caption in EVOSYN_PLOTS.items()]


def overlay_evosyn(runs: Sequence[RunAnalysis], path: Path) -> Path:
    """Controllability, coverage and balance per step of each run with EvoSyn, one panel each."""
    fig, axes = _figure(3, width=4.5)
    for ax, (field, label) in zip(axes, EVOSYN_SERIES):
        drawn = False
        for a in runs:
            if a.evosyn is None:
                continue
            pts = [(s, v) for s, v in zip(a.evosyn.steps, getattr(a.evosyn, field)) if v is not None]
            if pts:
                ax.plot([p[0] for p in pts], [p[1] for p in pts], marker=".", label=a.label)
                drawn = True
        if not drawn:
            _no_data(ax, f"no {label}")
            continue
        ax.set_ylim(-0.02, 1.05)
        ax.set_xlabel("step")
        ax.set_title(label)
        ax.legend(fontsize=7)
    return _save(fig, path)


def plot_evosyn_overlays(runs: Sequence[RunAnalysis], out: Path) -> list[tuple[Path, str]]:
    """The EvoSyn overlay with its caption; [] when no run has EvoSyn."""
    if not any(a.evosyn is not None for a in runs):
        return []
    return [(overlay_evosyn(runs, out / name), caption) for name, caption in EVOSYN_OVERLAY_PLOTS.items()]


# ------------------------------------------------------------------ episodes and trajectories


TRAJECTORY_PANELS: tuple[tuple[str, str], ...] = (*TRAJECTORY_SERIES[:3],
                                                  ("distinct_action_sequences", "distinct action sequences"),
                                                  TRAJECTORY_SERIES[3])
"""(TrajectoryAnalysis field, label) of the per-step panels of trajectory.png, in drawing order."""

SHARE_SERIES = frozenset(("interaction_coverage", "trajectory_diversity", "contrastive_support"))


def trajectory_points(t: TrajectoryAnalysis, field: str) -> list[tuple[int, float]]:
    """(step, value) of one trajectory series, the steps that recorded it only."""
    values = t.distinct_action_sequences if field == "distinct_action_sequences" else getattr(t, field).values
    return [(s, v) for s, v in zip(t.steps, values) if v is not None]


def overlay_trajectory(runs: Sequence[RunAnalysis], path: Path) -> Path:
    """Per step and run: the three structural shares, the cumulative distinct action sequences and the turns per
    episode, one panel each (a run keeps its colour across panels); last panel: each run's finish shares."""
    from matplotlib.ticker import MaxNLocator

    fig, axes = _grid(2, 3)
    drawn = [(f"C{i}", a.label, a.trajectory) for i, a in enumerate(runs) if a.trajectory is not None]
    for ax, (field, label) in zip(axes, TRAJECTORY_PANELS):
        any_line = False
        for color, run_label, t in drawn:
            pts = trajectory_points(t, field)
            if pts:
                ax.plot([p[0] for p in pts], [p[1] for p in pts], marker=".", color=color, label=_short(run_label))
                any_line = True
        if not any_line:
            _no_data(ax, f"no {label}")
            continue
        if field in SHARE_SERIES:
            ax.set_ylim(-0.02, 1.05)
        else:
            ax.set_ylim(bottom=0)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_xlabel("step")
        ax.set_title(label + (" (cumulative)" if field == "distinct_action_sequences" else ""))
        ax.legend(fontsize=7)
    _finish_bars(axes[len(TRAJECTORY_PANELS)], [(run_label, t) for _, run_label, t in drawn])
    return _save(fig, path)


def _finish_bars(ax: "Axes", runs: Sequence[tuple[str, TrajectoryAnalysis]]) -> None:
    """Stacked finish shares of each run's episodes (done / max_turns / token_budget), with the episode count."""
    runs = [(label, t) for label, t in runs if t.n_episodes]
    if not runs:
        _no_data(ax, "no episodes")
        return
    finishes: list[str] = []
    for _, t in runs:
        finishes.extend(k for k in t.finish_shares if k not in finishes)
    names = [_short(label, 12) for label, _ in runs]
    bottom = [0.0] * len(runs)
    for i, f in enumerate(finishes):
        vals = [t.finish_shares.get(f, 0.0) for _, t in runs]
        ax.bar(names, vals, bottom=bottom, color=FINISH_COLORS.get(f, f"C{i}"), label=f)
        bottom = [b + v for b, v in zip(bottom, vals)]
    for i, (_, t) in enumerate(runs):
        ax.text(i, 1.01, f"n={t.n_episodes}", ha="center", va="bottom", fontsize=7)
    ax.set_ylim(0, 1.3)  # room for the counts and the legend above the bars
    ax.set_yticks([0, 0.2, 0.4, 0.6, 0.8, 1.0])
    ax.set_ylabel("share of episodes")
    ax.tick_params(axis="x", labelsize=7)
    ax.legend(fontsize=7, loc="upper center", ncol=len(finishes), frameon=False)
    ax.set_title("how episodes ended")


def plot_trajectory(runs: Sequence[RunAnalysis], out: Path) -> list[tuple[Path, str]]:
    """The trajectory figure with its caption, for one run or several; [] when no run recorded episodes or
    trajectories (single-turn runs)."""
    if not any(a.trajectory is not None for a in runs):
        return []
    return [(overlay_trajectory(runs, out / name), caption) for name, caption in TRAJECTORY_PLOTS.items()]


# ------------------------------------------------------------------ overlays


def overlay_rewards(runs: Sequence[RunAnalysis], path: Path) -> Path:
    """Moving-average reward of each run, one panel per agent."""
    fig, axes = _figure(2)
    for ax, name, attr in zip(axes, ("Reasoner", "Synthesizer"), ("reasoner", "synthesizer")):
        drawn = False
        for a in runs:
            curve = getattr(a.rewards, attr)
            if curve.steps:
                ax.plot(curve.steps, curve.moving_average, label=a.label)
                drawn = True
        if not drawn:
            _no_data(ax, "no metrics")
            continue
        ax.set_xlabel("step")
        ax.set_ylabel(f"mean reward (moving average {runs[0].rewards.window})")
        ax.set_title(f"{name} reward")
        ax.legend(fontsize=7)
    return _save(fig, path)


def overlay_gradient_share(runs: Sequence[RunAnalysis], path: Path) -> Path:
    """Gradient-bearing share per bucket of each run, at bucket centres."""
    fig, (ax,) = _figure(1)
    drawn = False
    for a in runs:
        pts = [((b.step_lo + b.step_hi) / 2, b.outcomes.shares["gradient_bearing"]) for b in a.buckets
               if b.outcomes.n]
        if pts:
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=a.label)
            drawn = True
    if not drawn:
        _no_data(ax, "no valid tasks")
        return _save(fig, path)
    ax.set_ylim(0, 1)
    ax.set_xlabel("bucket centre (step)")
    ax.set_ylabel("gradient-bearing share of valid tasks")
    ax.legend(fontsize=7)
    ax.set_title("gradient-bearing share over the run")
    return _save(fig, path)


def overlay_verification(runs: Sequence[RunAnalysis], path: Path) -> Path:
    """Moving-average pass rate per step of each run."""
    from synco.analysis.stats import moving_average

    fig, (ax,) = _figure(1)
    drawn = False
    for a in runs:
        rows = [r for r in a.verification.per_step if r.pass_rate is not None]
        if rows:
            ma = moving_average([r.pass_rate for r in rows], a.options.window)  # type: ignore[misc]
            ax.plot([r.step for r in rows], ma, label=a.label)
            drawn = True
    if not drawn:
        _no_data(ax, "no cards")
        return _save(fig, path)
    ax.set_ylim(0, 1.05)
    ax.set_xlabel("step")
    ax.set_ylabel(f"pass rate (moving average {runs[0].options.window})")
    ax.legend(fontsize=7)
    ax.set_title("verification pass rate")
    return _save(fig, path)


def overlay_success_hist(runs: Sequence[RunAnalysis], path: Path) -> Path:
    """Success-rate distribution (share of each run's valid tasks) as grouped bars."""
    fig, (ax,) = _figure(1, width=7.0)
    labels: list[str] = []
    for a in runs:
        labels.extend(lab for lab in a.success_histogram.labels if lab not in labels)
    if not labels:
        _no_data(ax, "no valid task with rollouts")
        return _save(fig, path)
    try:
        labels.sort(key=float)
    except ValueError:
        pass  # binned labels of equal edges keep their order
    width = 0.8 / len(runs)
    for j, a in enumerate(runs):
        h = a.success_histogram
        total = sum(h.counts) or 1
        share = dict(zip(h.labels, (c / total for c in h.counts)))
        ax.bar([i + j * width - 0.4 + width / 2 for i in range(len(labels))],
               [share.get(lab, 0.0) for lab in labels], width=width, label=a.label)
    ax.set_xticks(range(len(labels)), labels, fontsize=7)
    ax.set_xlabel("success rate p")
    ax.set_ylabel("share of valid tasks")
    ax.legend(fontsize=7)
    ax.set_title("success-rate distribution")
    return _save(fig, path)


def overlay_signals(runs: Sequence[RunAnalysis], path: Path) -> Path:
    """Per signal, each run's r with gradient-bearing and top-fraction share, as grouped bars."""
    fig, (ax, ax2) = _figure(2, bottom=0.7)
    names = [s.name for s in runs[0].signals]
    if not any(s.n for a in runs for s in a.signals):
        _no_data(ax, "no valid tasks")
        _no_data(ax2, "no valid tasks")
        return _save(fig, path)
    width = 0.8 / len(runs)
    xs = range(len(names))
    for j, a in enumerate(runs):
        by = {s.name: s for s in a.signals}
        pos = [i + j * width - 0.4 + width / 2 for i in xs]
        ax.bar(pos, [by[n].r or 0.0 for n in names], width=width, label=a.label)
        bars = ax2.bar(pos, [by[n].top_share or 0.0 for n in names], width=width, label=a.label)
        if a.prevalence is not None:
            ax2.axhline(a.prevalence, ls="--", lw=0.9, color=bars.patches[0].get_facecolor())
    for axis in (ax, ax2):
        axis.set_xticks(list(xs), [n.replace("_", "\n") for n in names], fontsize=7)
        axis.legend(fontsize=7)
    ax.axhline(0, color="black", lw=0.6)
    ax.set_ylim(-1.05, 1.05)
    ax.set_ylabel("r with gradient-bearing (n/a drawn as 0)")
    ax.set_title("point-biserial correlation")
    ax2.set_ylim(0, 1)
    ax2.set_ylabel("gradient-bearing share")
    ax2.set_title(f"top {runs[0].options.top_fraction:.0%} by each signal (dashed: prevalence)")
    return _save(fig, path)


def overlay_heldout(runs: Sequence[RunAnalysis], path: Path) -> Path:
    """Held-out greedy mean accuracy by step, one line per run."""
    fig, (ax,) = _figure(1, width=7.0)
    drawn = [a for a in runs if len(a.heldout) >= 2]
    for a in drawn:
        ax.plot([p.step for p in a.heldout], [p.mean for p in a.heldout], marker="o", ms=3, label=a.label)
    if not drawn:
        _no_data(ax, "no run has two held-out evaluations")
        return _save(fig, path)
    ax.set_xlabel("step")
    ax.set_ylabel("held-out greedy accuracy (mean over groups)")
    ax.set_title("Reasoner held-out accuracy")
    ax.legend(fontsize=7)
    return _save(fig, path)


OVERLAY_FUNCS = {
    "rewards.png": overlay_rewards,
    "gradient_share.png": overlay_gradient_share,
    "verification.png": overlay_verification,
    "success_hist.png": overlay_success_hist,
    "signals.png": overlay_signals,
    "heldout.png": overlay_heldout,
}


def plot_overlays(runs: Sequence[RunAnalysis], out: Path) -> list[Path]:
    """Every overlay figure into ``out``; returns the paths in OVERLAY_PLOTS order."""
    return [OVERLAY_FUNCS[name](runs, out / name) for name in OVERLAY_PLOTS]
