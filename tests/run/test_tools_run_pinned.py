"""The tools preset's numbers are pinned (EvoSyn's rounds with SFT on gold episodes, one round of 5 steps, shrunk
to run in seconds): pool rows, metrics and held-out numbers must not move in a refactor (see ``pins.py``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from pins import check_pin

COMMAND = ("synco train --preset tools steps=5 n_cards=16 k=4 heldout_per_group=2 heldout_every=5 threads=1 "
           "seed=0")


@pytest.mark.slow
def test_tools_preset_records_the_pinned_numbers(tmp_path: Path) -> None:
    argv = COMMAND.split()[1:] + [f"runs_dir={tmp_path}", "run_id=pin", "progress=false"]
    diffs = check_pin("tools_run_pinned", COMMAND, argv, tmp_path / "pin")
    assert diffs == [], "\n".join(diffs[:20])
