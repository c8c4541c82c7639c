"""Compare co-training with EvoSyn's factor space against its ablations and the paper's controls.

    python bench/cotrain_modes.py [--steps N] --seeds 0 1 2 [--jobs 2] [--arms ...] [KEY=VALUE ...]

Every arm runs the arith preset with the same seeds, cards per step and attempts
per card (the same rollout budget per step; the Reasoner's initial weights and the
held-out set depend only on the seed). The arms:

=========================  ==================================================================
evosyn                     cotrain + Designer + Reflector (+ learner feedback): the full loop
cotrain                    plain SynCo: cotrain, Designer and Reflector off
evosyn-noreflect           cotrain + Designer, Reflector off            (EvoSyn ablation)
evosyn-nofeedback          cotrain + Designer, no learner feedback      (EvoSyn ablation)
frozen                     the paper's frozen-Synthesizer control (Designer and Reflector off)
frozen-designer            frozen Synthesizer steered by the Designer (what RL adds on top)
frozen-designer-noreflect  frozen Synthesizer + Designer, Reflector off: separates the
                           Synthesizer's training from the Designer's steering
static                     the paper's static corpus: a fixed corpus drawn once, revisited
uniform                    fresh uniform draws from the evaluation distribution every step:
                           an oracle no real domain has
=========================  ==================================================================

Prints, per arm (mean ± sample std over seeds): held-out greedy and sampled accuracy
gain (mean over levels), the gain split into Learn (held-out problems the initial
Reasoner got wrong, greedy) and Retain (ones it got right), the gradient-bearing share
of valid tasks, controllability, factor coverage and balance; then per-level held-out
accuracy, and each arm's paired difference to ``frozen`` and ``static`` (same seed)
with its standard error. ``--out DIR`` keeps the runs and writes ``modes.json``.
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing
import os
import statistics
import tempfile
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from synco.config import load_config
from synco.learn.pretrain import exit_with_parent

ARMS: dict[str, list[str]] = {
    "evosyn": ["mode=cotrain", "evosyn.designer=true", "evosyn.reflector=true", "evosyn.feedback=true"],
    "cotrain": ["mode=cotrain", "evosyn.designer=false", "evosyn.reflector=false"],
    "evosyn-noreflect": ["mode=cotrain", "evosyn.designer=true", "evosyn.reflector=false"],
    "evosyn-nofeedback": ["mode=cotrain", "evosyn.designer=true", "evosyn.reflector=true", "evosyn.feedback=false"],
    "frozen": ["mode=frozen", "evosyn.designer=false", "evosyn.reflector=false"],
    "frozen-designer": ["mode=frozen", "evosyn.designer=true", "evosyn.reflector=true"],
    "frozen-designer-noreflect": ["mode=frozen", "evosyn.designer=true", "evosyn.reflector=false"],
    "static": ["mode=static"],
    "uniform": ["mode=uniform"],
}
DEFAULT_ARMS = ("evosyn", "cotrain", "frozen", "static", "uniform")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=None, help="steps per run (default: the arith preset's)")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--arms", nargs="+", default=list(DEFAULT_ARMS), choices=list(ARMS))
    ap.add_argument("--jobs", type=int, default=2,
                    help="runs in parallel, one torch thread each (default: %(default)s; 1: one run at a time, 2 threads)")
    ap.add_argument("--out", type=Path, default=None, help="keep the runs here (default: a temporary folder)")
    ap.add_argument("--bases", nargs="+", default=["frozen", "static"], choices=list(ARMS),
                    help="arms every other arm is compared with, same seed (default: %(default)s)")
    ap.add_argument("overrides", nargs="*", help="extra config overrides applied to every run")
    args = ap.parse_args()

    root = args.out or Path(tempfile.mkdtemp(prefix="synco-modes-"))
    steps = args.steps or load_config("arith").steps
    jobs = arm_jobs(ARMS, args.arms, args.seeds, steps, root, args.jobs, args.overrides)
    results = run_jobs(jobs, args.jobs, _run, lambda r: f"{r['sec_per_step']:.2f} s/step")

    print(f"\n# {steps} steps, seeds {args.seeds}, overrides {args.overrides or '-'}; runs in {root}\n")
    print_arm_table(results, [("controllability", "ctrl_last", 2), ("coverage", "coverage", 2),
                              ("balance", "balance", 2), ("s/step", "sec_per_step", 2)])
    print_levels(results, gain=False)
    print_paired(results, tuple(args.bases), width=max(map(len, results)))
    (root / "modes.json").write_text(json.dumps(results, indent=2))


def _run(job: tuple[str, int, list[str]]) -> dict:
    """One run in a worker process, then per-problem greedy outcomes before/after for Learn/Retain."""
    from synco.run.loop import train

    cfg = load_config("arith", overrides=job[2])
    s = train(cfg, log=lambda *a, **k: None)
    return {
        **outcome(cfg, s),
        "ctrl_last": s.controllability_last, "coverage": s.factor_coverage, "balance": s.factor_balance,
        "rho": s.allocation_gap_spearman, "factor_changes": s.factor_changes, "sec_per_step": s.sec_per_step,
        "groups_last": s.groups_last,
    }


def arm_jobs(arms: dict[str, list[str]], names: list[str], seeds: list[int], steps: int, root: Path, n_jobs: int,
             overrides: list[str], layout: list[str] = ()) -> list[tuple[str, int, list[str]]]:
    """(arm, seed, overrides) of every run: the arm's settings, the shared layout, the seed and the bench's defaults."""
    threads = 1 if n_jobs > 1 else 2
    return [(arm, seed, [*arms[arm], *layout, f"seed={seed}", f"steps={steps}", f"runs_dir={root}",
                         f"run_id={arm}-s{seed}", "progress=false", "tensorboard=false", f"threads={threads}",
                         *overrides])
            for seed in seeds for arm in names]


def run_jobs(jobs: list[tuple[str, int, list[str]]], n_jobs: int, run, describe) -> dict[str, dict[int, dict]]:
    """Run every job in ``n_jobs`` spawned workers (``run(job) -> dict``), printing a line per finished run."""
    results: dict[str, dict[int, dict]] = {arm: {} for arm, _, _ in jobs}
    with ProcessPoolExecutor(max_workers=n_jobs, mp_context=multiprocessing.get_context("spawn"),
                             initializer=exit_with_parent, initargs=(os.getpid(),)) as ex:
        for (arm, seed, _), r in zip(jobs, ex.map(run, jobs)):
            results[arm][seed] = r
            print(f"done {arm} seed={seed}: held-out greedy {r['before']:.3f}->{r['after']:.3f} "
                  f"(learn {r['learn']:+.3f}, retain {r['retain']:+.3f}), sampled {r['sampled_gain']:+.3f}, "
                  f"{describe(r)}", flush=True)
    return results


def outcome(cfg, s, per_item=None) -> dict:
    """What every bench arm reports of one finished run: held-out gains, Learn / Retain, per level, gradient share.

    ``per_item(cfg, run_dir)``: each held-out item's greedy correctness (default :func:`_per_item`, single-turn)."""
    per_item = per_item or _per_item
    before, after = per_item(cfg, None), per_item(cfg, Path(s.run_dir))
    wrong = [k for k, ok in before.items() if not ok]
    right = [k for k, ok in before.items() if ok]
    n = max(1, len(before))
    return {
        "before": _mean(s.heldout_before), "after": _mean(s.heldout_after),
        "gain": _mean(s.heldout_after) - _mean(s.heldout_before),
        "sampled_gain": _mean(s.heldout_sampled_after) - _mean(s.heldout_sampled_before),
        # Learn + Retain = the (item-weighted) greedy gain: items newly solved minus items forgotten, over all items
        "learn": sum(after[k] for k in wrong) / n, "retain": -sum(not after[k] for k in right) / n,
        "before_by_level": s.heldout_before, "after_by_level": s.heldout_after,
        "grad_first": s.gradient_share_first, "grad_last": s.gradient_share_last,
    }


def print_arm_table(results: dict[str, dict], extra: list[tuple[str, str, int]]) -> None:
    """Mean ± std over seeds per arm: the gains, Learn / Retain, gradient share, then ``extra`` (title, key, digits)."""
    print("| arm | greedy gain | sampled gain | Learn | Retain | grad-bearing first -> last | "
          + " | ".join(t for t, _, _ in extra) + " |")
    print("|---" * (6 + len(extra)) + "|")
    for arm, by_seed in results.items():
        rs = list(by_seed.values())

        def col(key: str, nd: int = 3, signed: bool = False) -> str:
            return _ms([r[key] for r in rs if r[key] is not None], nd, signed)

        print(f"| {arm} | {col('gain', signed=True)} | {col('sampled_gain', signed=True)} | {col('learn', signed=True)} "
              f"| {col('retain', signed=True)} | {col('grad_first', 2)} -> {col('grad_last', 2)} | "
              + " | ".join(col(k, nd) for _, k, nd in extra) + " |")


def print_levels(results: dict[str, dict], gain: bool) -> None:
    """Held-out greedy accuracy per level, mean over seeds: after training (``gain``: after - before)."""
    levels = list(next(iter(next(iter(results.values())).values()))["after_by_level"])
    print("\nheld-out greedy gain per held-out group (after - before, mean over seeds)" if gain else
          "\nheld-out greedy accuracy per held-out group (arith: level) after training (mean over seeds; before in the first row)")
    print("| | " + " | ".join(levels) + " |")
    print("|---" * (len(levels) + 1) + "|")
    first = list(next(iter(results.values())).values())
    print("| before | " + " | ".join(f"{statistics.mean(r['before_by_level'][g] for r in first):.2f}" for g in levels) + " |")
    for arm, by_seed in results.items():
        if gain:
            cells = [f"{statistics.mean(r['after_by_level'][g] - r['before_by_level'][g] for r in by_seed.values()):+.2f}"
                     for g in levels]
        else:
            cells = [f"{statistics.mean(r['after_by_level'][g] for r in by_seed.values()):.2f}" for g in levels]
        print(f"| {arm} | " + " | ".join(cells) + " |")


def print_paired(results: dict[str, dict], bases: tuple[str, ...], width: int) -> None:
    """Each arm's same-seed difference to each base arm present: greedy and sampled gain, mean ± s.e., t."""
    for base in bases:
        if base not in results:
            continue
        print(f"\npaired difference to {base} (same seeds): greedy gain, sampled gain; mean ± s.e. (t = mean / s.e.)")
        for arm, by_seed in results.items():
            if arm == base:
                continue
            for key in ("gain", "sampled_gain"):
                d = [by_seed[s][key] - results[base][s][key] for s in by_seed if s in results[base]]
                print(f"  {arm:>{width}} - {base} {key:>12}: {_paired(d)}")


def _per_item(cfg, run_dir: Path | None) -> dict[str, bool]:
    """Greedy correctness of each held-out problem for the initial Reasoner (None) or a run's final one."""
    from synco.grading.checker import AnswerChecker
    from synco.grading.extract import extract_answer
    from synco.domains.base import SamplingParams, solve
    from synco.learn.build import build_policy
    from synco.run.build import build_domain
    from synco.run.checkpoints import latest_checkpoint

    domain = build_domain(cfg)
    items = domain.heldout(cfg.heldout_per_group, seed=cfg.seed + 12345)
    ckpt = None if run_dir is None else latest_checkpoint(run_dir)
    policy = build_policy(cfg.reasoner, None if ckpt is None else str(ckpt / "reasoner"))
    params = SamplingParams(greedy=True, max_new_tokens=cfg.reasoner.sampling.max_new_tokens)
    out: dict[str, bool] = {}
    with AnswerChecker() as checker:
        for start in range(0, len(items), 512):
            chunk = items[start:start + 512]
            for it, group in zip(chunk, solve(policy, domain, [it.problem for it in chunk], 1, params)):
                ans = extract_answer(group[0].text)
                out[f"{it.group}:{it.problem}"] = ans is not None and checker.match(ans, it.answer)
    return out


def _mean(d: dict[str, float]) -> float:
    return sum(d.values()) / len(d) if d else float("nan")


def _ms(xs: list[float], nd: int = 3, signed: bool = False) -> str:
    if not xs:
        return "-"
    fmt = f"{{:{'+' if signed else ''}.{nd}f}}"
    if len(xs) == 1:
        return fmt.format(xs[0])
    return fmt.format(statistics.mean(xs)) + " ± " + f"{statistics.stdev(xs):.{nd}f}"


def _paired(d: list[float]) -> str:
    if len(d) < 2:
        return " ".join(f"{x:+.4f}" for x in d) or "-"
    m, se = statistics.mean(d), statistics.stdev(d) / math.sqrt(len(d))
    return f"{m:+.4f} ± {se:.4f} (t = {m / se if se else float('inf'):+.1f}; per seed " + \
        ", ".join(f"{x:+.3f}" for x in d) + ")"


if __name__ == "__main__":
    main()
