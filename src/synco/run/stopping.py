"""Stopping a run safely: the errors a run raises and the signal handling around the step loop."""

from __future__ import annotations

import os
import shlex
import signal
import threading
from pathlib import Path
from typing import Any, Sequence

from synco.cotrain.health import Alert
from synco.run.checkpoints import latest_checkpoint


class RunError(RuntimeError):
    """A run directory that cannot be resumed as it is; the message says why and what to do."""


class RunInterrupted(KeyboardInterrupt):
    """A run stopped by Ctrl-C or SIGTERM: ``message`` says where, ``resume_command`` how to continue."""

    def __init__(self, run_dir: Path, message: str, exit_code: int = 130) -> None:
        super().__init__(message)
        self.run_dir, self.message, self.exit_code = Path(run_dir), message, exit_code

    @classmethod
    def after_step(cls, run_dir: Path, step: int, signum: int) -> "RunInterrupted":
        """Stopped cleanly after ``step``, which was checkpointed."""
        return cls(run_dir, f"stopped after step {step} (saved {run_dir / 'checkpoints' / f'step_{step}'})",
                   128 + signum)

    @classmethod
    def health_stop(cls, run_dir: Path, step: int, alerts: Sequence[Alert]) -> "RunInterrupted":
        """Stopped by health checks whose action is ``stop``, after ``step``, which was checkpointed (exit code 3)."""
        names = ", ".join(a.check for a in alerts)
        return cls(run_dir, f"health check {names} stopped the run after step {step} "
                            f"({'; '.join(a.message for a in alerts)}; saved {run_dir / 'checkpoints' / f'step_{step}'}; "
                            f"alerts in {run_dir / 'alerts.jsonl'}). Resuming goes on: an alert fires once per episode "
                            f"(or set health.<check>.action=warn)", 3)

    @classmethod
    def at_once(cls, run_dir: Path) -> "RunInterrupted":
        """Stopped wherever it was: a step in progress is not recorded (the pool rolls it back)."""
        ckpt = latest_checkpoint(run_dir) if run_dir.is_dir() else None
        where = (f"resuming continues after {ckpt.name}" if ckpt is not None
                 else "no checkpoint yet, so resuming restarts from step 0")
        return cls(run_dir, f"stopped at once (a step in progress is not recorded; {where})")

    @classmethod
    def served_failure(cls, run_dir: Path, error: Exception) -> "RunInterrupted":
        """A served endpoint failed for good mid-run: stopped at once, exit code 4 (the message names the endpoint
        and the setting; resume once the server is back)."""
        stopped = cls.at_once(run_dir)
        return cls(run_dir, f"{error}; {stopped.message.replace('stopped at once', 'stopped')}", 4)

    def resume_command(self, overrides: Sequence[str] = ()) -> str | None:
        """The shell command that continues this run, or None when its directory holds no config yet."""
        if not (self.run_dir / "config.yaml").is_file():
            return None
        return shlex.join(["synco", "train", "--resume", str(self.run_dir), *overrides])


class StopSignals:
    """Signal handling around the step loop (main thread only; elsewhere nothing changes).

    The first SIGINT or SIGTERM only sets ``signum``: the loop finishes the step, checkpoints
    it and stops. A second one raises KeyboardInterrupt at once.
    """

    def __init__(self) -> None:
        self.signum: int | None = None
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> "StopSignals":
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler if handler is not None else signal.SIG_DFL)

    def _handle(self, signum: int, frame: Any) -> None:
        if self.signum is not None:
            raise KeyboardInterrupt
        self.signum = signum
        try:  # os.write, not print: a handler may run while the main thread is inside a print
            os.write(2, b"\nstopping after this step, which is then checkpointed (Ctrl-C again to stop at once)\n")
        except OSError:
            pass
