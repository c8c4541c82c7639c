"""Contamination check: a tiny pool against a tiny benchmark folder."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from synco.contamination import (
    REPORT_FILE,
    ContaminationError,
    check_run,
    configure_contamination,
    format_report,
    run_contamination,
)
from synco.novelty import jaccard, normalize_text, shingle_hashes
from synco.pool import TaskPool
from synco.records import CARD_FIELDS, TaskCard, TaskRecord, Verdict

GSM = [
    ("g0", "Janet has 16 eggs. She eats 3 and bakes with 4. She sells the rest at $2 each. How much does she make?", "18"),
    ("g1", "A robe takes 2 bolts of blue fiber and half that much white fiber. How many bolts in total?", "3"),
]
MATH = [("m0", r"Convert the point $(0,3)$ in rectangular coordinates to polar coordinates.", r"(3,\frac{\pi}{2})")]
NEAR = "Janet has 18 eggs. She eats 3 and bakes with 4. She sells the rest at $2 each. How much does she make?"


def card(problem: str) -> TaskCard:
    fields = {f: "x" for f in CARD_FIELDS}
    fields["problem"] = problem
    return TaskCard(**fields)


def record(step: int, slot: int, problem: str | None, valid: bool = True) -> TaskRecord:
    return TaskRecord(step=step, slot=slot, raw=problem or "not json", card=card(problem) if problem else None,
                      verdict=Verdict(valid=valid))


def write_bench(root: Path, name: str, rows: list[tuple[str, str, str]]) -> None:
    (root / name).mkdir(parents=True)
    text = "".join(json.dumps({"id": i, "question": q, "answer": a}) + "\n" for i, q, a in rows)
    (root / name / "test.jsonl").write_text(text, encoding="utf-8")


@pytest.fixture()
def run_and_data(tmp_path: Path) -> tuple[Path, Path]:
    run, data = tmp_path / "run", tmp_path / "data"
    run.mkdir()
    write_bench(data, "gsm8k", GSM)
    write_bench(data, "math500", MATH)
    with TaskPool(run / "pool.sqlite") as pool:
        pool.record_step(0, [
            record(0, 0, GSM[0][1]),  # task 1: a verbatim copy
            record(0, 1, "Compute the sum of the first 100 prime numbers and give it modulo 7."),  # task 2: new
            record(0, 2, None),  # task 3: no card at all
        ])  # fmt: skip
        pool.record_step(1, [
            record(1, 0, NEAR),  # task 4: one digit changed
            record(1, 1, "  convert the point $(0,3)$ in RECTANGULAR coordinates to polar coordinates. ", valid=False),
        ])  # fmt: skip
    return run, data


def test_pairs_counts_and_report_file(run_and_data: tuple[Path, Path]) -> None:
    run, data = run_and_data
    report = check_run(run, data, threshold=0.5)
    near = jaccard(shingle_hashes(normalize_text(NEAR), 5), shingle_hashes(normalize_text(GSM[0][1]), 5))
    assert 0.5 < near < 1.0
    # closest first: the two exact copies (case and spaces do not count), then the near copy
    assert [(p.task_id, p.benchmark, p.benchmark_id, p.valid) for p in report.pairs] == [
        (1, "gsm8k", "g0", True), (5, "math500", "m0", False), (4, "gsm8k", "g0", True)]
    assert [p.similarity for p in report.pairs] == [1.0, 1.0, pytest.approx(near)]
    assert report.n_tasks == 4 and report.n_tasks_matched == 3  # the card-less task is not counted
    assert {k: v.model_dump() for k, v in report.counts.items()} == {
        "gsm8k": {"questions": 2, "tasks_matched": 2, "questions_matched": 1},
        "math500": {"questions": 1, "tasks_matched": 1, "questions_matched": 1},
    }
    saved = json.loads((run / REPORT_FILE).read_text(encoding="utf-8"))
    assert saved["n_tasks_matched"] == 3 and saved["pairs"][2]["task_problem"] == NEAR
    text = format_report(report, top=2)
    assert text.index("task 1 ") < text.index("task 5 ") and "task 4 " not in text and "1 more pairs" in text


def test_threshold_above_the_near_copy_keeps_only_exact_ones(run_and_data: tuple[Path, Path]) -> None:
    run, data = run_and_data
    report = check_run(run, data, threshold=0.95, benchmarks=["gsm8k"])
    assert [p.task_id for p in report.pairs] == [1]
    assert list(report.counts) == ["gsm8k"]


def test_cli_and_errors(run_and_data: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run, data = run_and_data
    p = argparse.ArgumentParser()
    configure_contamination(p)
    assert run_contamination(p.parse_args([str(run), "--data-dir", str(data), "--top", "1"])) == 0
    out = capsys.readouterr().out
    assert out.startswith("3 of 4 run tasks match") and "gsm8k g0" in out
    assert run_contamination(p.parse_args([str(tmp_path / "norun"), "--data-dir", str(data)])) == 2
    assert "pool.sqlite" in capsys.readouterr().err
    with pytest.raises(ContaminationError, match="aime24"):
        check_run(run, data, benchmarks=["aime24"])
    with pytest.raises(ContaminationError, match="threshold"):
        check_run(run, data, threshold=0.0)


# --------------------------------------------------------------------------- screening during training, by default


def screening_verifier(preset: str):
    """The TaskVerifier a run of ``preset`` builds (fast-path checker, strict), from the current folder."""
    from synco.answers import AnswerChecker
    from synco.config import load_config
    from synco.verifier import TaskVerifier

    cfg = load_config(preset)
    return TaskVerifier(cfg.verifier.model_copy(update={"strict": True}), checker=AnswerChecker(use_math_verify=False))


def card_text(problem: str) -> str:
    fields = {f: f"the {f}" for f in CARD_FIELDS}
    fields.update(problem=problem, solution=r"She sells 9 eggs: 9 * 2 = 18. \boxed{18}", final_answer="18")
    return json.dumps(fields)


def test_paper_runs_screen_for_contamination_by_default(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_bench(tmp_path / "data" / "benchmarks", "gsm8k", GSM)  # what `synco data` leaves in the run's folder
    monkeypatch.chdir(tmp_path)
    verifier = screening_verifier("paper")
    assert verifier.n_benchmark_questions == len(GSM)
    [(_, verdict)] = verifier.verify_batch([card_text(NEAR)])
    assert not verdict.valid and verdict.reason_codes == ["contaminated"] and "gsm8k/g0" in verdict.reasons[0]


def test_runs_without_benchmark_files_do_not_screen(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    verifier = screening_verifier("smollm2")  # math domain, no benchmark folder configured
    assert verifier.n_benchmark_questions == 0
    [(_, verdict)] = verifier.verify_batch([card_text(NEAR)])
    assert "contaminated" not in verdict.reason_codes
