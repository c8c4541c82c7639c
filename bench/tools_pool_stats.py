"""What each arm of a tools bench verified: the figures behind finding 10's "why static leads".

    python bench/tools_cotrain.py --seeds 3 4 5 --jobs 2 --out DIR    # keeps the runs
    python bench/tools_pool_stats.py DIR/*-s4 [--window 10]

Per run directory (read-only, through ``synco.analysis.rundata`` and ``valid_tasks.jsonl``): valid pool rows (with
``rounds.accumulate`` each one is an SFT example of the last round), distinct instructions and distinct gold action
lists among them (a static corpus is revisited, so its rows repeat), valid cards per step over the first and last
``--window`` steps, the share of rejections that are duplicates, the three most common families among valid tasks
and their share, the fewest and most valid tasks of one family, and the valid tasks' pattern mix (with mean training
success) over the first and last window.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from synco.analysis.rundata import AnalysisError, TaskRow, load_run  # noqa: E402
from synco.core.records import DUPLICATE_CODES  # noqa: E402


def _pattern_mix(rows: list[TaskRow]) -> str:
    """``pattern:share(mean success)`` of valid rows, sorted by pattern."""
    if not rows:
        return "-"
    by: dict[str, list[float]] = {}
    for r in rows:
        by.setdefault(r.factors.get("pattern", "?"), []).append(r.success_rate or 0.0)
    return " ".join(f"{k}:{len(v) / len(rows):.2f}({statistics.mean(v):.2f})" for k, v in sorted(by.items()))


def pool_stats(tasks: list[TaskRow], valid_rows: list[dict], window: int) -> dict[str, object]:
    """The figures of one run (see the module docstring) from its pool tasks and its ``valid_tasks.jsonl`` rows."""
    valid = [t for t in tasks if t.valid]
    rejected = [t for t in tasks if not t.valid]
    last = max((t.step for t in tasks), default=0)
    per_step = Counter(t.step for t in valid)
    families = Counter(t.factors.get("family", "?") for t in valid)
    top = families.most_common(3)
    return {
        "valid rows": len(valid),
        "distinct instructions": len({r["problem"] for r in valid_rows}),
        "distinct action lists": len({json.dumps(r.get("actions", r.get("solution")), sort_keys=True) for r in valid_rows}),
        "valid/step first": float(statistics.mean(per_step.get(s, 0) for s in range(window))),
        "valid/step last": float(statistics.mean(per_step.get(s, 0) for s in range(last - window + 1, last + 1))),
        "duplicate share of rejections":
            sum(bool(DUPLICATE_CODES.intersection(t.reason_codes)) for t in rejected) / len(rejected) if rejected else 0.0,
        "top families": ", ".join(f"{k} {n}" for k, n in top),
        "top-3 share": sum(n for _, n in top) / len(valid) if valid else 0.0,
        "families (min..max tasks)":
            f"{len(families)} ({min(families.values())}..{max(families.values())})" if families else "0",
        "patterns first": _pattern_mix([t for t in valid if t.step < window]),
        "patterns last": _pattern_mix([t for t in valid if t.step > last - window]),
    }


def run_stats(run: Path, window: int) -> dict[str, object]:
    """:func:`pool_stats` of a run directory, read-only."""
    rows = [json.loads(line) for line in (run / "valid_tasks.jsonl").read_text().splitlines() if line.strip()]
    return pool_stats(load_run(run).tasks, rows, window)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("runs", nargs="+", type=Path, help="run directories (a bench's --out DIR/<arm>-s<seed>)")
    ap.add_argument("--window", type=int, default=10, help="steps in the first / last window (default 10)")
    args = ap.parse_args(argv)
    if args.window < 1:
        ap.error(f"--window must be >= 1, got {args.window}")
    for run in args.runs:
        try:
            stats = run_stats(run, args.window)
        except (AnalysisError, OSError, KeyError, ValueError) as e:
            print(f"{run}: cannot read ({e})", file=sys.stderr)
            return 2
        print(f"== {run.name}")
        for k, v in stats.items():
            print(f"  {k:31s} {v:.2f}" if isinstance(v, float) else f"  {k:31s} {v}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
