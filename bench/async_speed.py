"""Asynchronous co-training against the synchronous step (issue 38): steps per second and the learning cost.

    python bench/async_speed.py [--steps 12] [--staleness 0 1 2] [--presets arith tools]
    python bench/async_speed.py --learning --seeds 71 72 73 [--jobs 2]

Speed: each preset runs ``--steps`` steps at every ``max_staleness`` in turn, one run at a time, on the same
machine with the same settings (the preset's own, held-out evaluation off); a step's seconds are its wall clock
(the step function itself, as the run loop calls it), the first ``--warmup`` steps left out (compilation and
caches). Printed: seconds per step (median) and the ratio to staleness 0, for every preset, in one run. With
``threads: auto`` a synchronous run uses half the cores; an asynchronous one runs the update on a thread of its
own beside sampling, so here it uses both.

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
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))


def step_seconds(preset: str, staleness: int, steps: int, root: Path, extra: list[str]) -> list[float]:
    """Wall seconds of each step of one run (the loop's step function; hooks and evaluation left out)."""
    from synco.config import load_config
    from synco.run.loop import close_policies
    from synco.run.setup import setup_run
    from synco.run.steps import protocol_step

    cfg = load_config(preset, overrides=[f"steps={steps}", f"max_staleness={staleness}", "heldout_per_group=0",
                                         "progress=false", "tensorboard=false", f"runs_dir={root}",
                                         f"run_id={preset}-s{staleness}", *extra])
    run = setup_run(cfg, log=lambda _: None)
    step_fn = protocol_step(run.protocol) if run.pipeline is None else (lambda _, s: run.pipeline.step(s))
    out = []
    try:
        for step in range(steps):
            t = time.perf_counter()
            step_fn(run.state, step)
            out.append(time.perf_counter() - t)
    finally:
        if run.pipeline is not None:
            run.pipeline.close()
        run.state.pool.close()
        close_policies(run.state)
    return out


def speed(args: argparse.Namespace) -> None:
    root = Path(tempfile.mkdtemp(prefix="synco-async-"))
    print(f"# asynchronous co-training, {args.steps} steps per run (first {args.warmup} left out), "
          f"overrides {args.overrides or '-'}\n")
    print("| preset | max_staleness | s/step (median) | steps/s | vs staleness 0 |")
    print("|---|---|---|---|---|")
    for preset in args.presets:
        base = None
        for n in args.staleness:
            secs = step_seconds(preset, n, args.steps, root, args.overrides)[args.warmup:]
            med = statistics.median(secs)
            base = med if base is None else base
            print(f"| {preset} | {n} | {med:.2f} | {1 / med:.3f} | {base / med:.2f}x |", flush=True)


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
    ap.add_argument("--staleness", type=int, nargs="+", default=[0, 1, 2])
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
        speed(args)


if __name__ == "__main__":
    main()
