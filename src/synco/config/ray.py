"""The ``ray`` section of a run config (``backend: ray``): where each agent's actors and the check workers run, and how
failures are handled.

Torch-free and Ray-free, so configs load and validate without either. The backend
itself is :mod:`synco.distributed.ray_backend`.
"""

from __future__ import annotations

import math

from pydantic import BaseModel, ConfigDict, Field, model_validator


class RayResources(BaseModel):
    """What one actor asks Ray for; Ray places it on a node that has all of it."""

    model_config = ConfigDict(extra="forbid")

    num_cpus: float = Field(1.0, ge=0, description="Logical CPUs the actor reserves (fractions allowed, e.g. 0.5 to pack several actors on a small machine).")
    num_gpus: float = Field(0.0, ge=0, description="GPUs the actor reserves (fractions share one GPU, e.g. 0.5 for a learner and a rollout worker on the same card). Above 0 the actor's model goes on its GPU (the agent's `device` is then 'cuda'); 0 keeps it on the CPU.")
    resources: dict[str, float] = Field(default_factory=dict, description="Custom Ray resources, e.g. {synthesizer_node: 1} with `ray start --resources='{\"synthesizer_node\": 1}'` on the synthesizer's node: the paper's one node per agent.")
    label_selector: dict[str, str] = Field(default_factory=dict, description="Ray node labels the actor's node must carry, e.g. {agent: synthesizer} with `ray start --labels='{\"agent\": \"synthesizer\"}'` (Ray's label_selector; needs a Ray with node labels).")


class RayAgentSettings(BaseModel):
    """One agent under Ray: its learner actor and its rollout workers."""

    model_config = ConfigDict(extra="forbid")

    learner: RayResources = Field(default_factory=RayResources, description="Resources of each learner actor (the HFPolicy that trains: weights, optimizer, updates, checkpoints).")
    learners: int = Field(1, ge=1, description="Learner actors of this agent, each with the learner resources above (e.g. 1 GPU each). Above 1 they are one actor group: ranks 0..N-1 in a torch.distributed process group (nccl when the learner is on a GPU, else gloo) that shards the model and optimizer state with FSDP2; every rank gets the whole batch and trains on its share, so the update equals one learner's (to float rounding). Needs rollout_workers >= 1, full fine-tuning and grpo.kl_coef = 0. Checkpoints and the weights sent to rollout workers are the full tensors, as with one learner.")
    rollout_workers: int = Field(1, ge=0, description="Rollout-worker actors, each holding a copy of the model and sampling its share of every generate request (in chunks of generation_batch_size rows); after every update they load the learner's weights (only the LoRA adapters under LoRA). 0: the learner samples itself.")
    worker: RayResources = Field(default_factory=RayResources, description="Resources of each rollout worker.")

    @model_validator(mode="after")
    def _sharded_learner_cannot_sample(self) -> "RayAgentSettings":
        if self.learners > 1 and self.rollout_workers == 0:
            raise ValueError(f"learners={self.learners} shards the model over the learner actors, which then cannot "
                             "sample: set rollout_workers >= 1 (or learners=1)")
        return self


class RayCheckSettings(BaseModel):
    """Answer checking and card verification as Ray work: a pool of check-worker actors."""

    model_config = ConfigDict(extra="forbid")

    workers: int = Field(2, ge=0, description="Check-worker actors, each holding one AnswerChecker (its math-verify process started once) and the verifier's per-card checks; a step's answer checks and the per-card phase of verification are cut into chunks spread over them. 0: both stay in the driver, as with backend=inprocess.")
    worker: RayResources = Field(default_factory=lambda: RayResources(num_cpus=0.5), description="Resources of each check worker (checking is light: half a logical CPU by default).")
    answers_per_task: int = Field(64, ge=1, description="Answer checks (attempt answer vs reference) per Ray task; a step's checks are sent as ceil(n / answers_per_task) tasks.")
    cards_per_task: int = Field(4, ge=1, description="Raw cards per verification task (parse, schema, problem, answer consistency, oracle); novelty and contamination then run in the driver in slot order.")
    task_timeout_s: float = Field(120.0, gt=0, description="Extra seconds a check task may take beyond its checks' own bounds (the checker's timeout per answer, verifier.card_timeout per card, the checker's start-up) before the driver gives up on it and checks that chunk itself.")


class RaySettings(BaseModel):
    """The Ray backend: cluster, per-agent placement, restarts and retries."""

    model_config = ConfigDict(extra="forbid")

    address: str | None = Field(None, description="Ray cluster to join (e.g. 'auto' or ray://host:10001); None: $RAY_ADDRESS when set, else start a local Ray instance. Ignored when Ray is already initialised in this process.")
    num_cpus: float | None = Field(None, gt=0, description="Logical CPUs of a local Ray instance started by the run; None: the machine's CPU count, raised to what the actors ask for (logical CPUs only schedule; threads are set by `threads`).")
    max_restarts: int = Field(3, ge=0, description="How often Ray restarts a rollout worker that died (its model is rebuilt and the learner's current weights re-sent before it samples again). Learners are never restarted: their optimizer state would be lost, so the run stops and resumes from its last checkpoint.")
    retries: int = Field(2, ge=0, description="How often a chunk of a generate request is tried again after its rollout worker died or held stale weights (same seed, so the result is the same); past that the step fails with a message naming the worker, and nothing of the step is recorded.")
    restart_timeout_s: float = Field(600.0, gt=0, description="How long a step waits for Ray to restart a rollout worker (rebuilding its model) before it fails.")
    synthesizer: RayAgentSettings = Field(default_factory=RayAgentSettings, description="The Synthesizer's learner and rollout workers.")
    reasoner: RayAgentSettings = Field(default_factory=RayAgentSettings, description="The Reasoner's learner and rollout workers.")
    checks: RayCheckSettings = Field(default_factory=RayCheckSettings, description="Answer checking and the per-card phase of verification as Ray tasks on check-worker actors (workers: 0 keeps them in the driver).")

    def requested(self) -> dict[str, float]:
        """Total resources every actor asks for (both agents' learners, each of a group, and rollout workers, the check workers):
        CPU, GPU and each custom resource."""
        total: dict[str, float] = {}
        actors = [self.checks.worker] * self.checks.workers
        for agent in (self.synthesizer, self.reasoner):
            actors += [agent.learner] * agent.learners + [agent.worker] * agent.rollout_workers
        for res in actors:
            for name, amount in (("CPU", res.num_cpus), ("GPU", res.num_gpus), *res.resources.items()):
                total[name] = total.get(name, 0.0) + amount
        return {k: v for k, v in total.items() if v > 0}


def resource_shortfall(requested: dict[str, float], available: dict[str, float]) -> list[str]:
    """One line per resource the actors ask for beyond what the Ray cluster has in all (empty: it fits).

    Checked before any actor starts: an actor Ray cannot place would otherwise wait forever.
    """
    lines = []
    for name, amount in sorted(requested.items()):
        have = float(available.get(name, 0.0))
        if amount > have + 1e-9:
            lines.append(f"{name}: the actors ask for {amount:g}, the Ray cluster has {have:g}")
    return lines


def local_cpus(settings: RaySettings, machine_cpus: int) -> float:
    """Logical CPUs for a local Ray instance: ``ray.num_cpus`` when set, else the machine's count raised to
    what the actors ask for (rounded up)."""
    if settings.num_cpus is not None:
        return settings.num_cpus
    return float(max(machine_cpus, math.ceil(settings.requested().get("CPU", 0.0))))
