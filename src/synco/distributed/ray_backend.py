"""The Ray backend (``backend: ray``): each agent's learner is a Ray actor (or an FSDP-sharded actor group), its rollout
workers are actor replicas.

Where each piece runs::

    driver (this process)        the loop (trainer, cotrain_step), the pool, the report, the consensus checker
                                 model; verification's phase 2 (novelty within the batch and against the pool,
                                 contamination, in slot order), consensus, the domain's reject_reason and single
                                 answer checks (held-out evaluation); one RayPolicy per agent, which implements
                                 the Policy protocol, so cotrain_step does not change
    learner actor (per agent)    an HFPolicy built from the agent's config on the agent's own resources
                                 (ray.<agent>.learner: CPUs, GPUs, custom resources, node labels): GRPO / SFT
                                 updates, optimizer and fp32 masters, checkpoints
      or learner group           ray.<agent>.learners > 1: that many learner actors (each with those resources),
                                 ranks 0..N-1 of a torch.distributed group (nccl on GPUs, else gloo; rank 0 picks
                                 the rendezvous address and port), each builds the same HFPolicy and shards it with
                                 FSDP2 (:mod:`synco.learn.fsdp`); every update, SFT update, save, save_state,
                                 load_state and weight export runs on every rank with the whole batch, rank 0's
                                 stats are the agent's; weights and checkpoints are gathered to full tensors
                                 (rank 0 writes), so workers and checkpoint files look as with one learner
    rollout workers (per agent)  ray.<agent>.rollout_workers frozen copies of the model: each samples its share
                                 of every generate request
    check workers                ray.checks.workers actors, each with one AnswerChecker
                                 (:mod:`synco.distributed.ray_checks`): a step's answer checks
                                 (``match_many``, in chunks of ray.checks.answers_per_task) and verification's
                                 per-card phase 1 (parse, schema, problem, answer consistency, oracle; chunks of
                                 ray.checks.cards_per_task cards) as Ray tasks; same grades and verdicts as in
                                 process, a failed chunk is checked in the driver

**Seeds per request.** A request's rows are cut into chunks of ``generation_batch_size`` rows and chunk ``j``
is sampled from ``chunk_seed(seed, j)`` alone (:mod:`synco.core.seeds`), exactly as
:meth:`HFPolicy.generate <synco.learn.hf_policy.HFPolicy.generate>` does in one process; the chunks go to the workers
round-robin and run in parallel. Each agent is built from ``agent_seed(seed, role)`` in its actors as in the
driver, and actors use the driver's torch thread count, so a Ray run records the same pool and metrics as the
in-process run with ``seed_per_request: true`` (which ``backend: ray`` forces).

**Weight sync.** At every publish (:meth:`RayPolicy.publish`: after every update that took an optimizer step, or
at the pipeline's publish point) the learner exports its trainable weights (only the LoRA adapters under LoRA)
into the object store once (``ray.put``) and every worker loads that one object with the learner's version, which
its sampler stamps on every completion; each publish has a number, and a worker asked to sample for another
publish than the one it holds refuses (:class:`StaleWeights`). A learner group gathers the full weights (every rank takes part) and rank 0 puts them.

**Failures.** A rollout worker that dies is restarted by Ray (``ray.max_restarts``); its model is rebuilt from
the config, so before it samples again it is re-sent the learner's current weights, and the chunk it was
sampling is tried again with the same seed (``ray.retries`` times): the step's result is the same as without
the failure. Past that, :class:`RolloutError` names the worker and the step fails before the pool records
anything (one transaction per step), so the pool never holds half a step. A learner is never restarted (its
optimizer state would be lost): :class:`LearnerError`, and the run resumes from its last checkpoint. In a learner
group the driver waits for the ranks as they finish, so one that dies is reported at once, not after the others
time out in a collective; a resume loads the optimizer state on every rank.

Checkpoints are written by the learner actors to the paths the driver names, so on a multi-node cluster the
run directory must be on a filesystem every node shares.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import ray
from ray.exceptions import ActorDiedError, ActorUnavailableError, GetTimeoutError, RayActorError, RayTaskError

from synco.config.ray import RayResources, RaySettings, local_cpus, resource_shortfall
from synco.core.seeds import agent_seed, chunk_seed, regroup, row_chunks
from synco.core.policy import PolicyConfig, UpdateStats
from synco.core.prompts import build_prompt
from synco.core.tokens import TokenText
from synco.core.episodes import Episode
from synco.core.sampling import Completion, Experience, SamplingParams
from synco.domains.base import Domain
from synco.rollout.episodes import EpisodeJob, run_job

if TYPE_CHECKING:
    import torch

    from synco.config import RunConfig
    from synco.core.sampling import SFTExample

ROLES = ("synthesizer", "reasoner")
GROUP_ERROR_GRACE_S = 10.0
"""After one learner rank raises: how long the others may take to finish before they are taken as stuck."""
RESUME_HINT = "nothing of this step was recorded; the run can resume from its last checkpoint (synco train --resume RUN_DIR)"


class RayBackendError(RuntimeError):
    """The Ray backend cannot go on; the message says what failed and what to do."""


class RolloutError(RayBackendError):
    """A chunk of a generate request failed on its rollout worker more often than ``ray.retries`` allows."""


class LearnerError(RayBackendError):
    """An agent's learner actor died (or could not start): its weights and optimizer state are gone with it."""


class StaleWeights(RuntimeError):
    """Raised in a rollout worker asked to sample with a weights version it does not hold (e.g. just restarted)."""


# --------------------------------------------------------------------------- weights (run inside the actors)


def weight_payload(policy: Any) -> dict[str, torch.Tensor]:
    """What a rollout worker needs after an update: every trainable parameter (only the LoRA adapters under
    LoRA), as detached CPU copies; the frozen rest is already equal in every copy of the model.

    A sharded learner's parameters are gathered to full tensors (a collective: every rank of its group calls this).
    """
    from synco.learn.fsdp import full_tensors

    return {name: full_tensors(p.detach()).to("cpu", copy=True) for name, p in policy.trainable_parameters()}


def load_payload(policy: Any, payload: dict[str, torch.Tensor], version: int) -> None:
    """Copy a :func:`weight_payload` into ``policy``'s model (names must exist with the same shapes); its sampler
    samples them as the learner's ``version``.

    The loaded parameters are marked ``requires_grad`` as in the learner (nothing is trained here):
    CPU kernels dispatch on it, and a frozen copy's log-probs differed from the learner's by ~1e-6,
    enough to change GRPO's updates in their last bits.
    """
    import torch

    params = dict(policy.model.named_parameters())
    unknown = sorted(set(payload) - set(params))
    if unknown:
        raise KeyError(f"{len(unknown)} learner weights are not in this rollout worker's model (first: {unknown[0]!r}): "
                       "the learner and the worker were built from different models or LoRA settings")
    with torch.no_grad():
        for name, tensor in payload.items():
            dst = params[name]
            if dst.shape != tensor.shape:
                raise ValueError(f"weight {name!r}: the learner sends shape {tuple(tensor.shape)}, "
                                 f"the worker holds {tuple(dst.shape)}")
            dst.copy_(tensor.to(device=dst.device, dtype=dst.dtype))
            dst.requires_grad_(True)
    policy.generator.load(policy.model, version)


# --------------------------------------------------------------------------- actors


class _AgentActor:
    """What every actor of an agent holds: an HFPolicy built like the driver would build it."""

    def __init__(self, config: PolicyConfig, model_path: str, seed: int, threads: int) -> None:
        os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
        import torch

        from synco.learn.hf_policy import seeded_rng
        from synco.learn.build import build_policy

        torch.set_num_threads(threads)  # the driver's count: CPU results are bit-identical only at equal counts
        with seeded_rng(seed):  # as trainer.build_policies does under seed_per_request
            self.policy = build_policy(config, model_path)
        self.publication = -1  # the learner's publish this actor's weights came from (-1: none yet)

    def pid(self) -> int:
        return os.getpid()

    def tokenizer(self) -> Any:
        return self.policy.tokenizer

    def eos_ids(self) -> list[int]:
        return list(self.policy.eos_ids)

    def generate_chunk(self, texts: Sequence[str], params: SamplingParams, seed: int,
                       publication: int | None) -> list[Completion]:
        """One completion per formatted prompt of one chunk, sampled from ``seed`` alone."""
        if publication is not None and publication != self.publication:
            raise StaleWeights(f"this rollout worker holds weights publication {self.publication}, the request needs "
                               f"{publication}")
        ids = [self.policy.encode_prompt(t) for t in texts]
        if any(not x for x in ids):
            raise ValueError("a prompt tokenized to zero tokens")
        return [g[0] for g in self.policy.generator.generate(ids, 1, params, seed=seed)]


    def run_episode_job(self, domain: Domain, job: EpisodeJob, publication: int | None) -> list[Episode]:
        """One job of episodes (:func:`synco.rollout.episodes.run_job`): sampled and stepped here, where the
        environments live for the episodes' length."""
        if publication is not None and publication != self.publication:
            raise StaleWeights(f"this rollout worker holds weights publication {self.publication}, the request needs "
                               f"{publication}")
        return run_job(self.policy, domain, job)


class LearnerActor(_AgentActor):
    """An agent's learner (``rank`` of an actor group of ``world``): updates, checkpoints, and the weights its
    rollout workers load.

    With ``world > 1`` every rank builds the same policy (same config, same seed), then :meth:`join_group`
    shards it with FSDP2 (:func:`synco.learn.fsdp.shard_policy`). From then on every method that trains,
    saves or exports weights is a collective: the driver calls it on every rank, in the same order, with the
    same arguments, and uses rank 0's answer; files are written by rank 0 alone.
    """

    def __init__(self, config: PolicyConfig, model_path: str, seed: int, threads: int, rank: int = 0,
                 world: int = 1) -> None:
        super().__init__(config, model_path, seed, threads)
        self.rank, self.world = rank, world
        self._store: Any = None  # rank 0: the group's TCP store, from rendezvous() on

    def rendezvous(self) -> tuple[str, int]:
        """Rank 0: open the group's TCP store on this node, on a port the OS picks and the store holds from
        then on (no other process can take it before the other ranks connect); its address and port."""
        from synco.learn.fsdp import open_rendezvous

        address = ray.util.get_node_ip_address()
        self._store = open_rendezvous(address, self.world)
        return address, int(self._store.port)

    def join_group(self, address: str, port: int) -> int:
        """Join the agent's process group (nccl on a GPU, else gloo) over rank 0's store and shard the policy
        over it."""
        import torch.distributed as dist

        from synco.learn.fsdp import join_rendezvous, shard_policy

        if self.rank == 0 and self._store is None:
            raise RuntimeError("join_group on rank 0 before rendezvous(): the group's store is not open")
        store = self._store if self.rank == 0 else join_rendezvous(address, port, self.world)
        backend = "nccl" if self.policy.device.type == "cuda" else "gloo"
        dist.init_process_group(backend, store=store, rank=self.rank, world_size=self.world)
        shard_policy(self.policy)
        return self.rank

    def update(self, batch: list[Experience]) -> UpdateStats:
        return self.policy.update(batch)

    def optimizer_steps(self) -> int:
        """The learner's optimizer-step count: the version of the weights it publishes."""
        return self.policy.version

    def sft_update(self, batch: list[SFTExample], lr: float | None) -> UpdateStats:
        return self.policy.sft_update(batch, lr)

    def save(self, path: str) -> None:
        if self.policy.shard is None:
            self.policy.save(path)
        else:
            from synco.learn.fsdp import save_full

            save_full(self.policy, path)

    def save_state(self, path: str) -> None:
        if self.policy.shard is None:
            self.policy.save_state(path)
        else:
            from synco.learn.fsdp import save_full_state

            save_full_state(self.policy, path)

    def load_state(self, path: str) -> None:
        if self.policy.shard is None:
            self.policy.load_state(path)
        else:
            from synco.learn.fsdp import load_full_state

            load_full_state(self.policy, path)

    def weights(self) -> dict[str, torch.Tensor]:
        return weight_payload(self.policy)

    def sample_apart(self) -> None:
        """No rollout workers, asynchronous co-training: this learner samples a copy of its weights that only
        :meth:`publish` changes (:meth:`HFPolicy.sample_apart <synco.learn.hf_policy.HFPolicy.sample_apart>`)."""
        self.policy.sample_apart()

    def publish(self) -> int:
        """The learner's weights into its own sampler; the version."""
        return self.policy.publish()

    def export(self) -> list[ray.ObjectRef]:
        """The current weights, put into the object store once by rank 0 (the other ranks only help gather them,
        and return an empty list); the list keeps Ray from resolving the ref."""
        payload = weight_payload(self.policy)
        return [ray.put(payload)] if self.rank == 0 else []


class RolloutWorker(_AgentActor):
    """A frozen copy of an agent's model that samples chunks of requests with the learner's latest weights: a
    :class:`~synco.core.policy.Sampler` of the learner, whose completions its own sampler stamps with the learner
    version it loaded."""

    def load(self, payload: dict[str, torch.Tensor], publication: int, version: int) -> int:
        """The learner's weights of ``version``, its ``publication``-th publish (what requests name)."""
        load_payload(self.policy, payload, version)
        self.publication = publication
        return publication


# --------------------------------------------------------------------------- driver side


def actor_options(res: RayResources, max_restarts: int) -> dict[str, Any]:
    """Ray actor options of one actor: its resources and restarts (tasks are never retried by Ray itself:
    :class:`RayPolicy` re-sends weights first)."""
    opts: dict[str, Any] = {"num_cpus": res.num_cpus, "num_gpus": res.num_gpus,
                            "max_restarts": max_restarts, "max_task_retries": 0}
    if res.resources:
        opts["resources"] = dict(res.resources)
    if res.label_selector:
        opts["label_selector"] = dict(res.label_selector)
    return opts


def placed(config: PolicyConfig, res: RayResources) -> PolicyConfig:
    """The agent's config as an actor builds it: on its own GPU when it reserves one (Ray makes that GPU
    ``cuda`` in the actor, whatever ``cuda:N`` the config names), else on the CPU."""
    return config.model_copy(update={"device": "cuda" if res.num_gpus > 0 else "cpu"})


def sharding_problem(role: str, config: PolicyConfig, learners: int) -> str | None:
    """Why ``learners`` learner actors cannot shard this agent (None: they can, or there is only one).

    Checked in the driver before any actor starts: :func:`synco.learn.fsdp.shard_policy` supports full
    fine-tuning without a KL reference model.
    """
    if learners <= 1:
        return None
    if config.lora is not None:
        return f"ray.{role}.learners={learners} shards full fine-tuning only, but {role}.lora is set (use learners=1)"
    if config.grpo.kl_coef > 0:
        return (f"ray.{role}.learners={learners} cannot shard a KL reference model: {role}.grpo.kl_coef="
                f"{config.grpo.kl_coef:g} (use learners=1 or kl_coef=0)")
    return None


class RayPolicy(TokenText):
    """The driver's view of one agent on Ray (implements :class:`~synco.core.policy.Policy`).

    Prompts are formatted and episode text is encoded here (the learner's tokenizer and end-of-turn ids, fetched
    once: :class:`~synco.core.tokens.TokenText`, so a gold episode built here has the learner's ids); ``generate`` fans chunks out
    to the rollout workers (to the learner when there are none); updates, checkpoints and optimizer
    state go to the learner actor, or to every rank of the learner group (``ray.<agent>.learners > 1``,
    each with the whole batch; rank 0's stats are returned), and after every optimizer step the workers
    load its weights.
    """

    def __init__(self, role: str, config: PolicyConfig, model_path: str, settings: RaySettings, seed: int,
                 threads: int) -> None:
        agent = getattr(settings, role)
        problem = sharding_problem(role, config, agent.learners)
        if problem:
            raise RayBackendError(problem)
        self.role, self.config, self.retries = role, config, settings.retries
        self.restart_timeout_s = settings.restart_timeout_s
        learner_cls = ray.remote(LearnerActor).options(**actor_options(agent.learner, 0))
        worker_cls = ray.remote(RolloutWorker).options(**actor_options(agent.worker, settings.max_restarts))
        learner_cfg = placed(config, agent.learner)
        self.learners = [learner_cls.remote(learner_cfg, model_path, seed, threads, rank, agent.learners)
                         for rank in range(agent.learners)]
        self.learner = self.learners[0]  # rank 0: tokenizer, stats, the weights it publishes
        worker_cfg = placed(config, agent.worker).model_copy(update={"trainable": False})
        self.workers = [worker_cls.remote(worker_cfg, model_path, seed, threads) for _ in range(agent.rollout_workers)]
        self.publication = 0  # weight publications (what a request names: the workers' staleness check)
        self.policy_version = 0  # the learner version the workers sample (Policy.policy_version), the last published
        self.tokenizer: Any = None
        self.eos_ids: list[int] = []
        self.retried_chunks = 0  # chunks sampled again after their worker died or held stale weights
        self.publishes_updates = True  # synchronous: every update is published; sample_apart: the pipeline does

    def wait_ready(self) -> None:
        """Block until the actors are up (a learner group joins its process group and shards the model);
        the workers get the learner's initial weights (version 0)."""
        if len(self.learners) > 1:
            address, port = self._learner("rendezvous")
            self._group("join_group", address, port)
        self.tokenizer = self._learner("tokenizer")
        self.eos_ids = self._learner("eos_ids")
        [payload] = self._group("export")
        for i, w in enumerate(self.workers):
            try:
                ray.get(w.load.remote(payload, self.publication, self.policy_version))
            except RayActorError as e:
                raise RayBackendError(f"the {self.role}'s rollout worker {i} could not start: {last_line(e)}") from e

    # ------------------------------------------------------------------ the Policy protocol

    def format_prompt(self, user_text: str, system: str | None = None,
                      tools: Sequence[Mapping[str, Any]] | None = None) -> str:
        """As :meth:`HFPolicy.format_prompt <synco.learn.hf_policy.HFPolicy.format_prompt>`, with the learner's tokenizer."""
        cfg = self.config
        return build_prompt(self.tokenizer, user_text, cfg.system_prompt if system is None else system,
                            use_chat_template=cfg.use_chat_template, enable_thinking=cfg.enable_thinking, tools=tools)

    def generate(self, prompts: Sequence[str], n: int, params: SamplingParams | None = None,
                 seed: int | None = None) -> list[list[Completion]]:
        """``n`` completions per formatted prompt, chunk ``j`` on worker ``j mod workers`` (all in parallel).

        Without a ``seed`` (callers that pass none, e.g. ``synco eval``-style helpers) one is drawn from the
        driver's torch RNG, so such a request still follows the run's seed.
        """
        params = params or self.config.sampling
        if seed is None:
            seed = _driver_seed()
        chunks = row_chunks(len(prompts), n, self.config.generation_batch_size)
        jobs = [([prompts[p] for p in rows], chunk_seed(seed, j)) for j, rows in enumerate(chunks)]
        refs = [self._submit(j, texts, params, s) for j, (texts, s) in enumerate(jobs)]
        results = [self._chunk_result(j, ref, texts, params, s) for j, (ref, (texts, s)) in enumerate(zip(refs, jobs))]
        return regroup(len(prompts), chunks, results)

    def run_episode_jobs(self, domain: Domain, jobs: Sequence[EpisodeJob]) -> list[list[Episode]]:
        """Job ``j`` of episodes on worker ``j mod workers`` (on the learner when there are none), all in parallel:
        each job the same episodes as in-process (:class:`synco.rollout.episodes.RunsEpisodes`)."""
        refs = [self._submit_job(j, domain, job) for j, job in enumerate(jobs)]
        return [self._job_result(j, ref, domain, job) for j, (ref, job) in enumerate(zip(refs, jobs))]

    def update(self, batch: Sequence[Experience]) -> UpdateStats:
        stats: UpdateStats = self._group("update", list(batch))
        if stats.stepped:
            self._stepped()
        return stats

    def sft_update(self, batch: Sequence[SFTExample], lr: float | None = None) -> UpdateStats:
        stats: UpdateStats = self._group("sft_update", list(batch), lr)
        if stats.stepped:
            self._stepped()
        return stats

    def _stepped(self) -> None:
        """After an update that stepped: published now, unless the pipeline publishes (:meth:`sample_apart`)."""
        if self.publishes_updates:
            self._sync()

    @property
    def version(self) -> int:
        """The learner's optimizer-step count (rank 0's)."""
        return int(self._learner("optimizer_steps"))

    def publish(self) -> int:
        """The learner's weights into the rollout workers, if it stepped since they last loaded them; the version."""
        version = self.version
        if version != self.policy_version:
            self._sync()
        return self.policy_version

    def sample_apart(self) -> None:
        """Asynchronous co-training: the rollout workers keep their weights through updates until :meth:`publish`;
        without rollout workers the learner actor samples a copy of its own (its calls run one at a time, so its
        sampling waits for its update: correct, not overlapped). A ValueError saying why when it cannot."""
        if not self.workers:
            try:
                self._learner("sample_apart")
            except RayTaskError as e:
                raise ValueError(last_line(e)) from e
        self.publishes_updates = False

    def save(self, path: str | Path) -> None:
        self._group("save", str(path))

    def save_state(self, path: str | Path) -> None:
        self._group("save_state", str(path))

    def load_state(self, path: str | Path) -> None:
        self._group("load_state", str(path))
        self._sync()

    def trainable_parameters(self) -> list[tuple[str, torch.Tensor]]:
        """``(name, CPU copy)`` of every parameter the learner trains (copies: the parameters live in the actor;
        full tensors when the learner is sharded)."""
        return list(self._group("weights").items())

    def worker_pids(self) -> list[int]:
        """The process id of every rollout worker (a restarted worker has a new one)."""
        return ray.get([w.pid.remote() for w in self.workers])

    def close(self) -> None:
        """Stop this agent's actors (the learner's weights and optimizer state go with it: save first)."""
        for actor in [*self.learners, *self.workers]:
            try:
                ray.kill(actor, no_restart=True)
            except Exception:  # noqa: BLE001 - already gone, or Ray already shut down
                pass
        self.workers = []

    # ------------------------------------------------------------------ internals

    def _learner(self, method: str, *args: Any) -> Any:
        """Call a learner method and wait; a dead learner becomes a :class:`LearnerError` that says what to do."""
        try:
            return ray.get(getattr(self.learner, method).remote(*args))
        except RayActorError as e:
            raise LearnerError(f"the {self.role}'s learner actor died during {method} ({last_line(e)}); its weights "
                               f"and optimizer state went with it: {RESUME_HINT}") from e

    def _group(self, method: str, *args: Any) -> Any:
        """Call a learner method on every rank of the learner group (the arguments put into the object store
        once) and return rank 0's answer; with one learner, :meth:`_learner`.

        Ranks are waited for as they finish, so a rank that dies is noticed at once (the others would wait
        for it in a collective): :class:`LearnerError`. A rank that raises is a LearnerError too; the other
        ranks get ``GROUP_ERROR_GRACE_S`` to finish (they all fail alike on, say, a missing file, and the group
        stays usable), else they are stuck in a collective the failed rank never joins and the group is stopped.
        """
        if len(self.learners) == 1:
            return self._learner(method, *args)
        shared = [ray.put(a) for a in args]
        refs = [getattr(actor, method).remote(*shared) for actor in self.learners]
        pending, done = list(refs), []
        try:
            while pending:
                done, pending = ray.wait(pending, num_returns=1)
                ray.get(done[0])
        except RayActorError as e:
            rank = refs.index(done[0])
            raise LearnerError(f"the {self.role}'s learner actor (rank {rank} of {len(refs)}) died during {method} "
                               f"({last_line(e)}); the group's weights and optimizer state went with it: "
                               f"{RESUME_HINT}") from e
        except RayTaskError as e:
            rank = refs.index(done[0])
            _, stuck = ray.wait(pending, num_returns=len(pending), timeout=GROUP_ERROR_GRACE_S) if pending else ([], [])
            what = f"the {self.role}'s learner rank {rank} of {len(refs)} raised during {method}: {last_line(e)}"
            if stuck:
                self.close()
                raise LearnerError(f"{what}; {len(stuck)} other rank(s) were left waiting in a collective, so the "
                                   f"group was stopped: {RESUME_HINT}") from e
            raise LearnerError(what) from e
        return ray.get(refs[0])

    def _sync(self) -> None:
        """The learner's weights into the object store once, loaded by every worker, under a new version.

        A worker that dies meanwhile is not waited for: it holds an older version, so its next request
        re-sends the weights first (see :meth:`_chunk_result`).
        """
        if not self.workers:  # the learner samples itself: its own sampler gets the weights
            self.policy_version = self._learner("publish")
            return
        [payload] = self._group("export")
        self.publication += 1
        self.policy_version = self.version
        for ref in [w.load.remote(payload, self.publication, self.policy_version) for w in self.workers]:
            try:
                ray.get(ref)
            except RayActorError:
                pass

    def _submit(self, j: int, texts: list[str], params: SamplingParams, seed: int) -> ray.ObjectRef:
        if not self.workers:
            return self.learner.generate_chunk.remote(texts, params, seed, None)
        return self.workers[j % len(self.workers)].generate_chunk.remote(texts, params, seed, self.publication)

    def _submit_job(self, j: int, domain: Domain, job: EpisodeJob) -> ray.ObjectRef:
        if not self.workers:
            return self.learner.run_episode_job.remote(domain, job, None)
        return self.workers[j % len(self.workers)].run_episode_job.remote(domain, job, self.publication)

    def _job_result(self, j: int, ref: ray.ObjectRef, domain: Domain, job: EpisodeJob) -> list[Episode]:
        """Job ``j``'s episodes, retried on a restarted worker like a chunk (:meth:`_chunk_result`)."""
        return self._retrying(j, ref, lambda worker: worker.run_episode_job.remote(domain, job, self.publication),
                              "an episode job")

    def _chunk_result(self, j: int, ref: ray.ObjectRef, texts: list[str], params: SamplingParams,
                      seed: int) -> list[Completion]:
        """Chunk ``j``'s completions; a dead or stale worker gets the current weights and the chunk again."""
        return self._retrying(j, ref, lambda worker: worker.generate_chunk.remote(texts, params, seed, self.publication),
                              "a generate request")

    def _retrying(self, j: int, ref: ray.ObjectRef, resubmit: Callable[[Any], ray.ObjectRef], what: str) -> Any:
        """The result of request ``j`` on worker ``j mod workers``; a dead or stale worker gets the current weights
        and the request again (``resubmit(worker)``), up to ``ray.retries`` times."""
        if not self.workers:
            return self._learner_result(ref)
        index = j % len(self.workers)
        worker = self.workers[index]
        error: Exception | None = None
        attempts = 0
        while True:
            attempts += 1
            try:
                return ray.get(ref)
            except (RayActorError, StaleWeights) as e:
                error = e
            if attempts > self.retries or isinstance(error, ActorDiedError):  # dead for good: no restart left
                break
            self.retried_chunks += 1
            try:
                self._wait_restarted(worker, index)
                [payload] = self._group("export")
                worker.load.remote(payload, self.publication, self.policy_version)  # one caller's calls run in order
                ref = resubmit(worker)
            except RayActorError as e:
                error = e
                break
        raise RolloutError(
            f"the {self.role}'s rollout worker {index} could not sample {what} (part {j}) "
            f"({attempts} attempt(s); last: {type(error).__name__}: {last_line(error)}); Ray restarts a worker at "
            f"most ray.max_restarts times and a chunk is tried ray.retries={self.retries} more times; {RESUME_HINT}")

    def _wait_restarted(self, worker: Any, index: int) -> None:
        """Return once ``worker`` answers again (Ray may still be restarting it); ActorDiedError if it never will."""
        deadline = time.monotonic() + self.restart_timeout_s
        delay = 0.05
        while True:
            try:
                ray.get(worker.pid.remote(), timeout=max(0.001, deadline - time.monotonic()))
                return
            except ActorUnavailableError:
                if time.monotonic() >= deadline:
                    break
                time.sleep(delay)
                delay = min(2 * delay, 1.0)
            except GetTimeoutError:
                break
        raise RolloutError(f"the {self.role}'s rollout worker {index} did not come back within "
                           f"ray.restart_timeout_s={self.restart_timeout_s:g} s of a restart; {RESUME_HINT}")

    def _learner_result(self, ref: ray.ObjectRef) -> Any:
        try:
            return ray.get(ref)
        except RayActorError as e:
            raise LearnerError(f"the {self.role}'s learner actor died while sampling ({last_line(e)}): "
                               f"{RESUME_HINT}") from e


def _driver_seed() -> int:
    import torch

    return int(torch.randint(0, 2**62, (1,)).item())


def last_line(error: BaseException | None) -> str:
    """The last line of an error's message (a Ray error carries the remote traceback above it), for one-line messages."""
    text = str(error).strip().splitlines()
    return text[-1] if text else type(error).__name__


# --------------------------------------------------------------------------- building a run's agents


def ensure_ray(settings: RaySettings) -> None:
    """Join the configured cluster, or start a local Ray instance, unless Ray is already initialised here;
    then check that the cluster has what every actor asks for (a clear error instead of a hang)."""
    if not ray.is_initialized():
        address = settings.address or os.environ.get("RAY_ADDRESS")
        if address:
            ray.init(address=address)
        else:
            ray.init(num_cpus=local_cpus(settings, os.cpu_count() or 1), include_dashboard=False)
    short = resource_shortfall(settings.requested(), ray.cluster_resources())
    if short:
        raise RayBackendError("the Ray cluster cannot place the run's actors: " + "; ".join(short)
                              + ". Lower ray.<agent>.learner / ray.<agent>.worker num_cpus or num_gpus (fractions "
                              "pack several actors), use fewer ray.<agent>.rollout_workers, or give Ray more "
                              "(ray.num_cpus for a local instance; ray start --num-cpus/--num-gpus/--resources)")


def build_ray_policies(cfg: RunConfig, dirs: tuple[str | None, str | None]) -> tuple[RayPolicy, RayPolicy]:
    """(synthesizer, reasoner) on Ray, from the config's models or the checkpoint folders in ``dirs``.

    Both agents' actors start at once; each is built from ``agent_seed(cfg.seed, role)`` with the driver's
    torch thread count. Optimizer states are loaded by the caller (``load_state``), as in process.
    """
    import torch

    from synco.learn.build import resolve_model_path

    problems = [sharding_problem(role, getattr(cfg, role), getattr(cfg.ray, role).learners) for role in ROLES]
    if any(problems):  # before any actor starts
        raise RayBackendError("; ".join(p for p in problems if p))
    ensure_ray(cfg.ray)
    threads = torch.get_num_threads()
    agents: list[RayPolicy] = []
    try:
        for role, folder in zip(ROLES, dirs):
            pcfg: PolicyConfig = getattr(cfg, role)
            path = folder or resolve_model_path(pcfg.model_path)
            agents.append(RayPolicy(role, pcfg, path, cfg.ray, agent_seed(cfg.seed, role), threads))
        for agent in agents:
            agent.wait_ready()
    except BaseException:
        for agent in agents:
            agent.close()
        raise
    return agents[0], agents[1]
