"""Run analysis (``synco analyze``) and Learn/Retain comparison (``synco compare``).

Reads only a run's files (pool.sqlite read-only, metrics.jsonl, reports/, EvoSyn's
factors.jsonl / reflector.jsonl / factor_space.json when present) or an eval
directory's raw/*.jsonl; never imports torch, so it runs anywhere the runs were
copied to. Modules:

- ``rundata``: load a run directory into typed rows (``load_run``, ``AnalysisError``)
- ``stats``: pure statistics (Pearson / point-biserial, top-fraction share, precision/recall, ...)
- ``run``: the analyses of one run (``analyze_run`` -> ``RunAnalysis`` = summary.json)
- ``evosyn``: EvoSyn's part of it (controllability, coverage, balance, allocation, gap vs next allocation,
  factor-space changes, the Reflector's evidence); None for runs without a factor space
- ``trajectory``: episodes and gold trajectories (turns, finishes, interaction coverage, pattern diversity,
  contrastive support, distinct action sequences); None for single-turn runs
- ``plots``, ``html``: PNG figures and the self-contained report.html
- ``compare``: Learn / Retain decomposition of an evaluation gain
- ``cli``: ``configure_analyze`` / ``run_analyze``, ``configure_compare`` / ``run_compare``
"""

from __future__ import annotations

from synco.analysis.cli import (
    configure_analyze,
    configure_compare,
    run_analyze,
    run_compare,
    write_multi_analysis,
    write_run_analysis,
)
from synco.analysis.compare import Comparison, LearnRetain, compare, learn_retain, read_eval_dir
from synco.analysis.run import AnalyzeOptions, RunAnalysis, analyze_run
from synco.analysis.rundata import AnalysisError, RunData, TaskRow, load_run

__all__ = [
    "AnalysisError",
    "AnalyzeOptions",
    "Comparison",
    "LearnRetain",
    "RunAnalysis",
    "RunData",
    "TaskRow",
    "analyze_run",
    "compare",
    "configure_analyze",
    "configure_compare",
    "learn_retain",
    "load_run",
    "read_eval_dir",
    "run_analyze",
    "run_compare",
    "write_multi_analysis",
    "write_run_analysis",
]
