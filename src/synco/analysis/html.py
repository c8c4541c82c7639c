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

from synco.analysis.run import OUTCOMES, RunAnalysis

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


def _page(title: str, body: Sequence[str]) -> str:
    return (f"<!DOCTYPE html>\n<html><head><meta charset='utf-8'><title>{escape(title)}</title>"
            f"<style>{_CSS}</style></head><body>\n" + "\n".join(body) + "\n</body></html>\n")


def run_report(a: RunAnalysis, plots: Sequence[tuple[Path, str]], base: Path,
               latest_report: tuple[int, str] | None = None) -> str:
    """The report.html of one run: tables, every plot, and the newest capability report."""
    body = [f"<h1>synco analysis: {escape(a.label)}</h1>", f"<p>run directory: <code>{escape(a.run)}</code></p>",
            run_tables(a), "<h2>Plots</h2>", *(figure(p, base, c) for p, c in plots)]
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
    return _page("synco analysis: " + " vs ".join(a.label for a in runs), body)
