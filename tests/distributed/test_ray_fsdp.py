"""An agent's learner as a Ray actor group sharded with FSDP2 (``ray.<agent>.learners``), on local Ray with the
tiny arith models (CPU, gloo).

The reference is the in-process run with ``seed_per_request``: ``test_ray.py`` pins that a Ray run with one
learner records it bit for bit, so "the same as in process" is "the same as ``learners=1``" without starting a
second set of actors on 2 cores.

Float tolerance: the sharded Reasoner's gradient is the sum of two ranks' partial gradients (a reduce-scatter),
one learner adds its micro-batches in another order, so weights and float metrics (loss, grad norm, ...) agree to
rounding (~1e-7), not bit for bit. Sampling sees weights that differ in their last bits only, so the pool rows,
which depend on the sampled tokens, are compared exactly.
"""

from __future__ import annotations

import math
import sqlite3
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from synco.config import ConfigError, load_config
from synco.config.ray import RaySettings
from synco.core.policy import STATE_FILE

ray = pytest.importorskip("ray", reason="ray is in the test dependencies (pip install -e '.[test]')")

from synco.distributed.ray_backend import LearnerError, RayBackendError, RayPolicy, sharding_problem  # noqa: E402

TINY = ["n_cards=8", "k=2", "heldout_per_group=0", "progress=false", "threads=1", "tensorboard=false",
        "synthesizer.sampling.max_new_tokens=320", "synthesizer.generation_batch_size=4",
        "reasoner.generation_batch_size=2"]
# 4 actors in 2 CPUs: the synthesizer's learner samples itself; the reasoner is a group of two learners with one
# rollout worker; checks stay in the driver
RAY = ["backend=ray", "ray.synthesizer.rollout_workers=0", "ray.reasoner.rollout_workers=1",
       "ray.reasoner.learners=2", "ray.checks.workers=0", "ray.synthesizer.learner.num_cpus=0.25",
       "ray.reasoner.learner.num_cpus=0.25", "ray.reasoner.worker.num_cpus=0.25"]


# --------------------------------------------------------------------------- without a cluster


def test_learners_is_validated_and_counted():
    with pytest.raises(ConfigError, match=r"ray\.reasoner\.learners: Input should be greater than or equal to 1 "
                                          r"\(got 0\)"):
        load_config("arith", overrides=["ray.reasoner.learners=0"])
    with pytest.raises(ConfigError, match=r"ray\.synthesizer: .*learners=2 .*set rollout_workers >= 1"):
        load_config("arith", overrides=["ray.synthesizer.learners=2", "ray.synthesizer.rollout_workers=0"])
    s = RaySettings.model_validate({"reasoner": {"learners": 2, "rollout_workers": 1,
                                                 "learner": {"num_cpus": 2, "num_gpus": 1, "resources": {"r": 1}}},
                                    "checks": {"workers": 0}})
    # synthesizer: learner 1 + worker 1; reasoner: 2 learners x (2 CPU, 1 GPU, r 1) + worker 1
    assert s.requested() == {"CPU": 1 + 1 + 2 * 2 + 1, "GPU": 2.0, "r": 2.0}


def test_sharding_needs_full_fine_tuning_without_kl_and_fails_before_any_actor(tmp_path, monkeypatch):
    from synco.run.setup import setup_run

    lora = load_config("arith", overrides=["reasoner.lora.rank=4"]).reasoner
    assert "reasoner.lora is set" in sharding_problem("reasoner", lora, 2)
    assert sharding_problem("reasoner", lora, 1) is None
    kl = load_config("arith", overrides=["reasoner.grpo.kl_coef=0.1"]).reasoner
    assert "reasoner.grpo.kl_coef=0.1" in sharding_problem("reasoner", kl, 2)

    monkeypatch.setattr(ray, "is_initialized", lambda: True)  # a joined cluster that could place everything
    monkeypatch.setattr(ray, "cluster_resources", lambda: {"CPU": 16.0})
    started = []
    monkeypatch.setattr(ray, "remote", lambda cls: started.append(cls))
    cfg = load_config("arith", overrides=[*TINY, f"runs_dir={tmp_path}", "run_id=kl", "backend=ray",
                                          "ray.reasoner.learners=2", "reasoner.grpo.kl_coef=0.1"])
    with pytest.raises(RayBackendError, match=r"ray\.reasoner\.learners=2 cannot shard a KL reference model"):
        setup_run(cfg, log=lambda _: None)
    assert not started


# --------------------------------------------------------------------------- on local Ray


def pool_rows(path: Path) -> list[tuple]:
    with sqlite3.connect(path) as db:
        return db.execute("select task_id, step, slot, raw, valid, reference, success_rate from tasks "
                          "order by task_id").fetchall()


def assert_close_stats(ours: dict, theirs: dict) -> None:
    """Equal step stats, floats to rounding (the sharded update sums its gradients in another order)."""
    ours = {k: v for k, v in ours.items() if not k.startswith("t_")}
    theirs = {k: v for k, v in theirs.items() if not k.startswith("t_")}
    assert ours.keys() == theirs.keys()
    for key, value in ours.items():
        if isinstance(value, float) and not (math.isnan(value) and math.isnan(theirs[key])):
            assert value == pytest.approx(theirs[key], rel=1e-4, abs=1e-6), key
        elif not isinstance(value, float):
            assert value == theirs[key], key


def close_to_scale(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Equal to rounding relative to the tensor's scale: Adam's moments hold gradient sums that nearly cancel,
    so an element ~1e-4 of the largest can differ in its third digit between summation orders."""
    return a.shape == b.shape and torch.allclose(a, b, rtol=1e-4, atol=1e-5 * float(a.abs().max()))


def assert_same_checkpoint(a: Path, b: Path) -> None:
    """Same files, same weights and optimizer state (to rounding): full tensors, the one-learner layout."""
    assert (a / "config.json").read_text() == (b / "config.json").read_text()
    wa, wb = load_file(a / "model.safetensors"), load_file(b / "model.safetensors")
    assert wa.keys() == wb.keys()
    assert all(torch.allclose(wa[k], wb[k], atol=1e-6) for k in wa)
    sa = torch.load(a.parent / f"{a.name}_state" / STATE_FILE, weights_only=True)
    sb = torch.load(b.parent / f"{b.name}_state" / STATE_FILE, weights_only=True)
    assert sa["step"] == sb["step"] and sa["scheduler"] == sb["scheduler"]
    assert sa["optimizer"]["param_groups"] == sb["optimizer"]["param_groups"]
    for i, st in sa["optimizer"]["state"].items():
        for key, value in st.items():
            other = sb["optimizer"]["state"][i][key]
            assert other.shape == value.shape and close_to_scale(value, other), (i, key)


def assert_same_weights(ours_run, theirs_run) -> None:  # noqa: ANN001
    """Both agents' trained weights agree to rounding (the sharded reasoner's gathered from its shards)."""
    for role in ("synthesizer", "reasoner"):
        ours = dict(getattr(ours_run.state, role).trainable_parameters())
        theirs = dict(getattr(theirs_run.state, role).trainable_parameters())
        assert ours.keys() == theirs.keys() and len(ours) > 0
        assert all(torch.allclose(ours[k], theirs[k].detach(), atol=1e-6) for k in ours), role


@pytest.mark.slow
def test_a_sharded_reasoner_records_the_one_learner_run(tmp_path, local_ray, one_thread):
    from synco.cotrain.engine import cotrain_step
    from synco.run.checkpoints import save_checkpoint
    from synco.run.loop import close_policies
    from synco.run.setup import setup_run

    def run(run_id, *extra):  # noqa: ANN001, ANN202
        return setup_run(load_config("arith", overrides=[*TINY, f"runs_dir={tmp_path}", f"run_id={run_id}", *extra]),
                         log=lambda _: None)

    ref = run("inprocess", "seed_per_request=true")
    ref_stats = [cotrain_step(ref.state, step).model_dump() for step in range(2)]
    save_checkpoint(ref, 1)

    rr = run("ray", *RAY)
    try:
        reasoner = rr.state.reasoner
        assert isinstance(reasoner, RayPolicy) and len(reasoner.learners) == 2 and len(reasoner.workers) == 1
        stats = [cotrain_step(rr.state, step).model_dump() for step in range(2)]
        assert all(s["reasoner_grad_norm"] for s in stats)  # the sharded reasoner took a step each time
        for ours, theirs in zip(stats, ref_stats, strict=True):
            assert_close_stats(ours, theirs)
        assert pool_rows(rr.dir / "pool.sqlite") == pool_rows(ref.dir / "pool.sqlite")
        assert_same_weights(rr, ref)

        save_checkpoint(rr, 1)  # rank 0 writes the gathered weights and optimizer state
        ckpt = rr.dir / "checkpoints" / "step_1"
        assert_same_checkpoint(ckpt / "reasoner", ref.dir / "checkpoints" / "step_1" / "reasoner")

        # resume: every rank loads the one-process run's optimizer state, then the group steps as it does
        reasoner.load_state(ref.dir / "checkpoints" / "step_1" / "reasoner_state")
        assert_close_stats(cotrain_step(rr.state, 2).model_dump(), cotrain_step(ref.state, 2).model_dump())
        assert pool_rows(rr.dir / "pool.sqlite") == pool_rows(ref.dir / "pool.sqlite")
        assert_same_weights(rr, ref)

        # a call every rank fails alike is one clear error, and the group goes on
        with pytest.raises(LearnerError, match=r"reasoner's learner rank \d of 2 raised during load_state: .*missing"):
            reasoner.load_state(tmp_path / "missing")
        assert len(reasoner.trainable_parameters()) > 0

        # a rank that dies is reported at once (rank 0 would otherwise wait for it in a collective)
        ray.kill(reasoner.learners[1], no_restart=True)
        with pytest.raises(LearnerError, match=r"reasoner's learner actor \(rank 1 of 2\) died during weights"):
            reasoner.trainable_parameters()
    finally:
        rr.state.pool.close()
        ref.state.pool.close()
        close_policies(rr.state)
