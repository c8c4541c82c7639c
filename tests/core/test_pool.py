"""Tests for the SQLite task pool: round trips, ids, atomic steps, queries, export."""

from __future__ import annotations

import json
import re
import sqlite3
import threading
from pathlib import Path

import pytest
from pydantic_core import PydanticSerializationError

from synco.core.pool import EXPORT_COLUMNS, SCHEMA_VERSION, PoolError, TaskPool, pack_token_ids, unpack_token_ids
from synco.core.records import CARD_FIELDS, Attempt, SynthReward, TaskCard, TaskRecord, Verdict


def make_card(problem: str, factors: dict[str, str] | None = None, **extra: object) -> TaskCard:
    fields = {name: f"{name} of {problem}" for name in CARD_FIELDS}
    fields["problem"] = problem
    fields["final_answer"] = "\\frac{1}{2}"
    return TaskCard(**fields, factors=factors or {}, extra=dict(extra))


def make_record(
    step: int,
    slot: int,
    *,
    valid: bool = True,
    factors: dict[str, str] | None = None,
    correct: tuple[bool, ...] = (True, False),
    card: TaskCard | None = None,
    with_card: bool = True,
) -> TaskRecord:
    if card is None and with_card:
        card = make_card(f"problem s{step} k{slot}", factors)
    rollouts = [
        Attempt(text=f"attempt {i}", answer="1/2" if c else "3", method="boxed", correct=c,
                reward=1.0 if c else 0.0, truncated=(i == 1), n_tokens=10 + i, policy_version=step)
        for i, c in enumerate(correct)
    ] if valid else []
    return TaskRecord(
        step=step,
        slot=slot,
        context_id=slot // 2,
        raw=f"raw text {{json}} s{step} k{slot}",
        card=card,
        verdict=Verdict(
            valid=valid,
            scores={"format": 1.0, "novelty": 0.75},
            quality=0.8 if valid else 0.1,
            reliability=0.9,
            reasons=[] if valid else ["near_duplicate: sim=0.93", "missing_field: solution"],
            reference="1/2" if valid else None,
            agreement=0.5 if valid else None,
        ),
        rollouts=rollouts,
        success_rate=(sum(correct) / len(correct)) if valid and correct else None,
        synth_reward=SynthReward(total=0.7, quality=0.8, teachability=1.0, success_rate=0.5)
        if valid
        else SynthReward(total=-1.0, penalty=1.0),
    )


@pytest.fixture()
def pool(tmp_path: Path):
    with TaskPool(tmp_path / "pool.sqlite") as p:
        yield p


def test_round_trip_full_record(pool: TaskPool) -> None:
    rec = make_record(0, 0, factors={"level": "3", "topic": "algebra"}, correct=(True, False, True))
    invalid = make_record(0, 1, valid=False, with_card=False)
    ids = pool.record_step(0, [rec, invalid], metrics={"loss": 0.25})
    assert ids == [1, 2]
    assert rec.task_id == 1 and invalid.task_id == 2
    assert pool.get(1) == rec
    assert pool.get(2) == invalid
    assert pool.get(3) is None
    back = pool.get(1)
    assert back is not None and back.gradient_bearing and back.card is not None
    assert back.card.factors == {"level": "3", "topic": "algebra"}
    assert [r.n_tokens for r in back.rollouts] == [10, 11, 12]
    assert pool.steps_metrics() == [(0, {"loss": 0.25})]


def test_every_attempt_keeps_the_policy_version_that_sampled_it(pool: TaskPool) -> None:
    """The version travels with the attempt into the pool (a column of ``rollouts``), and the Synthesizer's with
    its card; a single-turn answer stores no transcript (its one turn is its text)."""
    rec = make_record(3, 0, correct=(True, False))
    rec.synth_version = 2
    pool.record_step(3, [rec])
    [back] = pool.by_step(3)
    assert [a.policy_version for a in back.rollouts] == [3, 3] and back.synth_version == 2
    assert all(a.turns is None and [t.text for t in a.transcript] == [a.text] for a in back.rollouts)
    con = sqlite3.connect(pool.path)
    assert con.execute("SELECT policy_version, episode_json FROM rollouts").fetchall() == [(3, None), (3, None)]


def test_schema_is_queryable_with_plain_sql(tmp_path: Path) -> None:
    path = tmp_path / "pool.sqlite"
    with TaskPool(path) as p:
        p.record_step(0, [make_record(0, 0, factors={"level": "2"}, correct=(True, True, False))])
    con = sqlite3.connect(path)
    assert con.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert con.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()[0] == str(SCHEMA_VERSION)
    row = con.execute(
        "SELECT valid, gradient_bearing, synth_reward_total, difficulty_estimate, success_rate FROM tasks"
    ).fetchone()
    assert row == (1, 1, 0.7, "difficulty_estimate of problem s0 k0", pytest.approx(2 / 3))
    assert con.execute("SELECT SUM(correct), COUNT(*) FROM rollouts").fetchone() == (2, 3)
    assert con.execute("SELECT key, value FROM task_factors").fetchall() == [("level", "2")]
    con.close()


def test_wal_mode_on(pool: TaskPool) -> None:
    assert pool.journal_mode == "wal"


def test_ids_unique_across_steps_and_continue_after_reopen(tmp_path: Path) -> None:
    path = tmp_path / "pool.sqlite"
    with TaskPool(path) as p:
        assert p.record_step(0, [make_record(0, k) for k in range(3)]) == [1, 2, 3]
        assert p.record_step(1, [make_record(1, k) for k in range(2)]) == [4, 5]
    with TaskPool(path) as p:
        assert p.count() == 5
        assert p.last_step() == 1
        assert p.record_step(2, [make_record(2, 0)]) == [6]


def test_ids_never_reused_after_truncate(tmp_path: Path) -> None:
    path = tmp_path / "pool.sqlite"
    with TaskPool(path) as p:
        for step in range(3):
            p.record_step(step, [make_record(step, k) for k in range(2)], {"step": float(step)})
        assert p.truncate_after(0) == 4
        assert p.count() == 2 and p.last_step() == 0
        assert [s for s, _ in p.steps_metrics()] == [0]
    with TaskPool(path) as p:
        # steps 1, 2 can be written again (resume), with fresh ids 7, 8 (3..6 are gone for good)
        assert p.record_step(1, [make_record(1, 0), make_record(1, 1)]) == [7, 8]
        con = sqlite3.connect(path)
        # 4 records x 2 rollouts; the 8 rollouts of the truncated tasks are gone
        assert con.execute("SELECT COUNT(*) FROM rollouts").fetchone()[0] == 8
        assert con.execute("SELECT COUNT(*) FROM task_factors").fetchone()[0] == 0
        con.close()


def test_step_is_atomic_when_a_write_fails_midway(pool: TaskPool) -> None:
    pool.record_step(0, [make_record(0, 0)])
    good = [make_record(1, k) for k in range(2)]
    bad = make_record(1, 2)
    bad.rollouts[1].n_tokens = 2**70  # SQLite cannot bind this: fails after the task row was inserted
    after = make_record(1, 3)
    with pytest.raises(OverflowError):
        pool.record_step(1, [*good, bad, after], {"x": 1.0})
    assert pool.count() == 1
    assert pool.by_step(1) == []
    assert pool.last_step() == 0
    assert [s for s, _ in pool.steps_metrics()] == [0]
    assert [r.task_id for r in good] == [-1, -1]  # ids are set only after a commit
    # the connection is usable and the step can be written properly; rolled-back ids were never published
    assert pool.record_step(1, [make_record(1, 0)]) == [2]


def test_step_is_atomic_when_serialisation_fails(pool: TaskPool) -> None:
    records = [make_record(0, 0), make_record(0, 1, card=make_card("p", obj=object())), make_record(0, 2)]
    with pytest.raises(PydanticSerializationError):
        pool.record_step(0, records)
    assert pool.count() == 0 and pool.last_step() is None


def test_disk_full_mid_step_is_the_error_raised_and_the_pool_stays_usable(pool: TaskPool) -> None:
    pool.record_step(0, [make_record(0, 0)])
    # A page cap stands in for a full disk: the same SQLITE_FULL, after which SQLite has already rolled the
    # transaction back itself (a second ROLLBACK used to fail and hide it behind "no transaction is active").
    pages = pool._conn.execute("PRAGMA page_count").fetchone()[0]
    pool._conn.execute(f"PRAGMA max_page_count = {pages + 1}")
    with pytest.raises(sqlite3.OperationalError, match="database or disk is full"):
        pool.record_step(1, [make_record(1, k) for k in range(40)])
    assert pool.last_step() == 0 and pool.count() == 1
    pool._conn.execute("PRAGMA max_page_count = 1073741823")  # space again
    pool.record_step(1, [make_record(1, 0)])
    assert pool.last_step() == 1 and pool.count() == 2


def test_a_file_that_is_not_a_pool_is_a_pool_error_naming_it(tmp_path: Path) -> None:
    path = tmp_path / "pool.sqlite"
    path.write_bytes(b"this is not a database " * 300)
    with pytest.raises(PoolError, match=re.escape(str(path))):
        TaskPool(path)


def test_integrity_check_finds_damage_inside_the_file(tmp_path: Path) -> None:
    path = tmp_path / "pool.sqlite"
    with TaskPool(path) as p:
        for step in range(10):
            p.record_step(step, [make_record(step, k) for k in range(20)])
        p.check_integrity()  # intact
    data = bytearray(path.read_bytes())
    middle = len(data) // 2
    data[middle : middle + 8192] = b"\xff" * 8192
    path.write_bytes(bytes(data))
    with TaskPool(path) as p:  # opening reads only the first pages, so it succeeds
        with pytest.raises(PoolError, match="damaged"):
            p.check_integrity()


def test_duplicate_step_is_an_error(pool: TaskPool) -> None:
    pool.record_step(4, [make_record(4, 0)])
    with pytest.raises(ValueError, match="step 4"):
        pool.record_step(4, [make_record(4, 1)])
    pool.record_step(5, [])
    with pytest.raises(ValueError, match="step 5"):
        pool.record_step(5, [])
    assert pool.count() == 1


def test_record_with_wrong_step_is_refused(pool: TaskPool) -> None:
    with pytest.raises(ValueError, match="step"):
        pool.record_step(1, [make_record(2, 0)])
    assert pool.count() == 0


def test_queries(pool: TaskPool) -> None:
    pool.record_step(0, [make_record(0, 0, factors={"level": "1"}), make_record(0, 1, valid=False)])
    pool.record_step(1, [make_record(1, 0, factors={"level": "2"}), make_record(1, 1, factors={"level": "1"})])
    pool.record_step(2, [make_record(2, 0, valid=False), make_record(2, 1, factors={"level": "1", "t": "x"})])
    assert [r.task_id for r in pool.recent(3)] == [4, 5, 6]
    assert [r.task_id for r in pool.recent()] == [1, 2, 3, 4, 5, 6]
    assert pool.recent(0) == []
    assert [r.task_id for r in pool.by_step(1)] == [3, 4]
    assert [r.task_id for r in pool.by_validity(True)] == [1, 3, 4, 6]
    assert [r.task_id for r in pool.by_validity(True, limit=2)] == [4, 6]
    assert [r.task_id for r in pool.by_validity(False)] == [2, 5]
    assert [r.task_id for r in pool.by_factor("level", "1")] == [1, 4, 6]
    assert [r.task_id for r in pool.by_factor("t", "x")] == [6]
    assert pool.by_factor("level", "9") == []
    assert pool.count() == 6 and pool.last_step() == 2
    assert list(pool.valid_problems()) == [
        (1, "problem s0 k0"), (3, "problem s1 k0"), (4, "problem s1 k1"), (6, "problem s2 k1"),
    ]
    assert list(pool.valid_problems(since_step=1)) == [(3, "problem s1 k0"), (4, "problem s1 k1"), (6, "problem s2 k1")]
    assert list(pool.valid_problems(since_step=2)) == [(6, "problem s2 k1")] and not list(pool.valid_problems(since_step=3))


def test_empty_pool(pool: TaskPool) -> None:
    assert pool.count() == 0
    assert pool.last_step() is None
    assert pool.recent() == [] and pool.steps_metrics() == [] and list(pool.valid_problems()) == []


def test_valid_problems_pages_through_many(pool: TaskPool) -> None:
    pool.record_step(0, [make_record(0, k, correct=()) for k in range(1203)])
    ids = [i for i, _ in pool.valid_problems()]
    assert ids == list(range(1, 1204))


def test_export_jsonl_and_hf_dataset(pool: TaskPool, tmp_path: Path) -> None:
    pool.record_step(0, [make_record(0, 0, factors={"level": "1"}), make_record(0, 1, valid=False)])
    pool.record_step(1, [make_record(1, 0, factors={"topic": "geo"}, correct=(True, True, True, False))])
    out = tmp_path / "run" / "valid_tasks.jsonl"
    assert pool.export_jsonl(out) == 2
    lines = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert [row["task_id"] for row in lines] == [1, 3]
    assert list(lines[1]) == list(EXPORT_COLUMNS)
    assert lines[1]["problem"] == "problem s1 k0"
    assert lines[1]["final_answer"] == "1/2"  # the verified reference, not the card's claim
    assert lines[1]["synthesizer_answer"] == "\\frac{1}{2}" and lines[1]["answer_corrected"] is False
    assert lines[1]["factors"] == {"topic": "geo"}
    assert lines[1]["success_rate"] == 0.75
    assert lines[1]["quality"] == 0.8 and lines[1]["reliability"] == 0.9
    assert lines[0]["teaching_intent"] == "teaching_intent of problem s0 k0"

    ds = pool.to_hf_dataset()
    assert len(ds) == 2
    assert ds.column_names == list(EXPORT_COLUMNS)
    assert ds[1]["factors"] == {"level": None, "topic": "geo"}
    assert ds[0]["success_rate"] == 0.5


def corrected_record(step: int, slot: int, claimed: str, truth: str) -> TaskRecord:
    """A valid arith-like record whose answer the oracle corrected (a soft reason, the card stays valid)."""
    rec = make_record(step, slot, card=make_card(f"{step}+{slot}").with_fields(final_answer=claimed))
    verdict = rec.verdict.model_copy(update={"reference": truth,
                                             "reasons": [f"reference_corrected: card={claimed} oracle={truth}"]})
    return rec.model_copy(update={"verdict": verdict})


def test_export_carries_the_verified_reference_as_final_answer(pool: TaskPool, tmp_path: Path) -> None:
    pool.record_step(0, [corrected_record(0, 0, claimed="989", truth="978"), make_record(0, 1)])
    out = tmp_path / "valid_tasks.jsonl"
    pool.export_jsonl(out)
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [(r["final_answer"], r["synthesizer_answer"], r["answer_corrected"]) for r in rows] == [
        ("978", "989", True), ("1/2", "\\frac{1}{2}", False)]
    ds = pool.to_hf_dataset()
    assert ds["final_answer"] == ["978", "1/2"] and ds["answer_corrected"] == [True, False]


def test_a_corrected_row_leaves_out_the_solution_that_argues_for_the_wrong_answer(pool: TaskPool,
                                                                                  tmp_path: Path) -> None:
    pool.record_step(0, [corrected_record(0, 0, claimed="989", truth="978"), make_record(0, 1)])
    out = tmp_path / "valid_tasks.jsonl"
    pool.export_jsonl(out)
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [(r["answer_corrected"], r["solution"]) for r in rows] == [(True, None), (False, "solution of problem s0 k1")]
    assert list(rows[0]) == list(EXPORT_COLUMNS)  # the key is there, null: a reader sees there is no solution
    ds = pool.to_hf_dataset()
    assert ds["solution"] == [None, "solution of problem s0 k1"]
    appended = tmp_path / "appended.jsonl"
    pool.append_step_jsonl(appended, 0)
    assert appended.read_text() == out.read_text()
    # the pool itself keeps the Synthesizer's card whole
    stored = pool.get(1)
    assert stored is not None and stored.card is not None and stored.card.payload.solution_text() == "solution of 0+0"


def test_append_step_jsonl_grows_the_export_by_whole_steps(pool: TaskPool, tmp_path: Path) -> None:
    out = tmp_path / "valid_tasks.jsonl"
    pool.record_step(0, [make_record(0, 0), make_record(0, 1, valid=False), corrected_record(0, 2, "5", "6")])
    pool.record_step(1, [make_record(1, 0, valid=False)])
    pool.record_step(2, [make_record(2, 0)])
    assert [pool.append_step_jsonl(out, s) for s in range(3)] == [2, 0, 1]
    appended = out.read_text(encoding="utf-8")
    full = tmp_path / "full.jsonl"
    assert pool.export_jsonl(full) == 3
    assert appended == full.read_text(encoding="utf-8")  # appending step by step = exporting at the end
    empty = tmp_path / "none.jsonl"
    assert pool.append_step_jsonl(empty, 1) == 0 and empty.read_text() == ""  # created even without rows


def test_export_of_empty_pool(pool: TaskPool, tmp_path: Path) -> None:
    assert pool.export_jsonl(tmp_path / "valid_tasks.jsonl") == 0
    assert (tmp_path / "valid_tasks.jsonl").read_text() == ""
    ds = pool.to_hf_dataset()
    assert len(ds) == 0 and ds.column_names == list(EXPORT_COLUMNS)


def test_concurrent_writers_get_distinct_ids(pool: TaskPool) -> None:
    results: dict[int, list[int]] = {}

    def write(step: int) -> None:
        results[step] = pool.record_step(step, [make_record(step, k) for k in range(5)])

    threads = [threading.Thread(target=write, args=(s,)) for s in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    all_ids = sorted(i for ids in results.values() for i in ids)
    assert all_ids == list(range(1, 21))
    assert pool.count() == 20


def test_schema_version_mismatch_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "pool.sqlite"
    TaskPool(path).close()
    con = sqlite3.connect(path)
    con.execute("UPDATE meta SET value = '999' WHERE key = 'schema_version'")
    con.commit()
    con.close()
    with pytest.raises(ValueError, match="schema version 999"):
        TaskPool(path)


def test_designer_target_and_on_target_round_trip(tmp_path: Path) -> None:
    on = make_record(0, 0, factors={"level": "L5"}).model_copy(update={"target": "level=L5", "on_target": True})
    off = make_record(0, 1, factors={"level": "L9"}).model_copy(update={"target": "level=L5", "on_target": False})
    plain = make_record(0, 2)  # no Designer: no target
    path = tmp_path / "pool.sqlite"
    with TaskPool(path) as p:
        p.record_step(0, [on, off, plain])
        back = p.by_step(0)
    assert [(r.target, r.on_target) for r in back] == [("level=L5", True), ("level=L5", False), (None, None)]
    with sqlite3.connect(path) as db:
        rows = db.execute("select target, on_target from tasks order by task_id").fetchall()
    assert rows == [("level=L5", 1), ("level=L5", 0), (None, None)]


def test_a_pool_written_before_the_designer_gets_the_new_columns(tmp_path: Path) -> None:
    path = tmp_path / "old.sqlite"
    with TaskPool(path) as p:
        p.record_step(0, [make_record(0, 0)])
    with sqlite3.connect(path) as db:  # what a pool of the previous release looks like
        db.execute("ALTER TABLE tasks DROP COLUMN target")
        db.execute("ALTER TABLE tasks DROP COLUMN on_target")
    with TaskPool(path) as p:
        [old] = p.by_step(0)
        assert old.target is None and old.on_target is None and old.card is not None
        p.record_step(1, [make_record(1, 0).model_copy(update={"target": "level=L1", "on_target": True})])
        assert [(r.target, r.on_target) for r in p.by_step(1)] == [("level=L1", True)]


# --------------------------------------------------------------------------- sampled token ids


def test_token_ids_pack_into_two_or_four_bytes_each() -> None:
    assert pack_token_ids([1, 258, 65535]) == bytes([2, 1, 0, 2, 1, 255, 255])  # little-endian uint16
    assert pack_token_ids([65536, 7]) == bytes([4, 0, 0, 1, 0, 7, 0, 0, 0])  # one id above 2**16: uint32
    assert pack_token_ids([]) == bytes([2])
    for ids in ([], [0], [1, 258, 65535], [151_935, 0, 2], [2**32 - 1]):
        assert unpack_token_ids(pack_token_ids(ids)) == ids
    with pytest.raises(ValueError, match="token id -1 is outside"):
        pack_token_ids([3, -1])
    with pytest.raises(ValueError, match="token id 4294967296 is outside"):
        pack_token_ids([2**32])
    with pytest.raises(ValueError, match=re.escape("width byte b'\\x03' is not 2 or 4")):
        unpack_token_ids(bytes([3, 0, 0, 0]))
    with pytest.raises(ValueError, match="3 id bytes are not a multiple of the width 2"):
        unpack_token_ids(bytes([2, 1, 0, 5]))
    with pytest.raises(ValueError, match="width byte b'' is not 2 or 4"):
        unpack_token_ids(b"")


def with_ids(rec: TaskRecord, ids: list[list[int] | None]) -> TaskRecord:
    return rec.model_copy(update={"rollouts": [r.model_copy(update={"completion_ids": i})
                                               for r, i in zip(rec.rollouts, ids, strict=True)]})


def test_sampled_ids_round_trip_and_are_loaded_only_when_asked(pool: TaskPool) -> None:
    rec = with_ids(make_record(0, 0, correct=(True, False, True)), [[5, 17, 2], [70_000, 3], None])
    pool.record_step(0, [rec])
    [back] = pool.by_step(0, token_ids=True)
    assert back == rec and pool.get(1, token_ids=True) == rec
    assert [r.completion_ids for r in back.rollouts] == [[5, 17, 2], [70_000, 3], None]
    assert [r.completion_ids for r in pool.by_step(0)[0].rollouts] == [None, None, None]  # not loaded by default
    assert [r.completion_ids for r in pool.recent()[0].rollouts] == [None, None, None]


def test_damaged_token_ids_are_a_pool_error_naming_the_attempt(tmp_path: Path) -> None:
    path = tmp_path / "pool.sqlite"
    with TaskPool(path) as p:
        p.record_step(0, [with_ids(make_record(0, 0), [[5, 6], [7]])])
    with sqlite3.connect(path) as db:
        db.execute("UPDATE rollouts SET token_ids = X'0205' WHERE idx = 1")
    with TaskPool(path) as p:
        assert len(p.by_step(0)) == 1  # the ids are not read unless asked for
        with pytest.raises(PoolError, match=r"rollouts.token_ids of task 1 attempt 1 is damaged"):
            p.by_step(0, token_ids=True)


def test_a_pool_written_before_token_ids_gets_the_column_and_resumes(tmp_path: Path) -> None:
    path = tmp_path / "old.sqlite"
    with TaskPool(path) as p:
        p.record_step(0, [make_record(0, 0)])
        p.record_step(1, [make_record(1, 0)])
    with sqlite3.connect(path) as db:  # what a pool of the previous release looks like
        db.execute("ALTER TABLE rollouts DROP COLUMN token_ids")
        assert "token_ids" not in {row[1] for row in db.execute("PRAGMA table_info(rollouts)")}
    with TaskPool(path) as p:
        p.check_integrity()
        [old] = p.by_step(0, token_ids=True)
        assert [r.completion_ids for r in old.rollouts] == [None, None]  # unknown: SFT re-tokenises these
        assert p.truncate_after(0) == 1  # resume from step 0's checkpoint
        p.record_step(1, [with_ids(make_record(1, 0), [[9, 2], [8, 8, 2]])])
        assert [r.completion_ids for r in p.by_step(1, token_ids=True)[0].rollouts] == [[9, 2], [8, 8, 2]]
    with sqlite3.connect(path) as db:
        assert db.execute("SELECT COUNT(*) FROM rollouts WHERE token_ids IS NULL").fetchone()[0] == 2


_SCHEMA_1_TASKS = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE steps (step INTEGER PRIMARY KEY, metrics_json TEXT NOT NULL, created_at REAL NOT NULL);
CREATE TABLE tasks (
    task_id INTEGER PRIMARY KEY AUTOINCREMENT, step INTEGER NOT NULL REFERENCES steps(step) ON DELETE CASCADE,
    slot INTEGER NOT NULL, context_id INTEGER NOT NULL, raw TEXT NOT NULL, card_json TEXT, valid INTEGER NOT NULL,
    quality REAL NOT NULL, reliability REAL NOT NULL, agreement REAL, scores_json TEXT NOT NULL,
    reasons_json TEXT NOT NULL, reference TEXT, success_rate REAL, gradient_bearing INTEGER NOT NULL,
    synth_reward_json TEXT, synth_reward_total REAL, difficulty_estimate TEXT, created_at REAL NOT NULL,
    target TEXT, on_target INTEGER, synth_version INTEGER);
INSERT INTO meta VALUES ('schema_version', '1'), ('created_at', '0');
INSERT INTO steps VALUES (0, '{}', 0);
"""
"""A pool as synco wrote it before payloads (schema version 1): a card row is the nine strings."""


def test_a_pool_from_before_payloads_is_refused_with_one_message_saying_why(tmp_path: Path) -> None:
    path = tmp_path / "old.sqlite"
    con = sqlite3.connect(path)
    con.executescript(_SCHEMA_1_TASKS)
    nine = {name: f"{name} text" for name in CARD_FIELDS}
    con.execute("INSERT INTO tasks(step, slot, context_id, raw, card_json, valid, quality, reliability, scores_json, "
                "reasons_json, gradient_bearing, created_at) VALUES (0, 0, 0, 'raw', ?, 1, 1, 1, '{}', '[]', 0, 0)",
                (json.dumps({**nine, "factors": {}, "extra": {}}),))
    con.commit()
    con.close()
    with pytest.raises(ValueError, match=r"written before cards carried typed payloads \(schema version 1") as err:
        TaskPool(path)
    assert "\n" not in str(err.value) and str(path) in str(err.value)
    con = sqlite3.connect(path)  # refused untouched: no column was added to the old file
    assert "payload_json" not in {row[1] for row in con.execute("PRAGMA table_info(tasks)")}
    con.close()


def test_the_payload_is_stored_whole_beside_the_header_and_read_back_as_its_type(tmp_path: Path) -> None:
    from synco.domains.tau2.payload import Tau2Payload

    card = make_card("scenario text").typed(Tau2Payload)
    with TaskPool(tmp_path / "p.sqlite") as pool:
        pool.record_step(0, [make_record(0, 0, card=card)])
        con = sqlite3.connect(tmp_path / "p.sqlite")
        header, payload = con.execute("SELECT card_json, payload_json FROM tasks").fetchone()
        con.close()
        assert "payload" not in json.loads(header) and json.loads(payload)["kind"] == "tau2"
        back = pool.get(1).card
        assert isinstance(back.payload, Tau2Payload) and back == card
        assert back.payload.scenario == "scenario text" and back.payload.criteria == "verification_notes of scenario text"
        out = tmp_path / "valid.jsonl"
        pool.export_jsonl(out)
        row = json.loads(out.read_text().splitlines()[0])
        assert row["payload"] == card.payload.model_dump(mode="json")
        assert row["verification_notes"] == "verification_notes of scenario text"
