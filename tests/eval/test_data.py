"""Benchmark preparation: the per-benchmark row converters on rows shaped like the HF datasets, offline."""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterable
from pathlib import Path

import pytest

from synco.grading.benchmarks import BENCHMARK_NAMES, load_benchmark
from synco.eval.data import (
    SOURCES,
    BenchmarkRow,
    DataError,
    HFPart,
    Row,
    configure_data,
    convert_aime24,
    convert_aime25,
    convert_asdiv,
    convert_gsm8k,
    convert_gsm_hard,
    convert_math500,
    convert_minerva,
    convert_rows,
    convert_svamp,
    gsm8k_final,
    number_text,
    prepare_benchmarks,
    run_data,
    strip_leading_zeros,
    strip_units,
)


def test_helpers() -> None:
    assert gsm8k_final("48/2 = <<48/2=24>>24\n#### 2,125") == "2125"
    assert gsm8k_final("#### 1,5") == "1,5"  # not a thousands separator: left alone
    assert gsm8k_final("x\n#### -3.5 ") == "-3.5"
    with pytest.raises(ValueError):
        gsm8k_final("no marker")
    assert [number_text(v) for v in (3.0, 2.0107e-06, -9867630.0, 7, " 12 ")] == ["3", "2.0107e-06", "-9867630", "7", "12"]
    with pytest.raises(ValueError):
        number_text(float("nan"))
    assert [strip_leading_zeros(a) for a in ("025", "000", "104", "x1")] == ["25", "0", "104", "x1"]
    assert [strip_units(a) for a in ("9 (apples)", "5 (cm) ", "(2, 3)", "3:4", "Yes")] == ["9", "5", "(2, 3)", "3:4", "Yes"]


def test_gsm8k_row() -> None:
    row = {"question": " Natalia sold 48 clips. ", "answer": "She sold 48+24 = <<48+24=72>>72 clips.\n#### 1,072"}
    assert convert_gsm8k(row, 5) == BenchmarkRow(id="gsm8k-test-5", question="Natalia sold 48 clips.", answer="1072")


def test_svamp_row() -> None:
    row = {"ID": "chal-12", "Body": "Jack had 8 pens. ", "Question": "How many are left?", "Equation": "( 8.0 - 3.0 )",
           "Answer": 5.0, "Type": "Subtraction", "question_concat": "Jack had 8 pens. How many are left?"}
    assert convert_svamp(row, 0) == BenchmarkRow(id="chal-12", question="Jack had 8 pens. How many are left?", answer="5")


def test_asdiv_row() -> None:
    row = {"body": "Seven red apples and two green apples are in the basket.",
           "question": "How many apples are in the basket?", "solution_type": "Addition",
           "answer": "9 (apples)", "formula": "7+2=9"}
    out = convert_asdiv(row, 0)
    assert out == BenchmarkRow(id="nluds-0001",
                               question="Seven red apples and two green apples are in the basket. How many apples are in the basket?",
                               answer="9")


def test_gsm_hard_row() -> None:
    row = {"input": "Janet’s ducks lay 16 eggs per day.", "code": "def solution():\n    return 1", "target": -9867630.0}
    assert convert_gsm_hard(row, 0) == BenchmarkRow(id="gsm_hard-0", question="Janet’s ducks lay 16 eggs per day.",
                                                    answer="-9867630")
    assert convert_gsm_hard({**row, "target": 2.0107e-06}, 3).answer == "2.0107e-06"


def test_math500_row() -> None:
    row = {"problem": "Convert the point $(0,3)$ to polar coordinates.", "solution": r"... $\boxed{(3,\frac{\pi}{2})}$",
           "answer": r"\left( 3, \frac{\pi}{2} \right)", "subject": "Precalculus", "level": 2,
           "unique_id": "test/precalculus/807.json"}
    assert convert_math500(row, 0) == BenchmarkRow(id="test/precalculus/807.json",
                                                   question="Convert the point $(0,3)$ to polar coordinates.",
                                                   answer=r"\left( 3, \frac{\pi}{2} \right)")


def test_aime_rows() -> None:
    row24 = {"id": 60, "problem": "Find $m+n$.", "solution": "...", "answer": "025",
             "url": "https://artofproblemsolving.com/wiki/index.php/2024_AIME_II_Problems/Problem_4", "year": "2024"}
    assert convert_aime24(row24, 0) == BenchmarkRow(id="aime_2024_II-4", question="Find $m+n$.", answer="25")
    assert convert_aime24({**row24, "url": ""}, 7).id == "aime_2024-7"
    row25 = {"question": "Find the sum of all integer bases $b>9$.", "answer": "70"}
    assert convert_aime25(row25, 0, "I") == BenchmarkRow(id="aime_2025_I-1", question=row25["question"], answer="70")
    assert convert_aime25({**row25, "answer": 0}, 14, "II").id == "aime_2025_II-15"


def test_minerva_row_takes_the_last_box() -> None:
    row = {"problem": "Find the diameter in cm.", "solution": r"First $\boxed{2}$ then the image is $\boxed{1.6}$ cm.",
           "type": "Introduction to Astronomy (8.282J Spring 2006)", "idx": 0}
    assert convert_minerva(row, 3) == BenchmarkRow(id="minerva-3", question="Find the diameter in cm.", answer="1.6")
    with pytest.raises(ValueError, match="boxed"):
        convert_minerva({**row, "solution": "no box"}, 0)


def test_sources_cover_every_benchmark() -> None:
    assert tuple(SOURCES) == BENCHMARK_NAMES


def test_convert_rows_sorts_svamp_and_rejects_duplicates() -> None:
    def svamp(i: int) -> dict:
        return {"ID": f"chal-{i}", "Body": "b", "Question": "q?", "Answer": float(i)}

    parts = [(HFPart("x", "train"), [svamp(10), svamp(2)]), (HFPart("x", "test"), [svamp(1)])]
    assert [r.id for r in convert_rows(SOURCES["svamp"], parts)] == ["chal-1", "chal-2", "chal-10"]
    with pytest.raises(DataError, match="duplicate id 'chal-2'"):
        convert_rows(SOURCES["svamp"], [(HFPart("x", "train"), [svamp(2), svamp(2)])])
    with pytest.raises(DataError, match="row 1"):
        convert_rows(SOURCES["gsm8k"], [(HFPart("openai/gsm8k", "test"), [{"question": "q", "answer": "#### 1"},
                                                                         {"question": "q"}])])


def fake_loader(tables: dict[tuple[str, str | None, str], list[Row]]):  # noqa: ANN201
    def load(part: HFPart) -> Iterable[Row]:
        return tables[(part.repo, part.config, part.split)]

    return load


def test_prepare_writes_files_the_benchmark_loader_reads(tmp_path: Path) -> None:
    tables = {
        ("openai/gsm8k", "main", "test"): [{"question": "1+1?", "answer": "#### 2"}, {"question": "2+2?", "answer": "#### 4"}],
        ("opencompass/AIME2025", "AIME2025-I", "test"): [{"question": "P1", "answer": "070"}],
        ("opencompass/AIME2025", "AIME2025-II", "test"): [{"question": "P2", "answer": "9"}],
    }
    logs: list[str] = []
    done = prepare_benchmarks(tmp_path, ["gsm8k", "aime25"], loader=fake_loader(tables), log=logs.append)
    assert [(d.name, d.rows) for d in done] == [("gsm8k", 2), ("aime25", 2)]
    items = load_benchmark(tmp_path / "gsm8k" / "test.jsonl")
    assert [(i.id, i.question, i.answer) for i in items] == [("gsm8k-test-0", "1+1?", "2"), ("gsm8k-test-1", "2+2?", "4")]
    aime = load_benchmark(tmp_path / "aime25" / "test.jsonl")
    assert [(i.id, i.answer) for i in aime] == [("aime_2025_I-1", "70"), ("aime_2025_II-1", "9")]
    assert "expected 1319" in logs[0]  # a short download is flagged
    manifest = json.loads((tmp_path / "sources.json").read_text())
    assert manifest["aime25"]["sources"] == ["opencompass/AIME2025:AIME2025-I/test", "opencompass/AIME2025:AIME2025-II/test"]


def test_unreachable_hub_is_a_clear_error(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    import synco.eval.data as data

    def offline(part: HFPart) -> Iterable[Row]:
        raise DataError(f"could not download {part.repo} from the Hugging Face hub: no network")

    monkeypatch.setattr(data, "hub_loader", offline)
    p = argparse.ArgumentParser()
    configure_data(p)
    assert run_data(p.parse_args(["--out", str(tmp_path), "--benchmarks", "math500"])) == 2
    assert "Hugging Face hub" in capsys.readouterr().err
    with pytest.raises(DataError, match="unknown benchmark"):
        prepare_benchmarks(tmp_path, ["nope"], loader=offline)


def test_hub_loader_turns_connection_errors_into_data_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    import datasets

    from synco.eval.data import hub_loader

    def refuse(*args: object, **kwargs: object) -> None:
        raise ConnectionError("Couldn't reach 'openai/gsm8k' on the Hub (LocalEntryNotFoundError)")

    monkeypatch.setattr(datasets, "load_dataset", refuse)
    with pytest.raises(DataError, match="internet access to huggingface.co"):
        hub_loader(HFPart("openai/gsm8k", "test", "main"))
