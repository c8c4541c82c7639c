"""Grading agreement with math-verify on hand-labelled benchmark-style outputs (issue 24).

Run: ``python bench/bench_grading.py [--cases PATH] [--show disagreements|errors|all]``.

Each row of tests/grading/data/grading_cases.jsonl is a gold answer as a benchmark writes it, a
model output in the style of MATH-500 (LaTeX, boxes, display maths), Minerva (units,
scientific notation), AIME (integers 0-999) or GSM8K (``#### 42``, "The answer is 42."),
and the verdict a careful grader gives it (``label``), grouped by the class of form it
tests (unboxed LaTeX, number formats, display maths, relations, decimals in compound
answers, sets against tuples, several boxes, equations, decorated numbers, ...).

Graders, each in one run on the same rows:

* ``synco``: ``AnswerChecker.grade(response, gold, mode="eval")``, what ``synco eval`` does;
* ``synco (gold extracted)``: ``answers_match(extract_answer(response, mode="eval"),
  extract_answer(gold, mode="eval"))``, the two-step path a user may write;
* ``math-verify``: ``verify(parse(gold), parse(response))`` with its default extraction
  (the gold wrapped in ``$..$`` unless it has its own delimiters), on the main thread.

It prints synco's agreement with math-verify's verdicts (all rows, and the rows where
math-verify agrees with the label), each grader's false accepts (a wrong output graded
right: it inflates a published number) and false rejects against the labels, per class,
and checks per second of synco and math-verify with their ratio.
"""

from __future__ import annotations

import argparse
import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from synco.grading.checker import AnswerChecker
from synco.grading.extract import extract_answer

CASES = Path(__file__).resolve().parent.parent / "tests" / "grading" / "data" / "grading_cases.jsonl"


@dataclass(frozen=True)
class Case:
    """One labelled output: is ``response`` a right answer to a question whose gold answer is ``gold``?"""

    id: str
    cls: str
    style: str
    gold: str
    response: str
    label: bool


def load_cases(path: Path = CASES) -> list[Case]:
    return [Case(**json.loads(line)) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


@dataclass(frozen=True)
class Run:
    """One grader's verdicts on every case and the seconds they took."""

    name: str
    verdicts: list[bool]
    seconds: float

    def false_accepts(self, cases: list[Case]) -> list[str]:
        return [c.id for c, v in zip(cases, self.verdicts) if v and not c.label]

    def false_rejects(self, cases: list[Case]) -> list[str]:
        return [c.id for c, v in zip(cases, self.verdicts) if c.label and not v]


def timed(name: str, grade: Callable[[Case], bool], cases: list[Case]) -> Run:
    start = time.perf_counter()
    verdicts = [grade(c) for c in cases]
    return Run(name, verdicts, time.perf_counter() - start)


def mv_gold(gold: str) -> str:
    """The gold answer as math-verify users hand it over: in ``$..$`` unless it has delimiters or a box."""
    return gold if "$" in gold or "\\boxed" in gold or "\\(" in gold or "\\[" in gold else f"${gold}$"


def agreement(a: list[bool], b: list[bool], rows: list[int]) -> float:
    return sum(a[i] == b[i] for i in rows) / max(len(rows), 1)


def report(cases: list[Case], synco: Run, synco_two_step: Run, mv: Run, show: str) -> None:
    labels = [c.label for c in cases]
    n = len(cases)
    everything = list(range(n))
    mv_right = [i for i in everything if mv.verdicts[i] == labels[i]]
    print(f"cases: {n} ({sum(labels)} right, {n - sum(labels)} wrong) from {CASES.name}, "
          f"{len({c.cls for c in cases})} classes; labels by a careful human grader")
    print(f"synco agreement with the expected verdicts (hand labels, as math-verify's regression rows carry): "
          f"{agreement(synco.verdicts, labels, everything):.1%}")
    print(f"synco agreement with math-verify's computed verdicts: {agreement(synco.verdicts, mv.verdicts, everything):.1%} "
          f"of all cases; {agreement(synco.verdicts, mv.verdicts, mv_right):.1%} of the {len(mv_right)} cases "
          "math-verify grades right (where they differ, math-verify is off the label)")
    print(f"\n{'grader':26} {'agree w/ labels':>15} {'false accepts':>14} {'false rejects':>14} {'checks/s':>9}")
    for run in (synco, synco_two_step, mv):
        agree = agreement(run.verdicts, labels, everything)
        print(f"{run.name:26} {agree:15.1%} {len(run.false_accepts(cases)):14d} {len(run.false_rejects(cases)):14d} "
              f"{n / run.seconds:9.1f}")
    print(f"speed ratio synco / math-verify: {mv.seconds / synco.seconds:.1f}x "
          f"(synco {synco.seconds * 1e3 / n:.2f} ms per check, math-verify {mv.seconds * 1e3 / n:.2f} ms)")
    fa = synco.false_accepts(cases)
    print(f"synco false accepts: {', '.join(fa) if fa else 'none'}")
    print(f"\n{'class':22} {'cases':>5} {'synco~mv':>9} {'synco ok':>9} {'mv ok':>7} {'synco FA':>9} {'mv FA':>6}")
    for cls in dict.fromkeys(c.cls for c in cases):
        rows = [i for i, c in enumerate(cases) if c.cls == cls]
        fa_s = sum(synco.verdicts[i] and not labels[i] for i in rows)
        fa_m = sum(mv.verdicts[i] and not labels[i] for i in rows)
        print(f"{cls:22} {len(rows):5d} {agreement(synco.verdicts, mv.verdicts, rows):9.0%} "
              f"{agreement(synco.verdicts, labels, rows):9.0%} {agreement(mv.verdicts, labels, rows):7.0%} "
              f"{fa_s:9d} {fa_m:6d}")
    if show == "none":
        return
    print()
    for i, c in enumerate(cases):
        s, t, m = synco.verdicts[i], synco_two_step.verdicts[i], mv.verdicts[i]
        wrong = s != c.label or t != c.label
        wanted = show == "all" or (show == "disagreements" and s != m) or (show == "errors" and wrong)
        if wanted:
            pred = extract_answer(c.response, mode="eval")
            print(f"{c.id:24} label={c.label!s:5} synco={s!s:5} two-step={t!s:5} mv={m!s:5} "
                  f"gold={c.gold!r} extracted={pred!r} response={c.response[-80:]!r}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", type=Path, default=CASES)
    parser.add_argument("--show", choices=["none", "disagreements", "errors", "all"], default="none",
                        help="list rows where synco and math-verify disagree, where synco is wrong, or every row")
    args = parser.parse_args()
    logging.disable(logging.WARNING)
    cases = load_cases(args.cases)

    from math_verify import parse, verify

    checker = AnswerChecker(timeout=10.0)
    checker.match("\\sqrt{2}", "sqrt(2)")  # start the worker before timing

    def synco(c: Case) -> bool:
        return checker.grade(c.response, c.gold, mode="eval")[1]

    def synco_two_step(c: Case) -> bool:
        pred, gold = extract_answer(c.response, mode="eval"), extract_answer(c.gold, mode="eval")
        return pred is not None and gold is not None and checker.match(pred, gold)

    def math_verify(c: Case) -> bool:
        return bool(verify(parse(mv_gold(c.gold)), parse(c.response)))

    runs = [timed("synco (eval mode)", synco, cases), timed("synco (gold extracted)", synco_two_step, cases),
            timed("math-verify", math_verify, cases)]
    report(cases, *runs, show=args.show)
    checker.close()


if __name__ == "__main__":
    main()
