"""synco.grading.jsonscan: the one bracket scanner (τ² call bodies, the factor proposer), on hostile text."""

from __future__ import annotations

import json
import time

import pytest

from synco.grading.jsonscan import BracketSpan, balanced_objects, bracket_span, json_depth


def objects(text: str, max_depth: int = 8, max_objects: int = 16) -> list[str]:
    return list(balanced_objects(text, max_depth, max_objects))


# ----------------------------------------------------------------- bracket_span


def test_a_span_closes_at_its_own_bracket_and_counts_its_depth() -> None:
    text = 'x {"a": [1, {"b": 2}]} tail'
    span = bracket_span(text, 2)
    assert span == BracketSpan(2, text.index(" tail"), 3)
    assert json.loads(text[span.start:span.end]) == {"a": [1, {"b": 2}]}
    assert bracket_span("[]") == BracketSpan(0, 2, 1)


def test_brackets_and_escaped_quotes_inside_strings_are_text() -> None:
    text = r'{"k": "}]{[", "q": "say \"}\" now", "b": "\\"}'
    span = bracket_span(text)
    assert span.end == len(text) and span.depth == 1
    assert json.loads(text)["q"] == 'say "}" now'


def test_an_unbalanced_span_runs_to_the_end() -> None:
    assert bracket_span('{"a": 1] x') == BracketSpan(0, 8, 1)  # any closer closes: json.loads rejects it later
    assert bracket_span('{"a": [1, 2}') == BracketSpan(0, None, 2)
    assert bracket_span('{"a": "never closed}') == BracketSpan(0, None, 1)
    assert bracket_span('{"a": "\\') == BracketSpan(0, None, 1)  # a backslash as the very last character


def test_a_span_must_start_at_a_bracket() -> None:
    for text, start in [("abc", 0), ("{", 1), ("", 0), ("{", -1)]:
        with pytest.raises(ValueError):
            bracket_span(text, start)


# ----------------------------------------------------------------- json_depth


def test_json_depth_is_the_first_values_nesting() -> None:
    assert json_depth('{"a": [1, {"b": "[[[{{{"}]}') == 3
    assert json_depth('  \n[[1]]') == 2
    assert json_depth('"\\"{"') == 0  # a string: nothing json would recurse into
    assert json_depth("plain {[[[[") == 0
    assert json_depth("") == 0
    assert json_depth("{" * 3000) == 3000  # unclosed: counted as far as it goes


# ----------------------------------------------------------------- balanced_objects


def test_objects_in_prose_in_order() -> None:
    text = 'I think {"a": 1} is it, or maybe {"b": [2, {"c": "}"}]} - not [3] though.'
    assert objects(text) == ['{"a": 1}', '{"b": [2, {"c": "}"}]}']


def test_quotes_in_prose_do_not_hide_an_object() -> None:
    """Strings are tracked inside a span only: a stray quote in the prose around it changes nothing."""
    assert objects('He said "hello {"a": 1} and left') == ['{"a": 1}']
    assert objects('an unclosed " then {"a": 1}') == ['{"a": 1}']


def test_too_deep_spans_are_skipped_and_an_unbalanced_one_ends_the_search() -> None:
    deep = "{" * 10 + "}" * 10
    assert objects(deep + ' {"ok": 1}', max_depth=8) == ['{"ok": 1}']
    assert objects(deep, max_depth=10) == [deep]
    assert objects('{"a": 1} {"b": [ {"c": 3}') == ['{"a": 1}']
    assert objects("}}}] {") == []


def test_at_most_max_objects_are_tried() -> None:
    text = " ".join("{}" for _ in range(100))
    assert len(objects(text, max_objects=16)) == 16
    assert objects("{" * 10 + "}" * 10 + " {}", max_depth=2, max_objects=1) == []  # a skipped span counts


@pytest.mark.parametrize("text", [
    "{" * 1_000_000,  # unbalanced, huge
    "[" * 500_000 + "]" * 500_000,
    '{"a": "' + "\\" * 1_000_000 + '"}',
    "{}" * 500_000,
    '{"' + "x" * 1_000_000,
    ('"' + "{") * 300_000,
])
def test_huge_hostile_input_is_scanned_in_linear_time(text: str) -> None:
    began = time.perf_counter()
    list(balanced_objects(text, 8, 16))
    json_depth(text)
    bracket_span(text) if text[0] in "{[" else None
    assert time.perf_counter() - began < 10  # ~1 s on a slow shared core; a quadratic scan would take hours
