"""Step hooks: what the run loop does after each step besides logging it, one small object per feature.

Each hook says itself whether it is due after a step (``due``, from its own cadence) and does its work in
``after_step``; the loop runs them in one place, in the order ``build_hooks`` gives. The order is part of
the run's numbers (the report the proposer and Reflector read, the weights the held-out curve measures, the
checkpoint that must hold everything up to its step):

    health -> report refresh -> learning effect -> control check -> proposer -> reflector -> held-out curve
           -> checkpoint

A hook may ask the run to stop after the step by returning alerts (the health hook returns those whose action
is ``stop``); the checkpoint hook then saves the step and the loop raises ``RunInterrupted``. A feature that is
off has no hook at all.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field
from typing import Callable, Protocol, Sequence

from synco.config import RunConfig
from synco.core.policy import generate_seeded
from synco.core.sampling import SamplingParams
from synco.core.records import DUPLICATE_CODES
from synco.core.report import build_report
from synco.cotrain.engine import CoTrainState
from synco.cotrain.protocols.base import TrainingProtocol
from synco.cotrain.settings import StepSettings
from synco.cotrain.stats import StepStats
from synco.cotrain.health import Alert, HealthConfig, HealthMonitor, trim_history
from synco.evosyn.reflector import python_seed
from synco.evosyn.effect import Period, measure_period
from synco.evosyn.run import control_and_log, log_transition, propose_and_log, reflect_and_log
from synco.run.checkpoints import checkpoint_due, save_checkpoint
from synco.run.files import jsonl_rows
from synco.run.heldout import evaluate_heldout_greedy
from synco.run.logs import Loggers
from synco.run.state import Run
from synco.run.stopping import StopSignals


@dataclass
class StepContext:
    """What the hooks see after one step: the run, the step and its stats, and whether the run stops after it."""

    run: Run
    step: int
    stats: StepStats
    signals: StopSignals = field(default_factory=StopSignals)  # read live: a Ctrl-C during a hook counts
    stops: list[Alert] = field(default_factory=list)  # alerts the hooks so far returned: stop after this step
    _stopping: bool | None = field(default=None, init=False, repr=False)

    @property
    def last(self) -> bool:
        """Whether this is the run's last step (which ``train`` checkpoints and ends anyway)."""
        return self.step + 1 >= self.run.cfg.steps

    def stopping(self) -> bool:
        """Whether the run ends after this step: a signal or a stop alert, never on the last step.

        Decided once per step, when first asked (by the checkpoint hook, which runs last, else by the loop),
        so the checkpoint and the stop agree; a signal arriving later is handled after the next step.
        """
        if self._stopping is None:
            self._stopping = (self.signals.signum is not None or bool(self.stops)) and not self.last
        return self._stopping


class StepHook(Protocol):
    """One thing done after a step: ``due`` says whether it runs after this one, ``after_step`` does it and
    returns the alerts that stop the run after this step (None or empty: go on)."""

    def due(self, ctx: StepContext) -> bool: ...

    def after_step(self, ctx: StepContext) -> Sequence[Alert] | None: ...


def every(n: int, step: int) -> bool:
    """Whether ``step`` (0-based) completes a multiple of ``n`` steps: steps n-1, 2n-1, ..."""
    return (step + 1) % n == 0


def run_hooks(hooks: Sequence[StepHook], ctx: StepContext) -> None:
    """Run the due hooks in order; the alerts they return gather in ``ctx.stops``."""
    for hook in hooks:
        if hook.due(ctx):
            ctx.stops.extend(hook.after_step(ctx) or ())


# ------------------------------------------------------------------ the hooks, in the order they run


@dataclass
class HealthHook:
    """Every step: feed the health monitor (``synco.cotrain.health``), log and print the alerts that fire
    (once per episode: a check fires again only after a good step); those whose action is ``stop`` stop the run
    (not on the last step, which ends it anyway)."""

    monitor: HealthMonitor
    loggers: Loggers

    def due(self, ctx: StepContext) -> bool:
        return True

    def after_step(self, ctx: StepContext) -> list[Alert]:
        from tqdm.auto import tqdm

        alerts = self.monitor.observe(ctx.stats)
        for alert in alerts:
            self.loggers.log_alert(alert)
            tqdm.write(f"health alert ({alert.action}) at step {alert.step}: {alert.message}", file=sys.stderr)
        return [] if ctx.last else [a for a in alerts if a.action == "stop"]


@dataclass
class ReportRefreshHook:
    """Every ``report_refresh_every`` steps and at each round's end: rebuild the capability report from the
    pool's recent records and write ``reports/step_N.txt`` as the Synthesizer sees it."""

    cfg: RunConfig

    def due(self, ctx: StepContext) -> bool:
        return every(self.cfg.report_refresh_every, ctx.step) or ctx.run.protocol.closes_round(ctx.step)

    def after_step(self, ctx: StepContext) -> None:
        st, step = ctx.run.state, ctx.step
        st.report = build_report(st.pool.recent(self.cfg.report.window), self.cfg.report, step=step + 1)
        (ctx.run.dir / "reports" / f"step_{step + 1}.txt").write_text(st.domain.synthesizer_prompt(st.report))


@dataclass
class LearningEffectHook:
    """At each learning-effect period's end (a round, or ``evosyn.effect_every`` steps), from the second on: each
    cell's success on the period's new tasks against the period before, across the training between them, a line
    of ``learning_effect.jsonl`` (:mod:`synco.evosyn.effect`); the Designer's and the Synthesizer's feedback read
    it. Measured on the space as it stands, before the Reflector may change it; a period measured on the same space
    is read from the pool once (it is the next transition's pre period)."""

    cfg: RunConfig
    measured: dict[int, tuple[int, Period]] = field(default_factory=dict)  # period -> (space version, measure)

    def due(self, ctx: StepContext) -> bool:
        protocol = ctx.run.protocol
        return protocol.closes_effect_period(ctx.step) and protocol.effect_period(ctx.step) > 0

    def after_step(self, ctx: StepContext) -> None:
        st, protocol = ctx.run.state, ctx.run.protocol
        period = protocol.effect_period(ctx.step)
        assert st.evo is not None
        log_transition(st.evo, self.period(st, protocol, period - 1), self.period(st, protocol, period),
                       self.period(st, protocol, period - 2) if period > 1 else None, ctx.step, period, ctx.run.dir)
        self.measured = {p: m for p, m in self.measured.items() if p >= period - 1}

    def period(self, st: CoTrainState, protocol: TrainingProtocol, p: int) -> Period:
        """Period ``p`` measured on the current space (from the pool, unless measured on it already)."""
        assert st.evo is not None
        version, done = self.measured.get(p, (None, None))
        if done is None or version != st.evo.space.version:
            done = measure_period([r for s in protocol.effect_period_steps(p) for r in st.pool.by_step(s)],
                                  st.evo.space)
            self.measured[p] = (st.evo.space.version, done)
        return done


@dataclass
class ControlCheckHook:
    """Every step (EvoSyn with the Reflector): a promoted factor the Synthesizer cannot follow leaves the cells
    (``control_and_log``; it reads the pool only while a promoted factor awaits its check)."""

    cfg: RunConfig

    def due(self, ctx: StepContext) -> bool:
        return True

    def after_step(self, ctx: StepContext) -> None:
        st, cfg = ctx.run.state, self.cfg
        assert st.evo is not None
        control_and_log(st.evo, lambda: st.pool.recent(cfg.evosyn.reflector_settings.window), cfg.evosyn,
                        ctx.step, ctx.run.dir)


@dataclass
class ProposerHook:
    """Every ``evosyn.proposer_settings.every`` steps and at each round's end: the LLM proposer's one factor."""

    cfg: RunConfig

    def due(self, ctx: StepContext) -> bool:
        return every(self.cfg.evosyn.proposer_settings.every, ctx.step) or ctx.run.protocol.closes_round(ctx.step)

    def after_step(self, ctx: StepContext) -> None:
        propose_factor(ctx.run, ctx.step)


@dataclass
class ReflectorHook:
    """Every ``evosyn.reflector_settings.every`` steps and at each round's end: one reflection on the pool's
    recent records, which may promote, confirm or retire factors."""

    cfg: RunConfig

    def due(self, ctx: StepContext) -> bool:
        return every(self.cfg.evosyn.reflector_settings.every, ctx.step) or ctx.run.protocol.closes_round(ctx.step)

    def after_step(self, ctx: StepContext) -> None:
        st, cfg = ctx.run.state, self.cfg
        assert st.evo is not None
        reflect_and_log(st.evo, st.pool.recent(cfg.evosyn.reflector_settings.window), cfg.evosyn, ctx.step,
                        cfg.seed, ctx.run.dir)


@dataclass
class HeldoutCurveHook:
    """Every ``heldout_every`` steps: the greedy held-out accuracy, a point of ``heldout.jsonl``."""

    cfg: RunConfig
    loggers: Loggers

    def due(self, ctx: StepContext) -> bool:
        return every(self.cfg.heldout_every, ctx.step)

    def after_step(self, ctx: StepContext) -> None:
        self.loggers.log_heldout(ctx.step + 1, evaluate_heldout_greedy(ctx.run))


@dataclass
class CheckpointHook:
    """Last: a checkpoint when the run stops after this step, else on ``checkpoint_due``'s cadence (steps or
    minutes since the last one). Coming last, a checkpoint of step N means every file is complete up to N."""

    cfg: RunConfig
    clock: Callable[[], float] = time.monotonic
    last_save: float = field(init=False)

    def __post_init__(self) -> None:
        self.last_save = self.clock()

    def due(self, ctx: StepContext) -> bool:
        minutes = (self.clock() - self.last_save) / 60
        return ctx.stopping() or checkpoint_due(self.cfg, ctx.step, minutes)

    def after_step(self, ctx: StepContext) -> None:
        save_checkpoint(ctx.run, ctx.step)
        self.last_save = self.clock()


def build_hooks(run: Run, loggers: Loggers, monitor: HealthMonitor) -> list[StepHook]:
    """The run's hooks, in the order they run; a feature that is off is absent."""
    cfg = run.cfg
    hooks: list[StepHook] = [HealthHook(monitor, loggers), ReportRefreshHook(cfg)]
    if run.state.evo is not None:
        hooks.append(LearningEffectHook(cfg))
    if reflects(cfg, run.settings) and run.state.evo is not None:
        hooks.append(ControlCheckHook(cfg))
        if cfg.evosyn.proposer:
            hooks.append(ProposerHook(cfg))
        hooks.append(ReflectorHook(cfg))
    if run.heldout and cfg.heldout_every:
        hooks.append(HeldoutCurveHook(cfg, loggers))
    hooks.append(CheckpointHook(cfg))
    return hooks


def reflects(cfg: RunConfig, settings: StepSettings) -> bool:
    """Whether the Reflector runs: switched on, with learner feedback, in a run whose Designer cells decide the cards
    (the Synthesizer writes them from the report, or ``designer``: the domain draws them inside the cells)."""
    return cfg.evosyn.reflector and cfg.evosyn.feedback and settings.cells_decide_cards


def health_monitor(run: Run) -> HealthMonitor:
    """The run's health monitor, with the history and alert count a resumed run had recorded (already rewound)."""
    history = [StepStats.model_validate(row) for row in jsonl_rows(run.dir / "metrics.jsonl")]
    health = health_settings(run.cfg)
    return HealthMonitor(health, history=trim_history(history, health),
                         n_alerts=len(jsonl_rows(run.dir / "alerts.jsonl")))


def health_settings(cfg: RunConfig) -> HealthConfig:
    """The health checks as this run's verifier rejects: where ``verifier.reject_duplicates`` is false the
    duplicate codes are soft reasons (a card keeps its place), so ``rejection_code`` does not watch them."""
    if cfg.verifier.reject_duplicates:
        return cfg.health
    rc = cfg.health.rejection_code
    ignored = sorted(set(rc.ignore_codes) | DUPLICATE_CODES)
    return cfg.health.model_copy(update={"rejection_code": rc.model_copy(update={"ignore_codes": ignored})})


def propose_factor(run: Run, step: int) -> None:
    """EvoSyn's LLM proposer (``evosyn.proposer``): the Synthesizer model, greedy and unconstrained, proposes one
    keyword factor from the Reflector's window; logged to factors.jsonl, never raises on the model's text."""
    cfg, st = run.cfg, run.state
    assert st.evo is not None
    params = SamplingParams(greedy=True, max_new_tokens=cfg.evosyn.proposer_settings.max_new_tokens)

    def generate(prompt: str) -> str:
        policy = st.synthesizer
        constraint = getattr(policy, "token_constraint", None)  # synth_decoding=card: lifted for this free text
        if constraint is not None:
            policy.set_token_constraint(None)  # type: ignore[attr-defined]
        try:  # its own seed: the run's random streams are untouched
            return generate_seeded(policy, [policy.format_prompt(prompt)], 1, params,
                                   python_seed(cfg.seed, step))[0][0].text
        finally:
            if constraint is not None:
                policy.set_token_constraint(constraint)  # type: ignore[attr-defined]

    propose_and_log(st.evo, st.pool.recent(cfg.evosyn.reflector_settings.window), cfg.evosyn, step, cfg.seed,
                    run.dir, generate, st.domain, cfg.prompts_dir)
