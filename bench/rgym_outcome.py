"""Co-training on reasoning-gym's families against its controls, at equal steps, cards and attempts per step.

    python bench/rgym_outcome.py [--steps N] [--seeds 11 12 13] [--arms ...] [--jobs 2] [--out DIR] [KEY=VALUE ...]

Every arm runs the ``rgym`` preset (the tiny warm-started pair, 4 families, levels 0-2) with the same seeds, cards per step and
attempts per card; the held-out set and the Reasoner's initial weights depend only on the seed. Default seeds 11-13:
nobody tuned on them. The arms:

=========  ==========================================================================================
cotrain    the Synthesizer trained (GRPO), steered by the Designer (Reflector on): the method
frozen     the same Designer, the Synthesizer frozen: what training the Synthesizer adds
designer   the Designer alone: its cells, configs drawn uniformly within them, no Synthesizer
           (``mode=designer``): whose credit a gain is
uniform    fresh configs uniform over the family x level cells every step (``mode=uniform``)
static     a static corpus of as many configs as a run sees cards (steps x cards), drawn once, revisited
grounded   SOAR-style: the Synthesizer trained without the Designer (it chooses the cells), its reward the
           measured learning effect of the cell its card realised (``synth_rewards.learnability=effect``,
           ``evosyn.effect_every=5``) instead of the teachability of the card's own attempts
=========  ==========================================================================================

A card's generator seed is drawn when the card is checked, so a revisited static config generates a new item: the
static arm fixes the configs (the task distribution), not the items.

Each finished run appends one line to ``DIR/runs.jsonl`` (partial results survive a stopped bench; the same command
again skips the runs there, in the order seed 11's arms, then 12's, then 13's, and sets aside the directory of a run
that was stopped midway); at the end the
tables: per arm the held-out greedy gain (mean over groups) and Learn / Retain (mean ± std over seeds), per family
the levels' and the transfer set's gain, and each arm's same-seed difference to ``frozen`` and ``uniform`` with its
standard error.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cotrain_modes import _ms, _paired, arm_jobs  # noqa: E402 - the shared bench helpers

from synco.config import load_config  # noqa: E402

ARMS: dict[str, list[str]] = {
    "cotrain": ["mode=cotrain", "evosyn.designer=true", "evosyn.reflector=true"],
    "frozen": ["mode=frozen", "evosyn.designer=true", "evosyn.reflector=true"],
    "designer": ["mode=designer", "evosyn.designer=true", "evosyn.reflector=true"],
    "uniform": ["mode=uniform", "evosyn.designer=false", "evosyn.reflector=false"],
    "static": ["mode=static", "evosyn.designer=false", "evosyn.reflector=false"],
    # SOAR-style: the Synthesizer chooses what to write (no Designer) and is rewarded by the measured improvement of
    # the cell its card realised (learnability=effect), measured every 5 steps so it has a signal from step 10 on
    "grounded": ["mode=cotrain", "evosyn.designer=false", "evosyn.reflector=false",
                 "synth_rewards.learnability=effect", "evosyn.effect_every=5"],
}


def run_one(job: tuple[str, int, list[str]]) -> dict:
    """One run; its summary's held-out numbers (per group, per family, Learn / Retain)."""
    from synco.run.loop import train

    cfg = load_config("rgym", overrides=job[2])
    s = train(cfg, log=lambda *a, **k: None)
    lr = s.heldout_learn_retain
    n = max(1, lr.n if lr else 1)
    return {"arm": job[0], "seed": job[1], "before": s.heldout_before, "after": s.heldout_after,
            "gain": _mean(s.heldout_after) - _mean(s.heldout_before),
            "sampled_before": s.heldout_sampled_before, "sampled_after": s.heldout_sampled_after,
            "sampled_gain": _mean(s.heldout_sampled_after) - _mean(s.heldout_sampled_before),
            "grad_first": s.gradient_share_first, "grad_last": s.gradient_share_last, "curve": s.heldout_curve,
            "learn": (lr.learn_gain / n) if lr else 0.0, "retain": (-lr.retain_loss / n) if lr else 0.0,
            "by_family": s.heldout_by_family, "valid_rate": s.valid_rate, "sec_per_step": s.sec_per_step}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=None, help="steps per run (default: the rgym preset's)")
    ap.add_argument("--seeds", type=int, nargs="+", default=[11, 12, 13])
    ap.add_argument("--arms", nargs="+", default=list(ARMS), choices=list(ARMS))
    ap.add_argument("--jobs", type=int, default=1, help="runs in parallel (default: %(default)s)")
    ap.add_argument("--out", type=Path, default=None, help="keep the runs and runs.jsonl here")
    ap.add_argument("overrides", nargs="*", help="extra config overrides applied to every run")
    args = ap.parse_args()

    root = args.out or Path(tempfile.mkdtemp(prefix="synco-rgym-"))
    root.mkdir(parents=True, exist_ok=True)
    preset = load_config("rgym")
    steps = args.steps or preset.steps
    layout = [f"static_corpus_size={steps * preset.n_cards}"]  # the static corpus: as many tasks as a run sees
    jobs = arm_jobs(ARMS, args.arms, args.seeds, steps, root, args.jobs, args.overrides, layout)
    done_path = root / "runs.jsonl"
    done = {(r["arm"], r["seed"]) for r in map(json.loads, done_path.read_text().splitlines())} if done_path.exists() else set()
    todo = [j for j in jobs if (j[0], j[1]) not in done]
    for arm, seed, _ in todo:  # a run stopped midway left its directory: set it aside, the run starts afresh
        stale = root / f"{arm}-s{seed}"
        if stale.exists():
            stale.rename(root / f"{stale.name}.stopped-{int(time.time())}")
    if args.jobs > 1:
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        with ProcessPoolExecutor(args.jobs, mp_context=multiprocessing.get_context("spawn")) as ex:
            for r in ex.map(run_one, todo):
                _record(done_path, r)
    else:
        for job in todo:
            _record(done_path, run_one(job))
    results = [json.loads(x) for x in done_path.read_text().splitlines()]
    report(results, steps)


def _record(path: Path, r: dict) -> None:
    with path.open("a") as f:
        f.write(json.dumps(r) + "\n")
    print(f"done {r['arm']} seed={r['seed']}: held-out {_mean(r['before']):.3f} -> {_mean(r['after']):.3f} "
          f"(learn {r['learn']:+.3f}, retain {r['retain']:+.3f}), sampled {r['sampled_gain']:+.3f}, "
          f"{r['sec_per_step']:.1f} s/step", flush=True)


def report(results: list[dict], steps: int) -> None:
    by_arm: dict[str, dict[int, dict]] = {}
    for r in results:
        by_arm.setdefault(r["arm"], {})[r["seed"]] = r
    print(f"\n# rgym, {steps} steps\n\n| arm | seeds | greedy gain | sampled gain | Learn | Retain | valid rate |"
          "\n|---|---|---|---|---|---|---|")
    for arm, rs in by_arm.items():
        xs = list(rs.values())
        sampled = [r["sampled_gain"] for r in xs if r.get("sampled_gain") is not None]
        print(f"| {arm} | {len(xs)} | {_ms([r['gain'] for r in xs], signed=True)} | {_ms(sampled, signed=True)} | "
              f"{_ms([r['learn'] for r in xs], signed=True)} | {_ms([r['retain'] for r in xs], signed=True)} | "
              f"{_ms([r['valid_rate'] for r in xs], 2)} |")
    families = sorted({f for r in results for f in r["by_family"]})
    print("\nper family, mean over seeds: levels gain / transfer gain\n\n| arm | " + " | ".join(families) + " |")
    print("|---" * (len(families) + 1) + "|")
    for arm, rs in by_arm.items():
        cells = []
        for fam in families:
            rows = [r["by_family"][fam] for r in rs.values() if fam in r["by_family"]]
            lv = statistics.mean(x["levels_after"] - x["levels_before"] for x in rows) if rows else float("nan")
            tr = [x["transfer_after"] - x["transfer_before"] for x in rows if x["transfer_before"] is not None]
            cells.append(f"{lv:+.2f} / {statistics.mean(tr):+.2f}" if tr else f"{lv:+.2f}")
        print(f"| {arm} | " + " | ".join(cells) + " |")
    for base in ("frozen", "uniform"):
        if base not in by_arm:
            continue
        print(f"\npaired difference to {base} (same seeds), greedy gain: mean ± s.e.")
        for arm, rs in by_arm.items():
            if arm != base:
                d = [rs[s]["gain"] - by_arm[base][s]["gain"] for s in rs if s in by_arm[base]]
                print(f"  {arm:>9} - {base}: {_paired(d)}")


def _mean(d: dict[str, float]) -> float:
    return sum(d.values()) / len(d) if d else float("nan")


if __name__ == "__main__":
    main()
