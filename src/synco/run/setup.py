"""Setting a run up: its directory and pool, the models, the verifier and the state the step works on,
restored from the latest checkpoint when resuming.

Run directory::

    runs/<run_id>/config.yaml        resolved config
                  pool.sqlite        every card, verdict, attempt and reward
                  valid_tasks.jsonl  the synthesized dataset: one JSON object per valid task, appended as
                                     each step is recorded (a killed run keeps it; resuming rewrites it
                                     from the pool); columns ``synco.core.pool.EXPORT_COLUMNS``: task_id, step,
                                     the nine card fields with final_answer = the VERIFIED reference (the
                                     answer the Reasoner was graded against), synthesizer_answer (the
                                     card's own claim), answer_corrected (the oracle replaced it), factors,
                                     success_rate, quality, reliability
                  metrics.jsonl      one line per step
                  alerts.jsonl       one line per health alert (synco.cotrain.health.Alert: step, check, value,
                                     threshold, action, message)
                  reports/step_N.txt every capability report as rendered
                  checkpoints/step_N/{synthesizer,reasoner}/  HF format (the adapter only under LoRA)
                  checkpoints/step_N/trainer_state.pt          step, RNG states, report
                  checkpoints/damaged-step_N/  a checkpoint found truncated on resume, set aside
                  summary.json       before/after held-out accuracy and run statistics
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Callable

from synco.config import ConfigError, RunConfig, check_runnable
from synco.core.pool import TaskPool
from synco.core.report import build_report
from synco.core.rewards import EFFECT_TERMS
from synco.cotrain.engine import CoTrainState
from synco.cotrain.pipeline import Pipeline
from synco.cotrain.protocols.base import TrainingProtocol
from synco.cotrain.protocols.registry import build_protocol
from synco.domains.base import Domain, HasTrajectories, export_fields
from synco.domains.spec import LoadsModels, ServesEndpoints
from synco.core.served import ServedSettings
from synco.evosyn.space import HasFactorSpace
from synco.evosyn.run import build_evo_state, check_factor_names, read_effects, write_space
from synco.evosyn.trajectory import DistinctSequences
from synco.grading.checker import AnswerChecker
from synco.run.build import (build_agents, build_consensus_checker, build_domain, build_verifier, detach_samplers,
                             set_sampler_rng_states, step_settings, trained_learners)
from synco.run.resume import ResumePoint, load_trainer_state, restart_records, restore_records
from synco.run.rng import seed_everything, set_rng_state
from synco.run.files import write_atomic
from synco.run.rundir import open_pool, open_run_dir
from synco.run.state import Run
from synco.run.stopping import RunError


def heldout_seed(seed: int) -> int:
    """The seed a run of seed ``seed`` draws its held-out problems with (offset from the training streams)."""
    return seed + 12345


def setup_run(cfg: RunConfig, resume: Path | None = None, log: Callable[[str], None] = print) -> Run:
    """Create (or reopen, for ``resume``) the run directory and everything the loop needs.

    Resuming continues after the latest intact checkpoint, or restarts from step 0 when
    there is none; either way what the run recorded after that point is dropped (``rewind_run``).
    The order is part of the run's numbers: seeding, then the domain and held-out set, the models,
    the verifier, the restored RNG states, and last the consensus checker.
    """
    from synco.core.threads import apply_threads

    check_runnable(cfg)  # inputs on disk (benchmark files) before anything is created or loaded
    if resume is None:
        check_endpoints(cfg)  # a wrong base_url or model fails in seconds, before any model loads
        check_models(cfg)  # before the run directory exists
    log(apply_threads(cfg.threads).describe())
    run_dir, ckpt = open_run_dir(cfg, resume, log)
    write_atomic(run_dir / "roles.json", json.dumps(played_by(cfg), indent=1))  # who plays each role (no key)
    if resume is not None:
        check_endpoints(cfg)
        check_models(cfg, from_checkpoint=ckpt is not None)
    pool = open_pool(run_dir / "pool.sqlite", check=resume is not None)  # before the models: a bad pool fails fast

    protocol = build_protocol(cfg)  # once: the loop, the pipeline, the hooks and the checkpoints take this object
    seed_everything(cfg.seed)
    rng = random.Random(cfg.seed)
    domain = build_domain(cfg)
    try:  # before any model loads
        check_factor_names(domain, cfg.evosyn.factors)
        check_effect_feedback(domain, cfg)
    except ValueError as e:
        raise ConfigError(str(e)) from None
    checker = AnswerChecker()
    heldout = domain.heldout(cfg.heldout_per_group, seed=heldout_seed(cfg.seed)) if cfg.heldout_per_group else []
    trainer_state = load_trainer_state(cfg, ckpt, log)
    synthesizer, reasoner = build_agents(cfg, domain, ckpt)
    if cfg.max_staleness:
        detach_samplers(cfg, synthesizer, reasoner)
    checker, verifier = build_verifier(cfg, domain, checker)

    point = ResumePoint(start_step=0, report=build_report([], cfg.report, step=0))
    if ckpt is not None:
        point = restore_records(protocol, run_dir, ckpt, trainer_state, pool, log)
        verifier.load_pool(pool.valid_problems())
        set_rng_state(trainer_state["rng"], rng)
        set_sampler_rng_states(synthesizer, reasoner, trainer_state.get("samplers"))
    elif resume is not None:
        restart_records(run_dir, pool, log)
    pool.export_jsonl(run_dir / "valid_tasks.jsonl", export_fields(domain))  # from the pool as it now stands; each step then appends its rows

    evo = build_evo_state(domain, point.space, cfg.evosyn.factors)
    if evo is not None:
        write_space(evo, run_dir)
        evo.effects = read_effects(run_dir, RunError)  # a resumed run's transitions (rewound with its other logs)
    # static: the paper's fixed corpus, drawn once (from its own seeded stream) and revisited every step
    settings = step_settings(cfg)  # its mode: the protocol's (rft: static)
    corpus = (domain.static_cards(random.Random(f"static-corpus:{cfg.seed}"), cfg.static_corpus_size)
              if settings.revisits_corpus else None)
    state = CoTrainState(settings=settings, domain=domain, synthesizer=synthesizer, reasoner=reasoner,
                         verifier=verifier, checker=checker, pool=pool, report=point.report, rng=rng,
                         consensus_checker=build_consensus_checker(cfg, domain, reasoner), evo=evo, corpus=corpus,
                         sequences=run_sequences(domain, pool))
    return Run(cfg=cfg, dir=run_dir, state=state, start_step=point.start_step, heldout=heldout, protocol=protocol,
               pipeline=(build_pipeline(cfg, state, protocol, trainer_state.get("pipeline")) if cfg.max_staleness
                         else None))


def build_pipeline(cfg: RunConfig, state: CoTrainState, protocol: TrainingProtocol, saved: dict | None) -> Pipeline:
    """The asynchronous step loop of a ``max_staleness`` >= 1 run, continuing a checkpoint's collected steps.

    A checkpoint whose collected steps were made at another staleness is refused: they are not in the pool, and
    another schedule would collect other steps with the run's random stream."""
    if saved is not None and saved["pending"] and saved["max_staleness"] != cfg.max_staleness:
        raise RunError(f"max_staleness={cfg.max_staleness}: the checkpoint holds {len(saved['pending'])} steps "
                       f"collected at max_staleness={saved['max_staleness']}; resume with that setting")
    learners = [learner for _, learner in trained_learners(cfg, state.synthesizer, state.reasoner)]
    pipeline = Pipeline(state, cfg.max_staleness, cfg.steps, protocol, learners=learners)
    if saved is not None:
        pipeline.restore(saved)
    return pipeline


def check_effect_feedback(domain: object, cfg: RunConfig) -> None:
    """Learning-effect feedback is measured per factor cell: a domain without a factor space cannot give it."""
    if isinstance(domain, HasFactorSpace):
        return
    if cfg.synth_rewards.learnability in EFFECT_TERMS:
        raise ValueError(f"synth_rewards.learnability={cfg.synth_rewards.learnability} needs a domain with a factor space (its cells' "
                         f"learning effect); domain {cfg.domain!r} has none: use teachability or gap")
    if cfg.evosyn.designer and cfg.evosyn.designer_settings.effect:
        raise ValueError(f"evosyn.designer_settings.effect=true needs a domain with a factor space; domain "
                         f"{cfg.domain!r} has none")


def configured_models(cfg: RunConfig, from_checkpoint: bool = False) -> dict[str, str]:
    """The config fields naming a model the run loads from its config, with their values.

    Both agents; a resumed run with a checkpoint loads them from it, except a LoRA agent's base (and the shared
    base). The consensus checker's model when ``consensus_solver=checker`` (the Reasoner's own without a
    ``checker`` section); the models the domain's own settings name (:class:`~synco.domains.spec.LoadsModels`: τ²'s
    simulated user when the run may need one).
    """
    models: dict[str, str] = {}
    for role in ("synthesizer", "reasoner"):
        policy = getattr(cfg, role)
        if not cfg.loads_weights(role):  # a frozen role on a served chat endpoint
            continue
        if not from_checkpoint or policy.lora is not None or (cfg.shared_base and role == "synthesizer"):
            models[f"{role}.model_path"] = policy.model_path
    if cfg.consensus and cfg.consensus_solver == "checker":
        if cfg.checker is not None:
            if cfg.loads_weights("checker"):
                models["checker.model_path"] = cfg.checker.model_path
        else:
            models["reasoner.model_path"] = cfg.reasoner.model_path
    settings = cfg.domain_settings()
    if isinstance(settings, LoadsModels):  # e.g. τ²'s simulated user
        models.update(settings.models(cfg.domain))
    return models


def played_by(cfg: RunConfig) -> dict[str, dict[str, str]]:
    """Which engine, endpoint and model play each role of the run (``roles.json``): a local model's path, or a served
    endpoint's URL and model name (never its key)."""
    out: dict[str, dict[str, str]] = {}
    roles = ["synthesizer", "reasoner"] + (["checker"] if cfg.consensus and cfg.consensus_solver == "checker" else [])
    for role in roles:
        p = getattr(cfg, role) or cfg.reasoner
        entry = {"engine": p.rollout_engine}
        if cfg.loads_weights(role) or getattr(cfg, role) is None:
            entry["model_path"] = p.model_path
        if p.rollout_engine == "served" and p.served is not None:
            entry.update(base_url=p.served.base_url, model=p.served.model, endpoint=p.served.endpoint)
        out[role] = entry
    for section, served in configured_endpoints(cfg).items():
        if not section.startswith(tuple(roles)):  # a domain's own (τ²'s user)
            out[section.rsplit(".", 1)[0] + ".user"] = {"engine": "served", "base_url": served.base_url,
                                                        "model": served.model, "endpoint": served.endpoint}
    return out


def configured_endpoints(cfg: RunConfig) -> dict[str, ServedSettings]:
    """The served endpoints the run samples from, by config section (``reasoner.served``, ``tau2.served``, ...)."""
    out = {f"{role}.served": p.served for role in ("synthesizer", "reasoner", "checker")
           if (p := getattr(cfg, role)) is not None and p.rollout_engine == "served" and p.served is not None}
    if not (cfg.consensus and cfg.consensus_solver == "checker"):
        out.pop("checker.served", None)
    settings = cfg.domain_settings()
    if isinstance(settings, ServesEndpoints):  # e.g. τ²'s served user
        out.update(settings.endpoints(cfg.domain))
    return out


def check_endpoints(cfg: RunConfig) -> None:
    """Refuse a wrong ``base_url`` or ``model`` of every served endpoint within seconds (``/v1/models``), before any
    model loads: one ConfigError naming each field. The endpoints are checked at once, so silent hosts cost one
    check's deadline, not one per endpoint."""
    from concurrent.futures import ThreadPoolExecutor

    from synco.core.served import ServedClient, ServedError

    def problem(item: tuple[str, ServedSettings]) -> str | None:
        try:
            ServedClient(item[1], item[0]).check()
        except ServedError as err:
            return str(err)
        return None

    endpoints = list(configured_endpoints(cfg).items())
    if not endpoints:
        return
    with ThreadPoolExecutor(max_workers=len(endpoints)) as pool:
        problems = [p for p in pool.map(problem, endpoints) if p]
    if problems:
        raise ConfigError("cannot reach the run's served models:\n" + "\n".join(f"  {p}" for p in problems))


def check_models(cfg: RunConfig, from_checkpoint: bool = False) -> None:
    """Raise ConfigError, one line per field, when a model the run would load cannot be loaded here (a missing
    folder, a hub id with the hub unreachable, ...: ``synco.learn.models.model_problem``), before any is loaded."""
    from synco.learn.models import model_problem

    looked_up: dict[str, str | None] = {}
    problems = []
    for name, path in configured_models(cfg, from_checkpoint).items():
        if path not in looked_up:
            looked_up[path] = model_problem(path)
        if looked_up[path]:
            problems.append(f"{name}={path!r}: {looked_up[path]}")
    if problems:
        raise ConfigError("cannot load the run's models:\n" + "\n".join(f"  {p}" for p in problems))


def run_sequences(domain: Domain, pool: TaskPool) -> DistinctSequences | None:
    """The distinct gold action sequences of the pool's valid tasks (a resumed run goes on counting where it
    stopped); None for a domain whose solutions are no trajectories."""
    if not isinstance(domain, HasTrajectories):
        return None
    gold = []
    for rec in pool.by_validity(True):
        if rec.card is not None:
            try:
                gold.append(domain.gold_actions(rec.card))
            except ValueError:
                continue
    return DistinctSequences([tuple(c.name for c in g) for g in gold])
