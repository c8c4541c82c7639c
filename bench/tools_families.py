"""Per task family: what a tools run trained on, how its training success moved, and what held-out tasks of the
same family did (docs/TOOLS_WORLD.md).

    python bench/tools_families.py RUN_DIR [RUN_DIR ...]

RUN_DIR is a run directory of ``synco train --preset tools`` (or the folder holding exactly one, as ``runs_dir=``
leaves it). From its ``pool.sqlite``: per family (read from the instruction's template, never from the card's claim;
``?`` for an instruction outside the templates), the Reasoner's episodes on valid tasks and their success in each quarter of the run's steps.
From ``heldout_before.json`` and ``heldout_after.json`` (the final evaluation): per family, held-out tasks solved greedily
before -> after (the held-out set rebuilt from the run's seed, its family read from each instruction's template).
A family whose training success rises while its held-out tasks do not is learned as instances, not as a skill.
"""

from __future__ import annotations

import argparse
import json
import sqlite3
from collections import defaultdict
from pathlib import Path

import yaml

from synco.domains.tools import ToolsDomain
from synco.domains.tools.settings import ToolsSettings
from synco.domains.tools.tasks import HELDOUT_GROUPS, family_of_instruction
from synco.run.setup import heldout_seed


def run_dir(path: Path) -> Path:
    if (path / "pool.sqlite").exists():
        return path
    found = [p.parent for p in path.glob("*/pool.sqlite")]
    if len(found) != 1:
        raise SystemExit(f"{path}: expected a run directory or a folder with exactly one, found {len(found)}")
    return found[0]


def training_by_quarter(pool: Path, steps: int) -> dict[str, list[tuple[int, float]]]:
    """family -> [(episodes, success)] per quarter of the steps, valid tasks only."""
    con = sqlite3.connect(f"file:{pool}?mode=ro", uri=True)
    rows = con.execute("SELECT t.step, json_extract(t.payload_json, '$.instruction'), r.correct FROM rollouts r "
                       "JOIN tasks t USING(task_id) WHERE t.valid = 1").fetchall()
    con.close()
    acc: dict[str, list[list[int]]] = defaultdict(lambda: [[0, 0] for _ in range(4)])
    for step, problem, correct in rows:
        q = min(3, 4 * int(step) // max(1, steps))
        family = family_of_instruction(problem) or "?"
        acc[family][q][0] += 1
        acc[family][q][1] += int(correct)
    return {f: [(n, ok / n if n else float("nan")) for n, ok in qs] for f, qs in acc.items()}


def heldout_by_family(run: Path, seed: int, per_group: int) -> dict[str, tuple[int, int, int]]:
    """family -> (held-out tasks, solved before, solved after), greedy."""
    before = json.loads((run / "heldout_before.json").read_text())["greedy_items"]
    after_path = run / "heldout_after.json"
    if not after_path.exists():  # written by runs since session 17; before, the final items were kept nowhere
        raise SystemExit(f"{after_path} is missing: this run predates it, and heldout.jsonl's last line is not the "
                         f"final evaluation unless steps is a multiple of heldout_every")
    after = json.loads(after_path.read_text())["greedy_items"]
    groups = {key.split(":", 1)[1] for key in before}  # runs made before family groups used writes groups
    grouping = "writes" if groups <= set(HELDOUT_GROUPS) else "family"
    items = ToolsDomain(ToolsSettings(heldout_groups=grouping)).heldout(per_group, seed=heldout_seed(seed))
    out: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])
    for i, item in enumerate(items):
        key = f"{i}:{item.group}"
        family = family_of_instruction(item.problem) or "?"
        out[family][0] += 1
        out[family][1] += int(before[key])
        out[family][2] += int(after[key])
    return {f: (n, b, a) for f, (n, b, a) in out.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("runs", nargs="+", type=Path)
    args = ap.parse_args()
    for path in args.runs:
        run = run_dir(path)
        cfg = yaml.safe_load((run / "config.yaml").read_text())
        train = training_by_quarter(run / "pool.sqlite", int(cfg["steps"]))
        held = heldout_by_family(run, int(cfg["seed"]), int(cfg["heldout_per_group"]))
        print(f"\n{run}\n| family | episodes per quarter | training success per quarter | held-out solved before -> after |")
        print("|---|---|---|---|")
        for family in sorted(set(train) | set(held)):
            qs = train.get(family, [(0, float("nan"))] * 4)
            n, b, a = held.get(family, (0, 0, 0))
            print(f"| {family} | {' '.join(str(e) for e, _ in qs)} | "
                  f"{' '.join('-' if e == 0 else f'{s:.2f}' for e, s in qs)} | "
                  f"{f'{b} -> {a} of {n}' if n else '-'} |")


if __name__ == "__main__":
    main()
