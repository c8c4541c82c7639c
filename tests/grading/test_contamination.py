"""Contamination check: a tiny pool against a tiny benchmark folder."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest
import yaml

from synco.grading.contamination import (
    REPORT_FILE,
    ContaminationError,
    check_run,
    configure_contamination,
    format_report,
    run_contamination,
    run_start_folder,
)
from synco.grading.novelty import jaccard, normalize_text, shingle_hashes
from synco.core.pool import TaskPool
from synco.core.records import CARD_FIELDS, TaskCard, TaskRecord, Verdict

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
    from synco.grading.checker import AnswerChecker
    from synco.config import load_config
    from synco.grading.verifier import TaskVerifier

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


# --------------------------------------------------------------------------- which benchmark files: the run's own


def saved_config(run: Path, benchmark_paths: list[str], runs_dir: str = "runs", run_id: str = "r1") -> None:
    """The part of a run's config.yaml this check reads (a real one holds every field)."""
    text = yaml.safe_dump({"runs_dir": runs_dir, "run_id": run_id, "verifier": {"benchmark_paths": benchmark_paths}})
    (run / "config.yaml").write_text(text, encoding="utf-8")


@pytest.fixture()
def started_run(run_and_data: tuple[Path, Path], tmp_path: Path) -> tuple[Path, Path]:
    """The run moved to ``tmp_path/proj/runs/r1``, as `synco train run_id=r1` started in ``proj`` leaves it;
    ``proj/bench/gsm8k.jsonl`` holds only the math500 question, so it is told apart from ``data/``."""
    run, _ = run_and_data
    proj = tmp_path / "proj"
    (proj / "runs").mkdir(parents=True)
    run = run.rename(proj / "runs" / "r1")
    (proj / "bench").mkdir()
    (proj / "bench" / "gsm8k.jsonl").write_text(json.dumps({"id": "x0", "question": MATH[0][1], "answer": "1"}) + "\n")
    return run, proj


def test_without_data_dir_the_runs_own_benchmark_paths_are_used(started_run: tuple[Path, Path], tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    run, proj = started_run
    saved_config(run, ["bench/gsm8k.jsonl"])  # relative: read from proj, where the run was started
    elsewhere = tmp_path / "elsewhere"
    write_bench(elsewhere / "data" / "benchmarks", "gsm8k", GSM)  # the default folder here must not be used
    monkeypatch.chdir(elsewhere)
    report = check_run(run)
    assert report.benchmark_files == {"gsm8k": str(proj / "bench" / "gsm8k.jsonl")} and report.data_dir is None
    assert [(p.task_id, p.benchmark_id) for p in report.pairs] == [(5, "x0")]
    assert "verifier.benchmark_paths" in report.benchmark_source and str(proj) in report.benchmark_source
    p = argparse.ArgumentParser()
    configure_contamination(p)
    assert run_contamination(p.parse_args([str(run)])) == 0
    out = capsys.readouterr().out
    assert "verifier.benchmark_paths" in out and str(proj / "bench" / "gsm8k.jsonl") in out
    saved = json.loads((run / REPORT_FILE).read_text(encoding="utf-8"))
    assert saved["benchmark_files"] == {"gsm8k": str(proj / "bench" / "gsm8k.jsonl")}


def test_data_dir_given_explicitly_wins_over_the_run_config(started_run: tuple[Path, Path], tmp_path: Path) -> None:
    run, _ = started_run
    saved_config(run, ["bench/gsm8k.jsonl"])
    report = check_run(run, tmp_path / "data")
    assert set(report.benchmark_files) == {"gsm8k", "math500"} and report.data_dir == str(tmp_path / "data")
    assert report.benchmark_source == "given with --data-dir"


def test_a_run_with_no_benchmark_paths_uses_the_default_folder(started_run: tuple[Path, Path], tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    run, _ = started_run
    write_bench(tmp_path / "cwd" / "data" / "benchmarks", "gsm8k", GSM)
    monkeypatch.chdir(tmp_path / "cwd")
    saved_config(run, [])
    report = check_run(run)
    assert report.benchmark_files == {"gsm8k": str(Path("data/benchmarks/gsm8k/test.jsonl"))}
    assert "names no verifier.benchmark_paths" in report.benchmark_source
    (run / "config.yaml").unlink()
    assert "the run has no config.yaml" in check_run(run).benchmark_source


def test_missing_configured_benchmarks_name_the_field_and_folder(started_run: tuple[Path, Path],
                                                                 monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    run, proj = started_run
    monkeypatch.chdir(tmp_path)
    saved_config(run, ["data/benchmarks"])
    with pytest.raises(ContaminationError) as err:
        check_run(run)
    message = str(err.value)
    assert "verifier.benchmark_paths" in message and "not found" in message and str(proj) in message
    assert "--data-dir" in message
    saved_config(run, "data/benchmarks")  # type: ignore[arg-type]  # not a list
    with pytest.raises(ContaminationError, match="not a list of paths"):
        check_run(run)


def test_run_start_folder_falls_back_to_the_current_folder(started_run: tuple[Path, Path], tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    run, proj = started_run
    monkeypatch.chdir(tmp_path)
    saved_config(run, [])
    assert run_start_folder(run) == proj
    for runs_dir, run_id in (("/abs/runs", "r1"), ("../runs", "r1"), ("runs", "other"), ("other/runs", "r1")):
        saved_config(run, [], runs_dir=runs_dir, run_id=run_id)
        assert run_start_folder(run) == tmp_path


def test_help_documents_the_choice_of_files() -> None:
    p = argparse.ArgumentParser()
    configure_contamination(p)
    text = " ".join(p.format_help().split())
    assert "verifier.benchmark_paths" in text and "--data-dir" in text and "data/benchmarks" in text


def test_a_broken_saved_config_is_one_line_naming_the_file_and_place(tmp_path: Path) -> None:
    from synco.grading.contamination import saved_benchmark_paths

    (tmp_path / "config.yaml").write_text("verifier:\n  benchmark_paths: [a\nseed: 0\n")
    with pytest.raises(ContaminationError) as err:
        saved_benchmark_paths(tmp_path)
    msg = str(err.value)
    assert "\n" not in msg and "config.yaml" in msg and "line " in msg and "--data-dir" in msg, msg
