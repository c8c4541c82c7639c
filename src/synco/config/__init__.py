"""Run configuration: typed, documented, loaded from a preset or YAML plus dotted overrides.

    synco train --config my.yaml reasoner.grpo.lr=3e-5 steps=50

Every field has a description, so ``synco config --help``-style listings and the
README's reference are generated from the models themselves. A bad value gives
a ``ConfigError`` naming the dotted field and the value.
"""

from __future__ import annotations

import math
import re
import typing
from functools import partial
from importlib import resources
from pathlib import Path
from typing import Any, Iterable, Literal, Sequence

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from pydantic_core import InitErrorDetails, PydanticCustomError

from synco.config.ray import RaySettings
from synco.evosyn.config import EvoSynConfig, proposer_problem
from synco.cotrain.health import HealthConfig
from synco.core.episodes import MAX_EPISODE_TOKENS, MAX_TURNS, USER_MAX_NEW_TOKENS
from synco.core.policy import PolicyConfig
from synco.core.text import yaml_problem
from synco.domains.base import HasCardTemplate, HasEnvironment, HasGoldTurns
from synco.domains.builtins import DEFAULT_DOMAIN
from synco.domains.registry import (BUILTIN_MODEL_PREFIX, available_domains, builtin_model, builtin_models,
                                    config_defaults, get_domain, settings_model, unknown_domain_message)
from synco.domains.spec import DomainContext, DomainError
from synco.cotrain.protocols.config import AlternatingConfig, RoundsConfig, legacy_rounds
from synco.cotrain.protocols.registry import build_protocol, protocol_names, unknown_protocol_message
from synco.cotrain.settings import MODE_TRAITS
from synco.core.report import ReportConfig
from synco.core.served import could_be_secret
from synco.core.rewards import ReasonerRewardConfig, SynthesizerRewardConfig
from synco.core.threads import ThreadsSetting
from synco.grading.verifier import VerifierConfig

PRESETS = tuple(sorted(f.name[: -len(".yaml")] for f in (resources.files("synco") / "presets").iterdir()
                       if f.name.endswith(".yaml")))
"""The built-in presets: the YAML files shipped in ``synco/presets``."""

DEFAULT_PRESET = DEFAULT_DOMAIN
"""The preset of a command that names none: the default domain's (``presets/<domain>.yaml``)."""


class ConfigError(ValueError):
    """A configuration value or key is wrong; the message names the dotted field."""


class RunConfig(BaseModel):
    """Everything one co-training run needs. Defaults are the default domain's (the embedded arithmetic world).

    Besides these fields, a config holds domains' own settings sections: a key that names a registered domain with a
    settings model (``synco.domains.spec.DomainSpec``) is validated by that model (errors name ``<domain>.<key>``)
    and kept as an instance of it (:meth:`domain_settings`); the run's domain gets its model's defaults when its
    section is missing. A section of another registered domain is accepted and validated (a run's ``config.yaml`` may
    carry one), any other key refused.
    """

    model_config = ConfigDict(extra="allow")  # only domains' settings sections: checked by _domain_sections

    domain: str = Field(DEFAULT_DOMAIN, description="Task domain, a name in the domain registry (synco.domains.registry.available_domains(): the built-in worlds, and domains registered in code or by an installed package's 'synco.domains' entry point, docs/ADDING_A_DOMAIN.md). A domain with a settings model reads its own section, named after it.")
    mode: Literal["cotrain", "frozen", "static", "uniform", "designer"] = Field(
        "cotrain", description="cotrain: update both agents; frozen: Synthesizer fixed; static: a fixed, finite corpus from the domain's generator (static_corpus_size cards, drawn once, revisited); uniform: fresh cards from the domain's generator every step (an oracle of the evaluation distribution that no real domain has); designer: the Designer alone -- its cells, cards drawn uniformly within them by the domain's generator, no Synthesizer (needs evosyn.designer and a domain with HasCellCards, e.g. rgym).")
    protocol: str = Field(
        "online", description="Training protocol, a name in the protocol registry (synco.cotrain.protocols.registry): online (co-training, every step updates as mode says), rounds (EvoSyn: synthesis rounds, then the Reasoner is fine-tuned on the verified data; see rounds), alternating (only one agent learns per phase; see alternating), rft (rejection-sampling fine-tuning on the fixed corpus: it runs mode=static; see rounds), and protocols registered in code.")
    rounds: RoundsConfig = Field(default_factory=RoundsConfig, description="protocol=rounds / rft: steps per round, SFT or GRPO at the round's end, accumulated data.")
    alternating: AlternatingConfig = Field(default_factory=AlternatingConfig, description="protocol=alternating: phase length and the first learner.")
    static_corpus_size: int = Field(2048, ge=1, description="mode=static: cards in the fixed corpus, drawn once from the domain's generator with the run seed and revisited.")
    seed: int = Field(0, description="Seed for every random generator (Python, NumPy, torch).")
    steps: int = Field(300, ge=0, description="Number of co-training steps.")
    n_cards: int = Field(32, ge=1, description="Task cards sampled per step (the paper's 32 slots).")
    n_contexts: int = Field(1, ge=1, description="Synthesizer contexts per step; each context's cards form one GRPO group.")
    k: int = Field(4, ge=1, description="Reasoner attempts per valid task (one GRPO group).")
    max_turns: int = Field(MAX_TURNS, ge=1, description="Domains with an environment (HasEnvironment): agent turns per episode; an episode still going after them ends as 'max_turns' and is graded as it stands.")
    max_episode_tokens: int = Field(MAX_EPISODE_TOKENS, ge=1, description="Domains with an environment: token budget of one episode after its prompt (agent and environment ids together); a turn past it is cut and the episode ends as 'token_budget'.")
    report_refresh_every: int = Field(5, ge=1, description="Rebuild the capability report every this many steps (the latest is used at every step).")
    group_factor: str = Field("level", description="Card factor used to summarise the task distribution (e.g. level, topic).")
    consensus: bool = Field(True, description="Apply the consensus check (independent answers must not agree on another answer) when the domain has no exact oracle.")
    consensus_solver: Literal["reasoner", "checker"] = Field(
        "reasoner", description="Who answers for consensus: reasoner (reuse the K attempts) or checker (a separate frozen model samples consensus_m answers per valid card before the Reasoner solves it; cards it rejects get no rollouts).")
    consensus_m: int = Field(4, ge=1, description="Answers the checker samples per valid card (consensus_solver=checker); below verifier.consensus_min_attempts consensus is skipped.")
    checker: PolicyConfig | None = Field(None, description="The frozen consensus checker (consensus_solver=checker): model and sampling; trainable is forced off. None: a frozen copy of the reasoner settings and initial model (under shared_base with fresh adapters: the shared base with adapters disabled, no second copy).")
    prompts_dir: str | None = Field(None, description="Folder of prompt templates searched before $SYNCO_PROMPTS_DIR and the shipped ones (domains that read prompt files, e.g. math; checked at load by building the domain with it).")
    synth_decoding: Literal["free", "card"] = Field(
        "free", description="How the Synthesizer samples: free (any text), or card (a domain with a card template, e.g. math: template-constrained decoding, synco.rollout.card_decoding: the JSON between the values is fixed, the model writes only the values, the answer in digits; sampling and GRPO log-probs both use the masked distribution). card needs synthesizer.sampling.max_new_tokens >= the template's longest card.")
    save_every: int = Field(0, ge=0, description="Save a checkpoint every this many steps (0: by time instead, see save_every_minutes). A checkpoint is always saved at the end and when the run is stopped with Ctrl-C.")
    save_every_minutes: float = Field(5.0, ge=0, description="With save_every=0: save a checkpoint after the first step that ends this many minutes after the last one (0: only at the end), so a killed run loses about this much work; `synco train --resume RUN_DIR` continues from it. Checkpoints never change the run's results.")
    keep_checkpoints: int = Field(2, ge=1, description="How many step checkpoints to keep (older ones are deleted).")
    runs_dir: str = Field("runs", description="Folder that holds run directories.")
    run_id: str | None = Field(None, description="Name of the run directory (default: <domain>-<mode>-s<seed>-<timestamp>).")
    heldout_per_group: int = Field(150, ge=0, description="Held-out problems per difficulty group for the before/after evaluation (0: skip).")
    heldout_every: int = Field(0, ge=0, description="Also evaluate the held-out set greedily every this many steps and append it to heldout.jsonl (and TensorBoard): the Reasoner's held-out learning curve (0: before/after only).")
    heldout_samples: int = Field(4, ge=0, description="Also score held-out problems by sampling this many answers each with the Reasoner's training sampling settings (0: greedy only). Greedy shows whether the most likely answer changed; sampled accuracy is what GRPO optimises.")
    threads: ThreadsSetting = Field(
        "auto", description="torch intra-op CPU threads: a positive int (exactly that many), auto (half the usable CPUs, fewer when the load at start leaves less idle, at least 1; keeps idle cores for other programs, since OpenMP threads spin-waiting on a shared core slowed steps ~20x) or null (torch's own choice). Results are bit-identical only at the same thread count: set an int to compare runs across machines or loads.")
    tensorboard: bool = Field(True, description="Write TensorBoard logs to <run>/tb.")
    wandb: bool = Field(False, description="Log metrics to Weights & Biases (needs `pip install wandb`).")
    wandb_project: str = Field("synco", description="Weights & Biases project name.")
    progress: bool = Field(True, description="Show a progress bar with live metrics.")
    backend: Literal["inprocess", "ray"] = Field(
        "inprocess", description="Where the agents run: inprocess (both in this Python process) or ray (each agent's learner is a Ray actor with its own resources and its rollout workers are actor replicas; the loop, the pool and the report stay here; see ray). ray forces seed_per_request, so it records the same run as inprocess with seed_per_request=true.")
    max_staleness: int = Field(0, ge=0, description="Asynchronous co-training (synco.cotrain.pipeline): while the learners update on step t, the next steps are synthesized, verified and rolled out on a snapshot of the latest finished weights, at most this many versions behind the update that trains on them (older attempts are dropped and counted); the update corrects with the decoupled objective (grpo.decoupled: importance weights bounded at grpo.is_cap, truncated or masked as grpo.is_mode says). 0: the synchronous step. Trained agents sample from a snapshot of their weights (the transformers engine: one more copy in memory), a served adapter pushed at each publish, or Ray rollout workers loaded at each publish.")
    async_placement: Literal["thread", "process"] = Field(
        "thread", description="max_staleness >= 1: where the transformers engine's snapshot of a trained agent samples while its learner updates. thread: in this process, the update on a Python thread beside it (the two share the interpreter's lock; over small models they overlap poorly, docs/ASYNC.md). process: in a child process of its own (torch.multiprocessing, spawned once at setup), sent the learner's export at each publish; its sampling draws from its own random stream, so a run repeats itself but not the thread placement's numbers. Engines with weights of their own (vLLM, a server, Ray's rollout workers) sample where they are under either.")
    seed_per_request: bool = Field(False, description="Give every generate call its own seed drawn from the run's random stream (and build each agent from its own seed), so samples depend only on weights, prompts and seeds, not on which process draws them: what makes backend=ray record the same pool and metrics as inprocess. False keeps the one global torch stream (results of earlier runs are reproduced bit for bit).")
    ray: RaySettings = Field(default_factory=RaySettings, description="backend=ray: the cluster, each agent's learner and rollout-worker resources (CPUs, GPUs, custom resources, node labels), worker restarts and chunk retries.")
    shared_base: bool = Field(False, description="Both agents as two LoRA adapters ('synthesizer', 'reasoner') on one frozen base model held once in memory, each with its own optimizer and update; needs the same model_path, dtype, device and lora settings (rank, alpha, dropout, target_modules) for both.")
    synthesizer: PolicyConfig = Field(default_factory=lambda: PolicyConfig(model_path=default_model("synthesizer")),
                                      description="The Synthesizer policy: model, sampling and GRPO settings.")
    reasoner: PolicyConfig = Field(default_factory=lambda: PolicyConfig(model_path=default_model("reasoner")),
                                   description="The Reasoner policy: model, sampling and GRPO settings.")
    verifier: VerifierConfig = Field(default_factory=VerifierConfig, description="Task verification settings.")
    report: ReportConfig = Field(default_factory=ReportConfig, description="Capability report settings.")
    evosyn: EvoSynConfig = Field(default_factory=EvoSynConfig, description="EvoSyn's factor space inside co-training: the Designer (allocation of card slots over factor cells), the Reflector (factor discovery) and learner feedback; each switch is one ablation.")
    synth_rewards: SynthesizerRewardConfig = Field(default_factory=SynthesizerRewardConfig, description="Synthesizer reward.")
    reasoner_rewards: ReasonerRewardConfig = Field(default_factory=ReasonerRewardConfig, description="Reasoner reward.")
    health: HealthConfig = Field(default_factory=HealthConfig, description="Health checks on every step (synco.cotrain.health): Synthesizer collapse, valid rate, label agreement, rejection codes, NaN/inf skips, reward saturation; each warns (alerts.jsonl, TensorBoard, progress bar) or stops the run cleanly.")

    @model_validator(mode="before")
    @classmethod
    def _domain_sections(cls, data: Any) -> Any:
        """Each key that is not a field: a registered domain's settings section, validated by its model (any other
        key is refused); the run's domain's section, when missing, is its model's defaults."""
        if not isinstance(data, dict):
            return data
        data = dict(data)
        errors: list[InitErrorDetails] = []
        for key in [k for k in data if k not in cls.model_fields]:
            try:
                model = settings_model(key) if key in available_domains() else None
            except DomainError as err:
                errors.append(_error(key, data[key], "domain_settings", str(err)))
                continue
            if model is None:
                errors.append(InitErrorDetails(type="extra_forbidden", loc=(key,), input=data[key])
                              if key not in available_domains() else
                              _error(key, data[key], "domain_settings", f"domain {key!r} declares no settings "
                                     f"(its registration has no settings model): remove the section"))
                continue
            try:
                data[key] = model.model_validate(data[key])
            except ValidationError as err:
                errors += [_error((key, *e["loc"]), e["input"], e["type"], e["msg"]) for e in err.errors()]
        if errors:
            raise ValidationError.from_exception_data(cls.__name__, errors)
        domain = data.get("domain", DEFAULT_DOMAIN)
        model = None
        if isinstance(domain, str) and domain in available_domains():
            try:
                model = settings_model(domain)
            except DomainError:  # a broken entry point: building the domain says so
                pass
        if model is not None:
            if domain in cls.model_fields:
                raise ValueError(f"domain {domain!r} declares settings, but its section would be the config field "
                                 f"{domain!r}: register the domain under another name")
            data.setdefault(domain, model())
        return data

    def domain_settings(self, name: str | None = None) -> BaseModel | None:
        """The settings section of domain ``name`` (default: the run's domain), None when the config has none."""
        return (self.__pydantic_extra__ or {}).get(name or self.domain)

    @field_validator("domain")
    @classmethod
    def _known_domain(cls, name: str) -> str:
        if name not in available_domains():
            raise ValueError(unknown_domain_message(name))
        return name

    @field_validator("protocol")
    @classmethod
    def _known_protocol(cls, name: str) -> str:
        if name not in protocol_names():
            raise ValueError(unknown_protocol_message(name))
        return name

    @model_validator(mode="after")
    def _check_protocol(self) -> "RunConfig":
        """The protocol runs with the configured ``mode`` (read, never rewritten: see :attr:`run_mode`)."""
        self.run_mode  # noqa: B018  # ValueError naming both when they cannot go together
        return self

    @property
    def run_mode(self) -> str:
        """The mode the run's protocol runs with (rft: ``static``), which chooses the card source and who trains;
        ``mode`` stays as configured."""
        return build_protocol(self).run_mode(self.mode)

    @model_validator(mode="after")
    def _check_backend(self) -> "RunConfig":
        if self.backend != "ray":
            return self
        self.seed_per_request = True
        unsupported = [f"{name}={value}" for name, value, bad in (
            ("shared_base", "true", self.shared_base),
            ("synth_decoding", self.synth_decoding, self.synth_decoding != "free"),
        ) if bad]
        if unsupported:
            raise ValueError(f"backend=ray does not support {', '.join(unsupported)} yet (use backend=inprocess)")
        return self

    @model_validator(mode="after")
    def _check_card_engine(self) -> "RunConfig":
        if self.synth_decoding == "card" and self.synthesizer.rollout_engine != "hf":
            raise ValueError(f"synth_decoding=card masks the Synthesizer's logits inside transformers' generate; "
                             f"synthesizer.rollout_engine={self.synthesizer.rollout_engine!r} cannot apply it "
                             f"(use synthesizer.rollout_engine=hf, or synth_decoding=free)")
        return self

    @model_validator(mode="after")
    def _check_prompts_dir(self) -> "RunConfig":
        """A named prompt folder must exist, and hold templates the domain can use: checked here, not inside a step."""
        message = prompts_dir_problem(self.prompts_dir, self.domain)
        if message:
            raise ValueError(message)
        return self

    @model_validator(mode="after")
    def _check_proposer(self) -> "RunConfig":
        """The LLM proposer needs a chat-model domain (its ``needs``, so the domain is built only when it is on)."""
        if self.evosyn.proposer:
            chat_model = get_domain(self.domain, domain_context(self)).needs.chat_model
            message = proposer_problem(self.evosyn, self.domain, self.run_mode, chat_model,
                                       MODE_TRAITS[self.run_mode].reads_report)
            if message:
                raise ValueError(message)
        return self

    @model_validator(mode="after")
    def _check_designer_mode(self) -> "RunConfig":
        """``mode=designer`` needs the Designer and a domain that draws cards inside a cell (``HasCellCards``)."""
        if MODE_TRAITS[self.run_mode].draws_in_cells:
            from synco.domains.base import HasCellCards

            if not self.evosyn.designer:
                raise ValueError("mode=designer needs evosyn.designer=true (the Designer chooses the cells)")
            if not isinstance(get_domain(self.domain, domain_context(self)), HasCellCards):
                raise ValueError(f"mode=designer needs a domain that draws cards inside a cell (HasCellCards, e.g. "
                                 f"rgym), got domain={self.domain!r}")
        return self

    @model_validator(mode="after")
    def _check_card_template(self) -> "RunConfig":
        """``synth_decoding=card`` needs a domain with a card template: checked at load, before any model is built."""
        if self.synth_decoding == "card" and not isinstance(get_domain(self.domain, domain_context(self)),
                                                           HasCardTemplate):
            raise ValueError(f"synth_decoding=card needs a domain with a card template (HasCardTemplate, e.g. math); "
                             f"domain={self.domain!r} has none (use synth_decoding=free)")
        return self

    @model_validator(mode="after")
    def _check_episodes(self) -> "RunConfig":
        """A domain with an environment (multi-turn episodes) runs every protocol; one that fine-tunes on references
        (its declared ``sft_on_references``: rounds / rft with ``rounds.update=sft``, ``rounds.target=reference``) only
        where the domain's cards carry a replayable gold trajectory (:class:`HasGoldTurns`): each task's gold episode."""
        if not build_protocol(self).sft_on_references:
            return self
        domain = get_domain(self.domain, domain_context(self))
        if isinstance(domain, HasEnvironment) and not isinstance(domain, HasGoldTurns):
            raise ValueError(f"domain={self.domain!r} runs multi-turn episodes and its cards have no replayable gold "
                             f"episode: protocol={self.protocol!r} trains on the Reasoner's own correct episodes, "
                             f"rounds.target=attempts (got rounds.target={self.rounds.target!r})")
        return self

    @model_validator(mode="after")
    def _check_async(self) -> "RunConfig":
        """Asynchronous co-training: each trained agent samples apart from its learner's weights, and its update
        corrects for the lag (``grpo.decoupled``, set here for every trained agent, so every backend reads it).

        Every engine samples apart (:meth:`~synco.core.policy.Learner.sample_apart`); refused is only what contradicts
        overlapping sampling with the update: vLLM's sleep mode (it frees the engine's memory for the update, which
        then runs beside sampling). A round's GRPO (``rounds.update=grpo``) runs at the round's end, between steps,
        and publishes each of its updates before the next samples."""
        if self.max_staleness == 0:
            if self.async_placement != "thread":
                raise ValueError(f"async_placement={self.async_placement} places the asynchronous learner's sampler: "
                                 f"it needs max_staleness >= 1")
            return self
        if self.async_placement == "process" and self.backend == "ray":
            raise ValueError("async_placement=process: backend=ray already places each learner in an actor process "
                             "and its samplers in rollout workers (use async_placement=thread)")
        trained = [role for role in ("synthesizer", "reasoner") if not self.frozen(role)]
        sleeping = [f"{role}.vllm.sleep_between_steps=true" for role in trained
                    if getattr(self, role).rollout_engine == "vllm" and getattr(self, role).vllm.sleep_between_steps]
        if sleeping:
            raise ValueError(f"max_staleness={self.max_staleness} does not support {', '.join(sleeping)}: sleep mode "
                             f"frees the engine for the update, which runs while the engine samples (set "
                             f"max_staleness=0, or sleep_between_steps=false)")
        for role in trained:
            getattr(self, role).grpo.decoupled = True
        return self

    @model_validator(mode="after")
    def _check_shared_base(self) -> "RunConfig":
        if self.shared_base:
            from synco.learn.shared_base import shared_base_problems

            problems = shared_base_problems(self.synthesizer, self.reasoner)
            if problems:
                raise ValueError("shared_base=true needs one base and equal LoRA settings: " + "; ".join(problems))
        return self

    @model_validator(mode="after")
    def _check_finite(self) -> "RunConfig":
        bad = non_finite_fields(self)
        if bad:
            raise ValueError("numbers must be finite: " + "; ".join(f"{name}={value}" for name, value in bad))
        return self

    def frozen(self, role: str) -> bool:
        """Whether ``role`` never trains in this run: the checker, a Synthesizer outside ``mode=cotrain``, or an agent
        with ``trainable: false``."""
        policy: PolicyConfig | None = getattr(self, role)
        return (role == "checker" or (role == "synthesizer" and not MODE_TRAITS[self.run_mode].trains_synthesizer)
                or (policy is not None and not policy.trainable))

    def loads_weights(self, role: str) -> bool:
        """Whether ``role`` holds local weights (all but a frozen role on a served chat endpoint)."""
        policy: PolicyConfig | None = getattr(self, role)
        return policy is not None and not (policy.rollout_engine == "served" and policy.served is not None
                                           and policy.served.endpoint == "chat" and self.frozen(role))

    @model_validator(mode="after")
    def _check_served(self) -> "RunConfig":
        """``rollout_engine: served`` per role: a section, LoRA to train through a server, in process only."""
        from synco.rollout.served import served_problem

        problems = []
        for role in ("synthesizer", "reasoner", "checker"):
            policy: PolicyConfig | None = getattr(self, role)
            if policy is None or policy.rollout_engine != "served":
                continue
            problem = served_problem(policy, role, frozen=self.frozen(role))
            if problem is None and self.backend == "ray":
                problem = f"{role}.rollout_engine=served runs in process (backend=ray: not yet)"
            if problem is None and self.shared_base:
                problem = f"{role}.rollout_engine=served cannot share a base (shared_base=true)"
            if (problem is None and role == "reasoner" and policy.served is not None and policy.served.endpoint == "chat"
                    and isinstance(get_domain(self.domain, domain_context(self)), HasEnvironment)):
                problem = (f"reasoner.served.endpoint=chat cannot act in domain={self.domain!r}: its episodes run on "
                           f"token ids (reasoner.served.endpoint=completions on a vLLM server)")
            if problem is not None:
                problems.append(problem)
        if problems:
            raise ValueError("; ".join(problems))
        return self

    @model_validator(mode="after")
    def _check_model_paths(self) -> "RunConfig":
        problems = []
        for role in ("synthesizer", "reasoner", "checker"):
            policy: PolicyConfig | None = getattr(self, role)
            if policy is None or not self.loads_weights(role):
                continue
            paths = {f"{role}.model_path": policy.model_path}
            if policy.lora is not None and policy.lora.adapter_path is not None:
                paths[f"{role}.lora.adapter_path"] = policy.lora.adapter_path
            problems += [f"{name}: {why}" for name, path in paths.items() if (why := model_path_problem(path))]
        if problems:
            raise ValueError("; ".join(problems) + f" (a model is {model_path_forms()})")
        return self


def prompts_dir_problem(prompts_dir: str | None, domain: str) -> str | None:
    """Why ``prompts_dir`` cannot serve ``domain``, naming the field and value, or None when it can (or is unset).

    The folder must exist for any domain (a typo must not fall back to the shipped templates
    unnoticed). Then the domain is built with it, as a run builds it: a domain that reads
    prompts (math) loads and checks its templates there and raises ``PromptError``, so a
    template without a placeholder the domain needs fails at config load, naming the file,
    not inside the first step. A domain that reads no prompts ignores the folder.
    """
    if prompts_dir is None:
        return None
    folder = Path(prompts_dir).expanduser()
    if not folder.is_dir():
        what = "is not a folder" if folder.exists() else "does not exist"
        return (f"prompts_dir={prompts_dir!r}: {what} (relative paths are read from the current folder, "
                f"{Path.cwd()}); point it at a folder of prompt templates, or leave it unset for the shipped ones")
    from synco.core.prompts import PromptError

    try:
        get_domain(domain, DomainContext(prompts_dir=prompts_dir))
    except PromptError as err:
        return f"prompts_dir={prompts_dir!r}: {err}"
    return None


def domain_context(cfg: RunConfig) -> DomainContext:
    """What a domain factory of ``cfg``'s run gets (synco.domains.registry): the prompt folder, the domain's own
    settings section, and the run's simulated-user loader (a frozen local model on the Reasoner's device)."""
    return DomainContext(prompts_dir=cfg.prompts_dir, settings=cfg.domain_settings(), seed=cfg.seed,
                         simulated_user=partial(local_simulated_user, device=cfg.reasoner.device))


def local_simulated_user(model: str, *, device: str = "cpu", max_new_tokens: int = USER_MAX_NEW_TOKENS,
                         temperature: float = 0.0) -> Any:
    """A frozen local chat model that plays the user of an episode (``DomainContext.simulated_user``), loaded here,
    by the process that calls it (``synco.learn.user_sim.load_user_sim``)."""
    from synco.learn.user_sim import load_user_sim

    return load_user_sim(model, device=device, max_new_tokens=max_new_tokens, temperature=temperature)


def _error(loc: str | tuple[Any, ...], value: Any, kind: str, message: str) -> InitErrorDetails:
    """One validation error at ``loc`` (a domain's settings section), its message as given."""
    return InitErrorDetails(type=PydanticCustomError(kind, message), loc=(loc,) if isinstance(loc, str) else loc,
                            input=value)


def run_input_problems(cfg: RunConfig) -> list[str]:
    """What a run of ``cfg`` needs on disk at start and lacks (the contamination benchmark files), one message each.

    Not a config validator: describing a config (``synco config``) must work before
    ``synco data`` has made the folder; running it must not (``check_runnable``).
    """
    from synco.grading.benchmarks import benchmark_paths_error

    message = benchmark_paths_error(cfg.verifier.benchmark_paths, "verifier.benchmark_paths")
    return [message] if message else []


def check_runnable(cfg: RunConfig) -> None:
    """Raise ConfigError (the same message config validation gives) when a run of ``cfg`` would lack its inputs.

    Called before a run creates anything or loads a model, so a missing benchmark folder fails at once.
    """
    problems = run_input_problems(cfg)
    if problems:
        raise ConfigError("invalid configuration:\n" + "\n".join(f"  {p}" for p in problems))


def default_model(role: str) -> str:
    """The model of ``role`` in a config that names none: the default domain's warm start."""
    return f"{BUILTIN_MODEL_PREFIX}{DEFAULT_DOMAIN}/{role}"


def model_path_forms() -> str:
    """The forms a model path may take (for error messages), the built-in warm starts from the registry."""
    return (f"a local folder, a hub id such as Qwen/Qwen3-8B, a domain's warm start {BUILTIN_MODEL_PREFIX}<domain>/<role> "
            f"({', '.join(builtin_models())}) or a model preset such as smollm2")


_HUB_ID = re.compile(r"(?:\w(?:[\w.-]*\w)?/)?\w(?:[\w.-]*\w)?")


def model_path_problem(path: str) -> str | None:
    """Why ``path`` cannot name a model, or None when it may.

    Checked when the config is loaded: a missing local folder would otherwise reach
    the hub client only when the model loads, and fail there with an error about repo ids.
    A string shaped like a hub id is accepted (only the hub can tell whether it exists).
    """
    from synco.learn.models import PRESETS as MODEL_PRESETS

    if path.startswith(BUILTIN_MODEL_PREFIX):
        try:
            builtin_model(path)
        except DomainError as err:
            return str(err)
        return None
    if path in MODEL_PRESETS or Path(path).exists():
        return None
    if _HUB_ID.fullmatch(path) and ".." not in path and "--" not in path and len(path) <= 96:
        return None
    hint = " (~ is not expanded)" if path.startswith("~") else ""
    return f"no such local folder {path!r}{hint}"


def non_finite_fields(model: BaseModel, prefix: str = "") -> list[tuple[str, float]]:
    """(dotted name, value) of every inf or NaN number in a config, sections and lists included.

    Pydantic accepts ``inf`` and ``nan`` for a float field; no setting of a run means either.
    """
    found: list[tuple[str, float]] = []
    for name in [*type(model).model_fields, *(model.__pydantic_extra__ or {})]:  # domains' settings sections too
        found += _non_finite_in(getattr(model, name), prefix + name)
    return found


def _non_finite_in(value: Any, name: str) -> list[tuple[str, float]]:
    if isinstance(value, BaseModel):
        return non_finite_fields(value, name + ".")
    if isinstance(value, float):
        return [] if math.isfinite(value) else [(name, value)]
    if isinstance(value, dict):
        return [bad for k, v in value.items() for bad in _non_finite_in(v, f"{name}.{k}")]
    if isinstance(value, (list, tuple)):
        return [bad for i, v in enumerate(value) for bad in _non_finite_in(v, f"{name}.{i}")]
    return []


def parse_override(item: str) -> tuple[list[str], Any]:
    """``a.b.c=value`` -> (["a", "b", "c"], value); the value is read as YAML (numbers, bools, lists)."""
    if "=" not in item:
        raise ConfigError(f"override {item!r} is not of the form key=value (e.g. reasoner.grpo.lr=3e-5)")
    key, raw = item.split("=", 1)
    key = key.strip()
    if not key or any(not part for part in key.split(".")):
        raise ConfigError(f"override {item!r} has an empty key")
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError as e:
        raise ConfigError(f"override {key}: cannot read value {raw!r}: {yaml_problem(e)}") from None
    # YAML reads "3e-5" as a string; numbers written that way are what people type.
    if isinstance(value, str):
        try:
            value = float(value) if any(c in value for c in ".eE") and not value.isalpha() else value
        except ValueError:
            pass
    return key.split("."), value


def apply_overrides(data: dict[str, Any], overrides: Iterable[str]) -> dict[str, Any]:
    """Set each dotted override in a nested dict (creating sub-dicts as needed).

    A setting's former name is set under today's (``rounds.lr`` -> ``rounds.sft_lr``), so it overrides
    what the layers below set under either name.
    """
    for item in overrides:
        path, value = parse_override(item)
        if path == ["rounds", "lr"]:
            rounds = data.get("rounds")
            update = rounds.get("update", "sft") if isinstance(rounds, dict) else "sft"
            try:
                legacy_rounds({"lr": value, "update": update})  # its checks: a rate, for update=sft
            except ValueError as e:
                raise ConfigError(f"override {item!r}: {e}") from None
            path = ["rounds", "sft_lr"]
        node = data
        for part in path[:-1]:
            child = node.get(part)
            if child is None:
                child = node[part] = {}
            elif not isinstance(child, dict):
                raise ConfigError(f"override {'.'.join(path)}: {part!r} is a value, not a section")
            node = child
        node[path[-1]] = value
    return data


def preset_path(name: str) -> Path:
    """The YAML file of a built-in preset."""
    if name not in PRESETS:
        raise ConfigError(f"unknown preset {name!r}; choose one of {', '.join(PRESETS)}")
    return Path(str(resources.files("synco") / "presets" / f"{name}.yaml"))


def load_yaml(path: str | Path) -> dict[str, Any]:
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"config file not found: {p}")
    try:
        data = yaml.safe_load(p.read_text()) or {}
    except yaml.YAMLError as e:
        raise ConfigError(f"config file {p} is not valid YAML: {yaml_problem(e)}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"config file {p} must hold a mapping at the top level, got {type(data).__name__}")
    return _today_names(data, str(p))


def _today_names(data: dict[str, Any], source: str) -> dict[str, Any]:
    """One config layer with former setting names read as today's (``rounds.lr`` -> ``rounds.sft_lr``), so
    a later layer's value wins whichever name either layer used; ConfigError naming ``source`` on a clash."""
    if isinstance(data.get("rounds"), dict):
        try:
            data["rounds"] = legacy_rounds(data["rounds"])
        except ValueError as e:
            raise ConfigError(f"config file {source}: {e}") from None
    return data


def build_config(data: dict[str, Any]) -> RunConfig:
    """Validate a nested dict into a RunConfig; errors name the dotted field and the bad value."""
    try:
        return RunConfig.model_validate(data)
    except ValidationError as e:
        raise ConfigError("invalid configuration:\n" + "\n".join(_error_lines(e))) from None


def domain_section(name: str, overrides: Iterable[str] = ()) -> BaseModel | None:
    """Domain ``name``'s settings section from dotted overrides (``<name>.KEY=VALUE``, the keys under the section),
    validated by the model its registration declares, as a run's config validates it: ConfigError naming
    ``<name>.KEY`` and the value. None for a domain that declares no settings model."""
    model = settings_model(name)
    if model is None:
        return None
    section = apply_overrides({}, overrides).get(name, {})
    try:
        return model.model_validate(section)
    except ValidationError as e:
        raise ConfigError("invalid configuration:\n" + "\n".join(_error_lines(e, (name,)))) from None


def _error_lines(e: ValidationError, prefix: tuple[str, ...] = ()) -> list[str]:
    """One line per error: the dotted field (under ``prefix``), the message and the value it got (never a value that
    could be a key: ``synco.core.served.could_be_secret``)."""
    lines = []
    for err in e.errors():
        if not err["loc"] and not prefix and err["type"] == "value_error":  # a whole-config check: names the fields
            lines.append(f"  {err['ctx']['error']}")
            continue
        loc = ".".join(str(x) for x in (*prefix, *err["loc"])) or "<root>"
        got = err.get("input")
        if could_be_secret(loc, got):
            lines.append(f"  {loc}: {err['msg']} (the value is not shown: it could be a key)")
            continue
        shown = repr(got) if not isinstance(got, dict) else "{...}"
        lines.append(f"  {loc}: {err['msg']} (got {shown[:80]})")
    return lines


def load_config(preset: str | None = DEFAULT_PRESET, path: str | Path | None = None, overrides: Iterable[str] = ()) -> RunConfig:
    """Preset YAML, then the user's YAML on top, then dotted overrides.

    A config that names a domain other than the preset's (``synco verify FILE domain=rgym`` on the default, arith,
    preset) gets that domain's own values of run settings (its registration's ``config_defaults``: e.g. the
    verifier's problem length bounds) in place of the preset's, under whatever the user's YAML and overrides set.
    Only those: the preset's other settings (and no other preset: ``rgym.families`` stays the domain's default)."""
    data: dict[str, Any] = load_yaml(preset_path(preset)) if preset else {}
    user: dict[str, Any] = load_yaml(path) if path is not None else {}
    overrides = list(overrides)
    domain = chosen_domain(user, overrides)
    if domain is not None and domain != (data.get("domain", DEFAULT_DOMAIN) if preset else None):
        apply_domain_defaults(data, domain)
    _deep_update(data, user)
    apply_overrides(data, overrides)
    return build_config(data)


def chosen_domain(user: dict[str, Any], overrides: Sequence[str]) -> str | None:
    """The domain the user's layers name (the last ``domain=`` override, else the YAML's ``domain:``), or None."""
    for item in reversed(overrides):
        path, value = parse_override(item)
        if path == ["domain"]:
            return value if isinstance(value, str) else None
    found = user.get("domain")
    return found if isinstance(found, str) else None


def apply_domain_defaults(data: dict[str, Any], domain: str) -> None:
    """Set ``domain``'s own values of run settings (``config_defaults``) in the nested ``data``; nothing for a domain
    the registry does not know (the config's validation names it)."""
    try:
        defaults = config_defaults(domain)
    except DomainError:
        return
    for key, value in defaults.items():
        *parents, leaf = key.split(".")
        node = data
        for part in parents:
            child = node.get(part)
            if not isinstance(child, dict):
                child = node[part] = {}
            node = child
        node[leaf] = value


def dump_config(cfg: RunConfig) -> str:
    """The resolved config as YAML (written to every run directory)."""
    return yaml.safe_dump(cfg.model_dump(mode="json"), sort_keys=False)


def _deep_update(base: dict[str, Any], new: dict[str, Any]) -> None:
    for k, v in new.items():
        if isinstance(v, dict) and isinstance(base.get(k), dict):
            _deep_update(base[k], v)
        else:
            base[k] = v


def describe_fields(model: type[BaseModel] = RunConfig, prefix: str = "") -> list[tuple[str, str, str]]:
    """(dotted name, default, description) of every field, recursively: the config reference. An optional section
    (``lora``, ``served``, ``checker``: None by default) is listed with its default, then its fields."""
    rows: list[tuple[str, str, str]] = []
    for name, f in model.model_fields.items():
        ann = f.annotation
        sub = _section_model(ann)
        if sub is not None:
            default = "" if sub is ann else repr(f.get_default(call_default_factory=True))
            rows.append((prefix + name, default, f.description or ""))
            rows.extend(describe_fields(sub, prefix + name + "."))
        else:
            default = f.get_default(call_default_factory=True) if not f.is_required() else "(required)"
            rows.append((prefix + name, repr(default), f.description or ""))
    if model is RunConfig:  # the registered domains' own sections
        for name, section in domain_settings_models().items():
            doc = (section.__doc__ or "").strip().split("\n")[0]
            rows.append((name, "", f"domain={name}: {doc or 'its own settings'}"))
            rows.extend(describe_fields(section, name + "."))
    return rows


def _section_model(annotation: Any) -> type[BaseModel] | None:
    """The settings model a field holds: its annotation when that is one, the model of ``Model | None``, else None."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    if len(args) == 1 and isinstance(args[0], type) and issubclass(args[0], BaseModel) and \
            type(None) in typing.get_args(annotation):
        return args[0]
    return None


def domain_settings_models() -> dict[str, type[BaseModel]]:
    """The settings model of every registered domain that declares one (an entry point that does not load is left
    out: building its domain names the error)."""
    found = {}
    for name in available_domains():
        try:
            model = settings_model(name)
        except DomainError:
            continue
        if model is not None:
            found[name] = model
    return found
