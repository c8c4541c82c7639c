"""The τ² task card: a τ² task inside synco's nine-field :class:`~synco.core.records.TaskCard`, and back.

The fields that carry the task (everything else is free text the domain fills):

* ``problem`` -- the user side. Solo mode: the ticket, as plain text. User mode: the user scenario as
  compact JSON, ``{"reason_for_call", "known_info", "unknown_info", "task_instructions"}`` (τ²'s structured
  instructions; ``known_info`` / ``unknown_info`` may be null), or ``{"instructions": "..."}`` for a plain-text
  scenario (the mock domain's); either may add ``"persona"`` and ``"ticket"``.
* ``solution`` -- the gold actions, a JSON list ``[{"name": ..., "arguments": {...}}, ...]``; an action may add
  ``"requestor": "user"`` (a user-side tool, telecom) and ``"compare_args": [...]`` (the arguments τ²'s
  ACTION check compares; absent: all).
* ``final_answer`` -- the information the agent must communicate, a JSON list of strings (``[]``: none).
* ``verification_notes`` -- optionally the rest of τ²'s evaluation criteria as compact JSON,
  ``{"reward_basis": [...], "nl_assertions": [...], "env_assertions": [...]}``; any other text (a model's
  free notes) means τ²'s default basis, ``DB`` + ``COMMUNICATE``.

:func:`parse_card` reads a card as hostile text: every field is size-capped and every failure is a
:class:`~synco.core.records.CardRejected` with a code (``bad_scenario``, ``bad_actions``, ``too_many_actions``,
``bad_outputs``, ``bad_criteria``) and a detail naming the bad field and value. :func:`card_of_task` writes a τ²
task as a card, :func:`task_json` a card as a τ² task JSON object (what τ²'s ``Task.model_validate`` reads).
A task's ``initial_state`` is not carried by a card (a synthesized task starts from the domain's database);
:func:`task_json` writes none. Nothing here imports τ² (tests check the export with τ²'s own loader).
"""

from __future__ import annotations

import json
import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from synco.core.records import CardRejected, TaskCard
from synco.domains.tau2.payload import Tau2Payload

MAX_TEXT_CHARS = 2000
"""Longest scenario field, ticket, persona (τ²'s own longest, airline's task instructions, is 1117)."""
MAX_PROBLEM_CHARS = 8000
MAX_SOLUTION_CHARS = 20000
MAX_ACTIONS = 24
"""Most gold actions a card may have (τ²'s own most: 20, an airline task)."""
MAX_ARG_DEPTH = 5
MAX_ARG_STRING = 1000
MAX_ARG_ITEMS = 64
"""Most entries of one argument list or object (nested included)."""
MAX_INFO_ITEMS = 16
MAX_INFO_CHARS = 500
MAX_NOTES_CHARS = 8000
REWARD_TYPES: tuple[str, ...] = ("DB", "ENV_ASSERTION", "NL_ASSERTION", "ACTION", "COMMUNICATE")
"""τ²'s reward components (``tau2.data_model.tasks.RewardType``)."""
DEFAULT_REWARD_BASIS: tuple[str, ...] = ("DB", "COMMUNICATE")
"""τ²'s default basis (an evaluation criteria without ``reward_basis``)."""

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")
_SCENARIO_KEYS = frozenset({"persona", "ticket", "instructions", "reason_for_call", "known_info", "unknown_info",
                            "task_instructions"})
_STRUCTURED_KEYS = ("reason_for_call", "known_info", "unknown_info", "task_instructions")


class StructuredInstructions(BaseModel):
    """τ²'s structured user instructions (without ``domain``, which the export adds)."""

    model_config = ConfigDict(frozen=True)

    reason_for_call: str
    known_info: str | None = None
    unknown_info: str | None = None
    task_instructions: str


class Tau2Scenario(BaseModel):
    """The user side of a task: τ²'s user scenario (structured or plain instructions, a persona) and a ticket."""

    model_config = ConfigDict(frozen=True)

    instructions: StructuredInstructions | str
    persona: str | None = None
    ticket: str | None = None


class Tau2Action(BaseModel):
    """One gold action: a tool, its arguments, who calls it, and which arguments τ²'s ACTION check compares."""

    model_config = ConfigDict(frozen=True)

    name: str
    arguments: dict[str, Any]
    requestor: Literal["assistant", "user"] = "assistant"
    compare_args: tuple[str, ...] | None = None


class EnvAssertionSpec(BaseModel):
    """An env assertion of τ²'s evaluation criteria: an ``assert_*`` function of the domain's toolkit."""

    model_config = ConfigDict(frozen=True)

    env_type: Literal["assistant", "user"] = "assistant"
    func_name: str
    arguments: dict[str, Any]
    assert_value: bool = True
    message: str | None = None


class Tau2Card(BaseModel):
    """A τ² task as a card carries it (see the module docstring): parsed, bounded, typed."""

    model_config = ConfigDict(frozen=True)

    scenario: Tau2Scenario | None
    """None: a solo-mode card, the ticket only (``ticket`` holds it)."""
    ticket: str | None
    actions: tuple[Tau2Action, ...]
    communicate_info: tuple[str, ...] = ()
    reward_basis: tuple[str, ...] = DEFAULT_REWARD_BASIS
    nl_assertions: tuple[str, ...] = ()
    env_assertions: tuple[EnvAssertionSpec, ...] = ()

    def user_text(self) -> str:
        """Every text the user side states (scenario fields, persona, ticket): where an id may come from."""
        parts: list[str] = []
        if self.scenario is not None:
            ins = self.scenario.instructions
            parts += [ins] if isinstance(ins, str) else [v for v in ins.model_dump().values() if v]
            parts += [self.scenario.persona or ""]
        parts.append(self.ticket or "")
        return "\n".join(p for p in parts if p)


# ----------------------------------------------------------------------------------- parsing


def _text(value: object, where: str, code: str, limit: int = MAX_TEXT_CHARS, optional: bool = False) -> str | None:
    """``value`` as a non-empty string of at most ``limit`` characters (None allowed when ``optional``)."""
    if value is None and optional:
        return None
    if not isinstance(value, str) or not value.strip():
        raise CardRejected(code, f"{where} must be a non-empty string, got {str(value)[:60]!r}")
    if len(value) > limit:
        raise CardRejected(code, f"{where} has {len(value)} characters, at most {limit}")
    return value


def _json(text: str, where: str, code: str, limit: int) -> object:
    if len(text) > limit:
        raise CardRejected(code, f"{where} has {len(text)} characters, at most {limit}")
    try:
        return json.loads(text)
    except (ValueError, RecursionError) as err:
        raise CardRejected(code, f"{where} is not JSON: {str(err)[:80]}") from None


def check_value(value: object, where: str, depth: int = 0) -> None:
    """A JSON argument value within bounds (depth, string length, items); CardRejected ``bad_actions`` if not."""
    if depth > MAX_ARG_DEPTH:
        raise CardRejected("bad_actions", f"{where} nests deeper than {MAX_ARG_DEPTH}")
    if isinstance(value, str):
        if len(value) > MAX_ARG_STRING:
            raise CardRejected("bad_actions", f"{where} has {len(value)} characters, at most {MAX_ARG_STRING}")
    elif isinstance(value, list):
        if len(value) > MAX_ARG_ITEMS:
            raise CardRejected("bad_actions", f"{where} has {len(value)} items, at most {MAX_ARG_ITEMS}")
        for i, v in enumerate(value):
            check_value(v, f"{where}[{i}]", depth + 1)
    elif isinstance(value, dict):
        if len(value) > MAX_ARG_ITEMS:
            raise CardRejected("bad_actions", f"{where} has {len(value)} keys, at most {MAX_ARG_ITEMS}")
        for k, v in value.items():
            check_value(v, f"{where}.{k}", depth + 1)
    elif value is not None and not isinstance(value, (bool, int, float)):
        raise CardRejected("bad_actions", f"{where}={value!r} is not a JSON value")


def parse_scenario(problem: str) -> tuple[Tau2Scenario | None, str | None]:
    """``(scenario, ticket)`` of a card's ``problem``: a JSON object is a user scenario, other text a ticket."""
    if not isinstance(problem, str) or not problem.strip():
        raise CardRejected("bad_scenario", "problem must be a ticket or a user scenario as JSON, got nothing")
    if not problem.lstrip().startswith("{"):
        return None, _text(problem, "problem (the ticket)", "bad_scenario")
    data = _json(problem, "problem", "bad_scenario", MAX_PROBLEM_CHARS)
    if not isinstance(data, dict):
        raise CardRejected("bad_scenario", f"problem must be a JSON object, got {type(data).__name__}")
    unknown = sorted(set(data) - _SCENARIO_KEYS)
    if unknown:
        raise CardRejected("bad_scenario", f"problem has unknown key {unknown[0]!r} (allowed: {sorted(_SCENARIO_KEYS)})")
    persona = _text(data.get("persona"), "problem.persona", "bad_scenario", optional=True)
    ticket = _text(data.get("ticket"), "problem.ticket", "bad_scenario", optional=True)
    if "instructions" in data:
        if any(k in data for k in _STRUCTURED_KEYS):
            raise CardRejected("bad_scenario", "problem has both 'instructions' and structured fields")
        instructions: StructuredInstructions | str = _text(data["instructions"], "problem.instructions",
                                                           "bad_scenario")  # type: ignore[assignment]
    else:
        fields = {k: _text(data.get(k), f"problem.{k}", "bad_scenario", optional=k in ("known_info", "unknown_info"))
                  for k in _STRUCTURED_KEYS}
        instructions = StructuredInstructions(**fields)  # type: ignore[arg-type]
    return Tau2Scenario(instructions=instructions, persona=persona, ticket=ticket), ticket


_CALL = re.compile(r"([A-Za-z_][A-Za-z0-9_]{0,63})\s*\(([^()]*)\)")
_BETWEEN = re.compile(r"[\s,;]*")
_ARG = re.compile(r"\s*([A-Za-z_][A-Za-z0-9_]{0,63})\s*=\s*(.*?)\s*", re.DOTALL)
_INT = re.compile(r"-?\d{1,15}")
_FLOAT = re.compile(r"-?\d{1,15}\.\d{1,6}")


def compact_value(text: str) -> object:
    """A value of the compact call syntax: an integer, a decimal, ``true`` / ``false`` / ``null``, else the text."""
    if _INT.fullmatch(text):
        return int(text)
    if _FLOAT.fullmatch(text):
        return float(text)
    return {"true": True, "false": False, "null": None}.get(text, text)


def parse_compact_actions(solution: str) -> list[dict[str, object]]:
    """Actions written ``name(key=value, ...); name(...)``: the quote-free syntax a small model can write inside a card
    template's slot (``synth_decoding: card``); calls may be separated by ``;``, ``,`` or spaces. Values are scalars
    (:func:`compact_value`) without ``,`` ``;`` ``(`` or ``)``; an action with a list or object argument needs JSON."""
    if len(solution) > MAX_SOLUTION_CHARS:
        raise CardRejected("bad_actions", f"solution over {MAX_SOLUTION_CHARS} characters")
    out: list[dict[str, object]] = []
    at = 0
    for i, call in enumerate(_CALL.finditer(solution)):
        if not _BETWEEN.fullmatch(solution, at, call.start()):  # only separators between calls
            raise CardRejected("bad_actions", f"solution: {solution[at:call.start()].strip()[:60]!r} before action "
                                              f"{i + 1} is neither JSON nor name(key=value, ...)")
        at = call.end()
        args: dict[str, object] = {}
        for item in (a for a in call.group(2).split(",") if a.strip()):
            arg = _ARG.fullmatch(item)
            if arg is None or not arg.group(2) or ")" in arg.group(2) or "(" in arg.group(2):
                raise CardRejected("bad_actions", f"solution action {i + 1}: argument {item.strip()[:40]!r} is not "
                                                  f"key=value")
            args[arg.group(1)] = compact_value(arg.group(2))
        out.append({"name": call.group(1), "arguments": args})
    if not _BETWEEN.fullmatch(solution, at):
        raise CardRejected("bad_actions", f"solution: {solution[at:].strip()[:60]!r} after the last action is neither "
                                          f"JSON nor name(key=value, ...)")
    if not out:
        raise CardRejected("bad_actions", "solution holds no action")
    return out


def format_compact_actions(actions: tuple[Tau2Action, ...] | list[Tau2Action]) -> str | None:
    """The actions in the compact syntax of :func:`parse_compact_actions`, or None when one of them does not fit it
    (a list or object argument, a value with ``,`` ``;`` ``(`` ``)`` or ``=``, a user-side action, compare_args)."""
    parts = []
    for a in actions:
        if a.requestor != "assistant" or a.compare_args is not None:
            return None
        args = []
        for k, v in a.arguments.items():
            text = json.dumps(v) if isinstance(v, bool) or v is None else str(v)
            if isinstance(v, (list, dict)) or any(c in text for c in ",;()=") or compact_value(text) != v or not text:
                return None
            args.append(f"{k}={text}")
        parts.append(f"{a.name}({', '.join(args)})")
    return "; ".join(parts)


def parse_actions(solution: str) -> tuple[Tau2Action, ...]:
    """The gold actions of a card's ``solution``: a JSON list of ``{"name", "arguments"}``, or the compact
    ``name(key=value, ...); ...`` (:func:`parse_compact_actions`), bounded."""
    if not isinstance(solution, str):
        raise CardRejected("bad_actions", f"solution must be a JSON list of actions, got {type(solution).__name__}")
    stripped = solution.strip()
    data = (_json(solution, "solution", "bad_actions", MAX_SOLUTION_CHARS) if stripped[:1] in ("[", "{", "")
            else parse_compact_actions(solution))
    if not isinstance(data, list):
        raise CardRejected("bad_actions", f"solution must be a JSON list of actions, got {type(data).__name__}")
    if len(data) > MAX_ACTIONS:
        raise CardRejected("too_many_actions", f"{len(data)} actions, at most {MAX_ACTIONS}")
    actions = []
    for i, item in enumerate(data):
        where = f"solution[{i}]"
        if not isinstance(item, dict):
            raise CardRejected("bad_actions", f"{where} must be an object with name and arguments, got {str(item)[:60]!r}")
        extra = sorted(set(item) - {"name", "arguments", "requestor", "compare_args"})
        if extra:
            raise CardRejected("bad_actions", f"{where} has unknown key {extra[0]!r}")
        name, args = item.get("name"), item.get("arguments", {})
        if not isinstance(name, str) or not _NAME.fullmatch(name):
            raise CardRejected("bad_actions", f"{where}.name={str(name)[:60]!r} is not a tool name")
        if not isinstance(args, dict):
            raise CardRejected("bad_actions", f"{where}.arguments must be an object, got {type(args).__name__}")
        check_value(args, f"{where}.arguments")
        requestor = item.get("requestor", "assistant")
        if requestor not in ("assistant", "user"):
            raise CardRejected("bad_actions", f"{where}.requestor={str(requestor)[:30]!r}: 'assistant' or 'user'")
        compare = item.get("compare_args")
        if compare is not None and (not isinstance(compare, list) or len(compare) > MAX_ARG_ITEMS
                                    or not all(isinstance(c, str) and _NAME.fullmatch(c) for c in compare)):
            raise CardRejected("bad_actions", f"{where}.compare_args must be a list of argument names")
        actions.append(Tau2Action(name=name, arguments=args, requestor=requestor,
                                  compare_args=None if compare is None else tuple(compare)))
    return tuple(actions)


def _strings(value: object, where: str, code: str, limit: int = MAX_INFO_CHARS) -> tuple[str, ...]:
    if not isinstance(value, list) or len(value) > MAX_INFO_ITEMS:
        raise CardRejected(code, f"{where} must be a list of at most {MAX_INFO_ITEMS} strings, got {str(value)[:60]!r}")
    return tuple(_text(v, f"{where}[{i}]", code, limit) for i, v in enumerate(value))  # type: ignore[misc]


def parse_outputs(final_answer: str) -> tuple[str, ...]:
    """The communicate info of a card's ``final_answer``: a JSON list of strings (``[]``: none), or in the compact
    form of a card template's slot, ``none`` or values separated by ``;``."""
    if not isinstance(final_answer, str):
        raise CardRejected("bad_outputs", f"final_answer must be a JSON list of strings, got {type(final_answer).__name__}")
    if final_answer.strip()[:1] not in ("[", "{"):
        if len(final_answer) > MAX_INFO_ITEMS * (MAX_INFO_CHARS + 8):
            raise CardRejected("bad_outputs", "final_answer is too long")
        values = [v.strip() for v in final_answer.split(";") if v.strip()]
        return () if [v.lower() for v in values] in ([], ["none"]) else _strings(values, "final_answer", "bad_outputs")
    data = _json(final_answer, "final_answer", "bad_outputs", MAX_INFO_ITEMS * (MAX_INFO_CHARS + 8))
    return _strings(data, "final_answer", "bad_outputs")


def parse_criteria(notes: str) -> tuple[tuple[str, ...], tuple[str, ...], tuple[EnvAssertionSpec, ...]]:
    """``(reward_basis, nl_assertions, env_assertions)`` of ``verification_notes``: its JSON object when it is one,
    else τ²'s default basis and no assertions (free notes)."""
    if not isinstance(notes, str) or not notes.lstrip().startswith("{"):
        return DEFAULT_REWARD_BASIS, (), ()
    data = _json(notes, "verification_notes", "bad_criteria", MAX_NOTES_CHARS)
    if not isinstance(data, dict):
        raise CardRejected("bad_criteria", "verification_notes must be a JSON object")
    extra = sorted(set(data) - {"reward_basis", "nl_assertions", "env_assertions"})
    if extra:
        raise CardRejected("bad_criteria", f"verification_notes has unknown key {extra[0]!r}")
    basis = data.get("reward_basis", list(DEFAULT_REWARD_BASIS))
    if not isinstance(basis, list) or not basis or any(b not in REWARD_TYPES for b in basis) or len(set(basis)) < len(basis):
        raise CardRejected("bad_criteria", f"reward_basis={str(basis)[:80]!r}: distinct items of {list(REWARD_TYPES)}")
    nl = _strings(data.get("nl_assertions", []), "nl_assertions", "bad_criteria")
    raw_env = data.get("env_assertions", [])
    if not isinstance(raw_env, list) or len(raw_env) > MAX_INFO_ITEMS:
        raise CardRejected("bad_criteria", f"env_assertions must be a list of at most {MAX_INFO_ITEMS} objects")
    env = []
    for i, item in enumerate(raw_env):
        try:
            spec = EnvAssertionSpec.model_validate(item)
        except ValidationError as err:
            raise CardRejected("bad_criteria", f"env_assertions[{i}]: {str(err).splitlines()[0][:80]}") from None
        if not spec.func_name.startswith("assert_") or not _NAME.fullmatch(spec.func_name):
            raise CardRejected("bad_criteria", f"env_assertions[{i}].func_name={spec.func_name[:40]!r}: "
                                               "must be an assert_* function")
        check_value(spec.arguments, f"env_assertions[{i}].arguments")
        env.append(spec)
    return tuple(basis), nl, tuple(env)


def parse_card(card: TaskCard) -> Tau2Card:
    """The :class:`Tau2Card` of a synco card, read as hostile text (bounded); CardRejected with a code if bad."""
    task = card.payload_as(Tau2Payload)
    scenario, ticket = parse_scenario(task.scenario)
    basis, nl, env = parse_criteria(task.criteria)
    return Tau2Card(scenario=scenario, ticket=ticket, actions=parse_actions(task.actions),
                    communicate_info=parse_outputs(task.outputs), reward_basis=basis, nl_assertions=nl,
                    env_assertions=env)


# --------------------------------------------------------------------------------- formatting


def _compact(value: object) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def problem_text(scenario: Tau2Scenario | None, ticket: str | None) -> str:
    """A card's ``problem``: the ticket alone (no scenario), else the scenario as compact JSON."""
    if scenario is None:
        if not ticket:
            raise ValueError("problem_text: a card needs a scenario or a ticket, got neither")
        return ticket
    ins = scenario.instructions
    out: dict[str, Any] = {"instructions": ins} if isinstance(ins, str) else ins.model_dump()
    if scenario.persona is not None:
        out["persona"] = scenario.persona
    if scenario.ticket is not None:
        out["ticket"] = scenario.ticket
    return _compact(out)


def actions_text(actions: tuple[Tau2Action, ...] | list[Tau2Action]) -> str:
    """A card's ``solution``: the actions as a compact JSON list (defaults left out)."""
    out = []
    for a in actions:
        item: dict[str, Any] = {"name": a.name, "arguments": a.arguments}
        if a.requestor != "assistant":
            item["requestor"] = a.requestor
        if a.compare_args is not None:
            item["compare_args"] = list(a.compare_args)
        out.append(item)
    return _compact(out)


def criteria_text(reward_basis: tuple[str, ...], nl: tuple[str, ...], env: tuple[EnvAssertionSpec, ...]) -> str:
    """A card's ``verification_notes``: the evaluation criteria beyond actions and communicate info, compact JSON."""
    out: dict[str, Any] = {"reward_basis": list(reward_basis)}
    if nl:
        out["nl_assertions"] = list(nl)
    if env:
        out["env_assertions"] = [e.model_dump(exclude_defaults=True) | {"func_name": e.func_name,
                                                                         "arguments": e.arguments} for e in env]
    return _compact(out)


def card_fields(parsed: Tau2Card, intent: str = "tau2 task", notes: str = "") -> TaskCard:
    """The synco card of a parsed τ² card (the inverse of :func:`parse_card` on the task-carrying fields)."""
    return TaskCard(
        teaching_intent=intent or "tau2 task",
        target_reasoning_style="act",
        expected_reasoner_weakness="policy",
        difficulty_estimate=f"{len(parsed.actions)} actions",
        novelty_notes=notes or "from tau2",
        payload=Tau2Payload(scenario=problem_text(parsed.scenario, parsed.ticket), actions=actions_text(parsed.actions),
                            outputs=_compact(list(parsed.communicate_info)),
                            criteria=criteria_text(parsed.reward_basis, parsed.nl_assertions, parsed.env_assertions)),
    )


def tau2_card_of_task(task: Any, solo: bool = False) -> Tau2Card:
    """The :class:`Tau2Card` of a τ² ``Task`` (duck-typed: nothing imports τ² here). ``solo``: the ticket only
    (a task without one is a ValueError)."""
    us = task.user_scenario
    ins = us.instructions
    instructions: StructuredInstructions | str = ins if isinstance(ins, str) else StructuredInstructions(
        reason_for_call=ins.reason_for_call, known_info=ins.known_info, unknown_info=ins.unknown_info,
        task_instructions=ins.task_instructions)
    if solo and not task.ticket:
        raise ValueError(f"task {task.id}: solo mode needs a ticket, the task has none")
    scenario = None if solo else Tau2Scenario(instructions=instructions, persona=us.persona, ticket=task.ticket)
    crit = task.evaluation_criteria
    if crit is None:  # τ² scores a task without criteria 1.0; as a card: nothing but the database to keep
        return Tau2Card(scenario=scenario, ticket=task.ticket, actions=(), reward_basis=("DB",))
    actions = tuple(Tau2Action(name=a.name, arguments=dict(a.arguments), requestor=a.requestor,
                               compare_args=None if a.compare_args is None else tuple(a.compare_args))
                    for a in (crit.actions or []))
    env = tuple(EnvAssertionSpec(env_type=e.env_type, func_name=e.func_name, arguments=dict(e.arguments),
                                 assert_value=e.assert_value, message=e.message) for e in (crit.env_assertions or []))
    return Tau2Card(scenario=scenario, ticket=task.ticket, actions=actions,
                    communicate_info=tuple(crit.communicate_info or ()),
                    reward_basis=tuple(str(getattr(b, "value", b)) for b in crit.reward_basis),
                    nl_assertions=tuple(crit.nl_assertions or ()), env_assertions=env)


def card_of_task(task: Any, solo: bool = False) -> TaskCard:
    """The synco card of one of τ²'s own tasks (a ``tau2.data_model.tasks.Task``): its scenario (or, ``solo``, its
    ticket), gold actions, communicate info and the rest of its evaluation criteria; its initial state is dropped."""
    description = getattr(task, "description", None)
    purpose = (getattr(description, "purpose", None) or "")[:MAX_TEXT_CHARS]
    notes = (getattr(description, "notes", None) or "")[:MAX_TEXT_CHARS]
    return card_fields(tau2_card_of_task(task, solo), intent=purpose, notes=notes)


def task_json(card: TaskCard | Tau2Card, task_id: str, domain: str) -> dict[str, Any]:
    """The τ² task JSON object of a card (what ``tau2.data_model.tasks.Task.model_validate`` reads).

    Actions get ids ``<task_id>_<i>``; a ticket-only card's user scenario is its ticket as plain instructions
    (τ² needs one); ``reward_basis`` is always written (so τ²'s default never silently applies).
    """
    parsed = card if isinstance(card, Tau2Card) else parse_card(card)
    if parsed.scenario is None:
        scenario: dict[str, Any] = {"persona": None, "instructions": parsed.ticket}
    else:
        ins = parsed.scenario.instructions
        scenario = {"persona": parsed.scenario.persona,
                    "instructions": ins if isinstance(ins, str) else {"domain": domain, **ins.model_dump()}}
    actions = [{"action_id": f"{task_id}_{i}", "requestor": a.requestor, "name": a.name,
                "arguments": a.arguments, "info": None, "compare_args": None if a.compare_args is None
                else list(a.compare_args)} for i, a in enumerate(parsed.actions)]
    criteria: dict[str, Any] = {
        "actions": actions,
        "env_assertions": [e.model_dump() for e in parsed.env_assertions] or None,
        "communicate_info": list(parsed.communicate_info),
        "nl_assertions": list(parsed.nl_assertions) or None,
        "reward_basis": list(parsed.reward_basis),
    }
    return {"id": task_id, "description": None, "user_scenario": scenario, "ticket": parsed.ticket,
            "initial_state": None, "evaluation_criteria": criteria}


MAX_TASK_LINE_CHARS = 200_000
"""Longest τ² task JSON line read (τ²'s own longest airline task is under 6 KB; a mock task with history ~2 KB)."""


def task_object(text: str) -> dict[str, Any] | None:
    """The τ² task JSON object a line holds (``id`` plus ``user_scenario`` or ``evaluation_criteria``), else None."""
    s = text.strip()
    if not s.startswith("{") or len(s) > MAX_TASK_LINE_CHARS:
        return None
    try:
        obj = json.loads(s)
    except (ValueError, RecursionError):
        return None
    if isinstance(obj, dict) and "id" in obj and ("user_scenario" in obj or "evaluation_criteria" in obj):
        return obj
    return None
