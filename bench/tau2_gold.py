"""The gold agent on every τ² domain through ``synco eval --tau2 DOMAIN --model gold``: the pipeline check.

Run: ``python bench/tau2_gold.py [--out DIR] [--split base] [--domains airline retail telecom mock]``.

For each domain and user side (solo where the domain has a solo mode, and the simulated side with the scripted
user everywhere) it runs the command's own function on the whole split and prints: tasks, tasks scored, pass^1
over them, the tasks reported apart by reason, any scored task below reward 1 (there must be none: a scored task
is one whose own gold data τ²'s evaluator scores 1, so a miss is a bug in synco's parser, episode loop,
environment or grading), and the wall time. Outputs stay in ``--out`` (resumable: a rerun only times the summary).
"""

from __future__ import annotations

import argparse
import json
import time
from collections import Counter
from pathlib import Path

from synco.cli import main as synco_main

SOLO_DOMAINS = ("telecom", "mock")


def run_one(out: Path, domain: str, user: str, split: str) -> dict:
    """One gold eval; its summary with the wall time."""
    start = time.perf_counter()
    code = synco_main(["eval", "--tau2", domain, "--tau2-user", user, "--split", split, "--model", "gold",
                       "--out", str(out), "--no-progress"])
    seconds = time.perf_counter() - start
    summary = json.loads((out / "tau2_summary.json").read_text(encoding="utf-8"))
    return {**summary, "exit": code, "seconds": seconds}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("runs/tau2_gold"), help="folder of the evals (default: %(default)s)")
    ap.add_argument("--split", default="base", help="τ² split (default: %(default)s: every task)")
    ap.add_argument("--domains", nargs="+", default=["airline", "retail", "telecom", "mock"])
    args = ap.parse_args()
    rows = []
    for domain in args.domains:
        for user in (("solo", "simulated") if domain in SOLO_DOMAINS else ("simulated",)):
            s = run_one(args.out / f"{domain}-{user}", domain, user, args.split)
            reasons = Counter(r for rs in s["apart"].values() for r in rs)
            p1 = s["metrics"]["pass_hat_k"]["1"]["value"] if s["metrics"] else None
            rows.append((domain, user, s["tasks"], s["scored"], p1, dict(reasons), s["not_perfect"], s["seconds"]))
    print(f"{'domain':<8} {'user':<10} {'tasks':>5} {'scored':>6} {'pass^1':>7} {'s':>6}  apart / below 1")
    for domain, user, tasks, scored, p1, reasons, below, seconds in rows:
        p = "–" if p1 is None else f"{p1:.3f}"
        print(f"{domain:<8} {user:<10} {tasks:>5} {scored:>6} {p:>7} {seconds:>6.1f}  {reasons or ''} {below or ''}")


if __name__ == "__main__":
    main()
