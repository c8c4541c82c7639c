"""The run directory and its pool: created for a new run, checked for a resumed one, before any model loads."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable

from synco.config import RunConfig, dump_config
from synco.core.pool import PoolError, TaskPool
from synco.run.checkpoints import usable_checkpoint
from synco.run.files import write_atomic
from synco.run.state import new_run_id
from synco.run.stopping import RunError


def open_run_dir(cfg: RunConfig, resume: Path | None, log: Callable[[str], None] = print) -> tuple[Path, Path | None]:
    """(run directory, checkpoint to continue from or None): ``resume`` must be writable and is searched for its
    newest intact checkpoint; a new run's directory is created with its ``config.yaml`` (and must not hold a run)."""
    if resume is not None:
        run_dir = Path(resume)
        require_writable(run_dir)
        ckpt = usable_checkpoint(run_dir, log)
    else:
        run_dir = Path(cfg.runs_dir) / (cfg.run_id or new_run_id(cfg))
        if (run_dir / "pool.sqlite").exists():
            raise FileExistsError(f"run directory {run_dir} already holds a run; use --resume {run_dir} or another run_id")
        ckpt = None
        create_run_dir(run_dir, cfg.runs_dir, dump_config(cfg))
    (run_dir / "reports").mkdir(exist_ok=True)
    return run_dir, ckpt


def require_writable(run_dir: Path) -> None:
    """Raise RunError unless resuming can write the run directory and its pool and logs."""
    if not run_dir.is_dir():
        raise FileNotFoundError(f"--resume {run_dir}: no such run directory")
    probe = run_dir / f".write-probe-{os.getpid()}"
    files = [run_dir / n for n in ("pool.sqlite", "pool.sqlite-wal", "metrics.jsonl", "heldout.jsonl")]
    try:
        probe.touch()
        probe.unlink()
        for f in files:
            if f.exists():
                open(f, "ab").close()  # opened for appending, nothing written
    except OSError as e:
        raise RunError(
            f"--resume {run_dir}: cannot write {e.filename or run_dir} ({e.strerror}); resuming writes the pool, "
            f"metrics and checkpoints in the run directory: make it writable (e.g. chmod -R u+w {run_dir}) "
            f"or resume a writable copy of it") from None


def create_run_dir(run_dir: Path, runs_dir: str, config_yaml: str) -> None:
    """Create a new run's folder under ``runs_dir`` and write its ``config.yaml``.

    Before any model loads: a ``runs_dir`` that cannot hold run folders (a path under a file,
    a read-only folder) is a RunError naming the field and value, not an OS traceback.
    """
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        write_atomic(run_dir / "config.yaml", config_yaml)
    except OSError as e:
        blocker = next((p for p in run_dir.parents if p.exists() and not p.is_dir()), None)
        why = (f"{blocker} is a file, not a folder" if blocker is not None
               else f"{e.strerror or e}{f': {e.filename}' if e.filename else ''}")
        raise RunError(f"runs_dir={runs_dir!r}: cannot create the run directory {run_dir.name} there ({why}); "
                       f"set runs_dir to a folder you can write") from None


def open_pool(path: Path, check: bool = False) -> TaskPool:
    """The run's pool; with ``check`` (resuming) a full integrity check first. A damaged pool is a RunError."""
    try:
        pool = TaskPool(path)
    except PoolError as e:
        raise RunError(_damaged_pool_advice(e, path)) from None
    if check:
        try:
            pool.check_integrity()
        except PoolError as e:
            pool.close()
            raise RunError(_damaged_pool_advice(e, path)) from None
    return pool


def _damaged_pool_advice(error: PoolError, path: Path) -> str:
    return (f"{error}. The run cannot go on without its record of every task: restore {path.name} from a backup, "
            f"or start a new run with the same config: synco train --config {path.parent / 'config.yaml'} run_id=NEW_ID")
