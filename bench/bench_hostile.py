"""Worst-case time of answer extraction, checking and card verification on hostile model output.

Run: ``python bench/bench_hostile.py [--size BYTES] [--repeats N]``.

Builds a corpus of hostile responses (default 1 MB each): the patterns a user
reported in issue 11 (megabytes of ``\\boxed{``, ``answer`` + spaces, ``answer:``
lines of ``$$``) plus nested and unclosed braces, huge numbers, long digit runs,
many ``$`` signs, many "answer:" markers, many boxes, nested wrappers,
``<think>`` tags and backslashes. For each pattern it prints the worst time over
its variants and repeats of

* ``extract_answer`` on the response;
* extract + ``AnswerChecker.match`` against ``7`` (the per-attempt path), on the
  response as is, and again with a pathological ``\\boxed{9^{9^{9^{9}}}}`` appended,
  which makes math-verify run into the checker's timeout (the bound at work);
* ``TaskVerifier.verify_batch`` on one card holding the pattern in its solution,
  problem or final answer (the pattern shrunk so the card's JSON fits the
  parser's ``MAX_INPUT_CHARS``), without an oracle, as in the math domain; and
  again with the pathological box appended to the solution.

and the totals. The checker's worker start-up is timed separately.
"""

from __future__ import annotations

import argparse
import json
import logging
import random
import time
from dataclasses import dataclass
from typing import Callable

from synco.grading import cards
from synco.grading.checker import AnswerChecker
from synco.grading.extract import extract_answer, extract_answer_with_method, MAX_SCAN_CHARS
from synco.core.records import CARD_FIELDS
from synco.grading.verifier import TaskVerifier, VerifierConfig

PATHOLOGICAL_BOX = " \\boxed{9^{9^{9^{9}}}}"
REFERENCE = "7"


def _repeat(unit: str, size: int) -> str:
    """``unit`` repeated to ``size`` characters."""
    return (unit * (size // len(unit) + 1))[:size]


def _mixed(size: int) -> str:
    """Random tokens that matter to the extractor and the fast path, seeded."""
    rng = random.Random(0)
    tokens = ["\\boxed{", "{", "}", "$", "$$", "answer:", "Final answer", " ", "\n", "\\(", "\\)", "9", "_", "'", "\\"]
    out: list[str] = []
    n = 0
    while n < size:
        tok = rng.choice(tokens)
        out.append(tok)
        n += len(tok)
    return "".join(out)[:size]


PATTERNS: dict[str, Callable[[int], str]] = {
    "boxed_open (reported)": lambda n: _repeat("\\boxed{", n),
    "answer+spaces (reported)": lambda n: "answer" + " " * (n - 7) + "x",
    "answer:$$ lines (reported)": lambda n: _repeat("answer:\n$$\n", n),
    "nested braces": lambda n: "\\boxed{" + "{" * (n // 2 - 4) + "}" * (n // 2 - 4) + "}",
    "unclosed braces": lambda n: "{" * n,
    "nested boxes": lambda n: "\\boxed{" * (n // 8) + "5" + "}" * (n // 8),
    "huge number": lambda n: "The answer is " + "9" * (n - 14),
    "huge boxed number": lambda n: "\\boxed{" + "9" * (n - 8) + "}",
    "long digit runs": lambda n: _repeat("9" * 999 + " ", n),
    "many $ signs": lambda n: "answer: " + "$" * (n - 8),
    "many answer: markers": lambda n: _repeat("answer: ", n),
    "many answer: lines": lambda n: _repeat("Final answer:\n", n),
    "many distinct boxes": lambda n: "".join(f"\\boxed{{{i}}}" for i in range(n // 10))[:n],
    "nested \\( wrappers": lambda n: "answer: " + "\\(" * (n // 4 - 2) + "5" + "\\)" * (n // 4 - 2),
    "think tags": lambda n: _repeat("<think></think>", n),
    "backslashes": lambda n: "\\" * n,
    "mixed tokens": _mixed,
}


@dataclass(frozen=True)
class Row:
    name: str
    extract_s: float
    method: str
    graded_s: float
    graded_pathological_s: float
    card_s: float
    card_pathological_s: float


def _worst(fn: Callable[[], object], repeats: int) -> float:
    """Slowest of ``repeats`` calls, in seconds."""
    worst = 0.0
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        worst = max(worst, time.perf_counter() - start)
    return worst


def _card(field: str, text: str) -> str:
    """A card (JSON) with ``text`` in ``field`` and ordinary values elsewhere."""
    data = {name: f"the {name.replace('_', ' ')}" for name in CARD_FIELDS}
    data.update(problem="A baker has 3 trays of 4 muffins and sells 5. How many are left?",
                solution="3 * 4 - 5 = 7, so \\boxed{7}", final_answer=REFERENCE)
    data[field] = text
    return json.dumps(data)


def _card_sized(make: Callable[[int], str], field: str, suffix: str = "") -> str:
    """The largest card holding ``make(n) + suffix`` in ``field`` that the card parser accepts."""
    n = cards.MAX_INPUT_CHARS
    while n > 100:
        raw = _card(field, make(n) + suffix)
        if len(raw) <= cards.MAX_INPUT_CHARS:
            return raw
        n = int(n * 0.9)
    return _card(field, make(100) + suffix)


def _verify_s(verifier: TaskVerifier, raw: str) -> float:
    """Seconds ``verify_batch`` takes on one card."""
    start = time.perf_counter()
    verifier.verify_batch([raw])
    return time.perf_counter() - start


def measure(name: str, make: Callable[[int], str], size: int, repeats: int, checker: AnswerChecker,
            verifier: TaskVerifier) -> Row:
    text = make(size)
    extract_s = _worst(lambda: extract_answer(text), repeats)
    method = extract_answer_with_method(text).method

    def graded(response: str) -> bool:
        answer = extract_answer(response)
        return answer is not None and checker.match(answer, REFERENCE)

    graded_s = _worst(lambda: graded(text), repeats)
    graded_pathological_s = _worst(lambda: graded(text + PATHOLOGICAL_BOX), 1)
    card_s = max(_verify_s(verifier, _card_sized(make, field)) for field in ("solution", "problem", "final_answer"))
    card_pathological_s = _verify_s(verifier, _card_sized(make, "solution", PATHOLOGICAL_BOX))
    return Row(name, extract_s, method, graded_s, graded_pathological_s, card_s, card_pathological_s)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", type=int, default=1_000_000, help="characters per hostile response")
    parser.add_argument("--repeats", type=int, default=3, help="runs per measurement (the worst is shown)")
    args = parser.parse_args()
    logging.disable(logging.WARNING)

    checker = AnswerChecker()
    start = time.perf_counter()
    checker.match("\\sqrt{2}", "sqrt(2)")  # start the worker; reported separately
    startup = time.perf_counter() - start
    verifier = TaskVerifier(VerifierConfig(), checker=checker)

    print(f"hostile corpus: {len(PATTERNS)} patterns of {args.size:,} characters; worst of {args.repeats} runs")
    print(f"checker timeout {checker.timeout:g} s, extraction reads the last {MAX_SCAN_CHARS:,} characters, "
          f"card_timeout {verifier.config.card_timeout:g} s, card parser cap {cards.MAX_INPUT_CHARS:,} characters")
    print(f"worker start-up (first call, not counted below): {startup:.2f} s")
    print("extract+match: extract_answer, then match against '7' when an answer was found; card: verify_batch on one "
          "card, worst of the pattern in solution / problem / final_answer; '+9^9^9^9': the same with "
          f"'{PATHOLOGICAL_BOX.strip()}' appended (to the solution)\n")
    header = ("extract ms", "method", "extract+match ms", "+9^9^9^9 ms", "card ms", "+9^9^9^9 ms")
    print(f"{'pattern':28} {header[0]:>10} {header[1]:>17} {header[2]:>16} {header[3]:>11} {header[4]:>8} {header[5]:>11}")
    rows = []
    for name, make in PATTERNS.items():
        r = measure(name, make, args.size, args.repeats, checker, verifier)
        rows.append(r)
        print(f"{r.name:28} {r.extract_s * 1e3:10.1f} {r.method:>17} {r.graded_s * 1e3:16.1f} "
              f"{r.graded_pathological_s * 1e3:11.1f} {r.card_s * 1e3:8.1f} {r.card_pathological_s * 1e3:11.1f}")
    for label, agg in (("total (sum of worst cases)", sum), ("max", max)):
        print(f"{label:28} {agg(r.extract_s for r in rows) * 1e3:10.1f} {'':>17} {agg(r.graded_s for r in rows) * 1e3:16.1f} "
              f"{agg(r.graded_pathological_s for r in rows) * 1e3:11.1f} {agg(r.card_s for r in rows) * 1e3:8.1f} "
              f"{agg(r.card_pathological_s for r in rows) * 1e3:11.1f}")
    print(f"\nchecker stats: {checker.stats()}")
    checker.close()


if __name__ == "__main__":
    main()
