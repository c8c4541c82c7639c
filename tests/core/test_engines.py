"""Sampling engines by name: the registry's checks, and an engine registered from outside the package running a
co-training run with no edit in ``cotrain/`` or ``run/``."""

from __future__ import annotations

import json
import math
import sqlite3
from pathlib import Path

import pytest

from synco.config import ConfigError, load_config
from synco.core.engines import engine_factory, engine_names, register_engine


def test_names_are_checked_and_built_ins_cannot_be_replaced() -> None:
    assert engine_names()[:3] == ["hf", "vllm", "served"]
    assert engine_factory("hf") is None and engine_factory("vllm") is None  # the learner's own samplers
    with pytest.raises(ValueError, match="built in"):
        register_engine("served", lambda learner, role, trains: None)
    with pytest.raises(ValueError, match="lower-case"):
        register_engine("My Engine", lambda learner, role, trains: None)
    with pytest.raises(TypeError, match="callable"):
        register_engine("x", "not a factory")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"reasoner\.rollout_engine.*unknown rollout_engine 'nope'.*hf, vllm, served"):
        load_config("arith", overrides=["reasoner.rollout_engine=nope"])


@pytest.mark.slow
def test_an_engine_registered_from_outside_runs_a_run_stamping_its_versions(tmp_path: Path, one_thread: None) -> None:
    """A copy of the learner's weights, loaded at each publish (the snapshot sampler, registered under a new name):
    the run equals the in-process engine's (its counts and accuracies exactly; a loss to float precision: the copy
    computes the sampling log-probs apart from the training model), and every attempt records the version the copy
    sampled with."""
    from synco.cli import main
    from synco.learn.hf_policy import SnapshotSampler

    def copy_engine(learner, role: str, trains: bool) -> SnapshotSampler:  # noqa: ANN001
        return SnapshotSampler(learner.generator, learner.version, [n for n, _ in learner.trainable_parameters()])

    register_engine("copy", copy_engine)
    small = ["steps=3", "seed=0", "threads=1", "n_cards=16", "heldout_per_group=0", "progress=false",
             "tensorboard=false", f"runs_dir={tmp_path}"]
    assert main(["train", *small, "run_id=hf"]) == 0
    assert main(["train", *small, "run_id=copy", "reasoner.rollout_engine=copy"]) == 0

    def metrics(run: str) -> list[dict]:
        return [{k: v for k, v in json.loads(x).items() if not k.startswith("t_")}
                for x in (tmp_path / run / "metrics.jsonl").read_text().splitlines()]

    ours, theirs = metrics("copy"), metrics("hf")
    assert [sorted(m) for m in ours] == [sorted(m) for m in theirs]
    for a, b in zip(ours, theirs):  # counts and accuracies equal; a loss computed on the copy differs in float only
        for k, v in a.items():
            if isinstance(v, float) and isinstance(b[k], float):
                assert math.isclose(v, b[k], rel_tol=1e-4, abs_tol=1e-6), (a["step"], k, v, b[k])
            else:
                assert v == b[k], (a["step"], k, v, b[k])
    con = sqlite3.connect(tmp_path / "copy" / "pool.sqlite")
    got = con.execute("SELECT t.step, r.policy_version FROM rollouts r JOIN tasks t USING (task_id) "
                      "GROUP BY t.step, r.policy_version ORDER BY t.step").fetchall()
    con.close()
    updates, want = 0, []
    for line in metrics("copy"):
        want.append((line["step"], updates))
        updates += line["reasoner_loss"] is not None
    assert got == want and updates >= 1
    roles = json.loads((tmp_path / "copy" / "roles.json").read_text())
    assert roles["reasoner"]["engine"] == "copy"
