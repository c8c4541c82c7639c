"""The multi-rank test helpers (``ranks.py``): a failed or hung rank is reported and no rank outlives the call."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from ranks import spawn_ranks
from torch.multiprocessing import ProcessRaisedException


def _spawned_children() -> set[int]:
    """Pids of this process's live multiprocessing spawn children (the resource tracker is not one)."""
    found = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if int(fields[1]) == os.getpid() and fields[0] != "Z" and b"spawn_main" in cmdline:
            found.add(int(entry))
    return found


def _fails_or_hangs(rank: int, world: int, init_method: str) -> None:
    assert init_method.startswith("file://") and world == 2
    if rank == 0:
        raise ValueError("rank 0 gives up")
    time.sleep(600)


def _hangs(rank: int, world: int, init_method: str) -> None:
    time.sleep(600)


def test_a_failed_rank_is_reported_with_its_error_and_the_other_rank_is_stopped(tmp_path: Path) -> None:
    before = _spawned_children()
    with pytest.raises(ProcessRaisedException, match="rank 0 gives up"):
        spawn_ranks(_fails_or_hangs, world=2, folder=tmp_path)  # rank 1 would sleep for 600 s
    assert _spawned_children() - before == set()


def test_ranks_still_running_at_the_deadline_are_named_and_killed(tmp_path: Path) -> None:
    before = _spawned_children()
    with pytest.raises(TimeoutError, match=r"_hangs: ranks \[0, 1\] of 2 still running after 5 s"):
        spawn_ranks(_hangs, world=2, folder=tmp_path, timeout_s=5)
    assert _spawned_children() - before == set()
