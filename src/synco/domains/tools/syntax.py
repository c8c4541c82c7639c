"""The tools world's text formats: tool calls, action lists, outputs, and one agent turn.

* A call, for tiny models: ``name(arg1,arg2)`` with positional arguments, each a short token
  ``[A-Za-z0-9_.-]{1,16}``, mapped to the tool's parameters in order (``find_user(bob)``,
  ``place_order(u3,p2,1)``). ``done(v1,v2)`` or ``done()`` ends an episode, stating the outputs.
* A call, for chat models: the first JSON object in the turn, ``{"name": "find_user", "arguments":
  {"name": "bob"}}`` (``arguments`` by parameter name, or a list for positional ones); ``done`` takes its
  values as ``{"outputs": [...]}`` or as any arguments' values in order. Parsed with ``json`` under a
  length bound, never evaluated.
* An action list (a card's ``solution``): calls joined by ``;``, at most :data:`MAX_ACTIONS`, no ``done``.
* Outputs (a card's ``final_answer``, a verdict's reference): values joined by ``,``, or ``none``.

Everything is bounded before it is scanned; a bad text raises :class:`ActionError` (action lists,
outputs) or :class:`TurnError` (agent turns), each with a reason code.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass

from synco.core.episodes import ToolCall
from synco.domains.tools.tools import TOOLS, Tool, ToolError, typed_arguments

MAX_ACTIONS = 12
"""Most actions in one card's action list."""

MAX_ACTIONS_CHARS = 400
"""Longest action-list text (12 calls of ~30 characters)."""

MAX_OUTPUTS = 4
"""Most values a card's outputs or one ``done(...)`` may hold."""

MAX_TURN_CHARS = 600
"""Longest agent turn that is parsed; a longer one is ``bad_call`` (and the JSON scan stays shallow)."""

DONE = "done"
"""The call that ends an episode; not a tool (it reads and writes nothing)."""

NONE = "none"
"""The outputs of a task that requires no stated value."""

_CALL = re.compile(r"([a-z_]{1,24})\(([^()]{0,200})\)")
_TOKEN = re.compile(r"[A-Za-z0-9_.-]{1,16}")
_DIGITS = re.compile(r"[0-9]{1,12}")


class ActionError(ValueError):
    """An action list or outputs text that cannot be used: ``code`` (``bad_actions``, ``too_many_actions``,
    ``unknown_tool``, ``bad_arguments``, ``bad_outputs``) and a detail naming the bad part."""

    def __init__(self, code: str, detail: str) -> None:
        super().__init__(f"{code}: {detail}")
        self.code = code
        self.detail = detail


class TurnError(ValueError):
    """An agent turn that is not one usable call: ``code`` (``bad_call``, ``multiple_calls``, ``unknown_tool``,
    ``bad_arguments``)."""

    def __init__(self, code: str, detail: str = "") -> None:
        super().__init__(f"{code}: {detail}" if detail else code)
        self.code = code
        self.detail = detail


def _short(text: str, limit: int = 40) -> str:
    return repr(text[:limit] + ("..." if len(text) > limit else ""))


# ----------------------------------------------------------------- calls


def format_call(call: ToolCall) -> str:
    """``name(a,b)``: the call's arguments in the tool's parameter order (``done`` lists its ``values``)."""
    if call.name == DONE:
        return f"{DONE}({','.join(str(v) for v in call.arguments.get('values', ()))})"
    tool = TOOLS[call.name]
    return f"{call.name}({','.join(str(call.arguments[p.name]) for p in tool.params)})"


def format_actions(calls: Sequence[ToolCall]) -> str:
    """The action-list text of ``calls`` (a card's ``solution``): ``find_user(bob);list_orders(u3)``."""
    return ";".join(format_call(c) for c in calls)


def make_call(name: str, *args: object) -> ToolCall:
    """A typed call of tool ``name`` from positional values (``make_call("find_user", "bob")``); ToolError if bad."""
    return _positional(TOOLS[name], args)


def _positional(tool: Tool, args: Sequence[object]) -> ToolCall:
    """A typed ``ToolCall`` from positional values (ToolError ``bad_arguments`` on a count or type mismatch)."""
    if len(args) != len(tool.params):
        raise ToolError("bad_arguments", f"{tool.name} takes {len(tool.params)} argument(s), got {len(args)}")
    return ToolCall(name=tool.name, arguments=typed_arguments(tool, dict(zip((p.name for p in tool.params), args))))


def _split_args(inner: str) -> list[str]:
    """``a, b`` -> ``["a", "b"]``; ``""`` -> ``[]`` (spaces around values are ignored)."""
    return [] if not inner.strip() else [a.strip() for a in inner.split(",")]


def parse_call(text: str) -> ToolCall:
    """One action ``name(args)`` (surrounding spaces ignored) as a typed ``ToolCall``; ``done`` is not an action."""
    m = _CALL.fullmatch(text.strip())
    if m is None:
        raise ActionError("bad_actions", f"{_short(text)} is not name(arg,...)")
    name, inner = m.groups()
    if name == DONE:
        raise ActionError("bad_actions", "done() is not an action (the outputs go in final_answer)")
    tool = TOOLS.get(name)
    if tool is None:
        raise ActionError("unknown_tool", f"{name!r} (tools: {', '.join(TOOLS)})")
    try:
        return _positional(tool, _split_args(inner))
    except ToolError as err:
        raise ActionError("bad_arguments", f"{name}: {err.detail}") from None


def parse_actions(text: str) -> list[ToolCall]:
    """The calls of an action list (``;``-separated, at most :data:`MAX_ACTIONS`); ActionError on any bad part."""
    if not isinstance(text, str) or not text.strip():
        raise ActionError("bad_actions", "the action list is empty")
    if len(text) > MAX_ACTIONS_CHARS:
        raise ActionError("too_many_actions" if text.count(";") >= MAX_ACTIONS else "bad_actions",
                          f"{len(text)} chars > {MAX_ACTIONS_CHARS}")
    parts = [p for p in text.strip().rstrip(";").split(";")]
    if len(parts) > MAX_ACTIONS:
        raise ActionError("too_many_actions", f"{len(parts)} actions > {MAX_ACTIONS}")
    return [parse_call(p) for p in parts]


# ----------------------------------------------------------------- outputs


def parse_outputs(text: str) -> tuple[str, ...]:
    """The values of an outputs text (``12``, ``12,lamp``, ``none`` -> ``()``); ActionError ``bad_outputs``."""
    if not isinstance(text, str) or len(text) > 100:
        raise ActionError("bad_outputs", "outputs must be a short text")
    flat = text.strip()
    if flat.lower() in (NONE, ""):
        return ()
    values = [v.strip() for v in flat.split(",")]
    if len(values) > MAX_OUTPUTS:
        raise ActionError("bad_outputs", f"{len(values)} values > {MAX_OUTPUTS}")
    for v in values:
        if not _TOKEN.fullmatch(v):
            raise ActionError("bad_outputs", f"{_short(v)} is not a short token")
    return tuple(canonical_value(v) for v in values)


def format_outputs(values: Sequence[str]) -> str:
    """``12,lamp``, or ``none`` for no values: the canonical outputs text."""
    return ",".join(canonical_value(v) for v in values) or NONE


def canonical_value(value: object) -> str:
    """A stated value as compared: lowercased, and integers without leading zeros (``012`` -> ``12``)."""
    text = str(value).strip().lower()
    return str(int(text)) if _DIGITS.fullmatch(text) else text


# ----------------------------------------------------------------- agent turns


@dataclass(frozen=True)
class ParsedTurn:
    """One agent turn's call: a tool call, or ``done`` with the stated values (``call.arguments["values"]``)."""

    call: ToolCall

    @property
    def is_done(self) -> bool:
        return self.call.name == DONE


def _done(values: Sequence[object]) -> ToolCall:
    if len(values) > MAX_OUTPUTS:
        raise TurnError("bad_arguments", f"done takes at most {MAX_OUTPUTS} values")
    out = []
    for v in values:
        if isinstance(v, bool) or not isinstance(v, (str, int)) or not _TOKEN.fullmatch(str(v)):
            raise TurnError("bad_arguments", "done values must be short words or integers")
        out.append(canonical_value(v))
    if len(out) == 1 and out[0] == NONE:
        out = []
    return ToolCall(name=DONE, arguments={"values": out})


def _json_turn(text: str) -> ParsedTurn:
    """The first JSON object of the turn as a call (``{"name": ..., "arguments": {...} | [...]}``)."""
    start = text.index("{")
    try:
        obj, _ = json.JSONDecoder().raw_decode(text[start:])
    except (ValueError, RecursionError):
        raise TurnError("bad_call", "the JSON object does not parse") from None
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
        raise TurnError("bad_call", 'a JSON call is {"name": ..., "arguments": {...}}')
    name, args = obj["name"], obj.get("arguments", {})
    if isinstance(args, str):  # some chat models write the arguments as a JSON string
        try:
            args = json.loads(args) if len(args) <= MAX_TURN_CHARS else None
        except (ValueError, RecursionError):
            args = None
    if not isinstance(args, (dict, list)):
        raise TurnError("bad_arguments", "arguments must be an object or a list")
    if name == DONE:
        values = args if isinstance(args, list) else args.get("outputs", list(args.values()))
        return ParsedTurn(_done(values if isinstance(values, list) else [values]))
    tool = TOOLS.get(name)
    if tool is None:
        raise TurnError("unknown_tool")
    try:
        if isinstance(args, list):
            return ParsedTurn(_positional(tool, args))
        return ParsedTurn(ToolCall(name=name, arguments=typed_arguments(tool, args)))
    except ToolError as err:
        raise TurnError("bad_arguments", err.detail) from None


def parse_turn(text: str) -> ParsedTurn:
    """The one call of an agent turn, or TurnError with a code (never anything else, whatever the text).

    A turn holding ``{`` is read as a JSON call (its first object); otherwise the whole turn, stripped,
    must be one ``name(args)``: two calls are ``multiple_calls``, anything else ``bad_call``.
    """
    if not isinstance(text, str) or len(text) > MAX_TURN_CHARS:
        raise TurnError("bad_call", f"a turn is at most {MAX_TURN_CHARS} chars")
    if "{" in text:
        return _json_turn(text)
    flat = text.strip()
    calls = _CALL.findall(flat)
    if len(calls) > 1:
        raise TurnError("multiple_calls", "one call per turn")
    m = _CALL.fullmatch(flat)
    if m is None:
        raise TurnError("bad_call", "expected name(arg,...)")
    name, inner = m.groups()
    if name == DONE:
        return ParsedTurn(_done(_split_args(inner)))
    tool = TOOLS.get(name)
    if tool is None:
        raise TurnError("unknown_tool")
    try:
        return ParsedTurn(_positional(tool, _split_args(inner)))
    except ToolError as err:
        raise TurnError("bad_arguments", err.detail) from None
