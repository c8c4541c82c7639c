"""``synco contamination``: which synthesized tasks of a run nearly copy a benchmark question.

Every card with a problem in the run's ``pool.sqlite`` (valid or not: the
Synthesizer was trained on all of them) is looked up in a
:class:`~synco.grading.novelty.NoveltyIndex` built over the benchmark questions; its
best match at or above ``threshold`` (character 5-gram Jaccard) is reported.
The pairs are printed closest first and written to ``RUN_DIR/contamination.json``
with per-benchmark counts and the benchmark files compared against.

Which files (:func:`choose_benchmarks`): ``--data-dir DIR`` when given; else the
run's own ``verifier.benchmark_paths`` from ``RUN_DIR/config.yaml``, resolved as
the run resolved them (files, ``<name>/`` folders or data folders; relative paths
from the folder the run was started in, inferred from ``runs_dir`` / ``run_id``);
else, for a run that configured none, ``data/benchmarks``.

The index uses 64 LSH bands of 2 rows (128 permutations), so a pair at
Jaccard 0.5 becomes a candidate with probability ~1 - 0.75^64 > 0.9999 and at
0.3 with ~0.998: near the default threshold almost nothing is missed, unlike
the pool's own 16x4 index which targets 0.8.
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import sys
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

import yaml
from pydantic import BaseModel

from synco.grading.benchmarks import (
    BenchmarkError,
    BenchmarkItem,
    benchmark_path_problems,
    discover_benchmarks,
    load_benchmark,
    resolve_benchmark_paths,
)
from synco.grading.novelty import NoveltyIndex
from synco.core.pool import SCHEMA_VERSION
from synco.core.records import TaskCard
from synco.core.text import yaml_problem

POOL_FILE = "pool.sqlite"
CONFIG_FILE = "config.yaml"
REPORT_FILE = "contamination.json"
DEFAULT_DATA_DIR = Path("data/benchmarks")
CONFIG_FIELD = "verifier.benchmark_paths"


class ContaminationError(RuntimeError):
    """A run or benchmark folder that cannot be read; the message says which and why."""


class PoolTask(BaseModel):
    """The part of a pool task this check needs."""

    task_id: int
    step: int
    valid: bool
    problem: str


class ContaminationPair(BaseModel):
    """A run task and the benchmark question it nearly copies."""

    similarity: float
    task_id: int
    step: int
    valid: bool
    benchmark: str
    benchmark_id: str
    task_problem: str
    benchmark_question: str


class BenchmarkSource(BaseModel):
    """The benchmark files a check compares against, and where that choice came from."""

    origin: str  # why these files: "given with --data-dir", "the run's verifier.benchmark_paths in ...", the default
    data_dir: str | None  # the folder searched for <name>/test.jsonl, None when the run's paths named the files
    files: dict[str, str]  # benchmark name -> file


class BenchmarkCounts(BaseModel):
    """Per benchmark: run tasks whose best match is here, and distinct questions matched."""

    questions: int
    tasks_matched: int
    questions_matched: int


class ContaminationReport(BaseModel):
    """``contamination.json``."""

    run_dir: str
    data_dir: str | None  # None when the files came from the run's verifier.benchmark_paths
    benchmark_source: str  # why these files (BenchmarkSource.origin)
    benchmark_files: dict[str, str]  # name -> file compared against
    threshold: float
    n_tasks: int  # run tasks with a problem that were checked
    n_tasks_matched: int
    counts: dict[str, BenchmarkCounts]
    pairs: list[ContaminationPair]  # closest first


# --------------------------------------------------------------------------- reading


def read_pool_tasks(path: Path) -> Iterator[PoolTask]:
    """Every task with a parsed card of a pool file, by id, read-only (a live run's WAL is honoured)."""
    if not path.is_file():
        raise ContaminationError(f"{path} not found: a run directory holds its pool.sqlite")
    uri = path.resolve().as_uri()
    try:
        conn = sqlite3.connect(f"{uri}?mode=ro", uri=True)
        conn.execute("SELECT 1 FROM sqlite_master").fetchone()
    except sqlite3.OperationalError:  # a WAL pool in a folder we may not write: a finished copy
        conn = sqlite3.connect(f"{uri}?mode=ro&immutable=1", uri=True)
    try:
        try:
            row = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
        except sqlite3.DatabaseError as err:
            raise ContaminationError(f"{path} is not a synco pool ({err})") from None
        if row is None or int(row[0]) != SCHEMA_VERSION:
            raise ContaminationError(f"{path}: pool schema version {row and row[0]}, expected {SCHEMA_VERSION}")
        cursor = conn.execute("SELECT task_id, step, valid, card_json, payload_json FROM tasks "
                              "WHERE card_json IS NOT NULL ORDER BY task_id")
        for task_id, step, valid, card_json, payload_json in cursor:
            problem = TaskCard.model_validate({**json.loads(card_json), "payload": json.loads(payload_json)}).payload.prompt_text()
            if isinstance(problem, str) and problem.strip():
                yield PoolTask(task_id=task_id, step=step, valid=bool(valid), problem=problem)
    finally:
        conn.close()


def saved_benchmark_paths(run_dir: Path) -> list[str] | None:
    """``verifier.benchmark_paths`` of the run's saved ``config.yaml``, or None when the run has no config file.

    Only this field is read (plain YAML, not a full config validation): a run made on
    another machine, whose model folders are not here, can still be checked.
    """
    path = run_dir / CONFIG_FILE
    if not path.is_file():
        return None
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except (OSError, yaml.YAMLError) as err:
        why = yaml_problem(err) if isinstance(err, yaml.YAMLError) else (err.strerror or type(err).__name__)
        raise ContaminationError(f"{path}: cannot read the run's config ({why}); pass --data-dir") from None
    verifier = data.get("verifier") if isinstance(data, dict) else None
    paths = verifier.get("benchmark_paths", []) if isinstance(verifier, dict) else []
    if not isinstance(paths, list) or not all(isinstance(x, str) for x in paths):
        raise ContaminationError(f"{path}: {CONFIG_FIELD} is {paths!r}, not a list of paths; pass --data-dir")
    return paths


def run_start_folder(run_dir: Path) -> Path:
    """The folder a run was started from, which its relative paths were read from.

    A run lives at ``<start>/<runs_dir>/<run_id>`` when ``runs_dir`` is relative, so the
    saved ``runs_dir`` and ``run_id`` give ``<start>`` back. When they do not match the
    run's location (absolute or ``..`` runs_dir, a moved run) the current folder is used.
    """
    try:
        data = yaml.safe_load((run_dir / CONFIG_FILE).read_text(encoding="utf-8")) or {}
        tail = Path(str(data["runs_dir"])) / str(data["run_id"])
    except (OSError, yaml.YAMLError, KeyError, TypeError):
        return Path.cwd()
    here = run_dir.resolve()
    n = len(tail.parts)
    if tail.is_absolute() or ".." in tail.parts or here.parts[-n:] != tail.parts or len(here.parts) <= n:
        return Path.cwd()
    return Path(*here.parts[:-n])


def data_dir_source(data_dir: Path, origin: str) -> BenchmarkSource:
    """Every ``<name>/test.jsonl`` of ``data_dir``; ``origin`` says why this folder (kept in the report)."""
    if not data_dir.is_dir():
        raise ContaminationError(f"benchmark folder {data_dir} not found ({origin}); create it with "
                                 "`synco data`, or pass --data-dir")
    files = discover_benchmarks(data_dir)
    return BenchmarkSource(origin=origin, data_dir=str(data_dir), files={n: str(f) for n, f in files.items()})


def config_source(run_dir: Path, paths: Sequence[str]) -> BenchmarkSource:
    """The files the run's ``verifier.benchmark_paths`` name, resolved as the run's verifier resolved them."""
    start = run_start_folder(run_dir)
    absolute = [start / p for p in paths]  # an absolute p stays as it is
    where = f"relative paths read from {start}, the folder the run was started in"
    problems = benchmark_path_problems(absolute)
    if problems:
        raise ContaminationError(f"{run_dir / CONFIG_FILE}: {CONFIG_FIELD}: {'; '.join(problems)} ({where}); "
                                 "pass --data-dir DIR to compare against another benchmark folder")
    try:
        files = resolve_benchmark_paths(absolute)
    except (OSError, BenchmarkError) as err:
        raise ContaminationError(f"{run_dir / CONFIG_FILE}: {CONFIG_FIELD}: {err}") from None
    origin = f"the run's {CONFIG_FIELD} in {run_dir / CONFIG_FILE}; {where}"
    return BenchmarkSource(origin=origin, data_dir=None, files={n: str(f) for n, f in files.items()})


def choose_benchmarks(run_dir: Path, data_dir: Path | None = None) -> BenchmarkSource:
    """Which benchmark files to compare a run against: ``data_dir`` when given, else the run's own
    ``verifier.benchmark_paths``, else (no config, or none configured) ``DEFAULT_DATA_DIR``."""
    if data_dir is not None:
        return data_dir_source(data_dir, "given with --data-dir")
    paths = saved_benchmark_paths(run_dir)
    if paths:
        return config_source(run_dir, paths)
    why = "the run has no config.yaml" if paths is None else f"the run's config names no {CONFIG_FIELD}"
    return data_dir_source(DEFAULT_DATA_DIR, f"the default folder, since {why}")


def load_questions(source: BenchmarkSource, names: Sequence[str] | None = None) -> dict[str, list[BenchmarkItem]]:
    """Benchmark items of every file of ``source``, or of the named ones."""
    wanted = list(names) if names else list(source.files)
    missing = [n for n in wanted if n not in source.files]
    if missing or not wanted:
        raise ContaminationError(f"benchmark(s) {', '.join(missing) or '(none)'} not in {source.origin}")
    try:
        return {n: load_benchmark(source.files[n], n) for n in wanted}
    except BenchmarkError as err:
        raise ContaminationError(str(err)) from None


# --------------------------------------------------------------------------- matching


def benchmark_index(benchmarks: Mapping[str, Sequence[BenchmarkItem]], threshold: float) -> NoveltyIndex:
    """A near-duplicate index over every benchmark question, keyed by (benchmark, position)."""
    index = NoveltyIndex(threshold=threshold, num_perm=128, bands=64)
    for name, items in benchmarks.items():
        for pos, item in enumerate(items):
            index.add((name, pos), item.question)
    return index


def find_contamination(tasks: Iterator[PoolTask] | Sequence[PoolTask], benchmarks: Mapping[str, Sequence[BenchmarkItem]],
                       threshold: float = 0.5) -> tuple[int, list[ContaminationPair]]:
    """(tasks checked, pairs at or above ``threshold``), each task with its closest question, closest first."""
    index = benchmark_index(benchmarks, threshold)
    pairs: list[ContaminationPair] = []
    n = 0
    for task in tasks:
        n += 1
        hit = index.query(task.problem)
        if hit is None:
            continue
        (name, pos), sim = hit  # type: ignore[misc]
        item = benchmarks[name][pos]
        pairs.append(ContaminationPair(similarity=sim, task_id=task.task_id, step=task.step, valid=task.valid,
                                       benchmark=name, benchmark_id=item.id, task_problem=task.problem,
                                       benchmark_question=item.question))
    pairs.sort(key=lambda p: (-p.similarity, p.task_id))
    return n, pairs


def build_report(run_dir: Path, source: BenchmarkSource, threshold: float, n_tasks: int, pairs: list[ContaminationPair],
                 benchmarks: Mapping[str, Sequence[BenchmarkItem]]) -> ContaminationReport:
    counts = {
        name: BenchmarkCounts(
            questions=len(items),
            tasks_matched=sum(p.benchmark == name for p in pairs),
            questions_matched=len({p.benchmark_id for p in pairs if p.benchmark == name}),
        )
        for name, items in benchmarks.items()
    }
    return ContaminationReport(run_dir=str(run_dir), data_dir=source.data_dir, benchmark_source=source.origin,
                               benchmark_files={n: source.files[n] for n in benchmarks}, threshold=threshold,
                               n_tasks=n_tasks, n_tasks_matched=len(pairs), counts=counts, pairs=pairs)


def check_run(run_dir: str | Path, data_dir: str | Path | None = None, threshold: float = 0.5,
              benchmarks: Sequence[str] | None = None) -> ContaminationReport:
    """Check one run against the benchmarks and write ``RUN_DIR/contamination.json``.

    ``data_dir`` None: the run's own ``verifier.benchmark_paths`` (see :func:`choose_benchmarks`).
    """
    if not 0.0 < threshold <= 1.0:
        raise ContaminationError(f"threshold must be in (0, 1], got {threshold}")
    run = Path(run_dir)
    if not (run / POOL_FILE).is_file():  # before the benchmarks: the run itself is the likelier typo
        raise ContaminationError(f"{run / POOL_FILE} not found: a run directory holds its pool.sqlite")
    source = choose_benchmarks(run, None if data_dir is None else Path(data_dir))
    items = load_questions(source, benchmarks)
    n_tasks, pairs = find_contamination(read_pool_tasks(run / POOL_FILE), items, threshold)
    report = build_report(run, source, threshold, n_tasks, pairs, items)
    tmp = run / (REPORT_FILE + ".tmp")
    tmp.write_text(report.model_dump_json(indent=2) + "\n", encoding="utf-8")
    tmp.replace(run / REPORT_FILE)
    return report


def _clip(text: str, width: int) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[: width - 1] + "…"


def format_report(report: ContaminationReport, top: int = 20) -> str:
    """Counts per benchmark, then the ``top`` closest pairs."""
    lines = [f"{report.n_tasks_matched} of {report.n_tasks} run tasks match a benchmark question "
             f"at Jaccard >= {report.threshold:g}",
             f"compared against {len(report.benchmark_files)} benchmark file(s) ({report.benchmark_source}):"]
    lines += [f"  {name:<10} {path}" for name, path in report.benchmark_files.items()]
    for name, c in report.counts.items():
        lines.append(f"  {name:<10} {c.tasks_matched:>6} tasks -> {c.questions_matched:>5} of {c.questions} questions")
    for p in report.pairs[:top]:
        lines.append(f"\n{p.similarity:.3f}  task {p.task_id} (step {p.step}, {'valid' if p.valid else 'invalid'})"
                     f"  ~  {p.benchmark} {p.benchmark_id}")
        lines.append(f"    task:      {_clip(p.task_problem, 160)}")
        lines.append(f"    benchmark: {_clip(p.benchmark_question, 160)}")
    if len(report.pairs) > top:
        lines.append(f"\n... {len(report.pairs) - top} more pairs in {Path(report.run_dir) / REPORT_FILE}")
    return "\n".join(lines)


# --------------------------------------------------------------------------- command line


def configure_contamination(p: argparse.ArgumentParser) -> None:
    """Arguments of ``synco contamination``."""
    p.description = ("Find the run's synthesized problems that nearly copy a benchmark question (character 5-gram "
                     "Jaccard); prints the benchmark files compared against and the closest pairs, and writes "
                     "RUN_DIR/contamination.json. Benchmark files: --data-dir when given; else the run's own "
                     f"{CONFIG_FIELD} (RUN_DIR/config.yaml), resolved as the run resolved them (relative paths from "
                     f"the folder the run was started in); else, when the run configured none, {DEFAULT_DATA_DIR}.")
    p.add_argument("run_dir", type=Path, metavar="RUN_DIR", help="a training run folder (with pool.sqlite)")
    p.add_argument("--data-dir", type=Path, default=None,
                   help=f"compare against every <name>/test.jsonl of this folder instead of the run's {CONFIG_FIELD} "
                        f"(default: those paths, or {DEFAULT_DATA_DIR} when the run configured none)")
    p.add_argument("--benchmarks", nargs="+", default=None, metavar="NAME", help="only these benchmarks (default: all found)")
    p.add_argument("--threshold", type=float, default=0.5, help="report pairs with Jaccard >= this (default: %(default)s)")
    p.add_argument("--top", type=int, default=20, help="pairs to print (default: %(default)s; the JSON has all)")


def run_contamination(args: argparse.Namespace) -> int:
    """``synco contamination``: 0 when the check ran (whatever it found), 2 on an unreadable input."""
    try:
        report = check_run(args.run_dir, args.data_dir, args.threshold, args.benchmarks)
    except ContaminationError as err:
        print(f"synco contamination: {err}", file=sys.stderr)
        return 2
    print(format_report(report, args.top))
    return 0
