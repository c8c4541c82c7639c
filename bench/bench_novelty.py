"""Speed of the near-duplicate index: add and lookup time at 1k / 10k / 100k entries.

Two synthetic pools, both with random names, items and numbers so entries are
distinct: ``templated`` (a dozen single-sentence templates: every entry shares
most of its text with thousands of others, the hard case for LSH, like a
mode-collapsed Synthesizer) and ``composed`` (two context sentences and a
question drawn from separate lists: a more varied pool). Lookups mix fresh problems
(mostly novel) with stored ones (exact duplicates). Times are wall-clock per
call (mean, p50, p99, max) plus the mean CPU time of this thread, which is
the better figure on a shared, busy machine. Up to 10k entries it also
checks the index against a linear scan (recall of near-duplicates, error of
``max_similarity``).

    .venv/bin/python bench/bench_novelty.py [--sizes 1000 10000 100000] [--queries 1000]
"""

from __future__ import annotations

import argparse
import random
import time

import numpy as np

from synco.grading.novelty import NoveltyIndex, jaccard, normalize_text, shingle_hashes

NAMES = ["Ava", "Ben", "Chloe", "Dmitri", "Elena", "Farid", "Grace", "Hiro", "Ines", "Jamal", "Kofi", "Lena",
         "Mateo", "Nadia", "Omar", "Priya", "Quinn", "Rosa", "Sven", "Tariq", "Uma", "Viktor", "Wen", "Yara"]
ITEMS = ["apples", "marbles", "stickers", "books", "coins", "pencils", "cookies", "stamps", "shells", "cards",
         "tickets", "beads", "plants", "bottles", "puzzles", "ribbons"]
TEMPLATES = [
    "{a} has {x} {i}. {b} gives {a} {y} more {i}, and then {a} gives away {z}. How many {i} does {a} have now?",
    "A store sells {i} at ${x} each. {a} buys {y} of them and pays with a ${z} bill. How much change does {a} get?",
    "{a} reads {x} pages of a book every day for {y} days, then {z} pages on the last day. How many pages in total?",
    "Find the remainder when {x}^{y} is divided by {z}.",
    "A rectangle has length {x} and width {y}. A square has the same perimeter. What is the area of the square minus {z}?",
    "How many positive integers less than {x}{y} are divisible by {z} but not by {y}?",
    "{a} and {b} share {x} {i} in the ratio {y}:{z}. How many {i} does {b} get?",
    "The sum of {y} consecutive integers is {x}{z}. What is the largest of these integers?",
    "A train travels {x} km in {y} hours, then {z} km in 2 hours. What is its average speed in km per hour?",
    "Solve for n: {x}n + {y} = {z}n - {x}{y}.",
    "In a class of {x} students, {y} play chess and {z} play go; {a} says 5 play both. How many play neither?",
    "{a} saves ${x} a week. After {y} weeks {a} spends ${z} on {i}. How much money does {a} have left?",
]


CONTEXTS = [
    "{a} collects {i} and already owns {x} of them.",
    "Every morning {a} walks {x} metres to the bus stop, which takes {y} minutes.",
    "A box holds {x} {i}, and a crate holds {y} boxes.",
    "{a} is {y} years older than {b}, who was born in {x}.",
    "The price of one ticket rose from ${y} to ${x} last year.",
    "A tank is filled at {x} litres per minute and drained at {y} litres per minute.",
    "In a game, a red card is worth {x} points and a blue card {y} points.",
    "{a} plants {x} rows of trees with {y} trees in each row.",
    "A polygon has {y} sides and a perimeter of {x} cm.",
    "A bag contains {x} red and {y} green marbles.",
    "{a} types {x} words in {y} minutes.",
    "A recipe needs {y} eggs for every {x} grams of flour.",
    "The sequence starts {y}, {x}, and each term is the sum of the previous two.",
    "{a} lends {b} ${x} at {y} percent simple interest per year.",
    "A cyclist rides {x} km uphill at {y} km per hour.",
    "There are {x} seats in a hall arranged in {y} equal rows.",
]
QUESTIONS = [
    "How many {i} does {a} have after giving away {z}?",
    "What is the total after {z} more are added?",
    "How long does it take in minutes if the rate doubles and {z} are removed?",
    "What is the remainder when the total is divided by {z}?",
    "How much money is left after spending ${z}?",
    "What is the probability that two drawn at random match, if {z} are added first?",
    "Find the smallest number of steps needed to reach {z}.",
    "What is the average per day over {z} days?",
    "How many more are needed to reach {z}?",
    "What percentage of {z} is this?",
    "In how many ways can {z} of them be chosen?",
    "What is the value after {z} years?",
]


def fill(template: str, rng: random.Random) -> str:
    return template.format(a=rng.choice(NAMES), b=rng.choice(NAMES), i=rng.choice(ITEMS),
                           x=rng.randint(2, 9999), y=rng.randint(2, 999), z=rng.randint(2, 9999))


def make_problem(rng: random.Random) -> str:
    """Homogeneous pool: one of a dozen word-problem templates with random slots."""
    return fill(rng.choice(TEMPLATES), rng)


def make_composed(rng: random.Random) -> str:
    """Varied pool: two context sentences and a question, each from its own list, random slots."""
    first, second = rng.sample(CONTEXTS, 2)
    return " ".join(fill(t, rng) for t in (first, second, rng.choice(QUESTIONS)))


GENERATORS = {"templated": make_problem, "composed": make_composed}


def percentile_ms(times: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(times) * 1e3, q))


def mutate(rng: random.Random, text: str) -> str:
    """A near-duplicate: one word of the problem replaced (a number or a name, say)."""
    words = text.split()
    words[rng.randrange(len(words))] = rng.choice(NAMES + ITEMS + [str(rng.randint(2, 999))])
    return " ".join(words)


def accuracy(index: NoveltyIndex, problems: list[str], queries: list[str]) -> dict[str, tuple[int, int]]:
    """Against a linear scan: per band of true max Jaccard, (queries whose max_similarity is within 0.05, queries)."""
    pool = [shingle_hashes(normalize_text(p), index.ngram) for p in problems]
    bands = {">=0.8": (0.8, 1.01), "0.6-0.8": (0.6, 0.8), "0.4-0.6": (0.4, 0.6)}
    out = {name: (0, 0) for name in bands}
    for text in queries:
        sh = shingle_hashes(normalize_text(text), index.ngram)
        truth = max(jaccard(sh, other) for other in pool)
        for name, (lo, hi) in bands.items():
            if lo <= truth < hi:
                ok, n = out[name]
                out[name] = (ok + (abs(index.max_similarity(text) - truth) <= 0.05), n + 1)
    return out


def run(kind: str, size: int, n_queries: int, seed: int, check: bool) -> None:
    rng = random.Random(seed)
    make = GENERATORS[kind]
    problems = [make(rng) for _ in range(size)]
    index = NoveltyIndex()
    add_times: list[float] = []
    cpu0 = time.thread_time()
    for key, text in enumerate(problems):
        t = time.perf_counter()
        index.add(key, text)
        add_times.append(time.perf_counter() - t)
    add_cpu = (time.thread_time() - cpu0) / size
    queries = [make(rng) if j % 2 else rng.choice(problems) for j in range(n_queries)]
    q_times: list[float] = []
    hits = 0
    cpu0 = time.thread_time()
    for text in queries:
        t = time.perf_counter()
        hits += index.query(text) is not None
        q_times.append(time.perf_counter() - t)
    q_cpu = (time.thread_time() - cpu0) / n_queries
    print(f"{kind:>9s} {size:>7d} entries | add mean {np.mean(add_times) * 1e3:5.3f} ms (cpu {add_cpu * 1e3:5.3f})"
          f"  p99 {percentile_ms(add_times, 99):5.2f}  max {max(add_times) * 1e3:5.0f} ms  total {sum(add_times):5.1f} s"
          f" | query mean {np.mean(q_times) * 1e3:5.3f} ms (cpu {q_cpu * 1e3:5.3f})  p50 {percentile_ms(q_times, 50):5.3f}"
          f"  p99 {percentile_ms(q_times, 99):5.2f} ms | dup hits {hits}/{n_queries}")
    if check:
        mixed = [mutate(rng, rng.choice(problems)) for _ in range(150)] + [make(rng) for _ in range(150)]
        acc = accuracy(index, problems, mixed)
        shown = ", ".join(f"true sim {name}: {ok}/{n}" for name, (ok, n) in acc.items())
        print(f"{'':>17s}  linear-scan check, max_similarity within 0.05 of the truth: {shown}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1_000, 10_000, 100_000])
    parser.add_argument("--queries", type=int, default=1_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--check-max", type=int, default=10_000, help="linear-scan accuracy check up to this size")
    parser.add_argument("--kinds", nargs="+", default=list(GENERATORS), choices=list(GENERATORS))
    args = parser.parse_args()
    for kind in args.kinds:
        for size in args.sizes:
            run(kind, size, args.queries, args.seed, check=size <= args.check_max)


if __name__ == "__main__":
    main()
