"""The values the fast path understands, and parsing normalised text into them.

Numbers (exact ``Fraction`` values, with the written precision of decimals), ±∞, division by zero,
choices, letters, short words, base-n numerals, tuples, sets, intervals, matrices, ``x = value``
equations and the solution sets of linear relations in one variable. Parsing is bounded (nesting,
exponents, powers) and anything it cannot read is :class:`_Opaque` or ``None``, for math-verify.
"""

from __future__ import annotations

import functools
import math
import re
from dataclasses import dataclass
from fractions import Fraction
from typing import Union

from synco.grading.normalise import _MATH_NAMES


_MAX_DEPTH = 12  # nesting the fast path follows before it defers to math-verify
_MAX_EXP = 400  # largest |exponent| of 10 the fast path evaluates
_MAX_POW_BITS = 20000  # largest integer power (in bits) the fast path evaluates


# ---------------------------------------------------------------------------
# Fast-path values
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class _Num:
    """A real number; ``half_ulp`` is set for written decimals (inexact), None for integers and fractions."""

    value: Fraction
    half_ulp: Fraction | None = None
    percent_raw: Fraction | None = None  # the number before "%" when the answer had a percent sign
    digits: int | None = None  # significant digits of a written decimal (2.6667: 5), None when exact


@dataclass(frozen=True)
class _Inf:
    sign: int


@dataclass(frozen=True)
class _DivZero:
    """A literal fraction with denominator zero: never equal to anything else."""


@dataclass(frozen=True)
class _Choice:
    letter: str


@dataclass(frozen=True)
class _Letter:
    """A lone letter: a variable, or a choice written in lower case."""

    letter: str


@dataclass(frozen=True)
class _Word:
    text: str


@dataclass(frozen=True)
class _BaseNum:
    digits: str
    base: int


@dataclass(frozen=True)
class _Opaque:
    """An item inside a list, matrix or equation that only math-verify can read."""

    text: str


@dataclass(frozen=True)
class _Seq:
    """A bracketed or bare comma list; ``open``/``close`` are ``(``, ``[``, ``{`` ... or ``""`` for a bare list."""

    open: str
    close: str
    items: tuple["_Value", ...]
    decimal: "_Num | None" = None  # "3,5": also the number 3.5 written with a decimal comma


@dataclass(frozen=True)
class _Matrix:
    rows: tuple[tuple["_Value", ...], ...]


@dataclass(frozen=True)
class _Equation:
    lhs: str
    rhs: "_Value"


@dataclass(frozen=True)
class _Span:
    """An interval of the real line; an infinite end is never closed."""

    lo: "_Num | _Inf"
    lo_closed: bool
    hi: "_Num | _Inf"
    hi_closed: bool


@dataclass(frozen=True)
class _Region:
    """The solution set of a relation in one variable: ``x \\ge 5``, ``-2 \\le x < 7``, ``x \\ne 3``, ``-x \\ge -1``.

    Written relations that mean the same set are one region: ``x \\ge 5`` = ``5 \\le x``,
    ``-x \\ge -1`` = ``x \\le 1`` (multiplying by -1 flips the sign), ``2x + 1 > 5`` = ``x > 2``.
    """

    var: str
    spans: tuple[_Span, ...]


_Value = Union[_Num, _Inf, _DivZero, _Choice, _Letter, _Word, _BaseNum, _Seq, _Matrix, _Equation, _Region, _Opaque]

_DEC = r"(?:\d+(?:\.\d*)?|\.\d+)"
_NUMBER = re.compile(
    r"^(?P<sign>[-+]?)\s*(?P<mant>[1-9]\d{0,2}(?:,\d{3})+(?:\.\d*)?|[1-9]\d{0,2}(?: \d{3})+(?:\.\d*)?|" + _DEC + r")"
    r"(?:[eE](?P<e1>[-+]?\d{1,6})|\s*(?:\\times|\\cdot|\*|x)\s*10\s*\^\s*(?:\{\s*(?P<e2>[-+]?\s*\d{1,6})\s*\}|(?P<e3>[-+]?\d{1,6})))?"
    r"\s*(?P<pct>%)?$"
)
_FRAC_SLASH = re.compile(
    r"^(?P<sign>[-+]?)\s*(?:\(\s*(?P<n>" + _DEC + r")\s*\)|(?P<n2>" + _DEC + r"))\s*/\s*"
    r"(?:\(\s*(?P<d>" + _DEC + r")\s*\)|(?P<d2>" + _DEC + r"))\s*(?P<pct>%)?$"
)
_RATIO = re.compile(r"^(?P<a>\d+)\s*:\s*(?P<b>\d+)$")
_FRAC_TEX = re.compile(
    r"^(?P<sign>[-+]?)\s*\\frac\s*\{\s*(?P<ns>[-+]?)\s*(?P<n>" + _DEC + r")\s*\}\s*\{\s*(?P<ds>[-+]?)\s*(?P<d>"
    + _DEC + r")\s*\}\s*(?P<pct>%)?$"
)
_MIXED = re.compile(
    r"^(?P<sign>[-+]?)\s*(?P<w>\d+)(?:\s*\\frac\s*\{\s*(?P<n1>\d+)\s*\}\s*\{\s*(?P<d1>\d+)\s*\}|\s+(?P<n2>\d+)\s*/\s*(?P<d2>\d+))$"
)
_REPEATING = re.compile(
    r"^(?P<sign>[-+]?)\s*(?P<int>\d*)\.(?P<fixed>\d{0,20})\\overline\s*\{\s*(?P<period>\d{1,20})\s*\}$"
)
"""A repeating decimal, exactly: ``0.\\overline{3}`` = 1/3, ``0.1\\overline{6}`` = 1/6."""
_POWER = re.compile(r"^(?P<sign>[-+]?)\s*(?P<b>\d+)\s*\^\s*(?:\{\s*(?P<e1>[-+]?\d{1,6})\s*\}|(?P<e2>[-+]?\d{1,6}))$")
_BASE = re.compile(r"^(?P<d>[0-9A-Za-z]+)_\s*(?:\{\s*(?P<b1>[1-9]\d*)\s*\}|(?P<b2>[1-9]\d*))$")  # 1_05 is no base
_INF = re.compile(r"(?i)^(?P<sign>[-+]?)\s*(?:\\infty|\\inf|infinity|inf|oo)$")
_CHOICE_LABEL = re.compile(r"\(\s*[A-Ja-j]\s*\)")
_CHOICE = re.compile(r"^(?:\(\s*(?P<a>[A-Ja-j])\s*\)(?:\s+.*)?|(?P<b>[A-J])\)?)$", re.DOTALL)
_WORD = re.compile(r"^[A-Za-z]+(?:['-][A-Za-z]+)*(?: [A-Za-z]+(?:['-][A-Za-z]+)*)*$")
_MATRIX = re.compile(r"^\\begin\{(?P<env>[pbB]?matrix|smallmatrix)\}(?P<body>.*)\\end\{(?P=env)\}$", re.DOTALL)
_IDENT = re.compile(r"^(?:[A-Za-z]|\\[A-Za-z]+)(?:_\s*(?:\{[A-Za-z0-9]+\}|[A-Za-z0-9]))?$")
_FUNC_LHS = re.compile(r"^(?:[A-Za-z]|\\[A-Za-z]+)(?:\^\{?-1\}?|')*\s*\(\s*[^()=]{1,40}\)$")
"""``f(x)``, ``g(2)``, ``P(A)``, ``f^{-1}(x)`` on the left of an equation: it names what the right side gives."""
_IDENT_TUPLE = re.compile(r"^\(\s*[A-Za-z](?:\s*,\s*[A-Za-z])+\s*\)$")
"""``(x, y)`` on the left of ``(x, y) = (2, -1)``: the answer is the tuple on the right."""
_OPENERS = (("\\{", "{"), ("\\langle", "("), ("(", "("), ("[", "["), ("{", "{"))
_CLOSERS = (("\\}", "}"), ("\\rangle", ")"), (")", ")"), ("]", "]"), ("}", "}"))


_OPEN_TOKENS = frozenset({"\\{", "\\langle", "(", "[", "{"})
_CLOSE_TOKENS = frozenset({"\\}", "\\rangle", ")", "]", "}"})


@functools.lru_cache(maxsize=8)
def _scan_pattern(seps: str) -> re.Pattern[str]:
    """Tokens that matter for bracket depth: escaped braces, angle brackets, other commands (skipped), brackets, separators."""
    extra = re.escape(seps) if seps else ""
    return re.compile(r"\\[{}]|\\langle|\\rangle|\\.|[()\[\]{}" + extra + "]", re.DOTALL)


def _scan(text: str, seps: str) -> tuple[list[tuple[int, int]], list[int]] | None:
    """Top-level separator positions and the index where each bracket level closes; None if brackets do not balance.

    Returns (separators as (start, end) spans, end positions of depth-1 groups).
    ``\\{ \\} \\langle \\rangle ( ) [ ] { }`` all count as brackets (intervals mix ``(`` and ``]``).
    """
    depth = 0
    spans: list[tuple[int, int]] = []
    closes: list[int] = []
    for m in _scan_pattern(seps).finditer(text):
        tok = m.group(0)
        if tok in _OPEN_TOKENS:
            depth += 1
        elif tok in _CLOSE_TOKENS:
            depth -= 1
            if depth < 0:
                return None
            if depth == 0:
                closes.append(m.end())
        elif depth == 0 and len(tok) == 1:
            spans.append((m.start(), m.end()))
    if depth != 0:
        return None
    return spans, closes


def _split_top(text: str, seps: str) -> list[str] | None:
    """Split on separators outside all brackets; None if brackets do not balance."""
    scanned = _scan(text, seps)
    if scanned is None:
        return None
    parts, start = [], 0
    for a, b in scanned[0]:
        parts.append(text[start:a])
        start = b
    parts.append(text[start:])
    return parts


def _bracket_group(text: str) -> tuple[str, str, str] | None:
    """(open, close, inner) when the whole text is one bracketed group such as ``(1, 2]`` or ``\\{1,2\\}``."""
    opener = next(((tok, kind) for tok, kind in _OPENERS if text.startswith(tok)), None)
    closer = next(((tok, kind) for tok, kind in _CLOSERS if text.endswith(tok)), None)
    if opener is None or closer is None:
        return None
    scanned = _scan(text, "")
    if scanned is None or not scanned[1] or scanned[1][0] != len(text):
        return None
    (otok, okind), (ctok, ckind) = opener, closer
    if (okind == "{") != (ckind == "}") or (otok == "\\langle") != (ctok == "\\rangle"):
        return None
    if otok in ("\\{", "{") and otok != ctok.replace("}", "{"):
        return None
    return okind, ckind, text[len(otok) : len(text) - len(ctok)]


def _decimal_number(sign: str, mant: str, exp: int, pct: bool) -> _Num | None:
    """A written decimal ``sign mant × 10^exp [%]`` with its precision."""
    if abs(exp) > _MAX_EXP:
        return None
    mant = mant.replace(",", "").replace(" ", "")
    whole, _, frac = mant.partition(".")
    digits = (whole or "0") + frac
    value = Fraction(int(digits), 10 ** len(frac)) * Fraction(10) ** exp
    inexact = "." in mant or exp != 0
    half_ulp = Fraction(1, 2) * Fraction(10) ** (exp - len(frac)) if inexact else None
    significant = len(digits.lstrip("0")) if inexact else None
    if sign == "-":
        value = -value
    if pct:
        return _Num(value / 100, half_ulp / 100 if half_ulp is not None else None, value)
    return _Num(value, half_ulp, digits=significant)


def _parse_number(text: str) -> _Num | _DivZero | None:
    """Numbers the fast path evaluates exactly: decimals, thousands, scientific, fractions, mixed numbers, small powers."""
    m = _NUMBER.match(text)
    if m:
        exp_text = m.group("e1") or m.group("e2") or m.group("e3") or "0"
        return _decimal_number(m.group("sign"), m.group("mant"), int(exp_text.replace(" ", "")), bool(m.group("pct")))
    m = _FRAC_SLASH.match(text) or _FRAC_TEX.match(text)
    if m:
        groups = m.groupdict()
        num = _decimal_number("", groups.get("n") or groups["n2"], 0, False)
        den = _decimal_number("", groups.get("d") or groups["d2"], 0, False)
        if num is None or den is None:
            return None
        if den.value == 0:
            return _DivZero()
        negatives = [m.group("sign"), m.groupdict().get("ns") or "", m.groupdict().get("ds") or ""].count("-")
        value = num.value / den.value * (-1 if negatives % 2 else 1)
        if m.group("pct"):
            return _Num(value / 100, None, value)
        return _Num(value)
    m = _MIXED.match(text)
    if m:
        n = int(m.group("n1") or m.group("n2"))
        d = int(m.group("d1") or m.group("d2"))
        if not 0 < n < d:
            return None  # "2 3/2" is not a mixed number; let math-verify decide
        value = int(m.group("w")) + Fraction(n, d)
        return _Num(-value if m.group("sign") == "-" else value)
    m = _REPEATING.match(text)
    if m:
        head, fixed, period = m.group("int") or "0", m.group("fixed"), m.group("period")
        value = Fraction(int(head)) + Fraction(int(fixed or "0"), 10 ** len(fixed))
        value += Fraction(int(period), (10 ** len(period) - 1) * 10 ** len(fixed))
        return _Num(-value if m.group("sign") == "-" else value)
    m = _POWER.match(text)
    if m:
        base, exp = int(m.group("b")), int(m.group("e1") or m.group("e2"))
        if abs(exp) * max(base.bit_length(), 1) > _MAX_POW_BITS:
            return None
        if base == 0 and exp < 0:
            return _DivZero()
        value = Fraction(base) ** exp
        return _Num(-value if m.group("sign") == "-" else value)
    return None


def _parse_value(text: str, was_text: bool = False, depth: int = 0) -> _Value | None:
    """The fast-path reading of a canonical answer, or None when only math-verify can read it.

    Inside lists, matrices and equations (``depth > 0``) unreadable parts become
    :class:`_Opaque` so the readable parts can still settle a comparison.
    """
    value = _read_value(text.strip(), was_text, depth) if depth <= _MAX_DEPTH else None
    if value is None and depth > 0:
        return _Opaque(text.strip())
    if isinstance(value, _Opaque) and depth == 0:
        return None
    return value


def _read_value(text: str, was_text: bool, depth: int) -> _Value | None:
    if not text:
        return None
    m = _CHOICE.match(text)
    if m:
        if m.group("a") and _CHOICE_LABEL.search(text, m.end("a") + 1):
            return _Opaque(text)  # "(A) (B)": two choices named, a hedge, not choice A
        return _Choice((m.group("a") or m.group("b")).upper())
    if len(text) == 1 and text.isalpha():
        return _Letter(text)
    m = _INF.match(text)
    if m:
        return _Inf(-1 if m.group("sign") == "-" else 1)
    number = _parse_number(text)
    if number is not None:
        return number
    m = _RATIO.match(text)
    if m:  # a ratio or a clock time: compared as the written pair, never as a quotient
        return _Seq(":", "", (_Num(Fraction(int(m.group("a")))), _Num(Fraction(int(m.group("b"))))))
    m = _BASE.match(text)
    if m and re.search(r"\d", m.group("d")):
        base = int(m.group("b1") or m.group("b2"))
        digits = m.group("d").upper().lstrip("0") or "0"
        if 2 <= base <= 36:
            try:
                int(digits, base)
            except ValueError:
                return None
            return _BaseNum(digits, base)
        return None
    comma = _decimal_comma(text)
    if comma is not None:
        return comma
    m = _MATRIX.match(text)
    if m:
        return _parse_matrix(m.group("body"), depth)
    group = _bracket_group(text)
    if group is not None:
        return _parse_group(group, depth)
    parts = _split_top(text, ",;")
    if parts is not None and len(parts) > 1:
        if any(not p.strip() for p in parts):
            return None
        return _Seq("", "", tuple(_parse_value(p, False, depth + 1) for p in parts))  # type: ignore[misc]
    eq = _parse_equation(text, depth)
    if eq is not None:
        return eq
    if _REL_OP.search(text):
        return _parse_relation(text)
    if _WORD.match(text):
        tokens = text.lower().split()
        if len(tokens) <= 4 and not any(t in _MATH_NAMES for t in tokens):
            if was_text or any(len(t) >= 3 for t in tokens) or text.lower() in ("no", "yes"):
                return _Word(" ".join(t for t in tokens if t not in ("the", "a", "an")) or " ".join(tokens))
    return None


_DECIMAL_COMMA = re.compile(r"^(?P<sign>[-+]?)(?P<int>\d{1,3}(?:[ .]\d{3})+|\d+),(?P<frac>\d+)\s*(?P<pct>%)?$")


def _decimal_comma(text: str) -> _Num | _Seq | None:
    """A number written with a decimal comma: ``1 234 567,5`` and ``1.000,99`` are one number; ``3,5``,
    ``1000,99`` and ``0,111`` (no valid thousands grouping) are 3.5, 1000.99, 0.111 against a number
    and the two-item list they also spell against a list (see :func:`_same`)."""
    m = _DECIMAL_COMMA.match(text)
    if m is None:
        return None
    sign, whole, frac = m.group("sign"), m.group("int"), m.group("frac")
    number = _decimal_number(sign, whole.replace(" ", "").replace(".", "") + "." + frac, 0, bool(m.group("pct")))
    if number is None or " " in whole or "." in whole or m.group("pct"):
        return number
    return _Seq("", "", (_Num(Fraction(int(sign + whole))), _Num(Fraction(int(frac)))), number)


_REL_OP = re.compile(r"\\(?:le|ge|ne)(?![A-Za-z])|<|>")
_GREEK_VAR = (
    r"\\(?:alpha|beta|gamma|delta|theta|vartheta|lambda|mu|nu|xi|rho|sigma|tau|phi|varphi|chi|psi|omega|kappa|eta|zeta)"
    r"(?![A-Za-z])"
)
_VAR_TERM = re.compile(r"^(?P<coef>.*?)\s*(?:\\cdot|\\times|\*)?\s*(?P<var>[A-Za-z]|" + _GREEK_VAR + r")$", re.DOTALL)
_VAR_OVER = re.compile(
    r"^(?:\\frac\s*\{(?P<num>[^{}]*)\}\s*\{(?P<den>[^{}]+)\}|(?P<num2>[^/]+)/(?P<den2>[^/]+))$", re.DOTALL
)
_MAX_TERMS = 20


def _signed_terms(text: str) -> list[tuple[int, str]] | None:
    """``2x - \\frac{1}{2} + 3`` as [(1, "2x"), (-1, "\\frac{1}{2}"), (1, "3")]: top-level + and - split, signs kept.

    A sign after ``^``, ``_``, ``*``, ``/`` or an exponent's ``e`` belongs to what follows; None if brackets
    do not balance.
    """
    terms: list[tuple[int, str]] = []
    depth, sign, start = 0, 1, 0
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c == "\\":
            i += 2
            continue
        if c in "{([":
            depth += 1
        elif c in "})]":
            depth -= 1
            if depth < 0:
                return None
        elif c in "+-" and depth == 0:
            before = text[start:i].strip()
            prev = before[-1:] if before else ""
            if before and prev not in "^_*/" and not (prev in "eE" and before[:-1][-1:].isdigit()):
                terms.append((sign, before))
                sign, start = (1 if c == "+" else -1), i + 1
            elif not before:
                sign, start = (sign if c == "+" else -sign), i + 1
        i += 1
    last = text[start:].strip()
    if depth != 0 or not last or len(terms) >= _MAX_TERMS:
        return None
    terms.append((sign, last))
    return terms


def _plain_number(text: str) -> _Num | None:
    """A number or fraction without a percent sign (``2``, ``0.5``, ``\\frac{3}{2}``), else None."""
    n = _parse_number(text.strip())
    return n if isinstance(n, _Num) and n.percent_raw is None else None


def _var_term(term: str) -> tuple[str, Fraction] | None:
    """(variable, coefficient) of a linear term: ``x``, ``2x``, ``\\frac{1}{2} x``, ``3 \\cdot y``, ``\\frac{x}{2}``."""
    over = _VAR_OVER.match(term)
    if over is not None:
        top, bottom = over.group("num") or over.group("num2"), over.group("den") or over.group("den2")
        inner = _var_term(top.strip()) if top is not None else None
        den = _plain_number(bottom) if bottom is not None else None
        if inner is None or den is None or den.value == 0:
            return None
        return inner[0], inner[1] / den.value
    m = _VAR_TERM.match(term)
    if m is None or m.group("var") in ("e", "i"):
        return None
    head = m.group("coef").strip()
    if not head:
        return m.group("var"), Fraction(1)
    coef = _plain_number(head)
    return (m.group("var"), coef.value) if coef is not None else None


def _linear(side: str) -> tuple[str | None, Fraction, _Num] | None:
    """``side`` as ``p * var + q``: (var or None, p, q as a number). A lone written number keeps its precision."""
    terms = _signed_terms(side)
    if terms is None:
        return None
    var: str | None = None
    p, q = Fraction(0), Fraction(0)
    constants: list[_Num] = []
    for sign, term in terms:
        number = _plain_number(term)
        if number is not None:
            q += sign * number.value
            constants.append(number if sign > 0 else _Num(-number.value, number.half_ulp, digits=number.digits))
            continue
        found = _var_term(term)
        if found is None or (var is not None and found[0] != var):
            return None
        var, p = found[0], p + sign * found[1]
    constant = constants[0] if len(constants) == 1 and len(terms) == 1 else _Num(q)
    return var, p, constant


_FULL_LINE = _Span(_Inf(-1), False, _Inf(1), False)


def _order_key(v: "_Num | _Inf") -> Fraction | float:
    return v.value if isinstance(v, _Num) else math.inf * v.sign


def _constraint(op: str, bound: _Num) -> list[_Span]:
    """The set where ``var op bound`` holds."""
    if op == "\\ne":
        return [_Span(_Inf(-1), False, bound, False), _Span(bound, False, _Inf(1), False)]
    if op in ("<", "\\le"):
        return [_Span(_Inf(-1), False, bound, op == "\\le")]
    return [_Span(bound, op == "\\ge", _Inf(1), False)]


def _intersect(a: _Span, b: _Span) -> _Span | None:
    """The common part of two intervals, or None when they do not meet."""
    ka, kb = _order_key(a.lo), _order_key(b.lo)
    if ka != kb:
        lo, lo_closed = (a.lo, a.lo_closed) if ka > kb else (b.lo, b.lo_closed)
    else:
        lo, lo_closed = a.lo, a.lo_closed and b.lo_closed
    ka, kb = _order_key(a.hi), _order_key(b.hi)
    if ka != kb:
        hi, hi_closed = (a.hi, a.hi_closed) if ka < kb else (b.hi, b.hi_closed)
    else:
        hi, hi_closed = a.hi, a.hi_closed and b.hi_closed
    klo, khi = _order_key(lo), _order_key(hi)
    if klo > khi or (klo == khi and not (lo_closed and hi_closed)):
        return None
    return _Span(lo, lo_closed, hi, hi_closed)


_FLIPPED = {"<": ">", ">": "<", "\\le": "\\ge", "\\ge": "\\le", "\\ne": "\\ne"}


def _parse_relation(text: str) -> _Region | None:
    """A chain of linear relations in one variable (``x \\ge 5``, ``-2 \\le x \\le 7``, ``2x + 1 > 5``) as a set.

    Each link ``L op R`` becomes ``p x + q op 0`` and then ``x op' -q/p``, the relation flipped when ``p < 0``;
    the links' sets are intersected. None (math-verify decides) for several variables, non-linear sides,
    a link without the variable, or a system (``x > 1, y < 2``).
    """
    parts, ops, pos = [], [], 0
    for m in _REL_OP.finditer(text):
        parts.append(text[pos : m.start()])
        ops.append(m.group(0))
        pos = m.end()
    parts.append(text[pos:])
    if len(parts) > 5:
        return None
    for part in parts:
        items = _split_top(part, ",;")
        if not part.strip() or items is None or len(items) > 1:
            return None
    sides = [_linear(p) for p in parts]
    if any(side is None for side in sides):
        return None
    names = {side[0] for side in sides if side is not None and side[0] is not None}
    if len(names) != 1:
        return None
    var = names.pop()
    spans = [_FULL_LINE]
    for op, left, right in zip(ops, sides, sides[1:]):
        assert left is not None and right is not None
        p = (left[1] if left[0] else 0) - (right[1] if right[0] else 0)
        if p == 0:
            return None
        if left[0] and left[1] == 1 and left[2].value == 0 and not right[0]:  # x op c: keep c as written
            bound, rel = right[2], op
        elif right[0] and right[1] == 1 and right[2].value == 0 and not left[0]:  # c op x
            bound, rel = left[2], _FLIPPED[op]
        else:
            bound, rel = _Num((right[2].value - left[2].value) / p), op if p > 0 else _FLIPPED[op]
        spans = [c for a in spans for b in _constraint(rel, bound) if (c := _intersect(a, b)) is not None]
        if not spans:
            return None
    spans.sort(key=lambda sp: (_order_key(sp.lo), not sp.lo_closed))
    return _Region(var, tuple(spans))


def _parse_group(group: tuple[str, str, str], depth: int) -> _Value | None:
    """A bracketed group: a tuple, interval or set, or plain grouping parentheses around one value."""
    open_kind, close_kind, inner = group
    parts = _split_top(inner, ",;")
    if parts is None:
        return None
    if len(parts) == 1 and open_kind != "{":
        if open_kind == "(" and close_kind == ")" or open_kind == "[" and close_kind == "]":
            return _parse_value(inner, False, depth + 1)
        return None
    if any(not p.strip() for p in parts):
        return None
    return _Seq(open_kind, close_kind, tuple(_parse_value(p, False, depth + 1) for p in parts))  # type: ignore[misc]


def _parse_matrix(body: str, depth: int) -> _Matrix | None:
    """``\\begin{pmatrix} a & b \\\\ c & d \\end{pmatrix}`` with fast-path cells."""
    rows = [r for r in re.split(r"\\\\", body) if r.strip()]
    parsed: list[tuple[_Value, ...]] = []
    for row in rows:
        cells = row.split("&")
        if any(not c.strip() for c in cells):
            return None
        parsed.append(tuple(_parse_value(c, False, depth + 1) for c in cells))  # type: ignore[misc]
    if not parsed or len({len(r) for r in parsed}) != 1:
        return None
    return _Matrix(tuple(parsed))


def _parse_equation(text: str, depth: int) -> _Equation | None:
    """``x = value`` or ``x \\in value`` with a plain variable on the left."""
    m = re.search(r"(?<![<>!=\\])=(?!=)|\\in(?![A-Za-z])", text)
    if m is None:
        return None
    lhs, rhs = text[: m.start()].strip(), text[m.end() :].strip()
    if m.group(0) == "=" and _IDENT.match(rhs) and not _IDENT.match(lhs):  # "5 = t" is "t = 5"
        lhs, rhs = rhs, lhs
    if not (_IDENT.match(lhs) or _IDENT_TUPLE.match(lhs)) or re.search(r"(?<![<>!=\\])=(?!=)", rhs):
        return None
    if not rhs:
        return None
    value = _parse_value(rhs, False, depth + 1)
    if value is None or isinstance(value, _Equation):
        return None
    return _Equation(re.sub(r"\s|\{|\}", "", lhs), value)
