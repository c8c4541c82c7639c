"""The names of the former one-file trainer, re-exported for users' scripts (``from synco.run.trainer import
train``); new code imports them from their modules in ``synco.run``:

    setup.py        setup_run (the run directory's files are listed there)
    rundir.py       the run directory and pool: open_run_dir, create_run_dir, require_writable, open_pool
    resume.py       where a resumed run continues: load_trainer_state, restore_records, rewind_run
    build.py        build_domain, build_policies, build_agents, build_consensus_checker, build_verifier,
                    step_settings (StepSettings from RunConfig)
    rng.py          seed_everything, rng_state, set_rng_state
    loop.py         train, the step loop, close_policies, progress_postfix
    hooks.py        the step hooks (health, report refresh, control check, proposer, reflector, held-out curve,
                    checkpoint) and build_hooks
    checkpoints.py  save_checkpoint, checkpoint_due, usable_checkpoint, checkpoint_problem, latest_checkpoint
    logs.py         metrics / alerts / held-out logs (Loggers), truncate_metrics
    heldout.py      evaluate_heldout and its greedy / sampled wrappers
    summary.py      RunSummary, summarize, format_summary
    stopping.py     RunError, RunInterrupted, StopSignals
    state.py        Run, new_run_id

A name is looked up where it is defined: to replace one in a test, patch its own module (e.g.
``synco.run.build.build_policies``), not this one.
"""

from synco.learn.build import build_policy, resolve_model_path
from synco.run.build import build_agents, build_consensus_checker, build_domain, build_policies, build_verifier, step_settings
from synco.run.checkpoints import (
    checkpoint_due,
    checkpoint_problem,
    checkpoints,
    latest_checkpoint,
    save_checkpoint,
    usable_checkpoint,
)
from synco.run.heldout import evaluate_heldout, evaluate_heldout_both, evaluate_heldout_greedy
from synco.run.hooks import health_monitor, propose_factor, reflects
from synco.run.logs import Loggers
from synco.run.loop import close_policies, progress_postfix, train
from synco.run.resume import rewind_run
from synco.run.rng import rng_state, seed_everything, set_rng_state
from synco.run.rundir import create_run_dir, open_pool, require_writable
from synco.run.setup import setup_run
from synco.run.state import Run, new_run_id
from synco.run.stopping import RunError, RunInterrupted
from synco.run.summary import RunSummary, format_summary, summarize

__all__ = [
    "Loggers", "Run", "RunError", "RunInterrupted", "RunSummary", "build_agents", "build_consensus_checker",
    "build_domain", "build_policies", "build_policy", "build_verifier", "checkpoint_due", "checkpoint_problem",
    "checkpoints", "close_policies", "create_run_dir", "evaluate_heldout", "evaluate_heldout_both",
    "evaluate_heldout_greedy", "format_summary", "health_monitor", "latest_checkpoint", "new_run_id", "open_pool",
    "progress_postfix", "propose_factor", "reflects", "require_writable", "resolve_model_path", "rewind_run",
    "rng_state", "save_checkpoint", "seed_everything", "set_rng_state", "setup_run", "step_settings", "summarize",
    "train", "usable_checkpoint",
]
