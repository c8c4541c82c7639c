"""synco.domains.tau2.calls: an agent turn parsed as hostile text (a call, a message, or an error code)."""

from __future__ import annotations

import pytest

from synco.core.episodes import ToolCall
from synco.domains.tau2.calls import MAX_CALL_CHARS, MAX_DEPTH, MAX_TURN_CHARS, AgentTurn, format_call, parse_turn


@pytest.mark.parametrize("name,arguments", [
    ("get_user_details", {"user_id": "mia_li_3668"}),
    ("book_reservation", {"passengers": [{"first_name": "Ünal", "dob": "1990-01-01"}], "total": 3,
                          "insurance": "no", "nested": {"a": [1, 2.5, None, True]}}),
    ("transfer_to_human_agents", {}),
    ("think", {"thought": 'quotes " and {braces} and </not_a_tag>'}),
])
def test_format_call_round_trips(name: str, arguments: dict) -> None:
    text = format_call(name, arguments)
    assert text.startswith("<tool_call>\n") and text.endswith("\n</tool_call>")
    assert parse_turn(text) == AgentTurn(call=ToolCall(name=name, arguments=arguments))


def test_bare_json_wrapped_think_and_fences() -> None:
    want = AgentTurn(call=ToolCall(name="f", arguments={"x": 1}))
    assert parse_turn('{"name": "f", "arguments": {"x": 1}}') == want
    assert parse_turn('  {"name": "f", "parameters": {"x": 1}}\n') == want  # Llama-style key
    assert parse_turn('<think>I should call f {"name": "g"}</think>\n<tool_call>{"name": "f", "arguments": {"x": 1}}'
                      '</tool_call>') == want
    assert parse_turn('Let me check.\n<tool_call>\n{"name": "f", "arguments": {"x": 1}}') == want  # unclosed: to the end
    assert parse_turn('```json\n{"name": "f", "arguments": {"x": 1}}\n```') == want
    assert parse_turn('{"name": "f"}') == AgentTurn(call=ToolCall(name="f", arguments={}))


def test_messages() -> None:
    assert parse_turn("Your flight is booked. ###STOP###") == AgentTurn(message="Your flight is booked. ###STOP###")
    assert parse_turn("<think>plan</think>  Hello!  ") == AgentTurn(message="Hello!")
    assert parse_turn("I can use {braces} inside a message") .message == "I can use {braces} inside a message"


@pytest.mark.parametrize("text,code", [
    ('{"name": "f", "arguments": {"x": 1}', "bad_json"),
    ("<tool_call>not json</tool_call>", "bad_json"),
    ('{"name": "f", "arguments": {"x": NaN}}', "bad_json"),
    ('{"name": "f", "arguments": {"x": Infinity}}', "bad_json"),
    ("<tool_call>[1, 2]</tool_call>", "bad_call"),
    ('{"arguments": {}}', "bad_call"),
    ('{"name": 3, "arguments": {}}', "bad_call"),
    ('{"name": "rm -rf /", "arguments": {}}', "bad_call"),
    ('{"name": "' + "a" * 65 + '", "arguments": {}}', "bad_call"),
    ('{"name": "f", "arguments": "{\\"x\\": 1}"}', "bad_call"),
    ('{"name": "f", "arguments": [1]}', "bad_call"),
    ("<tool_call>{}</tool_call><tool_call>{}</tool_call>", "many_calls"),
    ("<think>only thinking, never closed", "empty_turn"),
    ("   ", "empty_turn"),
    ("x" * (MAX_TURN_CHARS + 1), "too_long"),
    ('{"name": "f", "arguments": {"x": "' + "y" * MAX_CALL_CHARS + '"}}', "too_long"),
    ('{"name": "f", "arguments": ' + "[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1) + "}", "too_deep"),
    ("{" * 3000, "too_deep"),
])
def test_errors_are_codes_never_exceptions(text: str, code: str) -> None:
    turn = parse_turn(text)
    assert turn.kind == "error" and turn.error == code and turn.call is None and turn.message is None
    assert text[:30] not in turn.detail or not text[:30].strip()  # the detail never echoes the agent's text
