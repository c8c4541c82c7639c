"""Throughput and latency of synco's answer checker against bare math-verify.

Run: ``python bench/bench_answers.py [--per-benchmark N] [--seed S]``.

Pairs come from the reference answers in /work/shared/benchmarks/*/test.jsonl:
each reference against (a) the same answer as a model might rewrite it
(thousands separators, ``$``, ``\\dfrac``, ``sqrt(..)``, ``pi``, dropped ``\\left``...)
and (b) a wrong answer (a nearby number, or another reference of the same
benchmark). It prints checks per second for ours and for bare math-verify
(``verify(parse(ref), parse(pred))``, and the same with ``$..$`` around both
strings), how often each accepts rewrites and wrong answers, and p50/p99
latency on adversarial inputs. Bare math-verify runs on the main thread with
its own signal-based timeouts, which is the only place it can.

Then it grades a labelled set of FULL model responses (tests/grading/data/answer_responses.jsonl:
hand-written response text, reference, expected verdict, form, and the benchmark's
``boxed`` / ``rel_tol`` options where a row needs them) by extraction + match, in
``mode="eval"`` and ``mode="reward"``, and prints agreement per form, false positives
(a wrong response graded right) and responses/s; bare math-verify reading the whole
response (``verify(parse(ref), parse(response))``) is shown for reference.
"""

from __future__ import annotations

import argparse
import json
import logging
import random
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from synco.grading.checker import AnswerChecker

BENCH_DIR = Path("/work/shared/benchmarks")
RESPONSES = Path(__file__).resolve().parent.parent / "tests" / "grading" / "data" / "answer_responses.jsonl"


@dataclass(frozen=True)
class Pair:
    ref: str
    pred: str
    should_match: bool  # by construction: rewrite True, wrong answer False
    source: str


def rewrite(answer: str, rng: random.Random) -> str:
    """The same answer as a model might write it."""
    s = answer.strip()
    if re.fullmatch(r"-?\d+", s):
        n = int(s)
        return rng.choice([f"{n:,}", f"${n}", f"{n}.0", f"\\boxed{{{n}}}", f"{n} units", f"{n:,}".replace(",", "{,}")])
    if re.fullmatch(r"-?\d*\.\d+", s):
        return rng.choice([s + "0", f"${s}$", s.lstrip("0") if not s.startswith("-") else s])
    out = s.replace("\\left", "").replace("\\right", "").replace("\\dfrac", "\\frac")
    whole = re.fullmatch(r"(-?)\\frac\{([^{}]+)\}\{([^{}]+)\}", out)
    if whole:  # a lone fraction: a/b as plain text
        out = f"{whole.group(1)}({whole.group(2)})/({whole.group(3)})"
    else:  # inside an expression keep it grouped; after a digit (mixed number) leave it alone
        out = re.sub(r"(?<![\d\s])\\frac\{([^{}]+)\}\{([^{}]+)\}", lambda m: f"(({m.group(1)})/({m.group(2)}))", out)
    out = re.sub(r"\\sqrt\{([^{}]+)\}", r"sqrt(\1)", out)
    out = out.replace("\\pi", " pi ").replace("^\\circ", "").replace("\\!", "")
    out = re.sub(r"\s*\\text\{\s*([^{}]*)\}", r" \1", out)
    return out if out != s else s.replace(",", ", ") if "," in s else f"${s}$"


def wrong(answer: str, others: list[str], rng: random.Random) -> str:
    """A wrong answer: a nearby number for numbers, another reference otherwise."""
    s = answer.strip()
    if re.fullmatch(r"-?\d+", s):
        n = int(s)
        return str(rng.choice([n + 1, n - 1, n * 10 if n else 10, -n if n else 1]))
    if re.fullmatch(r"-?\d*\.\d+", s):
        return rng.choice([s + "1", str(round(float(s) * 1.01 + 0.01, 6))])
    candidates = [o for o in others if o.strip() != s]
    return rng.choice(candidates) if candidates else s + "+1"


def load_pairs(per_benchmark: int, rng: random.Random, bench_dir: Path = BENCH_DIR) -> list[Pair]:
    pairs: list[Pair] = []
    for path in sorted(bench_dir.glob("*/test.jsonl")):
        answers = [json.loads(line)["answer"] for line in path.read_text().splitlines() if line.strip()]
        chosen = rng.sample(answers, min(per_benchmark, len(answers)))
        for a in chosen:
            pairs.append(Pair(a, rewrite(a, rng), True, path.parent.name))
            pairs.append(Pair(a, wrong(a, answers, rng), False, path.parent.name))
    return pairs


ADVERSARIAL = [
    "9^{9^{9^{9}}}", "10^{10^{10}}", "2^{2^{2^{2^{2^{2}}}}}", "{" * 3000 + "1" + "}" * 3000,
    "(" * 2000 + "1" + ")" * 2000, "\\sqrt{" * 300 + "2" + "}" * 300, "x" * 1_000_000, "9" * 5000,
    "__import__('os').system('true')", "\\frac{1}{0}", "1/0", "\\boxed{", "}}}{{{", "\u202e\U0001f600" * 50,
    "\\begin{pmatrix}" + "1&" * 500 + "1\\end{pmatrix}", "1e999999", "((x+1)^{100})^{100}",
    "\\int_0^\\infty e^{-x^2} dx", "\\sum_{n=1}^{\\infty} n^{-s}", "x^{x^{x^{x}}} = 2",
]


@dataclass(frozen=True)
class Response:
    """One labelled full model output: is ``response`` a right answer to a question whose reference is ``ref``?"""

    id: str
    form: str
    response: str
    ref: str
    equal: bool
    boxed: str = "last"
    rel_tol: float = 0.0


def load_responses(path: Path = RESPONSES) -> list[Response]:
    return [Response(**json.loads(line)) for line in path.read_text().splitlines() if line.strip()]


def grade_responses(checker: AnswerChecker, rows: list[Response], mode: str) -> tuple[list[bool], float]:
    """Each row's verdict by extraction + match in ``mode``, and the seconds all of them took."""
    t = time.perf_counter()
    verdicts = [
        checker.grade(r.response, r.ref, mode=mode, boxed=r.boxed, rel_tol=r.rel_tol)[1]  # type: ignore[arg-type]
        for r in rows
    ]
    return verdicts, time.perf_counter() - t


def report_responses(checker: AnswerChecker, rows: list[Response], bare: Callable[[str, str], bool]) -> None:
    """Agreement, false positives and speed of extraction + match on the labelled responses, per mode and form."""
    n_wrong = sum(not r.equal for r in rows)
    print(f"\nlabelled full responses: {len(rows)} ({len(rows) - n_wrong} right, {n_wrong} wrong) from {RESPONSES.name}")
    print("(hand-written alongside the eval-mode rules: a regression set for the forms it covers, not an unbiased estimate)")
    runs = {f"synco {mode}": grade_responses(checker, rows, mode) for mode in ("eval", "reward")}
    t = time.perf_counter()
    runs["bare math-verify (whole text)"] = ([bare(r.ref, r.response) for r in rows], time.perf_counter() - t)
    print(f"{'grader':30} {'agree':>7} {'false pos':>10} {'false neg':>10} {'resp/s':>8}")
    for name, (verdicts, seconds) in runs.items():
        agree = sum(v == r.equal for v, r in zip(verdicts, rows))
        fp = [r.id for v, r in zip(verdicts, rows) if v and not r.equal]
        fn = sum(not v and r.equal for v, r in zip(verdicts, rows))
        print(f"{name:30} {agree / len(rows):7.1%} {len(fp):10d} {fn:10d} {len(rows) / seconds:8.1f}"
              + (f"   false positives: {', '.join(fp)}" if fp else ""))
    forms = sorted({r.form for r in rows})
    print(f"\n{'agreement per form':24} {'rows':>6}  " + " ".join(f"{name.split(' (')[0]:>17}" for name in runs))
    for form in forms:
        idx = [i for i, r in enumerate(rows) if r.form == form]
        cells = [sum(runs[n][0][i] == rows[i].equal for i in idx) / len(idx) for n in runs]
        print(f"  {form:22} {len(idx):6d}  " + " ".join(f"{c:17.0%}" for c in cells))
    print("(reward mode reads only a box or an answer alone on its line, and the last box before any later line, by design)")


def time_calls(fn: Callable[[str, str], bool], pairs: list[tuple[str, str]]) -> tuple[list[bool], list[float]]:
    results, times = [], []
    for ref, pred in pairs:
        t = time.perf_counter()
        results.append(fn(ref, pred))
        times.append(time.perf_counter() - t)
    return results, times


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--per-benchmark", type=int, default=300, help="references sampled per benchmark")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--bench-dir", type=Path, default=BENCH_DIR, help="folder of <name>/test.jsonl files")
    parser.add_argument("--responses-only", action="store_true", help="only the labelled full-response set")
    args = parser.parse_args()
    logging.disable(logging.WARNING)

    from math_verify import parse, verify

    checker = AnswerChecker()
    t0 = time.perf_counter()
    checker.match("\\sqrt{2}", "sqrt(2)")  # start the worker; reported separately
    startup = time.perf_counter() - t0

    def bare(ref: str, pred: str) -> bool:
        return bool(verify(parse(ref, parsing_timeout=2), parse(pred, parsing_timeout=2), timeout_seconds=2))

    rng = random.Random(args.seed)
    pairs = [] if args.responses_only else load_pairs(args.per_benchmark, rng, args.bench_dir)
    if not pairs:
        if not args.responses_only:
            print(f"no benchmark answers under {args.bench_dir}; answer pairs skipped")
        report_responses(checker, load_responses(), bare)
        checker.close()
        return
    checks = [(p.ref, p.pred) for p in pairs]

    def bare_wrapped(ref: str, pred: str) -> bool:
        return bare("$" + ref + "$", "$" + pred + "$")

    def ours(ref: str, pred: str) -> bool:
        return checker.match(pred, ref)

    runs = {}
    for name, fn in [("synco AnswerChecker", ours), ("bare math-verify", bare), ("bare math-verify ($..$)", bare_wrapped)]:
        before = checker.stats()
        runs[name] = time_calls(fn, checks)
        if fn is ours:
            fast_share = (checker.stats().n_fast_path - before.n_fast_path) / len(checks)

    print(f"benchmark pairs: {len(checks)} ({len(checks) // 2} references from {args.bench_dir}, seed {args.seed})")
    print(f"worker start-up (first call): {startup:.2f} s; fast path decided {fast_share:.1%} of our checks")
    print("'rewrites ok' = share of (answer, rewritten answer) pairs accepted (higher is better);")
    print("'wrong ok' = share of (answer, wrong answer) pairs accepted (lower is better).")
    numeric = re.compile(r"-?[\d.,]+(?:e[-+]?\d+)?")
    groups = {
        "all": [True] * len(pairs),
        "numeric refs": [bool(numeric.fullmatch(p.ref.strip())) for p in pairs],
        "LaTeX/symbolic refs": [not numeric.fullmatch(p.ref.strip()) for p in pairs],
    }
    rates: dict[tuple[str, str], float] = {}
    for group, mask in groups.items():
        sel = [i for i, m in enumerate(mask) if m]
        print(f"\n[{group}: {len(sel)} pairs]")
        print(f"{'checker':26} {'checks/s':>10} {'rewrites ok':>12} {'wrong ok':>9} {'p50 ms':>8} {'p99 ms':>8}")
        for name, (results, times) in runs.items():
            t = [times[i] for i in sel]
            good = [results[i] for i in sel if pairs[i].should_match]
            bad = [results[i] for i in sel if not pairs[i].should_match]
            rates[(group, name)] = len(sel) / sum(t)
            print(f"{name:26} {len(sel) / sum(t):10.1f} {sum(good) / max(len(good), 1):12.1%} "
                  f"{sum(bad) / max(len(bad), 1):9.1%} {pct(t, 0.5) * 1e3:8.2f} {pct(t, 0.99) * 1e3:8.2f}")
        print(f"speed ratio ours / bare: {rates[(group, 'synco AnswerChecker')] / rates[(group, 'bare math-verify')]:.1f}x; "
              f"ours / bare ($..$): {rates[(group, 'synco AnswerChecker')] / rates[(group, 'bare math-verify ($..$)')]:.1f}x")

    adversarial = [("1", a) for a in ADVERSARIAL]
    print(f"\nadversarial inputs ({len(ADVERSARIAL)} answers vs reference '1'; ours timeout {checker.timeout:g} s, "
          "bare math-verify with 2 s parse + 2 s verify alarms):")
    print(f"{'checker':26} {'p50 ms':>9} {'p99 ms':>9} {'max ms':>9} {'any True':>9}")
    for name, fn in [("synco AnswerChecker", ours), ("bare math-verify ($..$)", bare_wrapped)]:
        results, times = time_calls(fn, adversarial)
        print(f"{name:26} {pct(times, 0.5) * 1e3:9.2f} {pct(times, 0.99) * 1e3:9.2f} {max(times) * 1e3:9.2f} "
              f"{str(any(results)):>9}")
    report_responses(checker, load_responses(), bare)
    s = checker.stats()
    print(f"\nchecker stats: {s}")
    checker.close()


if __name__ == "__main__":
    main()
