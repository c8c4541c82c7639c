import json
from pathlib import Path

import pytest

from synco.grading.benchmarks import (
    BENCHMARK_NAMES,
    BenchmarkError,
    BenchmarkItem,
    benchmark_name,
    discover_benchmarks,
    load_benchmark,
    resolve_benchmark_paths,
)

REAL_DIR = Path("/work/shared/benchmarks")


def write_jsonl(path: Path, rows: list[object]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows), encoding="utf-8")
    return path


def test_names():
    assert BENCHMARK_NAMES == ("gsm8k", "svamp", "asdiv", "gsm_hard", "math500", "aime24", "aime25", "minerva")


def test_load_standard_rows(tmp_path):
    path = write_jsonl(tmp_path / "gsm8k" / "test.jsonl", [
        {"id": "g-0", "question": " What is 2+2? ", "answer": "4"},
        "",
        {"id": "g-1", "question": "Half of 9?", "answer": "4.5"},
    ])
    items = load_benchmark(path)
    assert items == [
        BenchmarkItem(id="g-0", question="What is 2+2?", answer="4", benchmark="gsm8k"),
        BenchmarkItem(id="g-1", question="Half of 9?", answer="4.5", benchmark="gsm8k"),
    ]


def test_alternative_keys(tmp_path):
    path = write_jsonl(tmp_path / "mixed.jsonl", [
        {"unique_id": "test/algebra/1.json", "problem": "Solve x+1=2.", "answer": "1"},
        {"idx": 7, "problem": "P2", "final_answer": "\\frac{1}{2}"},
        {"ID": "chal-3", "Body": "Dan has 3 apples. ", "Question": "How many?", "Answer": 3.0},
        {"input": "Big numbers?", "target": 2.0107e-06},
        {"question": "GSM raw", "answer": "Add them.\n#### 1,234"},
    ])
    items = load_benchmark(path)
    assert [(i.id, i.question, i.answer) for i in items] == [
        ("test/algebra/1.json", "Solve x+1=2.", "1"),
        ("7", "P2", "\\frac{1}{2}"),
        ("chal-3", "Dan has 3 apples. How many?", "3"),
        ("mixed-3", "Big numbers?", "2.0107e-06"),
        ("mixed-4", "GSM raw", "1234"),
    ]
    assert {i.benchmark for i in items} == {"mixed"}


def test_explicit_name(tmp_path):
    path = write_jsonl(tmp_path / "x.jsonl", [{"question": "q", "answer": "a"}])
    assert load_benchmark(path, name="aime25")[0].benchmark == "aime25"
    assert benchmark_name(tmp_path / "aime25" / "test.jsonl") == "aime25"


@pytest.mark.parametrize(
    "bad,message",
    [
        ("{not json", "bad.jsonl:2: Expecting"),
        ('["a list"]', "bad.jsonl:2: row is a JSON list"),
        ('{"id": "z", "answer": "1"}', "bad.jsonl:2: no question"),
        ('{"id": "z", "question": "q"}', "bad.jsonl:2: no answer"),
        ('{"id": "z", "question": "q", "answer": "  "}', "bad.jsonl:2: no answer"),
        ('{"id": "z", "question": "q", "answer": [1]}', "bad.jsonl:2: field 'answer' is a list"),
        ('{"id": "a", "question": "q", "answer": "1"}', "bad.jsonl:2: duplicate id 'a' \\(first on line 1\\)"),
    ],
)
def test_bad_row_names_file_and_line(tmp_path, bad, message):
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps({"id": "a", "question": "q", "answer": "1"}) + "\n" + bad + "\n", encoding="utf-8")
    with pytest.raises(BenchmarkError, match=message):
        load_benchmark(path)


def test_discover_ignores_other_files(tmp_path):
    write_jsonl(tmp_path / "asdiv" / "test.jsonl", [{"question": "q", "answer": "1"}])
    write_jsonl(tmp_path / "asdiv" / "test_numeric.jsonl", [{"question": "q", "answer": "1"}])
    write_jsonl(tmp_path / "gsm8k" / "test.jsonl", [{"question": "q", "answer": "1"}])
    write_jsonl(tmp_path / "stray.jsonl", [{"question": "q", "answer": "1"}])
    (tmp_path / "empty_dir").mkdir()
    found = discover_benchmarks(tmp_path)
    assert found == {"asdiv": tmp_path / "asdiv" / "test.jsonl", "gsm8k": tmp_path / "gsm8k" / "test.jsonl"}


def test_discover_missing_dir(tmp_path):
    with pytest.raises(NotADirectoryError):
        discover_benchmarks(tmp_path / "nope")


def test_resolve_paths(tmp_path):
    a = write_jsonl(tmp_path / "data" / "gsm8k" / "test.jsonl", [{"question": "q", "answer": "1"}])
    b = write_jsonl(tmp_path / "data" / "svamp" / "test.jsonl", [{"question": "q", "answer": "1"}])
    c = write_jsonl(tmp_path / "mine.jsonl", [{"question": "q", "answer": "1"}])
    assert resolve_benchmark_paths([tmp_path / "data"]) == {"gsm8k": a, "svamp": b}
    assert resolve_benchmark_paths([tmp_path / "data" / "svamp", c]) == {"svamp": b, "mine": c}
    with pytest.raises(FileNotFoundError):
        resolve_benchmark_paths([tmp_path / "missing"])
    other = write_jsonl(tmp_path / "gsm8k.jsonl", [{"question": "q", "answer": "1"}])
    with pytest.raises(BenchmarkError, match="given twice"):
        resolve_benchmark_paths([tmp_path / "data", other])


@pytest.mark.skipif(not REAL_DIR.is_dir(), reason="shared benchmark data not present")
def test_real_benchmarks_load():
    found = discover_benchmarks(REAL_DIR)
    assert set(found) <= set(BENCHMARK_NAMES)
    expected_rows = {"gsm8k": 1319, "svamp": 1000, "asdiv": 2305, "gsm_hard": 1319, "math500": 500, "aime24": 30, "minerva": 272}
    for name, path in found.items():
        items = load_benchmark(path)
        if name in expected_rows:
            assert len(items) == expected_rows[name], name
        assert all(i.question and i.answer and i.benchmark == name for i in items)
    if "aime24" in found:
        assert load_benchmark(found["aime24"])[0] == BenchmarkItem(
            id="aime_2024_I-1", question=load_benchmark(found["aime24"])[0].question, answer="204", benchmark="aime24")


def test_benchmark_path_problems_and_message(tmp_path, monkeypatch):
    from synco.grading.benchmarks import benchmark_path_problems, benchmark_paths_error

    good = tmp_path / "data" / "gsm8k" / "test.jsonl"
    good.parent.mkdir(parents=True)
    good.write_text('{"id": "1", "question": "q", "answer": "1"}\n')
    (tmp_path / "empty").mkdir()
    assert benchmark_path_problems([tmp_path / "data", tmp_path / "data" / "gsm8k", good]) == []
    assert benchmark_path_problems([tmp_path / "empty", tmp_path / "gone"]) == [
        f"{str(tmp_path / 'empty')!r} holds no test.jsonl nor <name>/test.jsonl", f"{str(tmp_path / 'gone')!r} not found"]
    assert benchmark_paths_error([tmp_path / "data"], "verifier.benchmark_paths") is None
    monkeypatch.chdir(tmp_path)
    message = benchmark_paths_error(["data/benchmarks"], "verifier.benchmark_paths")
    assert message is not None and message.startswith("verifier.benchmark_paths: 'data/benchmarks' not found")
    assert "synco data --out data/benchmarks" in message and str(tmp_path) in message
