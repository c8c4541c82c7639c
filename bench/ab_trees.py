"""A bench run against two versions of synco in one run: the code at a base commit and the working tree.

    python bench/ab_trees.py --base COMMIT [--runs 5] [--metric REGEX] -- bench/SCRIPT.py [ARGS ...]
    python bench/ab_trees.py --base COMMIT --metric 'time per step: ([0-9.]+)s' -- -m synco.cli train steps=3

Checks the base commit out into a scratch git worktree, then runs each tree's own copy of the bench script
(``PYTHONPATH=<tree>/src``, the same interpreter), alternating base and head ``--runs`` times so that a load that
comes and goes hits both alike. The number compared is the first group of ``--metric`` in the script's output (a
regular expression, e.g. ``'total +([0-9.]+) ms'``), or the run's wall-clock seconds without one. ``-m MODULE``
runs a module of each tree instead of a file (``-m synco.cli train ...``: a training run). Prints every
run, the medians and the ratio head / base (below 1: the working tree is faster), and the load before and after.

A refactor that must not slow a bench down is checked with this: the issue's bench, beside the code before it.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def run_once(tree: Path, script: list[str], metric: re.Pattern[str] | None) -> float:
    """The metric of one run of ``script`` in ``tree`` (its own copy of the script, its own ``src``)."""
    env = {**os.environ, "PYTHONPATH": str(tree / "src")}
    t = time.perf_counter()
    target = list(script) if script[0] == "-m" else [str(tree / script[0]), *script[1:]]  # a module, or a file
    proc = subprocess.run([sys.executable, *target], cwd=tree, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t
    if proc.returncode != 0:
        raise SystemExit(f"{script[0]} failed in {tree} (exit {proc.returncode}):\n{proc.stderr[-2000:]}")
    if metric is None:
        return wall
    found = metric.search(proc.stdout)
    if found is None:
        raise SystemExit(f"--metric {metric.pattern!r} matched nothing in the output of {script[0]} in {tree}:\n"
                         f"{proc.stdout[-2000:]}")
    return float(found.group(1))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base", required=True, help="the commit to compare the working tree against")
    ap.add_argument("--runs", type=int, default=5, help="runs per tree, alternating (default 5)")
    ap.add_argument("--metric", default=None, help="regex whose first group is the number compared (default: wall s)")
    ap.add_argument("script", nargs=argparse.REMAINDER, help="-- bench/SCRIPT.py [ARGS ...]")
    a = ap.parse_args()
    script = [s for s in a.script if s != "--"] if a.script[:1] == ["--"] else a.script
    if not script:
        ap.error("give the bench script after --")
    metric = re.compile(a.metric) if a.metric else None
    with tempfile.TemporaryDirectory() as d:
        base = Path(d) / "base"
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(base), a.base], check=True,
                       capture_output=True)
        try:
            print(f"load before: {subprocess.run(['uptime'], capture_output=True, text=True).stdout.strip()}")
            got: dict[str, list[float]] = {"base": [], "head": []}
            for i in range(a.runs):
                for name, tree in (("base", base), ("head", ROOT)) if i % 2 == 0 else (("head", ROOT), ("base", base)):
                    got[name].append(run_once(tree, script, metric))
                    print(f"run {i + 1} {name}: {got[name][-1]:.4g}", flush=True)
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(base)], capture_output=True)
    med = {k: statistics.median(v) for k, v in got.items()}
    print(f"load after: {subprocess.run(['uptime'], capture_output=True, text=True).stdout.strip()}")
    print(f"{' '.join(script)}  ({a.metric or 'wall seconds'})")
    print(f"median base {a.base[:10]}: {med['base']:.4g}   head (working tree): {med['head']:.4g}")
    print(f"ratio head / base: {med['head'] / med['base']:.3f}")


if __name__ == "__main__":
    main()
