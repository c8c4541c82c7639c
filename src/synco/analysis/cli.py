"""``synco analyze`` and ``synco compare``: argument setup, orchestration, output files.

The lead's ``synco.cli`` wires these in::

    p = sub.add_parser("analyze", ...); configure_analyze(p)   # then run_analyze(args)
    p = sub.add_parser("compare", ...); configure_compare(p)   # then run_compare(args)

Nothing heavy is imported at module level: matplotlib loads only when plots are drawn.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from pydantic import BaseModel

from synco.analysis.compare import compare, format_comparison, read_eval_dir
from synco.analysis.evosyn import format_evosyn, format_learning_effect
from synco.analysis.rundata import AnalysisError, RunData, load_run
from synco.analysis.run import AnalyzeOptions, RunAnalysis, analyze_run
from synco.analysis.trajectory import format_trajectory

DEFAULT_COMPARE_OUT = Path("analysis-compare")
"""Output folder (relative to the working directory) when several runs are analysed without --out."""


class MultiRunSummary(BaseModel):
    """summary.json of a several-run analysis: each run's analysis by label, in argument order."""

    runs: dict[str, RunAnalysis]


def run_labels(paths: Sequence[Path]) -> list[str]:
    """Distinct display labels: the directory name, with its parent (then a #n suffix) when names collide."""
    names = [p.resolve().name for p in paths]
    labels = [f"{p.resolve().parent.name}/{n}" if names.count(n) > 1 else n for p, n in zip(paths, names)]
    out: list[str] = []
    for lab in labels:
        unique, i = lab, 2
        while unique in out:
            unique, i = f"{lab}#{i}", i + 1
        out.append(unique)
    return out


def write_run_analysis(run_dir: Path, out: Path | None = None, options: AnalyzeOptions | None = None,
                       label: str | None = None) -> tuple[RunAnalysis, Path]:
    """Analyse one run into ``out`` (default ``<run_dir>/analysis``): PNGs, summary.json, report.html."""
    data = load_run(run_dir, label)
    out = out if out is not None else run_dir / "analysis"
    return write_analysis(data, out, options), out


def write_analysis(data: RunData, out: Path, options: AnalyzeOptions | None = None) -> RunAnalysis:
    """Analyse loaded run data into ``out``: PNGs, summary.json, report.html."""
    from synco.analysis.html import run_report
    from synco.analysis.plots import SINGLE_PLOTS, plot_evosyn, plot_run, plot_trajectory

    analysis = analyze_run(data, options)
    out.mkdir(parents=True, exist_ok=True)
    plots = plot_run(analysis, out)
    (out / "summary.json").write_text(analysis.model_dump_json(indent=2) + "\n", encoding="utf-8")
    html = run_report(analysis, list(zip(plots, SINGLE_PLOTS.values())), out, data.latest_report,
                      evosyn_plots=plot_evosyn(analysis, out), trajectory_plots=plot_trajectory([analysis], out))
    (out / "report.html").write_text(html, encoding="utf-8")
    return analysis


def write_multi_analysis(run_dirs: Sequence[Path], out: Path,
                         options: AnalyzeOptions | None = None) -> tuple[list[RunAnalysis], Path]:
    """Analyse several runs into ``out``: overlay PNGs, summary.json (every run) and one report.html.

    Only the overlays are drawn; each run's own figures come from analysing it alone.
    """
    from synco.analysis.html import compare_report
    from synco.analysis.plots import OVERLAY_PLOTS, plot_evosyn_overlays, plot_overlays, plot_trajectory

    labels = run_labels(run_dirs)
    datas = [load_run(d, lab) for d, lab in zip(run_dirs, labels)]  # read all first: fail before writing
    analyses = [analyze_run(data, options) for data in datas]
    out.mkdir(parents=True, exist_ok=True)
    overlays = (list(zip(plot_overlays(analyses, out), OVERLAY_PLOTS.values())) + plot_evosyn_overlays(analyses, out)
                + plot_trajectory(analyses, out))
    summary = MultiRunSummary(runs={a.label: a for a in analyses})
    (out / "summary.json").write_text(summary.model_dump_json(indent=2) + "\n", encoding="utf-8")
    (out / "report.html").write_text(compare_report(analyses, overlays, out), encoding="utf-8")
    return analyses, out


# ------------------------------------------------------------------ argparse


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value}")
    return value


def _fraction(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number in (0, 1], got {text!r}") from None
    if not 0.0 < value <= 1.0:
        raise argparse.ArgumentTypeError(f"expected a number in (0, 1], got {value}")
    return value


def configure_analyze(p: argparse.ArgumentParser) -> None:
    """Arguments of ``synco analyze``."""
    p.description = p.description or (
        "Analyse co-training runs from their files only (pool.sqlite, metrics.jsonl, reports/): curriculum drift, "
        "synthesis signals vs gradient-bearing status, difficulty labels vs outcomes, success-rate histogram, "
        "reward curves, verification and per-factor success; EvoSyn's numbers and, for domains with an "
        "environment, the episodes' turns and finishes and the gold trajectories' structural metrics when the run "
        "recorded them. Writes PNG plots, summary.json and a "
        "self-contained report.html. With several runs, curves are overlaid (labelled by run directory name).")
    p.add_argument("run_dirs", nargs="+", type=Path, metavar="RUN_DIR",
                   help="run directory written by `synco train` (several: compare them, e.g. cotrain frozen static)")
    p.add_argument("--out", type=Path, default=None, metavar="DIR",
                   help="output folder (default: RUN_DIR/analysis for one run, ./analysis-compare for several)")
    p.add_argument("--buckets", type=_positive_int, default=5, metavar="N",
                   help="generation buckets: equal step ranges over the run for the curriculum and per-factor "
                        "plots (fewer when the run has fewer steps) (default: %(default)s)")
    p.add_argument("--window", type=_positive_int, default=10, metavar="STEPS",
                   help="moving-average window in steps for the reward and pass-rate curves (default: %(default)s)")
    p.add_argument("--factor", default="level", metavar="KEY",
                   help="card factor for per-factor Reasoner success; tasks without it are grouped by their "
                        "difficulty_estimate (default: %(default)s)")
    p.add_argument("--learnable-labels", default="learn,medium", metavar="A,B,...",
                   help="comma-separated difficulty labels that claim a task is learnable, scored as a predictor of "
                        "gradient-bearing status (precision/recall) (default: %(default)s)")
    p.add_argument("--learnable-match", choices=("substring", "exact"), default="substring",
                   help="how --learnable-labels match a difficulty label, case-insensitively: substring (label "
                        "contains one) or exact (label equals one) (default: %(default)s)")
    p.add_argument("--top-fraction", type=_fraction, default=0.25, metavar="F",
                   help="share of valid tasks ranked highest by each signal whose gradient-bearing share is "
                        "compared with the pool's (default: %(default)s, the top quartile)")


def options_from_args(args: argparse.Namespace) -> AnalyzeOptions:
    """AnalyzeOptions from parsed ``synco analyze`` arguments."""
    return AnalyzeOptions(
        buckets=args.buckets, window=args.window, factor=args.factor,
        learnable_labels=[s.strip() for s in args.learnable_labels.split(",") if s.strip()],
        learnable_match=args.learnable_match, top_fraction=args.top_fraction)


def _headline(a: RunAnalysis) -> str:
    from synco.analysis.html import fmt

    teach = next((s for s in a.signals if s.name == "teachability"), None)
    return (f"{a.label}: {a.n_valid}/{a.n_tasks} valid ({fmt(a.pass_rate, True)}), gradient-bearing "
            f"{fmt(a.prevalence, True)}, teachability r={fmt(teach.r if teach else None)}, "
            f"Reasoner reward (end) {fmt(a.rewards.reasoner.last_moving_average)}")


def run_analyze(args: argparse.Namespace) -> int:
    """``synco analyze``: 0 on success, 2 (message on stderr) when a run cannot be read."""
    out = args.out or (args.run_dirs[0] / "analysis" if len(args.run_dirs) == 1 else DEFAULT_COMPARE_OUT)
    problem = output_problem(out)
    if problem is not None:
        fix = "choose another --out" if args.out else "pass --out DIR to write the analysis somewhere writable"
        print(f"synco analyze: cannot write the analysis to {out} ({problem}); {fix}", file=sys.stderr)
        return 2
    try:
        options = options_from_args(args)
        if len(args.run_dirs) == 1:
            analysis, out = write_run_analysis(args.run_dirs[0], args.out, options)
            analyses = [analysis]
        else:
            analyses, out = write_multi_analysis(args.run_dirs, args.out or DEFAULT_COMPARE_OUT, options)
    except AnalysisError as e:
        print(f"synco analyze: {e}", file=sys.stderr)
        return 2
    except OSError as e:  # a write failing after the check above (disk full, a file made read-only)
        print(f"synco analyze: {e}", file=sys.stderr)
        return 2
    for a in analyses:
        print(_headline(a))
        if a.evosyn is not None:
            print(format_evosyn(a.evosyn, a.label))
            table5 = format_learning_effect(a.evosyn, a.label)
            if table5 is not None:
                print(table5)
        if a.trajectory is not None:
            print(format_trajectory(a.trajectory, a.label))
        for family, r in a.heldout_by_family.items():
            transfer = ("-" if r["transfer_before"] is None else
                        f"{r['transfer_before']:.2f} -> {r['transfer_after'] or 0.0:.2f}")
            print(f"  held-out {family}: levels {r['levels_before']:.2f} -> {r['levels_after']:.2f}, transfer "
                  f"{transfer}, Learn {r['learn']}, Retain lost {r['retain_lost']}")
    print(f"wrote {out / 'report.html'} and {out / 'summary.json'}")
    return 0


def output_problem(out: Path) -> str | None:
    """Why files cannot be written into ``out`` (e.g. inside a read-only run directory), or None.

    Probes ``out`` when it exists, else its parent (where it would be made); a
    missing parent is left to the later error about the run directory itself.
    """
    where = out if out.is_dir() else out.parent
    if not where.is_dir():
        return None
    probe = where / f".synco-write-probe-{os.getpid()}"
    try:
        probe.touch()
        probe.unlink()
    except OSError as e:
        return e.strerror or str(e)
    return None


def configure_compare(p: argparse.ArgumentParser) -> None:
    """Arguments of ``synco compare``."""
    p.description = p.description or (
        "Learn/Retain decomposition (paper D.3): split each benchmark's examples by the base model's result "
        "(Learn = wrong, Retain = right) and report the trained model's accuracy on each, and how many extra "
        "solved examples come from each. Several samples per id: solved when mean correctness >= 0.5; accuracies "
        "use the mean. Only ids present in both directories count.")
    p.add_argument("base", type=Path, metavar="BASE_EVAL_DIR",
                   help="eval directory of the initial model (raw/<benchmark>.jsonl with id and correct per line)")
    p.add_argument("trained", type=Path, metavar="TRAINED_EVAL_DIR",
                   help="eval directory of the trained model, same layout")
    p.add_argument("--json", type=Path, default=None, metavar="OUT", dest="json_out",
                   help="also write the numbers as JSON to this file")


def run_compare(args: argparse.Namespace) -> int:
    """``synco compare``: prints the table (and writes --json); 2 when an eval dir cannot be read."""
    try:
        result = compare(read_eval_dir(args.base), read_eval_dir(args.trained))
    except AnalysisError as e:
        print(f"synco compare: {e}", file=sys.stderr)
        return 2
    if not result.benchmarks:
        print(f"synco compare: no benchmark in common between {args.base} and {args.trained}", file=sys.stderr)
        return 2
    print(format_comparison(result))
    if args.json_out is not None:
        args.json_out.parent.mkdir(parents=True, exist_ok=True)
        args.json_out.write_text(result.model_dump_json(indent=2) + "\n", encoding="utf-8")
        print(f"wrote {args.json_out}")
    return 0
