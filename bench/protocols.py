"""Compare the training protocols the papers compare, on the embedded arith world, at a matched budget.

    python bench/protocols.py [--steps N] --seeds 0 1 2 [--jobs 2] [--arms ...] [KEY=VALUE ...]

Every arm runs the arith preset (tiny warm-started models, EvoSyn's Designer and Reflector
where a Synthesizer writes) with the same seeds, steps, cards per step and attempts per
card: the same budget of Reasoner rollout slots (steps x n_cards x k, printed), of which
each arm spends one per attempt at a *valid* task (the actual count is a column). The
Reasoner's initial weights and the held-out set depend only on the seed. The arms:

==============  ======================================================================
online          co-training (protocol=online, mode=cotrain): both agents take a GRPO
                step every step
frozen          the paper's control: online with the Synthesizer frozen
rounds          EvoSyn (protocol=rounds, mode=frozen): rounds of synthesis with the
                Designer / Reflector, the Reasoner fine-tuned (SFT) on each round's
                correct attempts at its end (EvoSyn-R1 style)
rounds-acc      rounds with accumulate=true: each round's SFT on every round so far
                (EvoSyn-Final-SFT style)
rounds-grpo     rounds with GRPO on each round's tasks instead of SFT (fresh attempts:
                extra rollouts, counted); not in the default set
rounds-acc-co   rounds-acc with the Synthesizer trained too (mode=cotrain: its GRPO step
                every step, against the Reasoner of the current round): co-training under
                EvoSyn's protocol; not in the default set
rounds-acc-nofb rounds-acc with evosyn.feedback=false: no learner information reaches the
                Designer (coverage only) or the Synthesizer's prompt: is adaptivity what helps?
rounds-acc-nod  rounds-acc with the Designer and Reflector off (plain SynCo prompts)
rounds-acc-nor  rounds-acc with the Reflector off (the Designer keeps the built-in factors)
rounds-acc-co-nor rounds-acc-co with the Reflector off: co-training when the cells are coarse (level
                only), so what makes a task teachable within a level is left to the Synthesizer's RL
rft-acc         rft with accumulate=true: the static-corpus control of rounds-acc (the
                same SFT schedule on a fixed corpus drawn once); not in the default set
alternating     R-Zero style (protocol=alternating): phases in which only one agent learns
rft             rejection-sampling fine-tuning (protocol=rft): the fixed corpus of
                mode=static, correct attempts kept, SFT at each round's end
==============  ======================================================================

Prints, per arm (mean ± sample std over seeds): held-out greedy and sampled accuracy gain
(mean over levels), Learn / Retain (held-out problems the initial Reasoner got wrong /
right, greedy), the gradient-bearing share of valid tasks (first -> last 10 % of steps:
the share of collected tasks with mixed outcomes, whether or not the protocol trains on
them by GRPO), the Reasoner rollouts actually spent, the SFT examples trained on, wall time
per run; then per-level held-out gain, and each arm's paired difference to ``online`` and
``frozen`` (same seed) and, when they ran, to ``rounds-acc`` and ``rft-acc``. ``--out DIR`` keeps the runs
and writes ``protocols.json``; ``--reuse FILE`` takes arms (and seeds) already in an earlier
``protocols.json`` from it instead of running them again (only when that file's runs used the same
settings: the bench does not check).
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from cotrain_modes import arm_jobs, outcome, print_arm_table, print_levels, print_paired, run_jobs  # noqa: E402  (the modes bench's)

from synco.config import load_config  # noqa: E402

ARMS: dict[str, list[str]] = {
    "online": ["protocol=online", "mode=cotrain"],
    "frozen": ["protocol=online", "mode=frozen"],
    "rounds": ["protocol=rounds", "mode=frozen", "rounds.accumulate=false"],
    "rounds-acc": ["protocol=rounds", "mode=frozen", "rounds.accumulate=true"],
    "rounds-grpo": ["protocol=rounds", "mode=frozen", "rounds.update=grpo"],
    "alternating": ["protocol=alternating", "mode=cotrain"],
    "rft": ["protocol=rft"],
    "rounds-acc-co": ["protocol=rounds", "mode=cotrain", "rounds.accumulate=true"],
    "rounds-acc-nofb": ["protocol=rounds", "mode=frozen", "rounds.accumulate=true", "evosyn.feedback=false"],
    "rounds-acc-nod": ["protocol=rounds", "mode=frozen", "rounds.accumulate=true", "evosyn.designer=false",
                       "evosyn.reflector=false"],
    "rounds-acc-nor": ["protocol=rounds", "mode=frozen", "rounds.accumulate=true", "evosyn.reflector=false"],
    "rounds-acc-co-nor": ["protocol=rounds", "mode=cotrain", "rounds.accumulate=true", "evosyn.reflector=false"],
    "rft-acc": ["protocol=rft", "rounds.accumulate=true"],
}
DEFAULT_ARMS = ("online", "frozen", "rounds", "rounds-acc", "alternating", "rft")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=None, help="steps per run (default: the arith preset's)")
    ap.add_argument("--steps-per-round", type=int, default=None,
                    help="rounds / rft: steps per round (default: the config's rounds.steps_per_round)")
    ap.add_argument("--phase-steps", type=int, default=None,
                    help="alternating: steps per phase (default: the config's alternating.phase_steps)")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--arms", nargs="+", default=list(DEFAULT_ARMS), choices=list(ARMS))
    ap.add_argument("--jobs", type=int, default=2,
                    help="runs in parallel, one torch thread each (default: %(default)s; 1: one run at a time, "
                         "2 threads)")
    ap.add_argument("--out", type=Path, default=None, help="keep the runs here (default: a temporary folder)")
    ap.add_argument("--reuse", type=Path, default=None,
                    help="an earlier protocols.json: arm/seed results found there are taken from it, not rerun "
                         "(the same steps, layout and overrides are assumed)")
    ap.add_argument("overrides", nargs="*", help="extra config overrides applied to every run (e.g. rounds.sft_lr=1e-4)")
    args = ap.parse_args()

    root = args.out or Path(tempfile.mkdtemp(prefix="synco-protocols-"))
    root.mkdir(parents=True, exist_ok=True)
    base = load_config("arith", overrides=args.overrides)
    steps = args.steps or base.steps
    layout = [f"rounds.steps_per_round={args.steps_per_round}"] if args.steps_per_round else []
    layout += [f"alternating.phase_steps={args.phase_steps}"] if args.phase_steps else []
    jobs = arm_jobs(ARMS, args.arms, args.seeds, steps, root, args.jobs, args.overrides, layout)
    reused = reused_results(args.reuse, args.arms, args.seeds) if args.reuse else {}
    jobs = [j for j in jobs if j[1] not in reused.get(j[0], {})]
    ran = run_jobs(jobs, args.jobs, _run,
                   lambda r: f"{r['rollouts']} rollouts, {r['sft_examples']} SFT examples, {r['wall']:.0f} s")
    results = {arm: {s: (reused.get(arm, {}) | ran.get(arm, {}))[s] for s in args.seeds} for arm in args.arms}

    cfg = load_config("arith", overrides=[*args.overrides, *layout])
    print(f"\n# {steps} steps, seeds {args.seeds}, overrides {args.overrides or '-'}; runs in {root}")
    print(f"# budget per run: {steps} steps x {cfg.n_cards} cards x {cfg.k} attempts = "
          f"{steps * cfg.n_cards * cfg.k} Reasoner rollout slots (one rollout per attempt at a valid task; "
          f"rounds-grpo adds its fresh attempts); rounds of {cfg.rounds.steps_per_round} steps, "
          f"alternating phases of {cfg.alternating.phase_steps} steps\n")
    print_arm_table(results, [("Reasoner rollouts", "rollouts", 0), ("SFT examples", "sft_examples", 0),
                              ("wall s/run", "wall", 0)])
    print_levels(results, gain=True)
    print_paired(results, ("online", "frozen", "rounds-acc", "rft-acc"), width=13)
    (root / "protocols.json").write_text(json.dumps(results, indent=2))


def reused_results(path: Path, arms: list[str], seeds: list[int]) -> dict[str, dict[int, dict]]:
    """The results of ``arms`` x ``seeds`` that an earlier ``protocols.json`` holds (JSON keys back to int seeds)."""
    saved = json.loads(path.read_text())
    return {arm: {int(s): r for s, r in saved[arm].items() if int(s) in seeds} for arm in arms if arm in saved}


def _rollouts(run_dir: Path) -> int:
    """Reasoner attempts recorded in the run's pool (one per attempt at a valid task)."""
    with sqlite3.connect(run_dir / "pool.sqlite") as db:
        return int(db.execute("SELECT COUNT(*) FROM rollouts").fetchone()[0])


def _run(job: tuple[str, int, list[str]]) -> dict:
    """One run in a worker process; per-problem greedy outcomes before/after for Learn/Retain."""
    from synco.run.loop import train

    cfg = load_config("arith", overrides=job[2])
    t0 = time.perf_counter()
    s = train(cfg, log=lambda *a, **k: None)
    wall = time.perf_counter() - t0
    return {
        **outcome(cfg, s),
        "rollouts": _rollouts(Path(s.run_dir)) + sum(t.get("rollouts") or 0 for t in s.round_training),
        "sft_examples": sum(t["examples"] for t in s.round_training) if cfg.rounds.update == "sft" else 0,
        "round_training": s.round_training, "sec_per_step": s.sec_per_step, "wall": wall,
    }


if __name__ == "__main__":
    main()
