"""Label accuracy in the math domain (no oracle): how well do the verifier screen and consensus catch wrong
reference answers, and how many right ones do they throw away?

Run: ``python bench/label_accuracy.py --model tiny|smollm2 --solver reasoner|checker --n 200 --corrupt 0.3
--seed 0 [--k K] [--json]``.

Draws ``--n`` problems from the math domain's generator (exact answers), corrupts exactly ``--corrupt`` of
their reference answers (off by one, sign flip, a number from the problem, doubled/halved, an inverted
fraction, swapped digits; the card's solution states the wrong answer too unless ``--label-only``), and runs
them through real co-training steps (``synco.eval.labels``): the verifier screen, then consensus on the K Reasoner
attempts (``--solver reasoner``) or on M answers of a frozen checker (``--solver checker``). Nothing is
trained. Prints precision / recall of wrong-label detection (positive = label rejected), the share of
correct labels wrongly rejected, how many cards consensus could judge at all, with counts and standard
errors; ``--json`` prints the same as JSON.

Settings (K, M, sampling, verifier) come from the ``smollm2`` preset, as a ``synco train --preset smollm2``
run would use them; ``--k`` replaces K (or M) and ``--max-new-tokens`` the answer budget.
Models: ``smollm2`` is SmolLM2-135M-Instruct (``synco.learn.models``; CPU, slow: ~2.4 CPU-s per 96-token answer
with one thread, so ``--n 60`` with the preset's K = M = 2 takes ~5 CPU-minutes per solver; keep ``--n``
small). ``tiny`` is a randomly initialised character-level Llama (the tests' tiny model): it writes no
answers, so nothing is judged; it measures the harness, not a labeller.

Measured (2 shared CPU cores, 1 thread; ``--model smollm2 --n 60 --corrupt 0.3 --seed 0``, preset settings
K = M = 2, 96 new tokens): both solvers extract an answer from 5 of 120 responses (SmolLM2 rarely finishes
with ``\boxed{}`` within 96 tokens), so consensus judges 0 of 60 cards; with self-consistent wrong cards
the screen rejects none either: recall 0/18, correct labels wrongly rejected 0/42.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

from synco.config import load_config
from synco.eval.labels import (
    CORRUPTION_KINDS,
    draw_labelled_cards,
    format_table,
    outcomes_to_jsonl,
    run_label_harness,
    settings_from_config,
    summarize,
)
from synco.domains.math import MathDomain


def build_solver(model: str, solver: str, cfg: Any, domain: MathDomain, seed: int) -> Any:
    """The policy that answers for consensus, built as a training run builds it (frozen)."""
    if model == "smollm2":
        from synco.learn.build import build_policy
        from synco.run.build import build_consensus_checker

        if solver == "checker":
            return build_consensus_checker(cfg, domain)
        return build_policy(cfg.reasoner.model_copy(update={"trainable": False}))
    if model == "tiny":
        from synco.learn.hf_policy import HFPolicy
        from synco.core.policy import PolicyConfig
        from synco.learn.charlm import char_tokenizer, tiny_llama

        tok = char_tokenizer()
        sampling = (cfg.checker or cfg.reasoner).sampling if solver == "checker" else cfg.reasoner.sampling
        return HFPolicy(tiny_llama(tok, seed=seed, hidden_size=32, num_layers=2), tok,
                        PolicyConfig(model_path="tiny", device="cpu", trainable=False, sampling=sampling))
    raise SystemExit(f"--model must be tiny or smollm2, got {model!r}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", choices=("tiny", "smollm2"), default="tiny", help="who answers (default: %(default)s)")
    p.add_argument("--solver", choices=("reasoner", "checker"), default="reasoner",
                   help="consensus on the K Reasoner attempts, or on M answers of a frozen checker (default: %(default)s)")
    p.add_argument("--n", type=int, default=200, help="problems drawn (default: %(default)s)")
    p.add_argument("--corrupt", type=float, default=0.3, help="share of reference answers made wrong (default: %(default)s)")
    p.add_argument("--seed", type=int, default=0, help="problems, corruptions and sampling (default: %(default)s)")
    p.add_argument("--k", type=int, default=None, help="answers per card: K (reasoner) or M (checker); default: the preset's")
    p.add_argument("--max-new-tokens", type=int, default=None, help="answer budget in tokens (default: the preset's)")
    p.add_argument("--batch-size", type=int, default=16, help="cards per co-training step (default: %(default)s)")
    p.add_argument("--label-only", action="store_true",
                   help="corrupt only final_answer (the solution keeps the true answer; the screen should catch it)")
    p.add_argument("--kinds", default=",".join(CORRUPTION_KINDS), help="corruption kinds, comma-separated (default: all)")
    p.add_argument("--novelty-threshold", type=float, default=1.0,
                   help="verifier novelty threshold (default 1.0: generator siblings are not near-duplicates)")
    p.add_argument("--threads", type=int, default=1, help="torch threads (default: %(default)s)")
    p.add_argument("--json", action="store_true", help="print the result as JSON instead of a table")
    p.add_argument("--outcomes", default=None, metavar="FILE", help="also write one JSON line per card here")
    args = p.parse_args(argv)

    import torch

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    overrides = [f"consensus_solver={args.solver}", f"seed={args.seed}"]
    if args.max_new_tokens is not None:
        overrides.append(f"reasoner.sampling.max_new_tokens={args.max_new_tokens}")
    cfg = load_config("smollm2", overrides=overrides)
    settings = settings_from_config(cfg, args.solver, n_answers=args.k, batch_size=args.batch_size,
                                    novelty_threshold=args.novelty_threshold)
    domain = MathDomain(prompts_dir=cfg.prompts_dir)
    kinds = [k.strip() for k in args.kinds.split(",") if k.strip()]
    cards = draw_labelled_cards(domain, args.n, args.corrupt, args.seed, consistent=not args.label_only, kinds=kinds)

    t0 = time.perf_counter()
    policy = build_solver(args.model, args.solver, cfg, domain, args.seed)
    t_load = time.perf_counter() - t0

    def progress(step: int, stats: Any) -> None:
        done = min(len(cards), (step + 1) * settings.batch_size)
        print(f"  step {step}: {done}/{len(cards)} cards, valid {stats.n_valid}/{stats.n_cards}, "
              f"{time.perf_counter() - t0:.0f} s", file=sys.stderr, flush=True)

    outcomes = run_label_harness(cards, policy, settings, domain=domain, on_step=progress)
    seconds = time.perf_counter() - t0
    result = summarize(outcomes, {
        "model": args.model, "solver": args.solver, "n": args.n, "corrupt": args.corrupt, "seed": args.seed,
        "answers_per_card": settings.n_answers, "max_new_tokens": settings.sampling.max_new_tokens,
        "temperature": settings.sampling.temperature, "consistent": not args.label_only,
        "threads": args.threads, "load_s": round(t_load, 1), "total_s": round(seconds, 1),
    })
    if args.outcomes:
        with open(args.outcomes, "w", encoding="utf-8") as f:
            f.write(outcomes_to_jsonl(outcomes) + "\n")
    print(json.dumps(result.to_dict(), indent=2) if args.json else format_table(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
