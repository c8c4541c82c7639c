"""Never lose a run: Ctrl-C, kill -9, damaged files and read-only directories, then ``--resume``."""

from __future__ import annotations

import json
import os
import random
import signal
import sqlite3
from pathlib import Path

import pytest
from fsutil import read_only

from killing import tail, train_then_kill

from synco.cli import main
from synco.config import load_config
from synco.core.pool import TaskPool
from synco.run.checkpoints import checkpoint_due, checkpoint_problem, usable_checkpoint
from synco.run.logs import truncate_metrics

# A small run with the default checkpoint settings (time-based: none within these few seconds).
SMALL = ["steps=4", "n_cards=16", "k=4", "heldout_per_group=2", "heldout_every=0", "progress=false",
         "tensorboard=false", "threads=1"]


def metric_steps(run: Path) -> list[int]:
    return [json.loads(ln)["step"] for ln in (run / "metrics.jsonl").read_text().splitlines()]


def comparable(run: Path) -> list[dict]:
    drop = {"t_generate", "t_train", "t_other"}
    return [{k: v for k, v in json.loads(ln).items() if k not in drop}
            for ln in (run / "metrics.jsonl").read_text().splitlines()]


def assert_each_step_once(run: Path, steps: int, n_cards: int = 16) -> None:
    """metrics.jsonl and the pool hold every step exactly once, with all its cards."""
    assert metric_steps(run) == list(range(steps))
    with sqlite3.connect(run / "pool.sqlite") as db:
        assert [r[0] for r in db.execute("SELECT step FROM steps ORDER BY step")] == list(range(steps))
        per_step = db.execute("SELECT step, COUNT(*), COUNT(DISTINCT slot) FROM tasks GROUP BY step").fetchall()
    assert per_step == [(s, n_cards, n_cards) for s in range(steps)]


def start_run(tmp_path: Path, run_id: str, *extra: str) -> list[str]:
    return ["train", f"runs_dir={tmp_path}", f"run_id={run_id}", *SMALL, *extra]


# ------------------------------------------------------------------ pure pieces


def test_checkpoint_cadence_by_steps_and_by_time():
    default = load_config("arith")
    assert default.save_every == 0 and 0 < default.save_every_minutes <= 10  # checkpoints by default, every few minutes
    assert not checkpoint_due(default, step=10, minutes_since_last=1.0)
    assert checkpoint_due(default, step=10, minutes_since_last=default.save_every_minutes)
    assert not checkpoint_due(default, step=default.steps - 1, minutes_since_last=60)  # the end is saved by train
    steps = load_config("arith", overrides=["save_every=3", "steps=10"])  # a step cadence replaces the time one
    assert [s for s in range(10) if checkpoint_due(steps, s, 60.0)] == [2, 5, 8]
    assert not any(checkpoint_due(default.model_copy(update={"save_every_minutes": 0}), s, 60.0) for s in range(10))


def test_torn_last_metrics_line_is_dropped_and_a_bad_middle_line_is_an_error(tmp_path):
    path = tmp_path / "metrics.jsonl"
    rows = [json.dumps({"step": s, "valid_rate": 0.5, "note": "ü"}) for s in range(4)]
    torn = rows[3].encode()[:-9]  # a kill while writing step 3, in the middle of a UTF-8 character
    path.write_bytes(("\n".join(rows[:3]) + "\n").encode() + torn)
    said: list[str] = []
    truncate_metrics(path, 1, said.append)
    assert [json.loads(ln)["step"] for ln in path.read_text().splitlines()] == [0, 1]
    assert len(said) == 1 and "torn last line" in said[0] and str(path) in said[0]

    from synco.run.stopping import RunError

    path.write_text(rows[0] + "\n{oops\n" + rows[2] + "\n")
    with pytest.raises(RunError, match="line 2"):
        truncate_metrics(path, 5, said.append)


def fake_checkpoint(root: Path, step: int) -> Path:
    """A checkpoint folder with the files a real one has (small tensors)."""
    import torch
    from safetensors.torch import save_file

    ckpt = root / "checkpoints" / f"step_{step}"
    for role in ("synthesizer", "reasoner"):
        (ckpt / role).mkdir(parents=True)
        save_file({"w": torch.arange(64, dtype=torch.float32)}, str(ckpt / role / "model.safetensors"))
        (ckpt / role / "config.json").write_text(json.dumps({"model_type": "llama"}))
        (ckpt / f"{role}_state").mkdir()
        torch.save({"optimizer": {"state": {}}, "step": step}, ckpt / f"{role}_state" / "learner_state.pt")
    torch.save({"step": step, "rng": {}, "report": "{}"}, ckpt / "trainer_state.pt")
    return ckpt


def truncate(path: Path, keep: float = 0.5) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * keep)])


def test_damaged_checkpoints_fall_back_to_the_previous_intact_one(tmp_path):
    ckpts = [fake_checkpoint(tmp_path, s) for s in range(3)]
    assert all(checkpoint_problem(c) is None for c in ckpts)
    (tmp_path / "checkpoints" / ".tmp_step_3").mkdir()  # a kill while saving step 3
    said: list[str] = []
    assert usable_checkpoint(tmp_path, said.append) == ckpts[2]
    assert said == [] and not (tmp_path / "checkpoints" / ".tmp_step_3").exists()

    truncate(ckpts[2] / "trainer_state.pt")
    truncate(ckpts[1] / "reasoner" / "model.safetensors", keep=0.9)
    assert "trainer_state.pt" in checkpoint_problem(ckpts[2])
    assert usable_checkpoint(tmp_path, said.append) == ckpts[0]
    assert len(said) == 2 and "step_2" in said[0] and "step_1" in said[1] and "reasoner/model.safetensors" in said[1]
    assert (tmp_path / "checkpoints" / "damaged-step_2").is_dir()  # kept for inspection, out of the way

    truncate(ckpts[0] / "synthesizer_state" / "learner_state.pt", keep=0.99)
    assert usable_checkpoint(tmp_path, said.append) is None
    assert "learner_state.pt" in said[-1]


# ------------------------------------------------------------------ whole runs


@pytest.mark.slow
def test_ctrl_c_finishes_the_step_saves_it_and_prints_the_resume_command(tmp_path, capsys, monkeypatch, one_thread):
    import synco.run.steps as steps  # protocol_step calls this module's cotrain_step

    real_step = steps.cotrain_step

    def step_with_ctrl_c(state, step, plan):
        if step == 1:
            os.kill(os.getpid(), signal.SIGINT)  # arrives mid-step
        return real_step(state, step, plan)

    monkeypatch.setattr(steps, "cotrain_step", step_with_ctrl_c)
    handler = signal.getsignal(signal.SIGINT)
    assert main(start_run(tmp_path, "stop")) == 130
    run = tmp_path / "stop"
    err = capsys.readouterr().err.strip().splitlines()
    assert "Traceback" not in "\n".join(err)
    assert err[-1].startswith("synco train: stopped after step 1") and err[-1].endswith(f"synco train --resume {run}")
    assert metric_steps(run) == [0, 1] and (run / "checkpoints" / "step_1" / "trainer_state.pt").is_file()
    assert signal.getsignal(signal.SIGINT) is handler  # the handler is put back

    monkeypatch.setattr(steps, "cotrain_step", real_step)
    assert main(["train", "--resume", str(run)]) == 0
    assert "resuming" in capsys.readouterr().out
    assert_each_step_once(run, 4)


@pytest.mark.slow
def test_second_ctrl_c_stops_mid_step_and_resume_restarts_from_step_0(tmp_path, capsys, monkeypatch, one_thread):
    import synco.core.pool as pool_module

    real_insert = pool_module.TaskPool._insert_record

    def insert_with_two_ctrl_c(self, record, now):
        if record.step == 2 and record.slot == 5:  # inside the step's transaction
            os.kill(os.getpid(), signal.SIGINT)
            os.kill(os.getpid(), signal.SIGINT)
        return real_insert(self, record, now)

    monkeypatch.setattr(pool_module.TaskPool, "_insert_record", insert_with_two_ctrl_c)
    assert main(start_run(tmp_path, "hard")) == 130
    run = tmp_path / "hard"
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "stopped at once" in err and "restarts from step 0" in err and err.endswith(f"--resume {run}")
    with TaskPool(run / "pool.sqlite") as pool:
        assert pool.last_step() == 1 and pool.count() == 32  # step 2 was rolled back whole
    first_try = comparable(run)
    assert [r["step"] for r in first_try] == [0, 1] and not (run / "checkpoints").exists()

    # a plain rerun is refused; --resume restarts from step 0, keeping the directory and dropping the old steps
    monkeypatch.setattr(pool_module.TaskPool, "_insert_record", real_insert)
    assert main(start_run(tmp_path, "hard")) == 2
    assert "--resume" in capsys.readouterr().err
    assert main(["train", "--resume", str(run)]) == 0
    out = capsys.readouterr().out
    assert "restarting from step 0; dropped the pool's steps 0..1 (32 tasks)" in out
    assert_each_step_once(run, 4)
    assert comparable(run)[:2] == first_try  # the redone steps are the same steps


@pytest.mark.slow
@pytest.mark.parametrize("extra", [(), ("save_every=2",)], ids=["default", "save_every=2"])
def test_kill_9_at_a_random_moment_then_resume_finishes_the_run(tmp_path, capsys, one_thread, extra):
    steps = 6
    args = start_run(tmp_path, "killed", f"steps={steps}", *extra)
    run = tmp_path / "killed"
    delay = random.Random().uniform(0.0, 12.0)
    train_then_kill(args, lambda: (run / "config.yaml").exists(), delay)
    state = f"killed {delay:.2f}s after the run directory appeared; metrics then: " + tail(run / "metrics.jsonl")
    assert main(["train", "--resume", str(run)]) == 0, state + capsys.readouterr().err
    assert_each_step_once(run, steps)
    assert json.loads((run / "summary.json").read_text())["steps"] == steps, state


@pytest.mark.slow
def test_resume_falls_back_past_damaged_checkpoint_files(tmp_path, capsys, one_thread):
    run = tmp_path / "dmg"
    assert main(start_run(tmp_path, "dmg", "steps=3", "save_every=1", "keep_checkpoints=3")) == 0
    truncate(run / "checkpoints" / "step_2" / "trainer_state.pt")
    truncate(next((run / "checkpoints" / "step_1" / "reasoner").glob("*.safetensors")))
    with (run / "metrics.jsonl").open("a") as f:
        f.write('{"step": 3, "n_ca')  # and a torn last line
    capsys.readouterr()
    assert main(["train", "--resume", str(run), "steps=4"]) == 0
    out = capsys.readouterr().out
    assert "step_2 is damaged (trainer_state.pt" in out and "step_1 is damaged (reasoner/" in out
    assert "torn last line" in out
    assert f"resuming {run} after step 0" in out and "dropped the pool's steps 1..2 (32 tasks)" in out
    assert_each_step_once(run, 4)


def write_small_config(run: Path) -> None:
    from synco.config import dump_config

    run.mkdir(parents=True)
    (run / "config.yaml").write_text(dump_config(load_config("arith", overrides=SMALL)))


def test_resume_with_a_damaged_pool_says_which_file_and_what_to_do(tmp_path, capsys):
    run = tmp_path / "badpool"
    write_small_config(run)
    (run / "pool.sqlite").write_bytes(b"\x00not sqlite at all" * 512)
    assert main(["train", "--resume", str(run)]) == 2
    err = capsys.readouterr().err
    assert str(run / "pool.sqlite") in err and "damaged" in err
    assert "restore pool.sqlite from a backup" in err and f"--config {run / 'config.yaml'}" in err
    assert "Traceback" not in err


def test_resume_of_a_read_only_run_directory_is_a_clear_error(tmp_path, capsys):
    run = tmp_path / "ro"
    write_small_config(run)
    with read_only(run):
        assert main(["train", "--resume", str(run)]) == 2
    err = capsys.readouterr().err
    assert f"--resume {run}: cannot write" in err and "writable" in err and "Traceback" not in err


class _FakeCuda:
    """Stands in for ``torch.cuda`` on a CPU machine: one generator state per visible GPU."""

    def __init__(self, n: int) -> None:
        import torch

        self.states = [torch.tensor([i, 7], dtype=torch.uint8) for i in range(n)]
        self.n = n

    def is_available(self) -> bool:
        return self.n > 0

    def is_initialized(self) -> bool:
        return self.n > 0

    def device_count(self) -> int:
        return self.n

    def get_rng_state_all(self):
        return [s.clone() for s in self.states]

    def set_rng_state_all(self, states) -> None:
        self.states = [s.clone() for s in states]


def test_cuda_rng_states_join_the_resume_state(monkeypatch):
    import torch

    from synco.run.rng import rng_state, set_rng_state

    gpu = _FakeCuda(2)
    monkeypatch.setattr(torch, "cuda", gpu)
    rng = random.Random(3)
    state = rng_state(rng)
    assert [s.tolist() for s in state["cuda"]] == [[0, 7], [1, 7]]
    gpu.states = [torch.tensor([9, 9], dtype=torch.uint8)] * 2  # the run went on and drew numbers
    set_rng_state(state, rng)
    assert [s.tolist() for s in gpu.states] == [[0, 7], [1, 7]]

    monkeypatch.setattr(torch, "cuda", _FakeCuda(1))  # resumed with fewer GPUs: continues, says it is not exact
    with pytest.warns(UserWarning, match="2 GPUs and 1 are visible"):
        set_rng_state(state, rng)
    monkeypatch.setattr(torch, "cuda", _FakeCuda(0))  # a CPU run records no CUDA state
    assert "cuda" not in rng_state(rng)
