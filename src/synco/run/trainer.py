"""A co-training run: build everything from the config, loop over steps, checkpoint, resume, summarise.

The step itself lives in ``synco.cotrain.engine.cotrain_step`` (wrapped by the training protocol's
step function, ``synco.run.steps.protocol_step``); this module is the plumbing around
it: the run directory, the held-out evaluation before and after, metrics (JSONL, TensorBoard,
optional W&B), checkpoints and exact resume.

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
import os
import random
import shlex
import shutil
import signal
import sys
import threading
import time
import warnings
import zipfile
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Sequence

from pydantic import BaseModel

from synco.grading.answers import AnswerChecker
from synco.grading.grade import grade
from synco.config import RunConfig, check_runnable, domain_context, dump_config
from synco.domains.base import Domain, HeldoutItem, solve
from synco.domains.registry import get_domain
from synco.cotrain.engine import CoTrainState, StepSettings, StepStats, cotrain_step
from synco.evosyn.reflector import python_seed
from synco.evosyn.run import (
    build_evo_state,
    control_and_log,
    propose_and_log,
    reflect_and_log,
    truncate_logs,
    write_space,
)
from synco.evosyn.space import FactorSpace
from synco.cotrain.health import Alert, HealthMonitor, trim_history
from synco.learn.build import build_policy, resolve_model_path  # noqa: F401  (resolve_model_path: used by the CLI)
from synco.learn.hf_policy import HFPolicy
from synco.core.policy import Policy, SamplingParams, generate_seeded
from synco.core.pool import PoolError, TaskPool
from synco.run.steps import closes_round, describe, protocol_state, protocol_step, resume_problem, round_training
from synco.core.report import CapabilityReport, build_report
from synco.grading.verifier import TaskVerifier


class RunSummary(BaseModel):
    """What ``synco train`` prints at the end (also ``summary.json``)."""

    run_dir: str
    steps: int
    heldout_before: dict[str, float] = {}
    heldout_after: dict[str, float] = {}
    heldout_sampled_before: dict[str, float] = {}  # mean over heldout_samples answers at the training temperature
    heldout_sampled_after: dict[str, float] = {}
    heldout_curve: dict[int, float] = {}  # step -> greedy held-out mean, from heldout.jsonl (heldout_every)
    gradient_share_first: float = 0.0
    gradient_share_last: float = 0.0
    valid_rate: float = 0.0
    groups_first: dict[str, float] = {}
    groups_last: dict[str, float] = {}
    sec_per_step: float = 0.0
    sec_generate: float = 0.0
    sec_train: float = 0.0
    sec_other: float = 0.0
    n_tasks: int = 0
    n_valid_tasks: int = 0
    controllability_first: float | None = None  # EvoSyn: share of valid targeted cards on their cell, first 10 %
    controllability_last: float | None = None
    factor_coverage: float | None = None  # mean over steps
    factor_balance: float | None = None
    allocation_gap_spearman: float | None = None  # mean over Designer steps of rho(cell need, cell slots)
    factor_changes: list[dict[str, Any]] = []  # factors.jsonl: promotions / confirmations / retirements / control checks
    alerts: int = 0  # health alerts fired (alerts.jsonl)
    alerts_by_check: dict[str, int] = {}
    protocol: str = "online"  # synco.cotrain.protocols
    round_training: list[dict[str, Any]] = []  # rounds / rft: what each round's training did
    protocol_notes: list[str] = []  # the summary's lines about the protocol's rounds or phases


def build_domain(cfg: RunConfig) -> Domain:
    return get_domain(cfg.domain, domain_context(cfg))


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
    if cfg.checker is None and cfg.shared_base and fresh and hasattr(reasoner, "shared"):
        from synco.learn.shared_base import BaseView

        return BaseView(reasoner.shared, cfg.reasoner)  # type: ignore[union-attr]
    base = cfg.checker if cfg.checker is not None else cfg.reasoner.model_copy(update={"lora": None})
    return build_policy(base.model_copy(update={"trainable": False}))


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
                built.append(build_policy(getattr(cfg, role), folder))
        return built[0], built[1]
    if cfg.shared_base:
        from synco.learn.shared_base import SharedBase

        shared = SharedBase.from_configs(cfg.synthesizer, cfg.reasoner,
                                         model_path=resolve_model_path(cfg.synthesizer.model_path), adapter_dirs=dirs)
        return shared.synthesizer, shared.reasoner
    return build_policy(cfg.synthesizer, dirs[0]), build_policy(cfg.reasoner, dirs[1])


def seed_everything(seed: int) -> None:
    import numpy as np
    import torch

    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def rng_state(rng: random.Random) -> dict[str, Any]:
    import numpy as np
    import torch

    state = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state(),
             "run_rng": rng.getstate()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()  # GPU sampling draws from these: an exact resume needs them
    return state


def set_rng_state(state: dict[str, Any], rng: random.Random) -> None:
    import numpy as np
    import torch

    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    rng.setstate(state["run_rng"])
    cuda = state.get("cuda")
    if cuda is not None:
        visible = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if visible == len(cuda):
            torch.cuda.set_rng_state_all(cuda)
        else:
            warnings.warn(f"the checkpoint holds the RNG states of {len(cuda)} GPUs and {visible} are visible now: "
                          "the run continues, but GPU sampling will not repeat the uninterrupted run", stacklevel=2)


def evaluate_heldout(policy: Policy, domain: Domain, items: Sequence[HeldoutItem], checker: AnswerChecker,
                     max_new_tokens: int, batch_size: int = 256, params: SamplingParams | None = None,
                     n: int = 1, seed: int = 0, seed_per_request: bool = False) -> dict[str, float]:
    """Held-out accuracy per group (e.g. difficulty level): greedy by default, else the mean over ``n`` samples.

    Sampling runs under a forked torch RNG seeded with ``seed``, so the evaluation is
    repeatable and never shifts the training run's random stream. ``seed_per_request``: each
    batch is one request with its own seed derived from ``seed`` (the same in every backend).
    """
    import torch

    from synco.core.seeds import derive_seed

    params = params or SamplingParams(greedy=True, max_new_tokens=max_new_tokens)
    correct: dict[str, list[bool]] = {}
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        for start in range(0, len(items), batch_size):
            chunk = items[start:start + batch_size]
            outs = solve(policy, domain, [it.problem for it in chunk], n, params,
                         derive_seed(seed, "heldout", start) if seed_per_request else None)
            marks = iter(grade(checker, [(c.text, it.answer) for it, group in zip(chunk, outs) for c in group]))
            for it, group in zip(chunk, outs):
                correct.setdefault(it.group, []).extend(next(marks).correct for _ in group)
    return {g: sum(v) / len(v) for g, v in sorted(correct.items(), key=lambda kv: _group_key(kv[0]))}


def evaluate_heldout_greedy(run: "Run") -> dict[str, float]:
    """Greedy held-out accuracy per group of the run's Reasoner."""
    st = run.state
    return evaluate_heldout(st.reasoner, st.domain, run.heldout, st.checker, run.cfg.reasoner.sampling.max_new_tokens,
                            seed_per_request=run.cfg.seed_per_request)


def evaluate_heldout_both(run: "Run", greedy: dict[str, float] | None = None) -> dict[str, dict[str, float]]:
    """``{"greedy": ..., "sampled": ...}`` held-out accuracy of the run's Reasoner (sampled only when asked);
    ``greedy``, when given, is a greedy result already computed for the current weights."""
    cfg, st = run.cfg, run.state
    out = {"greedy": greedy if greedy is not None else evaluate_heldout_greedy(run)}
    if cfg.heldout_samples:
        out["sampled"] = evaluate_heldout(st.reasoner, st.domain, run.heldout, st.checker, 0,
                                          params=cfg.reasoner.sampling, n=cfg.heldout_samples, seed=cfg.seed,
                                          seed_per_request=cfg.seed_per_request)
    return out


def _mean(d: dict[str, float]) -> float:
    return sum(d.values()) / len(d) if d else float("nan")


def _group_key(g: str) -> tuple[int, str]:
    digits = "".join(ch for ch in g if ch.isdigit())
    return (int(digits) if digits else 10**9, g)


@dataclass
class Run:
    """A live run: its directory, config and the state the step function works on."""

    cfg: RunConfig
    dir: Path
    state: CoTrainState
    start_step: int
    heldout: list[HeldoutItem]

    @property
    def ckpt_dir(self) -> Path:
        return self.dir / "checkpoints"


def new_run_id(cfg: RunConfig) -> str:
    stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
    return f"{cfg.domain}-{cfg.mode if cfg.protocol == 'online' else cfg.protocol}-s{cfg.seed}-{stamp}"


def latest_checkpoint(run_dir: Path) -> Path | None:
    steps = sorted((int(p.name.split("_")[1]), p) for p in (run_dir / "checkpoints").glob("step_*")
                   if (p / "trainer_state.pt").is_file())
    return steps[-1][1] if steps else None


# ------------------------------------------------------------------ resuming and stopping safely


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

    def resume_command(self, overrides: Sequence[str] = ()) -> str | None:
        """The shell command that continues this run, or None when its directory holds no config yet."""
        if not (self.run_dir / "config.yaml").is_file():
            return None
        return shlex.join(["synco", "train", "--resume", str(self.run_dir), *overrides])


class _StopRequest:
    """Signal handling around the step loop (main thread only; elsewhere nothing changes).

    The first SIGINT or SIGTERM only sets ``signum``: the loop finishes the step, checkpoints
    it and stops. A second one raises KeyboardInterrupt at once.
    """

    def __init__(self) -> None:
        self.signum: int | None = None
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> "_StopRequest":
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
        _write_atomic(run_dir / "config.yaml", config_yaml)
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


def checkpoints(run_dir: Path) -> list[Path]:
    """Every ``checkpoints/step_N`` folder, oldest first."""
    found = [p for p in (run_dir / "checkpoints").glob("step_*") if p.is_dir() and p.name[5:].isdigit()]
    return sorted(found, key=lambda p: int(p.name[5:]))


def usable_checkpoint(run_dir: Path, log: Callable[[str], None] = print) -> Path | None:
    """The newest intact checkpoint, or None. A damaged one (a truncated file) is moved aside to
    ``damaged-step_N`` and the next older one tried; one line says so."""
    for leftover in (run_dir / "checkpoints").glob(".tmp_step_*"):  # a kill while saving
        shutil.rmtree(leftover, ignore_errors=True)
    for ckpt in reversed(checkpoints(run_dir)):
        problem = checkpoint_problem(ckpt)
        if problem is None:
            return ckpt
        aside = ckpt.with_name("damaged-" + ckpt.name)
        shutil.rmtree(aside, ignore_errors=True)
        ckpt.rename(aside)
        log(f"checkpoint {ckpt} is damaged ({problem}): moved to {aside.name}, falling back to an older one")
    return None


def checkpoint_problem(ckpt: Path) -> str | None:
    """What makes a checkpoint folder unusable (a missing or truncated file), or None; loads no weights.

    ``.pt`` / ``.bin`` files are zip archives whose index sits at the end, so truncation loses it;
    a ``.safetensors`` file's header states its exact size; ``.json`` files must parse.
    """
    if not (ckpt / "trainer_state.pt").is_file():
        return "trainer_state.pt is missing"
    for role in ("synthesizer", "reasoner"):
        if not any((ckpt / role).glob("*.safetensors")) and not any((ckpt / role).glob("*.bin")):
            return f"{role}/ holds no weights"
    for f in sorted(ckpt.rglob("*")):
        try:
            if f.suffix in (".pt", ".bin"):
                zipfile.ZipFile(f).close()
            elif f.suffix == ".safetensors":
                _check_safetensors(f)
            elif f.suffix == ".json":
                json.loads(f.read_bytes())
        except (OSError, ValueError, zipfile.BadZipFile) as e:
            return f"{f.relative_to(ckpt)}: {e}"
    return None


def _check_safetensors(path: Path) -> None:
    """Raise ValueError unless the file is as long as its header says (8-byte length, JSON header, data)."""
    size = path.stat().st_size
    with path.open("rb") as fh:
        n = int.from_bytes(fh.read(8), "little")
        if size < 8 or 8 + n > size:
            raise ValueError(f"truncated: {size} bytes, header claims {n}")
        header = json.loads(fh.read(n))
    end = max((int(v["data_offsets"][1]) for k, v in header.items() if k != "__metadata__"), default=0)
    if 8 + n + end != size:
        raise ValueError(f"truncated: {size} bytes, expected {8 + n + end}")


def rewind_run(run_dir: Path, pool: TaskPool, last_step: int, log: Callable[[str], None] = print) -> str:
    """Drop what the run recorded after ``last_step`` (-1: everything): pool steps, metrics and held-out lines.

    A resumed run redoes those steps, so they must not stay twice. Returns a note for the
    caller's one-line message ("" when nothing was dropped).
    """
    pool_last = pool.last_step()
    n_tasks = pool.truncate_after(last_step)
    _truncate_metrics(run_dir / "metrics.jsonl", last_step, log)
    _truncate_metrics(run_dir / "heldout.jsonl", last_step + 1, log)  # its "step" counts steps done
    _truncate_metrics(run_dir / "alerts.jsonl", last_step, log)
    if pool_last is None or pool_last <= last_step:
        return ""
    return f"; dropped the pool's steps {last_step + 1}..{pool_last} ({n_tasks} tasks), which are redone"


def _write_atomic(path: Path, text: str) -> None:
    """Write a whole file or nothing: a kill mid-write leaves the old file (or none), never half of one."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    tmp.replace(path)


def _read_json(path: Path) -> Any:
    """A JSON file's content, or None when it is absent or unreadable."""
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def setup_run(cfg: RunConfig, resume: Path | None = None, log: Callable[[str], None] = print) -> Run:
    """Create (or reopen, for ``resume``) the run directory and everything the loop needs.

    Resuming continues after the latest intact checkpoint, or restarts from step 0 when
    there is none; either way what the run recorded after that point is dropped (``rewind_run``).
    """
    import torch

    from synco.core.threads import apply_threads

    check_runnable(cfg)  # inputs on disk (benchmark files) before anything is created or loaded
    log(apply_threads(cfg.threads).describe())
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
    pool = open_pool(run_dir / "pool.sqlite", check=resume is not None)  # before the models: a bad pool fails fast

    seed_everything(cfg.seed)
    rng = random.Random(cfg.seed)
    domain = build_domain(cfg)
    checker = AnswerChecker()
    heldout = domain.heldout(cfg.heldout_per_group, seed=cfg.seed + 12345) if cfg.heldout_per_group else []

    trainer_state = torch.load(ckpt / "trainer_state.pt", weights_only=False) if ckpt is not None else {}
    saved_threads = trainer_state.get("threads")
    if cfg.threads == "auto" and saved_threads and saved_threads != torch.get_num_threads():
        # the count the run started with, before any model (or Ray actor, which takes the driver's count) is
        # built: CPU results are bit-identical only at equal counts, so the resume stays exact
        torch.set_num_threads(saved_threads)
        log(f"torch threads: {saved_threads} (as when the run started)")

    synthesizer, reasoner = build_policies(cfg, ckpt)
    if cfg.synth_decoding == "card":
        from synco.rollout.card_decoding import constrain_synthesizer

        constrain_synthesizer(synthesizer, domain, cfg.synthesizer.sampling.max_new_tokens)
    if ckpt is not None:
        synthesizer.load_state(ckpt / "synthesizer_state")
        reasoner.load_state(ckpt / "reasoner_state")

    verifier_cfg = cfg.verifier
    oracle = domain.oracle if domain.has_oracle else None
    verifier: TaskVerifier
    if cfg.backend == "ray" and cfg.ray.checks.workers:  # answer checks and per-card verification as Ray tasks
        from synco.distributed.ray_checks import build_ray_checks

        checker, verifier = build_ray_checks(cfg.ray, verifier_cfg, oracle, checker)
    else:
        verifier = TaskVerifier(verifier_cfg, checker=checker, oracle=oracle)
    report = build_report([], cfg.report, step=0)
    space = None
    start_step = 0
    if ckpt is not None:
        problem = resume_problem(trainer_state.get("protocol"), cfg)
        if problem is not None:  # before anything is rewound: the run stays as it was
            raise RunError(f"--resume {run_dir}: {problem}; resume with the run's own settings, or start a new run")
        start_step = trainer_state["step"] + 1
        dropped = rewind_run(run_dir, pool, trainer_state["step"], log)
        log(f"resuming {run_dir} after step {trainer_state['step']} ({ckpt.relative_to(run_dir)}){dropped}")
        verifier.load_pool(pool.valid_problems())
        report = CapabilityReport.from_json(trainer_state["report"])
        if trainer_state.get("factor_space"):
            space = FactorSpace.model_validate_json(trainer_state["factor_space"])
        truncate_logs(run_dir, trainer_state["step"])
        set_rng_state(trainer_state["rng"], rng)
    elif resume is not None:
        dropped = rewind_run(run_dir, pool, -1, log)
        truncate_logs(run_dir, -1)
        log(f"no checkpoint under {run_dir / 'checkpoints'}: restarting from step 0{dropped}")
    pool.export_jsonl(run_dir / "valid_tasks.jsonl")  # from the pool as it now stands; each step then appends its rows

    settings = StepSettings(
        mode=cfg.mode, n_cards=cfg.n_cards, n_contexts=cfg.n_contexts, k=cfg.k, group_factor=cfg.group_factor,
        synth_sampling=cfg.synthesizer.sampling, reasoner_sampling=cfg.reasoner.sampling,
        reasoner_rewards=cfg.reasoner_rewards, synth_rewards=cfg.synth_rewards,
        synth_scale_by_std=cfg.synthesizer.grpo.scale_adv_by_std,
        reasoner_scale_by_std=cfg.reasoner.grpo.scale_adv_by_std, consensus=cfg.consensus,
        consensus_m=cfg.consensus_m, checker_sampling=(cfg.checker or cfg.reasoner).sampling,
        evosyn=cfg.evosyn, window=cfg.report.window, seed_per_request=cfg.seed_per_request,
    )
    evo = build_evo_state(domain, space)
    if evo is not None:
        write_space(evo, run_dir)
    # static: the paper's fixed corpus, drawn once (from its own seeded stream) and revisited every step
    corpus = (domain.static_cards(random.Random(f"static-corpus:{cfg.seed}"), cfg.static_corpus_size)
              if cfg.mode == "static" else None)
    state = CoTrainState(settings=settings, domain=domain, synthesizer=synthesizer, reasoner=reasoner,
                         verifier=verifier, checker=checker, pool=pool, report=report, rng=rng,
                         consensus_checker=build_consensus_checker(cfg, domain, reasoner), evo=evo, corpus=corpus)
    return Run(cfg=cfg, dir=run_dir, state=state, start_step=start_step, heldout=heldout)


def reflects(cfg: RunConfig) -> bool:
    """Whether the Reflector runs: switched on, with learner feedback, in a mode where the Synthesizer writes."""
    return cfg.evosyn.reflector and cfg.evosyn.feedback and cfg.mode in ("cotrain", "frozen")


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


def save_checkpoint(run: Run, step: int) -> Path:
    """HF-format models plus optimizer/scheduler states, RNG states and the latest report."""
    import torch

    path = run.ckpt_dir / f"step_{step}"
    tmp = run.ckpt_dir / f".tmp_step_{step}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    for role, policy in (("synthesizer", run.state.synthesizer), ("reasoner", run.state.reasoner)):
        policy.save(tmp / role)
        policy.save_state(tmp / f"{role}_state")
    evo = run.state.evo
    torch.save({"step": step, "rng": rng_state(run.state.rng), "report": run.state.report.to_json(),
                "factor_space": evo.space.model_dump_json() if evo is not None else None,
                "threads": torch.get_num_threads(), "protocol": protocol_state(run.cfg, step)},
               tmp / "trainer_state.pt")
    shutil.rmtree(path, ignore_errors=True)
    tmp.rename(path)  # a checkpoint is either whole or absent
    kept = sorted((int(p.name.split("_")[1]), p) for p in run.ckpt_dir.glob("step_*"))
    for _, old in kept[:-run.cfg.keep_checkpoints]:
        shutil.rmtree(old, ignore_errors=True)
    return path


def _truncate_metrics(path: Path, last_step: int, log: Callable[[str], None] = print) -> None:
    """Drop the JSONL rows logged after ``last_step`` (rows a resumed run will log again).

    A torn last line (the run was killed while writing it) is dropped and reported; an
    unreadable line elsewhere is a RunError naming the file and line.
    """
    if not path.exists():
        return
    lines = [ln for ln in path.read_bytes().decode("utf-8", errors="replace").splitlines() if ln.strip()]
    keep = []
    for i, ln in enumerate(lines):
        try:
            step = json.loads(ln)["step"]
        except (ValueError, KeyError, TypeError) as e:
            if i == len(lines) - 1:
                log(f"{path}: dropped a torn last line (the run was stopped while writing it)")
                continue
            raise RunError(f"{path}: line {i + 1} is not a JSON object with a step ({e}); fix or delete that line") from None
        if step <= last_step:
            keep.append(ln)
    _write_atomic(path, "".join(ln + "\n" for ln in keep))


class _Loggers:
    """metrics.jsonl always; TensorBoard and W&B when configured."""

    def __init__(self, run: Run):
        self.run_dir = run.dir
        self.metrics = open(run.dir / "metrics.jsonl", "a")
        self.tb = None
        self.wandb = None
        if run.cfg.tensorboard:
            from torch.utils.tensorboard import SummaryWriter

            # purge_step: a resumed run's TensorBoard hides the events of the steps it redoes
            resumed = (run.dir / "tb").exists()
            self.tb = SummaryWriter(str(run.dir / "tb"), purge_step=run.start_step if resumed else None)
        if run.cfg.wandb:
            try:
                import wandb
            except ImportError as e:
                raise RuntimeError("wandb=true but wandb is not installed: pip install wandb") from e
            self.wandb = wandb.init(project=run.cfg.wandb_project, name=run.dir.name, config=run.cfg.model_dump())

    def log(self, stats: StepStats) -> None:
        self.metrics.write(stats.model_dump_json() + "\n")
        self.metrics.flush()
        scalars = {k: v for k, v in stats.model_dump().items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
        if self.tb is not None:
            for k, v in scalars.items():
                if k != "step":
                    self.tb.add_scalar(_tb_name(k), v, stats.step)
        if self.wandb is not None:
            self.wandb.log({_tb_name(k): v for k, v in scalars.items() if k != "step"}, step=stats.step)

    def log_alert(self, alert: Alert) -> None:
        """One health alert: a line of ``alerts.jsonl``, ``health/<check>`` in TensorBoard and W&B."""
        with open(self.run_dir / "alerts.jsonl", "a") as f:
            f.write(alert.model_dump_json() + "\n")
        if self.tb is not None:
            self.tb.add_scalar(f"health/{alert.check}", alert.value, alert.step)
            self.tb.add_text("health/alerts", f"{alert.action}: {alert.message}", alert.step)
        if self.wandb is not None:
            self.wandb.log({f"health/{alert.check}": alert.value}, step=alert.step)

    def log_heldout(self, step: int, greedy: dict[str, float]) -> None:
        """One point of the held-out learning curve: ``heldout.jsonl`` and ``heldout/*`` scalars."""
        with open(self.run_dir / "heldout.jsonl", "a") as f:
            f.write(json.dumps({"step": step, "mean": _mean(greedy), "greedy": greedy}) + "\n")
        if self.tb is not None:
            self.tb.add_scalar("heldout/greedy_mean", _mean(greedy), step)
            for g, v in greedy.items():
                self.tb.add_scalar(f"heldout/greedy_{g}", v, step)
        if self.wandb is not None:
            self.wandb.log({"heldout/greedy_mean": _mean(greedy)}, step=step)

    def close(self) -> None:
        self.metrics.close()
        if self.tb is not None:
            self.tb.close()
        if self.wandb is not None:
            self.wandb.finish()


def _tb_name(key: str) -> str:
    if key.startswith("reasoner_"):
        return "reasoner/" + key[len("reasoner_"):]
    if key.startswith("synth_"):
        return "synthesizer/" + key[len("synth_"):]
    if key.startswith("t_"):
        return "time/" + key[2:]
    return "tasks/" + key


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


def _jsonl_rows(path: Path) -> list[dict[str, Any]]:
    """The JSON objects of a JSONL file (none when it is absent)."""
    if not path.exists():
        return []
    return [json.loads(ln) for ln in path.read_text().splitlines() if ln.strip()]


def health_monitor(run: Run) -> HealthMonitor:
    """The run's health monitor, with the history and alert count a resumed run had recorded (already rewound)."""
    history = [StepStats.model_validate(row) for row in _jsonl_rows(run.dir / "metrics.jsonl")]
    return HealthMonitor(run.cfg.health, history=trim_history(history, run.cfg.health),
                         n_alerts=len(_jsonl_rows(run.dir / "alerts.jsonl")))


def train(cfg: RunConfig, resume: Path | None = None, log=print) -> RunSummary:
    """Run (or resume) a co-training run to ``cfg.steps`` steps and return its summary.

    Stopping a run never loses it: a first Ctrl-C (or SIGTERM) finishes the current step,
    checkpoints it and raises ``RunInterrupted``; a second stops at once (that step is not
    recorded) and raises it too. A health alert whose check is set to ``stop`` (``synco.cotrain.health``)
    takes the first path after the step it fires on: checkpoint, then ``RunInterrupted`` (exit
    code 3). ``--resume`` continues from the latest checkpoint, or from step 0 when there is none.
    """
    if resume is None and cfg.run_id is None:
        cfg = cfg.model_copy(update={"run_id": new_run_id(cfg)})  # named before anything can stop the run
    run_dir = Path(resume) if resume is not None else Path(cfg.runs_dir) / str(cfg.run_id)
    try:
        run = setup_run(cfg, resume, log=log)
        try:
            return _train(run)
        finally:
            run.state.pool.close()
            close_policies(run.state)
    except RunInterrupted:
        raise
    except KeyboardInterrupt:  # before the first step, or a second Ctrl-C mid-step
        raise RunInterrupted.at_once(run_dir) from None


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


def _train(run: Run) -> RunSummary:
    """The body of ``train``: held-out before, the steps, the final checkpoint, the dataset and the summary."""
    from tqdm.auto import tqdm

    cfg, st = run.cfg, run.state
    before_path = run.dir / "heldout_before.json"
    if run.heldout and _read_json(before_path) is None:  # absent, or torn by a kill while writing it
        _write_atomic(before_path, json.dumps(evaluate_heldout_both(run)))
    loggers = _Loggers(run)
    monitor = health_monitor(run)
    bar = tqdm(range(run.start_step, cfg.steps), initial=run.start_step, total=cfg.steps, disable=not cfg.progress,
               desc="co-training", dynamic_ncols=True)
    try:
        last_save = time.monotonic()
        with _StopRequest() as stop:
            run_step = cotrain_step if cfg.protocol == "online" else protocol_step(cfg)
            for step in bar:
                stats = run_step(st, step)
                st.pool.append_step_jsonl(run.dir / "valid_tasks.jsonl", step)
                loggers.log(stats)
                alerts = monitor.observe(stats)
                for alert in alerts:  # printed once per episode: a check fires again only after a good step
                    loggers.log_alert(alert)
                    tqdm.write(f"health alert ({alert.action}) at step {alert.step}: {alert.message}", file=sys.stderr)
                health_stop = [a for a in alerts if a.action == "stop"] if step + 1 < cfg.steps else []
                if (step + 1) % cfg.report_refresh_every == 0 or closes_round(cfg, step):
                    st.report = build_report(st.pool.recent(cfg.report.window), cfg.report, step=step + 1)
                    (run.dir / "reports" / f"step_{step + 1}.txt").write_text(st.domain.synthesizer_prompt(st.report))
                if reflects(cfg) and st.evo is not None:  # a promoted factor the Synthesizer cannot follow leaves the cells
                    control_and_log(st.evo, lambda: st.pool.recent(cfg.evosyn.reflector_settings.window), cfg.evosyn,
                                    step, run.dir)
                if cfg.evosyn.proposer and reflects(cfg) and st.evo is not None and (
                        (step + 1) % cfg.evosyn.proposer_settings.every == 0 or closes_round(cfg, step)):
                    propose_factor(run, step)
                if reflects(cfg) and st.evo is not None and ((step + 1) % cfg.evosyn.reflector_settings.every == 0
                                                             or closes_round(cfg, step)):
                    reflect_and_log(st.evo, st.pool.recent(cfg.evosyn.reflector_settings.window), cfg.evosyn, step,
                                    cfg.seed, run.dir)
                if run.heldout and cfg.heldout_every and (step + 1) % cfg.heldout_every == 0:
                    loggers.log_heldout(step + 1, evaluate_heldout_greedy(run))
                stopping = (stop.signum is not None or bool(health_stop)) and step + 1 < cfg.steps
                # the checkpoint comes last, so a checkpoint of step N means every file is complete up to step N
                if stopping or checkpoint_due(cfg, step, (time.monotonic() - last_save) / 60):
                    save_checkpoint(run, step)
                    last_save = time.monotonic()
                if stopping and stop.signum is not None:
                    raise RunInterrupted.after_step(run.dir, step, stop.signum)
                if stopping:
                    raise RunInterrupted.health_stop(run.dir, step, health_stop)
                bar.set_postfix(progress_postfix(stats, monitor.n_alerts), refresh=False)
        if cfg.steps > run.start_step or latest_checkpoint(run.dir) is None:
            save_checkpoint(run, cfg.steps - 1)
    finally:
        bar.close()
        loggers.close()
    summary = summarize(run, before_path)
    _write_atomic(run.dir / "summary.json", summary.model_dump_json(indent=2))
    return summary


def checkpoint_due(cfg: RunConfig, step: int, minutes_since_last: float) -> bool:
    """Whether to checkpoint after ``step``: every ``save_every`` steps when set, else once ``save_every_minutes``
    have passed since the last checkpoint (or the start). Never after the last step: ``train`` saves that one.

    One cadence at a time: a step cadence is a deliberate choice (e.g. for checkpoints of many GB)."""
    if step + 1 >= cfg.steps:
        return False
    if cfg.save_every > 0:
        return (step + 1) % cfg.save_every == 0
    return cfg.save_every_minutes > 0 and minutes_since_last >= cfg.save_every_minutes


def summarize(run: Run, before_path: Path) -> RunSummary:
    """Before/after held-out accuracy and the run's task statistics, from the run's files."""
    rows = [json.loads(ln) for ln in (run.dir / "metrics.jsonl").read_text().splitlines() if ln.strip()]
    summary = RunSummary(run_dir=str(run.dir), steps=len(rows))
    if run.heldout:
        before = json.loads(before_path.read_text())
        if "greedy" not in before:  # a run directory written before sampled evaluation existed
            before = {"greedy": before}
        curve_path = run.dir / "heldout.jsonl"
        curve = ([json.loads(ln) for ln in curve_path.read_text().splitlines() if ln.strip()]
                 if curve_path.exists() else [])
        at_end = curve[-1]["greedy"] if curve and curve[-1]["step"] == len(rows) else None  # no second greedy pass
        after = evaluate_heldout_both(run, greedy=at_end)
        summary.heldout_before, summary.heldout_after = before["greedy"], after["greedy"]
        if "sampled" in before and "sampled" in after:
            summary.heldout_sampled_before, summary.heldout_sampled_after = before["sampled"], after["sampled"]
        if curve:
            summary.heldout_curve = {0: _mean(before["greedy"]), **{c["step"]: c["mean"] for c in curve},
                                     len(rows): _mean(after["greedy"])}
    if rows:
        w = max(1, len(rows) // 10)
        first, last = rows[:w], rows[-w:]

        def share(rs: list[dict[str, Any]]) -> float:
            return sum(r["n_gradient_bearing"] for r in rs) / max(1, sum(r["n_valid"] for r in rs))

        def groups(rs: list[dict[str, Any]]) -> dict[str, float]:
            tot: dict[str, int] = {}
            for r in rs:
                for g, n in r["groups"].items():
                    tot[g] = tot.get(g, 0) + n
            n = max(1, sum(tot.values()))
            return {g: tot[g] / n for g in sorted(tot, key=_group_key)}

        summary.gradient_share_first, summary.gradient_share_last = share(first), share(last)
        summary.groups_first, summary.groups_last = groups(first), groups(last)
        summary.valid_rate = sum(r["n_valid"] for r in rows) / max(1, sum(r["n_cards"] for r in rows))
        n = len(rows)
        summary.sec_generate = sum(r["t_generate"] for r in rows) / n
        summary.sec_train = sum(r["t_train"] for r in rows) / n
        summary.sec_other = sum(r["t_other"] for r in rows) / n
        summary.sec_per_step = summary.sec_generate + summary.sec_train + summary.sec_other
        summary.n_tasks = sum(r["n_cards"] for r in rows)
        summary.n_valid_tasks = sum(r["n_valid"] for r in rows)
        _summarize_evosyn(summary, rows, first, last, run.dir)
        summary.protocol = rows[0].get("protocol", "online")
        summary.round_training, summary.protocol_notes = round_training(rows), describe(summary.protocol, rows)
    for alert in _jsonl_rows(run.dir / "alerts.jsonl"):
        summary.alerts += 1
        summary.alerts_by_check[alert["check"]] = summary.alerts_by_check.get(alert["check"], 0) + 1
    return summary


def _summarize_evosyn(summary: RunSummary, rows: list[dict[str, Any]], first: list[dict[str, Any]],
                      last: list[dict[str, Any]], run_dir: Path) -> None:
    """Controllability, coverage, balance, the allocation-gap rho and the factor-space changes."""
    def mean_of(rs: list[dict[str, Any]], key: str) -> float | None:
        xs = [r[key] for r in rs if r.get(key) is not None]
        return sum(xs) / len(xs) if xs else None

    summary.controllability_first = mean_of(first, "controllability")
    summary.controllability_last = mean_of(last, "controllability")
    summary.factor_coverage = mean_of(rows, "factor_coverage")
    summary.factor_balance = mean_of(rows, "factor_balance")
    summary.allocation_gap_spearman = mean_of(rows, "allocation_gap_spearman")
    path = run_dir / "factors.jsonl"
    if path.exists():
        summary.factor_changes = [json.loads(ln) for ln in path.read_text().splitlines() if ln.strip()]


def format_summary(s: RunSummary) -> str:
    """The end-of-run table printed by ``synco train``."""
    out = [f"run: {s.run_dir}  ({s.steps} steps, {s.n_tasks} cards, {s.n_valid_tasks} valid)"]
    if s.heldout_before:
        sampled = bool(s.heldout_sampled_before)
        out.append("held-out accuracy per group, before -> after: greedy" + ("  |  sampled" if sampled else ""))
        nan = float("nan")
        width = max(6, *(len(g) for g in s.heldout_before))
        for g in [*s.heldout_before, "mean"]:
            if g == "mean":
                b, a = _mean(s.heldout_before), _mean(s.heldout_after)
                sb, sa = _mean(s.heldout_sampled_before), _mean(s.heldout_sampled_after)
                nd = 3
            else:
                b, a = s.heldout_before[g], s.heldout_after.get(g, nan)
                sb, sa = s.heldout_sampled_before.get(g, nan), s.heldout_sampled_after.get(g, nan)
                nd = 2
            line = f"  {g:>{width}}: {b:.{nd}f} -> {a:.{nd}f}  ({a - b:+.{nd}f})"
            if sampled:
                line += f"  |  {sb:.{nd}f} -> {sa:.{nd}f}  ({sa - sb:+.{nd}f})"
            out.append(line)
    if len(s.heldout_curve) > 2:
        out.append("held-out greedy mean by step: " + "  ".join(f"{k}:{v:.3f}" for k, v in s.heldout_curve.items()))
    out.append(f"gradient-bearing share of valid tasks: first 10% of steps {s.gradient_share_first:.2f} -> "
               f"last 10% {s.gradient_share_last:.2f}")
    out.append(f"verification pass rate: {s.valid_rate:.2%}")
    out.extend(s.protocol_notes)
    out.append("health alerts: " + (f"{s.alerts} (" + ", ".join(f"{k} {v}" for k, v in s.alerts_by_check.items())
                                    + f"), see {Path(s.run_dir) / 'alerts.jsonl'}" if s.alerts else "none"))
    if s.groups_first:
        keys = list(dict.fromkeys([*s.groups_first, *s.groups_last]))
        keys.sort(key=_group_key)
        out.append("task distribution over levels (first 10% -> last 10% of steps):")
        out.append("  " + "  ".join(f"{g}:{s.groups_first.get(g, 0):.2f}->{s.groups_last.get(g, 0):.2f}" for g in keys))
    if s.factor_coverage is not None:
        ctrl = ("" if s.controllability_first is None else
                f"controllability {s.controllability_first:.2f} -> {s.controllability_last or 0:.2f}, ")
        rho = "" if s.allocation_gap_spearman is None else f", allocation-gap rho {s.allocation_gap_spearman:.2f}"
        out.append(f"factor space: {ctrl}coverage {s.factor_coverage:.2f}, balance {s.factor_balance or 0:.2f}{rho}")
        for ch in s.factor_changes:
            ev = ch.get("evidence") or {}
            ctl = ch.get("control") or {}
            out.append(f"  step {ch['step']}: {ch['action']} {ch['factor']}"
                       + (f" (CMI {ev['cmi']:.4f} nats, null {ev['cmi_null']:.4f}, p {ev['p_value']:.3f}, "
                          f"n {ev['n_tasks']})" if ev else "")
                       + (f" (control {ctl['rate']:.2f}, chance {ctl['chance']:.2f}, {ctl['n_cards']} cards)"
                          if ctl else ""))
    out.append(f"time per step: {s.sec_per_step:.2f}s = generation {s.sec_generate:.2f}s + training {s.sec_train:.2f}s "
               f"+ other {s.sec_other:.2f}s")
    return "\n".join(out)
