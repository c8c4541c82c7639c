"""The run loop: set the run up, evaluate the held-out set, then per step the protocol's step, its record and
log lines and the step hooks (``synco.run.hooks``); the final checkpoint and the summary.

The step itself lives in ``synco.cotrain.engine.cotrain_step``, planned and followed by the run's protocol object
(``synco.run.steps.protocol_step``; the asynchronous pipeline takes the same object); the run directory's files are
listed in ``synco.run.setup``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from synco.config import RunConfig
from synco.core.served import ServedError
from synco.cotrain.engine import CoTrainState
from synco.cotrain.stats import StepStats
from synco.cotrain.health import HealthMonitor
from synco.domains.base import export_fields
from synco.run.checkpoints import latest_checkpoint, save_checkpoint
from synco.run.files import read_json, write_atomic
from synco.run.heldout import evaluate_heldout_both
from synco.run.hooks import StepContext, StepHook, build_hooks, health_monitor, run_hooks
from synco.run.logs import Loggers
from synco.run.setup import setup_run
from synco.run.state import Run, new_run_id
from synco.run.steps import protocol_step
from synco.run.stopping import RunInterrupted, StopSignals
from synco.run.summary import RunSummary, summarize


def train(cfg: RunConfig, resume: Path | None = None, log=print) -> RunSummary:
    """Run (or resume) a co-training run to ``cfg.steps`` steps and return its summary.

    Stopping a run never loses it: a first Ctrl-C (or SIGTERM) finishes the current step,
    checkpoints it and raises ``RunInterrupted``; a second stops at once (that step is not
    recorded) and raises it too. A health alert whose check is set to ``stop`` (``synco.cotrain.health``)
    takes the first path after the step it fires on: checkpoint, then ``RunInterrupted`` (exit
    code 3). A served endpoint that fails for good (``synco.core.served.ServedError``, after its retries) stops the run
    as a second Ctrl-C does: the step in progress is not recorded (exit code 4). ``--resume`` continues from the
    latest checkpoint, or from step 0 when there is none.
    """
    if resume is None and cfg.run_id is None:
        cfg = cfg.model_copy(update={"run_id": new_run_id(cfg)})  # named before anything can stop the run
    run_dir = Path(resume) if resume is not None else Path(cfg.runs_dir) / str(cfg.run_id)
    try:
        run = setup_run(cfg, resume, log=log)
        try:
            return _train(run)
        finally:
            if run.pipeline is not None:
                run.pipeline.close()
            run.state.pool.close()
            close_policies(run.state)
            close_domain(run.state.domain)
    except RunInterrupted:
        raise
    except KeyboardInterrupt:  # before the first step, or a second Ctrl-C mid-step
        raise RunInterrupted.at_once(run_dir) from None
    except ServedError as e:  # a served endpoint failed for good: the step in progress is not recorded
        raise RunInterrupted.served_failure(run_dir, e) from None


def close_policies(state: CoTrainState) -> None:
    """Stop what the agents and the checks run outside this process (the Ray backend's actors); nothing for
    in-process ones."""
    for policy in (state.synthesizer, state.reasoner):
        close = getattr(policy, "close", None)
        if callable(close):
            close()
    close_remote = getattr(state.checker, "close_remote", None)  # the Ray check workers (ray_checks)
    if callable(close_remote):
        close_remote()


def close_domain(domain: object) -> None:
    """Stop what the domain runs outside this process (rgym's generator worker), so that a program running one run
    after another (a bench) does not keep one worker per finished run; nothing for domains without any."""
    close = getattr(domain, "close", None)
    if callable(close):
        close()


def _train(run: Run) -> RunSummary:
    """The body of ``train``: held-out before, the steps, the final checkpoint, the dataset and the summary."""
    from tqdm.auto import tqdm

    cfg = run.cfg
    before_path = run.dir / "heldout_before.json"
    if run.heldout and read_json(before_path) is None:  # absent, or torn by a kill while writing it
        write_atomic(before_path, json.dumps(evaluate_heldout_both(run)))
    loggers = Loggers(run)
    monitor = health_monitor(run)
    hooks = build_hooks(run, loggers, monitor)
    bar = tqdm(range(run.start_step, cfg.steps), initial=run.start_step, total=cfg.steps, disable=not cfg.progress,
               desc="co-training", dynamic_ncols=True)
    try:
        with StopSignals() as signals:
            _run_steps(run, bar, hooks, loggers, monitor, signals)
        if cfg.steps > run.start_step or latest_checkpoint(run.dir) is None:
            save_checkpoint(run, cfg.steps - 1)
    finally:
        bar.close()
        loggers.close()
    summary = summarize(run, before_path)
    write_atomic(run.dir / "summary.json", summary.model_dump_json(indent=2))
    return summary


def _run_steps(run: Run, bar: Any, hooks: list[StepHook], loggers: Loggers, monitor: HealthMonitor,
               signals: StopSignals) -> None:
    """Each step of ``bar``: the protocol's step, its valid tasks and metrics line, the hooks, and the stop
    (``RunInterrupted`` after a signal or a stop alert; the checkpoint hook has saved the step)."""
    st = run.state
    run_step = protocol_step(run.protocol) if run.pipeline is None else (lambda _, step: run.pipeline.step(step))
    for step in bar:
        stats = run_step(st, step)
        st.pool.append_step_jsonl(run.dir / "valid_tasks.jsonl", step, export_fields(st.domain))
        loggers.log(stats)
        ctx = StepContext(run, step, stats, signals)
        run_hooks(hooks, ctx)
        if ctx.stopping() and signals.signum is not None:
            raise RunInterrupted.after_step(run.dir, step, signals.signum)
        if ctx.stopping():
            raise RunInterrupted.health_stop(run.dir, step, ctx.stops)
        bar.set_postfix(progress_postfix(stats, monitor.n_alerts), refresh=False)


def progress_postfix(stats: StepStats, alerts: int = 0) -> dict[str, str]:
    """The live metrics on the progress bar; ``agree`` (label agreement) only when consensus ran,
    ``alerts`` (health alerts so far) only when one fired."""
    postfix = {"R_rew": f"{stats.reasoner_reward:.2f}", "valid": f"{stats.valid_rate:.2f}",
               "grad": f"{stats.gradient_share:.2f}", "S_rew": f"{stats.synth_reward:+.2f}"}
    if stats.label_agreement is not None:
        postfix["agree"] = f"{stats.label_agreement:.2f}"
    if alerts:
        postfix["alerts"] = str(alerts)
    return postfix
