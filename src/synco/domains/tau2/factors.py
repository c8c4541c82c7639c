"""EvoSyn's factors of a τ² task, computed from its gold trajectory (never from the card's claims about itself).

The *subject* a factor reads is ``Tau2Payload.factor_subject``: compact JSON ``{"scenario": ..., "actions": ...}`` of the
card's user side and gold action list (both parsed again, bounded, by :mod:`synco.domains.tau2.tasks`; a subject
that does not parse has no factors). τ² tags each tool ``read``, ``write``, ``think`` or ``generic``;
``num_write``, ``num_read`` and ``pattern`` count the read and write calls only (``calculate`` and
``transfer_to_human_agents`` neither read nor change the database) with ``synco.evosyn.trajectory``'s
definitions and buckets:

* ``pattern`` (built in) -- the read/write runs of the gold trajectory (``none`` for a refusal task);
* ``num_write`` / ``num_read`` -- write / read calls, bucketed ``0, 1, 2, 3-4, 5+``;
* ``family`` -- what the task changes, from its write tools (:data:`FAMILIES`: airline ``book``, ``cancel``,
  ``change_flights``, ``baggage``, ``passengers``, ``compensation``; retail and mock likewise; another domain's
  write tools are their own family): the one family of all its writes, ``mixed`` for two or more, ``none`` for
  no write;
* ``computation`` -- ``yes`` when the gold trajectory calls ``calculate``, or a write has a number argument (at
  any depth; at least 2 in size, since 0 and 1 are flags and single counts) that the user side does not state and
  (when observations are given) no earlier observation shows: a value the agent must work out (a fare difference,
  $50 per passenger, a total split over payment methods); else ``no``;
* ``distinct_tools`` -- different tools called (every kind), bucketed ``0, 1, 2, 3, 4+``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence

from synco.core.episodes import ToolCall
from synco.core.records import CardRejected
from synco.domains.tau2.tasks import Tau2Action, parse_actions, parse_scenario
from synco.evosyn.space import FactorDef
from synco.evosyn.trajectory import DISTINCT_BUCKETS, PATTERN_BUCKETS, distinct_tools, read_write_factor_defs

FAMILIES: dict[str, dict[str, str]] = {
    "airline": {"book_reservation": "book", "cancel_reservation": "cancel",
                "update_reservation_flights": "change_flights", "update_reservation_baggages": "baggage",
                "update_reservation_passengers": "passengers", "send_certificate": "compensation"},
    "retail": {"cancel_pending_order": "cancel", "exchange_delivered_order_items": "exchange",
               "return_delivered_order_items": "return", "modify_pending_order_address": "modify_order",
               "modify_pending_order_items": "modify_order", "modify_pending_order_payment": "modify_order",
               "modify_user_address": "modify_user"},
    "mock": {"create_task": "create", "update_task_status": "update"},
}
"""Each domain's write tools by family (a domain not listed: each write tool is its own family)."""

BUILTIN_FACTORS: tuple[str, ...] = ("pattern",)
"""Factors the space starts with; the rest of :func:`tau2_factor_defs` are the Reflector's candidates."""

Observe = Callable[[str], Sequence[str] | None]
"""A subject's gold observations (τ²'s JSON text per action), e.g. from the verifier's replay; None: unknown."""

_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")


def subject_parts(subject: str) -> tuple[str, tuple[Tau2Action, ...]] | None:
    """``(user-side text, gold actions)`` of a subject; None when it does not parse (bounded, as a card is)."""
    try:
        data = json.loads(subject)
        if not isinstance(data, dict):
            return None
        scenario, ticket = parse_scenario(data.get("scenario", ""))
        actions = parse_actions(data.get("actions", ""))
    except (ValueError, RecursionError, CardRejected):
        return None
    texts = [ticket or ""]
    if scenario is not None:
        ins = scenario.instructions
        texts += [ins] if isinstance(ins, str) else [v or "" for v in ins.model_dump().values()]
    return "\n".join(texts), actions


def _calls(actions: Sequence[Tau2Action]) -> list[ToolCall]:
    return [ToolCall(name=a.name, arguments=a.arguments) for a in actions]


def _read_write(actions: Sequence[Tau2Action], kinds: Mapping[str, str]) -> list[ToolCall] | None:
    """The read and write calls (others dropped); None when a tool has no τ² tag (not a verified trajectory)."""
    if any(a.name not in kinds for a in actions):
        return None
    return [ToolCall(name=a.name, arguments=a.arguments) for a in actions if kinds[a.name] in ("read", "write")]


def numbers_in(text: str) -> set[float]:
    """The numbers a text states (``$1,628`` is 1628, ``2.5`` is 2.5)."""
    return {float(m) for m in _NUMBER.findall(re.sub(r"(?<=\d),(?=\d{3})", "", text))}


def argument_numbers(value: object) -> list[float]:
    """Every number in an argument value, at any depth (booleans are not numbers)."""
    if isinstance(value, bool):
        return []
    if isinstance(value, (int, float)):
        return [float(value)]
    if isinstance(value, dict):
        return [n for v in value.values() for n in argument_numbers(v)]
    if isinstance(value, list):
        return [n for v in value for n in argument_numbers(v)]
    return []


def computation(user_text: str, actions: Sequence[Tau2Action], kinds: Mapping[str, str],
                observations: Sequence[str] | None = None) -> str:
    """``yes`` / ``no``: does the gold trajectory work a value out (see the module docstring)?"""
    if any(a.name == "calculate" for a in actions):
        return "yes"
    stated = numbers_in(user_text)
    for i, a in enumerate(actions):
        if kinds.get(a.name) != "write":
            continue
        shown = stated | (numbers_in("\n".join(observations[:i])) if observations is not None else set())
        if any(abs(n) >= 2 and n not in shown for n in argument_numbers(a.arguments)):
            return "yes"
    return "no"


def family(actions: Sequence[Tau2Action], kinds: Mapping[str, str], families: Mapping[str, str]) -> str:
    """The one family of the task's writes (``mixed`` for several, ``none`` for no write)."""
    found = {families.get(a.name, a.name) for a in actions if kinds.get(a.name) == "write"}
    return "none" if not found else found.pop() if len(found) == 1 else "mixed"


def tau2_factor_defs(tool_kinds: Mapping[str, str], domain: str | None = None,
                     observe: Observe | None = None) -> list[FactorDef]:
    """The factors of a τ² domain's gold trajectories, built-in (``pattern``) first.

    ``tool_kinds``: each tool's τ² tag by name. ``domain``: which :data:`FAMILIES` table names the families.
    ``observe``: the gold observations of a subject (for ``computation``'s "no earlier observation shows it").
    """
    kinds = dict(tool_kinds)
    families = FAMILIES.get(domain or "", {})
    writes = sorted(n for n, k in kinds.items() if k == "write")
    family_buckets = tuple(sorted({families.get(n, n) for n in writes})) + ("mixed", "none")

    def on_actions(fn: Callable[[str, tuple[Tau2Action, ...]], str], subject: str) -> str | None:
        parts = subject_parts(subject)
        if parts is None or any(a.name not in kinds for a in parts[1]):
            return None
        return fn(*parts)

    def computation_of(subject: str) -> str | None:
        observations = observe(subject) if observe is not None else None
        return on_actions(lambda text, actions: computation(text, actions, kinds, observations), subject)

    rw_kinds = {n: k for n, k in kinds.items() if k in ("read", "write")}

    def read_write_calls(subject: str) -> list[ToolCall] | None:
        parts = subject_parts(subject)
        return None if parts is None else _read_write(parts[1], kinds)

    return [
        *read_write_factor_defs(read_write_calls, rw_kinds, PATTERN_BUCKETS),
        FactorDef("family", family_buckets,
                  lambda s: on_actions(lambda _t, actions: family(actions, kinds, families), s),
                  "what the task changes, from its write tools (book, cancel, change_flights, ..., mixed, none)"),
        FactorDef("computation", ("no", "yes"), computation_of,
                  "calculate, or a written number the user did not state and no observation showed"),
        FactorDef("distinct_tools", DISTINCT_BUCKETS,
                  lambda s: on_actions(lambda _t, actions: distinct_tools(_calls(actions)), s),
                  "distinct tools the gold trajectory calls"),
    ]
