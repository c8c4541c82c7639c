"""What a run is built from its config: the domain, the two agents (and the consensus checker), the verifier and
the step's settings."""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path
from typing import Any, Callable, cast

from synco.config import ConfigError, RunConfig, domain_context
from synco.cotrain.settings import StepSettings
from synco.core.records import payload_type
from synco.domains.base import Domain, answer_form
from synco.domains.registry import get_domain
from synco.grading.checker import AnswerChecker
from synco.grading.verifier import TaskVerifier
from synco.learn.build import build_policy, resolve_model_path
from synco.learn.hf_policy import HFPolicy, SnapshotSampler
from synco.core.policy import Learner, Policy


def build_domain(cfg: RunConfig) -> Domain:
    """The run's domain, looked up by name in the registry (built-ins and the ``synco.domains`` entry points)."""
    return get_domain(cfg.domain, domain_context(cfg))


STEP_SETTINGS_FROM: dict[str, Callable[[RunConfig], Any]] = {
    "synth_sampling": lambda cfg: cfg.synthesizer.sampling,
    "reasoner_sampling": lambda cfg: cfg.reasoner.sampling,
    "synth_scale_by_std": lambda cfg: cfg.synthesizer.grpo.scale_adv_by_std,
    "reasoner_scale_by_std": lambda cfg: cfg.reasoner.grpo.scale_adv_by_std,
    "checker_sampling": lambda cfg: (cfg.checker or cfg.reasoner).sampling,
    "window": lambda cfg: cfg.report.window,
    "episode_group_size": lambda cfg: cfg.reasoner.generation_batch_size,
    "mode": lambda cfg: cfg.run_mode,  # the protocol's (rft: static); cfg.mode stays as configured
}
"""The ``StepSettings`` fields that live elsewhere in the config; every other field is the ``RunConfig`` field of
the same name."""


def step_settings(cfg: RunConfig) -> StepSettings:
    """The per-step knobs of ``cotrain_step``, derived from the run config (the one place that maps the two).

    Each field is read by name from ``RunConfig`` unless :data:`STEP_SETTINGS_FROM` says where it lives, so a new
    ``StepSettings`` field with a config field of its name needs no edit here (and one without fails loudly).
    What a protocol changes per step is not here: it is the protocol's ``StepPlan``.
    """
    return StepSettings(**{f.name: STEP_SETTINGS_FROM[f.name](cfg) if f.name in STEP_SETTINGS_FROM
                           else getattr(cfg, f.name) for f in fields(StepSettings)})


def build_consensus_checker(cfg: RunConfig, domain: Domain, reasoner: Policy | None = None) -> HFPolicy | None:
    """The frozen consensus checker when ``consensus_solver=checker`` applies (no oracle, consensus on), else None.

    ``cfg.checker`` (default: the reasoner's settings and initial model) with ``trainable`` forced off;
    its sampling parameters are the checker's ``sampling``. Under ``shared_base`` without a ``checker``
    section and with fresh adapters, the initial Reasoner is the shared base itself: the checker is a
    view of it with adapters disabled (no second copy in memory).
    """
    if cfg.consensus_solver != "checker" or not cfg.consensus or domain.has_oracle:
        return None
    fresh = cfg.reasoner.lora is None or cfg.reasoner.lora.adapter_path is None
    from synco.learn.shared_base import AdapterPolicy, BaseView

    if cfg.checker is None and cfg.shared_base and fresh and isinstance(reasoner, AdapterPolicy):
        return BaseView(reasoner.shared, cfg.reasoner)
    base = cfg.checker if cfg.checker is not None else cfg.reasoner.model_copy(update={"lora": None})
    return build_policy(base.model_copy(update={"trainable": False}), role="checker", frozen=True)


def build_policies(cfg: RunConfig, ckpt: Path | None = None) -> tuple[Policy, Policy]:
    """(synthesizer, reasoner): two HFPolicy, two adapter views of one shared base when ``cfg.shared_base``,
    or two Ray agents (``synco.distributed.ray_backend.RayPolicy``) when ``cfg.backend == "ray"``.

    With ``ckpt`` the weights (or adapters) come from ``ckpt/{synthesizer,reasoner}``;
    optimizer states are loaded by the caller. Under ``seed_per_request`` each agent is built from its own
    seed (``agent_seed``; e.g. its fresh LoRA adapters), as a Ray actor builds it.
    """
    dirs = (None, None) if ckpt is None else (str(ckpt / "synthesizer"), str(ckpt / "reasoner"))
    if cfg.backend == "ray":
        from synco.distributed.ray_backend import build_ray_policies

        return build_ray_policies(cfg, dirs)
    if cfg.seed_per_request and not cfg.shared_base:
        from synco.core.seeds import agent_seed
        from synco.learn.hf_policy import seeded_rng

        built = []
        for role, folder in zip(("synthesizer", "reasoner"), dirs):
            with seeded_rng(agent_seed(cfg.seed, role)):
                built.append(build_policy(getattr(cfg, role), folder, role, cfg.frozen(role)))
        return built[0], built[1]
    if cfg.shared_base:
        from synco.learn.shared_base import SharedBase

        shared = SharedBase.from_configs(cfg.synthesizer, cfg.reasoner,
                                         model_path=resolve_model_path(cfg.synthesizer.model_path), adapter_dirs=dirs)
        return shared.synthesizer, shared.reasoner
    return (build_policy(cfg.synthesizer, dirs[0], "synthesizer", cfg.frozen("synthesizer")),
            build_policy(cfg.reasoner, dirs[1], "reasoner", cfg.frozen("reasoner")))


def build_agents(cfg: RunConfig, domain: Domain, ckpt: Path | None = None) -> tuple[Policy, Policy]:
    """The two agents ready to train: built (from ``ckpt`` when resuming), the Synthesizer's decoding constrained
    to the card format under ``synth_decoding=card``, and their optimizer states loaded from ``ckpt``."""
    synthesizer, reasoner = build_policies(cfg, ckpt)
    if cfg.synth_decoding == "card":
        from synco.rollout.card_decoding import constrain_synthesizer

        constrain_synthesizer(synthesizer, domain, cfg.synthesizer.sampling.max_new_tokens)
    if ckpt is not None:
        synthesizer.load_state(ckpt / "synthesizer_state")
        reasoner.load_state(ckpt / "reasoner_state")
    return synthesizer, reasoner


def trained_learners(cfg: RunConfig, synthesizer: Policy, reasoner: Policy) -> list[tuple[str, Learner]]:
    """``(role, learner)`` of every agent this run trains (a frozen one never publishes: its weights never change)."""
    return [(role, cast(Learner, policy)) for role, policy in (("synthesizer", synthesizer), ("reasoner", reasoner))
            if not cfg.frozen(role)]


def detach_samplers(cfg: RunConfig, synthesizer: Policy, reasoner: Policy) -> None:
    """``max_staleness`` >= 1: every trained agent samples from weights apart from its learner's, changed only at a
    publish (:meth:`~synco.core.policy.Learner.sample_apart`); its update corrects for the lag (``grpo.decoupled``,
    set by the config). A ConfigError naming the agent when one cannot."""
    for role, learner in trained_learners(cfg, synthesizer, reasoner):
        try:
            learner.sample_apart()
            if cfg.async_placement == "process":
                place_in_process(learner)
        except ValueError as e:
            raise ConfigError(f"max_staleness={cfg.max_staleness}: the {role} cannot sample beside its update: "
                              f"{e}") from e


def place_in_process(learner: object) -> None:
    """``async_placement: process``: a transformers snapshot (:class:`~synco.learn.hf_policy.SnapshotSampler`) moves
    into a child process of its own (:class:`~synco.learn.process_sampler.ProcessSampler`); an engine with weights
    of its own (vLLM, a server, Ray's rollout workers) already samples apart from the learner's thread."""
    from synco.learn.process_sampler import ProcessSampler

    if isinstance(learner, HFPolicy) and isinstance(learner.generator, SnapshotSampler):
        learner.generator = ProcessSampler(learner.generator)


def placed_samplers(synthesizer: Policy, reasoner: Policy) -> dict[str, Any]:
    """The agents' samplers placed in processes of their own (``async_placement: process``), by role: their random
    streams are the run's too, so a checkpoint keeps them (:func:`sampler_rng_states`)."""
    from synco.learn.process_sampler import ProcessSampler

    return {role: p.generator for role, p in (("synthesizer", synthesizer), ("reasoner", reasoner))
            if isinstance(p, HFPolicy) and isinstance(p.generator, ProcessSampler)}


def sampler_rng_states(synthesizer: Policy, reasoner: Policy) -> dict[str, Any]:
    """Each placed sampler's random state, by role (empty under the thread placement)."""
    return {role: s.random_state() for role, s in placed_samplers(synthesizer, reasoner).items()}


def set_sampler_rng_states(synthesizer: Policy, reasoner: Policy, states: dict[str, Any] | None) -> None:
    """Continue each placed sampler's random stream from a checkpoint's :func:`sampler_rng_states`."""
    for role, sampler in placed_samplers(synthesizer, reasoner).items():
        if states and role in states:
            sampler.set_random_state(states[role])


def build_verifier(cfg: RunConfig, domain: Domain, checker: AnswerChecker) -> tuple[AnswerChecker, TaskVerifier]:
    """(answer checker, task verifier): in process, or as Ray tasks when ``backend=ray`` with check workers
    (then the checker returned is the Ray one)."""
    if cfg.backend == "ray" and cfg.ray.checks.workers:  # answer checks and per-card verification as Ray tasks
        from synco.distributed.ray_checks import build_ray_checks

        return build_ray_checks(cfg.ray, cfg.verifier, domain.oracle if domain.has_oracle else None, checker,
                                answer_form(domain) if domain.has_oracle else None)
    return checker, local_verifier(cfg, domain, checker)


def local_verifier(cfg: RunConfig, domain: Domain, checker: AnswerChecker) -> TaskVerifier:
    """The in-process task verifier of a run: the config's settings, the domain's oracle when it has one.

    Ray's check workers give the same verdicts (``synco.distributed.ray_checks``), so ``synco verify`` uses
    this one whatever the backend."""
    return TaskVerifier(cfg.verifier, checker=checker, oracle=domain.oracle if domain.has_oracle else None,
                        answer_form=answer_form(domain) if domain.has_oracle else None,
                        payload_type=payload_type(domain))
