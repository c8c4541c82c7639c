"""The embedded default world: integer arithmetic with structural difficulty levels.

A problem is a short plain string such as ``347*6``. An exact, bounded
recursive-descent evaluator (digits, ``+ - *``, parentheses; never ``eval``)
computes answers, and the *structure* of a problem decides its level:

====  ========  ==========================  ====  ========  ==========================
L1    3d+1d     ``347+5``                   L7    3d-3d     ``812-347`` (a >= b)
L2    3d-1d     ``347-5``                   L8    3d*1d     ``347*6``
L3    2d+2d     ``47+58``                   L9    2d*2d     ``47*58``
L4    3d-2d     ``347-58``                  L10   3d*2d     ``347*58``
L5    3d+2d     ``347+58``                  L11   3d*3d     ``347*812``
L6    3d+3d     ``347+812``
====  ========  ==========================  ====  ========  ==========================

``nd`` means exactly n digits without a leading zero (``1d`` is 0..9). ``+``
and ``*`` accept either operand order (``5+347`` is L1); ``-`` needs a >= b so
answers are never negative. Every level has at least 8,100 distinct problems.
Additions and subtractions come first by operand width, multiplications last
by multiplier width: measured on tiny char models, the multiplier width is the
real difficulty knob (carries are not), so L8..L11 are the hard end.

A stable 10 % hash bucket of problems is held out: ``sample_problem`` (warm
start, static baseline) never returns one, ``heldout`` draws only from it, and
``reject_reason`` refuses Synthesizer cards that hit it. The bucket is keyed on
the canonical form (operands of ``+``/``*`` sorted), so ``6*347`` is held out
exactly when ``347*6`` is.
"""

from __future__ import annotations

import hashlib
import json
import random
from dataclasses import dataclass

from synco.domains.base import DomainNeeds, HeldoutItem, compact_synthesizer_prompt
from synco.evosyn.space import Cell, FactorDef
from synco.core.records import CARD_FIELDS, ProblemPayload, TaskCard

# ----------------------------------------------------------------- evaluator

MAX_EXPR_CHARS = 64
"""Longer problem strings are rejected before parsing (bounds time and size)."""

MAX_NUMBER_DIGITS = 9
"""Longest allowed integer literal."""

MAX_PAREN_DEPTH = 8
"""Deepest allowed parenthesis nesting."""

MAX_OPERANDS = 16
"""Most integer literals in one expression."""

_ALLOWED = frozenset("0123456789+-*()")
_OP_NAMES = {"+": "add", "-": "sub", "*": "mul"}


@dataclass(frozen=True)
class Num:
    """An integer literal exactly as written (no sign, no leading zero)."""

    text: str

    @property
    def value(self) -> int:
        return int(self.text)


@dataclass(frozen=True)
class BinOp:
    """``left op right`` with op one of ``+ - *``."""

    op: str
    left: Expr
    right: Expr


@dataclass(frozen=True)
class Paren:
    """A parenthesised sub-expression (kept so structure and factors can see it)."""

    inner: Expr


Expr = Num | BinOp | Paren


class _Malformed(Exception):
    """Internal: the text is not a well-formed bounded expression."""


class _Parser:
    """Recursive descent over ``expr := term (('+'|'-') term)*``, ``term := atom ('*' atom)*``,
    ``atom := number | '(' expr ')'``; left-associative, depth and size bounded."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0
        self.operands = 0

    def peek(self) -> str:
        return self.text[self.pos] if self.pos < len(self.text) else ""

    def expr(self, depth: int) -> Expr:
        node = self.term(depth)
        while self.peek() in ("+", "-"):
            op = self.text[self.pos]
            self.pos += 1
            node = BinOp(op, node, self.term(depth))
        return node

    def term(self, depth: int) -> Expr:
        node = self.atom(depth)
        while self.peek() == "*":
            self.pos += 1
            node = BinOp("*", node, self.atom(depth))
        return node

    def atom(self, depth: int) -> Expr:
        ch = self.peek()
        if ch == "(":
            if depth >= MAX_PAREN_DEPTH:
                raise _Malformed("too deep")
            self.pos += 1
            inner = self.expr(depth + 1)
            if self.peek() != ")":
                raise _Malformed("unclosed parenthesis")
            self.pos += 1
            return Paren(inner)
        start = self.pos
        while self.peek().isdigit():
            self.pos += 1
        digits = self.text[start:self.pos]
        if not digits:
            raise _Malformed("expected a number")
        if len(digits) > MAX_NUMBER_DIGITS or (len(digits) > 1 and digits[0] == "0"):
            raise _Malformed("bad number")
        self.operands += 1
        if self.operands > MAX_OPERANDS:
            raise _Malformed("too many operands")
        return Num(digits)


def parse_expression(text: object) -> Expr | None:
    """The syntax tree of a bounded integer expression, or None if ``text`` is not one.

    Only the characters ``0-9 + - * ( )`` are allowed (no spaces, no unary
    minus, no leading zeros); length, literal width, nesting and operand count
    are bounded, so any input is rejected or parsed in time linear in its length.
    """
    if not isinstance(text, str) or not 0 < len(text) <= MAX_EXPR_CHARS or not set(text) <= _ALLOWED:
        return None
    parser = _Parser(text)
    try:
        tree = parser.expr(0)
    except _Malformed:
        return None
    return tree if parser.pos == len(text) else None


def evaluate_tree(node: Expr) -> int:
    """The exact integer value of a parsed expression."""
    if isinstance(node, Num):
        return node.value
    if isinstance(node, Paren):
        return evaluate_tree(node.inner)
    a, b = evaluate_tree(node.left), evaluate_tree(node.right)
    if node.op == "+":
        return a + b
    if node.op == "-":
        return a - b
    return a * b


def evaluate(text: object) -> int | None:
    """The exact value of an integer expression string, or None if it is malformed."""
    tree = parse_expression(text)
    return None if tree is None else evaluate_tree(tree)


# ----------------------------------------------------------------- factors


def _walk(node: Expr) -> list[Expr]:
    out: list[Expr] = [node]
    if isinstance(node, BinOp):
        out += _walk(node.left) + _walk(node.right)
    elif isinstance(node, Paren):
        out += _walk(node.inner)
    return out


def column_carries(a: int, b: int) -> int:
    """Carries when adding non-negative ``a + b`` column by column."""
    carries = carry = 0
    while a or b:
        carry = 1 if a % 10 + b % 10 + carry >= 10 else 0
        carries += carry
        a, b = a // 10, b // 10
    return carries


def column_borrows(a: int, b: int) -> int:
    """Borrows when subtracting ``a - b`` (a >= b >= 0) column by column."""
    borrows = borrow = 0
    while a or b:
        borrow = 1 if a % 10 - b % 10 - borrow < 0 else 0
        borrows += borrow
        a, b = a // 10, b // 10
    return borrows


def product_carries(a: int, b: int) -> int:
    """Non-zero carries in the partial products of long multiplication ``a * b`` (a, b >= 0)."""
    carries = 0
    while b:
        digit, rest, carry = b % 10, a, 0
        while rest:
            carry = (rest % 10 * digit + carry) // 10
            carries += carry > 0
            rest //= 10
        b //= 10
    return carries


def _bucket(n: int) -> str:
    return str(n) if n < 3 else "3+"


# ----------------------------------------------------------------- levels


@dataclass(frozen=True)
class LevelSpec:
    """One level family: ``<width_a>d <op> <width_b>d`` with exact digit widths."""

    name: str
    op: str
    width_a: int
    width_b: int

    @property
    def label(self) -> str:
        return f"{self.width_a}d{self.op}{self.width_b}d"


LEVEL_SPECS: tuple[LevelSpec, ...] = (
    LevelSpec("L1", "+", 3, 1),
    LevelSpec("L2", "-", 3, 1),
    LevelSpec("L3", "+", 2, 2),
    LevelSpec("L4", "-", 3, 2),
    LevelSpec("L5", "+", 3, 2),
    LevelSpec("L6", "+", 3, 3),
    LevelSpec("L7", "-", 3, 3),
    LevelSpec("L8", "*", 3, 1),
    LevelSpec("L9", "*", 2, 2),
    LevelSpec("L10", "*", 3, 2),
    LevelSpec("L11", "*", 3, 3),
)
"""The level families, easiest first."""

_SPEC_BY_SHAPE = {(s.op, s.width_a, s.width_b): s for s in LEVEL_SPECS}
_SPEC_BY_NAME = {s.name: s for s in LEVEL_SPECS}

HELDOUT_PERCENT = 10
"""Share of problems (by canonical hash) reserved for held-out evaluation."""

_HELDOUT_SALT = b"synco-arith-heldout-v1:"


def _binary(tree: Expr | None) -> tuple[str, Num, Num] | None:
    """``(op, a, b)`` when the tree is exactly ``<number> <op> <number>``."""
    if isinstance(tree, BinOp) and isinstance(tree.left, Num) and isinstance(tree.right, Num):
        return tree.op, tree.left, tree.right
    return None


def level_of_tree(tree: Expr | None) -> str | None:
    """The level of a parsed problem, or None when it belongs to no level family."""
    shape = _binary(tree)
    if shape is None:
        return None
    op, a, b = shape
    wa, wb = len(a.text), len(b.text)
    if op == "-" and a.value < b.value:
        return None
    if op != "-" and wa < wb:
        wa, wb = wb, wa
    spec = _SPEC_BY_SHAPE.get((op, wa, wb))
    return spec.name if spec else None


def canonical_problem(problem: str) -> str:
    """The problem with the operands of a binary ``+``/``*`` in ascending order (else unchanged)."""
    shape = _binary(parse_expression(problem))
    if shape is None or shape[0] == "-":
        return problem
    op, a, b = shape
    lo, hi = sorted((a, b), key=lambda n: n.value)
    return f"{lo.text}{op}{hi.text}"


def _width_range(width: int) -> tuple[int, int]:
    return (0, 9) if width == 1 else (10 ** (width - 1), 10**width - 1)


def _raw_problem(rng: random.Random, spec: LevelSpec) -> str:
    """A uniformly random problem of ``spec`` (the held-out bucket included)."""
    a = rng.randint(*_width_range(spec.width_a))
    b = rng.randint(*_width_range(spec.width_b))
    if spec.width_a == spec.width_b and (spec.op == "-" and a < b):
        a, b = b, a
    return f"{a}{spec.op}{b}"


# ----------------------------------------------------------------- domain


class ArithDomain:
    """Integer arithmetic with an exact oracle and eleven structural levels (see module docstring)."""

    name = "arith"
    payload_type = ProblemPayload
    """A problem with its solution and exact answer."""
    needs = DomainNeeds(chat_model=False)
    """Tiny character models: no chat template, no instruction following (so no LLM proposer)."""
    min_problem_chars = 3
    max_problem_chars = 40
    report_budget = 64
    """Characters of the compact capability report put in the Synthesizer prompt."""
    reasoner_response_prefix = "\\boxed{"
    """Every answer starts ``\\boxed{``: prefilled, so the Reasoner decodes only the digits, ``}`` and EOS."""

    def __init__(self) -> None:
        self.levels: list[str] = [s.name for s in LEVEL_SPECS]

    # --- structure and answers

    @property
    def has_oracle(self) -> bool:
        return True

    def level_of(self, problem: str) -> str | None:
        """The level of ``problem`` (surrounding whitespace ignored), or None if it is in no family."""
        return level_of_tree(parse_expression(problem.strip()))

    def answer(self, problem: str) -> str | None:
        """The exact answer of an in-family problem as a string, else None."""
        tree = parse_expression(problem.strip())
        if level_of_tree(tree) is None:
            return None
        return str(evaluate_tree(tree))  # type: ignore[arg-type]

    def oracle(self, card: TaskCard) -> str | None:
        """The exact answer to the card's problem when it is a problem of a known level family, else None."""
        return self.answer(ProblemPayload.of(card).problem)

    def is_heldout(self, problem: str) -> bool:
        """Whether ``problem`` falls in the held-out hash bucket (keyed on its canonical form)."""
        key = canonical_problem(problem.strip()).encode()
        digest = hashlib.sha256(_HELDOUT_SALT + key).digest()
        return int.from_bytes(digest[:8], "big") % 100 < HELDOUT_PERCENT

    def reject_reason(self, card: TaskCard) -> str | None:
        """``heldout_problem`` when the card's problem is held out (so held-out stays unseen), else None."""
        return "heldout_problem" if self.is_heldout(ProblemPayload.of(card).problem) else None

    def factors(self, problem: str) -> dict[str, str]:
        """Categorical labels computed from the problem text itself; {} when it does not parse.

        Keys: ``level`` (only for in-family problems), ``op`` (add/sub/mul, or
        the sorted ops joined by ``+`` for compound expressions), ``digits``
        (operand widths, e.g. ``3x1``), ``operands``, ``parens``,
        ``answer_digits`` and, for binary problems, ``carries`` (carries,
        borrows or partial-product carries; ``3+`` for three or more).
        """
        tree = parse_expression(problem.strip())
        if tree is None:
            return {}
        nodes = _walk(tree)
        ops = sorted({_OP_NAMES[n.op] for n in nodes if isinstance(n, BinOp)})
        nums = [n for n in nodes if isinstance(n, Num)]
        value = evaluate_tree(tree)
        out = {
            "op": "+".join(ops) or "num",
            "digits": "x".join(str(len(n.text)) for n in nums),
            "operands": str(len(nums)),
            "parens": str(sum(isinstance(n, Paren) for n in nodes)),
            "answer_digits": str(len(str(abs(value)))),
        }
        shape = _binary(tree)
        if shape is not None:
            op, a, b = shape
            if op == "+":
                out["carries"] = _bucket(column_carries(a.value, b.value))
            elif op == "-" and a.value >= b.value:
                out["carries"] = _bucket(column_borrows(a.value, b.value))
            elif op == "*":  # longer operand on top, as in _carries
                out["carries"] = _bucket(product_carries(max(a.value, b.value), min(a.value, b.value)))
        level = level_of_tree(tree)
        if level is not None:
            out["level"] = level
        return out

    def card_factors(self, card: TaskCard) -> dict[str, str]:
        """``factors`` of the card's problem: computed from the problem, never from the model's claims."""
        return self.factors(ProblemPayload.of(card).problem)

    # --- the factor space (EvoSyn)

    builtin_factors: tuple[str, ...] = ("level",)
    """Factors the space starts with; the rest of :meth:`factor_defs` are the Reflector's candidates."""

    def factor_defs(self) -> list[FactorDef]:
        """Every factor this world can compute, built-in first (see :data:`ARITH_FACTORS`)."""
        return list(ARITH_FACTORS)

    def sample_any(self, rng: random.Random) -> str:
        """A training problem of a uniformly drawn level (to enumerate feasible cells)."""
        return self.sample_problem(rng, rng.choice(self.levels))

    # --- prompts and formats

    def synthesizer_prompt(self, report: object, target: Cell | None = None) -> str:
        """``<compact report>\\n[DO:<cell>\\n]CARD:`` (under ~110 chars) for the tiny char Synthesizer.

        ``report`` is a ``CapabilityReport`` (its ``render_compact`` is used) or
        already-rendered text; newlines are flattened so the report stays one line.
        ``target`` is the Designer's cell for this context (``DO:level=L8,carries=0``),
        written in this world's factor order whatever order the space lists it in.
        """
        return compact_synthesizer_prompt(report, self.report_budget, target, [d.name for d in ARITH_FACTORS])

    def reasoner_prompt(self, problem: str) -> str:
        """``Q:<problem>\\nA:``; the Reasoner answers with ``\\boxed{<int>}`` (``\\boxed{`` is prefilled)."""
        return f"Q:{problem}\nA:"

    def synthesizer_system_prompt(self) -> str | None:
        """None: the tiny char models have no chat template and see no system prompt."""
        return None

    def reasoner_system_prompt(self) -> str | None:
        """None: the tiny char models have no chat template and see no system prompt."""
        return None

    def format_reasoner_answer(self, answer: str | int) -> str:
        """The Reasoner's target completion for an answer, e.g. ``\\boxed{2082}``."""
        return "\\boxed{" + str(answer) + "}"

    def format_card(self, problem: str, level: str, answer: str | int) -> str:
        """The compact JSON card the Synthesizer learns to write (all nine fields non-empty).

        Built so a tiny char model never has to copy text over a long distance:
        the fields before ``difficulty_estimate`` are constants, so the level is
        its first free choice and the problem follows right after it; the
        solution is ``=<answer>`` (its last number is the final answer), which
        ``final_answer`` repeats a few characters later.
        """
        values = {
            "teaching_intent": "arith",
            "target_reasoning_style": "exact",
            "expected_reasoner_weakness": "digits",
            "difficulty_estimate": level,
            "problem": problem,
            "solution": f"={answer}",
            "final_answer": str(answer),
            "verification_notes": "x",
            "novelty_notes": "x",
        }
        return json.dumps({k: values[k] for k in CARD_FIELDS}, separators=(",", ":"))

    # --- generators

    def sample_problem(self, rng: random.Random, level: str) -> str:
        """A uniformly random training problem of ``level``; never a held-out one."""
        spec = _SPEC_BY_NAME.get(level)
        if spec is None:
            raise ValueError(f"unknown level {level!r}; known: {', '.join(self.levels)}")
        while True:  # 90 % of draws are accepted, so this ends after ~1.1 draws on average
            problem = _raw_problem(rng, spec)
            if not self.is_heldout(problem):
                return problem

    def static_cards(self, rng: random.Random, n: int) -> list[str]:
        """``n`` correct card texts with levels drawn uniformly: the ``static`` baseline's source."""
        out = []
        for _ in range(n):
            level = rng.choice(self.levels)
            problem = self.sample_problem(rng, level)
            out.append(self.format_card(problem, level, str(evaluate(problem))))
        return out

    def heldout(self, n_per_level: int, seed: int) -> list[HeldoutItem]:
        """``n_per_level`` distinct held-out problems per level (group = level), deterministic in ``seed``."""
        rng = random.Random(seed)
        items: list[HeldoutItem] = []
        for spec in LEVEL_SPECS:
            seen: set[str] = set()
            attempts = 0
            while len(seen) < n_per_level:
                attempts += 1
                if attempts > 200 * max(1, n_per_level):
                    raise ValueError(f"level {spec.name}: cannot draw {n_per_level} distinct held-out problems")
                problem = _raw_problem(rng, spec)
                if problem in seen or not self.is_heldout(problem):
                    continue
                seen.add(problem)
                items.append(HeldoutItem(problem=problem, answer=str(evaluate(problem)), group=spec.name))
        return items


# ----------------------------------------------------------------- factor extractors


def _binary_values(problem: str) -> tuple[str, int, int, int, int] | None:
    """``(op, a, b, width_a, width_b)`` of an in-family problem, else None."""
    tree = parse_expression(problem.strip())
    if level_of_tree(tree) is None:
        return None
    op, a, b = _binary(tree)  # type: ignore[misc]
    return op, a.value, b.value, len(a.text), len(b.text)


def _level(problem: str) -> str | None:
    return level_of_tree(parse_expression(problem.strip()))


def _carries(problem: str) -> str | None:
    v = _binary_values(problem)
    if v is None:
        return None
    op, a, b = v[:3]
    if op == "*":  # the long-multiplication layout: the longer operand on top, so 6*347 is 347*6
        a, b = max(a, b), min(a, b)
    n = column_carries(a, b) if op == "+" else column_borrows(a, b) if op == "-" else product_carries(a, b)
    return _bucket(n)


def _answer_digits(problem: str) -> str | None:
    tree = parse_expression(problem.strip())
    if level_of_tree(tree) is None:
        return None
    return str(len(str(abs(evaluate_tree(tree)))))  # type: ignore[arg-type]


def _zeros(problem: str) -> str | None:
    v = _binary_values(problem)
    if v is None:
        return None
    return "yes" if "0" in f"{v[1]}{v[2]}" else "no"


def _lead(problem: str) -> str | None:
    v = _binary_values(problem)
    if v is None:
        return None
    d = int(str(max(v[1], v[2]))[0])
    return "1-3" if d <= 3 else "4-6" if d <= 6 else "7-9"


def _ones(problem: str) -> str | None:
    v = _binary_values(problem)
    if v is None:
        return None
    return "low" if min(v[1], v[2]) % 10 < 5 else "high"


ARITH_FACTORS: tuple[FactorDef, ...] = (
    FactorDef("level", tuple(s.name for s in LEVEL_SPECS), _level, "structural level L1..L11 (op and operand widths)"),
    FactorDef("carries", ("0", "1", "2", "3+"), _carries,
              "carries (+), borrows (-) or non-zero partial-product carries (*) of the column algorithm"),
    FactorDef("answer_digits", ("1", "2", "3", "4", "5", "6"), _answer_digits, "digits of the exact answer"),
    FactorDef("zeros", ("no", "yes"), _zeros, "whether an operand contains the digit 0"),
    FactorDef("lead", ("1-3", "4-6", "7-9"), _lead, "leading digit of the larger operand"),
    FactorDef("ones", ("low", "high"), _ones, "ones digit (0-4 or 5-9) of the smaller operand"),
)
"""The arithmetic world's factors: ``level`` is built in; the others are the Reflector's candidates.

Measured on the shipped warm-start Reasoner (120 problems per level, 8 samples at T = 1):
carries explains failure well beyond the level (3d*1d: 0.64 success with no carry, ~0 with
any), answer_digits overlaps with it, zeros / ones weakly, lead hardly at all."""
