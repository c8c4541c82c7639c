"""Pinned runs: a refactor must not move what a run records.

A pin is a JSON file in ``tests/run/data`` written from a run of the code before a change: the run's
``metrics.jsonl`` (every key but the timings), the summary's held-out numbers and a digest of the pool (every
task row and every attempt: validity, reasons, reference, rewards, the sampled ids' hash). :func:`check_pin`
runs the command again and lists every difference; ``SYNCO_REGEN_PINS=1`` rewrites the file instead (only when
a change is *meant* to move the numbers: say why in the commit).

Counts and strings must be equal; floats equal to :data:`REL_TOL` relative (library versions reorder float
sums: a fresh install moved losses by up to 6e-6 relative with the same code), and losses also to
:data:`LOSS_ABS_TOL` absolute (a signed sum near zero, whose float error does not scale with the result).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import sqlite3
from pathlib import Path
from typing import Any

from synco.cli import main

DATA = Path(__file__).parent / "data"
TIMINGS = {"t_generate", "t_train", "t_other"}
REL_TOL = 1e-4
"""Relative tolerance of a float (library versions reorder float sums)."""
LOSS_ABS_TOL = 1e-6
"""Absolute tolerance of a ``*_loss`` key: a sum of signed terms of order 1e-2..1 whose float error does not scale
with the (near-zero) result; a change in what the run does moves a loss by far more."""


def same(a: object, b: object, where: str) -> list[str]:
    """Paths where ``a`` and ``b`` differ (ints and strings exactly, floats to :data:`REL_TOL` relative)."""
    if isinstance(a, dict) and isinstance(b, dict):
        out = [f"{where}: keys {sorted(set(a) ^ set(b))}"] if set(a) != set(b) else []
        return out + [d for k in sorted(set(a) & set(b)) for d in same(a[k], b[k], f"{where}.{k}")]
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return [f"{where}: {len(a)} vs {len(b)} items"]
        return [d for i, (x, y) in enumerate(zip(a, b)) for d in same(x, y, f"{where}[{i}]")]
    if isinstance(a, float) and isinstance(b, float):
        abs_tol = LOSS_ABS_TOL if where.endswith("_loss") else 1e-12
        return [] if math.isclose(a, b, rel_tol=REL_TOL, abs_tol=abs_tol) else [f"{where}: {a!r} vs pinned {b!r}"]
    return [] if a == b and type(a) is type(b) else [f"{where}: {a!r} vs pinned {b!r}"]


def _digest(blob: bytes | str | None) -> str | None:
    if blob is None:
        return None
    return hashlib.sha256(blob if isinstance(blob, bytes) else blob.encode()).hexdigest()[:16]


def pool_digest(db: Path) -> list[dict[str, Any]]:
    """Every task row of the pool with its attempts, read with plain SQL (independent of the record classes)."""
    con = sqlite3.connect(db)
    con.row_factory = sqlite3.Row
    try:
        tasks = con.execute("SELECT task_id, step, slot, context_id, raw, valid, reasons_json, reference, "
                            "success_rate, synth_reward_total, target, on_target FROM tasks ORDER BY task_id").fetchall()
        out = []
        for t in tasks:
            attempts = con.execute("SELECT idx, text, correct, reward, truncated, n_tokens, token_ids FROM rollouts "
                                   "WHERE task_id = ? ORDER BY idx", (t["task_id"],)).fetchall()
            out.append({
                "step": t["step"], "slot": t["slot"], "context_id": t["context_id"], "raw": _digest(t["raw"]),
                "valid": t["valid"], "reasons": json.loads(t["reasons_json"]), "reference": t["reference"],
                "success_rate": t["success_rate"], "synth_reward": t["synth_reward_total"], "target": t["target"],
                "on_target": t["on_target"],
                "attempts": [{"text": _digest(a["text"]), "correct": a["correct"], "reward": a["reward"],
                              "truncated": a["truncated"], "n_tokens": a["n_tokens"], "ids": _digest(a["token_ids"])}
                             for a in attempts]})
        return out
    finally:
        con.close()


def run_record(argv: list[str], run: Path) -> dict[str, Any]:
    """Run ``synco`` with ``argv`` (which writes its run to ``run``) and read back what the pin compares."""
    main(argv)
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    summary = json.loads((run / "summary.json").read_text())
    return {"metrics": [{k: v for k, v in r.items() if k not in TIMINGS} for r in rows],
            "summary": {k: summary[k] for k in summary if k.startswith("heldout") or k in
                        ("n_tasks", "n_valid_tasks", "valid_rate")},
            "pool": pool_digest(run / "pool.sqlite")}


def check_pin(name: str, command: str, argv: list[str], run: Path) -> list[str]:
    """Differences between a fresh run of ``argv`` and the pin ``name`` (``command``: how the pin's README names it)."""
    path = DATA / f"{name}.json"
    got = run_record(argv, run)
    if os.environ.get("SYNCO_REGEN_PINS") == "1":
        path.write_text(json.dumps({"command": command, **got}, indent=1, sort_keys=True) + "\n")
    pin = json.loads(path.read_text())
    assert pin["command"] == command, f"{path.name} pins {pin['command']!r}, the test runs {command!r}"
    return same(got, {k: v for k, v in pin.items() if k != "command"}, name)
