"""Verification by replay: a τ² task's gold actions run on a fresh environment, each rejection with a reason code.

:func:`verify_card` (a synco card) and :func:`verify_task` (one of τ²'s tasks, or a τ² task JSON object, with
its own initial state) return a :class:`Tau2Verdict` or raise :class:`~synco.core.records.CardRejected`. The
checks, in order (the card's parse codes ``bad_scenario``, ``bad_actions``, ``bad_outputs``, ``bad_criteria``
come first, see :mod:`synco.domains.tau2.tasks`):

* ``bad_task`` -- a τ² task JSON object that τ²'s ``Task`` does not read; ``bad_initial_state`` -- its initial
  state does not apply (an initialization action that is not one of the toolkit's tools, or one that fails);
* ``too_many_actions`` -- more than :data:`~synco.domains.tau2.tasks.MAX_ACTIONS` gold actions;
* ``unknown_tool`` -- an action names no tool of its requestor's toolkit;
* ``nothing_to_check`` -- no part of the reward basis can fail: ``DB`` always can (any write breaks it);
  ``COMMUNICATE`` / ``ACTION`` / ``ENV_ASSERTION`` / ``NL_ASSERTION`` only with information, actions or
  assertions to check; an env assertion must name an ``assert_*`` function of the toolkit (``bad_criteria``);
* ``no_write`` -- (only with ``require_write``) no action is a write;
* then, action by action on the fresh state: ``bad_arguments`` (argument names or JSON types against the τ²
  ``Tool``'s parameter model, strictly: ``"2"`` is no integer; a tool that rejects a nested object with a
  validation error; ``calculate`` with ``**`` or over :data:`MAX_EXPRESSION_CHARS` characters, since τ²
  evaluates it); ``ungrounded_argument`` (an id argument -- a key ending in ``_id``/``_ids``, or
  ``flight_number`` -- whose value is in none of the user side's texts, the initial state and the earlier
  observations); ``policy_violation`` (the domain's mechanical policy checks, :data:`POLICY_CHECKS`);
  ``unknown_id`` (the tool failed saying ``... not found``: every τ² toolkit raises ``ValueError("<Thing> <id>
  not found")`` for an id missing from its database, and nothing else says it); ``action_failed`` (any other
  error); ``no_state_change`` (a write after which the database hash is unchanged).

The airline's mechanical policy checks (:func:`airline_policy`), each exact on the database at the time of the
action: a cancelled reservation is not cancelled again; a basic-economy reservation keeps its flights (its cabin
may change); the cabin does not change once a segment has flown; a flight change keeps the trip's origin and
destination (one way: first origin, last destination; round trip: first origin, back at it at the end); checked
bags are only added; a booking has 1 to 5 passengers, at most one certificate, one credit card and three gift
cards, and its flights go from its origin to its destination; every payment method is the user's own (one that
belongs to another user is a violation, one nobody has is ``unknown_id``); a certificate is a positive multiple
of $50, sent only to a silver or gold member or one with an insured or business reservation. Not checkable here
(they depend on what the user said): the cancellation conditions (τ²'s own gold cancels of airline tasks 7, 9 and
37 do not meet them as the database states them), the reason for a cancellation, confirmations.

Until ``synco.domains.tau2.world`` lands, a domain is loaded here (:func:`_world`, cached per domain) and each
replay that writes gets a fresh database by unpickling a snapshot (~0.2 s for the airline's, half a deep copy);
one that only reads replays on a shared environment (read tools change nothing: τ²'s tags). The database hash
(τ²'s own, ~0.15 s for the airline's) is taken after each write only.
"""

from __future__ import annotations

import functools
import json
import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ValidationError

from synco.core.records import CardRejected, TaskCard
from synco.domains.tau2.world import TAU2_DOMAINS
from synco.domains.tau2.tasks import (
    MAX_ACTIONS,
    Tau2Action,
    Tau2Card,
    card_fields,
    parse_card,
    tau2_card_of_task,
    task_json,
)

MAX_EXPRESSION_CHARS = 200
"""Longest ``calculate`` expression replayed (τ² evaluates it with Python's ``eval``)."""
MAX_GROUND_CHARS = 2_000_000
"""Most characters of observations kept to ground later ids (bounds memory on huge search results)."""

MAX_LOOKUP_TOKENS = 5000
"""Most distinct tokens one replay tries as lookup keys (see :class:`Grounds`)."""
LOOKUP_DEPTH = 3
"""Rounds of lookups on the tokens the previous round found (user -> reservation -> payment is two)."""

_ID_KEY = re.compile(r"(?:^|_)ids?$")
_TOKEN = re.compile(r"#?[A-Za-z0-9][A-Za-z0-9_.@+\-]{0,62}[A-Za-z0-9]")
_NOT_FOUND = re.compile(r"\bnot found\b", re.IGNORECASE)


@dataclass(frozen=True)
class Tau2Verdict:
    """A verified τ² task: the parsed card, τ²'s ``Task``, each action's observation (τ²'s JSON text), the gold
    final-state hash (agent database; the user database's too where the domain has one) and the reference: the
    information the agent must communicate."""

    card: Tau2Card
    task: Any
    observations: tuple[str, ...]
    final_hash: str
    final_user_hash: str | None
    reference: tuple[str, ...]


# ------------------------------------------------------------------------- the domain, loaded once


@dataclass
class _World:
    """What verification needs of a τ² domain (:class:`~synco.domains.tau2.world.World`, loaded once): its tools and
    their tags, the pristine hash, the assertion functions, the id lookups, and fresh environments."""

    name: str
    tools: dict[str, Any]  # assistant tool name -> tau2 Tool
    user_tools: dict[str, Any]
    kinds: dict[str, str]  # assistant and user tool name -> read | write | think | generic
    base_hash: tuple[str | None, str | None]
    assertions: dict[str, frozenset[str]]  # env type -> the toolkit's assert_* functions

    lookups: list[tuple[str, str]]  # read tools whose one parameter is an id (Grounds)
    _shared: Any = None

    def shared_env(self) -> Any:
        """One environment on the snapshot, shared by replays that only read (never handed out for writes)."""
        if self._shared is None:
            self._shared = self.fresh_env()
        return self._shared

    def fresh_env(self) -> Any:
        """A new environment on the domain's databases: a copy-on-read fork (``synco.domains.tau2.world``), isolated
        from every other environment and ~500x cheaper than rebuilding from the JSON file."""
        from synco.domains.tau2.world import load_world

        return load_world(self.name).fresh_env()


@functools.lru_cache(maxsize=len(TAU2_DOMAINS))
def _world(domain: str) -> _World:
    """Load a τ² domain (its ``environment`` module only: never ``tau2.registry``, which needs litellm)."""
    from synco.domains.tau2.world import load_world

    world = load_world(domain)  # τ²'s own loaders, once per process (and τ²'s logging silenced)
    env = world.fresh_env()
    user_kit = env.user_tools
    kinds = dict(world.tool_kinds)
    return _World(
        name=domain,
        tools=dict(env.tools.get_tools()), user_tools=dict(user_kit.get_tools()) if user_kit is not None else {},
        kinds=kinds, base_hash=(env.get_db_hash(), env.get_user_db_hash()),
        assertions={"assistant": _assert_names(env.tools), "user": _assert_names(user_kit)},
        lookups=lookup_tools(dict(env.tools.get_tools()), kinds),
    )


def _assert_names(kit: Any) -> frozenset[str]:
    """The ``assert_*`` functions of a τ² toolkit (what an env assertion may call)."""
    return frozenset(n for n in dir(type(kit)) if n.startswith("assert_") and callable(getattr(kit, n)))


def tool_kinds(domain: str) -> dict[str, str]:
    """Each tool's τ² tag (``read``, ``write``, ``think``, ``generic``), assistant and user tools, by name."""
    return dict(_world(domain).kinds)


# ------------------------------------------------------------------------------- small checks


def _state_hash(env: Any) -> tuple[str | None, str | None]:
    return env.get_db_hash(), env.get_user_db_hash()


def check_arguments(tool: Any, action: Tau2Action, where: str) -> None:
    """The action's arguments against the τ² ``Tool``'s parameter model: known names, required ones present, JSON
    types exact (strict validation); ``calculate`` bounded. CardRejected ``bad_arguments`` naming the argument."""
    fields = tool.params.model_fields
    unknown = sorted(set(action.arguments) - set(fields))
    if unknown:
        raise CardRejected("bad_arguments", f"{where} {action.name}: unknown argument {unknown[0]!r} "
                                            f"(takes {sorted(fields)})")
    missing = sorted(n for n, f in fields.items() if f.is_required() and n not in action.arguments)
    if missing:
        raise CardRejected("bad_arguments", f"{where} {action.name}: missing argument {missing[0]!r}")
    try:
        tool.params.model_validate(action.arguments, strict=True)
    except ValidationError as err:
        first = err.errors()[0]
        loc = ".".join(str(p) for p in first["loc"])
        raise CardRejected("bad_arguments", f"{where} {action.name}: {loc}={str(first.get('input'))[:60]!r}: "
                                            f"{first['msg'][:80]}") from None
    if action.name == "calculate":
        expr = str(action.arguments.get("expression", ""))
        if "**" in expr or len(expr) > MAX_EXPRESSION_CHARS:
            raise CardRejected("bad_arguments", f"{where} calculate: expression must be at most "
                                                f"{MAX_EXPRESSION_CHARS} characters without '**'")


def id_values(arguments: object, key: str = "") -> list[tuple[str, str]]:
    """``(argument name, value)`` of every id argument: string values (or list items) under a key ending in
    ``_id`` / ``_ids`` (or ``id`` / ``ids``), at any depth. Not ``flight_number``: flights are public schedule
    data found by searching a route and date (the tool checks they exist)."""
    out: list[tuple[str, str]] = []
    if isinstance(arguments, dict):
        for k, v in arguments.items():
            out += id_values(v, str(k))
    elif isinstance(arguments, list):
        for v in arguments:
            out += id_values(v, key)
    elif isinstance(arguments, str) and key and _ID_KEY.search(key):
        out.append((key, arguments))
    return out


def nothing_to_check(card: Tau2Card) -> bool:
    """Whether no part of the card's reward basis can fail (see the module docstring)."""
    can_fail = {"DB": True, "COMMUNICATE": bool(card.communicate_info), "ACTION": bool(card.actions),
                "ENV_ASSERTION": bool(card.env_assertions), "NL_ASSERTION": bool(card.nl_assertions)}
    return not any(can_fail.get(b, False) for b in card.reward_basis)


class Grounds:
    """Where an id argument may come from: the user side, the initial state, earlier observations, and *lookups*.

    A lookup is a read tool with one parameter (``get_user_details(user_id)``,
    ``get_reservation_details(reservation_id)``, retail's ``find_user_id_by_email(email)``): the agent may always look up what it was told or shown, so an id
    in the result of a lookup of a grounded token is grounded too. τ²'s gold action lists leave such reads out
    (16 of the 50 airline tasks name a reservation, or a payment method, found only in the user's record), so
    :meth:`grounded` expands lookups on demand: each round calls every lookup on every token (2..64 characters of
    letters, digits and ``_.@+-``, an optional leading ``#``: retail's order ids, emails) of the texts not tried before, :data:`LOOKUP_DEPTH` rounds, at most
    :data:`MAX_LOOKUP_TOKENS` tokens per replay. Lookups run on the replay's own environment (read tools do not
    change the state: τ²'s tags).
    """

    def __init__(self, env: Any, lookups: list[tuple[str, str]], texts: list[str]) -> None:
        self.env = env
        self.lookups = lookups
        self.texts = [t for t in texts if t]
        self.size = sum(map(len, self.texts))
        self.tried: set[str] = set()
        self.scanned = 0  # texts[:scanned] have had their tokens tried

    def add(self, text: str) -> None:
        if text and self.size < MAX_GROUND_CHARS:
            self.texts.append(text[:MAX_GROUND_CHARS - self.size])
            self.size += len(self.texts[-1])

    def _seen(self, value: str) -> bool:
        return any(value in t for t in self.texts)

    def _expand(self) -> None:
        """One round of lookups on the tokens of the texts not scanned yet."""
        end = len(self.texts)
        for text in self.texts[self.scanned:end]:
            for token in _TOKEN.findall(text):
                if token in self.tried or len(self.tried) >= MAX_LOOKUP_TOKENS:
                    continue
                self.tried.add(token)
                for tool, param in self.lookups:
                    try:
                        result = self.env.make_tool_call(tool, requestor="assistant", **{param: token})
                    except Exception:  # not an id of this kind: the usual case
                        continue
                    out = self.env.to_json_str(result)
                    self.add(out if isinstance(out, str) else json.dumps(out, default=str))
        self.scanned = end

    def grounded(self, value: str) -> bool:
        """Whether ``value`` is in a text, after up to :data:`LOOKUP_DEPTH` rounds of lookups if need be."""
        for _ in range(LOOKUP_DEPTH + 1):
            if self._seen(value):
                return True
            if self.scanned >= len(self.texts):
                return False
            self._expand()
        return self._seen(value)


def lookup_tools(tools: dict[str, Any], kinds: dict[str, str]) -> list[tuple[str, str]]:
    """``(tool, parameter)`` of every read tool with exactly one parameter (an id, or a key such as retail's
    ``find_user_id_by_email(email)``): see :class:`Grounds`."""
    out = []
    for name, tool in sorted(tools.items()):
        params = list(tool.params.model_fields)
        if kinds.get(name) == "read" and len(params) == 1:
            out.append((name, params[0]))
    return out


# ------------------------------------------------------------------------- airline policy


def _owner_of_payment(db: Any, payment_id: str) -> str | None:
    return next((uid for uid, u in db.users.items() if payment_id in u.payment_methods), None)


def _payment_owned(db: Any, user_id: str, payment_id: object) -> str | None:
    """A violation when ``payment_id`` is another user's payment method (None: the user's own, or nobody's)."""
    user = db.users.get(user_id)
    if user is None or not isinstance(payment_id, str) or payment_id in user.payment_methods:
        return None
    owner = _owner_of_payment(db, payment_id)
    return None if owner is None else f"payment method {payment_id} belongs to {owner}, not {user_id}"


def _route_error(db: Any, flights: object, origin: str, destination: str | None, flight_type: str) -> str | None:
    """A violation when the flights do not leave from ``origin``, do not end at ``destination`` (one way) or back at
    ``origin`` (round trip), or a round trip never reaches ``destination``; ``destination`` None: not checked. None
    when a flight is unknown (the tool reports it)."""
    if not isinstance(flights, list) or not flights:
        return None
    legs = []
    for f in flights:
        number = f.get("flight_number") if isinstance(f, dict) else None
        if number not in db.flights:
            return None
        legs.append(db.flights[number])
    if legs[0].origin != origin:
        return f"the flights leave from {legs[0].origin}, the trip from {origin}"
    end = origin if flight_type == "round_trip" else destination
    if end is not None and legs[-1].destination != end:
        return f"the flights end at {legs[-1].destination}, the {flight_type} trip at {end}"
    if flight_type == "round_trip" and destination is not None and destination not in {leg.destination for leg in legs}:
        return f"the round trip never reaches {destination}"
    return None


def airline_policy(db: Any, action: Tau2Action) -> str | None:
    """The airline policy violation ``action`` would commit on ``db`` (its state before the call), or None."""
    args = action.arguments
    res = db.reservations.get(args.get("reservation_id")) if isinstance(args.get("reservation_id"), str) else None
    if action.name == "cancel_reservation" and res is not None and res.status == "cancelled":
        return f"reservation {res.reservation_id} is already cancelled"
    if action.name == "update_reservation_flights" and res is not None:
        new = [(f.get("flight_number"), f.get("date")) for f in args.get("flights", []) if isinstance(f, dict)]
        old = [(f.flight_number, f.date) for f in res.flights]
        if res.cabin == "basic_economy" and sorted(map(str, new)) != sorted(map(str, old)):
            return f"reservation {res.reservation_id} is basic economy: its flights cannot be modified"
        if args.get("cabin") != res.cabin:
            flown = [f.flight_number for f in res.flights
                     if f.flight_number in db.flights and getattr(db.flights[f.flight_number].dates.get(f.date),
                                                                  "status", None) in ("flying", "landed")]
            if flown:
                return f"reservation {res.reservation_id}: cabin cannot change, flight {flown[0]} has flown"
        # the destination is not checked: τ²'s airline task 29 moves a DTW-LGA round trip to DTW-JFK (same city)
        return (_route_error(db, args.get("flights"), res.origin, None, res.flight_type)
                or _payment_owned(db, res.user_id, args.get("payment_id")))
    if action.name == "update_reservation_baggages" and res is not None:
        total, nonfree = args.get("total_baggages"), args.get("nonfree_baggages")
        if isinstance(total, int) and total < res.total_baggages:
            return f"reservation {res.reservation_id} has {res.total_baggages} checked bags: they cannot be removed"
        if isinstance(total, int) and isinstance(nonfree, int) and not 0 <= nonfree <= total:
            return f"nonfree_baggages={nonfree} is not within 0..total_baggages={total}"
        return _payment_owned(db, res.user_id, args.get("payment_id"))
    if action.name == "book_reservation":
        return _booking_error(db, args)
    if action.name == "send_certificate":
        return _certificate_error(db, args)
    return None


def _booking_error(db: Any, args: dict[str, Any]) -> str | None:
    passengers = args.get("passengers")
    if isinstance(passengers, list) and not 1 <= len(passengers) <= 5:
        return f"a reservation has 1 to 5 passengers, got {len(passengers)}"
    user = db.users.get(args.get("user_id")) if isinstance(args.get("user_id"), str) else None
    if user is None:
        return None
    sources: Counter[str] = Counter()
    for p in args.get("payment_methods") or []:
        pid = p.get("payment_id") if isinstance(p, dict) else None
        bad = _payment_owned(db, user.user_id, pid)
        if bad:
            return bad
        if isinstance(pid, str) and pid in user.payment_methods:
            sources[user.payment_methods[pid].source] += 1
    for source, most in (("certificate", 1), ("credit_card", 1), ("gift_card", 3)):
        if sources[source] > most:
            return f"a reservation uses at most {most} {source}, got {sources[source]}"
    return _route_error(db, args.get("flights"), str(args.get("origin")), str(args.get("destination")),
                        str(args.get("flight_type")))


def _certificate_error(db: Any, args: dict[str, Any]) -> str | None:
    amount = args.get("amount")
    if isinstance(amount, int) and (amount <= 0 or amount % 50):
        return f"a certificate is a positive multiple of $50 ($100 or $50 per passenger), got {amount}"
    user = db.users.get(args.get("user_id")) if isinstance(args.get("user_id"), str) else None
    if user is None or user.membership in ("silver", "gold"):
        return None
    entitled = any(r in db.reservations and (db.reservations[r].insurance == "yes"
                                             or db.reservations[r].cabin == "business") for r in user.reservations)
    return None if entitled else (f"user {user.user_id} is a regular member with no insured or business "
                                  "reservation: no compensation")


POLICY_CHECKS: dict[str, Callable[[Any, Tau2Action], str | None]] = {"airline": airline_policy}
"""A domain's mechanical policy check: (its database before the call, the action) -> a violation or None."""


# ------------------------------------------------------------------------------- the replay


def _apply_initial_state(world: _World, env: Any, task: Any) -> str:
    """Set the task's initial state on ``env``; returns its JSON text (ids it states ground later arguments)."""
    state = task.initial_state
    if state is None:
        return ""
    for i, call in enumerate(state.initialization_actions or []):
        kit = world.tools if call.env_type == "assistant" else world.user_tools
        if call.func_name not in kit:
            raise CardRejected("bad_initial_state", f"initialization_actions[{i}].func_name={call.func_name[:40]!r} "
                                                    "is not a tool of the domain")
    try:
        env.set_state(initialization_data=state.initialization_data,
                      initialization_actions=state.initialization_actions,
                      message_history=state.message_history or [])
    except Exception as err:  # τ²'s own code raises ValueError / AssertionError / pydantic errors here
        raise CardRejected("bad_initial_state", f"{type(err).__name__}: {str(err)[:120]}") from None
    return state.model_dump_json()


def _call(env: Any, action: Tau2Action, where: str) -> str:
    """Run one action; its observation (τ²'s JSON text), or CardRejected with the failure's code."""
    try:
        result = env.make_tool_call(action.name, requestor=action.requestor, **action.arguments)
        env.sync_tools()
    except (ValidationError, TypeError) as err:
        raise CardRejected("bad_arguments", f"{where} {action.name}: {str(err).splitlines()[0][:120]}") from None
    except Exception as err:  # a τ² tool's refusal: ValueError mostly, anything else is a failure too
        code = "unknown_id" if _NOT_FOUND.search(str(err)) else "action_failed"
        raise CardRejected(code, f"{where} {action.name}: {str(err)[:120]}") from None
    text = env.to_json_str(result)
    return text if isinstance(text, str) else json.dumps(text, default=str)


def replay(domain: str, card: Tau2Card, task: Any, require_write: bool = False) -> Tau2Verdict:
    """Replay ``card``'s gold actions on a fresh environment with ``task``'s initial state (see the module
    docstring for the checks and their codes)."""
    world = _world(domain)
    if len(card.actions) > MAX_ACTIONS:
        raise CardRejected("too_many_actions", f"{len(card.actions)} actions, at most {MAX_ACTIONS}")
    for i, a in enumerate(card.actions):
        kit = world.tools if a.requestor == "assistant" else world.user_tools
        if a.name not in kit:
            raise CardRejected("unknown_tool", f"action {i + 1}: {a.name[:40]!r} is not a {a.requestor} tool of "
                                               f"{domain} (tools: {sorted(kit)})")
    for i, e in enumerate(card.env_assertions):
        if e.func_name not in world.assertions[e.env_type]:
            raise CardRejected("bad_criteria", f"env_assertions[{i}].func_name={e.func_name[:40]!r} is not an assert_* "
                                               f"function of the {e.env_type} toolkit")
    if nothing_to_check(card):
        raise CardRejected("nothing_to_check", f"reward basis {list(card.reward_basis)} has nothing that can fail")
    writes = [a for a in card.actions if world.kinds[a.name] == "write"]
    if require_write and not writes:
        raise CardRejected("no_write", "no gold action writes")
    # read/think/generic tools do not change the databases (τ²'s tags): a task without writes and without an
    # initial state replays on the domain's shared environment, and the final hash is the last write's
    env = world.fresh_env() if writes or task.initial_state is not None else world.shared_env()
    grounds = Grounds(env, world.lookups, [card.user_text(), _apply_initial_state(world, env, task)])
    before = world.base_hash if task.initial_state is None else _state_hash(env)
    check = POLICY_CHECKS.get(domain)
    observations: list[str] = []
    for i, action in enumerate(card.actions):
        where = f"action {i + 1}"
        tool = (world.tools if action.requestor == "assistant" else world.user_tools)[action.name]
        check_arguments(tool, action, where)
        for key, value in id_values(action.arguments):
            if not grounds.grounded(value) and not _id_in_db(env, value):
                raise CardRejected("unknown_id", f"{where} {action.name}: {key}={value[:60]!r} is no record's id in "
                                                 f"the {domain} database")
            if not grounds.grounded(value):
                raise CardRejected("ungrounded_argument", f"{where} {action.name}: {key}={value[:60]!r} is in neither "
                                                          "the user side nor an earlier observation or lookup")
        if check is not None and action.requestor == "assistant":
            violation = check(env.tools.db, action)
            if violation:
                raise CardRejected("policy_violation", f"{where} {action.name}: {violation}")
        obs = _call(env, action, where)
        observations.append(obs)
        grounds.add(obs)
        if world.kinds[action.name] == "write":
            after = _state_hash(env)
            if after == before:
                raise CardRejected("no_state_change", f"{where} {action.name}: a write that leaves the database as it was")
            before = after
    return Tau2Verdict(card=card, task=task, observations=tuple(observations), final_hash=str(before[0]),
                       final_user_hash=before[1], reference=card.communicate_info)


def _id_in_db(env: Any, value: str) -> bool:
    """Whether ``value`` is the key of a record in one of the environment's database tables (``{id: record}`` fields,
    the agent's and the user's): an id that is no key anywhere does not exist, whatever the user side says."""
    dbs = [env.tools.db] + ([env.user_tools.db] if env.user_tools is not None else [])
    return any(_has_key(db, value, 3) for db in dbs)


def _has_key(node: Any, key: str, depth: int) -> bool:
    """Whether ``key`` is a dict key in ``node`` (a pydantic model, dict or list) within ``depth`` levels (a user's
    payment methods are a dict inside the user's record)."""
    if depth < 0:
        return False
    if isinstance(node, BaseModel):
        return any(_has_key(v, key, depth - 1) for v in vars(node).values() if isinstance(v, (BaseModel, dict, list)))
    if isinstance(node, dict):
        return key in node or any(_has_key(v, key, depth - 1) for v in node.values()
                                  if isinstance(v, (BaseModel, dict, list)))
    if isinstance(node, list):
        return any(_has_key(v, key, depth - 1) for v in node if isinstance(v, (BaseModel, dict, list)))
    return False


def _task_model(obj: dict[str, Any]) -> Any:
    from tau2.data_model.tasks import Task

    try:
        return Task.model_validate(obj)
    except ValidationError as err:
        first = err.errors()[0]
        loc = ".".join(str(p) for p in first["loc"])
        raise CardRejected("bad_task", f"{loc}: {first['msg'][:100]}") from None


def verify_card(domain: str, card: TaskCard, require_write: bool = False) -> Tau2Verdict:
    """Verify a synco card of a τ² task on ``domain``'s fresh database (no initial state): parse it (bounded), export
    it as τ² task JSON, read that with τ²'s ``Task`` and replay it. CardRejected with a reason code if it fails."""
    parsed = parse_card(card)
    return replay(domain, parsed, _task_model(task_json(parsed, "synco", domain)), require_write)


def verify_task(domain: str, task: Any, require_write: bool = False) -> Tau2Verdict:
    """Verify one of τ²'s tasks (a ``Task``, or a τ² task JSON object) with its own initial state.

    The task is read through a card (:func:`~synco.domains.tau2.tasks.card_fields` then the bounded parser), so a
    τ² task JSON object from a file gets the same caps and codes as a card."""
    model = _task_model(task) if isinstance(task, dict) else task
    try:
        parsed = parse_card(card_fields(tau2_card_of_task(model)))
    except (ValidationError, ValueError) as err:
        if isinstance(err, CardRejected):
            raise
        raise CardRejected("bad_task", str(err).splitlines()[0][:120]) from None
    return replay(domain, parsed, model, require_write)
