"""The protocols on the trainer: dispatch, online unchanged, exact resume mid-round, refusals, summary and analysis."""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from synco.cli import main
from synco.config import load_config
from synco.cotrain.settings import ONLINE, StepPlan
from synco.cotrain.stats import EvoSynStats, UpdateDetailStats
from synco.cotrain.stats import StepStats
from synco.core.pool import TaskPool
from synco.evosyn.effect import Transition, effect_weights
from synco.cotrain.protocols.registry import build_protocol
from synco.run.loop import train
from synco.run.summary import format_summary

TINY = ["n_cards=8", "k=2", "heldout_per_group=1", "heldout_samples=0", "progress=false", "tensorboard=false",
        "threads=1", "report_refresh_every=2"]


def rows(run: Path) -> list[dict]:
    return [json.loads(ln) for ln in (run / "metrics.jsonl").read_text().splitlines()]


def comparable(run: Path) -> list[dict]:
    return [{k: v for k, v in r.items() if not k.startswith("t_")} for r in rows(run)]


def pool_tags(run: Path) -> list[dict]:
    with sqlite3.connect(run / "pool.sqlite") as db:
        return [json.loads(m) for (m,) in db.execute("SELECT metrics_json FROM steps ORDER BY step")]


def step_plan(cfg, step: int) -> StepPlan:  # noqa: ANN001
    return build_protocol(cfg).plan(step)


def test_each_protocol_is_one_object_of_its_own_file() -> None:
    built = {name: build_protocol(load_config("arith", overrides=[f"protocol={name}"]))
             for name in ("online", "rounds", "alternating", "rft")}
    assert {n: (type(p).__module__, p.name) for n, p in built.items()} == {
        n: (f"synco.cotrain.protocols.{n}", n) for n in built}


def test_each_protocol_plans_who_updates_and_the_round_and_phase_of_a_step() -> None:
    assert [step_plan(load_config("arith", overrides=["steps=3"]), s) for s in range(3)] == [ONLINE] * 3
    rounds = load_config("arith", overrides=["protocol=rounds", "rounds.steps_per_round=2", "steps=3"])
    assert [(p.update_synthesizer, p.update_reasoner, p.protocol, p.round, p.phase)
            for p in (step_plan(rounds, s) for s in range(3))] == [
        (True, False, "rounds", 0, "collect"), (True, False, "rounds", 0, "train"), (True, False, "rounds", 1, "train")]
    rft = load_config("arith", overrides=["protocol=rft", "rounds.steps_per_round=2", "steps=3"])
    assert step_plan(rft, 0) == StepPlan(update_reasoner=False, protocol="rft", round=0, phase="collect")
    alt = load_config("arith", overrides=["protocol=alternating", "alternating.phase_steps=2", "alternating.first=reasoner"])
    assert [step_plan(alt, s) for s in (1, 2)] == [
        StepPlan(update_synthesizer=False, update_reasoner=True, protocol="alternating", round=0, phase="reasoner"),
        StepPlan(update_synthesizer=True, update_reasoner=False, protocol="alternating", round=1, phase="synthesizer")]


def test_resume_refuses_another_protocol_or_layout() -> None:
    cfg = load_config("arith", overrides=["protocol=rounds", "rounds.steps_per_round=3"])
    rounds = build_protocol(cfg)
    saved = rounds.checkpoint(step=4)
    assert saved["round"] == 1 and rounds.resume_problem(saved) is None
    other = cfg.model_copy(update={"rounds": cfg.rounds.model_copy(update={"steps_per_round": 2})})
    assert "rounds.steps_per_round=2 (was 3)" in build_protocol(other).resume_problem(saved)
    online = build_protocol(load_config("arith"))
    assert "protocol='online'" in online.resume_problem(saved)
    assert online.resume_problem(None) is None  # a checkpoint from before protocols: online
    assert "protocol='rounds'" in rounds.resume_problem(None)


@pytest.mark.slow
def test_default_train_keeps_its_metrics_and_pool_rows(tmp_path, one_thread) -> None:  # noqa: ANN001
    train(load_config("arith", overrides=[*TINY, "steps=1", f"runs_dir={tmp_path}", "run_id=online"]))
    line = rows(tmp_path / "online")[0]
    core = set(StepStats.model_fields) - {"round", "phase", "evosyn", "episodes", "trajectory", "training", "pipeline",
                                          "update"}
    assert set(line) == core | set(EvoSynStats.model_fields) | set(UpdateDetailStats.model_fields)
    assert line["reasoner_lr"] > 0 and 0 <= line["reasoner_clip_frac"] <= 1 and line["reasoner_ratio_mean"] > 0
    assert line["reasoner_is_weight_max"] is None  # the on-policy loss: no importance weights
    assert line["protocol"] == "online"
    assert pool_tags(tmp_path / "online") == [{}]  # the pool's steps rows are as before


def _resume_from(full: Path, copy: Path, step: int, *overrides: str) -> int:
    """Copy a finished run, keep only its checkpoint of ``step`` and resume the copy to the end."""
    shutil.copytree(full, copy)
    for ckpt in (copy / "checkpoints").glob("step_*"):
        if ckpt.name != f"step_{step}":
            shutil.rmtree(ckpt)
    return main(["train", "--resume", str(copy), *overrides])


@pytest.mark.slow
def test_rounds_resume_exactly_mid_round(tmp_path, capsys, one_thread) -> None:  # noqa: ANN001
    overrides = [*TINY, "steps=5", "protocol=rounds", "rounds.steps_per_round=3", "rounds.accumulate=true",
                 "rounds.batch_size=4", "rounds.lr=0.001", "save_every=1", "keep_checkpoints=10",
                 f"runs_dir={tmp_path}", "run_id=full"]
    summary = train(load_config("arith", overrides=overrides))
    full = tmp_path / "full"
    layout = [(0, "collect"), (0, "collect"), (0, "train"), (1, "collect"), (1, "train")]  # step 4 closes round 1
    assert [(r["round"], r["phase"]) for r in rows(full)] == layout
    assert pool_tags(full) == [{"protocol": "rounds", "round": r["round"], "phase": r["phase"]} for r in rows(full)]
    trained = rows(full)[4]["round_examples"]
    assert trained > rows(full)[2]["round_examples"] > 0  # accumulated: round 1 trains on rounds 0 and 1
    assert [t["round"] for t in summary.round_training] == [0, 1] and summary.protocol == "rounds"
    assert "protocol rounds: 2 rounds" in format_summary(summary)
    weights = load_file(full / "checkpoints" / "step_4" / "reasoner" / "model.safetensors")

    for step in (1, 3):  # mid round 0; mid round 1, whose accumulated data reach back past the checkpoint
        copy = tmp_path / f"resumed-{step}"
        assert _resume_from(full, copy, step) == 0
        assert comparable(copy) == comparable(full)
        again = load_file(copy / "checkpoints" / "step_4" / "reasoner" / "model.safetensors")
        assert all(torch.equal(weights[k], again[k]) for k in weights)

    # a resume that would lay the rounds out differently is refused before anything is rewound
    refused = tmp_path / "refused"
    assert _resume_from(full, refused, 1, "rounds.steps_per_round=2") == 2
    err = capsys.readouterr().err
    assert "rounds.steps_per_round=2 (was 3)" in err
    assert comparable(refused) == comparable(full)

    assert main(["analyze", str(full)]) == 0
    analysis = json.loads((full / "analysis" / "summary.json").read_text())
    assert (analysis["mode"], analysis["n_steps"]) == ("rounds/cotrain", 5)


@pytest.mark.slow
def test_learning_effect_is_measured_fed_back_and_resumed_exactly(tmp_path, capsys, one_thread) -> None:  # noqa: ANN001
    """Rounds of 2 steps: a learning_effect.jsonl line after rounds 1 and 2, the pre round measured by the Reasoner
    before the round's training and the post round after it; with the feedback on (the Designer and
    learnability=progress) a resume from mid round 1 writes the same lines and metrics; analyze shows Table 5."""
    overrides = [*TINY, "steps=6", "protocol=rounds", "rounds.steps_per_round=2", "rounds.batch_size=4",
                 "rounds.sft_lr=0.001", "save_every=1", "keep_checkpoints=10", "evosyn.designer_settings.effect=true",
                 "synth_rewards.learnability=progress", f"runs_dir={tmp_path}", "run_id=full"]
    train(load_config("arith", overrides=overrides))
    full = tmp_path / "full"
    lines = [json.loads(ln) for ln in (full / "learning_effect.jsonl").read_text().splitlines()]
    assert [(ln["step"], ln["pre_steps"], ln["post_steps"]) for ln in lines] == [(3, [0, 1], [2, 3]),
                                                                              (5, [2, 3], [4, 5])]
    assert lines[0]["pre_version"] == 0 < lines[0]["post_version"] < lines[1]["post_version"]
    cells = [c for ln in lines for c in ln["cells"]]
    assert cells and all(c["gain"] == pytest.approx(c["post"] - c["pre"]) for c in cells)
    assert all(c["prev_share"] is None for c in lines[0]["cells"])
    assert all(c["prev_share"] is not None for c in lines[1]["cells"])

    # What the feedback changed. The run with it off (the Designer's need unweighted, the gap as the learner term:
    # progress with every weight 1) is the same run until the first transition is measured (after step 3), then
    # allocates differently; the Synthesizer's learner term is the gap times its cell's measured weight.
    off = [o for o in overrides if o not in ("evosyn.designer_settings.effect=true", "synth_rewards.learnability=progress",
                                            "run_id=full", "save_every=1", "keep_checkpoints=10")]
    train(load_config("arith", overrides=[*off, "synth_rewards.learnability=gap", "run_id=nofeedback"]))
    alloc = {run: [r["allocation"] for r in rows(tmp_path / run)] for run in ("full", "nofeedback")}
    assert alloc["full"][:4] == alloc["nofeedback"][:4] and alloc["full"][4] != alloc["nofeedback"][4]
    designer = load_config("arith", overrides=overrides).evosyn.designer_settings
    weights = effect_weights([Transition.model_validate(lines[0])], designer.effect_memory, designer.effect_floor)
    assert all(0.25 <= w < 1.0 for w in weights.weights.values())  # floor + (1 - floor) P(gain > 0)
    pool = TaskPool(full / "pool.sqlite")
    lowered = 0
    for step in range(6):
        for rec in pool.by_step(step):
            if rec.valid and rec.rollouts and rec.on_target and rec.synth_reward is not None:
                gap = 1.0 - rec.success_rate
                w = 1.0 if step < 4 else weights.of(rec.target)  # the second line comes after step 5
                assert rec.synth_reward.teachability == pytest.approx(gap * w), (step, rec.target)
                lowered += w < 1.0 and gap > 0
    pool.close()
    assert lowered > 0

    copy = tmp_path / "resumed"
    assert _resume_from(full, copy, 4) == 0  # after the first line, before the second
    assert (copy / "learning_effect.jsonl").read_text() == (full / "learning_effect.jsonl").read_text()
    assert comparable(copy) == comparable(full)

    capsys.readouterr()
    assert main(["analyze", str(full)]) == 0
    assert "learning effect (EvoSyn Table 5" in capsys.readouterr().out
    summary = json.loads((full / "analysis" / "summary.json").read_text())
    assert summary["evosyn"]["learning_effect"]["transitions"] == 2
