"""Step time of a small arith run on an idle CPU and next to one competing busy process.

    python bench/bench_busy.py [--cards 64] [--steps 3] [--setting NAME=SPEC ...]

Each setting runs in a fresh child process (OpenMP reads its environment once,
when torch loads it): ``synco.run.setup.setup_run`` on the arith preset with
``n_cards`` cards, one warm-up ``cotrain_step``, then ``--steps`` timed steps.
Every setting is measured three times: idle, next to a ``while True: pass``
process this script starts, and next to the same process at nice 19. Prints
seconds per step and the busy/idle ratio for each.

A SPEC is ``;``-separated: ``threads=<int|auto|null>`` (the config field) and
``ENV=VALUE`` items put into the child's environment before torch is imported
(``ENV=`` with nothing after it removes the variable). The default settings are
the old preset (``threads: 2``) and the new default (``threads: auto``). To also
see OpenMP's passive waiting:

    python bench/bench_busy.py --setting 'old=threads=2' --setting 'new=threads=auto' \
        --setting 'passive=threads=2;OMP_WAIT_POLICY=PASSIVE'

Other programs running at the same time make every number larger and noisier;
the load average before each child is printed with it.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass

DEFAULT_SETTINGS = {
    "old (threads=2)": "threads=2",
    "new (threads=auto)": "threads=auto",
}
BUSY_CODE = "while True: pass"


@dataclass(frozen=True)
class Setting:
    """One thread setting under test: the config value and the child's environment changes."""

    name: str
    threads: str
    env: dict[str, str | None]


@dataclass(frozen=True)
class Timing:
    """What one child measured."""

    sec_per_step: float
    step_secs: list[float]
    torch_threads: int
    load_before: float


def parse_setting(name: str, spec: str) -> Setting:
    """``"threads=2;OMP_WAIT_POLICY=PASSIVE"`` -> Setting; ``threads`` defaults to the preset's."""
    threads, env = "", {}
    for item in filter(None, (s.strip() for s in spec.split(";"))):
        if "=" not in item:
            raise SystemExit(f"setting {name!r}: item {item!r} is not KEY=VALUE")
        key, value = item.split("=", 1)
        if key == "threads":
            threads = value
        else:
            env[key] = value or None
    return Setting(name=name, threads=threads, env=env)


def child(spec: dict) -> None:
    """Run in a fresh process: build the run, warm up, time the steps, print one JSON line."""
    for k, v in spec["env"].items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v
    load_before = os.getloadavg()[0]
    from synco.config import load_config
    from synco.cotrain.engine import cotrain_step
    from synco.run.setup import setup_run

    import torch

    with tempfile.TemporaryDirectory() as d:
        overrides = [f"n_cards={spec['cards']}", "heldout_per_group=0", "tensorboard=false", "progress=false",
                     f"runs_dir={d}", "run_id=bench"]
        if spec["threads"]:
            overrides.append(f"threads={spec['threads']}")
        run = setup_run(load_config("arith", overrides=overrides), log=lambda _: None)
        cotrain_step(run.state, 0)  # warm-up: first allocations, answer-checker worker
        times = []
        for step in range(1, spec["steps"] + 1):
            t = time.perf_counter()
            cotrain_step(run.state, step)
            times.append(time.perf_counter() - t)
        run.state.pool.close()
        run.state.checker.close()
    print(json.dumps({"sec_per_step": statistics.mean(times), "step_secs": times,
                      "torch_threads": torch.get_num_threads(), "load_before": load_before}), flush=True)


def measure(setting: Setting, cards: int, steps: int, busy: str | None) -> Timing:
    """One child run of ``setting``, with a busy process (``"plain"`` / ``"nice19"``) alongside or none."""
    hog = None
    if busy is not None:
        cmd = [sys.executable, "-c", BUSY_CODE]
        hog = subprocess.Popen(["nice", "-n", "19", *cmd] if busy == "nice19" else cmd)
    try:
        spec = {"threads": setting.threads, "env": setting.env, "cards": cards, "steps": steps}
        out = subprocess.run([sys.executable, __file__, "--child", json.dumps(spec)], capture_output=True, text=True)
    finally:
        if hog is not None:
            hog.kill()
            hog.wait()
    if out.returncode != 0:
        raise SystemExit(f"setting {setting.name!r} ({busy or 'idle'}) failed with exit code {out.returncode}:\n"
                         + out.stderr[-3000:])
    last = [ln for ln in out.stdout.splitlines() if ln.startswith("{")][-1]
    return Timing(**json.loads(last))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cards", type=int, default=64, help="task cards per step (default: %(default)s)")
    ap.add_argument("--steps", type=int, default=3, help="timed steps after one warm-up step (default: %(default)s)")
    ap.add_argument("--setting", action="append", default=[], metavar="NAME=SPEC",
                    help="a setting to measure instead of the defaults, e.g. 't1=threads=1' (repeatable)")
    ap.add_argument("--conditions", nargs="+", default=["idle", "plain", "nice19"],
                    choices=["idle", "plain", "nice19"], help="which conditions to run (default: all)")
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child is not None:
        child(json.loads(args.child))
        return
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # run the cleanup that stops the busy process
    pairs = [s.split("=", 1) for s in args.setting] if args.setting else list(DEFAULT_SETTINGS.items())
    settings = [parse_setting(name, spec) for name, spec in pairs]
    print(f"arith preset, n_cards={args.cards}, {args.steps} timed steps after 1 warm-up; "
          f"{len(os.sched_getaffinity(0))} CPUs usable; load average now {os.getloadavg()[0]:.2f}", flush=True)
    for s in settings:
        results: dict[str, Timing] = {}
        for cond in args.conditions:
            results[cond] = measure(s, args.cards, args.steps, None if cond == "idle" else cond)
            r = results[cond]
            ratio = (f"  {r.sec_per_step / results['idle'].sec_per_step:5.1f}x idle"
                     if "idle" in results and cond != "idle" else "")
            print(f"{s.name:24s} {cond:7s} {r.sec_per_step:7.2f} s/step{ratio}   (torch threads {r.torch_threads}, "
                  f"load before {r.load_before:.2f}; steps " + " ".join(f"{x:.2f}" for x in r.step_secs) + ")",
                  flush=True)


if __name__ == "__main__":
    main()
