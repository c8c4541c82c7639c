"""One self-contained report.html per analysis: tables of the key numbers and every plot.

Plots are embedded as base64 data URIs (the file opens anywhere on its own) and
each also links to its PNG by relative path. All text from the run (labels,
reason codes, the capability report) is HTML-escaped: it is model output.
"""

from __future__ import annotations

import base64
from collections.abc import Sequence
from html import escape
from pathlib import Path

from synco.analysis.evosyn import EvoSynAnalysis
from synco.analysis.run import OUTCOMES, RunAnalysis
from synco.analysis.trajectory import TRAJECTORY_SERIES, TrajectoryAnalysis
from synco.evosyn.space import SPACE_CHANGES, FactorChange, FactorEvidence

_CSS = """
body{font-family:system-ui,sans-serif;margin:1.5em auto;max-width:1200px;color:#222}
table{border-collapse:collapse;margin:.5em 0 1.2em;font-size:.9em}
td,th{border:1px solid #ccc;padding:.2em .6em;text-align:right}
th{background:#f3f3f3}td:first-child,th:first-child{text-align:left}
figure{margin:1em 0}img{max-width:100%;border:1px solid #eee}
figcaption{font-size:.85em;color:#555}pre{background:#f7f7f7;padding:.8em;overflow-x:auto;font-size:.8em}
"""


def fmt(x: float | int | None, pct: bool = False) -> str:
    """A number for a table cell: '–' for None, a percentage or three decimals for floats."""
    if x is None:
        return "–"
    if isinstance(x, int) and not isinstance(x, bool):
        return str(x)
    return f"{x:.1%}" if pct else f"{x:.3f}"


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    head = "".join(f"<th>{escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{escape(c)}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def figure(png: Path, base: Path, caption: str) -> str:
    """An embedded plot with a caption and a relative link to the PNG file."""
    rel = png.relative_to(base).as_posix()
    data = base64.b64encode(png.read_bytes()).decode("ascii")
    return (f'<figure><img src="data:image/png;base64,{data}" alt="{escape(rel)}">'
            f'<figcaption>{escape(caption)} (<a href="{escape(rel)}">{escape(rel)}</a>)</figcaption></figure>')


def run_tables(a: RunAnalysis) -> str:
    """The key numbers of one run as HTML tables."""
    parts = [
        _table(["run", "mode", "steps", "cards", "valid", "pass rate", "gradient-bearing prevalence"],
               [[a.label, a.mode or "–", str(a.n_steps), str(a.n_tasks), str(a.n_valid), fmt(a.pass_rate, True),
                 fmt(a.prevalence, True)]]),
        "<h3>Curriculum drift (valid tasks per generation bucket)</h3>",
        _table(["steps", "valid", *[o.replace("_", " ") for o in OUTCOMES], "quality", "novelty", "success rate"],
               [[f"{b.step_lo}-{b.step_hi}", str(b.n_valid),
                 *[fmt(b.outcomes.shares[o], True) for o in OUTCOMES],
                 fmt(b.mean_quality), fmt(b.mean_novelty), fmt(b.mean_success_rate)] for b in a.buckets]),
        "<h3>Synthesis signals vs gradient-bearing status</h3>",
        _table(["signal", "n", "r (point-biserial)", "r with success rate",
                f"top {a.options.top_fraction:.0%} share", "lift over prevalence"],
               [[s.name, str(s.n), fmt(s.r), fmt(s.r_success_rate), fmt(s.top_share, True), fmt(s.lift)]
                for s in a.signals]),
    ]
    d = a.difficulty
    pr = d.learnable
    parts += [
        f"<h3>Difficulty label vs outcome (ranking: {escape(d.order.method)})</h3>",
        _table(["label", "rank", "learnable", "n", "gradient-bearing", "all correct", "all incorrect",
                "mean success"],
               [[g.label, fmt(g.rank), "yes" if g.learnable else "", str(g.n), fmt(g.gradient_bearing_rate, True),
                 fmt(g.all_correct_share, True), fmt(g.all_incorrect_share, True), fmt(g.mean_success_rate)]
                for g in d.groups]),
        _table(["learnable label as predictor", "flagged", "gradient-bearing", "true positives", "precision",
                "recall", "r"],
               [[f"{d.learnable_match}: {', '.join(d.learnable_patterns)}", str(pr.predicted), str(pr.actual),
                 str(pr.true_positive), fmt(pr.precision, True), fmt(pr.recall, True), fmt(pr.r)]]),
        "<h3>Rewards (end of training = last moving average)</h3>",
        _table(["agent", "steps", "first", f"last moving average ({a.rewards.window})", "max moving average"],
               [[name, str(len(c.steps)), fmt(c.first), fmt(c.last_moving_average), fmt(c.max_moving_average)]
                for name, c in (("Reasoner", a.rewards.reasoner), ("Synthesizer", a.rewards.synthesizer))]),
        "<h3>Rejection reasons (invalid cards)</h3>",
        _table(["code", "cards"], [[k, str(v)] for k, v in a.verification.reason_totals.items()]),
    ]
    if a.verification.valid_reason_totals:
        parts += ["<h3>Soft-check reasons on valid cards</h3>",
                  _table(["code", "cards"], [[k, str(v)] for k, v in a.verification.valid_reason_totals.items()])]
    return "\n".join(parts)


def bucket_failures(ev: FactorEvidence | None) -> str:
    """``bucket: failure rate (n tasks)`` for every bucket of a factor's evidence, in the evidence's order."""
    if ev is None:
        return "–"
    return ", ".join(f"{b}: {fmt(r, True)} (n={ev.n_by_bucket[b]})" if b in ev.n_by_bucket else f"{b}: {fmt(r, True)}"
                     for b, r in ev.failure_by_bucket.items())


def _evidence_cells(ev: FactorEvidence | None) -> list[str]:
    """CMI, excess CMI over the permutation null, p-value and n tasks of one factor's evidence."""
    if ev is None:
        return ["–"] * 4
    return [f"{ev.cmi:.4f}", f"{ev.excess:.4f}", f"{ev.p_value:.4f}", str(ev.n_tasks)]


def evosyn_tables(e: EvoSynAnalysis) -> str:
    """EvoSyn's key numbers, the factor-space changes (factors.jsonl) and the last reflection's candidates."""
    parts = [
        _table(["controllability (first 10 %)", "controllability (last 10 %)", "coverage (mean)", "balance (mean)",
                "allocation-gap rho (mean)", "gap -> next allocation rho", "promotions", "confirmations",
                "retirements", "observed only", "space version", "factors in use", "cells"],
               [[fmt(e.controllability_first), fmt(e.controllability_last), fmt(e.coverage_mean), fmt(e.balance_mean),
                 fmt(e.allocation_gap_spearman_mean), fmt(e.gap_next_spearman), str(e.n_promotions),
                 str(e.n_confirmations), str(e.n_retirements), str(e.n_observed), fmt(e.space_version),
                 ", ".join(e.active_factors) or "–", fmt(e.n_cells)]]),
        "<h3>Factor-space changes (factors.jsonl)</h3>",
    ]
    if e.changes:
        parts.append(_table(["step", "action", "factor", "version", "CMI (nats)", "excess CMI", "p-value", "n tasks",
                             "failure rate per bucket", "control (chance)", "note"],
                            [[str(c.step), c.action, c.factor, str(c.version), *_evidence_cells(c.evidence),
                              bucket_failures(c.evidence), _control_cell(c), c.note or ""] for c in e.changes]))
    else:
        parts.append("<p>No factor was promoted, confirmed or retired.</p>")
    r = e.last_reflection
    if r is None:
        parts.append("<p>No reflection was recorded (reflector.jsonl).</p>")
        return "\n".join(parts)
    parts.append(f"<h3>Reflection at step {r.step} (reflector.jsonl, {e.n_reflections} reflections; "
                 f"{r.n_tasks} measured tasks)</h3>")
    if not r.candidates:
        parts.append("<p>Too few measured tasks: no candidate was tested.</p>")
        return "\n".join(parts)
    decided = {c.factor: c.action for c in e.changes if c.step == r.step and c.action in SPACE_CHANGES}
    rows = sorted(r.candidates.items(), key=lambda kv: -kv[1].excess)
    parts.append(_table(["factor", "decision", "CMI (nats)", "excess CMI", "p-value", "n tasks", "null CMI",
                         "n attempts", "failure rate per bucket"],
                        [[name, decided.get(name, "–"), *_evidence_cells(ev), f"{ev.cmi_null:.4f}",
                          str(ev.n_attempts), bucket_failures(ev)] for name, ev in rows]))
    return "\n".join(parts)


def _control_cell(c: FactorChange) -> str:
    """The control check's rate and its chance level, e.g. ``0.62 (0.35), 218 cards``."""
    k = c.control
    return "–" if k is None else f"{k.rate:.2f} ({k.chance:.2f}), {k.n_cards} cards"


def evosyn_section(a: RunAnalysis, plots: Sequence[tuple[Path, str]], base: Path) -> list[str]:
    """The "EvoSyn" section of a run's report: tables then plots; [] for a run without EvoSyn."""
    if a.evosyn is None:
        return []
    return ["<h2>EvoSyn</h2>", evosyn_tables(a.evosyn), *(figure(p, base, c) for p, c in plots)]


def trajectory_tables(t: TrajectoryAnalysis) -> str:
    """The episode and gold-trajectory numbers: each series at the start, the end and over the run; the distinct
    action sequences; how the episodes ended."""
    rows = [[label, fmt(s.first), fmt(s.last), fmt(s.mean), str(sum(v is not None for v in s.values))]
            for s, label in ((getattr(t, field), label) for field, label in TRAJECTORY_SERIES)]
    parts = [
        _table(["per step", "first 10 %", "last 10 %", "run mean", "steps recorded"], rows),
        _table(["distinct action sequences (end of run)", "episodes",
                *[f"finish: {k}" for k in t.finish_shares]],
               [[fmt(t.distinct_action_sequences_final), str(t.n_episodes),
                 *[f"{fmt(v, True)} ({t.finishes[k]})" for k, v in t.finish_shares.items()]]]),
    ]
    return "\n".join(parts)


def trajectory_section(a: RunAnalysis, plots: Sequence[tuple[Path, str]], base: Path) -> list[str]:
    """The "Episodes and trajectories" section of a run's report: tables then plots; [] for a single-turn run."""
    if a.trajectory is None:
        return []
    return ["<h2>Episodes and trajectories</h2>", trajectory_tables(a.trajectory),
            *(figure(p, base, c) for p, c in plots)]


def _page(title: str, body: Sequence[str]) -> str:
    return (f"<!DOCTYPE html>\n<html><head><meta charset='utf-8'><title>{escape(title)}</title>"
            f"<style>{_CSS}</style></head><body>\n" + "\n".join(body) + "\n</body></html>\n")


def run_report(a: RunAnalysis, plots: Sequence[tuple[Path, str]], base: Path,
               latest_report: tuple[int, str] | None = None,
               evosyn_plots: Sequence[tuple[Path, str]] = (),
               trajectory_plots: Sequence[tuple[Path, str]] = ()) -> str:
    """The report.html of one run: tables, every plot, the EvoSyn and the episodes-and-trajectories sections (if
    any) and the newest capability report."""
    body = [f"<h1>synco analysis: {escape(a.label)}</h1>", f"<p>run directory: <code>{escape(a.run)}</code></p>",
            run_tables(a), "<h2>Plots</h2>", *(figure(p, base, c) for p, c in plots),
            *evosyn_section(a, evosyn_plots, base), *trajectory_section(a, trajectory_plots, base)]
    if latest_report is not None:
        body.append(f"<details><summary>Newest capability report (reports/step_{latest_report[0]}.txt)</summary>"
                    f"<pre>{escape(latest_report[1])}</pre></details>")
    return _page(f"synco analysis: {a.label}", body)


def compare_report(runs: Sequence[RunAnalysis], overlays: Sequence[tuple[Path, str]], base: Path) -> str:
    """The report.html of several runs: a side-by-side table, the overlays, then each run's tables."""
    body = ["<h1>synco analysis: " + escape(" vs ".join(a.label for a in runs)) + "</h1>",
            _table(["run", "mode", "steps", "valid", "pass rate", "prevalence", "Reasoner reward (end)",
                    "Synthesizer reward (end)"],
                   [[a.label, a.mode or "–", str(a.n_steps), str(a.n_valid), fmt(a.pass_rate, True),
                     fmt(a.prevalence, True), fmt(a.rewards.reasoner.last_moving_average),
                     fmt(a.rewards.synthesizer.last_moving_average)] for a in runs]),
            "<h2>Overlays</h2>", *(figure(p, base, c) for p, c in overlays)]
    for a in runs:
        body += [f"<h2>Run {escape(a.label)}</h2>", f"<p><code>{escape(a.run)}</code></p>", run_tables(a)]
        if a.evosyn is not None:
            body += ["<h3>EvoSyn</h3>", evosyn_tables(a.evosyn)]
        if a.trajectory is not None:
            body += ["<h3>Episodes and trajectories</h3>", trajectory_tables(a.trajectory)]
    return _page("synco analysis: " + " vs ".join(a.label for a in runs), body)
