"""Child process that runs reasoning-gym's generators and scorers for :mod:`synco.domains.rgym` (through
:mod:`synco.grading.worker`, the math-verify worker's client).

Why a separate process: reasoning-gym's generators and scorers are someone else's code run on model-chosen configs
and model text. Some settings make a generator hang, recurse or allocate without bound, and scorers raise on some
answers. Here each request runs on the main thread of a process the parent can kill, under an address-space limit,
a per-request wall-clock timer and a CPU backstop, so every call in the parent is bounded by a deadline.

Standalone (stdlib + reasoning_gym), started as ``python -I _worker.py --memory-mb N`` so nothing from the caller's
working directory is imported.

Protocol: one JSON object per line on stdin, one reply per line on stdout.
  request  {"id", "op": "describe"}                                              -> {"families": {...}}
           {"id", "op": "generate", "family", "config", "seed", "budget"}       -> {"question", "answer"}
           {"id", "op": "score", "family", "config", "seed", "answer", "budget"} -> {"score": float}
  reply    {"id", "status": "ok" | "timeout" | "error", "detail": str, ...}
The first line the worker writes is {"ready": true} (or {"ready": false, "detail": ...}). The config is the card's
validated config (the parent checked every field); ``seed`` and ``size`` are always the parent's.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import math
import os
import resource
import signal
import sys
from collections import OrderedDict
from typing import Any, TextIO

DEFAULT_BUDGET = 5.0
MAX_BUDGET = 600.0
CACHE_ITEMS = 256
"""Generated items kept (keyed by family, config and seed), so the K scores of a card do not regenerate it. Each holds
its dataset object (the scorer is a method of it), ~1 MB for a family that loads a word list (spell_backward): 4096
of them ran the worker out of its 2 GiB address space."""
MAX_TEXT = 4000
"""Longest question, answer or model answer passed through (longer ones are refused/cut)."""


class _Deadline(BaseException):
    """Raised by the interval timer; a BaseException so library ``except Exception`` blocks let it through."""


def _on_alarm(signum: int, frame: Any) -> None:
    raise _Deadline()


def _limit_memory(megabytes: int) -> None:
    if megabytes <= 0:
        return
    limit = megabytes * 1024 * 1024
    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    if hard != resource.RLIM_INFINITY:
        limit = min(limit, hard)
    resource.setrlimit(resource.RLIMIT_AS, (limit, hard))


def _limit_cpu(budget: float) -> None:
    """A CPU-seconds backstop for work stuck in C code if the parent died and cannot kill us."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    soft = int(math.ceil(usage.ru_utime + usage.ru_stime + budget)) + 5
    _, hard = resource.getrlimit(resource.RLIMIT_CPU)
    if hard != resource.RLIM_INFINITY:
        soft = min(soft, hard)
    resource.setrlimit(resource.RLIMIT_CPU, (soft, hard))


def _budget(value: Any) -> float:
    try:
        budget = float(value)
    except (TypeError, ValueError, OverflowError):
        return DEFAULT_BUDGET
    return DEFAULT_BUDGET if math.isnan(budget) else min(max(budget, 0.01), MAX_BUDGET)


def _plain(value: Any) -> Any:
    """A JSON-safe copy of a default or level value (tuples as lists, anything else as its repr)."""
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else repr(value)
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return repr(value)


class _Gym:
    """reasoning-gym's registry, imported once, and the cache of generated items."""

    def __init__(self) -> None:
        from reasoning_gym import factory

        self.factory = factory
        self.items: OrderedDict[str, tuple[Any, dict[str, Any]]] = OrderedDict()

    def describe(self) -> dict[str, Any]:
        """Every family: its config fields with defaults and, when it has one, its curriculum's attributes."""
        out: dict[str, Any] = {}
        for name in sorted(self.factory.DATASETS):
            _, config_cls = self.factory.DATASETS[name]
            fields = {}
            for f in dataclasses.fields(config_cls):
                if f.default is not dataclasses.MISSING:
                    fields[f.name] = _plain(f.default)
                elif f.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
                    fields[f.name] = _plain(f.default_factory())  # type: ignore[misc]
                else:
                    fields[f.name] = None
            attrs = {}
            if name in self.factory.CURRICULA:
                for key, attr in self.factory.create_curriculum(name).attributes.items():
                    names = ([attr.lower_field_name, attr.upper_field_name] if hasattr(attr, "lower_field_name")
                             else [attr.field_name])
                    attrs[key] = {"fields": names, "levels": _plain(list(attr.levels)),
                                  "default_level": int(getattr(attr, "default_level", 0) or 0),
                                  "interval": bool(getattr(attr, "ensure_interval", False)),
                                  "description": str(attr.description)[:200]}
            out[name] = {"fields": fields, "attributes": attrs}
        return out

    def item(self, family: str, config: dict[str, Any], seed: int) -> tuple[Any, dict[str, Any]]:
        key = json.dumps([family, config, seed], sort_keys=True)
        if key in self.items:
            self.items.move_to_end(key)
            return self.items[key]
        if family not in self.factory.DATASETS:
            raise KeyError(f"unknown family {family!r}")
        dataset = self.factory.create_dataset(family, seed=seed, size=1, **config)
        entry = dataset[0]
        self.items[key] = (dataset, entry)
        if len(self.items) > CACHE_ITEMS:
            self.items.popitem(last=False)
        return dataset, entry


def _handle(gym: _Gym, request: dict[str, Any]) -> dict[str, Any]:
    rid, op = request.get("id", -1), request.get("op")
    budget = _budget(request.get("budget"))
    _limit_cpu(budget)
    signal.setitimer(signal.ITIMER_REAL, budget)
    try:
        if op == "describe":
            return {"id": rid, "status": "ok", "detail": "", "families": gym.describe()}
        family, config, seed = str(request["family"]), dict(request["config"]), int(request["seed"])
        dataset, entry = gym.item(family, config, seed)
        if op == "generate":
            question, answer = str(entry["question"]), str(entry["answer"])
            if len(question) > MAX_TEXT or len(answer) > MAX_TEXT:
                return {"id": rid, "status": "error", "detail": "generated text too long"}
            return {"id": rid, "status": "ok", "detail": "", "question": question, "answer": answer}
        if op == "score":
            score = float(dataset.score_answer(str(request["answer"])[:MAX_TEXT], entry))
            score = min(max(score, 0.0), 1.0) if math.isfinite(score) else 0.0
            return {"id": rid, "status": "ok", "detail": "", "score": score}
        return {"id": rid, "status": "error", "detail": "unknown op"}
    except _Deadline:
        return {"id": rid, "status": "timeout", "detail": ""}
    except (MemoryError, RecursionError) as exc:
        return {"id": rid, "status": "timeout", "detail": type(exc).__name__}
    except Exception as exc:  # someone else's generator or scorer: reported to the parent, which counts it
        return {"id": rid, "status": "error", "detail": f"{type(exc).__name__}: {exc}"[:300]}
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)


def _reply(out: TextIO, payload: dict[str, Any]) -> None:
    out.write(json.dumps(payload) + "\n")
    out.flush()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--memory-mb", type=int, default=2048)
    parser.add_argument("--no-warm-up", action="store_true", help="accepted for the client's sake; nothing to warm")
    args = parser.parse_args(argv)
    out = os.fdopen(os.dup(sys.stdout.fileno()), "w", encoding="utf-8")
    sys.stdout = sys.stderr  # anything a library prints stays off the protocol channel
    logging.disable(logging.CRITICAL)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGALRM, _on_alarm)
    sys.setrecursionlimit(5000)
    try:
        gym = _Gym()
    except ImportError as exc:
        _reply(out, {"ready": False, "detail": f"{type(exc).__name__}: {exc}"})
        return 1
    _limit_memory(args.memory_mb)
    _reply(out, {"ready": True, "pid": os.getpid()})
    for line in sys.stdin:
        try:
            request = json.loads(line)
        except json.JSONDecodeError:
            _reply(out, {"id": -1, "status": "error", "detail": "bad request"})
            continue
        if not isinstance(request, dict) or request.get("op") == "quit":
            break
        try:
            reply = _handle(gym, request)
        except _Deadline:  # the timer fired between the work and its cancellation
            reply = {"id": request.get("id", -1), "status": "timeout", "detail": ""}
        _reply(out, reply)
    return 0


if __name__ == "__main__":
    sys.exit(main())
