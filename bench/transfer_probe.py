"""Does training on one level of the arith world help the others? (why a curriculum can or cannot win)

    python bench/transfer_probe.py [--steps 30] [--levels L4 L6 L7 L8] [--seed 0] [KEY=VALUE ...]

For each level X, the shipped warm-start Reasoner takes ``--steps`` GRPO steps on fresh
problems of level X only (128 cards x 8 attempts, the arith preset's Reasoner settings;
no Synthesizer involved), and also on fresh problems of all levels (``uniform``, the same
rollout budget). Prints held-out greedy accuracy per level after each, minus the start.

Reading it: a curriculum that concentrates the budget can beat uniform practice on the
uniform held-out *mean* only if (a) a level's gain keeps growing with its share of the
budget instead of saturating, or (b) practice on the targeted levels transfers to other
levels. The diagonal (gain on X when training on X) against the ``uniform`` row's gain on X
at 1/11 of the budget answers (a); the off-diagonal entries answer (b).
"""

from __future__ import annotations

import argparse
import random
import time

from synco.config import load_config
from synco.cotrain.engine import cotrain_step
from synco.run.heldout import evaluate_heldout_greedy
from synco.run.setup import setup_run


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--levels", nargs="+", default=["L4", "L6", "L7", "L8"])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("overrides", nargs="*")
    args = ap.parse_args()

    rows: dict[str, dict[str, float]] = {}
    start: dict[str, float] | None = None
    for target in ["uniform", *args.levels]:
        t0 = time.perf_counter()
        cfg = load_config("arith", overrides=[
            "mode=uniform", f"seed={args.seed}", f"steps={args.steps}", "runs_dir=/tmp/synco-transfer",
            f"run_id={target}-s{args.seed}-{int(time.time())}", "heldout_per_group=300", "heldout_samples=0",
            "tensorboard=false", "progress=false", f"threads={args.threads}", *args.overrides])
        run = setup_run(cfg)
        st = run.state
        if start is None:
            start = evaluate_heldout_greedy(run).groups
        if target != "uniform":
            domain = st.domain

            def one_level(rng: random.Random, n: int, level: str = target) -> list[str]:
                out = []
                for _ in range(n):
                    p = domain.sample_problem(rng, level)
                    out.append(domain.format_card(p, level, domain.answer(p) or ""))
                return out

            st.domain.static_cards = one_level  # type: ignore[method-assign]
        for step in range(args.steps):
            cotrain_step(st, step)
        rows[target] = evaluate_heldout_greedy(run).groups
        st.pool.close()
        print(f"done {target}: {time.perf_counter() - t0:.0f} s", flush=True)

    assert start is not None
    levels = list(start)
    print(f"\n# held-out greedy gain per level after {args.steps} steps of 128 x 8 on one level (seed {args.seed})\n")
    print("| trained on | " + " | ".join(levels) + " | mean |")
    print("|---" * (len(levels) + 2) + "|")
    print("| (start) | " + " | ".join(f"{start[g]:.2f}" for g in levels) + f" | {sum(start.values()) / len(start):.3f} |")
    for target, acc in rows.items():
        gains = [acc[g] - start[g] for g in levels]
        print(f"| {target} | " + " | ".join(f"{x:+.2f}" for x in gains) + f" | {sum(gains) / len(gains):+.3f} |")


if __name__ == "__main__":
    main()
