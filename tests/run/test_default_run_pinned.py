"""The default run's numbers are pinned: a refactor must not move them.

``synco train steps=3 seed=0 threads=1 heldout_per_group=40`` (the embedded arith default) must record the same
``metrics.jsonl`` (every key but the timings) and the same held-out accuracies as when the pin was taken
(tests/run/data/default_run_pinned.json; its metrics from main before the layered packages: on 2026-12-04 the
held-out was cut from the default 150 items a group to 40 to save 35 s of the suite, the metrics rows unchanged,
since the held-out set is drawn apart from the training stream). Counts and strings must
be equal; floats equal to 1e-4 relative (a held-out accuracy, a ratio of counts, moves by more than that when one
item flips). The dependencies are not locked,
and a fresh install on 2026-12-02 (transformers 5.24, numpy 2.4.6) moved the losses and gradient norms by up to
6e-6 relative with the same code (its float reductions run in another order), while every count and accuracy
stayed identical; a change in what the run does moves them by far more. A loss is a signed sum of terms of the
size of the advantages (GRPO's are centred, so the first step's loss is near zero): its float error is absolute, not
relative, and on another CPU (2026-12-03) the reasoner's first loss moved from -1.44639e-4 to -1.44655e-4 (1.7e-8
absolute, 1.1e-4 relative). Losses are therefore compared to :data:`LOSS_ABS_TOL` absolute as well. When a change is
*meant* to move these numbers, regenerate the file from such a run and say why in the commit.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pins import TIMINGS, same as _same
from synco.cli import main

PIN = Path(__file__).parent / "data" / "default_run_pinned.json"


def test_same_helper_reports_paths() -> None:
    assert _same({"a": [1, 2.0]}, {"a": [1, 2.0 + 1e-6]}, "x") == []
    assert _same({"a": 0.0029519324}, {"a": 0.0029519139}, "x") == []  # the drift measured across installs
    assert _same({"a": 0.0029519}, {"a": 0.0029529}, "x") == ["x.a: 0.0029519 vs pinned 0.0029529"]
    assert _same({"a": [1, 2.0]}, {"a": [2, 2.5]}, "x") == ["x.a[0]: 1 vs pinned 2", "x.a[1]: 2.0 vs pinned 2.5"]
    assert _same({"n": 1}, {"n": 1.0}, "x") == ["x.n: 1 vs pinned 1.0"]
    # a loss near zero: the cross-CPU drift measured passes, a real change does not; other keys stay relative
    assert _same({"reasoner_loss": -0.00014465549611486495}, {"reasoner_loss": -0.00014463892148341984}, "m") == []
    assert _same({"reasoner_loss": -0.000150}, {"reasoner_loss": -0.000144}, "m") == [
        "m.reasoner_loss: -0.00015 vs pinned -0.000144"]
    assert _same({"grad": -0.00014465549611486495}, {"grad": -0.00014463892148341984}, "m") != []


@pytest.mark.slow
def test_default_run_records_the_pinned_numbers(tmp_path: Path) -> None:
    pin = json.loads(PIN.read_text())
    assert pin["command"] == "synco train steps=3 seed=0 threads=1 heldout_per_group=40"
    main(["train", "steps=3", "seed=0", "threads=1", "heldout_per_group=40", f"runs_dir={tmp_path}", "run_id=pin", "progress=false"])
    run = tmp_path / "pin"
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    rows = [{k: v for k, v in r.items() if k not in TIMINGS} for r in rows]
    summary = json.loads((run / "summary.json").read_text())
    diffs = _same(rows, pin["metrics"], "metrics") + _same({k: summary[k] for k in pin["summary"]}, pin["summary"],
                                                           "summary")
    assert diffs == [], "\n".join(diffs[:20])
