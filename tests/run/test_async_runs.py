"""Asynchronous co-training on the trainer (``max_staleness``): every trained attempt within the bound, the
pipeline's metrics, exact resume from a checkpoint taken while a step was collected ahead, kill -9, a round's
training as a boundary, and the settings it refuses."""

from __future__ import annotations

import json
import random
import shutil
import signal
import sqlite3
from pathlib import Path

import pytest

from killing import tail, train_then_kill

from synco.cli import main
from synco.config import ConfigError, load_config

SMALL = ["n_cards=16", "k=4", "heldout_per_group=2", "heldout_every=0", "progress=false", "tensorboard=false",
         "threads=1", "max_staleness=1"]


def lines(run: Path) -> list[dict]:
    return [json.loads(ln) for ln in (run / "metrics.jsonl").read_text().splitlines()]


def comparable(run: Path) -> list[dict]:
    return [{k: v for k, v in ln.items() if not k.startswith("t_")} for ln in lines(run)]


def attempt_versions(run: Path) -> dict[int, set[int]]:
    with sqlite3.connect(run / "pool.sqlite") as db:
        rows = db.execute("SELECT t.step, r.policy_version FROM rollouts r JOIN tasks t USING (task_id)").fetchall()
    out: dict[int, set[int]] = {}
    for step, v in rows:
        out.setdefault(step, set()).add(v)
    return out


def train_args(tmp_path: Path, run_id: str, *extra: str) -> list[str]:
    return ["train", f"runs_dir={tmp_path}", f"run_id={run_id}", *SMALL, *extra]


@pytest.mark.slow
def test_staleness_one_trains_every_attempt_within_one_version_and_resumes_exactly(tmp_path, one_thread):
    """Step s's attempts were sampled by the weights after update s - 2 (s >= 1) and trained by update s: one
    version behind, never more; a resume from a checkpoint holding the step collected ahead repeats the run."""
    assert main(train_args(tmp_path, "full", "steps=5", "save_every=1", "keep_checkpoints=10")) == 0
    full = tmp_path / "full"
    metrics = lines(full)
    versions = attempt_versions(full)
    learner = 0  # the Reasoner's optimizer steps before each step's update
    for m in metrics:
        step = m["step"]
        assert all(learner - v <= 1 for v in versions[step]), (step, learner, versions[step])
        assert versions[step] == ({0} if step == 0 else {max(0, learner - 1)})
        assert m["max_staleness"] == 1 and m["stale_attempts_dropped"] == 0 and m["stale_cards_dropped"] == 0
        assert m["staleness"] == (0.0 if step == 0 else 1.0)
        assert m["collected_ahead"] == (1 if step < 4 else 0)
        assert m["reasoner_is_weight_mean"] is not None and m["reasoner_is_truncated"] is not None
        if m["reasoner_loss"] is not None:  # the update's largest importance weight is in the line too
            assert m["reasoner_is_weight_max"] >= m["reasoner_is_weight_mean"] > 0
        learner += m["reasoner_loss"] is not None

    copy = tmp_path / "resumed"
    shutil.copytree(full, copy)
    for ckpt in (copy / "checkpoints").glob("step_*"):
        if ckpt.name != "step_2":  # step 3 was collected ahead when step 2's checkpoint was taken
            shutil.rmtree(ckpt)
    assert main(["train", "--resume", str(copy)]) == 0
    assert comparable(copy) == comparable(full)
    assert attempt_versions(copy) == versions


@pytest.mark.slow
def test_kill_9_while_collecting_ahead_then_resume_repeats_the_run(tmp_path, capsys, one_thread):
    steps = 5
    assert main(train_args(tmp_path, "whole", f"steps={steps}")) == 0
    args = train_args(tmp_path, "killed", f"steps={steps}", "save_every=1")
    run = tmp_path / "killed"
    delay = random.Random().uniform(0.0, 0.5)
    # after the first checkpoint, which holds step 2 collected ahead: steps 2 and 3 are in flight
    code = train_then_kill(args, lambda: (run / "checkpoints" / "step_1").exists(), delay)
    state = f"killed {delay:.2f}s after the step 1 checkpoint; metrics then: " + tail(run / "metrics.jsonl", 200)
    assert code == -signal.SIGKILL, "the run finished before it was killed: " + state
    assert main(["train", "--resume", str(run)]) == 0, state + capsys.readouterr().err
    assert [m["step"] for m in lines(run)] == list(range(steps)), state
    assert comparable(run) == comparable(tmp_path / "whole"), state


@pytest.mark.slow
def test_a_rounds_run_collects_ahead_within_a_round_only(tmp_path, one_thread):
    """Rounds of 2 steps: the step after a round's training is collected after it (the Reasoner it measures is the
    trained one), the other steps one step ahead; the Synthesizer's cards one version behind."""
    assert main(train_args(tmp_path, "rounds", "steps=4", "protocol=rounds", "rounds.steps_per_round=2",
                           "rounds.batch_size=4", "rounds.sft_lr=0.001")) == 0
    metrics = lines(tmp_path / "rounds")
    assert [m["collected_ahead"] for m in metrics] == [1, 0, 1, 0]
    versions = attempt_versions(tmp_path / "rounds")
    assert versions[0] == versions[1] == {0} and len(versions[2]) == 1 and versions[2] == versions[3]
    assert min(versions[2]) > 0  # round 1 is measured on the Reasoner trained at round 0's end


@pytest.mark.parametrize(("extra", "named"), [
    (["backend=ray", "ray.synthesizer.rollout_workers=0"], "ray.synthesizer.rollout_workers=0"),
    (["reasoner.rollout_engine=vllm"], "reasoner.rollout_engine=vllm"),
    (["shared_base=true", "reasoner.lora.rank=4", "synthesizer.lora.rank=4"], "shared_base=true"),
    (["protocol=rounds", "rounds.update=grpo"], "rounds.update=grpo"),
])
def test_settings_it_cannot_run_are_refused_naming_them(extra, named):
    with pytest.raises((ConfigError, ValueError), match=named):
        load_config("arith", overrides=["max_staleness=1", *extra])


def test_a_frozen_synthesizer_may_sample_anywhere():
    cfg = load_config("arith", overrides=["max_staleness=1", "mode=frozen", "synthesizer.rollout_engine=vllm"])
    assert cfg.max_staleness == 1
    assert cfg.reasoner.grpo.decoupled and not cfg.synthesizer.grpo.decoupled  # the trained agent corrects for lag
    assert not load_config("arith").reasoner.grpo.decoupled
