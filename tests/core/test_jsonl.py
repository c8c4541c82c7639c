"""synco.core.jsonl.read_jsonl: the one reader of typed JSONL records (analysis, eval, τ² eval)."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import BaseModel

from synco.core.jsonl import read_jsonl, validation_message


class Row(BaseModel):
    step: int
    name: str = ""


class Boom(RuntimeError):
    pass


def test_a_missing_file_is_no_records(tmp_path: Path) -> None:
    assert read_jsonl(tmp_path / "absent.jsonl", Row, "row") == []


def test_every_line_in_order_blank_lines_skipped(tmp_path: Path) -> None:
    path = tmp_path / "rows.jsonl"
    path.write_text('{"step": 2, "name": "b"}\n\n   \n{"step": 1}\n', encoding="utf-8")
    assert read_jsonl(path, Row, "row") == [Row(step=2, name="b"), Row(step=1)]


def test_an_unterminated_last_line_counts_unless_the_tail_may_be_torn(tmp_path: Path) -> None:
    path = tmp_path / "rows.jsonl"
    path.write_text('{"step": 1}\n{"step": 2}', encoding="utf-8")
    assert [r.step for r in read_jsonl(path, Row, "row")] == [1, 2]
    assert [r.step for r in read_jsonl(path, Row, "row", torn_tail=True)] == [1]
    path.write_text('{"step": 1}\n{"ste', encoding="utf-8")  # an append cut short
    assert [r.step for r in read_jsonl(path, Row, "row", torn_tail=True)] == [1]
    with pytest.raises(ValueError, match=r"rows\.jsonl:2: not a row"):
        read_jsonl(path, Row, "row")


def test_a_bad_line_is_the_callers_error_naming_file_line_and_field(tmp_path: Path) -> None:
    path = tmp_path / "rows.jsonl"
    path.write_text('{"step": 1}\n\n{"step": "x"}\n', encoding="utf-8")
    with pytest.raises(Boom) as info:
        read_jsonl(path, Row, "row record", error=Boom, torn_tail=True)
    assert str(info.value).startswith(f"{path}:3: not a row record (step: ")
    path.write_text("not json\n", encoding="utf-8")
    with pytest.raises(Boom, match=r":1: not a row record"):
        read_jsonl(path, Row, "row record", error=Boom)


def test_line_separators_inside_strings_do_not_split_a_record(tmp_path: Path) -> None:
    """Only newlines end a record: U+2028 and a carriage return inside a JSON string are text (splitlines would cut)."""
    path = tmp_path / "rows.jsonl"
    path.write_text('{"step": 1, "name": "a\u2028b\u0085c"}\r\n{"step": 2}\n', encoding="utf-8")
    assert read_jsonl(path, Row, "row") == [Row(step=1, name="a\u2028b\u0085c"), Row(step=2)]


def test_validation_message() -> None:
    try:
        Row.model_validate({"step": "x"})
    except ValueError as e:
        assert validation_message(e).startswith("step: ")
    assert validation_message(KeyError("k")) == "'k'"
