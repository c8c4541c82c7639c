"""``synco analyze`` on a run directory it cannot write to: a clear message pointing at --out."""

from __future__ import annotations

from test_analysis import build_run
from fsutil import read_only

from synco.cli import main


def test_analyze_of_a_read_only_run_points_at_out(tmp_path, capsys):
    run = build_run(tmp_path / "runs" / "cotrain")
    with read_only(run):
        assert main(["analyze", str(run)]) == 2
        err = capsys.readouterr().err
        assert f"cannot write the analysis to {run / 'analysis'}" in err and "--out DIR" in err
        assert "Traceback" not in err
        out = tmp_path / "elsewhere"
        assert main(["analyze", str(run), "--out", str(out), "--buckets", "2", "--window", "2"]) == 0
    assert (out / "report.html").is_file() and not (run / "analysis").exists()


def test_analyze_with_an_unwritable_out_says_to_choose_another(tmp_path, capsys):
    run = build_run(tmp_path / "runs" / "cotrain")
    locked = tmp_path / "locked"
    locked.mkdir()
    with read_only(locked):
        assert main(["analyze", str(run), "--out", str(locked / "analysis")]) == 2
    assert "choose another --out" in capsys.readouterr().err


def test_analyze_leaves_nothing_beside_a_finished_runs_pool(tmp_path):
    """A finished run's pool (no -wal file: no writer) is read without leaving -wal / -shm files beside it."""
    run = build_run(tmp_path / "runs" / "cotrain")
    before = sorted(p.name for p in run.iterdir())
    assert main(["analyze", str(run), "--out", str(tmp_path / "analysis")]) == 0
    assert sorted(p.name for p in run.iterdir()) == before
