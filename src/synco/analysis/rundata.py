"""Read a run directory for analysis: the pool (read-only), metrics.jsonl, reports/ and EvoSyn's files.

Nothing here writes to the run: the pool is opened through a read-only SQLite
URI (``TaskPool`` would create tables and switch the journal mode), and only the
columns the analysis needs are read, never the rollout texts.
"""

from __future__ import annotations

import json
import re
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import BaseModel, ConfigDict, computed_field

from synco.evosyn.effect import Transition
from synco.evosyn.space import FactorChange, FactorEvidence, FactorSpace
from synco.core.jsonl import read_jsonl, validation_message
from synco.core.pool import SCHEMA_VERSION
from synco.core.rewards import teachability


class AnalysisError(ValueError):
    """A run or eval directory cannot be analysed; the message says which file and why."""


@dataclass(frozen=True)
class TaskRow:
    """What the analysis needs of one pool task."""

    task_id: int
    step: int
    valid: bool
    gradient_bearing: bool
    quality: float
    reliability: float
    novelty: float | None  # verdict.scores["novelty"], when the verifier wrote it
    success_rate: float | None  # None when the task got no rollouts
    synth_total: float | None  # gated (or additive) Synthesizer reward
    difficulty: str | None  # the card's difficulty_estimate
    factors: dict[str, str] = field(default_factory=dict)
    reason_codes: tuple[str, ...] = ()

    @property
    def teachability(self) -> float | None:
        """teach(p) recomputed from the success rate: the definition, not a stored copy."""
        return None if self.success_rate is None else teachability(self.success_rate)

    @property
    def outcome(self) -> str:
        """invalid, gradient_bearing, all_correct, all_incorrect or other.

        ``other``: valid, not gradient-bearing, yet 0 < p < 1 (equal rewards
        despite mixed correctness, e.g. a hedged answer scored as wrong) or no
        rollouts at all. Kept separate so the shares always add up to one.
        """
        if not self.valid:
            return "invalid"
        if self.gradient_bearing:
            return "gradient_bearing"
        if self.success_rate == 1.0:
            return "all_correct"
        if self.success_rate == 0.0:
            return "all_incorrect"
        return "other"


class MetricsLine(BaseModel):
    """The fields of one metrics.jsonl line (an ``engine.StepStats``) the analysis uses."""

    model_config = ConfigDict(extra="ignore")

    step: int
    mode: str = ""
    protocol: str = "online"  # synco.cotrain.protocols (absent from runs written before protocols existed)
    reasoner_reward: float | None = None
    synth_reward: float | None = None
    reasoner_accuracy: float | None = None
    valid_rate: float | None = None
    gradient_share: float | None = None
    # EvoSyn (absent from runs without a factor space)
    controllability: float | None = None
    factor_coverage: float | None = None
    factor_balance: float | None = None
    allocation: dict[str, int] | None = None  # cell key -> card slots (Designer on)
    allocation_gap_spearman: float | None = None
    space_version: int | None = None
    # episodes and gold trajectories (absent from single-turn runs' lines)
    mean_turns: float | None = None  # agent turns per episode
    finishes: dict[str, int] | None = None  # episodes per finish: done / max_turns / token_budget
    interaction_coverage: float | None = None  # share of the possible tool transitions the gold trajectories make
    trajectory_diversity: float | None = None  # evenness of the gold tool-use patterns
    contrastive_support: float | None = None  # share of gold tool compositions seen in more than one order
    distinct_action_sequences: int | None = None  # distinct gold tool-call sequences so far in the run (cumulative)

    @property
    def has_evosyn(self) -> bool:
        """Whether this step recorded any EvoSyn number."""
        return any(v is not None for v in (self.controllability, self.factor_coverage, self.factor_balance,
                                           self.allocation, self.allocation_gap_spearman, self.space_version))

    @property
    def has_trajectory(self) -> bool:
        """Whether this step recorded any episode or gold-trajectory number (domains with an environment)."""
        return any(v is not None for v in (self.mean_turns, self.finishes, self.interaction_coverage,
                                           self.trajectory_diversity, self.contrastive_support,
                                           self.distinct_action_sequences))


class ReflectionLine(BaseModel):
    """One line of reflector.jsonl: a reflection of the factor space and every candidate's evidence."""

    model_config = ConfigDict(extra="ignore")

    step: int
    n_tasks: int = 0  # measured valid tasks in the Reflector's window
    space_version: int | None = None  # after the reflection
    candidates: dict[str, FactorEvidence] = {}  # factor -> evidence (promoted or not); {} when too few tasks


@dataclass
class EvoSynFiles:
    """EvoSyn's run files: factor-space changes, reflections and the final space (each may be absent)."""

    changes: list[FactorChange] = field(default_factory=list)  # factors.jsonl, in file order
    reflections: list[ReflectionLine] = field(default_factory=list)  # reflector.jsonl, in file order
    space: FactorSpace | None = None  # factor_space.json
    n_cells: int | None = None  # feasible cells of that space, as the trainer counted them
    designer_target: float | None = None  # evosyn.designer_settings.target of config.yaml, when readable
    effects: list[Transition] = field(default_factory=list)  # learning_effect.jsonl, in file order


class HeldoutPoint(BaseModel):
    """Greedy held-out accuracy per group after ``step`` training steps (0: the initial Reasoner)."""

    step: int
    greedy: dict[str, float]

    @computed_field  # type: ignore[prop-decorator]
    @property
    def mean(self) -> float:
        """Unweighted mean over the groups."""
        return sum(self.greedy.values()) / len(self.greedy) if self.greedy else float("nan")


@dataclass
class RunData:
    """Everything read from one run directory."""

    path: Path
    label: str
    tasks: list[TaskRow]
    steps: list[int]  # every recorded step of the pool, ascending
    metrics: list[MetricsLine]
    latest_report: tuple[int, str] | None = None  # (step, text) of the newest reports/step_N.txt
    n_reports: int = 0
    heldout: list[HeldoutPoint] = field(default_factory=list)  # the Reasoner's held-out curve, by step
    evosyn: EvoSynFiles | None = None  # None: the run has no EvoSyn file

    @property
    def mode(self) -> str:
        """The run's mode (cotrain / frozen / static) as metrics.jsonl records it, or ''; a protocol other than
        online in front (``rounds/frozen``)."""
        if not self.metrics:
            return ""
        first = self.metrics[0]
        return first.mode if first.protocol == "online" else f"{first.protocol}/{first.mode}"


def load_run(path: str | Path, label: str | None = None) -> RunData:
    """Read one run directory; AnalysisError names the missing or broken file."""
    run = Path(path)
    if not run.is_dir():
        raise AnalysisError(f"run directory {run} does not exist")
    tasks, steps = read_pool(run / "pool.sqlite")
    metrics = read_metrics(run / "metrics.jsonl")
    latest, n_reports = read_reports(run / "reports")
    return RunData(path=run, label=label or run.resolve().name, tasks=tasks, steps=steps, metrics=metrics,
                   latest_report=latest, n_reports=n_reports, heldout=read_heldout(run), evosyn=read_evosyn(run))


EVOSYN_FILES: tuple[str, ...] = ("factors.jsonl", "reflector.jsonl", "factor_space.json", "learning_effect.jsonl")
"""EvoSyn's files in a run directory (see ``synco.evosyn.run``); runs before EvoSyn have none."""


def read_evosyn(run: Path) -> EvoSynFiles | None:
    """factors.jsonl, reflector.jsonl, factor_space.json and learning_effect.jsonl; None when the run has none.

    A broken line or file is an AnalysisError naming it (and the line number).
    """
    if not any((run / name).is_file() for name in EVOSYN_FILES):
        return None
    out = EvoSynFiles(changes=read_jsonl(run / "factors.jsonl", FactorChange, "factor-space change", error=AnalysisError),
                      reflections=read_jsonl(run / "reflector.jsonl", ReflectionLine, "reflection", error=AnalysisError),
                      designer_target=read_designer_target(run / "config.yaml"),
                      effects=read_jsonl(run / "learning_effect.jsonl", Transition, "learning-effect transition",
                                         error=AnalysisError))
    path = run / "factor_space.json"
    if path.is_file():
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            out.space = FactorSpace.model_validate(data)
            n_cells = data.get("n_cells")
            out.n_cells = int(n_cells) if isinstance(n_cells, int) else None
        except (ValueError, AttributeError) as e:  # ValidationError is a ValueError
            raise AnalysisError(f"{path}: not a factor space ({validation_message(e)})") from e
    return out


def read_designer_target(path: Path) -> float | None:
    """``evosyn.designer_settings.target`` of a run's config.yaml; None when absent or unreadable.

    Only used to measure a cell's gap the way the Designer did; the analysis falls
    back to the default target when the config cannot be read.
    """
    if not path.is_file():
        return None
    import yaml

    try:
        cfg = yaml.safe_load(path.read_text(encoding="utf-8"))
        target = cfg["evosyn"]["designer_settings"]["target"]
    except (yaml.YAMLError, KeyError, TypeError, UnicodeDecodeError):
        return None
    if isinstance(target, bool) or not isinstance(target, (int, float)) or not 0 < target < 1:
        return None
    return float(target)


def read_heldout(run: Path) -> list[HeldoutPoint]:
    """The held-out curve: heldout_before.json (step 0), heldout.jsonl (``heldout_every``) and the final
    evaluation in summary.json; [] when the run has none. A broken file is an AnalysisError naming it."""
    points: dict[int, HeldoutPoint] = {}
    files = [(run / "heldout_before.json", "before"), (run / "heldout.jsonl", "curve"), (run / "summary.json", "after")]
    for path, kind in files:
        if not path.is_file():
            continue
        try:
            if kind == "before":
                data = json.loads(path.read_text(encoding="utf-8"))
                points[0] = HeldoutPoint(step=0, greedy=data.get("greedy", data))
            elif kind == "curve":
                for line in path.read_text(encoding="utf-8").splitlines():
                    if line.strip():
                        p = HeldoutPoint.model_validate_json(line)
                        points[p.step] = p
            else:
                data = json.loads(path.read_text(encoding="utf-8"))
                if data.get("heldout_after"):
                    points[int(data["steps"])] = HeldoutPoint(step=int(data["steps"]), greedy=data["heldout_after"])
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            raise AnalysisError(f"{path}: not a held-out evaluation ({e})") from e
    return [points[s] for s in sorted(points)]


def read_pool(path: Path) -> tuple[list[TaskRow], list[int]]:
    """Tasks (by id) and recorded steps of a pool file, opened read-only.

    A pool without its ``-wal`` file has no writer (a run's connection keeps that file while it is open, and its
    close folds it back): it is opened as ``immutable``, which leaves no ``-wal``/``-shm`` files beside it. Otherwise
    ``mode=ro`` lets SQLite use the WAL of a live run; where that fails (a WAL pool in a folder we may not write,
    e.g. a copied archive), the file is opened as ``immutable``, which is right for a finished run.
    """
    if not path.is_file():
        raise AnalysisError(f"{path} not found: a run directory needs its pool.sqlite")
    uri = path.resolve().as_uri()
    try:
        if not path.with_name(path.name + "-wal").exists():
            return _query_pool(sqlite3.connect(f"{uri}?mode=ro&immutable=1", uri=True), path)
        return _query_pool(sqlite3.connect(f"{uri}?mode=ro", uri=True), path)
    except sqlite3.OperationalError:
        try:
            return _query_pool(sqlite3.connect(f"{uri}?mode=ro&immutable=1", uri=True), path)
        except sqlite3.Error as e:
            raise AnalysisError(f"{path}: cannot read the pool ({e})") from e


def _query_pool(conn: sqlite3.Connection, path: Path) -> tuple[list[TaskRow], list[int]]:
    """Read tasks, factors and steps through ``conn`` and close it."""
    try:
        conn.row_factory = sqlite3.Row
        try:
            version = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
        except sqlite3.DatabaseError as e:
            if isinstance(e, sqlite3.OperationalError) and "no such table" not in str(e):
                raise  # cannot open: the caller retries as immutable
            raise AnalysisError(f"{path} is not a synco pool ({e})") from e
        if version is None or int(version[0]) != SCHEMA_VERSION:
            found = None if version is None else version[0]
            raise AnalysisError(f"{path}: pool schema version {found}, this synco reads {SCHEMA_VERSION}")
        factors: dict[int, dict[str, str]] = {}
        for row in conn.execute("SELECT task_id, key, value FROM task_factors"):
            factors.setdefault(int(row["task_id"]), {})[row["key"]] = row["value"]
        tasks = [
            _row_to_task(row, factors.get(int(row["task_id"]), {}))
            for row in conn.execute(
                "SELECT task_id, step, valid, gradient_bearing, quality, reliability, scores_json, "
                "reasons_json, success_rate, synth_reward_total, difficulty_estimate FROM tasks ORDER BY task_id"
            )
        ]
        steps = [int(r[0]) for r in conn.execute("SELECT step FROM steps ORDER BY step")]
    finally:
        conn.close()
    return tasks, steps


def _row_to_task(row: sqlite3.Row, factors: dict[str, str]) -> TaskRow:
    scores = json.loads(row["scores_json"])
    novelty = scores.get("novelty") if isinstance(scores, dict) else None
    reasons = json.loads(row["reasons_json"])
    return TaskRow(
        task_id=int(row["task_id"]),
        step=int(row["step"]),
        valid=bool(row["valid"]),
        gradient_bearing=bool(row["gradient_bearing"]),
        quality=float(row["quality"]),
        reliability=float(row["reliability"]),
        novelty=float(novelty) if isinstance(novelty, (int, float)) else None,
        success_rate=None if row["success_rate"] is None else float(row["success_rate"]),
        synth_total=None if row["synth_reward_total"] is None else float(row["synth_reward_total"]),
        difficulty=(row["difficulty_estimate"] or "").strip() or None,
        factors=factors,
        reason_codes=tuple(str(r).split(":", 1)[0].strip() for r in reasons),
    )


def read_metrics(path: Path) -> list[MetricsLine]:
    """The lines of metrics.jsonl in step order; the last line for a step wins (resumed runs)."""
    if not path.is_file():
        raise AnalysisError(f"{path} not found: a run directory needs its metrics.jsonl "
                            "(written by `synco train`, one line per step)")
    by_step = {row.step: row for row in read_jsonl(path, MetricsLine, "metrics line", error=AnalysisError)}
    return [by_step[s] for s in sorted(by_step)]


def read_reports(path: Path) -> tuple[tuple[int, str] | None, int]:
    """(step, text) of the newest reports/step_N.txt and how many there are; (None, 0) without any."""
    if not path.is_dir():
        return None, 0
    found: list[tuple[int, Path]] = []
    for p in path.glob("step_*.txt"):
        m = re.fullmatch(r"step_(\d+)\.txt", p.name)
        if m:
            found.append((int(m.group(1)), p))
    if not found:
        return None, 0
    step, newest = max(found)
    return (step, newest.read_text(encoding="utf-8", errors="replace")), len(found)
