"""The ``math`` domain: free-form mathematics tasks for real instruction-tuned LMs.

There is no exact oracle (``has_oracle`` is False): a card's own
``final_answer`` is the reference, checked for consistency with its solution by
the verifier and, after solving, by consensus (the Reasoner's K attempts, or a
separate frozen checker model; see ``RunConfig.consensus_solver``).

Prompts are the editable templates in ``synco/prompts/`` (a user folder given
as ``prompts_dir`` or ``$SYNCO_PROMPTS_DIR`` overrides them):

* ``synthesizer_system.txt``: the Synthesizer's role and what makes a good task
  (well-posed, one verifiable answer, non-trivial, new, aimed at the reported
  weaknesses, likely to give mixed success across attempts);
* ``synthesizer.txt``: the user message, with ``{{report}}`` (the capability
  report, ``CapabilityReport.render``), ``{{rejections}}`` (the report's top
  rejection reasons, each with what to do about it), ``{{recent_tasks}}`` (the
  latest valid problems), ``{{examples}}`` (``n_examples`` few-shot cards,
  :func:`example_card`) and ``{{schema}}`` (the nine card fields with a hint
  each, in ``WRITE_ORDER``). ``{{report}}`` is required, and ``{{examples}}``
  or ``{{schema}}`` (the shipped template shows the examples); the rest may be
  deleted from an edited template;
* ``reasoner.txt`` / ``reasoner_system.txt``: the Reasoner sees only the
  problem and answers in ``\\boxed{}`` (the same prompt ``synco eval`` uses). An
  empty system template sends no system message, so the chat template's own
  default (or ``PolicyConfig.system_prompt``) applies.

Templates are filled by ``synco.core.prompts.render`` (one literal pass), so LaTeX
braces and ``{{...}}`` inside a report or a problem come through unchanged.

Few-shot examples are problems of the built-in generator below (exact
answers; never a held-out problem), drawn with a seed made of the report's
step and the Designer's target cell (its topic when it has one), so a rebuilt
prompt is the same prompt. A card whose problem is one of the examples shown
for the current report (normalised exact match) with an answer other than
the example's exact one is rejected as ``copied_example``: a small model
copies them, mostly with a wrong answer (a copy with the right answer is a
correct card, and a repeat of it is a near-duplicate of the pool).
``card_template`` is the card layout ``synth_decoding: card`` fills in
(``synco.rollout.card_decoding``): the same layout as the examples.

Card factors (what the capability report groups by) are computed by this
module, never taken from the card's own claims: ``topic`` from a keyword
classifier over the problem (and, with less weight, the card's
``teaching_intent``), and ``difficulty`` as the card's ``difficulty_estimate``
read into ``easy`` / ``medium`` / ``hard`` / ``unknown``.

A built-in generator writes word problems with exact answers (integer and
``Fraction`` arithmetic, no evaluation of any text) in nine topics. It is the
``static`` baseline's corpus and the source of the held-out set: a stable
hash bucket (10 %) of generated problems is reserved; ``static_cards`` never
returns one, the held-out bank is drawn only from it, and ``reject_reason``
refuses a card whose problem is (after whitespace and case normalisation) one
of the bank's problems. Problems of one family differ only in numbers and
names, so the verifier's default novelty threshold (0.8) rejects many static
cards as near-duplicates; run the static baseline with
``verifier.novelty_threshold=0.95``.
"""

from __future__ import annotations

import hashlib
import json
import math
import random
import re
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

from synco.domains.card_template import ANSWER_CHARSET, CardSlot, CardTemplate
from synco.domains.base import DomainNeeds, HeldoutItem
from synco.evosyn.space import Cell, FactorDef
from synco.grading.novelty import normalize_text
from synco.core.prompts import PromptError, load_prompt, placeholders, render
from synco.core.records import CARD_FIELDS, ProblemPayload, TaskCard

# ----------------------------------------------------------------- topics

TOPICS: tuple[str, ...] = (
    "probability",
    "combinatorics",
    "number_theory",
    "sequences",
    "geometry",
    "algebra",
    "fractions_percent",
    "rates",
    "arithmetic",
)
"""Topic labels, in tie-break order (the more specific first). ``other`` is used when nothing matches."""

_TOPIC_PATTERNS: dict[str, tuple[str, ...]] = {
    "probability": (r"probabilit", r"\bchance", r"at random", r"\brandomly\b", r"\bdice\b", r"\bdie\b", r"\bcoins?\b",
                    r"\bodds\b", r"expected value", r"\bfair\b"),
    "combinatorics": (r"how many ways", r"in how many", r"arrangements?", r"permutations?", r"combinations?",
                      r"\bchoose\b", r"\bchosen\b", r"committee", r"\bno digit is repeated", r"\boutcomes\b",
                      r"\bselect(?:ed|ion)?\b", r"\belects?\b"),
    "number_theory": (r"\bprimes?\b", r"divisible", r"divisors?", r"\bfactors?\b", r"remainder", r"greatest common",
                      r"\bgcd\b", r"least common multiple", r"\blcm\b", r"\bmod(?:ulo)?\b", r"\bintegers?\b",
                      r"sum of (?:the |all )?digits", r"\bmultiples?\b", r"number theory"),
    "sequences": (r"\bsequences?\b", r"\bseries\b", r"progression", r"\bterms?\b", r"common difference",
                  r"common ratio", r"\bnth\b", r"first \d+ terms"),
    "geometry": (r"triangle", r"circle", r"radius", r"diameter", r"\barea\b", r"perimeter", r"\bangles?\b",
                 r"rectangle", r"polygon", r"\bvolume\b", r"\bcube\b", r"sphere", r"cylinder", r"hypotenuse",
                 r"\blegs?\b", r"surface area", r"\bsquare (?:centimet|metre|meter|units?|feet|inch)", r"geometr",
                 r"\bbox\b", r"\bcm\b"),
    "algebra": (r"solve for", r"equations?", r"\bsatisf(?:y|ies)\b", r"\bx\s*[-+=^]", r"[-+=]\s*\d*\s*x\b",
                r"polynomial", r"quadratic", r"\broots?\b", r"\bf\(x\)", r"inequalit", r"\bvariables?\b",
                r"\bunknown\b", r"\bxy\b", r"algebra", r"\bvalue of [a-z]\b"),
    "fractions_percent": (r"percent", r"%", r"\bfractions?\b", r"\bratio\b", r"proportion", r"discount",
                          r"\binterest\b", r"\bdecimals?\b", r"\d+\s*/\s*\d+ of", r"\bhalf\b", r"\bthird\b",
                          r"\bquarter\b", r"sales tax"),
    "rates": (r"\bspeed\b", r"km/h", r"\bmph\b", r"per hour", r"per minute", r"\brate\b", r"working together",
              r"\btogether\b", r"travels?", r"\bhours?\b", r"\bminutes?\b", r"\btank\b", r"\btap\b", r"\bdrain\b",
              r"average speed"),
    "arithmetic": (r"\btotal\b", r"\bchange\b", r"\bcosts?\b", r"\bprice\b", r"\bdollars?\b", r"\bcents?\b",
                   r"\beach\b", r"how many", r"how much", r"\bsum\b", r"\bdifference\b", r"\bproduct\b",
                   r"\bleft\b", r"\bboxes\b", r"arithmetic", r"\d\s*[-+*×÷]\s*\d", r"\b(?:compute|calculate|evaluate)\b"),
}
_TOPIC_RE = {t: tuple(re.compile(p, re.IGNORECASE) for p in ps) for t, ps in _TOPIC_PATTERNS.items()}

MAX_CLASSIFY_CHARS = 4000
"""Only this many characters of a problem (and of teaching_intent) are classified (bounds the time)."""


def topic_of(problem: str, teaching_intent: str = "") -> str:
    """The topic label of a problem: the topic with the most keyword hits.

    Each distinct pattern of a topic found in the problem counts 2, found in
    ``teaching_intent`` 1; ties go to the earlier topic of ``TOPICS``. A problem
    with no hit is ``arithmetic`` when it holds a digit, else ``other``.
    """
    text, intent = problem[:MAX_CLASSIFY_CHARS], teaching_intent[:MAX_CLASSIFY_CHARS]
    best, best_score = None, 0
    for topic in TOPICS:
        score = sum(2 * bool(p.search(text)) + bool(intent and p.search(intent)) for p in _TOPIC_RE[topic])
        if score > best_score:
            best, best_score = topic, score
    if best is not None:
        return best
    return "arithmetic" if any(ch.isdigit() for ch in text) else "other"


DIFFICULTIES: tuple[str, ...] = ("easy", "medium", "hard", "unknown")
_HARD = re.compile(r"hard|difficult|challeng|advanced|tough|olympiad|competition|expert", re.IGNORECASE)
_MEDIUM = re.compile(r"medium|moderate|intermediate|average|learnable|\bmid|normal", re.IGNORECASE)
_EASY = re.compile(r"easy|simple|basic|elementary|trivial|beginner|warm", re.IGNORECASE)
_NUMBER = re.compile(r"(\d+(?:\.\d+)?)(?:\s*/\s*(\d+(?:\.\d+)?))?")


def difficulty_of(estimate: str) -> str:
    """``difficulty_estimate`` read into easy / medium / hard / unknown.

    Words first (any hard word wins, then medium, then easy: ``medium-hard`` is
    hard); else the first number, as a fraction ``a/b`` of its scale, a value
    in [0, 1] with a decimal point, or on a 1-5 (<= 5) or 1-10 scale:
    under 0.4 easy, under 0.7 medium, else hard.
    """
    text = estimate[:200]
    for pattern, label in ((_HARD, "hard"), (_MEDIUM, "medium"), (_EASY, "easy")):
        if pattern.search(text):
            return label
    m = _NUMBER.search(text)
    if m is None:
        return "unknown"
    x = float(m.group(1))
    if m.group(2) is not None:
        scale = float(m.group(2))
        ratio = x / scale if scale > 0 else -1.0
    elif "." in m.group(1) and x <= 1.0:
        ratio = x
    elif x <= 5:
        ratio = x / 5
    elif x <= 10:
        ratio = x / 10
    else:
        return "unknown"
    if not 0.0 <= ratio <= 1.0:
        return "unknown"
    return "easy" if ratio < 0.4 else "medium" if ratio < 0.7 else "hard"


# ----------------------------------------------------------------- prompts

FIELD_HINTS: dict[str, str] = {
    "teaching_intent": "the skill or concept this task trains",
    "target_reasoning_style": "the reasoning it needs, e.g. algebraic, counting, case analysis",
    "expected_reasoner_weakness": "the mistake you expect the Reasoner to make",
    "difficulty_estimate": "easy, medium or hard",
    "problem": "the complete problem statement: the only text the Reasoner sees",
    "solution": "your step-by-step solution, ending with the answer in \\boxed{}",
    "final_answer": "exactly the answer in the \\boxed{} of your solution",
    "verification_notes": "how you checked that the answer is right and unique",
    "novelty_notes": "how this task differs from the recent ones",
}
"""What each of the nine card fields should hold, as shown to the Synthesizer."""

REJECTION_HINTS: dict[str, str] = {
    "no_json": "write a single JSON object",
    "truncated_json": "keep the card short enough to finish the JSON object",
    "invalid_json": "write valid JSON: double quotes, commas between fields",
    "unclosed_think": "close your reasoning before writing the card",
    "missing_field": "include all nine fields",
    "empty_field": "fill every field",
    "problem_too_short": "state the problem in full",
    "problem_too_long": "keep the problem shorter",
    "references_figure": "describe everything in words; no figures or tables",
    "answer_leaked": "never give the answer in the problem",
    "banned_term": "do not name benchmarks or datasets",
    "answer_unparseable": "final_answer must be a number or a short exact expression",
    "answer_inconsistent": "the boxed answer of the solution must equal final_answer",
    "solution_no_answer": "end the solution with the answer in \\boxed{}",
    "solution_answer_unclear": "end the solution with the answer in \\boxed{}",
    "near_duplicate": "write a different problem from earlier ones",
    "duplicate_in_step": "write a different problem from earlier ones",
    "contaminated": "write an original problem, not a known one",
    "consensus_disagrees": "independent solvers found another answer: check the solution",
    "unreliable": "make sure the answer is right and unique",
    "heldout_problem": "write an original problem",
    "check_timeout": "keep the answer a short exact value that is quick to check",
    "copied_example": "write your own problem; do not copy an example card",
}
"""What to do about each rejection reason code (the prompt lists the report's top codes with these)."""

REQUIRED_SYNTH_PLACEHOLDERS = frozenset({"report"})
FORMAT_SYNTH_PLACEHOLDERS = frozenset({"schema", "examples"})
"""``synthesizer.txt`` must show the card format: the field list (``{{schema}}``), example cards (``{{examples}}``) or both."""
OPTIONAL_SYNTH_PLACEHOLDERS = frozenset({"rejections", "recent_tasks"}) | FORMAT_SYNTH_PLACEHOLDERS


WRITE_ORDER: tuple[str, ...] = (
    "problem",
    "solution",
    "final_answer",
    "difficulty_estimate",
    "teaching_intent",
    "target_reasoning_style",
    "expected_reasoner_weakness",
    "verification_notes",
    "novelty_notes",
)
"""The order the prompt shows the nine card fields in, and the card template writes them in: the checked
ones first, so a small model writes them while the example is fresh (JSON field order does not matter
to the parser)."""


CARD_SLOT_TOKENS: dict[str, int] = {
    "problem": 64,
    "solution": 72,
    "final_answer": 8,
    "difficulty_estimate": 4,
    "teaching_intent": 10,
    "target_reasoning_style": 8,
    "expected_reasoner_weakness": 10,
    "verification_notes": 8,
    "novelty_notes": 8,
}
"""Token budget of each value under template-constrained decoding (``synth_decoding: card``); with the
fixed JSON they bound a card (``CardGrammar.max_tokens``) below the ``smollm2`` preset's budget."""


CARD_MAX_COPY = 6
"""Under template-constrained decoding the problem may repeat at most this many consecutive prompt tokens:
enough for a phrase ("What is the remainder when"), not for a few-shot example's problem."""

NO_COPY_SLOTS = frozenset({"problem"})
"""Only the problem: a solution should repeat the format's phrases (". The answer is \\boxed{" is 7 tokens)."""


def card_template(max_copy: int = CARD_MAX_COPY) -> CardTemplate:
    """The math card as a :class:`~synco.rollout.card_decoding.CardTemplate`: ``WRITE_ORDER``, the answer digits only.

    The same layout as the prompt's example cards (:func:`example_card`), so the fixed text is what
    the model would write anyway. The solution ends with ``\\boxed{<answer>}.`` (its text holds no
    backslash; the boxed answer, like ``final_answer``, only answer characters), as the prompt asks, so
    every card states the answer its ``final_answer`` is checked against. The problem cannot copy more
    than ``max_copy`` consecutive tokens of the prompt (0: no limit), so a small model cannot paste an
    example's problem.
    """
    return CardTemplate(tuple(
        CardSlot(name, CARD_SLOT_TOKENS[name], ANSWER_CHARSET if name == "final_answer" else None,
                 no_copy=name in NO_COPY_SLOTS, boxed=CARD_SLOT_TOKENS["final_answer"] if name == "solution" else 0)
        for name in WRITE_ORDER), max_copy=max_copy)


def card_schema() -> str:
    """The nine card fields (in ``WRITE_ORDER``) as a JSON-shaped template with a hint per field."""
    lines = [f'  "{name}": "<{FIELD_HINTS.get(name, name)}>"' for name in WRITE_ORDER]
    return "{\n" + ",\n".join(lines) + "\n}"


EXAMPLE_NOTES: dict[str, str] = {
    "expected_reasoner_weakness": "an arithmetic slip in one step",
    "verification_notes": "checked each step again",
    "novelty_notes": "new setting and numbers",
}
"""Short fixed values of the free-text note fields in few-shot example cards (short cards finish within the budget)."""

_EXAMPLE_SEED = "synco-math-examples-v1"


def example_card(g: Generated) -> str:
    """A generated problem as a few-shot example card: the nine fields in ``WRITE_ORDER``, one per line.

    Its solution is the generator's worked steps ending in ``\\boxed{answer}`` and its
    ``final_answer`` the generator's exact answer, so the example is a card the verifier
    accepts; the note fields are short so that a small model's imitation stays short.
    """
    values = {
        "teaching_intent": g.intent,
        "target_reasoning_style": g.style,
        "difficulty_estimate": g.difficulty,
        "problem": g.problem,
        "solution": " ".join(g.steps) + " The answer is \\boxed{" + g.answer + "}.",
        "final_answer": g.answer,
        **EXAMPLE_NOTES,
    }
    lines = [json.dumps(name) + ": " + json.dumps(values[name], ensure_ascii=False) for name in WRITE_ORDER]
    return "{" + ",\n".join(lines) + "}"


def _optional(text: str) -> str | None:
    """A system-prompt template's text, or None when it is blank (no system message)."""
    return text.strip() or None


# ----------------------------------------------------------------- exact generator


def fmt(value: Fraction | int) -> str:
    """An exact value as answer text: integer, terminating decimal (<= 6 places) or ``a/b``."""
    v = Fraction(value)
    if v.denominator == 1:
        return str(v.numerator)
    d = v.denominator
    twos = fives = 0
    while d % 2 == 0:
        d //= 2
        twos += 1
    while d % 5 == 0:
        d //= 5
        fives += 1
    places = max(twos, fives)
    if d == 1 and places <= 6:
        scaled = v * 10**places
        sign = "-" if scaled < 0 else ""
        digits = str(abs(scaled.numerator)).rjust(places + 1, "0")
        return f"{sign}{digits[:-places]}.{digits[-places:]}"
    return f"{v.numerator}/{v.denominator}"


def same_value(answer: str, exact: str) -> bool:
    """Whether an answer text is the generator's exact answer: equal as numbers (``0.5`` = ``1/2``), else as text.

    Only short plain numbers (``-12``, ``0.5``, ``3/8``; at most 40 characters) are parsed, by ``Fraction``.
    """
    a, b = answer.replace(" ", ""), exact.replace(" ", "")
    if a == b:
        return True
    if max(len(a), len(b)) > 40 or not (_PLAIN_NUMBER.fullmatch(a) and _PLAIN_NUMBER.fullmatch(b)):
        return False
    try:
        return Fraction(a) == Fraction(b)
    except ZeroDivisionError:
        return False


_PLAIN_NUMBER = re.compile(r"-?\d+(?:\.\d+)?(?:/\d+)?")


def fraction_text(value: Fraction | int) -> str:
    """An exact value as ``a/b`` in lowest terms (an integer when whole): for "give a fraction" problems."""
    v = Fraction(value)
    return str(v.numerator) if v.denominator == 1 else f"{v.numerator}/{v.denominator}"


def _term(coef: int, var: str, first: bool) -> str:
    """``coef*var`` as written in an expression: ``3x``, ``- x``, ``+ 12``."""
    if coef == 0:
        return ""
    sign = ("-" if coef < 0 else "") if first else ("- " if coef < 0 else "+ ")
    mag = abs(coef)
    body = (var if mag == 1 else f"{mag}{var}") if var else str(mag)
    return f"{sign}{body}"


def _poly(*terms: tuple[int, str]) -> str:
    out: list[str] = []
    for coef, var in terms:
        t = _term(coef, var, not out)
        if t:
            out.append(t)
    return " ".join(out) or "0"


def _ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


NAMES = ("Ava", "Ben", "Chen", "Dara", "Eli", "Fatima", "Gus", "Hana", "Ivan", "Jade", "Kofi", "Lena", "Mateo",
         "Nora", "Omar", "Priya", "Quinn", "Rosa", "Sami", "Tariq")


@dataclass(frozen=True)
class Generated:
    """One generated problem with its worked solution and exact answer."""

    topic: str
    difficulty: str
    intent: str
    style: str
    problem: str
    steps: tuple[str, ...]
    answer: str


Template = Callable[[random.Random], tuple[str, list[str], "Fraction | int | str"]]
"""A problem family: rng -> (problem, solution steps, exact answer; a str answer is used as written)."""


def _t_change(rng: random.Random) -> tuple[str, list[str], Fraction | int | str]:
    name = rng.choice(NAMES)
    p, e = rng.randrange(15, 100, 5), rng.randrange(10, 65, 5)
    a, b = rng.randint(2, 9), rng.randint(2, 9)
    total = a * p + b * e
    bill = next(x for x in (5, 10, 20) if x * 100 > total)
    problem = (f"{name} buys {a} pencils at {p} cents each and {b} erasers at {e} cents each, and pays with a "
               f"{bill}-dollar bill. How much change does {name} get, in cents?")
    steps = [f"Pencils cost {a} * {p} = {a * p} cents and erasers {b} * {e} = {b * e} cents, {total} cents in all.",
             f"The change is {bill * 100} - {total} = {bill * 100 - total} cents."]
    return problem, steps, bill * 100 - total


def _t_theater(rng: random.Random) -> tuple[str, list[str], Fraction | int | str]:
    r, s = rng.randint(10, 30), rng.randint(12, 40)
    k, x = rng.randint(2, 8), rng.randint(1, 10)
    problem = (f"A theater has {r} rows of {s} seats. At one show every seat is taken except {x} empty seats in "
               f"each of the first {k} rows. How many people are at the show?")
    steps = [f"There are {r} * {s} = {r * s} seats and {k} * {x} = {k * x} of them are empty.",
             f"So {r * s} - {k * x} = {r * s - k * x} people are at the show."]
    return problem, steps, r * s - k * x


def _t_bakery(rng: random.Random) -> tuple[str, list[str], Fraction | int | str]:
    name = rng.choice(NAMES)
    n, m, b, p = rng.randint(3, 12), rng.randint(12, 40), rng.randint(4, 12), rng.randint(3, 15)
    boxes = n * m // b
    problem = (f"{name} bakes {n} batches of {m} cookies, packs them in boxes of {b} and sells each full box for "
               f"{p} dollars; cookies that do not fill a box are eaten. How many dollars does {name} earn?")
    steps = [f"{n} * {m} = {n * m} cookies fill {n * m} // {b} = {boxes} boxes.",
             f"{boxes} boxes at {p} dollars make {boxes * p} dollars."]
    return problem, steps, boxes * p


def _t_discount(rng: random.Random) -> tuple[str, list[str], Fraction | int | str]:
    p = rng.randrange(20, 420, 20)
    d, t = rng.choice((10, 15, 20, 25, 30, 40)), rng.choice((5, 6, 8, 10))
    after = Fraction(p * (100 - d), 100)
    final = after * Fraction(100 + t, 100)
    problem = (f"A jacket is priced at {p} dollars. It is discounted by {d}%, and then a {t}% sales tax is added "
               f"to the discounted price. What is the final price in dollars?")
    steps = [f"After the discount: {p} * {100 - d}/100 = {fmt(after)} dollars.",
             f"With tax: {fmt(after)} * {100 + t}/100 = {fmt(final)} dollars."]
    return problem, steps, final


def _t_club(rng: random.Random) -> tuple[str, list[str], Fraction | int | str]:
    b = rng.choice((2, 3, 4, 5, 6, 8))
    a = rng.choice([x for x in range(1, b) if math.gcd(x, b) == 1])
    c = rng.choice((10, 20, 25, 40, 50, 75))
    ms = [m for m in range(1, 25) if (a * m * c) % 100 == 0]
    m = rng.choice(ms)
    n, chess = b * m, a * m
    both = chess * c // 100
    problem = (f"In a club of {n} students, {a}/{b} of them play chess, and {c}% of the chess players also play go. "
               f"How many students in the club play both games?")
    steps = [f"Chess players: {n} * {a}/{b} = {chess}.", f"Both: {chess} * {c}/100 = {both}."]
    return problem, steps, both


def _t_ratio(rng: random.Random) -> tuple[str, list[str], Fraction | int | str]:
    a = rng.randint(1, 8)
    b = rng.randint(a + 1, 12)
    if math.gcd(a, b) != 1:
        b = a + 1
    m = rng.randint(2, 15)
    d = (b - a) * m
    problem = (f"The ratio of red to blue marbles in a bag is {a}:{b}, and there are {d} more blue marbles than red "
               f"ones. How many marbles are in the bag?")
    steps = [f"One part is {d} / ({b} - {a}) = {m} marbles.", f"The bag holds ({a} + {b}) * {m} = {(a + b) * m}."]
    return problem, steps, (a + b) * m


def _t_linear(rng: random.Random) -> tuple[str, list[str], Fraction | int | str]:
    x = rng.choice([v for v in range(-12, 13) if v])
    a = rng.randint(2, 9)
    c = rng.choice([v for v in range(2, 10) if v != a])
    b = rng.randint(1, 30)
    d = c * x - a * x - b  # a x + b = c x - d
    lhs, rhs = _poly((a, "x"), (b, "")), _poly((c, "x"), (-d, ""))
    problem = f"Solve for x: {lhs} = {rhs}."
    steps = [f"Collect terms: ({a} - {c})x = {-d} - {b}, so {a - c}x = {-d - b}.", f"x = {-d - b} / {a - c} = {x}."]
    return problem, steps, x


def _t_sum_diff(rng: random.Random) -> tuple[str, list[str], Fraction | int | str]:
    u = rng.randint(3, 60)
    v = rng.randint(-20, u - 1)
    s, d = u + v, u - v
    problem = f"Two numbers x and y satisfy x + y = {s} and x - y = {d}. What is the value of xy?"
    steps = [f"Adding: 2x = {s + d}, so x = {u}; then y = {s} - {u} = {v}.", f"xy = {u} * {v} = {u * v}."]
    return problem, steps, u * v


def _t_roots(rng: random.Random) -> tuple[str, list[str], Fraction | int | str]:
    r1, r2 = rng.randint(-9, 12), rng.randint(-9, 12)
    s, p = r1 + r2, r1 * r2
    eq = _poly((1, "x^2"), (-s, "x"), (p, ""))
    problem = f"The equation {eq} = 0 has two roots (counted with multiplicity). What is the sum of the squares of the roots?"
    steps = [f"By Vieta, the roots sum to {s} and multiply to {p}.", f"Sum of squares: {s}^2 - 2*({p}) = {s * s - 2 * p}."]
    return problem, steps, s * s - 2 * p


def _t_power_mod(rng: random.Random) -> tuple[str, list[str], Fraction | int | str]:
    a, n, m = rng.randint(2, 15), rng.randint(20, 99), rng.randint(7, 19)
    r = pow(a, n, m)
    problem = f"What is the remainder when {a}^{n} is divided by {m}?"
    steps = [f"Reduce the powers of {a} modulo {m} and use their cycle.", f"{a}^{n} mod {m} = {r}."]
    return problem, steps, r


def _t_sigma(rng: random.Random) -> tuple[str, list[str], Fraction | int | str]:
    while True:
        n = rng.randint(24, 500)
        divs = [d for d in range(1, n + 1) if n % d == 0]
        if len(divs) > 2:
            break
    problem = f"What is the sum of all positive divisors of {n}?"
    steps = [f"The divisors of {n} are {', '.join(map(str, divs))}.", f"They add up to {sum(divs)}."]
    return problem, steps, sum(divs)


def _t_lcm(rng: random.Random) -> tuple[str, list[str], Fraction | int | str]:
    a, b, c = rng.sample(range(4, 31), 3)
    lcm = a * b // math.gcd(a, b)
    lcm = lcm * c // math.gcd(lcm, c)
    problem = f"What is the least common multiple of {a}, {b} and {c}?"
    steps = [f"Take the highest power of each prime in {a}, {b} and {c}.", f"The least common multiple is {lcm}."]
    return problem, steps, lcm


def _t_committee(rng: random.Random) -> tuple[str, list[str], Fraction | int | str]:
    n, k = rng.randint(6, 20), rng.randint(2, 5)
    problem = f"In how many ways can a committee of {k} people be chosen from a group of {n} people?"
    steps = [f"Order does not matter: C({n}, {k}).", f"C({n}, {k}) = {math.comb(n, k)}."]
    return problem, steps, math.comb(n, k)


_ROLES = ("a president", "a treasurer", "a secretary", "a captain", "a spokesperson")


def _t_officers(rng: random.Random) -> tuple[str, list[str], Fraction | int | str]:
    n, r = rng.randint(5, 30), rng.randint(2, 4)
    roles = rng.sample(_ROLES, r)
    listed = ", ".join(roles[:-1]) + " and " + roles[-1]
    problem = (f"A club of {n} members elects {listed}, all different members. "
               f"How many different outcomes are possible?")
    steps = [f"Fill the {r} roles in order: {n} * ... ({r} factors).", f"P({n}, {r}) = {math.perm(n, r)}."]
    return problem, steps, math.perm(n, r)


def _t_digits(rng: random.Random) -> tuple[str, list[str], Fraction | int | str]:
    digits = sorted(rng.sample(range(1, 10), rng.randint(4, 7)))
    k = rng.randint(2, min(4, len(digits)))
    listed = ", ".join(map(str, digits[:-1])) + " and " + str(digits[-1])
    problem = f"How many {k}-digit numbers can be formed from the digits {listed} if no digit is repeated?"
    steps = [f"Choose the {k} digits in order from {len(digits)}.", f"P({len(digits)}, {k}) = {math.perm(len(digits), k)}."]
    return problem, steps, math.perm(len(digits), k)


def _t_marbles(rng: random.Random) -> tuple[str, list[str], Fraction | int | str]:
    r, b = rng.randint(2, 15), rng.randint(2, 15)
    event = rng.choice(("both are red", "both are blue", "they have different colours"))
    good = {"both are red": math.comb(r, 2), "both are blue": math.comb(b, 2)}.get(event, r * b)
    p = Fraction(good, math.comb(r + b, 2))
    problem = (f"A bag holds {r} red and {b} blue marbles. Two marbles are drawn at random without replacement. "
               f"What is the probability that {event}? Give the answer as a fraction in lowest terms.")
    steps = [f"{good} of the C({r + b}, 2) = {math.comb(r + b, 2)} equally likely pairs qualify.",
             f"Probability: {fraction_text(p)}."]
    return problem, steps, fraction_text(p)


def _t_dice(rng: random.Random) -> tuple[str, list[str], Fraction | int | str]:
    f = rng.randint(4, 12)
    s = rng.randint(3, 2 * f - 1)
    kind = rng.choice(("exactly", "at least", "at most"))
    ok = {"exactly": lambda t: t == s, "at least": lambda t: t >= s, "at most": lambda t: t <= s}[kind]
    ways = sum(1 for a in range(1, f + 1) for b in range(1, f + 1) if ok(a + b))
    p = Fraction(ways, f * f)
    problem = (f"Two fair dice, each with {f} faces numbered 1 to {f}, are rolled. What is the probability that the "
               f"sum is {kind} {s}? Give the answer as a fraction in lowest terms.")
    steps = [f"{ways} of the {f * f} equally likely outcomes have a sum {kind} {s}.", f"Probability: {fraction_text(p)}."]
    return problem, steps, fraction_text(p)


def _t_coins(rng: random.Random) -> tuple[str, list[str], Fraction | int | str]:
    n = rng.randint(3, 12)
    k = rng.randint(1, n - 1)
    kind = rng.choice(("exactly", "at least", "at most"))
    counts = range(k, n + 1) if kind == "at least" else range(0, k + 1) if kind == "at most" else (k,)
    ways = sum(math.comb(n, j) for j in counts)
    p = Fraction(ways, 2**n)
    problem = (f"A fair coin is tossed {n} times. What is the probability of getting {kind} {k} heads? "
               f"Give the answer as a fraction in lowest terms.")
    steps = [f"{ways} of the 2^{n} = {2 ** n} equally likely sequences have {kind} {k} heads.", f"Probability: {fraction_text(p)}."]
    return problem, steps, fraction_text(p)


def _t_ap_sum(rng: random.Random) -> tuple[str, list[str], Fraction | int | str]:
    a, d, n = rng.randint(-10, 30), rng.choice([v for v in range(-7, 10) if v]), rng.randint(8, 40)
    total = n * (2 * a + (n - 1) * d) // 2
    problem = (f"An arithmetic sequence has first term {a} and common difference {d}. "
               f"What is the sum of its first {n} terms?")
    steps = [f"The {_ordinal(n)} term is {a} + {n - 1} * {d} = {a + (n - 1) * d}.",
             f"Sum = {n} * ({a} + {a + (n - 1) * d}) / 2 = {total}."]
    return problem, steps, total


def _t_ap_terms(rng: random.Random) -> tuple[str, list[str], Fraction | int | str]:
    a, d = rng.randint(-20, 30), rng.choice([v for v in range(-9, 10) if v])
    i, j, k = sorted(rng.sample(range(2, 30), 3))
    order = rng.sample((i, j, k), 3)
    (p, q), target = sorted(order[:2]), order[2]
    term = lambda n: a + (n - 1) * d  # noqa: E731
    problem = (f"In an arithmetic sequence, the {_ordinal(p)} term is {term(p)} and the {_ordinal(q)} term is "
               f"{term(q)}. What is the {_ordinal(target)} term?")
    steps = [f"The common difference is ({term(q)} - {term(p)}) / ({q} - {p}) = {d}.",
             f"The {_ordinal(target)} term is {term(p)} + ({target} - {p}) * {d} = {term(target)}."]
    return problem, steps, term(target)


def _t_geometric(rng: random.Random) -> tuple[str, list[str], Fraction | int | str]:
    a, r, n = rng.randint(1, 9), rng.choice((-3, -2, 2, 3, 4)), rng.randint(5, 10)
    problem = (f"A geometric sequence begins {a}, {a * r}, {a * r * r}, ... "
               f"What is its {_ordinal(n)} term?")
    steps = [f"The common ratio is {r}.", f"The {_ordinal(n)} term is {a} * ({r})^{n - 1} = {a * r ** (n - 1)}."]
    return problem, steps, a * r ** (n - 1)


_TRIPLES = ((3, 4, 5), (5, 12, 13), (8, 15, 17), (7, 24, 25), (20, 21, 29), (9, 40, 41))


def _t_rectangle(rng: random.Random) -> tuple[str, list[str], Fraction | int | str]:
    a, b = rng.randint(2, 40), rng.randint(2, 40)
    perimeter = 2 * (a + b)
    problem = (f"A rectangle has a perimeter of {perimeter} cm, and one of its sides is {a} cm long. "
               f"What is its area in square centimetres?")
    steps = [f"The other side is {perimeter} / 2 - {a} = {b} cm.", f"Area: {a} * {b} = {a * b} square centimetres."]
    return problem, steps, a * b


def _t_right_triangle(rng: random.Random) -> tuple[str, list[str], Fraction | int | str]:
    t, m = rng.choice(_TRIPLES), rng.randint(1, 6)
    a, b, c = (x * m for x in t)
    if rng.random() < 0.5:
        problem = f"A right triangle has legs of length {a} and {b}. What is its perimeter?"
        steps = [f"The hypotenuse is sqrt({a}^2 + {b}^2) = {c}.", f"Perimeter: {a} + {b} + {c} = {a + b + c}."]
        return problem, steps, a + b + c
    area = Fraction(a * b, 2)
    problem = f"A right triangle has a hypotenuse of length {c} and one leg of length {a}. What is its area?"
    steps = [f"The other leg is sqrt({c}^2 - {a}^2) = {b}.", f"Area: {a} * {b} / 2 = {fmt(area)}."]
    return problem, steps, area


def _t_box(rng: random.Random) -> tuple[str, list[str], Fraction | int | str]:
    a, b, c = rng.randint(2, 30), rng.randint(2, 30), rng.randint(2, 30)
    s = 2 * (a * b + b * c + c * a)
    problem = f"A closed box measures {a} cm by {b} cm by {c} cm. What is its total surface area in square centimetres?"
    steps = [f"Faces: 2 * ({a}*{b} + {b}*{c} + {c}*{a}) = 2 * {a * b + b * c + c * a}.", f"Surface area: {s}."]
    return problem, steps, s


def _t_trip(rng: random.Random) -> tuple[str, list[str], Fraction | int | str]:
    v1, v2 = rng.randrange(40, 130, 10), rng.randrange(30, 130, 10)
    t1, t2 = rng.randint(1, 4), rng.randint(1, 4)
    d1, d2 = v1 * t1, v2 * t2
    avg = Fraction(d1 + d2, t1 + t2)
    problem = (f"A train travels {d1} km at {v1} km/h and then {d2} km at {v2} km/h. "
               f"What is its average speed for the whole trip, in km/h?")
    steps = [f"Times: {d1}/{v1} = {t1} h and {d2}/{v2} = {t2} h.",
             f"Average speed: {d1 + d2} / {t1 + t2} = {fmt(avg)} km/h."]
    return problem, steps, avg


def _t_work(rng: random.Random) -> tuple[str, list[str], Fraction | int | str]:
    n1, n2 = rng.sample(NAMES, 2)
    a, b = rng.randint(2, 12), rng.randint(2, 12)
    t = Fraction(a * b, a + b)
    problem = (f"{n1} can paint a fence alone in {a} hours, and {n2} can paint it alone in {b} hours. "
               f"Working together, how many hours do they need?")
    steps = [f"Together they paint 1/{a} + 1/{b} = {fmt(Fraction(1, a) + Fraction(1, b))} of the fence per hour.",
             f"Time: {fmt(t)} hours."]
    return problem, steps, t


def _t_tank(rng: random.Random) -> tuple[str, list[str], Fraction | int | str]:
    r1 = rng.randint(5, 40)
    r2 = rng.randint(1, r1 - 1)
    v = rng.randint(5, 60) * (r1 - r2)
    t = Fraction(v, r1 - r2)
    problem = (f"A tap fills an empty tank of {v} litres at {r1} litres per minute while a drain empties it at {r2} "
               f"litres per minute. How many minutes does the tank take to fill?")
    steps = [f"The tank gains {r1} - {r2} = {r1 - r2} litres per minute.", f"Time: {v} / {r1 - r2} = {fmt(t)} minutes."]
    return problem, steps, t


@dataclass(frozen=True)
class TemplateSpec:
    """One problem family of the generator."""

    topic: str
    difficulty: str
    intent: str
    style: str
    make: Template


TEMPLATES: tuple[TemplateSpec, ...] = (
    TemplateSpec("arithmetic", "easy", "multi-step arithmetic with money", "direct computation", _t_change),
    TemplateSpec("arithmetic", "easy", "multiplication and subtraction in context", "direct computation", _t_theater),
    TemplateSpec("arithmetic", "medium", "integer division with remainders in context", "direct computation", _t_bakery),
    TemplateSpec("fractions_percent", "medium", "successive percentage changes", "proportional reasoning", _t_discount),
    TemplateSpec("fractions_percent", "medium", "fractions and percentages of a quantity", "proportional reasoning", _t_club),
    TemplateSpec("fractions_percent", "medium", "ratios and parts", "proportional reasoning", _t_ratio),
    TemplateSpec("algebra", "easy", "solving linear equations", "algebraic manipulation", _t_linear),
    TemplateSpec("algebra", "medium", "systems of two linear equations", "algebraic manipulation", _t_sum_diff),
    TemplateSpec("algebra", "hard", "roots of quadratics via Vieta's formulas", "algebraic manipulation", _t_roots),
    TemplateSpec("number_theory", "medium", "modular arithmetic of powers", "number theory", _t_power_mod),
    TemplateSpec("number_theory", "medium", "divisor sums", "number theory", _t_sigma),
    TemplateSpec("number_theory", "easy", "least common multiples", "number theory", _t_lcm),
    TemplateSpec("combinatorics", "easy", "combinations", "counting", _t_committee),
    TemplateSpec("combinatorics", "medium", "ordered selections", "counting", _t_officers),
    TemplateSpec("combinatorics", "medium", "arrangements without repetition", "counting", _t_digits),
    TemplateSpec("probability", "medium", "drawing without replacement", "counting", _t_marbles),
    TemplateSpec("probability", "medium", "sums of dice", "case analysis", _t_dice),
    TemplateSpec("probability", "medium", "binomial probabilities", "counting", _t_coins),
    TemplateSpec("sequences", "easy", "sums of arithmetic sequences", "pattern reasoning", _t_ap_sum),
    TemplateSpec("sequences", "medium", "terms of arithmetic sequences", "pattern reasoning", _t_ap_terms),
    TemplateSpec("sequences", "medium", "terms of geometric sequences", "pattern reasoning", _t_geometric),
    TemplateSpec("geometry", "easy", "perimeter and area of rectangles", "geometric reasoning", _t_rectangle),
    TemplateSpec("geometry", "medium", "the Pythagorean theorem", "geometric reasoning", _t_right_triangle),
    TemplateSpec("geometry", "easy", "surface area of boxes", "geometric reasoning", _t_box),
    TemplateSpec("rates", "medium", "average speed", "rates", _t_trip),
    TemplateSpec("rates", "medium", "combined work rates", "rates", _t_work),
    TemplateSpec("rates", "easy", "net rates of filling", "rates", _t_tank),
)
"""The generator's problem families (three per topic of ``TOPICS``)."""

HELDOUT_PERCENT = 10
"""Share of generated problems (by hash of the normalised text) reserved for held-out evaluation."""

HELDOUT_BANK_PER_TOPIC = 40
"""Held-out problems kept per topic; ``heldout(n)`` draws from these, so n <= 40."""

_HELDOUT_SALT = b"synco-math-heldout-v1:"
_BANK_SEED = "synco-math-heldout-bank-v1"


def problem_key(problem: str) -> str:
    """The form problems are compared in: NFKC, lowercased, whitespace collapsed."""
    return normalize_text(problem)


def in_heldout_bucket(problem: str) -> bool:
    """Whether a problem falls in the reserved hash bucket (keyed on its normalised text)."""
    digest = hashlib.sha256(_HELDOUT_SALT + problem_key(problem).encode()).digest()
    return int.from_bytes(digest[:8], "big") % 100 < HELDOUT_PERCENT


def generate(rng: random.Random, spec: TemplateSpec) -> Generated:
    """One problem of ``spec`` (the held-out bucket included)."""
    problem, steps, answer = spec.make(rng)
    text = answer if isinstance(answer, str) else fmt(answer)
    return Generated(spec.topic, spec.difficulty, spec.intent, spec.style, problem, tuple(steps), text)


def _templates_of(topic: str) -> list[TemplateSpec]:
    return [t for t in TEMPLATES if t.topic == topic]


# ----------------------------------------------------------------- domain


class MathDomain:
    """Free-form maths for real LMs: no oracle, consensus-checked references (see module docstring)."""

    name = "math"
    payload_type = ProblemPayload
    """A problem with its worked solution and final answer."""
    needs = DomainNeeds(chat_model=True)
    """Instruction prompts for chat LMs: the LLM factor proposer (``evosyn.proposer``) can run."""

    n_examples: int = 2
    """Few-shot example cards shown by ``{{examples}}`` in ``synthesizer.txt``."""

    card_max_copy: int = CARD_MAX_COPY
    """Template-constrained cards: the longest run of prompt tokens the problem / solution may repeat (0: no limit)."""

    def __init__(self, prompts_dir: str | Path | None = None, report_budget: int | None = None) -> None:
        """Load the prompt templates (``prompts_dir`` first, then ``$SYNCO_PROMPTS_DIR``, then the shipped ones).

        ``report_budget``: characters of the rendered capability report (None: the report's ``char_budget``).
        """
        self.topics: list[str] = list(TOPICS)
        self.report_budget = report_budget
        self._synth_template = load_prompt("synthesizer", prompts_dir)
        self._synth_system = _optional(load_prompt("synthesizer_system", prompts_dir))
        self._reasoner_template = load_prompt("reasoner", prompts_dir)
        self._reasoner_system = _optional(load_prompt("reasoner_system", prompts_dir))
        have = placeholders(self._synth_template)
        missing = sorted(REQUIRED_SYNTH_PLACEHOLDERS - have)
        if missing:
            raise PromptError("synthesizer.txt lacks " + ", ".join("{{" + m + "}}" for m in missing))
        if not FORMAT_SYNTH_PLACEHOLDERS & have:
            raise PromptError("synthesizer.txt lacks {{schema}} or {{examples}}: the card format is never shown")
        if "problem" not in placeholders(self._reasoner_template):
            raise PromptError("reasoner.txt lacks {{problem}}")
        self._optional_present = OPTIONAL_SYNTH_PLACEHOLDERS & have
        self._bank: dict[str, list[Generated]] | None = None
        self._bank_keys: frozenset[str] | None = None
        self._shown_step: int | None = None  # the report step of the prompts whose examples _shown holds
        self._shown: dict[str, str] = {}  # problem key -> exact answer

    # --- answers and factors

    @property
    def has_oracle(self) -> bool:
        return False

    def oracle(self, card: TaskCard) -> str | None:
        """No exact oracle for free-form maths: always None (the verifier is built without one)."""
        return None

    def card_factors(self, card: TaskCard) -> dict[str, str]:
        """``topic`` (keyword classifier on the problem and teaching_intent) and ``difficulty`` (easy/medium/hard/unknown)."""
        return {"topic": topic_of(ProblemPayload.of(card).problem, card.teaching_intent),
                "difficulty": difficulty_of(card.difficulty_estimate)}

    def reject_reason(self, card: TaskCard) -> str | None:
        """``heldout_problem`` when the card's problem is one of the held-out bank's; ``copied_example`` when it is
        the problem of a few-shot example shown for the current report but its answer is not the example's exact
        one (problems compared normalised; a copy with the right answer is a correct card and passes)."""
        self._ensure_bank()
        assert self._bank_keys is not None
        task = ProblemPayload.of(card)
        key = problem_key(task.problem)
        if key in self._bank_keys:
            return "heldout_problem"
        exact = self._shown.get(key)
        if exact is not None and not same_value(task.answer, exact):
            return "copied_example"
        return None

    # --- prompts

    def synthesizer_system_prompt(self) -> str | None:
        """``synthesizer_system.txt`` (None when blank)."""
        return self._synth_system

    def reasoner_system_prompt(self) -> str | None:
        """``reasoner_system.txt`` (None when blank: no system message, the policy's default applies)."""
        return self._reasoner_system

    def synthesizer_prompt(self, report: object, target: Cell | None = None) -> str:
        """``synthesizer.txt`` filled from a ``CapabilityReport`` (or already-rendered report text).

        ``target`` (the Designer's cell for this context) is appended as one line the
        model must follow, e.g. ``Target cell: topic=geometry, quantities=3-4``.
        """
        render_report = getattr(report, "render", None)
        text = render_report(self.report_budget) if callable(render_report) else str(report or "")
        values = {"report": text}
        if "schema" in self._optional_present:
            values["schema"] = card_schema()
        if "rejections" in self._optional_present:
            values["rejections"] = _rejection_lines(report)
        if "examples" in self._optional_present:
            shown = self.examples(report, target)
            self._remember_examples(report, shown)
            values["examples"] = "\n\n".join(example_card(g) for g in shown)
        if "recent_tasks" in self._optional_present:
            recent = list(getattr(report, "recent_problems", []) or [])
            values["recent_tasks"] = "\n".join("- " + p for p in recent) if recent else "- none yet"
        prompt = render(self._synth_template, **values)
        if target:
            prompt += ("\n\nTarget cell (write a task whose problem has exactly these properties): "
                       + ", ".join(f"{k}={v}" for k, v in target))
        return prompt

    def card_template(self) -> CardTemplate:
        """The card layout template-constrained decoding fills in (``synth_decoding: card``)."""
        return card_template(self.card_max_copy)

    def examples(self, report: object, target: Cell | None = None) -> list[Generated]:
        """The few-shot example problems of one Synthesizer prompt (``n_examples`` of them).

        Drawn from the built-in generator (never a held-out problem), so their answers are exact.
        The draw is seeded by the report's step and the target cell, so a prompt is the same
        whenever it is rebuilt (a resumed run stays bit-exact) while the examples change as the
        report does; a target ``topic`` cell gets examples of that topic.
        """
        cell = ",".join(f"{k}={v}" for k, v in (target or ()))
        rng = random.Random(f"{_EXAMPLE_SEED}:{getattr(report, 'step', 0)}:{cell}")
        topic = dict(target or ()).get("topic")
        return [self.sample(rng, topic if topic in TOPICS else None) for _ in range(self.n_examples)]

    def _remember_examples(self, report: object, shown: list[Generated]) -> None:
        """Keep the problems of the examples shown for the current report step (``copied_example``).

        A prompt for a new report step starts a new set, so the set depends only on the prompts of
        the step being verified (a resumed run rebuilds it exactly).
        """
        step = getattr(report, "step", 0)
        if step != self._shown_step:
            self._shown_step, self._shown = step, {}
        self._shown.update((problem_key(g.problem), g.answer) for g in shown)

    # --- the factor space (EvoSyn)

    builtin_factors: tuple[str, ...] = ("topic",)
    """Factors the space starts with; the rest of :meth:`factor_defs` are the Reflector's candidates."""

    def factor_defs(self) -> list[FactorDef]:
        """``topic`` (built in), then candidates computed from the problem text: ``quantities``, ``magnitude``, ``length``."""
        return list(MATH_FACTORS)

    def sample_any(self, rng: random.Random) -> str:
        """A problem from the built-in generator (to enumerate feasible cells)."""
        return self.sample(rng).problem

    def reasoner_prompt(self, problem: str) -> str:
        """``reasoner.txt``: only the problem and the instruction to box one final answer."""
        return render(self._reasoner_template, problem=problem)

    def format_card(self, g: Generated) -> str:
        """A generated problem as the JSON card a Synthesizer would write (solution ends in ``\\boxed{answer}``)."""
        values = {
            "teaching_intent": g.intent,
            "target_reasoning_style": g.style,
            "expected_reasoner_weakness": "arithmetic slips in a multi-step computation",
            "difficulty_estimate": g.difficulty,
            "problem": g.problem,
            "solution": " ".join(g.steps) + " The answer is \\boxed{" + g.answer + "}.",
            "final_answer": g.answer,
            "verification_notes": "computed exactly by the built-in generator",
            "novelty_notes": "drawn from the static " + g.topic + " family",
        }
        return json.dumps({k: values[k] for k in CARD_FIELDS}, ensure_ascii=False)

    # --- generators

    def sample(self, rng: random.Random, topic: str | None = None) -> Generated:
        """A training problem (of ``topic``, else of a uniformly drawn topic); never a held-out one."""
        if topic is not None and topic not in TOPICS:
            raise ValueError(f"unknown topic {topic!r}; known: {', '.join(TOPICS)}")
        for _ in range(1000):  # 90 % of draws are accepted
            spec = rng.choice(_templates_of(topic or rng.choice(self.topics)))
            g = generate(rng, spec)
            if not in_heldout_bucket(g.problem):
                return g
        raise RuntimeError("the generator kept drawing held-out problems")  # pragma: no cover - p ~ 0.1^1000

    def static_cards(self, rng: random.Random, n: int) -> list[str]:
        """``n`` correct card texts over uniformly drawn topics: the ``static`` baseline's source."""
        return [self.format_card(self.sample(rng)) for _ in range(n)]

    def heldout(self, n_per_group: int, seed: int) -> list[HeldoutItem]:
        """``n_per_group`` held-out problems per topic (group = topic), a ``seed``-dependent subset of the fixed bank."""
        if n_per_group > HELDOUT_BANK_PER_TOPIC:
            raise ValueError(f"heldout_per_group {n_per_group} > {HELDOUT_BANK_PER_TOPIC} held-out problems per topic")
        bank = self._ensure_bank()
        rng = random.Random(seed)
        items: list[HeldoutItem] = []
        for topic in TOPICS:
            for g in rng.sample(bank[topic], n_per_group):
                items.append(HeldoutItem(problem=g.problem, answer=g.answer, group=topic))
        return items

    def heldout_bank(self) -> dict[str, list[Generated]]:
        """Every held-out problem, per topic (fixed: independent of the run's seed)."""
        return dict(self._ensure_bank())

    def _ensure_bank(self) -> dict[str, list[Generated]]:
        if self._bank is None:
            rng = random.Random(_BANK_SEED)
            bank: dict[str, list[Generated]] = {}
            for topic in TOPICS:
                seen: set[str] = set()
                out: list[Generated] = []
                specs = _templates_of(topic)
                draws = 0
                while len(out) < HELDOUT_BANK_PER_TOPIC:
                    draws += 1
                    if draws > 400 * HELDOUT_BANK_PER_TOPIC:
                        raise RuntimeError(f"topic {topic}: cannot draw {HELDOUT_BANK_PER_TOPIC} held-out problems")
                    g = generate(rng, specs[draws % len(specs)])  # the topic's families in turn
                    key = problem_key(g.problem)
                    if key in seen or not in_heldout_bucket(g.problem):
                        continue
                    seen.add(key)
                    out.append(g)
                bank[topic] = out
            self._bank = bank
            self._bank_keys = frozenset(problem_key(g.problem) for gs in bank.values() for g in gs)
        return self._bank


def _rejection_lines(report: object) -> str:
    """The report's top rejection reasons as ``- code (count): what to do`` lines, or ``- none yet``."""
    lines = []
    for reason in list(getattr(report, "top_reasons", []) or []):
        code, count = str(getattr(reason, "code", "")), getattr(reason, "count", 0)
        hint = REJECTION_HINTS.get(code)
        lines.append("- " + code + " (" + str(count) + ")" + (": " + hint if hint else ""))
    return "\n".join(lines) if lines else "- none yet"


# ----------------------------------------------------------------- factor extractors (EvoSyn)

_NUMBER_RE = re.compile(r"\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?")
"""A number as written in a word problem: ``1,000`` (thousands separators) is one number."""


def _numbers(problem: str) -> list[float]:
    return [float(x.replace(",", "")) for x in _NUMBER_RE.findall(problem[:4000])]


def _quantities(problem: str) -> str | None:
    n = len(_numbers(problem))
    return "0-2" if n <= 2 else "3-4" if n <= 4 else "5+"


def _magnitude(problem: str) -> str | None:
    nums = _numbers(problem)
    if not nums:
        return None
    m = max(nums)
    return "<10" if m < 10 else "<100" if m < 100 else "<1000" if m < 1000 else "1000+"


def _length(problem: str) -> str | None:
    words = len(problem.split())
    return "short" if words < 25 else "medium" if words < 50 else "long"


MATH_FACTORS: tuple[FactorDef, ...] = (
    FactorDef("topic", (*TOPICS, "other"), lambda p: topic_of(p), "keyword topic of the problem"),
    FactorDef("quantities", ("0-2", "3-4", "5+"), _quantities, "numbers stated in the problem"),
    FactorDef("magnitude", ("<10", "<100", "<1000", "1000+"), _magnitude, "largest number in the problem"),
    FactorDef("length", ("short", "medium", "long"), _length, "words in the problem"),
)
"""The math domain's factors, all computed from the problem text: ``topic`` is built in."""
