"""Resets per second of a τ² environment three ways, and the environment's share of a gold-replay episode.

Per domain, in one run: (a) τ²'s rebuild from its data files (``get_environment()``), (b) τ²'s environment on a
pydantic deep copy of a loaded database, (c) ours (``World.fresh_env``: copy-on-read fork), with ratios to (a).
Then a gold-replay episode (every gold action as an agent turn, the final message, τ²'s evaluators via
``Tau2Env.grade``) timed with our resets, split into the environment's resets (ours: the episode's own plus the
evaluator's two), and the rest; against what the same episode's three resets cost by rebuilding.

    PYTHONPATH=src nice -n 5 python bench/tau2_env.py [--domains airline,retail,telecom,mock] [--tasks 10]
"""

from __future__ import annotations

import argparse
import importlib
import time
from collections.abc import Callable

from synco.domains.tau2.calls import format_call
from synco.domains.tau2.env import AGENT_STOP, Tau2Env
from synco.domains.tau2.world import load_world


def per_second(make: Callable[[], object], min_seconds: float = 1.0, min_runs: int = 3) -> float:
    """Calls of ``make`` per second, timed over at least ``min_runs`` calls and ``min_seconds``."""
    runs, start = 0, time.perf_counter()
    while runs < min_runs or time.perf_counter() - start < min_seconds:
        make()
        runs += 1
    return runs / (time.perf_counter() - start)


class AgreeingUser:
    """The bench's user: states a need once, then agrees (the gold agent needs nothing from it)."""

    model_name = "agreeing"

    def reply(self, task, transcript) -> str:
        return "Yes, please."


def gold_episode(world, task) -> float:
    """Seconds of one gold-replay episode (build, turns, grade) with our resets; its reward must be 1."""
    solo = world.solo_ok(task) and world.name == "telecom"  # telecom's gold actions are the user's: solo
    start = time.perf_counter()
    env = Tau2Env(world, task, None if solo else AgreeingUser(), solo=solo)
    for a in task.evaluation_criteria.actions or []:
        env.step(format_call(a.name, a.arguments))
    info = task.evaluation_criteria.communicate_info or []
    env.step(format_call("done", {}) if solo else "; ".join(info) + " " + AGENT_STOP)
    env.grade()
    return time.perf_counter() - start


def bench_domain(name: str, n_tasks: int) -> None:
    mod = importlib.import_module(f"tau2.domains.{name}.environment")
    world = load_world(name)
    loaded = mod.get_environment()
    kwargs = {"user_db": loaded.user_tools.db} if loaded.user_tools is not None else {}
    rebuild = per_second(mod.get_environment)
    if kwargs:
        deep = per_second(lambda: mod.get_environment(db=loaded.tools.db.model_copy(deep=True),
                                                      user_db=loaded.user_tools.db.model_copy(deep=True)))
    else:
        deep = per_second(lambda: mod.get_environment(db=loaded.tools.db.model_copy(deep=True)))
    ours = per_second(world.fresh_env)
    print(f"{name:8s} resets/s  rebuild {rebuild:9.1f}   deep copy {deep:9.1f} ({deep / rebuild:5.2f}x)   "
          f"ours {ours:9.1f} ({ours / rebuild:7.1f}x rebuild, {ours / deep:7.1f}x deep copy)")
    tasks = [t for t in world.tasks("base") if t.evaluation_criteria is not None][:n_tasks]
    if name == "telecom":
        tasks = [t for t in tasks if world.solo_ok(t)]
    episode = sum(gold_episode(world, t) for t in tasks) / len(tasks)
    env_ours = 3 / ours  # the episode's environment + the evaluator's predicted and gold environments
    env_rebuild = 3 / rebuild
    print(f"{'':8s} gold episode {episode * 1000:8.1f} ms (mean of {len(tasks)}): our 3 resets {env_ours * 1000:7.2f} ms "
          f"= {env_ours / episode:6.1%} of it; the same 3 resets by rebuild {env_rebuild * 1000:7.1f} ms "
          f"= {env_rebuild / episode:5.1f}x the whole episode")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--domains", default="airline,retail,telecom,mock")
    parser.add_argument("--tasks", type=int, default=10, help="gold episodes timed per domain")
    args = parser.parse_args()
    for name in args.domains.split(","):
        bench_domain(name, args.tasks)


if __name__ == "__main__":
    main()
