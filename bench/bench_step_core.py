"""Time the model-free part of one co-training step at a large pool.

    python bench/bench_step_core.py [--pool 100000] [--cards 32] [--k 4]

Verify 32 cards (parse, checks, novelty against a pool index of --pool tasks and
the rest of the step, oracle-free answer checks), grade 32 x 4 attempts with the
answer checker, compute both agents' rewards and record the step in SQLite in
one transaction. Prints seconds per stage; models are not involved.
"""

from __future__ import annotations

import argparse
import json
import random
import tempfile
import time
from pathlib import Path

from synco.grading.checker import AnswerChecker
from synco.grading.extract import extract_answer_with_method
from synco.core.pool import TaskPool
from synco.core.records import Attempt, TaskRecord
from synco.core.rewards import reasoner_reward, synthesizer_reward
from synco.grading.verifier import TaskVerifier, VerifierConfig

NAMES = ["Ava", "Ben", "Chloe", "Dev", "Eli", "Fay", "Gus", "Hana"]
ITEMS = ["apples", "marbles", "books", "coins", "stamps", "cards", "shells", "pens"]


def problem(rng: random.Random) -> tuple[str, int]:
    a, b, c = rng.randint(2, 999), rng.randint(2, 99), rng.randint(2, 9)
    who, what, other = rng.choice(NAMES), rng.choice(ITEMS), rng.choice(NAMES)
    text = (f"{who} has {a} {what}. {other} gives {who} {b} more and then {who} shares them equally "
            f"among {c} friends, keeping the remainder. How many {what} does each friend get?")
    return text, (a + b) // c


def step_problem(rng: random.Random, i: int) -> tuple[str, int]:
    """A problem unlike the pool's template (so the step's cards pass the novelty check)."""
    w, h, k = rng.randint(3, 60), rng.randint(3, 60), rng.randint(2, 9)
    shapes = ["rectangle", "garden", "poster", "field", "table top", "window", "carpet", "tile"]
    text = (f"Case {i}: a {shapes[i % len(shapes)]} measures {w} by {h} units. It is cut into {k} strips of equal "
            f"area; what is the area of one strip, rounded down to a whole number?")
    return text, (w * h) // k


def card_text(rng: random.Random, i: int = 0) -> tuple[str, str]:
    text, ans = step_problem(rng, i)
    card = {"teaching_intent": "division with remainder", "target_reasoning_style": "arithmetic",
            "expected_reasoner_weakness": "remainders", "difficulty_estimate": "medium", "problem": text,
            "solution": f"Total is computed first, then divided: the answer is \\boxed{{{ans}}}.",
            "final_answer": str(ans), "verification_notes": "checked", "novelty_notes": "new names"}
    return "Here is the card:\n```json\n" + json.dumps(card) + "\n```", str(ans)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pool", type=int, default=100_000)
    ap.add_argument("--cards", type=int, default=32)
    ap.add_argument("--k", type=int, default=4)
    args = ap.parse_args()
    rng = random.Random(0)
    checker = AnswerChecker()
    checker.match("1", "1")  # start the math-verify worker outside the timed region
    verifier = TaskVerifier(VerifierConfig(), checker=checker)
    t = time.perf_counter()
    verifier.load_pool((i, problem(rng)[0]) for i in range(args.pool))
    print(f"pool index of {args.pool} tasks built in {time.perf_counter() - t:.1f}s")

    raws, answers = zip(*(card_text(rng, i) for i in range(args.cards)))
    with tempfile.TemporaryDirectory() as d:
        pool = TaskPool(Path(d) / "pool.sqlite")
        t0 = time.perf_counter()
        checked = verifier.verify_batch(list(raws))
        t1 = time.perf_counter()
        rollouts: list[list[Attempt]] = []
        for (card, verdict), ans in zip(checked, answers):
            group = []
            for j in range(args.k):
                text = f"Let me think... so the answer is \\boxed{{{ans if j % 2 == 0 else int(ans) + 1}}}."
                ext = extract_answer_with_method(text)
                ok = ext.answer is not None and checker.match(ext.answer, verdict.reference or "")
                group.append(Attempt(text=text, answer=ext.answer, method=ext.method, correct=ok,
                                     reward=reasoner_reward(ok, ext.boxed)))
            rollouts.append(group)
        t2 = time.perf_counter()
        records = []
        for i, ((card, verdict), group) in enumerate(zip(checked, rollouts)):
            p = sum(r.correct for r in group) / len(group)
            sr = synthesizer_reward(verdict.valid, verdict.quality, verdict.reliability, p,
                                    reason_codes=verdict.reason_codes)
            records.append(TaskRecord(step=0, slot=i, raw=raws[i], card=card, verdict=verdict, rollouts=group,
                                      success_rate=p, synth_reward=sr))
        t3 = time.perf_counter()
        pool.record_step(0, records)
        t4 = time.perf_counter()
        pool.close()
    n_valid = sum(v.valid for _, v in checked)
    print(f"{args.cards} cards ({n_valid} valid) x {args.k} attempts, pool {args.pool}:")
    print(f"  verify   {1000 * (t1 - t0):8.1f} ms")
    print(f"  grade    {1000 * (t2 - t1):8.1f} ms  ({args.cards * args.k} answers)")
    print(f"  rewards  {1000 * (t3 - t2):8.1f} ms")
    print(f"  record   {1000 * (t4 - t3):8.1f} ms  (one SQLite transaction)")
    print(f"  total    {1000 * (t4 - t0):8.1f} ms")
    checker.close()


if __name__ == "__main__":
    main()
