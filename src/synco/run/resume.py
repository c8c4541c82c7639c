"""Where a resumed run continues: the checkpoint's trainer state, and the run's records rewound to it."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from synco.config import RunConfig
from synco.core.pool import TaskPool
from synco.core.report import CapabilityReport
from synco.evosyn.run import truncate_logs
from synco.evosyn.space import FactorSpace
from synco.run.logs import truncate_metrics
from synco.cotrain.protocols.base import TrainingProtocol
from synco.run.stopping import RunError


@dataclass
class ResumePoint:
    """What a checkpoint restores besides weights and RNG states: the next step, the report, the factor space."""

    start_step: int
    report: CapabilityReport
    space: FactorSpace | None = None


def load_trainer_state(cfg: RunConfig, ckpt: Path | None, log: Callable[[str], None] = print) -> dict[str, Any]:
    """The checkpoint's ``trainer_state.pt`` ({} without one). Under ``threads=auto`` the thread count the run
    started with is taken back here, before any model (or Ray actor, which copies the driver's count) is built:
    CPU results are bit-identical only at equal counts, so the resume stays exact."""
    import torch

    trainer_state = torch.load(ckpt / "trainer_state.pt", weights_only=False) if ckpt is not None else {}
    saved_threads = trainer_state.get("threads")
    if cfg.threads == "auto" and saved_threads and saved_threads != torch.get_num_threads():
        torch.set_num_threads(saved_threads)
        log(f"torch threads: {saved_threads} (as when the run started)")
    return trainer_state


def restore_records(protocol: TrainingProtocol, run_dir: Path, ckpt: Path, trainer_state: dict[str, Any],
                    pool: TaskPool, log: Callable[[str], None] = print) -> ResumePoint:
    """Rewind the run's records to the checkpoint (``rewind_run``, the Reflector's logs) and read back its report
    and factor space. A protocol that differs from the checkpoint's is a RunError before anything is rewound."""
    problem = protocol.resume_problem(trainer_state.get("protocol"))
    if problem is not None:  # before anything is rewound: the run stays as it was
        raise RunError(f"--resume {run_dir}: {problem}; resume with the run's own settings, or start a new run")
    last = trainer_state["step"]
    dropped = rewind_run(run_dir, pool, last, log)
    log(f"resuming {run_dir} after step {last} ({ckpt.relative_to(run_dir)}){dropped}")
    space = trainer_state.get("factor_space")
    truncate_logs(run_dir, last, RunError, log)
    return ResumePoint(start_step=last + 1, report=CapabilityReport.from_json(trainer_state["report"]),
                       space=FactorSpace.model_validate_json(space) if space else None)


def restart_records(run_dir: Path, pool: TaskPool, log: Callable[[str], None] = print) -> None:
    """A resumed run without a checkpoint restarts from step 0 in its directory: everything recorded is dropped."""
    dropped = rewind_run(run_dir, pool, -1, log)
    truncate_logs(run_dir, -1, RunError, log)
    log(f"no checkpoint under {run_dir / 'checkpoints'}: restarting from step 0{dropped}")


def rewind_run(run_dir: Path, pool: TaskPool, last_step: int, log: Callable[[str], None] = print) -> str:
    """Drop what the run recorded after ``last_step`` (-1: everything): pool steps, metrics and held-out lines.

    A resumed run redoes those steps, so they must not stay twice. Returns a note for the
    caller's one-line message ("" when nothing was dropped).
    """
    pool_last = pool.last_step()
    n_tasks = pool.truncate_after(last_step)
    truncate_metrics(run_dir / "metrics.jsonl", last_step, log)
    truncate_metrics(run_dir / "heldout.jsonl", last_step + 1, log)  # its "step" counts steps done
    truncate_metrics(run_dir / "alerts.jsonl", last_step, log)
    if pool_last is None or pool_last <= last_step:
        return ""
    return f"; dropped the pool's steps {last_step + 1}..{pool_last} ({n_tasks} tasks), which are redone"
