"""One agent turn of a τ² episode, parsed as hostile text: a tool call, or a message to the user.

A call is a JSON object ``{"name": <tool>, "arguments": {...}}`` (``"parameters"`` is read as ``"arguments"``,
as Llama-style templates write it), bare or inside the Hermes/Qwen/SmolLM wrapper ``<tool_call>...</tool_call>``;
anything else is a message. ``<think>...</think>`` blocks are dropped first (a reasoning model's scratchpad is
neither a call nor something the user reads). One call per turn.

Bounded before parsing: the turn's length, the call body's length and its bracket depth (checked by a scan,
:func:`synco.grading.jsonscan.json_depth`, so ``json`` never recurses deep); ``NaN``/``Infinity`` are refused.
Nothing is evaluated. A malformed turn is an :class:`AgentTurn` with an error code (:data:`CallError`), never an
exception.

:func:`format_call` writes the exact text a gold agent (and an SFT target) emits for a call; :func:`parse_turn`
reads it back to the same call.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Literal

from synco.core.episodes import ToolCall
from synco.grading.jsonscan import json_depth

__all__ = ["CALL_PREFIX", "MAX_CALL_CHARS", "MAX_DEPTH", "MAX_TURN_CHARS", "AgentTurn", "CallError", "format_call", "parse_turn"]

CallError = Literal["too_long", "too_deep", "bad_json", "bad_call", "many_calls", "empty_turn"]
"""Why a turn is neither a call nor a message: over a size bound, unparseable JSON, not a ``{name, arguments}``
object, more than one call, or nothing left after the think blocks."""

MAX_TURN_CHARS = 8000
"""Longest agent turn parsed at all (a message or a call, think blocks included)."""

MAX_CALL_CHARS = 4000
"""Longest call body (the JSON object)."""

MAX_DEPTH = 8
"""Deepest bracket nesting of a call body (τ²'s tools take at most a list of objects of lists)."""

MAX_NAME_CHARS = 64

OPEN_TAG, CLOSE_TAG = "<tool_call>", "</tool_call>"
_THINK = re.compile(r"<think>.*?(</think>|\Z)", re.DOTALL)
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_FENCE = re.compile(r"\A```[A-Za-z]*\n?(.*?)\n?```\Z", re.DOTALL)


@dataclass(frozen=True)
class AgentTurn:
    """One parsed turn: exactly one of ``call`` (a tool call), ``message`` (text for the user) or ``error``."""

    call: ToolCall | None = None
    message: str | None = None
    error: CallError | None = None
    detail: str = ""  # a short, fixed-vocabulary note on the error (never the agent's text)

    @property
    def kind(self) -> Literal["call", "message", "error"]:
        return "call" if self.call is not None else "message" if self.message is not None else "error"


CALL_PREFIX = f'{OPEN_TAG}\n{{"name": "'
"""The opening of every call :func:`format_call` writes: prefilled at each turn under ``tau2.tool_choice: required``,
so the agent writes the tool's name, its arguments and the close."""


def format_call(name: str, arguments: dict[str, Any]) -> str:
    """The text of one call in the ``<tool_call>`` wrapper: what the gold agent writes and :func:`parse_turn` reads."""
    return f"{OPEN_TAG}\n{json.dumps({'name': name, 'arguments': arguments}, ensure_ascii=False)}\n{CLOSE_TAG}"


def _fail(code: CallError, detail: str = "") -> AgentTurn:
    return AgentTurn(error=code, detail=detail)


def _no_constants(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def parse_call(body: str) -> AgentTurn:
    """A call body (a JSON object) as a call, or the error code of what is wrong with it."""
    body = body.strip()
    if len(body) > MAX_CALL_CHARS:
        return _fail("too_long", f"call body over {MAX_CALL_CHARS} chars")
    if json_depth(body) > MAX_DEPTH:
        return _fail("too_deep", f"nesting over {MAX_DEPTH}")
    try:
        obj = json.loads(body, parse_constant=_no_constants)
    except (ValueError, RecursionError):
        return _fail("bad_json")
    if not isinstance(obj, dict):
        return _fail("bad_call", "not an object")
    name = obj.get("name")
    if not isinstance(name, str) or len(name) > MAX_NAME_CHARS or not _NAME.fullmatch(name):
        return _fail("bad_call", "name missing or not an identifier")
    arguments = obj.get("arguments", obj.get("parameters", {}))
    if not isinstance(arguments, dict):
        return _fail("bad_call", "arguments not an object")
    return AgentTurn(call=ToolCall(name=name, arguments=arguments))


def parse_turn(text: str) -> AgentTurn:
    """An agent turn as a call (``<tool_call>{...}</tool_call>`` or a bare ``{...}``), else a message; never raises."""
    if len(text) > MAX_TURN_CHARS:
        return _fail("too_long", f"turn over {MAX_TURN_CHARS} chars")
    visible = _THINK.sub("", text).strip()
    if OPEN_TAG in visible:
        if visible.count(OPEN_TAG) > 1:
            return _fail("many_calls", "one call per turn")
        body = visible.split(OPEN_TAG, 1)[1]
        return parse_call(body.split(CLOSE_TAG, 1)[0])  # an unclosed wrapper (cut at a stop string) is read to the end
    fenced = _FENCE.match(visible)
    if fenced and fenced.group(1).lstrip().startswith("{"):
        return parse_call(fenced.group(1))
    if visible.startswith("{"):
        return parse_call(visible)
    if not visible:
        return _fail("empty_turn")
    return AgentTurn(message=visible)
