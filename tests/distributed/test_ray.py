"""The Ray backend on local Ray (``ray.init(num_cpus=2)``) with the tiny arith models.

One end-to-end test (actors are slow to start on 2 cores): the Ray run, its answer checks and card verification
fanned out to a check worker, records the same pool rows, metrics and weights as the in-process run with
``seed_per_request``, survives a rollout worker killed mid-step (Ray restarts
it, the chunk is retried with the same seed), and fails with a clear message once the worker cannot come back,
without recording half a step. The rest checks the pieces without a cluster.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
import torch

from synco.config import ConfigError, load_config
from synco.config.ray import RaySettings, local_cpus, resource_shortfall
from synco.learn.hf_policy import HFPolicy
from synco.core.policy import LoraSettings, PolicyConfig
from synco.core.sampling import SamplingParams
from synco.learn.charlm import char_tokenizer, tiny_llama

ray = pytest.importorskip("ray", reason="ray is in the test dependencies (pip install -e '.[test]')")

from synco.distributed.ray_backend import (  # noqa: E402 - after the importorskip
    RayBackendError,
    RayPolicy,
    RolloutError,
    actor_options,
    load_payload,
    placed,
    weight_payload,
)
from synco.distributed.ray_checks import RayAnswerChecker, RayTaskVerifier  # noqa: E402

TINY = ["n_cards=8", "k=2", "heldout_per_group=0", "progress=false", "threads=1", "tensorboard=false",
        "synthesizer.sampling.max_new_tokens=320", "synthesizer.generation_batch_size=4",
        "reasoner.generation_batch_size=2"]
# 5 actors in 2 CPUs: the synthesizer's learner samples itself, the reasoner has two rollout workers, and one
# check worker takes the answer checks and the per-card verification (in chunks of 3 cards)
RAY = ["backend=ray", "ray.synthesizer.rollout_workers=0", "ray.reasoner.rollout_workers=2",
       "ray.max_restarts=1", "ray.retries=2", "ray.synthesizer.learner.num_cpus=0.25",
       "ray.reasoner.learner.num_cpus=0.25", "ray.reasoner.worker.num_cpus=0.25",
       "ray.checks.workers=1", "ray.checks.worker.num_cpus=0.25", "ray.checks.cards_per_task=3"]


# --------------------------------------------------------------------------- without a cluster


def test_backend_ray_forces_seeds_per_request_and_names_what_it_cannot_do():
    cfg = load_config("arith", overrides=["backend=ray"])
    assert cfg.seed_per_request is True
    assert load_config("arith").seed_per_request is False and load_config("arith").backend == "inprocess"
    with pytest.raises(ConfigError, match="backend=ray does not support synth_decoding=card"):
        load_config("arith", overrides=["backend=ray", "synth_decoding=card"])
    with pytest.raises(ConfigError, match="ray.reasoner.rollout_workers"):
        load_config("arith", overrides=["ray.reasoner.rollout_workers=-1"])


def test_resources_add_up_and_a_shortfall_is_named():
    s = RaySettings.model_validate({"reasoner": {"rollout_workers": 2, "worker": {"num_cpus": 0.5, "num_gpus": 0.5},
                                                 "learner": {"num_gpus": 1, "resources": {"node_r": 1}}}})
    assert s.requested() == {"CPU": 1 + 1 + 2 * 0.5 + 1 + 2 * 0.5, "GPU": 2.0, "node_r": 1.0}  # + 2 check workers
    short = resource_shortfall(s.requested(), {"CPU": 8.0, "GPU": 1.0})
    assert short == ["GPU: the actors ask for 2, the Ray cluster has 1",
                     "node_r: the actors ask for 1, the Ray cluster has 0"]
    assert resource_shortfall(s.requested(), {"CPU": 5, "GPU": 2, "node_r": 1}) == []
    assert local_cpus(s, 2) == 5 and local_cpus(s, 16) == 16
    assert local_cpus(s.model_copy(update={"num_cpus": 3.0}), 16) == 3.0


def test_actor_options_and_placement():
    res = RaySettings().reasoner.learner.model_copy(update={"num_gpus": 1, "label_selector": {"agent": "reasoner"}})
    opts = actor_options(res, 0)
    assert opts == {"num_cpus": 1.0, "num_gpus": 1, "max_restarts": 0, "max_task_retries": 0,
                    "label_selector": {"agent": "reasoner"}}
    pcfg = PolicyConfig(model_path="m", device="cuda:1")
    assert placed(pcfg, res).device == "cuda"  # Ray makes the actor's own GPU cuda:0
    assert placed(pcfg, RaySettings().reasoner.worker).device == "cpu"


def test_lora_sync_sends_only_adapters_and_the_worker_then_samples_like_the_learner():
    tok = char_tokenizer()
    lora = LoraSettings(rank=4, alpha=8, target_modules=["q_proj", "v_proj"])
    learner = HFPolicy(tiny_llama(tok, seed=0, hidden_size=32, num_layers=2), tok,
                       PolicyConfig(model_path="t", device="cpu", lora=lora))
    with torch.no_grad():  # a trained adapter: lora_B is no longer zero
        for _, p in learner.trainable_parameters():
            p.add_(0.05 * torch.randn_like(p))
    worker = HFPolicy(tiny_llama(tok, seed=0, hidden_size=32, num_layers=2), tok,
                      PolicyConfig(model_path="t", device="cpu", lora=lora, trainable=False))
    payload = weight_payload(learner)
    assert payload and all("lora_" in name for name in payload)
    assert len(payload) < len(dict(learner.model.named_parameters()))
    params = SamplingParams(max_new_tokens=5)
    prompts = ["1+2=", "9-3="]
    before = worker.generate(prompts, 2, params, seed=3)
    load_payload(worker, payload, 4)
    a, b = learner.generate(prompts, 2, params, seed=3), worker.generate(prompts, 2, params, seed=3)
    assert [c.logprobs for g in a for c in g] == [c.logprobs for g in b for c in g]  # bit for bit
    assert {c.version for g in before for c in g} == {0} and {c.version for g in b for c in g} == {4}  # its stamp
    assert [c.logprobs for g in a for c in g] != [c.logprobs for g in before for c in g]
    with pytest.raises(KeyError, match="not in this rollout worker's model"):
        load_payload(worker, {"no.such.weight": torch.zeros(1)}, 5)
    name = next(iter(payload))
    with pytest.raises(ValueError, match=f"weight '{name}'"):
        load_payload(worker, {name: torch.zeros(3, 3, 3)}, 5)


# --------------------------------------------------------------------------- on local Ray


def pool_rows(path: Path) -> list[tuple]:
    """Every task, then every attempt's sampling version as its sampler stamped it (a rollout worker's: the
    learner version it loaded) and the card's Synthesizer version."""
    with sqlite3.connect(path) as db:
        return db.execute("select task_id, step, slot, raw, valid, reference, success_rate, synth_version from tasks "
                          "order by task_id").fetchall() + db.execute(
            "select task_id, idx, policy_version from rollouts order by task_id, idx").fetchall()


def kill_worker_while_sampling(policy: RayPolicy, index: int) -> list[int]:
    """Kill rollout worker ``index`` of ``policy`` once, right after its next request's chunks were submitted."""
    original, calls = policy._chunk_result, []

    def chunk_result(j, ref, *args):  # noqa: ANN001, ANN202
        if not calls:
            calls.append(j)
            ray.kill(policy.workers[index], no_restart=False)
        return original(j, ref, *args)

    policy._chunk_result = chunk_result  # type: ignore[method-assign]
    return calls


def clean(stats) -> dict:
    return {k: v for k, v in stats.model_dump().items() if not k.startswith("t_")}


@pytest.mark.slow
def test_ray_run_records_the_in_process_run_and_survives_a_killed_rollout_worker(tmp_path, local_ray, one_thread):
    from synco.cotrain.engine import cotrain_step
    from synco.run.checkpoints import save_checkpoint
    from synco.run.loop import close_policies
    from synco.run.setup import setup_run

    def run(run_id, *extra):  # noqa: ANN001, ANN202
        return setup_run(load_config("arith", overrides=[*TINY, f"runs_dir={tmp_path}", f"run_id={run_id}", *extra]),
                         log=lambda _: None)

    ref = run("inprocess", "seed_per_request=true")
    ref_stats = [clean(cotrain_step(ref.state, step)) for step in range(2)]
    save_checkpoint(ref, 1)

    rr = run("ray", *RAY)
    try:
        reasoner = rr.state.reasoner
        assert isinstance(reasoner, RayPolicy) and len(reasoner.workers) == 2
        assert isinstance(rr.state.checker, RayAnswerChecker) and isinstance(rr.state.verifier, RayTaskVerifier)
        checks = rr.state.checker.pool
        assert rr.state.verifier.pool is checks and len(checks.actors) == 1
        stats = [clean(cotrain_step(rr.state, 0))]
        assert checks.n_remote_chunks >= 3 and checks.n_local_chunks == 0  # 8 cards in 3 chunks, then the answers
        pids = reasoner.worker_pids()
        killed = kill_worker_while_sampling(reasoner, 0)
        stats.append(clean(cotrain_step(rr.state, 1)))
        assert killed, "step 1 should have sampled Reasoner attempts"
        new_pids = reasoner.worker_pids()
        assert new_pids[0] != pids[0] and new_pids[1] == pids[1]  # Ray restarted the killed worker only
        assert reasoner.retried_chunks >= 1
        assert stats == ref_stats
        assert pool_rows(rr.dir / "pool.sqlite") == pool_rows(ref.dir / "pool.sqlite")
        for role in ("synthesizer", "reasoner"):
            ours = dict(getattr(rr.state, role).trainable_parameters())
            theirs = dict(getattr(ref.state, role).trainable_parameters())
            assert ours.keys() == theirs.keys()
            assert all(torch.equal(ours[k], theirs[k].detach()) for k in ours), role
        save_checkpoint(rr, 1)  # written by the learner actors
        for role in ("synthesizer", "reasoner"):
            assert (rr.dir / "checkpoints" / "step_1" / role / "model.safetensors").read_bytes() == (
                ref.dir / "checkpoints" / "step_1" / role / "model.safetensors").read_bytes()

        # killed again: its one restart is used up, so the step fails and records nothing
        kill_worker_while_sampling(reasoner, 0)
        with pytest.raises(RolloutError, match=r"reasoner's rollout worker 0 could not sample a generate request \(part 0\) .* nothing of "
                                               r"this step was recorded"):
            cotrain_step(rr.state, 2)
        assert rr.state.pool.last_step() == 1
        assert pool_rows(rr.dir / "pool.sqlite") == pool_rows(ref.dir / "pool.sqlite")
    finally:
        rr.state.pool.close()
        ref.state.pool.close()
        close_policies(rr.state)


# rounds, GRPO at the round's end: two steps close one round, whose update samples 2 fresh attempts at each of the
# round's tasks, 8 tasks a request (so the round takes more than one request, each with its own seed)
ROUNDS = ["protocol=rounds", "rounds.steps_per_round=2", "rounds.update=grpo", "rounds.batch_size=8", "steps=2"]
# 4 actors: the Reasoner's two rollout workers sample the round's attempts; checks stay in the driver
RAY_ROUNDS = ["backend=ray", "ray.synthesizer.rollout_workers=0", "ray.reasoner.rollout_workers=2",
              "ray.synthesizer.learner.num_cpus=0.25", "ray.reasoner.learner.num_cpus=0.25",
              "ray.reasoner.worker.num_cpus=0.25", "ray.checks.workers=0"]


@pytest.mark.slow
def test_ray_run_records_the_in_process_run_on_the_rounds_protocol(tmp_path, local_ray, one_thread):
    """The round's own Reasoner requests (GRPO on the round's tasks) are seeded like the step's, so rollout
    workers sample what the in-process learner samples: same metrics, pool rows and weights after the round."""
    from synco.run.steps import protocol_step
    from synco.run.loop import close_policies
    from synco.run.setup import setup_run

    def run(run_id, *extra):  # noqa: ANN001, ANN202
        cfg = load_config("arith", overrides=[*TINY, *ROUNDS, f"runs_dir={tmp_path}", f"run_id={run_id}", *extra])
        return setup_run(cfg, log=lambda _: None)

    ref = run("inprocess", "seed_per_request=true")
    step = protocol_step(ref.protocol)
    ref_stats = [clean(step(ref.state, s)) for s in range(2)]
    assert [(r["round"], r["phase"]) for r in ref_stats] == [(0, "collect"), (0, "train")]
    assert ref_stats[1]["round_examples"] > 8 and ref_stats[1]["round_updates"] >= 1  # two requests, a step taken

    rr = run("ray", *RAY_ROUNDS)
    try:
        assert isinstance(rr.state.reasoner, RayPolicy) and len(rr.state.reasoner.workers) == 2
        step = protocol_step(rr.protocol)
        assert [clean(step(rr.state, s)) for s in range(2)] == ref_stats
        assert pool_rows(rr.dir / "pool.sqlite") == pool_rows(ref.dir / "pool.sqlite")
        for role in ("synthesizer", "reasoner"):
            ours = dict(getattr(rr.state, role).trainable_parameters())
            theirs = dict(getattr(ref.state, role).trainable_parameters())
            assert ours.keys() == theirs.keys()
            assert all(torch.equal(ours[k], theirs[k].detach()) for k in ours), role
    finally:
        rr.state.pool.close()
        ref.state.pool.close()
        close_policies(rr.state)


def test_a_run_asking_for_more_than_the_cluster_has_fails_before_starting_actors(tmp_path, monkeypatch):
    from synco.run.setup import setup_run

    monkeypatch.setattr(ray, "is_initialized", lambda: True)  # a joined cluster of 2 CPUs, no GPU
    monkeypatch.setattr(ray, "cluster_resources", lambda: {"CPU": 2.0, "memory": 1e9})
    started = []
    monkeypatch.setattr(RayPolicy, "__init__", lambda *a, **k: started.append(a))
    cfg = load_config("arith", overrides=[*TINY, f"runs_dir={tmp_path}", "run_id=big", "backend=ray",
                                          "ray.reasoner.worker.num_gpus=1"])
    with pytest.raises(RayBackendError, match="CPU: the actors ask for 5, the Ray cluster has 2; GPU: the actors "
                                              "ask for 1, the Ray cluster has 0. Lower ray.<agent>"):
        setup_run(cfg, log=lambda _: None)
    assert not started


# the tools world: 4 cards x 4 episodes in jobs of 4 (reasoner.generation_batch_size), run on two rollout workers
TOOLS = ["n_cards=4", "k=4", "heldout_per_group=0", "progress=false", "threads=1", "tensorboard=false",
         "max_turns=4", "reasoner.generation_batch_size=4", "synthesizer.generation_batch_size=4",
         "evosyn.reflector=false", "rounds.steps_per_round=2"]


@pytest.mark.slow
@pytest.mark.parametrize("variants", [["protocol=rounds"], ["tools.db_variants=4", "protocol=online"]],
                         ids=["fixed_db_gold_rounds", "db_variants_online"])
def test_ray_tools_run_records_the_in_process_episodes(tmp_path, local_ray, one_thread, variants):
    """Episodes run where they are sampled (each job on a rollout worker, its environments there) and record the
    same steps as in-process: metrics, pool rows with every episode's transcript, both agents' weights. On the
    preset's protocol (a round of two steps, then SFT on the tasks' gold episodes, built on the driver with the
    learner's tokenizer) and online (a GRPO step each); with database variants too: each episode's attempt index
    travels in its job, so a worker builds the same database."""
    from synco.run.loop import close_policies
    from synco.run.setup import setup_run
    from synco.run.steps import protocol_step

    def run(run_id, *extra):  # noqa: ANN001, ANN202
        return setup_run(load_config("tools", overrides=[*TOOLS, *variants, f"runs_dir={tmp_path}", f"run_id={run_id}",
                                                         *extra]), log=lambda _: None)

    def episodes(path):  # noqa: ANN001, ANN202
        with sqlite3.connect(path) as db:
            return db.execute("select task_id, idx, reward, token_ids, episode_json from rollouts "
                              "order by task_id, idx").fetchall()

    ref = run("inprocess", "seed_per_request=true")
    step = protocol_step(ref.protocol)
    ref_stats = [clean(step(ref.state, s)) for s in range(2)]
    assert ref_stats[0]["mean_turns"] > 1 and ref_stats[0]["n_valid"] > 0
    if ref.cfg.protocol == "rounds":  # the round's end: SFT on gold episodes, a step taken
        assert ref_stats[1]["round_examples"] > 0 and ref_stats[1]["round_updates"] >= 1
    rr = run("ray", *RAY_ROUNDS, "ray.reasoner.rollout_workers=1")  # one is enough: jobs go to it (the tests above split)
    try:
        calls = []
        original = rr.state.reasoner._submit_job
        rr.state.reasoner._submit_job = lambda j, domain, job: calls.append(j) or original(j, domain, job)
        step = protocol_step(rr.protocol)
        assert [clean(step(rr.state, s)) for s in range(2)] == ref_stats
        assert calls, "the episodes ran as jobs on the rollout workers"
        assert pool_rows(rr.dir / "pool.sqlite") == pool_rows(ref.dir / "pool.sqlite")
        assert episodes(rr.dir / "pool.sqlite") == episodes(ref.dir / "pool.sqlite")
        on_variants = ['"db_variant"' in row[4] for row in episodes(ref.dir / "pool.sqlite")]
        on_db = any(v.startswith("tools.db_variants") for v in variants)
        assert on_variants and all(on_variants) == on_db and any(on_variants) == on_db
        for role in ("synthesizer", "reasoner"):
            ours = dict(getattr(rr.state, role).trainable_parameters())
            theirs = dict(getattr(ref.state, role).trainable_parameters())
            assert all(torch.equal(ours[k], theirs[k].detach()) for k in ours), role
    finally:
        rr.state.pool.close()
        ref.state.pool.close()
        close_policies(rr.state)


@pytest.mark.slow
def test_asynchronous_ray_run_records_the_in_process_asynchronous_run(tmp_path, local_ray, one_thread):
    """max_staleness=1 on Ray: the Reasoner's rollout worker samples the next step on the weights of the last publish
    while the learner actors update, the Synthesizer's learner (no rollout worker) on a copy of its own weights of the
    last publish; the run records what the in-process pipeline records (seeds per request), each attempt and card
    stamped with the same version."""
    from synco.run.loop import train

    def run(run_id: str, *extra: str) -> list[dict]:
        train(load_config("arith", overrides=[*TINY, "steps=2", "max_staleness=1", f"runs_dir={tmp_path}",
                                              f"run_id={run_id}", *extra]), log=lambda *a, **k: None)
        lines = (tmp_path / run_id / "metrics.jsonl").read_text().splitlines()
        return [{k: v for k, v in json.loads(ln).items() if not k.startswith("t_")} for ln in lines]

    ref = run("inprocess", "seed_per_request=true")
    got = run("ray", "backend=ray", "ray.synthesizer.rollout_workers=0", "ray.reasoner.rollout_workers=1",
              "ray.synthesizer.learner.num_cpus=0.25", "ray.synthesizer.worker.num_cpus=0.25",
              "ray.reasoner.learner.num_cpus=0.25", "ray.reasoner.worker.num_cpus=0.25", "ray.checks.workers=0")
    assert [m["staleness"] for m in got] == [0.0, 1.0]
    # the same samples, rewards and decisions; the update's floats to 1e-4 (the behaviour log-probs come from the
    # workers' forward passes, the in-process snapshot's from its own: equal weights, float-level differences)
    assert [{k: v for k, v in m.items() if not isinstance(v, float)} for m in got] == [
        {k: v for k, v in m.items() if not isinstance(v, float)} for m in ref]
    for g, r in zip(got, ref):
        assert {k: v for k, v in g.items() if isinstance(v, float)} == pytest.approx(
            {k: v for k, v in r.items() if isinstance(v, float)}, rel=1e-4, abs=1e-6)
    assert pool_rows(tmp_path / "ray" / "pool.sqlite") == pool_rows(tmp_path / "inprocess" / "pool.sqlite")
