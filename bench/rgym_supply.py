"""Where an rgym run's card slots went: per requested level, how many reached the Reasoner in their cell, outside it,
and what lost the rest; and the run's gradient-bearing groups (docs/RGYM.md, why-section points 4 and 7).

    python bench/rgym_supply.py RUN_DIR [RUN_DIR ...]

Reads the run's pool (``pool.sqlite``: each card's ``target``, ``valid``, ``on_target``, ``reasons_json``) and
``metrics.jsonl`` (``n_valid``, ``n_gradient_bearing``, ``synth_groups_skipped`` per step). No torch.
"""

from __future__ import annotations

import argparse
import collections
import json
import re
import sqlite3
from pathlib import Path
from typing import Any

_LEVEL = re.compile(r"(?:^|,)level=(\d+)")


def requested_level(target: str | None) -> str:
    """The level a card's target cell asks for (``"-"`` without one)."""
    found = _LEVEL.search(target or "")
    return found.group(1) if found else "-"


def supply(run: Path) -> dict[str, Any]:
    """The run's slots by requested level (requested, in cell, valid outside it, the rejection codes) and its totals."""
    by_level: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    with sqlite3.connect(f"file:{run / 'pool.sqlite'}?mode=ro", uri=True) as db:
        for target, valid, on_target, reasons in db.execute("SELECT target, valid, on_target, reasons_json FROM tasks"):
            row = by_level[requested_level(target)]
            row["requested"] += 1
            if valid:
                row["in_cell" if on_target or on_target is None else "valid_outside"] += 1
                row.update(f"soft:{r.split(':', 1)[0]}" for r in json.loads(reasons)
                           if r.split(":", 1)[0] in ("near_duplicate", "duplicate_in_step"))
            else:
                codes = [r.split(":", 1)[0] for r in json.loads(reasons)]
                hard = [c for c in codes if c not in ("reference_corrected",)] or ["?"]
                row[f"lost:{hard[0]}"] += 1
    metrics = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]
    totals = {"steps": len(metrics), "cards": sum(m.get("n_cards", 0) for m in metrics),
              "valid": sum(m.get("n_valid", 0) for m in metrics),
              "gradient_bearing": sum(m.get("n_gradient_bearing", 0) for m in metrics),
              "synth_groups_skipped": sum(m.get("synth_groups_skipped", 0) for m in metrics)}
    return {"levels": {k: dict(v) for k, v in sorted(by_level.items())}, "totals": totals}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", type=Path)
    for run in parser.parse_args().runs:
        found = supply(run)
        print(f"{run}: {json.dumps(found['totals'])}")
        for level, row in found["levels"].items():
            lost = ", ".join(f"{k[5:]} {v}" for k, v in sorted(row.items(), key=lambda kv: -kv[1]) if k.startswith("lost:"))
            soft = ", ".join(f"{k[5:]} {v}" for k, v in row.items() if k.startswith("soft:"))
            print(f"  level {level}: requested {row['requested']}, in cell {row.get('in_cell', 0)}, valid outside "
                  f"{row.get('valid_outside', 0)}; lost: {lost or '-'}" + (f"; repeats kept: {soft}" if soft else ""))


if __name__ == "__main__":
    main()
