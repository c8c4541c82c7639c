"""Asynchronous co-training against the synchronous step (issue 38) on the same cores: speed and the learning cost.

    python bench/async_speed.py [--steps 12] [--staleness 1 2] [--threads 1] [--presets arith tools]
                                [--placements thread process]
    python bench/async_speed.py --learning --seeds 71 72 73 [--jobs 2]

Speed, on the same cores (issue 43): an asynchronous run has two threads that compute, the sampler's and the
learner's, each with ``--threads`` torch threads (``threads`` is the process's torch setting; the learner thread
shares it); so the synchronous step it is compared with gets twice that many, ``2 x --threads``, and the whole
process is pinned to that many CPUs (where the platform allows), so neither side can use a core the other could not.
Each preset runs ``--steps`` steps: synchronously at ``2 x --threads`` threads (the reference), synchronously at
``--threads`` (its generation -- everything but the update -- and training seconds give the bound), and at every
``max_staleness`` in ``--staleness`` at ``--threads`` under each ``async_placement`` in ``--placements`` (thread:
the learner on a Python thread beside the sampling; process: each trained agent's sampler in a child process of its
own, ``--threads`` torch threads there too); one run at a time, the preset's own settings, held-out
evaluation off. A step's seconds are its wall clock (the step function itself, as the run loop calls it), the
first ``--warmup`` steps left out (compilation and caches); medians. Printed per preset: seconds per step, the
speed-up over the synchronous step, and beside it the overlap bound

    synchronous s/step at 2 x --threads  /  max(generation, training) s/step at --threads each,

what a perfect overlap of the two on those cores would reach (a step cannot be shorter than its longer half).

Learning (``--learning``): the full preset run at staleness 0 and 1 on each seed, held-out greedy gain (after -
before, mean over the held-out groups), paired difference 1 - 0 as mean ± s.e. over the seeds (seeds not used
for tuning: nothing here was tuned on any seed).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))


@dataclass(frozen=True)
class StepTimes:
    """One step's wall seconds, and (synchronous runs) its generation seconds (all but the update) and training."""

    wall: float
    generation: float
    training: float


def step_times(preset: str, staleness: int, threads: int, steps: int, root: Path, extra: list[str]) -> list[StepTimes]:
    """Each step of one run at ``threads`` torch threads (the loop's step function; hooks and evaluation left out)."""
    from synco.config import load_config
    from synco.run.loop import close_policies
    from synco.run.setup import setup_run
    from synco.run.steps import protocol_step

    cfg = load_config(preset, overrides=[f"steps={steps}", f"max_staleness={staleness}", f"threads={threads}",
                                         "heldout_per_group=0", "progress=false", "tensorboard=false",
                                         f"runs_dir={root}", f"run_id={preset}-s{staleness}-t{threads}-{len(os.listdir(root))}",
                                         *extra])
    run = setup_run(cfg, log=lambda _: None)
    step_fn = protocol_step(run.protocol) if run.pipeline is None else (lambda _, s: run.pipeline.step(s))
    out = []
    try:
        for step in range(steps):
            t = time.perf_counter()
            stats = step_fn(run.state, step)
            wall = time.perf_counter() - t
            out.append(StepTimes(wall, stats.t_generate + stats.t_other, stats.t_train))
    finally:
        if run.pipeline is not None:
            run.pipeline.close()
        run.state.pool.close()
        close_policies(run.state)
    return out


def overlap_bound(sync_wall: float, generation: float, training: float) -> float:
    """The most an overlap of generation and training can speed the synchronous step up: its seconds over the
    longer of the two halves (each measured on its own share of the cores)."""
    return sync_wall / max(generation, training)


def pin_cpus(n: int) -> list[int] | None:
    """Pin this process (threads started from now on) to its first ``n`` usable CPUs; None where it cannot."""
    try:
        usable = sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return None
    cpus = usable[:n]
    if len(cpus) < n:
        return None
    os.sched_setaffinity(0, cpus)
    return cpus


def speed(args: argparse.Namespace) -> None:
    root = Path(tempfile.mkdtemp(prefix="synco-async-"))
    t1, t2 = args.threads, 2 * args.threads
    cpus = pin_cpus(t2)
    print(f"# asynchronous co-training on the same cores, {args.steps} steps per run (first {args.warmup} left out), "
          f"overrides {args.overrides or '-'}")
    print(f"# CPUs: {'pinned to ' + ','.join(map(str, cpus)) if cpus else 'not pinned'}; synchronous: {t2} torch "
          f"threads; asynchronous: {t1} per thread kind (sampling, learning), {t2} in all; load {_load()}\n")
    print("| preset | run | torch threads | s/step (median) | generation s | training s | vs synchronous | overlap bound |")
    print("|---|---|---|---|---|---|---|---|")
    notes = []
    for preset in args.presets:
        def med(xs: list[StepTimes], f: str) -> float:
            return statistics.median(getattr(x, f) for x in xs[args.warmup:])

        ref = step_times(preset, 0, t2, args.steps, root, args.overrides)
        base = med(ref, "wall")
        print(f"| {preset} | synchronous | {t2} | {base:.2f} | {med(ref, 'generation'):.2f} | {med(ref, 'training'):.2f} "
              f"| 1.00x | |", flush=True)
        one = step_times(preset, 0, t1, args.steps, root, args.overrides)
        gen, train = med(one, "generation"), med(one, "training")
        bound = overlap_bound(base, gen, train)
        print(f"| {preset} | synchronous | {t1} | {med(one, 'wall'):.2f} | {gen:.2f} | {train:.2f} "
              f"| {base / med(one, 'wall'):.2f}x | |", flush=True)
        for n in args.staleness:
            for placement in args.placements:
                secs = med(step_times(preset, n, t1, args.steps, root, [f"async_placement={placement}", *args.overrides]),
                           "wall")
                print(f"| {preset} | max_staleness={n}, {placement} | {t1} + {t1} | {secs:.2f} | | | "
                      f"**{base / secs:.2f}x** ({base / secs / bound:.0%} of the bound) | {bound:.2f}x |", flush=True)
        notes.append(f"{preset}: overlap bound {base:.2f} / max({gen:.2f}, {train:.2f}) = {bound:.2f}x")
    print("\n" + "\n".join(notes) + f"\nload after: {_load()}")


def _load() -> str:
    try:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "n/a"


def learning(args: argparse.Namespace) -> None:
    from cotrain_modes import arm_jobs, run_jobs

    root = Path(tempfile.mkdtemp(prefix="synco-async-learn-"))
    arms = {f"staleness-{n}": [f"max_staleness={n}"] for n in (0, 1)}
    jobs = arm_jobs(arms, list(arms), args.seeds, args.learn_steps, root, args.jobs, args.overrides)
    results = run_jobs(jobs, args.jobs, _learn, lambda r: f"{r['sec_per_step']:.2f} s/step")
    print(f"\n# {args.presets[0]} preset, {args.learn_steps} steps, seeds {args.seeds}; runs in {root}\n")
    print("| max_staleness | greedy gain per seed | mean |")
    print("|---|---|---|")
    for arm, by_seed in results.items():
        gains = [by_seed[s]["gain"] for s in args.seeds]
        print(f"| {arm[len('staleness-'):]} | {', '.join(f'{g:+.3f}' for g in gains)} | {statistics.mean(gains):+.3f} |")
    diffs = [results["staleness-1"][s]["gain"] - results["staleness-0"][s]["gain"] for s in args.seeds]
    se = statistics.stdev(diffs) / len(diffs) ** 0.5 if len(diffs) > 1 else float("nan")
    print(f"\npaired difference 1 - 0 (greedy gain): {statistics.mean(diffs):+.4f} ± {se:.4f} s.e. "
          f"(per seed {', '.join(f'{d:+.3f}' for d in diffs)})")


def _learn(job: tuple[str, int, list[str]]) -> dict:
    from synco.config import load_config
    from synco.run.loop import train

    cfg = load_config(os.environ["SYNCO_BENCH_PRESET"], overrides=job[2])  # spawned workers inherit it
    s = train(cfg, log=lambda *a, **k: None)
    before = statistics.mean(s.heldout_before.values())
    after = statistics.mean(s.heldout_after.values())
    lr = s.heldout_learn_retain  # the run's own per-item held-out split (greedy), as its summary prints it
    n = max(1, lr.n) if lr is not None else 1
    return {"before": before, "after": after, "gain": after - before,
            "learn": lr.learn_gain / n if lr is not None else float("nan"),
            "retain": -lr.retain_loss / n if lr is not None else float("nan"),
            "sampled_gain": (statistics.mean(s.heldout_sampled_after.values())
                             - statistics.mean(s.heldout_sampled_before.values())) if s.heldout_sampled_before
            else float("nan"),
            "sec_per_step": s.sec_per_step}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=12, help="steps per speed run (default: %(default)s)")
    ap.add_argument("--warmup", type=int, default=2, help="first steps left out of the timing (default: %(default)s)")
    ap.add_argument("--staleness", type=int, nargs="+", default=[1, 2], help="asynchronous runs' max_staleness (>= 1)")
    ap.add_argument("--placements", nargs="+", choices=["thread", "process"], default=["thread", "process"],
                    help="async_placement of the asynchronous runs (default: both)")
    ap.add_argument("--threads", type=int, default=1,
                    help="torch threads of each asynchronous thread kind; the synchronous step gets twice as many "
                         "(default: %(default)s, i.e. 2 cores)")
    ap.add_argument("--presets", nargs="+", default=["arith", "tools"])
    ap.add_argument("--learning", action="store_true", help="the learning comparison instead of the speed")
    ap.add_argument("--seeds", type=int, nargs="+", default=[71, 72, 73])
    ap.add_argument("--learn-steps", type=int, default=None, help="steps of a learning run (default: the preset's)")
    ap.add_argument("--jobs", type=int, default=2, help="learning runs in parallel (default: %(default)s)")
    ap.add_argument("overrides", nargs="*", help="extra config overrides for every run")
    args = ap.parse_args()
    if args.learning:
        from synco.config import load_config

        os.environ["SYNCO_BENCH_PRESET"] = args.presets[0]
        args.learn_steps = args.learn_steps or load_config(args.presets[0]).steps
        learning(args)
    else:
        if any(n < 1 for n in args.staleness) or args.threads < 1:
            ap.error("--staleness values and --threads must be >= 1 (the synchronous runs are always made)")
        speed(args)


if __name__ == "__main__":
    main()
