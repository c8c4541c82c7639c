"""Comparing parsed values, and the rules on answer text that decide without math-verify.

:func:`_same` compares two values (exact numbers, a decimal against the exact value it rounds,
ordered and unordered sequences, matrices against vectors, solution regions, ``rel_tol``); the text
rules settle what the fast path must not pass on: decorated numbers (:func:`_decorated_number`), one side
of a reference equation, different variables, different bracket shapes, prose.
"""

from __future__ import annotations

import re
from fractions import Fraction

from synco.grading.normalise import _MATH_NAMES
from synco.grading.values import (
    _BaseNum,
    _bracket_group,
    _Choice,
    _DivZero,
    _Equation,
    _FUNC_LHS,
    _IDENT,
    _IDENT_TUPLE,
    _Inf,
    _Letter,
    _Matrix,
    _Num,
    _Opaque,
    _Region,
    _Seq,
    _Span,
    _split_top,
    _Value,
    _Word,
)


REL_TOL = Fraction(1, 10**6)
_RELATION_MARK = re.compile(
    r"[<>]|!=|\\(?:le|ge|leq|geq|leqslant|geqslant|lt|gt|ne|neq|in|notin|approx|subset|subseteq|supset|to)(?![A-Za-z])"
)


# ---------------------------------------------------------------------------
# Fast-path comparison
# ---------------------------------------------------------------------------


APPROX_DIGITS = 4
"""Inside a set, interval, tuple, matrix or relation, a written decimal with at least this many significant
digits equals an exact value it rounds from: ``(0.6, 2.6667]`` is ``(\\frac{3}{5}, \\frac{8}{3}]``."""


def _numbers_equal(a: _Num, b: _Num, tol: Fraction = Fraction(0), approx: bool = False) -> bool:
    """Exact for integers/fractions; a written decimal within 1e-6 relative and half a unit of its last digit.

    ``0.333333`` matches ``1/3`` (it is 1/3 rounded) but ``1000000.5`` does not match
    ``1000001``. Two written decimals must agree to the finer one's precision, so
    ``23634691.5 != 23634691.51`` although they differ by less than 1e-6 relative.
    A positive ``tol`` (the caller's ``rel_tol``) also accepts any two numbers within
    ``tol`` relative of the larger: ``1.6e-19`` equals ``1.602e-19`` at ``tol = 0.01``.
    ``approx`` (an entry of a compound answer) also accepts a decimal of at least
    :data:`APPROX_DIGITS` significant digits that is an exact value correctly rounded:
    ``2.6667`` for ``8/3``, never ``2.67`` or ``2.6666``.
    """
    if a.value == b.value:
        return True
    if tol and abs(a.value - b.value) <= tol * max(abs(a.value), abs(b.value)):
        return True
    if approx:
        for x, y in ((a, b), (b, a)):
            if (x.half_ulp is not None and y.half_ulp is None and (x.digits or 0) >= APPROX_DIGITS
                    and abs(x.value - y.value) <= x.half_ulp):
                return True
    ulps = [x.half_ulp for x in (a, b) if x.half_ulp is not None]
    if not ulps:
        return False
    diff = abs(a.value - b.value)
    return diff <= REL_TOL * max(abs(a.value), abs(b.value)) and diff <= min(ulps)


def _num_candidates(n: _Num) -> list[_Num]:
    """A number and, for ``p%``, also ``p`` itself (the percent sign dropped)."""
    if n.percent_raw is None:
        return [n]
    raw_ulp = n.half_ulp * 100 if n.half_ulp is not None else None
    return [n, _Num(n.percent_raw, raw_ulp)]


def _compare_numbers(a: _Num, b: _Num, tol: Fraction = Fraction(0), approx: bool = False) -> bool:
    if a.percent_raw is not None and b.percent_raw is not None:
        return _numbers_equal(a, b, tol, approx)
    return any(_numbers_equal(x, y, tol, approx) for x in _num_candidates(a) for y in _num_candidates(b))


def _compare_ordered(a: tuple[_Value, ...], b: tuple[_Value, ...], tol: Fraction = Fraction(0)) -> bool | None:
    """Entry by entry, in order (entries of a compound answer: decimals compare at :data:`APPROX_DIGITS`)."""
    if len(a) != len(b):
        return False
    verdicts = [_same(x, y, tol, approx=True) for x, y in zip(a, b)]
    if False in verdicts:
        return False
    return None if None in verdicts else True


def _exact_key(v: _Value) -> Fraction | None:
    """The value of an exact number without a percent sign (safe to compare by hashing), else None."""
    if isinstance(v, _Num) and v.half_ulp is None and v.percent_raw is None:
        return v.value
    return None


def _compare_unordered(a: tuple[_Value, ...], b: tuple[_Value, ...], tol: Fraction = Fraction(0)) -> bool | None:
    keys_a, keys_b = [_exact_key(x) for x in a], [_exact_key(y) for y in b]
    if not tol and None not in keys_a and None not in keys_b:  # with a tolerance, equal is not hashable
        return set(keys_a) == set(keys_b)
    if len(a) * len(b) > 4096:
        return None  # big mixed lists: leave them to math-verify's time-bounded check
    table = [[_same(x, y, tol, approx=True) for y in b] for x in a]
    if any(v is None for row in table for v in row):
        return None
    covers_a = all(any(row) for row in table)
    covers_b = all(any(table[i][j] for i in range(len(a))) for j in range(len(b)))
    return covers_a and covers_b


def _compare_seqs(a: _Seq, b: _Seq, tol: Fraction = Fraction(0)) -> bool | None:
    """Sets/bare lists unordered; tuples and intervals ordered and bracket-sensitive.

    A braced set never equals a bracketed pair or tuple, either way round: ``\\{1, 3\\}`` is not ``(1, 3)``,
    which is an open interval or an ordered pair, and neither is a set of two numbers. A bare list
    (``1, 3``) is read as the set or as the tuple the other side writes.
    """
    a_set, b_set = a.open in ("", "{"), b.open in ("", "{")
    if a_set and b_set:
        return _compare_unordered(a.items, b.items, tol)
    if a.open == "" or b.open == "":
        other = b if a.open == "" else a
        if other.open == "(" and other.close == ")":
            return _compare_ordered(a.items, b.items, tol)
        return None
    if (a.open, a.close) != (b.open, b.close):
        return False
    return _compare_ordered(a.items, b.items, tol)


def _compare_matrix_vector(m: _Matrix, s: _Seq, tol: Fraction = Fraction(0)) -> bool | None:
    """A one-row or one-column matrix against a parenthesised/bracketed tuple of the same entries."""
    if (s.open, s.close) not in (("(", ")"), ("[", "]")):
        return None
    if len(m.rows) == 1:
        flat = m.rows[0]
    elif all(len(r) == 1 for r in m.rows):
        flat = tuple(r[0] for r in m.rows)
    else:
        return None
    return _compare_ordered(flat, s.items, tol)


def _interval_spans(v: _Value) -> tuple[_Span, ...] | None:
    """An interval written as a bracketed pair (``[-2, 7)``, ``(-\\infty, 3]``) as spans; None for anything else."""
    if not isinstance(v, _Seq) or v.open not in "([" or v.close not in ")]" or not v.open or len(v.items) != 2:
        return None
    lo, hi = v.items
    if not isinstance(lo, (_Num, _Inf)) or not isinstance(hi, (_Num, _Inf)):
        return None
    return (_Span(lo, v.open == "[" and isinstance(lo, _Num), hi, v.close == "]" and isinstance(hi, _Num)),)


def _same_spans(a: tuple[_Span, ...], b: tuple[_Span, ...], tol: Fraction) -> bool:
    if len(a) != len(b):
        return False
    for x, y in zip(a, b):
        if (x.lo_closed, x.hi_closed) != (y.lo_closed, y.hi_closed):
            return False
        if not (_same(x.lo, y.lo, tol, approx=True) and _same(x.hi, y.hi, tol, approx=True)):
            return False
    return True


def _compare_region(a: _Value, b: _Value, tol: Fraction = Fraction(0)) -> bool:
    """A relation's solution set against another relation, ``x \\in`` an interval, or (reference only) an interval.

    ``-2 \\le x \\le 7`` equals ``x \\in [-2, 7]`` either way round, and a predicted ``[-2, 7]`` answers the
    reference ``-2 \\le x \\le 7``; a predicted inequality never answers a reference written as an interval
    (the question asked for interval notation). Different variables never match.
    """
    def as_region(v: _Value) -> tuple[str, tuple[_Span, ...]] | None:
        if isinstance(v, _Region):
            return v.var, v.spans
        if isinstance(v, _Equation) and _IDENT.match(v.lhs):
            spans = _interval_spans(v.rhs)
            return (v.lhs, spans) if spans is not None else None
        return None

    ra, rb = as_region(a), as_region(b)
    if ra is not None and rb is not None:
        return ra[0] == rb[0] and _same_spans(ra[1], rb[1], tol)
    if rb is not None and isinstance(b, _Region):
        spans = _interval_spans(a)
        return spans is not None and _same_spans(spans, rb[1], tol)
    return False


def _same(a: _Value, b: _Value, tol: Fraction = Fraction(0), approx: bool = False) -> bool | None:
    """True/False when the fast path is sure, None when math-verify must decide.

    ``a`` is the prediction and ``b`` the reference (a few rules read one way only: :func:`_listed_pair`,
    :func:`_compare_region`); ``tol`` is the caller's relative tolerance (0 = off); ``approx`` marks an entry
    of a compound answer (see :func:`_numbers_equal`).
    """
    if isinstance(a, _DivZero) or isinstance(b, _DivZero):
        return False
    if isinstance(a, _Word) or isinstance(b, _Word):
        return isinstance(a, _Word) and isinstance(b, _Word) and a.text == b.text
    if isinstance(a, _Choice) or isinstance(b, _Choice):
        other = b if isinstance(a, _Choice) else a
        mine = a if isinstance(a, _Choice) else b
        if isinstance(other, (_Choice, _Letter)):
            return other.letter.upper() == mine.letter  # type: ignore[union-attr]
        return False
    if isinstance(a, _Opaque) or isinstance(b, _Opaque):
        return None
    if isinstance(a, _Region) or isinstance(b, _Region):
        return _compare_region(a, b, tol)
    if isinstance(a, _Equation) and isinstance(b, _Equation):
        return _same(a.rhs, b.rhs, tol, approx) if a.lhs == b.lhs else False
    if isinstance(a, _Equation):
        return _same(a.rhs, b, tol, approx)
    if isinstance(b, _Equation):
        return _same(a, b.rhs, tol, approx)
    if isinstance(a, _Num) and isinstance(b, _Num):
        return _compare_numbers(a, b, tol, approx)
    if isinstance(a, _Seq) and isinstance(b, (_Num, _Inf)) or isinstance(b, _Seq) and isinstance(a, (_Num, _Inf)):
        seq, other = (a, b) if isinstance(a, _Seq) else (b, a)
        if seq.decimal is not None and isinstance(other, _Num):  # type: ignore[union-attr]
            return _compare_numbers(seq.decimal, other, tol, approx)  # type: ignore[union-attr]
        if len(seq.items) > 1:  # type: ignore[union-attr]
            return False  # "5,5" (5.5 with a decimal comma) is not 5; "1, 2" and "3:4" are no single number
    if isinstance(a, _Inf) and isinstance(b, _Inf):
        return a.sign == b.sign
    if isinstance(a, (_Num, _Inf)) and isinstance(b, (_Num, _Inf)):
        return False
    if isinstance(a, _BaseNum) or isinstance(b, _BaseNum):
        return _compare_base(a, b, tol, approx)
    if isinstance(a, _Letter) and isinstance(b, _Letter):
        return a.letter == b.letter
    if isinstance(a, _Letter) or isinstance(b, _Letter):
        letter, other = (a, b) if isinstance(a, _Letter) else (b, a)
        if isinstance(other, (_Num, _Inf)) and letter.letter not in "ei":  # type: ignore[union-attr]
            return False  # a variable is not a number (e and i may be constants: leave those to math-verify)
    if isinstance(a, _Seq) and isinstance(b, _Seq):
        return _compare_seqs(a, b, tol)
    if isinstance(a, _Matrix) and isinstance(b, _Matrix):
        if len(a.rows) != len(b.rows) or len(a.rows[0]) != len(b.rows[0]):
            return False
        return _compare_ordered(tuple(x for r in a.rows for x in r), tuple(x for r in b.rows for x in r), tol)
    if isinstance(a, _Matrix) and isinstance(b, _Seq):
        return _compare_matrix_vector(a, b, tol)
    if isinstance(b, _Matrix) and isinstance(a, _Seq):
        return _compare_matrix_vector(b, a, tol)
    return None


def _compare_base(pred: _Value, ref: _Value, tol: Fraction = Fraction(0), approx: bool = False) -> bool | None:
    """A base-n numeral, read one way on each side.

    The prediction is read as its value (``10_{3}`` answers ``3``, not ``10``); the reference may also be answered
    by its bare digits (a reference ``52_8`` accepts ``52``, the base left implicit, but not its decimal value 42).
    Two numerals compare by value (``52_8`` = ``0052_{8}`` = ``101010_2``).
    """
    if isinstance(pred, _BaseNum) and isinstance(ref, _BaseNum):
        return int(pred.digits, pred.base) == int(ref.digits, ref.base)
    if isinstance(pred, _BaseNum):
        if isinstance(ref, _Num):
            return _compare_numbers(_Num(Fraction(int(pred.digits, pred.base))), ref, tol, approx)
        return False if isinstance(ref, (_Letter, _Inf)) else None
    assert isinstance(ref, _BaseNum)
    if isinstance(pred, _Num):
        v = pred.value
        return v.denominator == 1 and v >= 0 and pred.half_ulp is None and str(v.numerator) == ref.digits
    if isinstance(pred, _Letter):
        return False
    return None


def _contains_opaque(value: _Value) -> bool:
    """Whether part of a value could only be read by math-verify."""
    if isinstance(value, _Opaque):
        return True
    if isinstance(value, _Seq):
        return any(_contains_opaque(v) for v in value.items)
    if isinstance(value, _Matrix):
        return any(_contains_opaque(v) for row in value.rows for v in row)
    if isinstance(value, _Equation):
        return _contains_opaque(value.rhs)
    return False


def _group_shape(text: str) -> tuple[str, str, int] | None:
    """(open, close, number of items) of a bracketed list like ``(-\\sqrt3, \\sqrt3]``; None if not one."""
    group = _bracket_group(text)
    if group is None:
        return None
    parts = _split_top(group[2], ",;")
    return None if parts is None else (group[0], group[1], len(parts))


def _shapes_differ(a: str, b: str) -> bool | None:
    """False when two lists differ in kind, brackets or length whatever their items are; else None (undecided)."""
    sa, sb = _group_shape(a), _group_shape(b)
    if sa is None or sb is None or sa[2] < 2 or sb[2] < 2:
        return None
    set_a, set_b = sa[0] == "{", sb[0] == "{"
    if set_a != set_b:
        return False
    if not set_a and ((sa[0], sa[1]) != (sb[0], sb[1]) or sa[2] != sb[2]):
        return False
    return None


_RELATION = re.compile(r"=|<|>|\\(?:le|ge|leq|geq|ne|neq|in|approx|sim|equiv|subset|subseteq|to)(?![A-Za-z])")
_FUNCTION_WORDS = re.compile(r"(?<![A-Za-z])(?:" + "|".join(sorted(_MATH_NAMES, key=len, reverse=True)) + r")(?![A-Za-z])")


def _free_letters(text: str) -> frozenset[str] | None:
    """Lower-cased Latin letters used as variables (not commands, function names, ``e``, ``i`` or an exponent ``E``).

    None for relations (``y = 2x``, ``x \\in [0, 1]``): math-verify compares their right-hand
    sides, so their letters say nothing on their own.
    """
    if _RELATION.search(text):
        return None
    t = re.sub(r"\\[A-Za-z]+", " ", _without_environments(text))
    t = _FUNCTION_WORDS.sub(" ", t)
    t = re.sub(r"(?<=\d)[eE](?=[-+]?\d)", " ", t)
    return frozenset(c.lower() for c in t if c.isascii() and c.isalpha() and c not in "ei")


def _variables_differ(pred_text: str, ref_text: str, a: _Value | None, b: _Value | None) -> bool | None:
    """False when one side is a number and the other uses variables, or the two use different variables."""
    la, lb = _free_letters(pred_text), _free_letters(ref_text)
    if la is None or lb is None:
        return None
    if isinstance(a, (_Num, _Inf)) or isinstance(b, (_Num, _Inf)):
        return False if (la or lb) else None
    if a is None and b is None and la != lb:
        return False
    return None


_PRIME_TEX = re.compile(
    r"\^\s*\{\s*(?:\\(?:prime|dprime|trprime)\s*)+\}|\^\s*\\(?:prime|dprime|trprime)(?![A-Za-z])"
    r"|\\(?:prime|dprime|trprime|backprime)(?![A-Za-z])"
)
_PRIME_RUN = re.compile("(\\S?)\\s*[\"'\u2019\u201d\u2032\u2033\u2034\u2035]+")
_ELLIPSIS = r"(?:\\(?:ldots|dots|cdots|dotsc|dotsb|dotso|mathellipsis)(?![A-Za-z])|\.{3,}|\u2026)"
_ELLIPSIS_ON_NUMBER = re.compile(r"[\d.})\]]\s*" + _ELLIPSIS + "|" + _ELLIPSIS + r"\s*\d")
def _equation_sides(text: str) -> tuple[str, str] | None:
    """(left, right) of one equation ``L = R`` (not a chain, relation, or system like ``x = 1, y = 2``), else None."""
    if _RELATION_MARK.search(text):
        return None
    parts = _split_top(text, "=")
    if parts is None or len(parts) != 2:
        return None
    for part in parts:
        items = _split_top(part, ",;")
        if not part.strip() or items is None or len(items) > 1:
            return None
    return parts[0].strip(), parts[1].strip()


def _one_side_of_equation(pred_text: str, ref_text: str) -> bool:
    """Whether the reference is an equation that is not an assignment (``7 = 11a + c``, ``a + 3z = 0``,
    ``x^2 + y^2 = 25``) and the prediction is no equation: then it is at best one side of it (``11a + c``,
    ``0``, ``25``), which states nothing. An assignment (``x = 5``, ``y = 2x + 3``, ``f(x) = x^2``) is answered
    by its value."""
    sides = _equation_sides(ref_text)
    if sides is None or any(p.match(sides[0]) for p in (_IDENT, _IDENT_TUPLE, _FUNC_LHS)) or _IDENT.match(sides[1]):
        return False
    return "=" not in pred_text


_NUMBER_DECORATION = re.compile(
    # a subscript on a numeral, group or bar, past spaces, empty groups and bars: 5_2, 5{}_2, 5\Big|_{2}, {}_{2}5
    # (a valid base numeral like 52_8 is read by the fast path before this is asked)
    r"(?:^|[\d.})\]|%!'])(?:\s|\{\s*\}|\\(?:vert|rvert|lvert|Vert|rVert|mid)(?![A-Za-z]))*_"
    r"|[_^]\s*\{\s*\}"  # an empty sub- or superscript: 5_{}, 5^{ }
    r"|(?<![_^\d])\d+\s+\d"  # digit groups apart that are not thousands (1 000 is read by the fast path): "10 00"
    r"|!\s*[\d.]"  # a factorial followed by digits: "1!000"
    r"|%\s*[\d.]"  # digits after a percent sign: "10%00"
)


def _decorated_number(text: str) -> bool:
    """Whether an answer the fast path could not read carries decorations math-verify reads as nothing.

    math-verify drops subscripts, primes and ellipses on numbers and multiplies digit groups
    written apart, so it equates ``1_000``, ``5_2``, ``5'``, ``2.5\\ldots`` with ``1``, ``5``,
    ``5``, ``2.5`` and ``10 00`` with ``0``: reward-hacking doors. Such answers are judged not
    equal (unless identical), never sent to math-verify. Primes after a letter (``f'(x)``,
    ``y''``) and ellipses inside lists (``1, 2, \\ldots, n``) are left alone.
    """
    if _NUMBER_DECORATION.search(text):
        return True
    t = _PRIME_TEX.sub("'", text)
    for m in _PRIME_RUN.finditer(t):
        if not m.group(1).isalpha():
            return True
    return _ELLIPSIS_ON_NUMBER.search(t) is not None


_ENVIRONMENT = re.compile(r"\\begin\s*\{array\}\s*\{[lcr|:\s]{1,40}\}|\\(?:begin|end)\s*\{[A-Za-z*]{1,20}\}")
"""``\\begin{pmatrix}``, ``\\end{array}``, ``\\begin{array}{cc}``: an environment's name (and column spec), not words."""


def _without_environments(text: str) -> str:
    """``text`` with environment names removed, so ``pmatrix`` / ``array`` count neither as words nor as variables."""
    return _ENVIRONMENT.sub(" ", text) if "\\" in text else text


def _is_prose(text: str) -> bool:
    """Sentences rather than maths: two or more ordinary words (not function names, not in capitals).

    Environment names are not words: a matrix (``\\begin{pmatrix}..\\end{pmatrix}``) is maths.
    """
    words = re.findall(r"(?<![\\A-Za-z])[A-Za-z][a-z]{2,}(?![A-Za-z])", _without_environments(text))
    return sum(1 for w in words if w.lower() not in _MATH_NAMES) >= 2
