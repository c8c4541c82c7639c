"""End-to-end runs on a tiny config: run directory contents, reproducibility, resume."""

import json
import sqlite3

import pytest

from synco.cli import main
from synco.config import load_config
from synco.run.loop import train
from synco.run.summary import format_summary

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
    exported = [json.loads(ln) for ln in (run / "valid_tasks.jsonl").read_text().splitlines()]
    assert len(exported) == n_valid
    with sqlite3.connect(run / "pool.sqlite") as db:
        refs = dict(db.execute("select task_id, reference from tasks where valid=1").fetchall())
    assert [r["final_answer"] for r in exported] == [refs[r["task_id"]] for r in exported]
    assert summary.alerts == 0 and not (run / "alerts.jsonl").exists()
    ckpt = run / "checkpoints" / "step_2"
    for role in ("synthesizer", "reasoner"):
        assert (ckpt / role / "config.json").is_file()
        assert any((ckpt / role).glob("*.safetensors"))
    assert (ckpt / "trainer_state.pt").is_file()
    assert (run / "reports" / "step_2.txt").is_file()
    assert any((run / "tb").iterdir())
    # each update's UpdateStats reach metrics.jsonl and TensorBoard, per agent
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from synco.cotrain.stats import UPDATE_DETAILS

    assert set(UPDATE_DETAILS) == {"clip_frac", "kl", "ratio_mean", "lr", "is_weight_max"}
    tags = set(EventAccumulator(str(run / "tb")).Reload().Tags()["scalars"])
    for name in ("clip_frac", "kl", "ratio_mean", "lr"):  # is_weight_max: the decoupled objective's only (None here)
        for key, tag in ((f"reasoner_{name}", f"reasoner/{name}"), (f"synth_{name}", f"synthesizer/{name}")):
            assert any(isinstance(r[key], float) for r in rows) and tag in tags, (key, [r[key] for r in rows])
    assert all(r["reasoner_is_weight_max"] is None for r in rows)
    assert set(summary.heldout_before) == set(summary.heldout_after) and summary.heldout_before
    assert set(summary.heldout_sampled_before) == set(summary.heldout_sampled_after) == set(summary.heldout_before)
    assert all(0 <= v <= 1 for v in [*summary.heldout_sampled_before.values(), *summary.heldout_sampled_after.values()])
    assert summary.steps == 3
    # Learn / Retain over the held-out items: 11 levels x 4 problems, and its net equals the greedy gain in items
    lr = summary.heldout_learn_retain
    assert lr is not None and lr.n == 44 == lr.learn.n + lr.retain.n
    before_items = json.loads((run / "heldout_before.json").read_text())["greedy_items"]
    assert len(before_items) == 44 and lr.retain.n == sum(v >= 0.5 for v in before_items.values())
    after = json.loads((run / "heldout_after.json").read_text())  # the final evaluation, per item
    assert after["greedy"] == summary.heldout_after and set(after["greedy_items"]) == set(before_items)
    assert lr.learn_gain == sum(after["greedy_items"][k] >= 0.5 > before_items[k] for k in before_items)
    gain_in_items = 4 * (sum(summary.heldout_after.values()) - sum(summary.heldout_before.values()))
    assert lr.extra_solved == round(gain_in_items)
    text = format_summary(summary)
    assert "held-out" in text and "sampled" in text and "time per step" in text and "health alerts: none" in text
    assert "(Learn)" in text and "(Retain)" in text

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
    # the last curve point is the final evaluation, items included: Learn / Retain ends on it
    after_items = curve[-1]["greedy_items"]
    lr = summary["heldout_learn_retain"]
    assert lr["n"] == len(after_items) == 44
    assert lr["retain"]["n"] - lr["retain_loss"] + lr["learn_gain"] == sum(v >= 0.5 for v in after_items.values())


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
    from synco.run.summary import RunSummary

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
    alerted = format_summary(s.model_copy(update={"alerts": 3, "alerts_by_check": {"valid_rate": 2, "nan_skips": 1}}))
    assert "health alerts: 3 (valid_rate 2, nan_skips 1), see r/alerts.jsonl" in alerted
    assert "health alerts: none" in greedy_only


def test_progress_bar_shows_the_alert_count_once_one_fired():
    from synco.cotrain.stats import StepStats
    from synco.run.loop import progress_postfix

    stats = StepStats(step=3, mode="cotrain", valid_rate=0.5)
    assert "alerts" not in progress_postfix(stats) and progress_postfix(stats, alerts=2)["alerts"] == "2"


# ------------------------------------------------------------------ health checks and the dataset file

FAST = ["n_cards=8", "k=2", "heldout_per_group=0", "progress=false", "tensorboard=false", "threads=1",
        "synthesizer.sampling.max_new_tokens=320"]


def jsonl(path):
    return [json.loads(ln) for ln in path.read_text(encoding="utf-8").splitlines()]


def pool_export(run_dir, tmp_path):
    """The dataset as the pool holds it now (export_jsonl into a scratch file)."""
    from synco.core.pool import TaskPool

    out = tmp_path / f"export-{run_dir.name}.jsonl"
    with TaskPool(run_dir / "pool.sqlite") as pool:
        pool.export_jsonl(out)
    return jsonl(out)


def references(run_dir):
    with sqlite3.connect(run_dir / "pool.sqlite") as db:
        return dict(db.execute("select task_id, reference from tasks where valid = 1").fetchall())


@pytest.mark.slow
def test_a_stop_alert_checkpoints_the_step_and_exits_with_a_resume_hint(tmp_path, capsys, one_thread):
    # a saturation band every real accuracy falls in, so the check fires at step 0
    forced = ["health.patience=1", "health.reward_saturation.low=0.97", "health.reward_saturation.high=0.98",
              "health.reward_saturation.action=stop"]
    assert main(["train", f"runs_dir={tmp_path}", "run_id=sick", "steps=3", *FAST, *forced]) == 3
    run = tmp_path / "sick"
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert "health alert (stop) at step 0: reward_saturation: Reasoner accuracy" in err
    last = err.strip().splitlines()[-1]
    assert last.startswith("synco train: health check reward_saturation stopped the run after step 0")
    assert last.endswith(f"continue with: synco train --resume {run}")
    assert [r["step"] for r in metric_lines(run)] == [0]
    assert (run / "checkpoints" / "step_0" / "trainer_state.pt").is_file()  # checkpointed before stopping
    [alert] = jsonl(run / "alerts.jsonl")
    assert (alert["step"], alert["check"], alert["action"], alert["threshold"]) == (0, "reward_saturation", "stop", 0.97)
    assert alert["value"] <= 0.97
    assert jsonl(run / "valid_tasks.jsonl") == pool_export(run, tmp_path)  # step 0's tasks are already out

    # resuming goes on: the episode that stopped the run has fired and does not stop it again
    assert main(["train", "--resume", str(run)]) == 0
    out = capsys.readouterr().out
    assert f"health alerts: 1 (reward_saturation 1), see {run / 'alerts.jsonl'}" in out
    assert [r["step"] for r in metric_lines(run)] == [0, 1, 2]
    assert json.loads((run / "summary.json").read_text())["alerts"] == 1
    rows = jsonl(run / "valid_tasks.jsonl")
    assert rows == pool_export(run, tmp_path) and len({r["task_id"] for r in rows}) == len(rows)


@pytest.mark.slow
def test_valid_tasks_carry_the_verified_reference_and_survive_kill_9(tmp_path, capsys, one_thread):
    import os
    import signal
    import subprocess
    import sys
    import time

    run = tmp_path / "killed"
    args = ["train", f"runs_dir={tmp_path}", "run_id=killed", "steps=40", "save_every=1", *FAST]
    proc = subprocess.Popen([sys.executable, "-m", "synco.cli", *args], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline and proc.poll() is None:
            if (run / "metrics.jsonl").exists() and len((run / "metrics.jsonl").read_text().splitlines()) >= 3:
                break
            time.sleep(0.05)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    done = [r["step"] for r in metric_lines(run)]
    assert len(done) >= 3 and done[-1] < 39, "the run was not killed mid-way"

    rows, pooled = jsonl(run / "valid_tasks.jsonl"), pool_export(run, tmp_path)
    assert rows == pooled[:len(rows)]  # whole steps, in order (the kill may fall between the pool and the file)
    assert {r["task_id"] for r in pooled if r["step"] <= done[-1]} <= {r["task_id"] for r in rows}
    refs = references(run)
    assert all(r["final_answer"] == refs[r["task_id"]] for r in rows)  # the verified reference
    corrected = [r for r in rows if r["answer_corrected"]]
    assert corrected and all(r["synthesizer_answer"] != r["final_answer"] for r in corrected)

    # resuming rewinds the pool to the checkpoint and rewrites the file from it: no row twice
    assert main(["train", "--resume", str(run), f"steps={done[-1] + 3}"]) == 0
    rows = jsonl(run / "valid_tasks.jsonl")
    assert rows == pool_export(run, tmp_path) and len({r["task_id"] for r in rows}) == len(rows)
    assert {r["step"] for r in rows} <= set(range(done[-1] + 3)) and rows[-1]["step"] >= done[-1]


def _no_models(monkeypatch):
    """Loading a model fails the test: a bad runs_dir must be reported before."""
    import synco.run.build

    monkeypatch.setattr(synco.run.build, "build_policies", lambda *a, **k: pytest.fail("a model was loaded"))


def test_runs_dir_under_a_file_is_one_clear_error_before_any_model(tmp_path, monkeypatch, capsys):
    _no_models(monkeypatch)
    (tmp_path / "afile").write_text("")
    for bad in (tmp_path / "afile", tmp_path / "afile" / "sub"):
        assert main(["train", f"runs_dir={bad}", "threads=null", *TINY]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"synco train: runs_dir={str(bad)!r}: ") and err.count("\n") == 1
        assert f"{tmp_path / 'afile'} is a file" in err and "Traceback" not in err


def test_unwritable_runs_dir_is_one_clear_error_before_any_model(tmp_path, monkeypatch, capsys):
    from pathlib import Path

    _no_models(monkeypatch)
    runs = tmp_path / "readonly"
    real_mkdir = Path.mkdir

    def refuse(self, *args, **kwargs):  # what a read-only folder does (also for root, whom chmod does not stop)
        if runs in self.parents:
            raise PermissionError(13, "Permission denied", str(self))
        return real_mkdir(self, *args, **kwargs)

    monkeypatch.setattr(Path, "mkdir", refuse)
    assert main(["train", f"runs_dir={runs}", "run_id=r1", "threads=null", *TINY]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"synco train: runs_dir={str(runs)!r}: cannot create the run directory r1 there")
    assert "Permission denied" in err and err.count("\n") == 1


def test_setup_run_checks_the_benchmark_files_before_creating_anything(tmp_path, monkeypatch):
    from synco.config import ConfigError
    from synco.run.setup import setup_run

    _no_models(monkeypatch)
    cfg = tiny_config(tmp_path, "nobench", "threads=null", f"verifier.benchmark_paths=[{tmp_path / 'gone'}]")
    with pytest.raises(ConfigError, match="verifier.benchmark_paths: .*gone' not found"):
        setup_run(cfg, log=lambda _: None)
    assert not (tmp_path / "nobench").exists()


def test_resume_restores_the_thread_count_before_any_model_is_built(tmp_path, monkeypatch):
    """threads: auto picks the count from the load; a resume takes the run's own count back before the policies
    (and under Ray their actors, which copy the driver's count) are built, so CPU results stay bit-identical."""
    import torch

    import synco.run.build
    import synco.run.loop
    import synco.run.setup

    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        train(tiny_config(tmp_path, "run", "steps=1", "threads=auto", "heldout_per_group=0"))
        state_file = next((tmp_path / "run" / "checkpoints").glob("step_*")) / "trainer_state.pt"
        state = torch.load(state_file, weights_only=False)
        state["threads"] = 2  # as if the run had started on an idle machine
        torch.save(state, state_file)
        seen = []
        real = synco.run.build.build_policies
        monkeypatch.setattr(synco.run.build, "build_policies", lambda *a, **k: (seen.append(torch.get_num_threads()), real(*a, **k))[1])
        monkeypatch.setattr("synco.core.threads.apply_threads", lambda _: type("R", (), {"describe": lambda self: ""})())
        run = synco.run.setup.setup_run(tiny_config(tmp_path, "run", "steps=2", "threads=auto", "heldout_per_group=0"),
                                        resume=tmp_path / "run", log=lambda _: None)
        try:
            assert seen == [2] and torch.get_num_threads() == 2
        finally:
            run.state.pool.close()
            synco.run.loop.close_policies(run.state)
    finally:
        torch.set_num_threads(before)


def test_summary_counts_in_the_right_number_and_names_the_runs_group_factor():
    """A one-step, one-round run reads "1 step", "1 round", "1 update"; a tools / τ² / math run's distribution is
    named after its group_factor (pattern, topic), not "levels"."""
    from synco.config import load_config
    from synco.cotrain.protocols.registry import build_protocol
    from synco.run.summary import RunSummary

    def describe(protocol: str, rows: list[dict]) -> list[str]:
        return build_protocol(load_config("arith", overrides=[f"protocol={protocol}"])).describe(rows)

    s = RunSummary(run_dir="r", steps=1, n_tasks=1, n_valid_tasks=1, group_factor="pattern",
                   groups_first={"rw": 1.0}, groups_last={"rw": 1.0})
    text = format_summary(s)
    assert text.startswith("run: r  (1 step, 1 card, 1 valid)")
    assert "task distribution over pattern values (first 10% -> last 10% of steps):\n  rw:1.00->1.00" in text
    row = {"step": 1, "round": 0, "round_examples": 1, "round_updates": 1, "round_loss": 0.5}
    assert describe("rounds", [row]) == ["protocol rounds: 1 round; the Reasoner trained at the end of each on",
                                         "  round 0 (step 1): 1 example (SFT), 1 update, loss 0.5000"]
    assert describe("alternating", [{**row, "phase": "reasoner"}])[0] == "protocol alternating: 1 phase (reasoner)"
    assert format_summary(s.model_copy(update={"steps": 2, "n_tasks": 3})).startswith("run: r  (2 steps, 3 cards, ")
