"""``synco data``: build the benchmark files ``<out>/<name>/test.jsonl`` from public Hugging Face datasets.

Needs internet access to the Hugging Face hub (``datasets.load_dataset``,
imported only when a download is made). Every benchmark has a small pure
converter (one HF row -> :class:`BenchmarkRow` ``{id, question, answer}``)
that follows the conventions of the project's reference files
(``shared/benchmarks/SOURCES.md``):

===========  ===========================================  =================================================
name         source (config, split)                       conversion
===========  ===========================================  =================================================
gsm8k        openai/gsm8k (main, test)                    answer = text after ``####``, thousands commas
                                                          removed; id ``gsm8k-test-<row>``
svamp        ChilleD/SVAMP (train + test = all 1000)      question = Body + " " + Question; answer = Answer
                                                          (whole floats as ints); id = ID (``chal-N``)
asdiv        EleutherAI/asdiv (asdiv, validation)         question = body + " " + question; unit in
                                                          parentheses removed (``9 (apples)`` -> ``9``);
                                                          id ``nluds-<row+1, 4 digits>``
gsm_hard     reasoning-machines/gsm-hard (train)          question = input; answer = target (whole floats
                                                          as ints, others as Python repr); id ``gsm_hard-<row>``
math500      HuggingFaceH4/MATH-500 (test)                problem / answer / unique_id
aime24       HuggingFaceH4/aime_2024 (train)              problem; answer without leading zeros; id
                                                          ``aime_2024_<I|II>-<n>`` from the AoPS url
aime25       opencompass/AIME2025 (AIME2025-I and -II,    question; answer without leading zeros; id
             test)                                        ``aime_2025_<I|II>-<row+1>``
minerva      knoveleng/Minerva-Math (train)               problem; answer = last ``\\boxed{}`` of solution;
                                                          id ``minerva-<row>``
===========  ===========================================  =================================================

The hub copies are not byte-identical to the reference files (those came
from the source repositories), so ids built from row order (asdiv, aime25)
follow the hub's order. ``<out>/sources.json`` records where each file came from.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from synco.grading.extract import boxed_answers
from synco.grading.benchmarks import BENCHMARK_FILE, BENCHMARK_NAMES

DEFAULT_OUT = Path("data/benchmarks")


class DataError(RuntimeError):
    """A benchmark that could not be downloaded or converted; the message says which and why."""


class BenchmarkRow(BaseModel):
    """One line of a benchmark file."""

    model_config = ConfigDict(frozen=True)

    id: str
    question: str
    answer: str


Row = Mapping[str, Any]
Converter = Callable[[Row, int, str], BenchmarkRow]
"""(HF row, row index within its part, part tag) -> benchmark row."""


# --------------------------------------------------------------------------- small pure helpers


def number_text(value: Any) -> str:
    """A numeric answer as text: whole floats as ints (``3.0`` -> ``3``), other floats as ``repr``, strings stripped."""
    if isinstance(value, bool):
        raise ValueError(f"answer is a boolean: {value!r}")
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"answer is {value!r}")
        return str(int(value)) if value.is_integer() else repr(value)
    if isinstance(value, str):
        return value.strip()
    raise ValueError(f"answer is a {type(value).__name__}, not a number or text")


_THOUSANDS = re.compile(r"^-?\d{1,3}(?:,\d{3})+(?:\.\d+)?$")


def gsm8k_final(solution: str) -> str:
    """The final answer of a GSM8K solution: the text after ``####``, thousands commas removed."""
    if "####" not in solution:
        raise ValueError("GSM8K solution without '####'")
    final = solution.rsplit("####", 1)[1].strip()
    return final.replace(",", "") if _THOUSANDS.match(final) else final


def strip_leading_zeros(answer: str) -> str:
    """AIME answers are integers 0-999 sometimes written ``025``: ``025`` -> ``25``, ``000`` -> ``0``."""
    a = answer.strip()
    return str(int(a)) if a.isdigit() else a


_UNIT = re.compile(r"\s*\(\s*[A-Za-z][^()]*\)")


def strip_units(answer: str) -> str:
    """ASDiv answers carry units in parentheses: ``9 (apples)`` -> ``9``; ``(2, 3)``-like groups stay."""
    return _UNIT.sub("", answer).strip()


def _text(row: Row, *keys: str) -> str:
    """The first of ``keys`` present in ``row`` with a non-empty value, stripped (KeyError naming them all)."""
    for key in keys:
        value = row.get(key)
        if value is not None and str(value).strip():
            return str(value).strip()
    raise KeyError(f"row has none of the fields {', '.join(keys)}")


_AIME_URL = re.compile(r"(\d{4})_AIME_(I{1,2})_Problems/Problem_(\d+)")


# --------------------------------------------------------------------------- converters (HF row -> BenchmarkRow)


def convert_gsm8k(row: Row, index: int, part: str = "") -> BenchmarkRow:
    return BenchmarkRow(id=f"gsm8k-test-{index}", question=_text(row, "question"), answer=gsm8k_final(row["answer"]))


def convert_svamp(row: Row, index: int, part: str = "") -> BenchmarkRow:
    question = f"{_text(row, 'Body', 'body')} {_text(row, 'Question', 'question')}"
    row_id = str(row["ID"]).strip() if row.get("ID") else f"svamp-{index}"
    return BenchmarkRow(id=row_id, question=question, answer=number_text(row["Answer"]))


def convert_asdiv(row: Row, index: int, part: str = "") -> BenchmarkRow:
    question = f"{_text(row, 'body', 'Body')} {_text(row, 'question', 'Question')}"
    return BenchmarkRow(id=f"nluds-{index + 1:04d}", question=question, answer=strip_units(_text(row, "answer", "Answer")))


def convert_gsm_hard(row: Row, index: int, part: str = "") -> BenchmarkRow:
    return BenchmarkRow(id=f"gsm_hard-{index}", question=_text(row, "input"), answer=number_text(row["target"]))


def convert_math500(row: Row, index: int, part: str = "") -> BenchmarkRow:
    return BenchmarkRow(id=_text(row, "unique_id"), question=_text(row, "problem"), answer=_text(row, "answer"))


def convert_aime24(row: Row, index: int, part: str = "") -> BenchmarkRow:
    m = _AIME_URL.search(str(row.get("url") or ""))
    row_id = f"aime_{m.group(1)}_{m.group(2)}-{int(m.group(3))}" if m else f"aime_2024-{index}"
    return BenchmarkRow(id=row_id, question=_text(row, "problem", "question"),
                        answer=strip_leading_zeros(number_text(row["answer"])))


def convert_aime25(row: Row, index: int, part: str = "") -> BenchmarkRow:
    return BenchmarkRow(id=f"aime_2025_{part}-{index + 1}", question=_text(row, "question", "problem"),
                        answer=strip_leading_zeros(number_text(row["answer"])))


def convert_minerva(row: Row, index: int, part: str = "") -> BenchmarkRow:
    boxed = boxed_answers(_text(row, "solution"))
    if not boxed:
        raise ValueError("Minerva solution without a \\boxed{} answer")
    return BenchmarkRow(id=f"minerva-{index}", question=_text(row, "problem", "question"), answer=boxed[-1])


# --------------------------------------------------------------------------- sources


@dataclass(frozen=True)
class HFPart:
    """One ``load_dataset(repo, config, split=split)`` call; ``tag`` is passed to the converter."""

    repo: str
    split: str
    config: str | None = None
    tag: str = ""


@dataclass(frozen=True)
class HFSource:
    """Where a benchmark comes from and how its rows are converted."""

    name: str
    parts: tuple[HFPart, ...]
    convert: Converter
    expected_rows: int
    sort_ids: bool = False  # order the rows by the number at the end of their id (SVAMP's chal-N)


SOURCES: dict[str, HFSource] = {
    s.name: s
    for s in (
        HFSource("gsm8k", (HFPart("openai/gsm8k", "test", "main"),), convert_gsm8k, 1319),
        HFSource("svamp", (HFPart("ChilleD/SVAMP", "train"), HFPart("ChilleD/SVAMP", "test")), convert_svamp, 1000,
                 sort_ids=True),
        HFSource("asdiv", (HFPart("EleutherAI/asdiv", "validation", "asdiv"),), convert_asdiv, 2305),
        HFSource("gsm_hard", (HFPart("reasoning-machines/gsm-hard", "train"),), convert_gsm_hard, 1319),
        HFSource("math500", (HFPart("HuggingFaceH4/MATH-500", "test"),), convert_math500, 500),
        HFSource("aime24", (HFPart("HuggingFaceH4/aime_2024", "train"),), convert_aime24, 30),
        HFSource("aime25", (HFPart("opencompass/AIME2025", "test", "AIME2025-I", "I"),
                            HFPart("opencompass/AIME2025", "test", "AIME2025-II", "II")), convert_aime25, 30),
        HFSource("minerva", (HFPart("knoveleng/Minerva-Math", "train"),), convert_minerva, 272),
    )
}
"""The eight benchmarks by name, in BENCHMARK_NAMES order."""


Loader = Callable[[HFPart], Iterable[Row]]
"""Returns the rows of one part (the default downloads with ``datasets.load_dataset``)."""


def hub_loader(part: HFPart) -> Iterable[Row]:
    """Rows of one HF dataset split, downloaded (or read from the ``datasets`` cache)."""
    try:
        import datasets
    except ImportError as err:  # pragma: no cover - datasets is a dependency
        raise DataError("synco data needs the datasets package (pip install datasets)") from err
    where = f"{part.repo}" + (f" ({part.config})" if part.config else "") + f" split {part.split}"
    try:
        return datasets.load_dataset(part.repo, part.config, split=part.split)
    except OSError as err:  # ConnectionError, hub HTTP errors and "not found" are all OSErrors
        raise DataError(
            f"could not download {where} from the Hugging Face hub: {err}\n"
            "synco data needs internet access to huggingface.co (or HF_ENDPOINT pointing at a mirror); "
            "alternatively copy <name>/test.jsonl files with id/question/answer lines into the data folder"
        ) from None
    except ValueError as err:  # e.g. a config or split the dataset no longer has
        raise DataError(f"could not load {where}: {err}") from None


def _id_number(row: BenchmarkRow) -> tuple[int, str]:
    m = re.search(r"(\d+)$", row.id)
    return (int(m.group(1)) if m else -1, row.id)


def convert_rows(source: HFSource, parts: Sequence[tuple[HFPart, Iterable[Row]]]) -> list[BenchmarkRow]:
    """Convert every row of a source's parts; a bad row or a duplicate id is a DataError naming it."""
    rows: list[BenchmarkRow] = []
    seen: set[str] = set()
    for part, part_rows in parts:
        for index, raw in enumerate(part_rows):
            try:
                row = source.convert(raw, index, part.tag)
            except (KeyError, ValueError, TypeError) as err:
                raise DataError(f"{source.name}: {part.repo} {part.split} row {index}: {err}") from None
            if not row.question or not row.answer:
                raise DataError(f"{source.name}: {part.repo} {part.split} row {index}: empty question or answer")
            if row.id in seen:
                raise DataError(f"{source.name}: duplicate id {row.id!r} ({part.repo} {part.split} row {index})")
            seen.add(row.id)
            rows.append(row)
    if source.sort_ids:
        rows.sort(key=_id_number)
    return rows


def write_benchmark(out: Path, name: str, rows: Sequence[BenchmarkRow]) -> Path:
    """Write ``<out>/<name>/test.jsonl`` atomically; return its path."""
    path = out / name / BENCHMARK_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text("".join(json.dumps(r.model_dump(), ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    tmp.replace(path)
    return path


class PreparedBenchmark(BaseModel):
    """What ``prepare_benchmarks`` wrote for one benchmark (also the ``sources.json`` entry)."""

    name: str
    rows: int
    expected_rows: int
    path: str
    sources: list[str]


def prepare_benchmarks(out: str | Path, names: Sequence[str] | None = None, loader: Loader | None = None,
                       log: Callable[[str], None] = print) -> list[PreparedBenchmark]:
    """Download (``loader``, default :func:`hub_loader`) and convert the named benchmarks (default: all eight) into ``out``.

    The first download error stops everything (when the hub is unreachable each
    attempt would otherwise wait through its retries). ``sources.json`` in
    ``out`` is updated with what was written.
    """
    out = Path(out)
    load = loader or hub_loader
    wanted = list(dict.fromkeys(names)) if names else list(SOURCES)
    unknown = [n for n in wanted if n not in SOURCES]
    if unknown:
        raise DataError(f"unknown benchmark(s) {', '.join(unknown)}; known: {', '.join(SOURCES)}")
    done: list[PreparedBenchmark] = []
    for name in wanted:
        source = SOURCES[name]
        rows = convert_rows(source, [(part, load(part)) for part in source.parts])
        path = write_benchmark(out, name, rows)
        where = [f"{p.repo}" + (f":{p.config}" if p.config else "") + f"/{p.split}" for p in source.parts]
        item = PreparedBenchmark(name=name, rows=len(rows), expected_rows=source.expected_rows, path=str(path),
                                 sources=where)
        done.append(item)
        note = "" if len(rows) == source.expected_rows else f"  (expected {source.expected_rows}: check the source)"
        log(f"{name:<9} {len(rows):>5} rows  <- {', '.join(where)}{note}")
    manifest = out / "sources.json"
    old = json.loads(manifest.read_text(encoding="utf-8")) if manifest.is_file() else {}
    old.update({d.name: d.model_dump(exclude={"path"}) for d in done})
    manifest.write_text(json.dumps(old, indent=2) + "\n", encoding="utf-8")
    return done


# --------------------------------------------------------------------------- command line


def configure_data(p: argparse.ArgumentParser) -> None:
    """Arguments of ``synco data``."""
    p.description = ("Download the evaluation benchmarks from the Hugging Face hub and write "
                     "<out>/<name>/test.jsonl files (id, question, answer) for `synco eval`. Needs internet access.")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT, help="output folder (default: %(default)s)")
    p.add_argument("--benchmarks", nargs="+", default=None, metavar="NAME",
                   help=f"which ones (default: all of {', '.join(BENCHMARK_NAMES)})")


def run_data(args: argparse.Namespace) -> int:
    """``synco data``: 0 on success, 2 when a benchmark could not be fetched or converted."""
    try:
        prepare_benchmarks(args.out, args.benchmarks)
    except DataError as err:
        print(f"synco data: {err}", file=sys.stderr)
        return 2
    print(f"written to {args.out}")
    return 0
