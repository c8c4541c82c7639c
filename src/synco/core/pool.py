"""The persistent task pool: every synthesized card of a run, in one SQLite file.

The pool is the run's memory. Each co-training step writes its task records in
one transaction, so after a crash the file holds whole steps only and a resumed
run can trust it. The schema is normalised (tasks, rollouts, factors, per-step
metrics) so the pool can also be inspected with plain SQL from outside. Task ids
come from an AUTOINCREMENT key: unique over the run, never reused, even after
``truncate_after`` or a reopen.

Each rollout keeps the token ids its completion was sampled as (``rollouts.token_ids``,
packed by :func:`pack_token_ids`), so a supervised update on an attempt trains exactly
the tokens that were sampled and scored; decoding and re-tokenising the text can give
other tokens with a BPE tokenizer. Pools written before the column existed get it on
opening (NULL for their old rollouts).
"""

from __future__ import annotations

import json
import os
import sqlite3
import struct
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

from synco.core.records import CARD_FIELDS, Attempt, SynthReward, TaskCard, TaskRecord, Verdict

if TYPE_CHECKING:  # pragma: no cover - typing only
    import datasets

ExportExtra = Callable[[TaskCard], Mapping[str, Any]]
"""A domain's own export columns of a card (``HasExportFields.export_fields``)."""

SCHEMA_VERSION = 2
"""Bumped whenever the table layout changes; a pool with another version is refused. 2: a card is stored as its
header (``card_json``) beside its typed payload (``payload_json``, with its ``kind``)."""

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS steps (
    step         INTEGER PRIMARY KEY,
    metrics_json TEXT NOT NULL,
    created_at   REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS tasks (
    task_id             INTEGER PRIMARY KEY AUTOINCREMENT,
    step                INTEGER NOT NULL REFERENCES steps(step) ON DELETE CASCADE,
    slot                INTEGER NOT NULL,
    context_id          INTEGER NOT NULL,
    raw                 TEXT NOT NULL,
    card_json           TEXT,
    payload_json        TEXT,
    valid               INTEGER NOT NULL,
    quality             REAL NOT NULL,
    reliability         REAL NOT NULL,
    agreement           REAL,
    scores_json         TEXT NOT NULL,
    reasons_json        TEXT NOT NULL,
    reference           TEXT,
    success_rate        REAL,
    gradient_bearing    INTEGER NOT NULL,
    synth_reward_json   TEXT,
    synth_reward_total  REAL,
    difficulty_estimate TEXT,
    created_at          REAL NOT NULL,
    target              TEXT,
    on_target           INTEGER,
    synth_version       INTEGER
);
CREATE TABLE IF NOT EXISTS rollouts (
    task_id   INTEGER NOT NULL REFERENCES tasks(task_id) ON DELETE CASCADE,
    idx       INTEGER NOT NULL,
    text      TEXT NOT NULL,
    answer    TEXT,
    method    TEXT NOT NULL,
    correct   INTEGER NOT NULL,
    reward    REAL NOT NULL,
    truncated INTEGER NOT NULL,
    n_tokens  INTEGER NOT NULL,
    token_ids BLOB,
    episode_json TEXT,
    policy_version INTEGER,
    PRIMARY KEY (task_id, idx)
);
CREATE TABLE IF NOT EXISTS task_factors (
    task_id INTEGER NOT NULL REFERENCES tasks(task_id) ON DELETE CASCADE,
    key     TEXT NOT NULL,
    value   TEXT NOT NULL,
    PRIMARY KEY (task_id, key)
);
CREATE INDEX IF NOT EXISTS idx_tasks_step ON tasks(step);
CREATE INDEX IF NOT EXISTS idx_tasks_valid ON tasks(valid);
CREATE INDEX IF NOT EXISTS idx_factors_kv ON task_factors(key, value);
"""

_TASK_COLUMNS = (
    "task_id, step, slot, context_id, raw, card_json, payload_json, valid, quality, reliability, agreement, "
    "scores_json, reasons_json, reference, success_rate, synth_reward_json, target, on_target, synth_version"
)

EXPORT_COLUMNS: tuple[str, ...] = (
    "task_id",
    "step",
    "problem",
    "solution",
    "final_answer",
    "synthesizer_answer",
    "answer_corrected",
    *(name for name in CARD_FIELDS if name not in ("problem", "solution", "final_answer")),
    "factors",
    "payload",
    "success_rate",
    "quality",
    "reliability",
)
"""Columns of the exported dataset (JSONL objects and HF dataset), in order.

``final_answer`` is the VERIFIED reference: the answer the Reasoner was graded against
(the domain oracle's answer, or without an oracle the card's own answer that passed the
answer and consensus checks). ``synthesizer_answer`` is what the card claimed, and
``answer_corrected`` says the oracle replaced it. ``solution`` is the Synthesizer's worked
solution, and None on a corrected row: there it argues for ``synthesizer_answer``, which the
oracle found wrong, so a model trained on it would learn a wrong derivation (the pool's
``card_json`` still holds it). A domain's export columns may give it back (tools, τ²: the gold actions).
``payload`` is the card's typed payload whole (its ``kind`` and fields; in the HF dataset, its JSON text).
"""

_BATCH = 500  # rows per query when paging through the pool or binding id lists


class PoolError(RuntimeError):
    """The pool file cannot be used (not an SQLite database, or damaged); the message names the file."""


class TaskPool:
    """An SQLite-backed store of task records, shared safely between threads.

    Use as a context manager or call :meth:`close`. All methods take one
    internal lock, so a pool object may be used from several threads.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._lock = threading.RLock()
        # isolation_level=None: we issue BEGIN/COMMIT ourselves, so a step is exactly one transaction.
        self._conn = sqlite3.connect(
            str(self.path), check_same_thread=False, isolation_level=None, timeout=30.0
        )
        self._conn.row_factory = sqlite3.Row
        try:
            self._conn.execute("PRAGMA foreign_keys = ON")
            self._journal_mode = str(self._conn.execute("PRAGMA journal_mode = WAL").fetchone()[0])
            self._conn.executescript(_SCHEMA)
            self._check_schema_version()
            self._add_missing_columns()
        except sqlite3.DatabaseError as e:
            self._conn.close()
            if isinstance(e, sqlite3.OperationalError) and not _is_damage(e):
                raise  # e.g. a read-only file or directory: not damage, the caller's message applies
            raise PoolError(f"pool {self.path} is damaged or not an SQLite file ({e})") from e
        except BaseException:
            self._conn.close()
            raise

    # ------------------------------------------------------------------ setup

    def _add_missing_columns(self) -> None:
        """Add the columns older pools lack, as NULL: ``target`` / ``on_target`` (before the Designer),
        ``rollouts.token_ids`` (before sampled ids were kept; those attempts are re-tokenised for SFT),
        ``rollouts.episode_json`` (before multi-turn episodes), ``rollouts.policy_version`` and
        ``tasks.synth_version`` (before the sampling policy's version was kept)."""
        for table, name, kind in (("tasks", "target", "TEXT"), ("tasks", "on_target", "INTEGER"),
                                  ("rollouts", "token_ids", "BLOB"), ("rollouts", "episode_json", "TEXT"),
                                  ("rollouts", "policy_version", "INTEGER"), ("tasks", "synth_version", "INTEGER")):
            have = {row[1] for row in self._conn.execute(f"PRAGMA table_info({table})")}
            if name not in have:
                self._conn.execute(f"ALTER TABLE {table} ADD COLUMN {name} {kind}")

    def _check_schema_version(self) -> None:
        """Stamp a new pool with SCHEMA_VERSION; refuse a pool written by another version."""
        row = self._conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
        if row is None:
            self._conn.execute(
                "INSERT INTO meta(key, value) VALUES ('schema_version', ?), ('created_at', ?)",
                (str(SCHEMA_VERSION), repr(time.time())),
            )
        elif int(row[0]) == 1:
            raise ValueError(
                f"pool {self.path} was written before cards carried typed payloads (schema version 1: every card "
                f"as nine strings, its domain not recorded), so its rows cannot be read as their domain's payload "
                f"by this synco (schema version {SCHEMA_VERSION}); start a new run with a new pool, or read this "
                f"one with the synco that wrote it"
            )
        elif int(row[0]) != SCHEMA_VERSION:
            raise ValueError(
                f"pool {self.path} has schema version {row[0]}, this synco expects {SCHEMA_VERSION}"
            )

    def check_integrity(self) -> None:
        """Raise PoolError naming the file when SQLite's ``quick_check`` finds damage (e.g. before resuming).

        Opening a pool only reads its first pages; damage further in would
        otherwise surface mid-run as ``database disk image is malformed``.
        """
        with self._lock:
            try:
                problems = [str(r[0]) for r in self._conn.execute("PRAGMA quick_check(5)").fetchall()]
            except sqlite3.DatabaseError as e:
                problems = [str(e)]
        if problems != ["ok"]:
            lines = [ln for text in problems for ln in text.splitlines() if ln.strip() and not ln.startswith("***")]
            raise PoolError(f"pool {self.path} is damaged ({'; '.join(lines[:3])})")

    @property
    def journal_mode(self) -> str:
        """SQLite journal mode in effect ('wal' for a file-backed pool)."""
        return self._journal_mode

    def close(self) -> None:
        """Close the connection; the object is unusable afterwards."""
        with self._lock:
            self._conn.close()

    def __enter__(self) -> "TaskPool":
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # ------------------------------------------------------------------ writing

    def record_step(
        self,
        step: int,
        records: Sequence[TaskRecord],
        metrics: dict[str, float] | None = None,
    ) -> list[int]:
        """Write one whole step in one transaction; return the new task ids.

        Either every record of the step (and its metrics) is stored, or none:
        any failure rolls back and re-raises. The ids are set on ``records`` only
        after the commit. Recording a step that is already stored raises
        ValueError, which keeps a resumed run from writing a step twice.
        """
        wrong = [r.step for r in records if r.step != step]
        if wrong:
            raise ValueError(f"record_step({step}) got records of step(s) {sorted(set(wrong))}")
        metrics_json = json.dumps(dict(metrics or {}), allow_nan=True)
        now = time.time()
        ids: list[int] = []
        with self._lock:
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                if self._conn.execute("SELECT 1 FROM steps WHERE step = ?", (step,)).fetchone():
                    raise ValueError(f"step {step} is already recorded in the pool {self.path}")
                self._conn.execute(
                    "INSERT INTO steps(step, metrics_json, created_at) VALUES (?, ?, ?)",
                    (step, metrics_json, now),
                )
                for record in records:
                    ids.append(self._insert_record(record, now))
                self._conn.execute("COMMIT")
            except BaseException:
                self._rollback()
                raise
        for record, task_id in zip(records, ids):
            record.task_id = task_id
        return ids

    def _insert_record(self, record: TaskRecord, now: float) -> int:
        """Insert one record with its rollouts and factors; return its new id (inside a transaction)."""
        card = record.card
        verdict = record.verdict
        reward = record.synth_reward
        cursor = self._conn.execute(
            "INSERT INTO tasks(step, slot, context_id, raw, card_json, payload_json, valid, quality, reliability, "
            "agreement, scores_json, reasons_json, reference, success_rate, gradient_bearing, "
            "synth_reward_json, synth_reward_total, difficulty_estimate, created_at, target, on_target, synth_version) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                record.step,
                record.slot,
                record.context_id,
                record.raw,
                card.model_dump_json(exclude={"payload"}) if card is not None else None,
                card.payload.model_dump_json() if card is not None else None,
                int(verdict.valid),
                verdict.quality,
                verdict.reliability,
                verdict.agreement,
                json.dumps(verdict.scores),
                json.dumps(verdict.reasons),
                verdict.reference,
                record.success_rate,
                int(record.gradient_bearing),
                reward.model_dump_json() if reward is not None else None,
                reward.total if reward is not None else None,
                card.difficulty_estimate if card is not None else None,
                now,
                record.target,
                None if record.on_target is None else int(record.on_target),
                record.synth_version,
            ),
        )
        task_id = int(cursor.lastrowid or 0)
        self._conn.executemany(
            "INSERT INTO rollouts(task_id, idx, text, answer, method, correct, reward, truncated, "
            "n_tokens, token_ids, episode_json, policy_version) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [
                (task_id, i, r.text, r.answer, r.method, int(r.correct), r.reward, int(r.truncated), r.n_tokens,
                 None if r.completion_ids is None else pack_token_ids(r.completion_ids), _episode_json(r),
                 r.policy_version)
                for i, r in enumerate(record.rollouts)
            ],
        )
        if card is not None and card.factors:
            self._conn.executemany(
                "INSERT INTO task_factors(task_id, key, value) VALUES (?, ?, ?)",
                [(task_id, k, v) for k, v in card.factors.items()],
            )
        return task_id

    def truncate_after(self, step: int) -> int:
        """Delete every step > ``step`` (tasks, rollouts, factors, metrics); return tasks deleted.

        Used when resuming from a checkpoint older than the pool's last step.
        Deleted ids are not handed out again.
        """
        with self._lock:
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                n = self._conn.execute("SELECT COUNT(*) FROM tasks WHERE step > ?", (step,)).fetchone()[0]
                # Children first, so this works even if a foreign-key cascade were off.
                self._conn.execute(
                    "DELETE FROM rollouts WHERE task_id IN (SELECT task_id FROM tasks WHERE step > ?)", (step,)
                )
                self._conn.execute(
                    "DELETE FROM task_factors WHERE task_id IN (SELECT task_id FROM tasks WHERE step > ?)",
                    (step,),
                )
                self._conn.execute("DELETE FROM tasks WHERE step > ?", (step,))
                self._conn.execute("DELETE FROM steps WHERE step > ?", (step,))
                self._conn.execute("COMMIT")
            except BaseException:
                self._rollback()
                raise
        return int(n)

    def _rollback(self) -> None:
        """Roll back the open transaction, if any, and never raise (caller holds the lock).

        After a disk-full or I/O error SQLite may already have rolled the
        transaction back itself; a second ROLLBACK would then fail with
        "cannot rollback - no transaction is active" and hide the real error.
        """
        if not self._conn.in_transaction:
            return
        try:
            self._conn.execute("ROLLBACK")
        except sqlite3.Error:
            pass  # the error being handled is the one to report

    # ------------------------------------------------------------------ reading

    def _load(self, where: str, params: Sequence[Any], suffix: str = "", token_ids: bool = False) -> list[TaskRecord]:
        """Rebuild the records selected by ``where`` (SQL over tasks) in task_id order (rollout ids if ``token_ids``)."""
        with self._lock:
            rows = self._conn.execute(
                f"SELECT {_TASK_COLUMNS} FROM tasks WHERE {where} {suffix}", tuple(params)
            ).fetchall()
            rollouts = self._rollouts_for([int(r["task_id"]) for r in rows], token_ids)
        records = [_row_to_record(row, rollouts.get(int(row["task_id"]), [])) for row in rows]
        records.sort(key=lambda rec: rec.task_id)
        return records

    def _rollouts_for(self, task_ids: list[int], token_ids: bool = False) -> dict[int, list[Attempt]]:
        """Attempts of the given tasks, in attempt order (caller holds the lock); with ``token_ids``, their sampled ids."""
        out: dict[int, list[Attempt]] = {}
        ids_column = ", token_ids" if token_ids else ""
        for start in range(0, len(task_ids), _BATCH):
            chunk = task_ids[start : start + _BATCH]
            marks = ",".join("?" * len(chunk))
            for row in self._conn.execute(
                f"SELECT task_id, idx, text, answer, method, correct, reward, truncated, n_tokens, episode_json, "
                f"policy_version{ids_column} "
                f"FROM rollouts "
                f"WHERE task_id IN ({marks}) ORDER BY task_id, idx",
                chunk,
            ):
                packed = row["token_ids"] if token_ids else None
                out.setdefault(int(row["task_id"]), []).append(
                    Attempt(
                        text=row["text"],
                        policy_version=row["policy_version"],
                        answer=row["answer"],
                        method=row["method"],
                        correct=bool(row["correct"]),
                        reward=row["reward"],
                        truncated=bool(row["truncated"]),
                        n_tokens=row["n_tokens"],
                        completion_ids=None if packed is None else self._unpack(packed, row),
                        **_episode_fields(row["episode_json"]),
                    )
                )
        return out

    def _unpack(self, packed: Any, row: sqlite3.Row) -> list[int]:
        """A rollout's stored ids; PoolError naming the file, task and attempt when the cell is not packed ids."""
        try:
            return unpack_token_ids(packed)
        except ValueError as e:
            raise PoolError(f"pool {self.path}: rollouts.token_ids of task {row['task_id']} attempt {row['idx']} "
                            f"is damaged ({e})") from e

    def get(self, task_id: int, token_ids: bool = False) -> TaskRecord | None:
        """The record with this id, or None if there is none; ``token_ids``: with its rollouts' sampled ids."""
        found = self._load("task_id = ?", (task_id,), token_ids=token_ids)
        return found[0] if found else None

    def recent(self, n: int = 500) -> list[TaskRecord]:
        """The latest ``n`` records by id, oldest first (the capability report's window)."""
        if n <= 0:
            return []
        return self._load("1", (), f"ORDER BY task_id DESC LIMIT {int(n)}")

    def by_step(self, step: int, token_ids: bool = False) -> list[TaskRecord]:
        """All records of one step, by id.

        ``token_ids``: also load each rollout's sampled ids (``Attempt.completion_ids``; None for attempts
        of a pool written before they were kept). Off by default: only supervised updates need them, and
        they are the bulk of a long-completion pool.
        """
        return self._load("step = ?", (step,), "ORDER BY task_id", token_ids=token_ids)

    def by_validity(self, valid: bool, limit: int | None = None) -> list[TaskRecord]:
        """Valid (or invalid) records by id; with ``limit``, the latest ``limit`` of them."""
        if limit is None:
            return self._load("valid = ?", (int(valid),), "ORDER BY task_id")
        if limit <= 0:
            return []
        return self._load("valid = ?", (int(valid),), f"ORDER BY task_id DESC LIMIT {int(limit)}")

    def by_factor(self, key: str, value: str) -> list[TaskRecord]:
        """Records whose card carries factor ``key`` = ``value`` exactly, by id."""
        return self._load(
            "task_id IN (SELECT task_id FROM task_factors WHERE key = ? AND value = ?)",
            (key, value),
            "ORDER BY task_id",
        )

    def count(self) -> int:
        """Number of task records in the pool."""
        with self._lock:
            return int(self._conn.execute("SELECT COUNT(*) FROM tasks").fetchone()[0])

    def last_step(self) -> int | None:
        """The highest recorded step, or None for an empty pool."""
        with self._lock:
            value = self._conn.execute("SELECT MAX(step) FROM steps").fetchone()[0]
        return None if value is None else int(value)

    def steps_metrics(self) -> list[tuple[int, dict[str, float]]]:
        """(step, metrics) for every recorded step, in step order."""
        with self._lock:
            rows = self._conn.execute("SELECT step, metrics_json FROM steps ORDER BY step").fetchall()
        return [(int(r["step"]), json.loads(r["metrics_json"])) for r in rows]

    def valid_problems(self, since_step: int | None = None) -> Iterator[tuple[int, str]]:
        """(task_id, problem) of every valid task (of steps >= ``since_step`` when given), by id; pages through
        the pool in batches.

        Meant for rebuilding a novelty index (on resume, or over a window of recent steps) without loading whole
        records.
        """
        last = -1
        while True:
            with self._lock:
                rows = self._conn.execute(
                    "SELECT task_id, card_json, payload_json FROM tasks WHERE valid = 1 AND card_json IS NOT NULL "
                    "AND task_id > ? AND step >= ? ORDER BY task_id LIMIT ?",
                    (last, -1 if since_step is None else since_step, _BATCH),
                ).fetchall()
            if not rows:
                return
            for row in rows:
                yield int(row["task_id"]), _card_of(row).payload.prompt_text()
            last = int(rows[-1]["task_id"])

    # ------------------------------------------------------------------ export

    def _export_rows(self, step: int | None = None, extra: ExportExtra | None = None) -> Iterator[dict[str, Any]]:
        """One flat dict per valid task with a card (the run's synthesized dataset), by id; only ``step``'s if given;
        ``extra(card)`` adds a domain's own columns (e.g. the tools world's ``instruction``, ``actions``, ``outputs``)."""
        last = -1
        only_step = "" if step is None else "AND step = ? "
        while True:
            with self._lock:
                rows = self._conn.execute(
                    "SELECT task_id, step, card_json, payload_json, reference, reasons_json, success_rate, quality, "
                    "reliability "
                    f"FROM tasks WHERE valid = 1 AND card_json IS NOT NULL AND task_id > ? {only_step}"
                    "ORDER BY task_id LIMIT ?",
                    (last, *(() if step is None else (step,)), _BATCH),
                ).fetchall()
            if not rows:
                return
            for row in rows:
                out = _export_row(row)
                if extra is not None:
                    out.update(extra(_card_of(row)))
                yield out
            last = int(rows[-1]["task_id"])

    def export_jsonl(self, path: str | Path, extra: ExportExtra | None = None) -> int:
        """Write the valid tasks as JSON lines (e.g. ``valid_tasks.jsonl``); return how many.

        Each line holds ``EXPORT_COLUMNS``: task_id, step, the nine card fields with
        ``final_answer`` the verified reference (and ``solution`` null where ``answer_corrected``),
        synthesizer_answer, answer_corrected, factors, success_rate, quality, reliability, plus
        ``extra(card)``'s columns when given. The file is replaced whole.
        """
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        n = 0
        tmp = path.with_name(path.name + ".tmp")
        with tmp.open("w", encoding="utf-8") as fh:
            for row in self._export_rows(extra=extra):
                fh.write(json.dumps(row, ensure_ascii=False))
                fh.write("\n")
                n += 1
        tmp.replace(path)  # a reader never sees a half-written export
        return n

    def append_step_jsonl(self, path: str | Path, step: int, extra: ExportExtra | None = None) -> int:
        """Append the valid tasks of one recorded step to a JSONL export (rows as in ``export_jsonl``); return how many.

        The step's rows go out in one ``write`` on an append-mode descriptor, so the
        file grows by whole steps as a run records them and survives a killed run.
        The caller appends each step once (a resumed run first rewrites the file
        with ``export_jsonl``); the file is created when absent, even for no rows.
        """
        data = "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in self._export_rows(step, extra)).encode("utf-8")
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
        finally:
            os.close(fd)
        return data.count(b"\n")

    def to_hf_dataset(self) -> "datasets.Dataset":
        """The valid tasks as a ``datasets.Dataset`` with the same columns as the JSONL export.

        ``factors`` becomes a struct over every factor key seen; keys a task
        lacks read as None.
        """
        import datasets  # lazy: heavy import, only needed for export

        rows = list(self._export_rows())
        factor_keys = sorted({k for row in rows for k in row["factors"]})
        kinds = {"task_id": "int64", "step": "int64", "success_rate": "float64", "quality": "float64",
                 "reliability": "float64", "answer_corrected": "bool"}
        features = datasets.Features(
            {
                name: (
                    {k: datasets.Value("string") for k in factor_keys}
                    if name == "factors"
                    else datasets.Value(kinds.get(name, "string"))
                )
                for name in EXPORT_COLUMNS
            }
        )
        columns = {name: [row[name] for row in rows] for name in features}
        columns["factors"] = [{k: row["factors"].get(k) for k in factor_keys} for row in rows]
        columns["payload"] = [json.dumps(row["payload"], ensure_ascii=False) for row in rows]
        return datasets.Dataset.from_dict(columns, features=features)


_WIDTHS = {2: "H", 4: "I"}  # bytes per id -> struct code (unsigned, little-endian)


def pack_token_ids(ids: Sequence[int]) -> bytes:
    """Token ids as a compact blob: one byte with the width (2 when every id is below 65,536, else 4),
    then each id little-endian unsigned. 2 bytes per token for vocabularies up to 65,536 (SmolLM2:
    49,152), 4 above (Qwen3: 151,936); ValueError naming an id outside [0, 2**32)."""
    bad = next((t for t in ids if not 0 <= t < 1 << 32), None)
    if bad is not None:
        raise ValueError(f"token id {bad} is outside [0, 2**32)")
    width = 2 if all(t < 1 << 16 for t in ids) else 4
    return bytes([width]) + struct.pack(f"<{len(ids)}{_WIDTHS[width]}", *ids)


def unpack_token_ids(blob: bytes) -> list[int]:
    """The ids :func:`pack_token_ids` packed; ValueError naming the width or length when ``blob`` is not such a blob."""
    data = bytes(blob)
    if not data or data[0] not in _WIDTHS:
        raise ValueError(f"width byte {data[:1]!r} is not 2 or 4")
    width = data[0]
    if (len(data) - 1) % width:
        raise ValueError(f"{len(data) - 1} id bytes are not a multiple of the width {width}")
    return list(struct.unpack(f"<{(len(data) - 1) // width}{_WIDTHS[width]}", data[1:]))


def _is_damage(error: sqlite3.OperationalError) -> bool:
    """True for the OperationalErrors that mean a damaged file rather than e.g. a read-only one."""
    text = str(error).lower()
    return "malformed" in text or "not a database" in text or "corrupt" in text


_EPISODE_FIELDS = ("turns", "finish", "reward_parts", "first_wrong", "episode_info")


def _episode_json(r: Attempt) -> str | None:
    """The episode part of an attempt (transcript, finish, reward parts) as JSON; None for a single-turn answer."""
    if r.turns is None:
        return None
    return r.model_dump_json(include=set(_EPISODE_FIELDS))


def _episode_fields(text: str | None) -> dict[str, Any]:
    """The Attempt fields stored in ``episode_json`` ({} for a single-turn answer)."""
    return {} if text is None else dict(json.loads(text))


def _row_to_record(row: sqlite3.Row, rollouts: list[Attempt]) -> TaskRecord:
    """Rebuild a TaskRecord from its tasks row and its rollouts."""
    verdict = Verdict(
        valid=bool(row["valid"]),
        scores=json.loads(row["scores_json"]),
        quality=row["quality"],
        reliability=row["reliability"],
        reasons=json.loads(row["reasons_json"]),
        reference=row["reference"],
        agreement=row["agreement"],
    )
    card_json = row["card_json"]
    reward_json = row["synth_reward_json"]
    return TaskRecord(
        task_id=int(row["task_id"]),
        step=int(row["step"]),
        slot=int(row["slot"]),
        context_id=int(row["context_id"]),
        raw=row["raw"],
        card=_card_of(row) if card_json is not None else None,
        verdict=verdict,
        rollouts=rollouts,
        success_rate=row["success_rate"],
        synth_reward=SynthReward.model_validate_json(reward_json) if reward_json is not None else None,
        target=row["target"],
        on_target=None if row["on_target"] is None else bool(row["on_target"]),
        synth_version=row["synth_version"],
    )


def _card_of(row: sqlite3.Row) -> TaskCard:
    """The card of a task row: its header (``card_json``) with its payload (``payload_json``, typed by its kind)."""
    return TaskCard.model_validate({**json.loads(row["card_json"]), "payload": json.loads(row["payload_json"])})


def is_export_row(obj: object) -> bool:
    """Whether ``obj`` (a JSON object read back) is a row of the export (``valid_tasks.jsonl``): it has the columns
    only the export writes."""
    return isinstance(obj, dict) and all(k in obj for k in ("task_id", "synthesizer_answer", "answer_corrected"))


def card_of_export_row(row: Mapping[str, Any]) -> TaskCard:
    """The task a row of the export holds, as a card: its card fields with ``final_answer`` the verified reference,
    and its factors. A solution the export withheld (null on a corrected row) is that reference, the one thing the row
    says a solution must reach. Values that are not text are read as JSON text, as a card's are."""
    def text(value: Any) -> str:
        return value if isinstance(value, str) else "" if value is None else json.dumps(value, ensure_ascii=False)

    fields = {name: text(row.get(name)) for name in CARD_FIELDS}
    if not fields["solution"].strip():
        fields["solution"] = fields["final_answer"]
    factors = row.get("factors")
    return TaskCard(**fields, factors={str(k): str(v) for k, v in factors.items() if isinstance(v, str)}
                    if isinstance(factors, dict) else {})


def _export_row(row: sqlite3.Row) -> dict[str, Any]:
    """Flatten one valid task into its export object: the card's fields as the Synthesizer wrote them (``wire``) and
    its ``payload``; ``final_answer`` is the verified reference, ``synthesizer_answer`` the card's claim, ``solution``
    None where the oracle corrected that claim and the solution argues for it (kept where it is the gold path the
    oracle's answer comes from: ``TaskPayload.solution_is_gold``)."""
    card = _card_of(row)
    codes = {r.split(":", 1)[0].strip() for r in json.loads(row["reasons_json"])}
    reference = row["reference"]
    corrected = "reference_corrected" in codes
    wire = card.wire()
    claim = card.payload.claimed_answer()
    out: dict[str, Any] = {
        "task_id": int(row["task_id"]),
        "step": int(row["step"]),
        "problem": wire["problem"],
        "solution": None if corrected and not card.payload.solution_is_gold else wire["solution"],
        "final_answer": reference if reference is not None else claim,
        "synthesizer_answer": claim,
        "answer_corrected": corrected,
    }
    for name in CARD_FIELDS:
        out.setdefault(name, wire[name])
    out["factors"] = dict(card.factors)
    out["payload"] = card.payload.model_dump(mode="json")
    out["success_rate"] = row["success_rate"]
    out["quality"] = row["quality"]
    out["reliability"] = row["reliability"]
    return out
