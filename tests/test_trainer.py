"""End-to-end runs on a tiny config: run directory contents, reproducibility, resume."""

import json
import sqlite3

import pytest

from synco.cli import main
from synco.config import load_config
from synco.trainer import format_summary, train

TINY = ["n_cards=8", "k=2", "heldout_per_group=4", "progress=false", "report_refresh_every=2",
        "synthesizer.sampling.max_new_tokens=320"]


def tiny_config(tmp_path, run_id, *extra):
    return load_config("arith", overrides=[*TINY, f"runs_dir={tmp_path}", f"run_id={run_id}", *extra])


def metric_lines(run_dir):
    return [json.loads(ln) for ln in (run_dir / "metrics.jsonl").read_text().splitlines()]


def comparable(rows):
    drop = {"t_generate", "t_train", "t_other"}
    return [{k: v for k, v in r.items() if k not in drop} for r in rows]


@pytest.mark.slow
def test_three_step_run_writes_a_complete_run_directory(tmp_path):
    summary = train(tiny_config(tmp_path, "e2e", "steps=3"))
    run = tmp_path / "e2e"
    assert (run / "config.yaml").is_file()
    rows = metric_lines(run)
    assert [r["step"] for r in rows] == [0, 1, 2]
    with sqlite3.connect(run / "pool.sqlite") as db:
        assert db.execute("select count(*) from tasks").fetchone()[0] == 24
        assert db.execute("select count(distinct step) from tasks").fetchone()[0] == 3
        n_valid = db.execute("select count(*) from tasks where valid=1").fetchone()[0]
    assert sum(r["n_valid"] for r in rows) == n_valid
    assert len((run / "valid_tasks.jsonl").read_text().splitlines()) == n_valid
    ckpt = run / "checkpoints" / "step_2"
    for role in ("synthesizer", "reasoner"):
        assert (ckpt / role / "config.json").is_file()
        assert any((ckpt / role).glob("*.safetensors"))
    assert (ckpt / "trainer_state.pt").is_file()
    assert (run / "reports" / "step_2.txt").is_file()
    assert any((run / "tb").iterdir())
    assert set(summary.heldout_before) == set(summary.heldout_after) and summary.heldout_before
    assert set(summary.heldout_sampled_before) == set(summary.heldout_sampled_after) == set(summary.heldout_before)
    assert all(0 <= v <= 1 for v in [*summary.heldout_sampled_before.values(), *summary.heldout_sampled_after.values()])
    assert summary.steps == 3
    text = format_summary(summary)
    assert "held-out" in text and "sampled" in text and "time per step" in text

    # `synco analyze` on this real run directory: its counts agree with the pool and the report embeds every plot.
    assert main(["analyze", str(run)]) == 0
    out = run / "analysis"
    stats = json.loads((out / "summary.json").read_text())
    assert (stats["n_steps"], stats["n_tasks"], stats["n_valid"]) == (3, 24, n_valid)
    counts = stats["outcomes"]["counts"]
    assert counts["gradient_bearing"] == sum(r["n_gradient_bearing"] for r in rows)
    assert sum(counts.values()) == n_valid
    html = (out / "report.html").read_text()
    pngs = sorted(out.glob("*.png"))
    assert len(pngs) >= 6
    for png in pngs:
        assert png.stat().st_size > 1000 and png.name in html


@pytest.mark.slow
def test_same_seed_same_metrics_and_resume_is_exact(tmp_path):
    train(tiny_config(tmp_path, "full", "steps=4", "heldout_every=1"))
    train(tiny_config(tmp_path, "half", "steps=2", "heldout_every=1"))
    # resume the 2-step run for 2 more steps, through the CLI as a user would
    assert main(["train", "--resume", str(tmp_path / "half"), "steps=4"]) == 0
    full, resumed = metric_lines(tmp_path / "full"), metric_lines(tmp_path / "half")
    assert [r["step"] for r in resumed] == [0, 1, 2, 3]
    assert comparable(full) == comparable(resumed)
    # the held-out learning curve: one point per step here, the same after resume
    curve = [json.loads(ln) for ln in (tmp_path / "full" / "heldout.jsonl").read_text().splitlines()]
    assert [c["step"] for c in curve] == [1, 2, 3, 4]
    assert all(set(c["greedy"]) == {f"L{i}" for i in range(1, 12)} for c in curve)
    assert curve[0]["mean"] == pytest.approx(sum(curve[0]["greedy"].values()) / 11)
    assert (tmp_path / "half" / "heldout.jsonl").read_text() == (tmp_path / "full" / "heldout.jsonl").read_text()
    summary = json.loads((tmp_path / "full" / "summary.json").read_text())
    assert list(summary["heldout_curve"]) == ["0", "1", "2", "3", "4"]
    assert summary["heldout_curve"]["4"] == pytest.approx(curve[-1]["mean"])  # the summary's own final evaluation


def test_bad_config_names_the_field(tmp_path, capsys):
    assert main(["train", "reasoner.grpo.lr=fast", f"runs_dir={tmp_path}"]) == 2
    err = capsys.readouterr().err
    assert "reasoner.grpo.lr" in err and "fast" in err
    assert main(["train", "no_such_field=1", f"runs_dir={tmp_path}"]) == 2
    assert "no_such_field" in capsys.readouterr().err
    assert main(["train", "mode=sideways", f"runs_dir={tmp_path}"]) == 2
    assert "mode" in capsys.readouterr().err


def test_resume_of_a_directory_without_a_run_is_a_clear_error(tmp_path, capsys):
    # (a run directory without a checkpoint restarts from step 0: tests/test_trainer_resume.py)
    (tmp_path / "empty").mkdir()
    assert main(["train", "--resume", str(tmp_path / "empty")]) == 2
    assert "config file not found" in capsys.readouterr().err
    assert main(["train", "--resume", str(tmp_path / "missing")]) == 2
    assert "config file not found" in capsys.readouterr().err


def test_summary_table_lists_greedy_and_sampled_accuracy_per_group():
    from synco.trainer import RunSummary

    s = RunSummary(run_dir="r", steps=1, heldout_before={"L1": 0.5, "combinatorics": 0.25},
                   heldout_after={"L1": 0.75, "combinatorics": 0.25},
                   heldout_sampled_before={"L1": 0.5, "combinatorics": 0.0},
                   heldout_sampled_after={"L1": 0.5, "combinatorics": 0.5})
    lines = format_summary(s).splitlines()
    assert lines[1] == "held-out accuracy per group, before -> after: greedy  |  sampled"
    assert lines[2] == "             L1: 0.50 -> 0.75  (+0.25)  |  0.50 -> 0.50  (+0.00)"
    assert lines[3] == "  combinatorics: 0.25 -> 0.25  (+0.00)  |  0.00 -> 0.50  (+0.50)"
    assert lines[4] == "           mean: 0.375 -> 0.500  (+0.125)  |  0.250 -> 0.500  (+0.250)"
    greedy_only = format_summary(s.model_copy(update={"heldout_sampled_before": {}, "heldout_sampled_after": {}}))
    assert "sampled" not in greedy_only and "    mean: 0.375 -> 0.500  (+0.125)" in greedy_only
    assert "by step" not in greedy_only  # no curve without heldout_every
    curved = format_summary(s.model_copy(update={"heldout_curve": {0: 0.375, 50: 0.4, 100: 0.5}}))
    assert "held-out greedy mean by step: 0:0.375  50:0.400  100:0.500" in curved
