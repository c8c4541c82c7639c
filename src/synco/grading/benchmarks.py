"""Evaluation benchmarks: load ``<name>/test.jsonl`` files into typed items.

The project's benchmark files (``/work/shared/benchmarks``, see SOURCES.md
there) have one ``{"id", "question", "answer"}`` object per line. The loader
also reads the common raw layouts of the same data, so a file taken straight
from a source repository works: question from ``problem`` / ``input`` /
``Body`` + ``Question`` ..., answer from ``final_answer`` / ``target`` /
``Answer`` / a GSM8K ``... #### 42`` solution, id from ``unique_id`` / ``idx``
/ ``ID`` ... (or ``<name>-<line>`` when there is none). The verifier uses the
questions for its contamination check (on whenever ``verifier.benchmark_paths``
names files; a missing path fails ``synco train`` before any model loads, with
:func:`benchmark_paths_error`);
evaluation uses the answers.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

BENCHMARK_NAMES: tuple[str, ...] = ("gsm8k", "svamp", "asdiv", "gsm_hard", "math500", "aime24", "aime25", "minerva")
"""The eight evaluation benchmarks the project knows by name."""

BENCHMARK_FILE = "test.jsonl"
"""Discovery reads ``<data_dir>/<name>/test.jsonl`` only (e.g. ``asdiv/test_numeric.jsonl`` is ignored)."""

_ID_KEYS = ("id", "unique_id", "idx", "ID", "Id", "qid", "problem_id", "question_id", "index")
_QUESTION_KEYS = ("question", "problem", "Problem", "Question", "input", "query", "prompt")
_ANSWER_KEYS = ("answer", "final_answer", "target", "Answer", "gt", "ground_truth", "label", "output")
_GSM8K_MARK = re.compile(r"####\s*(.+?)\s*$", re.DOTALL)
_THOUSANDS = re.compile(r"^-?\d{1,3}(,\d{3})+(\.\d+)?$")


class BenchmarkError(ValueError):
    """A benchmark file or row that cannot be read; the message names the file and line."""


class BenchmarkItem(BaseModel):
    """One evaluation problem."""

    model_config = ConfigDict(frozen=True)

    id: str
    question: str
    answer: str
    benchmark: str


def benchmark_name(path: str | Path) -> str:
    """``.../gsm8k/test.jsonl`` -> ``gsm8k``; any other file -> its stem."""
    p = Path(path)
    return p.parent.name if p.name == BENCHMARK_FILE else p.stem


def discover_benchmarks(data_dir: str | Path) -> dict[str, Path]:
    """Every ``<name>/test.jsonl`` directly under ``data_dir``, by name (sorted)."""
    root = Path(data_dir)
    if not root.is_dir():
        raise NotADirectoryError(f"benchmark directory not found: {root}")
    found = {p.parent.name: p for p in root.glob(f"*/{BENCHMARK_FILE}") if p.is_file()}
    return dict(sorted(found.items()))


def resolve_benchmark_paths(paths: Iterable[str | Path]) -> dict[str, Path]:
    """Benchmark files named by ``paths``: each a ``.jsonl`` file, a ``<name>/`` folder holding
    ``test.jsonl``, or a data directory of such folders. Later duplicates of a name are an error."""
    out: dict[str, Path] = {}

    def put(name: str, file: Path) -> None:
        if name in out and out[name].resolve() != file.resolve():
            raise BenchmarkError(f"benchmark {name!r} given twice: {out[name]} and {file}")
        out[name] = file

    for raw in paths:
        p = Path(raw)
        if p.is_file():
            put(benchmark_name(p), p)
        elif (p / BENCHMARK_FILE).is_file():
            put(p.name, p / BENCHMARK_FILE)
        elif p.is_dir():
            for name, file in discover_benchmarks(p).items():
                put(name, file)
        else:
            raise FileNotFoundError(f"benchmark path not found: {p}")
    return out


def benchmark_path_problems(paths: Iterable[str | Path]) -> list[str]:
    """Why each of ``paths`` names no benchmark file: missing, or a folder without ``test.jsonl`` files.

    A cheap look at the file system (nothing is read), for a config check before
    any model loads; :func:`resolve_benchmark_paths` is what then finds the files.
    """
    problems = []
    for raw in paths:
        p = Path(raw)
        if not p.exists():
            problems.append(f"{str(raw)!r} not found")
        elif p.is_dir() and not (p / BENCHMARK_FILE).is_file() and not any(q.is_file() for q in p.glob(f"*/{BENCHMARK_FILE}")):
            problems.append(f"{str(raw)!r} holds no {BENCHMARK_FILE} nor <name>/{BENCHMARK_FILE}")
    return problems


def benchmark_paths_error(paths: Iterable[str | Path], field: str) -> str | None:
    """The message for a config whose benchmark ``paths`` (config field ``field``) are missing, or None when all exist.

    Says how to make them (``synco data``) and how to run without them.
    """
    problems = benchmark_path_problems(paths)
    if not problems:
        return None
    return (f"{field}: {'; '.join(problems)} (relative paths are read from the current folder, {Path.cwd()}). "
            "Download the benchmarks with `synco data --out data/benchmarks` (needs the Hugging Face hub) or point "
            f"{field} at your copy; {field}=[] trains without contamination screening")


def load_benchmark(path: str | Path, name: str | None = None) -> list[BenchmarkItem]:
    """All items of one JSONL benchmark file; ``name`` defaults to ``benchmark_name(path)``.

    Blank lines are skipped; a bad row (invalid JSON, no question or answer, a
    duplicate id) raises ``BenchmarkError`` naming the file and line.
    """
    p = Path(path)
    bench = name or benchmark_name(p)
    items: list[BenchmarkItem] = []
    seen: dict[str, int] = {}
    with p.open(encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                item = _item_from_row(json.loads(line), bench, default_id=f"{bench}-{len(items)}")
            except (json.JSONDecodeError, ValueError) as err:
                raise BenchmarkError(f"{p}:{lineno}: {err}") from None
            if item.id in seen:
                raise BenchmarkError(f"{p}:{lineno}: duplicate id {item.id!r} (first on line {seen[item.id]})")
            seen[item.id] = lineno
            items.append(item)
    return items


def _item_from_row(row: Any, bench: str, default_id: str) -> BenchmarkItem:
    """One row -> item, trying the alternative key names; ValueError saying what is missing."""
    if not isinstance(row, dict):
        raise ValueError(f"row is a JSON {type(row).__name__}, not an object")
    if isinstance(row.get("Body"), str) and isinstance(row.get("Question"), str):  # SVAMP / ASDiv layout
        question: str | None = f"{row['Body'].strip()} {row['Question'].strip()}".strip()
    else:
        question = _first_text(row, _QUESTION_KEYS)
    if not question:
        raise ValueError(f"no question (looked for {', '.join(_QUESTION_KEYS)}, Body+Question)")
    answer = _first_text(row, _ANSWER_KEYS)
    if not answer:
        raise ValueError(f"no answer (looked for {', '.join(_ANSWER_KEYS)})")
    row_id = _first_text(row, _ID_KEYS) or default_id
    return BenchmarkItem(id=row_id, question=question, answer=_clean_answer(answer), benchmark=bench)


def _first_text(row: dict[str, Any], keys: tuple[str, ...]) -> str | None:
    """The first of ``keys`` present with a usable scalar value, as stripped text."""
    for key in keys:
        if key in row and row[key] is not None:
            return _scalar_text(row[key], key)
    return None


def _scalar_text(value: Any, key: str) -> str:
    """Strings stripped; whole floats written as ints (``3.0`` -> ``3``); other types rejected."""
    if isinstance(value, bool):
        raise ValueError(f"field {key!r} is a boolean")
    if isinstance(value, str):
        return value.strip()
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"field {key!r} is {value}")
        return str(int(value)) if value.is_integer() else repr(value)
    raise ValueError(f"field {key!r} is a {type(value).__name__}, not text or a number")


def _clean_answer(answer: str) -> str:
    """A GSM8K-style ``... #### 1,234`` answer -> ``1234``; anything else unchanged."""
    m = _GSM8K_MARK.search(answer)
    if m is None:
        return answer
    final = m.group(1).strip()
    return final.replace(",", "") if _THOUSANDS.match(final) else final
