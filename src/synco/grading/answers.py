"""Answer extraction and equivalence checking for Reasoner responses.

Two jobs:

* **Extraction** (:func:`extract_answer`, :func:`extract_answer_with_method`,
  :func:`boxed_answers`): find the final answer in a response, in one of two modes.
  Only the last :data:`MAX_SCAN_CHARS` characters of the visible part (after the
  last ``</think>``) are read, in linear time, so a response of megabytes of
  ``\\boxed{`` or spaces costs milliseconds. In both modes chat-template tokens
  (``<|im_end|>``, ``<|eot_id|>``, ``</s>``, ...) end the line they are on.

  - ``mode="reward"`` (the default; training rewards, strict): the last
    ``\\boxed{..}`` / ``\\fbox{..}``, else the last "final answer:" / "answer:"
    line with the answer alone on it (``Answer: 9 because ...`` is the answer
    "9 because ..."). The Reasoner is asked for one boxed answer, so the box wins
    over any later line, and nothing is guessed from prose. It refuses, on purpose,
    what eval mode reads: several different boxes are a hedge, not a list (the
    last box counts and :attr:`Extraction.hedged` is set), a later line never
    overrides a box, and there is no ``####`` marker, no text after an answer and no
    last-sentence fallback: a policy rewarded for any of these learns to spread
    guesses over boxes and prose.
  - ``mode="eval"`` (benchmark grading, what model outputs look like): an answer
    line may carry text after the answer (``The final answer is $10,455$. I hope it
    is correct.``, ``Answer: 9, since ...``), may lack the colon (``Answer $ 9 $``,
    ``**Answer** 9``: the answer must then start like maths) or be a heading
    (``## Final Answer`` over the answer line); GSM8K's ``#### 72`` is read (not a
    Markdown ``#### Step 1`` heading). Precedence: the last box, unless an answer
    line or ``####`` marker *after* it states an answer outright (maths, a choice,
    one word) -- a model that boxes 5 and then writes "Wait ... the final answer is
    6" answered 6; a remark after the box ("to double-check the answer: plug in
    ...") leaves the box. Boxes side by side with only separators between
    (``\\boxed{1}\\boxed{2}``, ``$x = \\boxed{2}$ or $x = \\boxed{-3}$``) are one
    answer, the list of their values; boxes with words between them are working,
    then the answer. With no box and no marker (an evaluation-only fallback, never
    used for rewards): a text that is one line of bare maths is the answer whole
    (``\\frac{10}{9}``, ``1 000``, ``2,74 $``, ``x >= 5``, ``7 = 11a+c``), else the last
    maths of the text: a ``$..$`` / ``\\(..\\)`` / ``\\[..\\]`` span or an undelimited
    run of numbers, commands, operators, variables and units (``... so she has 18
    apples left.`` -> 18, ``She walks 3\\frac{1}{2} miles.`` -> ``3\\frac{1}{2} miles``,
    never the ``2``). Of an equation the stated side is kept (:func:`_final_side`:
    ``3 + 4 = 7`` -> 7, but ``x = 5``, ``m + n = 80`` and ``7 = 11a + c`` stay whole);
    an answer followed by a qualifier ("$-4$ at $x = 2$", "..., which is about 0.43")
    is the answer before it; answers listed with commas and "and" (spans also with
    "or": ``$x = 2$ or $x = -3$``) are one list; alternatives ("5 or 6") are no answer. Gold answers go through the same
    reading, so a gold equation, relation, set or interval stays whole.
  - ``boxed="all"`` (either mode; default ``"last"``): for benchmarks that box
    every solution one by one, the answer is the unordered collection of the
    distinct boxed answers (``\\boxed{2}`` ... ``\\boxed{-3}`` -> ``2, -3``, which
    matches ``-3, 2`` and ``\\{-3, 2\\}``). With ``"last"`` only the last box counts
    and different boxes are hedging (:attr:`Extraction.hedged`).
* **Checking** (:class:`AnswerChecker`, :func:`answers_match`): decide whether a
  predicted answer is mathematically the same as a reference answer.

Checking runs in two stages. A pure-Python *fast path* normalises both strings
(delimiters, ``\\left``, ``\\dfrac``, thousands separators, ``$``, units,
degrees, ``\\text{}``) and, when both sides are values it fully understands
(numbers, fractions, mixed numbers, percentages, scientific notation, ±∞,
tuples, sets, intervals, matrices of those, ``x = value`` equations, base-n
numerals, multiple-choice letters, short words), decides with exact
``Fraction`` arithmetic. Everything else goes to **math-verify**, which runs in
a persistent child process (:mod:`synco.grading._mathverify_worker`) so every call is
bounded by a wall-clock timeout from any thread, the child can be killed when
a hostile answer (``9^{9^{9^9}}``) makes sympy spin, and its memory is capped.
The timeout covers the whole call, waiting for the shared worker included
(``inf`` means :data:`MAX_TIMEOUT`); see :class:`AnswerChecker`.

Decisions (no false positives is the priority: a checker that calls a wrong
answer right poisons training):

* Integers and fractions compare exactly. A written decimal (``0.333333``,
  ``2.0107e-06``) equals an exact value when they differ by at most 1e-6
  relative *and* at most half a unit in the decimal's last written digit; two
  decimals must also agree to the finer one's last digit. So ``0.33 != 1/3``,
  ``0.333333 == 1/3``, ``1000000.5 != 1000001``, ``23634691.5 != 23634691.51``.
* Percent: ``50%`` equals ``0.5`` (its value) and ``50`` (the same number
  with the percent sign dropped, as answers to "what percent..." usually are).
  ``50%`` never equals ``5000`` or ``0.005``.
* ``1,000`` (and ``1{,}000``, ``1\\,000``, ``10,\\!080``, ``1 000`` with any space) is one thousand;
  ``1.000`` is one, so ``1,000 != 1.000``. A comma that is no thousands grouping is a decimal comma
  against a number (``1000,99`` = 1000.99, ``0,111`` = 0.111, ``3,5`` = 3.5, ``1 234,5``) and a list
  against a list (``3,5`` = ``3, 5``). Currency signs (``$``, ``€``, ``£``, ``¥``) are dropped.
* Tuples and intervals are ordered and bracket-sensitive (``(1,2) != [1,2]``,
  ``(1,2) != (2,1)``); sets and bare comma lists are unordered. A braced set never equals a
  bracketed pair either way round (``\\{1,3\\} != (1,3)``: an open interval or an ordered pair);
  a bare list is read as the set or the tuple on the other side. Inside sets, intervals, tuples,
  matrices and relations a decimal of at least :data:`APPROX_DIGITS` significant digits equals the
  exact value it correctly rounds (``(0.6, 2.6667]`` = ``(\\frac{3}{5}, \\frac{8}{3}]``, not ``2.67``).
* ``x = 5`` matches ``5`` (and ``5 = x``); ``x = 5`` does not match ``y = 5``. A reference equation
  that is no assignment (``7 = 11a + c``, ``a + 3z = 0``, ``x^2 + y^2 = 25``) is never matched by
  a prediction without ``=``: one side of it (``11a + c``, ``0``, ``25``) states nothing. Two
  equations with the same sides (swapped too) or the same solutions go to math-verify.
* Relations: ``>=``, ``\\geq``, ``\\geqslant``, ``≥`` are one symbol (likewise ``<=``, ``=<``, ``!=``,
  ``\\neq``); a linear relation or chain in one variable is compared as its solution set, so
  ``x \\ge 5`` = ``5 \\le x``, ``-x \\ge -1`` = ``x \\le 1``, ``2x + 1 > 5`` = ``x > 2`` and
  ``-2 \\le x \\le 7`` = ``x \\in [-2, 7]``; the interval ``[-2, 7]`` answers the reference
  ``-2 \\le x \\le 7``, but an inequality does not answer a reference in interval notation.
  Different variables never match.
* ``(A)``, ``A``, ``\\text{(A)}``, ``\\textbf{(A)} 12`` are all choice A.
* Units are dropped (``10\\text{ cm}`` == ``10``, ``60km/h``, ``150m^2``, ``1,000.99m²``) unless
  both sides carry different units (``5 cm != 5 km``). A lone letter against a number (``5m``)
  stays: it may be a variable. Degree marks are dropped.
* A base-n numeral equals its bare digits (``52_8 == 52``) when the base is
  2-36 written without a leading zero and the digits fit it. Any other
  decoration on a number that the fast path cannot read, namely subscripts
  (``1_000``, ``5_2``), primes (``5'``), ellipses (``2.5\\ldots``), digit groups
  written apart (``10 00``) or digits after ``!`` / ``%``, makes the answer
  wrong without asking math-verify, which reads those as the bare number.
  A list of two or more items never equals a single number (``5,5 != 5``). Unicode script
  digits are the scripts they show (``5²`` = 25, ``52₈`` is a base-8 numeral); commands that
  print nothing (``\\displaystyle``, ``\\limits``) and evaluation bars (``5\\Big|_{2}``) never hide
  a subscript from this rule.
* Matrices and vectors (``pmatrix``, ``bmatrix``, ``vmatrix`` (a determinant),
  ``array``) the fast path cannot settle go to math-verify; environment names
  are neither prose nor variables.
* ``rel_tol`` (:meth:`AnswerChecker.match`, :meth:`AnswerChecker.grade`,
  :func:`answers_match`; default 0 = the exact rules above) also accepts numbers
  within that relative difference, for benchmarks with rounded references
  (Minerva: ``1.6e-19`` vs ``1.602e-19`` at ``rel_tol=0.01``): plain numbers, in
  lists and matrices too, and constant expressions math-verify reads
  (``\\frac{\\pi}{3}`` vs ``1.047`` at ``0.001``). Never expressions with variables.
* math-verify runs without its own unit stripper (units are removed above, by these rules):
  it deletes trailing letters after a number, reading ``7 = 11a + c`` as ``7 = 11``.
* Every True from math-verify is checked numerically in the worker: constant
  expressions at 30 digits, expressions with variables at fixed sample points,
  so a sign or term math-verify misreads is vetoed (``1 - \\frac{1}{e}`` vs
  ``1 + \\frac{1}{e}``: bare math-verify on un-delimited text reads only the
  leading ``1`` of both; the worker wraps answers in ``$..$`` and checks anyway).
* Answers over :data:`MAX_ANSWER_CHARS` characters, or containing code-like
  text (``__``, ``import``, ``lambda`` without a backslash, backticks, ...), are
  wrong answers and never reach sympy. Invisible characters (zero-width,
  bidi, NUL) are removed and compatibility forms folded (NFKC) before that
  filter, and it runs again on the normalised answer. Nothing here evals model text; the
  worker only hands strings to latex2sympy's grammar-based parser.
"""

from __future__ import annotations

import functools
import json
import logging
import math
import numbers
import os
import re
import select
import subprocess
import sys
import threading
import time
import unicodedata
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any, Literal, Union

from synco.core.records import ExtractionMethod

logger = logging.getLogger(__name__)

MAX_ANSWER_CHARS = 1000
"""Answers longer than this (after extraction) are treated as wrong, never parsed."""

DEFAULT_TIMEOUT = 2.0
MAX_TIMEOUT = 3600.0
"""The largest time bound a check takes, in seconds: ``float('inf')`` or a huge timeout means this."""
REL_TOL = Fraction(1, 10**6)
_MAX_DEPTH = 12  # nesting the fast path follows before it defers to math-verify
_MAX_EXP = 400  # largest |exponent| of 10 the fast path evaluates
_MAX_POW_BITS = 20000  # largest integer power (in bits) the fast path evaluates
_WORKER_PATH = Path(__file__).with_name("_mathverify_worker.py")

# ---------------------------------------------------------------------------
# Extraction
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Extraction:
    """The answer found in a response, how it was found, and every boxed answer in order."""

    answer: str | None
    method: ExtractionMethod
    boxed: tuple[str, ...] = ()

    @property
    def hedged(self) -> bool:
        """Several boxed answers that differ after normalisation (syntactic; the verifier may check semantically).

        Stops at the second distinct key, and calls more than :data:`_MAX_HEDGE_FORMS` distinct boxed
        strings hedged without normalising them, so a response with thousands of boxes costs little.
        """
        distinct = dict.fromkeys(b.strip() for b in self.boxed)
        if len(distinct) <= 1:
            return False
        if len(distinct) > _MAX_HEDGE_FORMS:
            return True
        keys = set()
        for b in distinct:
            prep = _prepare(b)
            keys.add(prep.key if prep is not None else b)
            if len(keys) > 1:
                return True
        return False


MAX_SCAN_CHARS = 100_000
"""Extraction reads at most this many characters from the end of a response's visible part (the final
answer is at the end); with every step linear in it, one response costs milliseconds whatever its size."""

_MAX_HEDGE_FORMS = 64
_BOX_OPEN = re.compile(r"\\(?:boxed|fbox)\s*\{")
_BRACE_TOKEN = re.compile(r"\\.|[{}]", re.DOTALL)
# Written without two adjacent optional runs of whitespace (``\s*(?:\*\*)?\s*``), which backtrack
# quadratically on "answer" followed by a long run of spaces.
_ANSWER_MARK = re.compile(
    r"(?i)\b(final\s+answer|answer)\b\s*(?:(?:\*\*|__)\s*)?(?:is\b\s*:?|:)\s*(?:\*\*|__)?"
)
_THINK_CLOSE_TAG = re.compile(r"(?i)</think>")
_THINK_OPEN_TAG = re.compile(r"(?i)<think>")
_HOPE_PHRASE = "i hope it is correct"
_LINE_WRAPPERS = (("$$", "$$"), ("$", "$"), ("\\(", "\\)"), ("\\[", "\\]"))


def _brace_pairs(text: str) -> dict[int, int]:
    """Index of the closing ``}`` of every ``{`` that closes, in one left-to-right pass (escaped ``\\{ \\}`` ignored).

    Gives the same pair as scanning forward from each ``{`` (:func:`_match_brace`), in linear time
    instead of one scan per opening brace.
    """
    pairs: dict[int, int] = {}
    stack: list[int] = []
    for m in _BRACE_TOKEN.finditer(text):
        tok = m.group()
        if tok == "{":
            stack.append(m.start())
        elif tok == "}" and stack:
            pairs[stack.pop()] = m.start()
    return pairs


def _match_brace(text: str, open_index: int) -> int:
    """Index of the ``}`` closing the ``{`` at ``open_index`` (escaped ``\\{ \\}`` ignored), or -1."""
    depth = 0
    i = open_index
    n = len(text)
    while i < n:
        c = text[i]
        if c == "\\":
            i += 2
            continue
        if c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0:
                return i
        i += 1
    return -1


def _visible_text(response: str) -> str | None:
    """The part of a response after its reasoning: text after the last ``</think>``; None if a ``<think>`` never closes."""
    last = None
    for last in _THINK_CLOSE_TAG.finditer(response):
        pass
    if last is not None:
        return response[last.end() :]
    if _THINK_OPEN_TAG.search(response):
        return None
    return response


def _skip_space(text: str, start: int, end: int) -> int:
    """First index in ``[start, end)`` that is not whitespace (``end`` if none)."""
    while start < end and text[start].isspace():
        start += 1
    return start


def _skip_space_back(text: str, start: int, end: int) -> int:
    """One past the last index in ``[start, end)`` that is not whitespace (``start`` if none)."""
    while end > start and text[end - 1].isspace():
        end -= 1
    return end


@dataclass(frozen=True)
class _BoxSpan:
    """One top-level ``\\boxed{..}``: where it starts, one past its closing brace, and its (unwrapped) content."""

    start: int
    end: int
    content: str


def _boxed_spans(text: str) -> list[_BoxSpan]:
    """Every top-level ``\\boxed{..}`` / ``\\fbox{..}`` in order (balanced braces; unclosed or empty ones skipped).

    Linear in ``len(text)``: brace pairs are found in one pass, then each box is a lookup.
    """
    pairs = _brace_pairs(text)
    found: list[_BoxSpan] = []
    pos = 0
    while True:
        m = _BOX_OPEN.search(text, pos)
        if m is None:
            return found
        close = pairs.get(m.end() - 1, -1)
        if close < 0:
            pos = m.end()
            continue
        start = _skip_space(text, m.end(), close)
        end = _skip_space_back(text, start, close)
        while True:  # \boxed{\boxed{5}} -> 5
            inner = _BOX_OPEN.match(text, start, end)
            if inner is None or pairs.get(inner.end() - 1, -1) != end - 1:
                break
            start = _skip_space(text, inner.end(), end - 1)
            end = _skip_space_back(text, start, end - 1)
        if end > start:
            found.append(_BoxSpan(m.start(), close + 1, text[start:end]))
        pos = close + 1


def boxed_answers(text: str) -> list[str]:
    """Contents of every top-level ``\\boxed{..}`` / ``\\fbox{..}`` in order (balanced braces; unclosed or empty ones skipped)."""
    return [span.content for span in _boxed_spans(text)]


def _clean_line_answer(text: str) -> str:
    """Strip what surrounds an answer on an answer line: bold marks, ``$``, ``\\( \\)``, trailing period, "I hope it is correct".

    Works on two indices moving inwards, so nested wrappers (``$$$$..``) cost linear time, not a copy each.
    """
    if not text or text.isspace():
        return ""
    i, j = 0, len(text)
    i, j = _skip_space(text, i, j), _skip_space_back(text, i, j)
    prev = None
    while (i, j) != prev:
        prev = (i, j)
        tail = text[max(i, j - len(_HOPE_PHRASE) - 1) : j].lower()
        for phrase in (_HOPE_PHRASE, _HOPE_PHRASE + "."):
            if tail.endswith(phrase):
                j = _skip_space_back(text, i, j - len(phrase))
                break
        while i < j and text[i] == "*":
            i += 1
        while j > i and text[j - 1] == "*":
            j -= 1
        i, j = _skip_space(text, i, j), _skip_space_back(text, i, j)
        if j > i and text[j - 1] == "." and not (j - i >= 2 and text[j - 2] == "."):
            j = _skip_space_back(text, i, j - 1)
        for left, right in _LINE_WRAPPERS:
            if j - i >= len(left) + len(right) and text.startswith(left, i, j) and text.endswith(right, i, j):
                i, j = i + len(left), j - len(right)
                i, j = _skip_space(text, i, j), _skip_space_back(text, i, j)
    return text[i:j]


def _answer_line(text: str) -> tuple[str, ExtractionMethod] | None:
    """The answer on the last "final answer:" / "answer:" line (or the next non-empty line if it is bare there).

    One backward pass that remembers the nearest non-blank line below, so it is linear in the text.
    """
    lines = text.splitlines()
    below = ""  # the first non-blank line after the current one
    below_clean: str | None = None  # its cleaned form, computed once when needed
    for idx in range(len(lines) - 1, -1, -1):
        line = lines[idx]
        mark = None
        for mark in _ANSWER_MARK.finditer(line):
            pass
        if mark is not None:
            method: ExtractionMethod = "final_answer_line" if mark.group(1).lower().startswith("final") else "answer_line"
            rest = _clean_line_answer(line[mark.end() :])
            if not rest:
                if below_clean is None:
                    below_clean = _clean_line_answer(below)
                rest = below_clean
            if rest:
                return rest, method
        if line and not line.isspace():
            below, below_clean = line, None
    return None


_SPECIAL_TOKEN = re.compile(
    r"<\|[A-Za-z_][A-Za-z0-9_]{0,39}\|>|<\uff5c[^\uff5c<>\n]{1,40}\uff5c>|</?s>|<(?:eos|bos|pad|end_of_turn|start_of_turn)>"
)
"""Chat-template tokens a decode may keep (``<|im_end|>``, ``<|eot_id|>``, ``</s>``, ``<end_of_turn>``, ...)."""

ExtractMode = Literal["reward", "eval"]
BoxedPolicy = Literal["last", "all"]
_EVAL_MARK = re.compile(r"(?i)\b(final\s+answer|answer)\b")
_MARK_CONNECTOR = re.compile(r"(?i)(?:is|was|would\s+be|will\s+be|should\s+be|equals)\b[ \t]*:?|[:=]")
_WORD_PAREN = re.compile(r"\([ \t]*[A-Za-z][A-Za-z .,'\-]{1,48}\)")
"""A parenthetical of words only ("(in dollars)", "(rounded to the nearest cent)"): a qualifier, never maths."""
_TRAILING_WORD_PAREN = re.compile(r"\s" + _WORD_PAREN.pattern + r"\Z")
_ANSWER_START = re.compile(r"[$\\(\[{\d+\-\u2212\u20ac\u00a3\u00a5\u20b9]|\.\d")
"""How an answer written right after a bare "answer" (no colon, no "is") must begin: maths or a currency sign."""
_HEADING_DECORATION = re.compile(r"[\s#*_>\-]*")
_EXPLANATION_BREAK = re.compile(
    r"(?<!\.)[.!?](?=\s|$)|[,;]\s*(?:because|since|as|so|which|where|thus|hence|but|not|and\s+this)\b"
    r"|\s(?:because|since)\b"
)
"""Where an answer stated in running text ends: a sentence end (not a decimal point), or a clause of explanation."""
_NOT_ANSWER_START = frozenset(
    "correct incorrect wrong right not above below shown given unknown unclear clear simple obvious "
    "straightforward as follows in on the answer final".split()
)
"""First words after "the answer is" that mean no answer follows ("the answer is correct", "... is as follows")."""
_MATH_SPAN = re.compile(
    r"\$\$(.{1,2000}?)\$\$|\$((?:[^$\\]|\\.){1,2000})\$|\\\((.{1,2000}?)\\\)|\\\[(.{1,2000}?)\\\]", re.DOTALL
)
"""A maths span: ``$$..$$``, ``$..$`` (an escaped ``\\$`` inside is a dollar sign), ``\\(..\\)``, ``\\[..\\]``; bounded length."""
_MATH_CONTENT = re.compile(r"[0-9A-Za-z\\]")
"""What a maths span must contain to be an answer (``$$$`` or ``$ , $`` is not one)."""
_RUN_TOKEN = re.compile(
    r"(?P<cmd>\\[A-Za-z]+)|(?P<esc>\\[^A-Za-z\s])|(?P<word>[A-Za-z]+)|(?P<num>\d+)|(?P<open>\{)"
    r"|(?P<op>[-+*/^_=<>!|()\[\].,%'&:\u2212\u00d7\u00f7\u00b7\u22c5\u2264\u2265\u2260\u00b1\u00b0"
    r"\u00b2\u00b3\u00b9\u2070-\u209f\u20ac\u00a3\u00a5])"
    r"|(?P<core>[\u03c0\u221a\u221e])|(?P<space>[ \t\u00a0\u2009\u202f]+)|(?P<other>.)",
    re.DOTALL,
)
"""Tokens of running text for :func:`_math_runs`: commands, escapes, words, digits, braced groups, maths symbols."""
_LETTER_BEFORE = frozenset("=<>+-*/^_(|[\u2212\u00d7\u00b7")
_LETTER_AFTER = frozenset("=<>+-*/^_)|]!'\u2212\u00d7\u00b7")
_NON_CORE_CMDS = frozenset(
    "quad qquad text textbf textit textrm mathrm mbox left right displaystyle textstyle hspace enspace "
    "thinspace and or".split()
)
"""Commands that are spacing or text wrappers: on their own they make no maths answer."""
_RUN_NAMES = frozenset(
    "pi sqrt cbrt sin cos tan cot sec csc arcsin arccos arctan sinh cosh tanh log ln lg exp".split()
)
"""Function names that continue a maths run in running text (not "to", "in", "min": English words too)."""
_CHOICE_RUN = re.compile(r"\(\s*[A-J]\s*\)")
_QUALIFIER_GAP = re.compile(
    r"(?i)[^.!?\n]*?(?:\b(?:at|when|where|for|if|with|given|about|approximately|approx|roughly|around|nearly)\b\.?"
    r"|\\approx|\u2248)\s*"
)
"""Text between an answer and what qualifies it ("at", "when", "about", "approximately"): the answer comes first."""
_LIST_GAP = re.compile(r"(?i)\s*,?\s*(?:(?:and|or)\s*)?")
"""Commas, "and" and "or" between maths spans that list one answer."""
_AND_GAP = re.compile(r"(?i)\s*,?\s*and\s*")
"""What lists undelimited answers ("1, 2 and 3"); "or" between them is a hedge."""
_SENTENCE_BREAK = re.compile(r"[.!?;]\s+\S")
_HEDGE_GAP = re.compile(r"(?i)[\s,]*(?:or|either|maybe|perhaps)[\s,:]*")
"""What separates two candidates that are alternatives ("5 or 6"): a hedge, not an answer."""
_FIRST_LINE = re.compile("[^\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029]*")
"""Up to the first line break (any that ``str.splitlines`` knows)."""
_GSM8K_MARK = re.compile(r"(?<!#)####(?!#)[ \t]*")
"""GSM8K's final-answer marker ``#### 72`` (exactly four hashes; what follows must start like maths)."""
_MAX_MARKS_PER_LINE = 3
_MAX_MARKER_TRIES = 16
_TAIL_CHARS = 4000


def _check_options(mode: object, boxed: object) -> None:
    """Reject unknown extraction options with a message naming the field."""
    if mode not in ("reward", "eval"):
        raise ValueError(f"mode must be 'reward' or 'eval', got {mode!r}")
    if boxed not in ("last", "all"):
        raise ValueError(f"boxed must be 'last' or 'all', got {boxed!r}")


def _drop_special_tokens(response: str) -> str:
    """Chat-template tokens become line breaks: ``... is $5$.<|im_end|>`` ends its line at the token."""
    return _SPECIAL_TOKEN.sub("\n", response) if "<" in response else response


def _all_boxed(boxes: tuple[str, ...]) -> tuple[str, ExtractionMethod]:
    """The unordered collection of distinct boxed answers (``boxed="all"``): one answer, or ``a, b, ...`` as a list.

    Distinct means different after normalisation and to the fast path (``\\dfrac12``, ``\\frac{1}{2}``
    and ``0.5`` are one answer). Beyond :data:`_MAX_HEDGE_FORMS` raw forms nothing is normalised;
    the joined text is then simply too long to match.
    """
    raw = list(dict.fromkeys(b.strip() for b in boxes))
    if len(raw) > _MAX_HEDGE_FORMS:
        return ", ".join(raw), "boxed_all"
    kept: list[tuple[str, str, _Value | None]] = []  # (form, key, fast-path value)
    for b in raw:
        prep = _prepare(b)
        key = prep.key if prep is not None else b
        value = _parse_value(prep.text, prep.was_text) if prep is not None else None
        if any(key == k or (value is not None and v is not None and _same(value, v) is True) for _, k, v in kept):
            continue
        kept.append((b, key, value))
    if len(kept) == 1:
        return kept[0][0], "boxed"
    return ", ".join(form for form, _, _ in kept), "boxed_all"


_APPROX_MARK = re.compile(r"\\approx(?![A-Za-z])|\u2248|\\simeq(?![A-Za-z])")
_RELATION_MARK = re.compile(
    r"[<>]|!=|\\(?:le|ge|leq|geq|leqslant|geqslant|lt|gt|ne|neq|in|notin|approx|subset|subseteq|supset|to)(?![A-Za-z])"
)


def _final_side(text: str) -> str:
    """The part of a maths answer that states the result: the value after worked arithmetic, else the whole.

    ``3 + 4 = 7`` -> ``7`` and ``\\binom{4}{2} \\cdot 2 = 12`` -> ``12`` (a constant left side is
    working); ``x = 2 + 3 = 5`` -> ``x = 5``. An assignment (``x = 5``), an equation with variables on
    the right (``7 = 11a + c``, ``y = 2x + 3``) or with an expression on the left (``m + n = 80``), a
    relation (``x \\ge 5``) and a system (``x = 1, y = 2``) are kept whole, so what they state reaches
    the comparison: the gold ``7 = 11a + c`` is never cut down to ``11a + c``.
    """
    s = text.strip()
    if s.endswith((".", ",", ";")) and not s.endswith(".."):  # the sentence's stop inside "\\[ 9. \\]"
        s = s[:-1].rstrip()
    if s.startswith("=") and not s.startswith("=="):  # "$= \\frac{1}{6}$" continues the text before it
        s = s[1:].strip()
    approx = _APPROX_MARK.search(s)
    if approx is not None and s[: approx.start()].strip():  # "\\frac{1}{6} \\approx 0.167": the exact value
        s = s[: approx.start()].strip()
    if _RELATION_MARK.search(s):
        return s
    parts = _split_top(s, "=")
    if parts is None or len(parts) < 2:
        return s
    parts = [p.strip() for p in parts]
    for part in parts:
        items = _split_top(part, ",;")
        if not part or items is None or len(items) > 1:
            return s
    lhs, rhs = parts[0], parts[-1]
    rhs_letters = _free_letters(rhs)
    if rhs_letters is None or rhs_letters:
        return s
    lhs_letters = _free_letters(lhs)
    if lhs_letters is not None and not lhs_letters:
        return rhs
    return s if len(parts) == 2 else f"{lhs} = {rhs}"


def _math_letter(text: str, start: int, end: int, after_command: bool) -> bool:
    """Whether the one-letter word ``text[start:end]`` is a variable (``x = 5``, ``2x``), not "a" or "I"."""
    if after_command or (start > 0 and (text[start - 1].isdigit() or text[start - 1] in "})\\")):
        return True
    if end < len(text) and (text[end].isdigit() or text[end] in "^_({'"):
        return True
    i = start - 1
    while i >= 0 and text[i] in " \t":
        i -= 1
    if i >= 0 and text[i] in _LETTER_BEFORE:
        return True
    j = end
    while j < len(text) and text[j] in " \t":
        j += 1
    return j < len(text) and text[j] in _LETTER_AFTER


def _is_unit_word(word: str) -> bool:
    """A unit written as a word after a number ("cm", "kg", "dollars", "grams"), for :func:`_math_runs`."""
    w = word.lower()
    if w in _SHORT_UNITS or w in _UNIT_SYNONYMS:
        return True
    return len(w) > 3 and w.endswith("s") and w[:-1] in _UNIT_SYNONYMS


def _trim_run(text: str, start: int, end: int) -> tuple[int, int]:
    """A maths run without punctuation or unmatched brackets at its ends (``(see 2)`` -> ``2``, ``5,`` -> ``5``)."""
    while True:
        before = (start, end)
        while start < end and text[start] in " \t,.;:'!)]%=":
            start += 1
        while end > start and text[end - 1] in " \t,.;:'([":
            end -= 1
        piece = text[start:end]
        balance = piece.count("(") + piece.count("[") - piece.count(")") - piece.count("]")
        if end > start and text[end - 1] in ")]" and balance < 0:
            end -= 1
        elif end > start and text[start] in "([" and balance > 0:
            start += 1
        if (start, end) == before:
            return start, end


def _math_runs(text: str) -> list[tuple[int, int]]:
    """Spans of maths written without delimiters in running text, in order (linear in ``len(text)``).

    A run is made of numbers, commands with their braced arguments, operators and brackets, with
    variables (one letter next to an operator or a number: ``x = 5``, ``2x``) and unit words after a
    number (``12 500 dollars``, ``60 km/h``); an ordinary word, ``$``, ``;`` or a sentence end stops
    it. Only runs with a number, a maths command or a choice label ``(A)`` count: ``She walks
    3\\frac{1}{2} miles.`` gives ``3\\frac{1}{2} miles``, never the ``2`` of the fraction; ``5_{2}``
    stays whole, so a subscript is never read as the answer.
    """
    pairs = _brace_pairs(text)
    runs: list[tuple[int, int]] = []
    start = last = -1
    core = False
    prev_kind = ""
    pos, n = 0, len(text)

    def close() -> None:
        nonlocal start, last, core
        if start >= 0:
            a, b = _trim_run(text, start, last)
            if b > a and (core or _CHOICE_RUN.fullmatch(text, a, b)):
                runs.append((a, b))
        start, last, core = -1, -1, False

    while pos < n:
        m = _RUN_TOKEN.match(text, pos)
        assert m is not None  # the last alternative matches any character
        kind, tok, end = m.lastgroup or "other", m.group(), m.end()
        is_math, is_core = True, False
        if kind == "space":
            pos = end
            continue
        if kind == "cmd":
            is_core = tok[1:] not in _NON_CORE_CMDS
        elif kind in ("num", "core"):
            is_core = True
        elif kind == "esc":
            pass  # \\, \{ \% \$: part of the maths
        elif kind == "open":
            close_at = pairs.get(pos, -1)
            if close_at < 0:
                is_math = False
            else:
                end = close_at + 1
                is_core = prev_kind == "cmd" or any(c.isdigit() for c in text[pos:end])
        elif kind == "word":
            if len(tok) == 1:
                is_math = _math_letter(text, pos, end, prev_kind == "cmd")
            elif tok.lower() in _RUN_NAMES:
                is_core = True
            else:
                is_math = start >= 0 and prev_kind in ("num", "open") and _is_unit_word(tok)
        elif kind == "op":
            if tok == "." and (end >= n or text[end].isspace()):
                is_math = False  # a sentence ends
            elif tok == ":" and not (pos > 0 and text[pos - 1].isdigit() and end < n and text[end].isdigit()):
                is_math = False  # "Total: 64"; a ratio 3:4 stays
        else:
            is_math = False
        if is_math:
            if start < 0:
                start = pos
            last, core = end, core or is_core
        else:
            close()
        prev_kind = kind if is_math else ""
        pos = end
    close()
    return runs


def _candidates(text: str) -> list[tuple[int, int, str]]:
    """Answer candidates of running text in order: maths spans (their stated side) and undelimited maths runs.

    A ``$..$`` span that reads as prose is two dollar amounts, not maths: its text is scanned for runs instead.
    """
    found: list[tuple[int, int, str]] = []
    pos = 0
    for m in _MATH_SPAN.finditer(text):
        inner = next(g for g in m.groups() if g is not None).strip()
        if not _MATH_CONTENT.search(inner) or _is_prose(inner):
            continue
        found.extend((pos + a, pos + b, text[pos + a : pos + b]) for a, b in _math_runs(text[pos : m.start()]))
        found.append((m.start(), m.end(), inner))
        pos = m.end()
    found.extend((pos + a, pos + b, text[pos + a : pos + b]) for a, b in _math_runs(text[pos:]))
    return found


def _listed(items: list[str]) -> bool:
    """Whether answers side by side form one list: plain values, or values of one variable (``x = 1``, ``x = -2``)."""
    sides = [_equation_sides(item) for item in items]
    if all(side is None for side in sides):
        return True
    names = {side[0] for side in sides if side is not None and _IDENT.match(side[0])}
    return len(names) == 1 and all(side is not None for side in sides)


def _last_candidate(text: str) -> str | None:
    """The answer a text ends on: its last maths span or run (its stated side, :func:`_final_side`).

    Three refinements, each within one sentence. An answer followed by a qualifier ("$-4$ at $x = 2$",
    "$\\frac{3}{7}$, which is about 0.43") is the answer before it. Maths spans side by side with
    commas, "and" or "or" between them (undelimited maths: "and") that are values, or values of one
    variable ("$1$, $2$ and $3$", "$x = 2$ or $x = -3$", "1, 2 and 3"), are one list: a list never
    equals a single number, so reading a hedge as a list accepts nothing wrong. Two different answers
    in running text offered as alternatives ("5 or 6", "(A) or (B)") are no answer (None).
    """
    found = _candidates(text)
    if not found:
        return None
    i = len(found) - 1
    while i > 0 and _QUALIFIER_GAP.fullmatch(text, found[i - 1][1], found[i][0]):
        i -= 1
    last = found[i]
    run = [last]
    j = i
    while j > 0:
        spans = text[found[j][0]] in "$\\" and text[found[j - 1][0]] in "$\\"
        if not (_LIST_GAP if spans else _AND_GAP).fullmatch(text, found[j - 1][1], found[j][0]):
            break
        j -= 1
        run.insert(0, found[j])
    if len(run) > 1:
        items = [_final_side(c[2]) for c in run]
        if _listed(items):
            return ", ".join(items)
    if i > 0:
        prev = found[i - 1]
        if _HEDGE_GAP.fullmatch(text, prev[1], last[0]) and prev[2].strip() != last[2].strip():
            return None
    return _final_side(last[2])


def _bare_answer(text: str) -> str | None:
    """The whole text when it is one line of maths and nothing else (``\\frac{10}{9}``, ``1 000``, ``x >= 5``,
    ``7 = 11a+c``, ``2,74 $``): a gold answer or a bare prediction, kept whole rather than cut to its last number.

    Words are allowed only inside ``\\text{..}``, as function names or as units (``60km/h``).
    """
    s = _clean_line_answer(text)
    if not s or len(s) > MAX_ANSWER_CHARS or any(c in s for c in "\n\r") or not _MATH_CONTENT.search(s):
        return None
    if _SENTENCE_BREAK.search(s):  # "x = 5. y = 3" is two statements, not one answer
        return None
    t = re.sub(r"\\[A-Za-z]+", " ", _TEXT_GROUP.sub(" ", s))
    if any(w.lower() not in _MATH_NAMES and not _is_unit_word(w) for w in re.findall(r"[A-Za-z]{2,}", t)):
        return None
    return _final_side(s)


@dataclass(frozen=True)
class _Marked:
    """An answer an eval-mode marker states: the answer, the route, where the marker is, and whether it was stated.

    ``stated`` is False when the answer was picked out of prose after the marker ("the answer is
    that she has 18 apples left" -> 18); such an answer never replaces a box (see :func:`_eval_extraction`).
    """

    answer: str
    method: ExtractionMethod
    pos: int
    stated: bool = True


def _eval_clean(rest: str, explicit: bool) -> tuple[str, bool] | None:
    """The answer in the text after an eval-mode marker and whether it was stated outright; None when there is none.

    A leading maths span is the answer (``$10,455$. I hope it is correct.`` -> ``10,455``);
    otherwise the text up to the first sentence end or explanation ("because", ", so").
    Prose ("that she has 18 apples left") gives its last number or maths span (not stated outright).
    """
    s = rest.strip()
    while s.startswith(("**", "__")):
        s = s[2:].lstrip()
    if not s:
        return None
    if not explicit and _ANSWER_START.match(s) is None:
        return None
    m = _MATH_SPAN.match(s)
    if m is not None:  # may run over several lines (a display block below a heading)
        inner = next(g for g in m.groups() if g is not None).strip()
        if _MATH_CONTENT.search(inner) and not _is_prose(inner):
            return _final_side(inner), True
    s = _FIRST_LINE.match(s).group()  # type: ignore[union-attr]  # always matches (possibly empty)
    cut = _EXPLANATION_BREAK.search(s)
    answer = _clean_line_answer(s[: cut.start()] if cut is not None else s)
    unit = _TRAILING_WORD_PAREN.search(answer)
    if unit is not None:  # "12 (dollars)": a unit aside
        answer = _clean_line_answer(answer[: unit.start()])
    if not answer:
        return None
    first = answer.split(None, 1)[0].lower().strip("*:,.")
    if first in _NOT_ANSWER_START:
        return None
    if _is_prose(answer):
        found = _last_candidate(answer)
        return (found, False) if found else None
    return _final_side(answer), True


def _line_starts(lines: list[str]) -> list[int]:
    """Offset of each line (from ``splitlines(keepends=True)``) in the text it came from."""
    starts, pos = [], 0
    for line in lines:
        starts.append(pos)
        pos += len(line)
    return starts


def _marked_answer(line: str, below: str, offset: int) -> _Marked | None:
    """The answer after one of the last few "answer" / "final answer" marks of a line at ``offset`` (eval mode).

    A mark may be followed by ``:``, ``is``, ``=`` or nothing (``Answer $ 9 $``); without a
    connector the answer must start like maths. A bare heading ("## Final Answer") takes the
    text ``below`` it (from its next non-blank line: that line, or a display block starting there).
    """
    marks = list(_EVAL_MARK.finditer(line))[-_MAX_MARKS_PER_LINE:]
    for mark in reversed(marks):
        method: ExtractionMethod = "final_answer_line" if mark.group(1).lower().startswith("final") else "answer_line"
        end = min(len(line), mark.end() + 2 * MAX_ANSWER_CHARS)
        i = _skip_space(line, mark.end(), end)
        if line.startswith(("**", "__"), i):
            i = _skip_space(line, i + 2, end)
        qualifier = _WORD_PAREN.match(line, i, end)  # "Answer (in dollars): 12"
        if qualifier is not None:
            i = _skip_space(line, qualifier.end(), end)
        conn = _MARK_CONNECTOR.match(line, i, end)
        explicit = conn is not None
        if conn is not None:
            i = _skip_space(line, conn.end(), end)
        rest = line[i:end]
        opened = rest.lstrip()
        if below and opened.startswith(("\\[", "$$", "\\(")) and _MATH_SPAN.match(opened) is None:
            rest = rest + "\n" + below  # "Answer \\[" with the display block on the lines below
        if not rest.strip(" \t*_:#"):
            heading = _HEADING_DECORATION.fullmatch(line, 0, mark.start()) is not None
            if not (explicit or heading and method == "final_answer_line"):
                continue
            found = _eval_clean(below, True) if below else None
        else:
            found = _eval_clean(rest, explicit)
        if found is not None:
            return _Marked(found[0], method, offset + mark.start(), found[1])
    return None


def _eval_answer_line(text: str) -> _Marked | None:
    """The last answer stated on an "answer" / "final answer" line (eval mode)."""
    lines = text.splitlines(keepends=True)
    starts = _line_starts(lines)
    below = -1  # offset of the nearest non-blank line below the current one
    for idx in range(len(lines) - 1, -1, -1):
        line = lines[idx].rstrip("\r\n\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029")
        if _EVAL_MARK.search(line) is not None:
            after = text[below : below + 2 * MAX_ANSWER_CHARS] if below >= 0 else ""
            found = _marked_answer(line, after, starts[idx])
            if found is not None:
                return found
        if line.strip():
            below = starts[idx]
    return None


def _gsm8k_answer(text: str) -> _Marked | None:
    """The answer after GSM8K's last ``####`` marker that is followed by maths (not a Markdown heading)."""
    marks = list(_GSM8K_MARK.finditer(text))[-_MAX_MARKER_TRIES:]
    for m in reversed(marks):
        eol = text.find("\n", m.end(), m.end() + 2 * MAX_ANSWER_CHARS)
        rest = text[m.end() : eol if eol >= 0 else m.end() + 2 * MAX_ANSWER_CHARS]
        found = _eval_clean(rest, False)
        if found is not None:
            return _Marked(found[0], "gsm8k_marker", m.start(), found[1])
    return None


def _last_sentence_answer(text: str) -> str | None:
    """Eval-mode fallback: the whole text when it is bare maths, else its last maths span or run.

    ``\\frac{10}{9}`` stays ``\\frac{10}{9}`` (not ``9``), ``1 000`` stays one thousand, ``7 = 11a+c``
    stays an equation; ``... so she has 18 apples left.`` gives 18. Reads the last :data:`_TAIL_CHARS` characters.
    """
    tail = text[-_TAIL_CHARS:]
    bare = _bare_answer(tail)
    if bare is not None:
        return bare
    found = _last_candidate(tail)
    if found is None:
        words = _clean_line_answer(tail)
        if _WORD.match(words) and len(words.split()) <= 2:  # a bare text answer: "Yes", "even"
            return words
    return found


def _overrides_box(marked: _Marked, last_box: _BoxSpan) -> bool:
    """Whether a marker's answer replaces the last box: it comes after the box and states an answer outright.

    Outright means maths, a choice letter or one word, not a number picked out of a remark:
    "To double-check the answer: plug in x = 8 ..." after ``\\boxed{7}`` leaves the box.
    """
    if marked.pos < last_box.end or not marked.stated:
        return False
    s = marked.answer.strip()
    return bool(_ANSWER_START.match(s) or _CHOICE.match(s) or (_WORD.match(s) and " " not in s))


_BOX_GAP = re.compile(
    r"(?:\s|[,;$&]|\\[,;:! ]|\\q?quad(?![A-Za-z])|\\\\|\\[()\[\]]|\\text\s*\{\s*(?:and|or|,)?\s*\}"
    r"|(?i:and|or)(?![A-Za-z])|[A-Za-z]\s*=)*"
)
"""What may stand between boxes that give one answer together: spacing, commas, ``$``, "and" / "or", ``x =``."""
_MAX_BOX_GAP = 200


def _final_boxes(text: str, boxes: list[_BoxSpan]) -> list[_BoxSpan]:
    """The last box and the boxes right before it with only separators between (``\\boxed{1}\\boxed{2}``,
    ``$x = \\boxed{2}$ or $x = \\boxed{-3}$``): in eval mode they are one answer, the list of their values.

    Boxes with words between them (an intermediate result boxed, then the final one) stay apart.
    """
    run = [boxes[-1]]
    for box in reversed(boxes[:-1]):
        gap_end = run[0].start
        if gap_end - box.end > _MAX_BOX_GAP or _BOX_GAP.fullmatch(text, box.end, gap_end) is None:
            break
        run.insert(0, box)
    return run


def _eval_extraction(text: str, boxes: list[_BoxSpan], boxed: BoxedPolicy) -> Extraction:
    """Eval mode: the last box (with the boxes right before it), unless an explicit answer line or ``####``
    marker comes after it; else the whole text when it is bare maths, else the last maths of the text."""
    contents = tuple(b.content for b in boxes)
    marked = _eval_answer_line(text)
    gsm = _gsm8k_answer(text)
    if gsm is not None and (marked is None or gsm.pos > marked.pos):
        marked = gsm
    if boxes and (marked is None or not _overrides_box(marked, boxes[-1])):
        if boxed == "all":
            answer, method = _all_boxed(contents)
            return Extraction(answer, method, contents)
        final = _final_boxes(text, boxes)
        if len(final) > 1:
            answer, method = _all_boxed(tuple(b.content for b in final))
            return Extraction(answer, method, contents)
        return Extraction(contents[-1], "boxed", contents)
    if marked is not None:
        return Extraction(marked.answer, marked.method, contents)
    fallback = _last_sentence_answer(text)
    if fallback is not None:
        return Extraction(fallback, "last_sentence", contents)
    return Extraction(None, "none", contents)


def extract_answer_with_method(
    response: str, *, mode: ExtractMode = "reward", boxed: BoxedPolicy = "last"
) -> Extraction:
    """Find the final answer of a response; see the module docstring for the rules of each mode.

    ``mode="reward"`` (training rewards, strict): the last ``\\boxed{}``, else the last
    "final answer:" / "answer:" line with the answer alone on it. It refuses what eval mode
    reads, because a policy rewarded for it would learn to hedge or to bury its answer: several
    different boxes are a hedge (the last one counts, :attr:`Extraction.hedged` is set), never a
    list; a later line never overrides a box; no ``####``, no text after an answer, no guess from
    prose. ``mode="eval"`` (benchmark grading) also reads answers followed by text on their line,
    ``Answer $ 9 $``, GSM8K's ``#### 72``, lets an explicit answer line *after* the last box win,
    reads boxes side by side as one list, and falls back to the whole text when it is bare maths,
    else to the last maths of the text (a span, or an undelimited run like ``3\\frac{1}{2}``).
    ``boxed="all"`` makes several different boxed answers one unordered collection
    (``\\boxed{2}`` ... ``\\boxed{-3}`` -> ``2, -3``) instead of the last one.
    Only the last :data:`MAX_SCAN_CHARS` characters of the visible text are read, and every step is
    linear in them, so hostile responses (megabytes of ``\\boxed{``, spaces, ``answer:`` lines) are cheap.
    """
    _check_options(mode, boxed)
    if not isinstance(response, str):
        return Extraction(None, "none")
    text = _visible_text(_drop_special_tokens(response))
    if text is None:
        return Extraction(None, "none")
    if len(text) > MAX_SCAN_CHARS:
        text = text[-MAX_SCAN_CHARS:]
    boxes = _boxed_spans(text)
    if mode == "eval":
        return _eval_extraction(text, boxes, boxed)
    contents = tuple(b.content for b in boxes)
    if contents:
        if boxed == "all":
            answer, method = _all_boxed(contents)
            return Extraction(answer, method, contents)
        return Extraction(contents[-1], "boxed", contents)
    line = _answer_line(text)
    if line is not None:
        return Extraction(line[0], line[1], contents)
    return Extraction(None, "none", contents)


def extract_answer(response: str, *, mode: ExtractMode = "reward", boxed: BoxedPolicy = "last") -> str | None:
    """The final answer of a response, or None (options as for :func:`extract_answer_with_method`)."""
    return extract_answer_with_method(response, mode=mode, boxed=boxed).answer


# ---------------------------------------------------------------------------
# Normalisation
# ---------------------------------------------------------------------------

_HOSTILE = re.compile(
    r"__|`|(?<!\\)\blambda\b|\bimport\b|\beval\b|\bexec\b|\bcompile\b|\bgetattr\b|\bsetattr\b|"
    r"\bglobals\b|\blocals\b|\bsubprocess\b|\bopen\s*\(|\bos\s*\.|\bsys\s*\.|\bsystem\s*\(|\bbuiltins\b"
)
_UNICODE = {
    "\u2212": "-", "\u2013": "-", "\u2014": "-", "\u00d7": "\\times ", "\u00f7": "\\div ",
    "\u00b7": "\\cdot ", "\u22c5": "\\cdot ", "\u03c0": "\\pi ", "\u221e": "\\infty ",
    "\u2264": "\\le ", "\u2265": "\\ge ", "\u2260": "\\ne ", "\u00b0": "^\\circ ",
    "\u00a0": " ", "\u2009": " ", "\u202f": " ", "\u2002": " ", "\u2003": " ",
    "\uff0c": ",", "\uff1a": ":", "\u200b": "", "\ufeff": "", "\x00": "",
    "\u00bd": " 1/2", "\u00bc": " 1/4", "\u00be": " 3/4",
}
_UNICODE_RE = re.compile("|".join(map(re.escape, _UNICODE)))
_INVISIBLE = re.compile(
    "[\x00-\x08\x0e-\x1b\x7f-\x84\x86-\x9f\u00ad\u034f\u0600-\u0605\u061c\u06dd\u070f\u0890\u0891\u08e2"
    "\u115f\u1160\u17b4\u17b5\u180b-\u180f\u200b-\u200f\u202a-\u202e\u2060-\u206f\u3164\ufe00-\ufe0f"
    "\ufeff\uffa0\ufff9-\ufffb\U000110bd\U000110cd\U00013430-\U0001343f\U0001bca0-\U0001bca3"
    "\U0001d173-\U0001d17a\U000e0000-\U000e0fff]"
)
"""Characters that print as nothing: C0/C1 controls other than whitespace, every format (Cf) character,
fillers and variation selectors."""
_SQRT_SYMBOL = re.compile(r"\u221a\s*(\d+|[A-Za-z])")
_TEXT_CMDS = r"(?:text|textbf|textit|textrm|textnormal|textsf|texttt|mbox|mathrm|mathbf|mathit|mathsf|mathtt|rm)"
_TEXT_GROUP = re.compile(r"\\" + _TEXT_CMDS + r"\s*\{([^{}]*)\}")
_TRAILING_TEXT_UNIT = re.compile(
    r"^(?P<head>.*\S)\s*\\" + _TEXT_CMDS + r"\s*\{(?P<unit>[^{}]*)\}(?P<pow>\s*\^\s*(?:\{\s*-?\d\s*\}|-?\d))?\s*$",
    re.DOTALL,
)
_PLAIN_UNIT = re.compile(
    r"^(?P<head>.*[\d})]%?)\s+"
    r"(?P<unit>[A-Za-z]+\.?(?:\s*(?:/|per)\s*[A-Za-z]+|\s+[A-Za-z]+){0,2}(?:\s*\^\s*\{?-?\d\}?)?)$"
)
_GLUED_UNIT = re.compile(
    r"^(?P<head>[-+]?(?:\d(?:[\d,]| (?=\d))*(?:\.\d+)?|\.\d+))"
    r"(?P<unit>(?P<name>km|cm|mm|kg|mg|ml|ft|yd|mi|lbs|lb|oz|hrs|hr|min|sec|mph|kph|kmh|m|g|s|h|l)"
    r"(?:\^\{?[23]\}?)?(?:/(?:s|h|hr|min|km|m)(?:\^\{?2\}?)?)?)$"
)
"""A unit written against its number: ``5cm``, ``60km/h``, ``150m^2``. A lone one-letter name (``5m``, ``2s``)
is left alone: it may be a product with a variable; with a power or a rate (``150m^2``, ``9.8m/s^2``) it is a unit."""
_CURRENCY = re.compile(r"[\u20ac\u00a3\u00a5\u20b9]|\\(?:euro|pounds|yen)(?![A-Za-z])")
_SUPERSCRIPT_DIGITS = str.maketrans(
    "\u2070\u00b9\u00b2\u00b3\u2074\u2075\u2076\u2077\u2078\u2079\u207a\u207b", "0123456789+-"
)
_SUBSCRIPT_DIGITS = str.maketrans("\u2080\u2081\u2082\u2083\u2084\u2085\u2086\u2087\u2088\u2089", "0123456789")
_SUPERSCRIPT_RUN = re.compile("[\u2070\u00b9\u00b2\u00b3\u2074-\u207b]+")
_SUBSCRIPT_RUN = re.compile("[\u2080-\u2089]+")
"""Unicode script digits (``5\u00b2``, ``52\u2088``) as the LaTeX they stand for (``5^{2}``, ``52_{8}``)."""
_INVISIBLE_COMMANDS = re.compile(
    r"\\(?:displaystyle|textstyle|scriptstyle|scriptscriptstyle|limits|nolimits|strut|mathstrut|relax)(?![A-Za-z])"
)
"""Commands that print nothing, removed: none may stand between a number and its subscript (``5\\displaystyle_2``)."""
_SCRIPT_COMMANDS = re.compile(r"\\(sb|sp|textsubscript|textsuperscript)(?![A-Za-z])\s*")
_SCRIPT_COMMAND_SIGN = {"sb": "_", "sp": "^", "textsubscript": "_", "textsuperscript": "^"}
_RELATION_SPELLINGS = (
    (re.compile(r"\\(?:geqslant|geq|ge)(?![A-Za-z])\s*|>=\s*"), r"\\ge "),
    (re.compile(r"\\(?:leqslant|leq|le)(?![A-Za-z])\s*|<=\s*|=<\s*"), r"\\le "),
    (re.compile(r"\\(?:neq|ne)(?![A-Za-z])\s*|!=\s*|\\not\s*=\s*"), r"\\ne "),
    (re.compile(r"\\gt(?![A-Za-z])"), ">"),
    (re.compile(r"\\lt(?![A-Za-z])"), "<"),
)
"""Every spelling of a relation as one command: ``>=``, ``\\geq``, ``\\geqslant`` -> ``\\ge``; ``=<`` -> ``\\le``."""
_DEGREES = re.compile(r"\^\s*\{\s*\\circ\s*\}|\^\s*\\circ(?![A-Za-z])|(?<=[\d}])\s*\\circ(?![A-Za-z])|\\degree(?![A-Za-z])")
_LEFT_RIGHT = re.compile(r"\\(?:left|right)\s*\.|\\(?:left|right|bigl|bigr|Bigl|Bigr|biggl|biggr|big|Big|bigg|Bigg)(?![A-Za-z])")
_FRAC_SHORT = (
    (re.compile(r"\\frac\s*(\d)\s*(\d)"), r"\\frac{\1}{\2}"),
    (re.compile(r"\\frac\s*(\{[^{}]*\})\s*(\d)"), r"\\frac\1{\2}"),
    (re.compile(r"\\frac\s*(\d)\s*(\{)"), r"\\frac{\1}\2"),
    (re.compile(r"\\sqrt\s*(\d|[A-Za-z](?![A-Za-z]))"), r"\\sqrt{\1}"),
)
_MATH_NAMES = frozenset(
    "pi sqrt cbrt sin cos tan cot sec csc arcsin arccos arctan asin acos atan sinh cosh tanh log ln lg exp "
    "inf infty infinity oo abs floor ceil max min gcd lcm mod det frac cdot times div pm mp le ge ne neq leq "
    "geq in cup cap to rightarrow mathbb".split()
)
_UNIT_STOPWORDS = frozenset(
    "and or to plus minus times over divided by of is not but with than the a an x squared cubed factorial root "
    "roots inverse negative less more dozen half halves quarter quarters third thirds tenth tenths hundredth "
    "hundredths hundred hundreds thousand thousands million millions billion billions trillion trillions".split()
)
"""Words after a number that change its value or are not units ("12 million", "3 squared", "4 or 5")."""
_SHORT_UNITS = frozenset(
    "cm mm km m kg mg g ml l ft in yd mi lb lbs oz hr h s ms min mph kph kmh mi sq cu pm am ly au ev kev mev hz w kw j kj v".split()
)
_UNIT_SYNONYMS = {
    "centimeter": "cm", "centimetre": "cm", "millimeter": "mm", "millimetre": "mm", "kilometer": "km",
    "kilometre": "km", "meter": "m", "metre": "m", "inch": "in", "foot": "ft", "feet": "ft", "yard": "yd",
    "mile": "mi", "second": "s", "sec": "s", "minute": "min", "hour": "h", "hr": "h", "kilogram": "kg",
    "gram": "g", "pound": "lb", "ounce": "oz", "liter": "l", "litre": "l", "dollar": "usd", "cent": "cent",
}
_DEGREE_WORDS = frozenset({"degree", "degrees", "deg"})
_NON_ANSWER_WORDS = frozenset(
    "see above below answer answers solution solutions step steps shown explained explanation unknown cannot "
    "todo tbd none null nan error".split()
)
"""Words that mark a placeholder rather than an answer ("see above", "unknown"), for :meth:`AnswerChecker.understands`."""


@dataclass(frozen=True)
class _Prepared:
    """One answer after normalisation: canonical text, its comparison key, its unit and whether it was ``\\text{..}``."""

    text: str
    key: str
    unit: str | None
    was_text: bool


def _looks_hostile(text: str) -> bool:
    """Code-like content that has no business in a maths answer; such answers are wrong, full stop.

    Also looks at the NFKC form, so full-width or compatibility letters (``ｉｍｐｏｒｔ``) are caught;
    callers remove invisible characters first (:func:`_strip_invisible`).
    """
    if _HOSTILE.search(text) is not None:
        return True
    folded = unicodedata.normalize("NFKC", text)
    return folded != text and _HOSTILE.search(folded) is not None


def _strip_invisible(text: str) -> str:
    """Remove characters that print as nothing (zero-width, bidi and format controls, NUL, variation selectors).

    Done before any filter, so ``imp\\u200bort`` or ``__\\x00import`` cannot hide a word from it.
    """
    return _INVISIBLE.sub("", text)


def _strip_outer(text: str) -> tuple[str, bool]:
    """Remove wrappers around the whole answer (``$``, ``\\( \\)``, ``\\boxed{}``, ``\\text{}``); report a text wrapper."""
    was_text = False
    prev = None
    s = text.strip()
    while s != prev:
        prev = s
        if s.endswith(".") and not s.endswith(".."):
            s = s[:-1].rstrip()
        for left, right in (("$$", "$$"), ("$", "$"), ("\\(", "\\)"), ("\\[", "\\]")):
            if len(s) >= len(left) + len(right) and s.startswith(left) and s.endswith(right):
                s = s[len(left) : len(s) - len(right)].strip()
        m = re.match(r"\\(?:boxed|fbox)\s*\{", s)
        if m and _match_brace(s, m.end() - 1) == len(s) - 1:
            s = s[m.end() : -1].strip()
        m = re.match(r"\\" + _TEXT_CMDS + r"\s*\{", s)
        if m and _match_brace(s, m.end() - 1) == len(s) - 1:
            s = s[m.end() : -1].strip()
            was_text = True
    return s, was_text


def _normalise_unit(unit: str) -> str:
    """Canonical spelling of a unit: lower case, no spacing, singular, common synonyms folded."""
    u = unit.lower().replace("\\", "").replace("~", " ").replace("{", "").replace("}", "").strip()
    power = ""
    m = re.search(r"\^\s*(-?\d)$", u)
    if m:
        power, u = "^" + m.group(1), u[: m.start()].strip()
    words = u.split()
    if words and words[0] in ("square", "sq"):
        words, power = words[1:], power or "^2"
    elif words and words[0] in ("cubic", "cu"):
        words, power = words[1:], power or "^3"
    out = []
    for w in words:
        w = w.rstrip(".")
        if len(w) > 3 and re.search(r"(ch|sh|x|ss)es$", w):
            w = w[:-2]
        elif len(w) > 2 and w.endswith("s") and not w.endswith("ss"):
            w = w[:-1]
        out.append(_UNIT_SYNONYMS.get(w, w))
    return "".join(out).replace(" ", "") + power


def _is_unit_words(unit: str, wrapped: bool = False) -> bool:
    """Whether trailing words look like a unit ("cm", "apples", "square feet") rather than maths ("x", "and 5", "pi").

    ``wrapped``: the words were inside ``\\text{..}`` / ``\\mathrm{..}`` after a number (``300 \\mathrm{~K}``,
    ``5 \\text{ N}``), where one or two letters are a unit symbol too (not ``e`` or ``i``, which may be constants).
    """
    words = re.findall(r"[A-Za-z]+", unit)
    if not words or len(words) > 3:
        return False
    lowered = [w.lower() for w in words if w.lower() != "per"]
    if any(w in _MATH_NAMES or w in _UNIT_STOPWORDS for w in lowered):
        return False
    if all(len(w) <= 2 for w in lowered):
        return all(w in _SHORT_UNITS or (wrapped and w not in ("e", "i")) for w in lowered)
    return True


def _unit_head(head: str) -> bool:
    """Whether what stands before trailing unit words is a quantity: a number or maths of numbers
    (``12 500``, ``2\\sqrt{2}``, ``3.0 \\times 10^8``, ``\\frac{7}{2}``), not words ("5 apples and 3")."""
    return bool(re.search(r"\d", head)) and not re.search(r"(?<![\\A-Za-z])[A-Za-z]{2,}", head)


def _space_key(text: str) -> str:
    """Drop whitespace except between two letters/digits (``2 1/2`` stays apart from ``21/2``) and after a comma
    before a group of three digits (the list ``1, 100`` stays apart from the number ``1,100``)."""
    s = re.sub(r"\s+", " ", text).strip()
    s = re.sub(r"(?<=\d), (?=\d{3}(?!\d))", ",\x02", s)
    return re.sub(r"(?<=[^A-Za-z0-9\x02]) | (?=[^A-Za-z0-9\x02])", "", s).replace("\x02", " ")


def _prepare(answer: str) -> _Prepared | None:
    """Normalise one answer string; None when it is empty, too long or code-like (a wrong answer)."""
    if not isinstance(answer, str) or len(answer) > MAX_ANSWER_CHARS:
        return None
    s = _strip_invisible(answer)
    if _looks_hostile(s):
        return None
    s = _UNICODE_RE.sub(lambda m: _UNICODE[m.group(0)], s)
    s = _SUPERSCRIPT_RUN.sub(lambda m: "^{" + m.group(0).translate(_SUPERSCRIPT_DIGITS) + "}", s)
    s = _SUBSCRIPT_RUN.sub(lambda m: "_{" + m.group(0).translate(_SUBSCRIPT_DIGITS) + "}", s)
    s = _SQRT_SYMBOL.sub(r"\\sqrt{\1}", s).replace("\u221a", "\\sqrt")
    s = s.replace("\x01", "").replace("\\\\", "\x01")  # protect LaTeX row breaks from the spacing rules below
    s, was_text = _strip_outer(s)
    s = _LEFT_RIGHT.sub("", s)
    s = _INVISIBLE_COMMANDS.sub("", s)
    s = _SCRIPT_COMMANDS.sub(lambda m: _SCRIPT_COMMAND_SIGN[m.group(1)], s)
    s = re.sub(r"\\[dtc]frac(?![A-Za-z])", r"\\frac", s)
    s = re.sub(r"\\!\s*", "", s)
    s = s.replace("{,}", ",")
    s = re.sub(r"(\d)\\[,;: ](?=\d{3}(?!\d))", r"\1", s)
    s = re.sub(r"\\(?:[,;: ]|quad|qquad|enspace|thinspace)", " ", s).replace("~", " ")
    s = s.replace("\\$", "").replace("$", "")
    s = _CURRENCY.sub("", s)
    for pattern, repl in _RELATION_SPELLINGS:
        s = pattern.sub(repl, s)
    s = s.replace("\\%", "%")
    s = re.sub(r"(?i)(?<!\s)\s*\bpercent(?:age)?\b", "%", s)  # (?<!\s): one try per run of spaces, not one per space
    s = _DEGREES.sub("", s)
    s = s.replace("**", "^")
    for pattern, repl in _FRAC_SHORT:
        s = pattern.sub(repl, s)
    units: list[str] = []
    for _ in range(3):
        m = _TRAILING_TEXT_UNIT.match(s)
        if (
            m is None
            or not re.search(r"\d", m.group("head"))
            or not re.search(r"[A-Za-z]", m.group("unit"))
            or re.search(r"[()\[\]]", m.group("unit"))
            or not _is_unit_words(m.group("unit"), wrapped=True)
        ):
            break
        unit = m.group("unit") + re.sub(r"\s|\{|\}", "", m.group("pow") or "")
        if _normalise_unit(unit).rstrip("s") not in _DEGREE_WORDS and m.group("unit").strip():
            units.append(unit)
        s = m.group("head")
    for _ in range(3):
        unwrapped = _TEXT_GROUP.sub(r"\1", s)
        if unwrapped == s:
            break
        s = unwrapped
    s = re.sub(r"\s+", " ", s).strip()
    m = _PLAIN_UNIT.match(s)
    if m and _unit_head(m.group("head")) and _is_unit_words(m.group("unit")):
        if m.group("unit").lower().strip() not in _DEGREE_WORDS:
            units.append(m.group("unit"))
        s = m.group("head").strip()
    else:
        m = _GLUED_UNIT.match(s)
        if m and (len(m.group("name")) > 1 or m.group("unit") != m.group("name")):
            units.append(m.group("unit"))
            s = m.group("head")
    s = s.strip().rstrip(",;").strip()
    if re.search(r"[^.]\.$", s):
        s = s[:-1].rstrip()
    s = re.sub(r"^(\d+)(?:st|nd|rd|th)$", r"\1", s)  # ordinals: "6th" -> 6
    s = s.replace("\x01", "\\\\")
    if not s or _looks_hostile(s):  # again: unwrapping \text{}, dropping $ or \! can join code words
        return None
    unit = " ".join(_normalise_unit(u) for u in reversed(units)) if units else None
    return _Prepared(text=s, key=_space_key(s), unit=unit or None, was_text=was_text)


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
        return _compare_base(a, b)
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


def _compare_base(a: _Value, b: _Value) -> bool | None:
    """``52_8`` equals ``52_8``, ``0052_{8}`` and a bare ``52`` (the base left implicit), not its decimal value 42."""
    if isinstance(a, _BaseNum) and isinstance(b, _BaseNum):
        return int(a.digits, a.base) == int(b.digits, b.base)
    base = a if isinstance(a, _BaseNum) else b
    other = b if isinstance(a, _BaseNum) else a
    assert isinstance(base, _BaseNum)
    if isinstance(other, _Num):
        v = other.value
        return v.denominator == 1 and v >= 0 and other.half_ulp is None and str(v.numerator) == base.digits
    if isinstance(other, _Letter):
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


# ---------------------------------------------------------------------------
# Plain text to LaTeX (for math-verify, whose plain-expression reader only takes digits and operators)
# ---------------------------------------------------------------------------

_SCI_PLAIN = re.compile(r"(?<![A-Za-z0-9_.])(\d+(?:\.\d*)?|\.\d+)[eE]([-+]?\d+)(?![A-Za-z0-9])")
_FUNCS = re.compile(
    r"(?<![A-Za-z\\])(arcsin|arccos|arctan|sinh|cosh|tanh|sin|cos|tan|cot|sec|csc|log|ln|exp)(?![A-Za-z])"
)


def _replace_calls(text: str, name: str, template: str) -> str:
    """Rewrite ``name( .. )`` (balanced parentheses) as ``template`` with the argument in place of ``{}``."""
    pattern = re.compile(r"(?<![A-Za-z\\])" + name + r"\s*\(")
    for _ in range(50):
        m = pattern.search(text)
        if m is None:
            return text
        depth, i = 1, m.end()
        while i < len(text) and depth:
            depth += {"(": 1, ")": -1}.get(text[i], 0)
            i += 1
        if depth:
            return text
        text = text[: m.start()] + template.replace("{}", "{" + text[m.end() : i - 1] + "}") + text[i:]
    return text


_EXP_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")


def _paren_pairs(text: str) -> dict[int, int]:
    """Index of the ``)`` closing each ``(`` that closes, in one pass."""
    pairs: dict[int, int] = {}
    stack: list[int] = []
    for i, c in enumerate(text):
        if c == "(":
            stack.append(i)
        elif c == ")" and stack:
            pairs[stack.pop()] = i
    return pairs


def _braced_exponents(text: str) -> str:
    """``x^(n+1)`` -> ``x^{n+1}``, ``2^10`` -> ``2^{10}`` (plain-text powers, as models write them); linear time."""
    pairs = _paren_pairs(text) if "^" in text else {}
    out, i = [], 0
    while i < len(text):
        if text[i] == "^":
            j = i + 1
            while j < len(text) and text[j] == " ":
                j += 1
            close = pairs.get(j)
            if close is not None:
                out.append("^{" + text[j + 1 : close] + "}")
                i = close + 1
                continue
            m = _EXP_NUMBER.match(text, j)
            if m:
                out.append("^{" + m.group(0) + "}")
                i = m.end()
                continue
        out.append(text[i])
        i += 1
    return "".join(out)


def _to_latex(text: str) -> str:
    """Turn the plain-text maths a model may write (``sqrt(3)/2``, ``pi/3``, ``x**2``, ``4.5e33``) into LaTeX."""
    t = _SCI_PLAIN.sub(lambda m: m.group(1) + "\\times 10^{" + m.group(2) + "}", text)
    t = re.sub(r"(\d)\.(?!\d)", r"\1", t)
    t = _replace_calls(t, "sqrt", "\\sqrt{}")
    t = _replace_calls(t, "cbrt", "\\sqrt[3]{}")
    t = _FUNCS.sub(r"\\\1", t)
    t = re.sub(r"(?<![A-Za-z\\])pi(?![A-Za-z])", r"\\pi ", t)
    t = re.sub(r"(?<![A-Za-z\\])(?:infinity|inf|oo)(?![A-Za-z])", r"\\infty ", t)
    t = _braced_exponents(t)
    t = re.sub(r"(?<!\\)%", r"\\%", t)
    return t


# ---------------------------------------------------------------------------
# math-verify worker process
# ---------------------------------------------------------------------------


class _WorkerGone(Exception):
    """The worker process exited or its pipe broke."""


class _WorkerLate(Exception):
    """The worker did not answer before the deadline."""


class _WorkerProcess:
    """One math-verify child process and the line protocol to it (see :mod:`synco.grading._mathverify_worker`)."""

    def __init__(self, memory_mb: int, warm_up: bool = True) -> None:
        self.owner_pid = os.getpid()
        command = [sys.executable, "-I", str(_WORKER_PATH), "--memory-mb", str(memory_mb)]
        self.proc = subprocess.Popen(
            command if warm_up else command + ["--no-warm-up"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            close_fds=True,
        )
        self.ready = False
        self._buf = bytearray()
        self._next_id = 0

    def _readline(self, deadline: float) -> bytes:
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        poller = select.poll()
        poller.register(fd, select.POLLIN | select.POLLHUP | select.POLLERR)
        while True:
            nl = self._buf.find(b"\n")
            if nl >= 0:
                line = bytes(self._buf[:nl])
                del self._buf[: nl + 1]
                return line
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not poller.poll(min(max(1, int(remaining * 1000)), 60_000)):
                if time.monotonic() >= deadline:
                    raise _WorkerLate()
                continue
            chunk = os.read(fd, 65536)
            if not chunk:
                raise _WorkerGone("worker closed its output")
            self._buf += chunk

    def wait_ready(self, timeout: float) -> None:
        """Block until the worker has imported math-verify (raises _WorkerGone/_WorkerLate)."""
        if self.ready:
            return
        reply = json.loads(self._readline(time.monotonic() + timeout))
        if not reply.get("ready"):
            raise _WorkerGone(str(reply.get("detail", "worker failed to start")))
        self.ready = True

    def call(self, payload: dict[str, Any], timeout: float) -> dict[str, Any]:
        """Send one request and wait at most ``timeout`` seconds for its reply."""
        assert self.proc.stdin is not None
        self._next_id += 1
        payload = dict(payload, id=self._next_id)
        try:
            self.proc.stdin.write((json.dumps(payload) + "\n").encode("utf-8"))
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError) as exc:
            raise _WorkerGone(str(exc)) from exc
        deadline = time.monotonic() + timeout
        while True:
            reply = json.loads(self._readline(deadline))
            if reply.get("id") == self._next_id:
                return reply

    def kill(self) -> None:
        """Stop the process (only from the process that started it; a forked child leaves it alone)."""
        if os.getpid() != self.owner_pid:
            return
        try:
            self.proc.kill()
        except ProcessLookupError:
            pass
        for stream in (self.proc.stdin, self.proc.stdout):
            try:
                if stream is not None:
                    stream.close()
            except OSError:
                pass
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            logger.warning("math-verify worker %d did not exit after SIGKILL", self.proc.pid)


# ---------------------------------------------------------------------------
# Public checker
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class CheckerStats:
    """Counters of an :class:`AnswerChecker` since it was made."""

    n_calls: int
    n_fast_path: int
    n_math_verify: int
    n_timeouts: int
    n_errors: int
    n_rejected: int
    n_worker_starts: int


def _valid_timeout(value: object, name: str = "timeout") -> float:
    """``value`` as a time bound in seconds, at most :data:`MAX_TIMEOUT` (so ``inf`` or ``1e10`` mean a large cap).

    Zero, negative, NaN or non-numeric values raise ``ValueError`` naming ``name``.
    """
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(f"{name} must be a positive number of seconds, got {value!r}")
    try:
        seconds = float(value)
    except OverflowError:  # an integer too large for a float
        seconds = math.inf if value > 0 else -math.inf
    if math.isnan(seconds) or seconds <= 0:
        raise ValueError(f"{name} must be a positive number of seconds, got {value!r}")
    return min(seconds, MAX_TIMEOUT)


def _valid_rel_tol(value: object) -> Fraction:
    """``rel_tol`` as an exact fraction in ``[0, 1)``; anything else (negative, NaN, inf, not a number) raises ``ValueError``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(f"rel_tol must be a number in [0, 1), got {value!r}")
    try:
        tol = float(value)
    except OverflowError:  # an integer too large for a float
        tol = math.inf
    if not (0.0 <= tol < 1.0):  # also false for NaN
        raise ValueError(f"rel_tol must be a number in [0, 1), got {value!r}")
    return Fraction(repr(tol))  # 0.01 -> 1/100, not the binary float's 5764607523034235/2**59


class AnswerChecker:
    """Decides whether a predicted answer equals a reference answer; safe from any thread, bounded in time.

    ``timeout`` bounds each call as a whole (seconds): normalising, waiting for
    the shared math-verify worker while other threads use it, and the
    math-verify request. When the deadline passes the answer is judged not
    equal, the same as a math-verify timeout. ``float('inf')`` or a huge value
    means :data:`MAX_TIMEOUT`; zero, negative or NaN raises ``ValueError``.
    The one exception is a worker's start-up (importing math-verify, 1-3 s, at
    most ``startup_timeout``): a call that has to wait for one gets that time on
    top of its timeout, so the first checks of a run and the first after a
    worker was killed are not judged wrong for want of a worker. ``warm_up``
    makes the worker run a few representative checks at start-up so sympy's
    lazy imports do not eat into the first calls' deadlines. Calls from several
    threads share one worker and take turns. ``use_math_verify=False`` keeps
    only the fast path (anything it cannot decide is False). The worker's
    address space is capped at ``memory_limit_mb``.
    """

    def __init__(
        self,
        timeout: float = DEFAULT_TIMEOUT,
        use_math_verify: bool = True,
        *,
        memory_limit_mb: int = 1024,
        startup_timeout: float = 60.0,
        warm_up: bool = True,
    ) -> None:
        self.timeout = _valid_timeout(timeout)
        self.use_math_verify = use_math_verify
        self.memory_limit_mb = memory_limit_mb
        self.startup_timeout = _valid_timeout(startup_timeout, "startup_timeout")
        self.warm_up = warm_up
        self.n_calls = 0
        self.n_fast_path = 0
        self.n_math_verify = 0
        self.n_timeouts = 0
        self.n_errors = 0
        self.n_rejected = 0
        self.n_worker_starts = 0
        self._lock = threading.Lock()  # guards the worker
        self._count_lock = threading.Lock()
        self._worker: _WorkerProcess | None = None
        self._finalizer: weakref.finalize | None = None
        self._start_failures = 0
        self._startup_total = 0.0  # seconds calls have spent waiting for workers to start (finished waits)
        self._startup_began: float | None = None  # when the wait for a starting worker began, while one lasts

    # -- public API --------------------------------------------------------

    def match(self, predicted: str, reference: str, *, timeout: float | None = None, rel_tol: float = 0.0) -> bool:
        """Whether ``predicted`` is the same answer as ``reference`` (False for anything unreadable or too slow).

        ``timeout`` overrides the checker's timeout for this call; it covers the whole call (see the class).
        ``rel_tol`` (default 0: the exact rules of the module docstring) also accepts numbers within that
        relative difference, for benchmarks whose references are rounded (``1.6e-19`` vs ``1.602e-19``
        at ``rel_tol=0.01``); it applies to plain numbers, in lists and matrices too, and to constant
        expressions math-verify reads. Negative, NaN or ``>= 1`` raises ``ValueError``.
        """
        tol = _valid_rel_tol(rel_tol)
        deadline = time.monotonic() + self._call_timeout(timeout)
        return self._match_until(predicted, reference, deadline, tol)

    def match_many(self, pairs: Sequence[tuple[str, str]], *, timeout: float | None = None,
                   rel_tol: float = 0.0) -> list[bool]:
        """:meth:`match` of every ``(predicted, reference)`` pair, in order: one call per batch of checks.

        Here a plain loop (each pair gets its own ``timeout``, as one :meth:`match` call would, and the
        same ``rel_tol``); it is the seam a checker that fans the checks out elsewhere overrides
        (``synco.distributed.ray_checks``), so a step asks once for all its checks and gets the same
        answers either way.
        """
        _valid_rel_tol(rel_tol)  # a bad tolerance is refused for an empty batch too
        return [self.match(predicted, reference, timeout=timeout, rel_tol=rel_tol) for predicted, reference in pairs]

    def grade(
        self,
        response: str,
        reference: str,
        *,
        timeout: float | None = None,
        mode: ExtractMode = "reward",
        boxed: BoxedPolicy = "last",
        rel_tol: float = 0.0,
    ) -> tuple[Extraction, bool]:
        """Extract the final answer of a whole response and check it against ``reference``, within one time bound.

        The per-attempt path in one call: extraction (``mode`` / ``boxed`` as in
        :func:`extract_answer_with_method`) reads at most :data:`MAX_SCAN_CHARS` characters in
        linear time, and whatever it leaves of ``timeout`` bounds the check (``rel_tol`` as in :meth:`match`).
        """
        tol = _valid_rel_tol(rel_tol)
        deadline = time.monotonic() + self._call_timeout(timeout)
        extraction = extract_answer_with_method(response, mode=mode, boxed=boxed)
        if extraction.answer is None:
            return extraction, False
        return extraction, self._match_until(extraction.answer, reference, deadline, tol)

    def understands(self, answer: str, *, timeout: float | None = None) -> bool:
        """Whether ``answer`` is something checkable: a number, expression, set/tuple/interval, choice, equation, short word.

        False for empty, over-long or code-like text, prose, placeholders ("see above"), a literal division
        by zero, and anything math-verify cannot parse either (within ``timeout``, as for :meth:`match`).
        """
        deadline = time.monotonic() + self._call_timeout(timeout)
        prep = _prepare(answer)
        if prep is None:
            return False
        try:
            value = _parse_value(prep.text, prep.was_text)
        except Exception:
            self._count("n_errors")
            logger.exception("answer fast path failed on %r", str(answer)[:200])
            return False
        if value is not None and not _contains_opaque(value):
            if isinstance(value, _Word):
                return not (set(value.text.split()) & _NON_ANSWER_WORDS)
            return not isinstance(value, _DivZero)
        if _is_prose(prep.text) or not self.use_math_verify:
            return False
        return self._ask_worker({"op": "parse", "text": _to_latex(prep.text)}, deadline)

    @property
    def startup_seconds(self) -> float:
        """Seconds calls have spent waiting for math-verify workers to start (a wait in progress included).

        Time bounds exclude it (see the class); a caller bounding several calls can exclude it the same way.
        """
        return self._startup_spent()

    def stats(self) -> CheckerStats:
        with self._count_lock:
            return CheckerStats(
                self.n_calls, self.n_fast_path, self.n_math_verify, self.n_timeouts,
                self.n_errors, self.n_rejected, self.n_worker_starts,
            )

    def close(self) -> None:
        """Stop the math-verify worker; a later call starts a new one."""
        with self._lock:
            self._drop_worker()

    def __enter__(self) -> "AnswerChecker":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- internals ---------------------------------------------------------

    def _call_timeout(self, timeout: float | None) -> float:
        """The bound of one call: the checker's, or a validated per-call override."""
        return self.timeout if timeout is None else _valid_timeout(timeout)

    def _match_until(self, predicted: str, reference: str, deadline: float, tol: Fraction = Fraction(0)) -> bool:
        """:meth:`match` with an absolute deadline (``time.monotonic()`` seconds) and a relative tolerance (0 = off)."""
        self._count("n_calls")
        try:
            pred = _prepare(predicted)
            ref = _prepare(reference)
            if pred is None or ref is None:
                self._count("n_rejected")
                return False
            verdict = self._fast(pred, ref, tol)
        except Exception:  # a bug in the fast path must not crash a training step; counted and logged
            self._count("n_errors")
            logger.exception("answer fast path failed on %r vs %r", str(predicted)[:200], str(reference)[:200])
            return False
        if verdict is not None:
            self._count("n_fast_path")
            return verdict
        if not self.use_math_verify or _is_prose(pred.text):
            return False
        payload = {"op": "match", "ref": _to_latex(ref.text), "pred": _to_latex(pred.text), "rel_tol": float(tol)}
        return self._ask_worker(payload, deadline)

    def _count(self, name: str, k: int = 1) -> None:
        with self._count_lock:
            setattr(self, name, getattr(self, name) + k)

    def _fast(self, pred: _Prepared, ref: _Prepared, tol: Fraction = Fraction(0)) -> bool | None:
        """The fast path's verdict; a decorated number it cannot read is never handed to math-verify (False)."""
        verdict = self._fast_verdict(pred, ref, tol)
        if verdict is None and (_decorated_number(pred.text) or _decorated_number(ref.text)):
            return False
        return verdict

    def _fast_verdict(self, pred: _Prepared, ref: _Prepared, tol: Fraction = Fraction(0)) -> bool | None:
        if pred.unit and ref.unit and pred.unit != ref.unit:
            return False
        if pred.key == ref.key:
            return True
        if _one_side_of_equation(pred.text, ref.text):
            return False
        a = _parse_value(pred.text, pred.was_text)
        b = _parse_value(ref.text, ref.was_text)
        if a is None or b is None:
            known = a if a is not None else b
            if isinstance(known, (_Word, _Choice, _DivZero)):
                return False  # a word/choice never equals something only math-verify could read
            if _shapes_differ(pred.text, ref.text) is False:
                return False
            return _variables_differ(pred.text, ref.text, a, b)
        return _same(a, b, tol)

    def _drop_worker(self) -> None:
        if self._finalizer is not None:
            self._finalizer()  # kills the process
            self._finalizer = None
        self._worker = None

    def _start_worker(self) -> bool:
        """Launch a worker process (it imports math-verify in the background); False if the OS refuses."""
        try:
            self._worker = _WorkerProcess(self.memory_limit_mb, self.warm_up)
        except (OSError, subprocess.SubprocessError) as exc:
            self._start_failures += 1
            logger.warning("cannot start the math-verify worker: %s", exc)
            self._worker = None
            return False
        self._finalizer = weakref.finalize(self, _WorkerProcess.kill, self._worker)
        self._count("n_worker_starts")
        return True

    def _startup_spent(self) -> float:
        """Seconds calls have spent waiting for workers to start, including a wait in progress."""
        with self._count_lock:
            began = self._startup_began
            return self._startup_total + (time.monotonic() - began if began is not None else 0.0)

    def _wait_ready(self, worker: _WorkerProcess) -> None:
        """Wait (at most ``startup_timeout``) for a starting worker, recording the time so deadlines can exclude it."""
        if worker.ready:
            return
        with self._count_lock:
            self._startup_began = time.monotonic()
        try:
            worker.wait_ready(self.startup_timeout)
        finally:
            with self._count_lock:
                assert self._startup_began is not None
                self._startup_total += time.monotonic() - self._startup_began
                self._startup_began = None

    def _ready_worker(self) -> _WorkerProcess | None:
        """The running worker (started if needed), or None when math-verify cannot be started here."""
        if self._worker is not None and self._worker.owner_pid != os.getpid():
            # We were forked: the process belongs to our parent. Forget it without touching it.
            if self._finalizer is not None:
                self._finalizer.detach()
            self._worker, self._finalizer = None, None
        if self._start_failures >= 3:
            return None
        if self._worker is None and not self._start_worker():
            return None
        assert self._worker is not None
        try:
            self._wait_ready(self._worker)
        except (_WorkerGone, _WorkerLate, ValueError) as exc:
            self._start_failures += 1
            logger.warning("math-verify worker failed to start (%s); attempt %d", exc, self._start_failures)
            self._drop_worker()
            return None
        return self._worker

    def _acquire_until(self, deadline: float, startup_mark: float) -> bool:
        """Take the worker lock before ``deadline``, extended by any worker start-up since ``startup_mark``."""
        while True:
            remaining = deadline + (self._startup_spent() - startup_mark) - time.monotonic()
            if remaining <= 0:
                return False
            if self._lock.acquire(timeout=min(remaining, threading.TIMEOUT_MAX)):
                return True

    def _ask_worker(self, payload: dict[str, Any], deadline: float) -> bool:
        """One math-verify request before ``deadline``, lock wait included; on timeout the worker is killed and replaced.

        Time spent waiting for a worker to start (by this call or by the call it queues behind)
        is added to the deadline; see :class:`AnswerChecker`.
        """
        startup_mark = self._startup_spent()
        if not self._acquire_until(deadline, startup_mark):
            self._count("n_timeouts")  # the worker was busy with other calls until our deadline
            return False
        try:
            if deadline + (self._startup_spent() - startup_mark) <= time.monotonic():
                self._count("n_timeouts")  # got the lock just too late: no waiting for a worker to start either
                return False
            worker = self._ready_worker()
            if worker is not None and worker.proc.poll() is not None:
                self._drop_worker()  # it died since the last call (killed from outside): start afresh
                worker = self._ready_worker()
            if worker is None:
                return False
            remaining = deadline + (self._startup_spent() - startup_mark) - time.monotonic()
            if remaining <= 0:
                self._count("n_timeouts")
                return False
            self._count("n_math_verify")
            try:
                reply = worker.call(dict(payload, budget=max(0.8 * remaining, 0.01)), remaining)
            except _WorkerLate:
                self._count("n_timeouts")
                self._drop_worker()
                self._start_worker()  # warm up the replacement while the caller moves on
                return False
            except _WorkerGone as exc:
                # Died on this request: its memory or CPU limit ended it. A wrong answer, like a timeout.
                self._count("n_timeouts")
                logger.warning("math-verify worker died during a request (%s)", exc)
                self._drop_worker()
                return False
            except ValueError as exc:  # undecodable reply
                self._count("n_errors")
                logger.warning("bad reply from math-verify worker: %s", exc)
                self._drop_worker()
                return False
        finally:
            self._lock.release()
        status = reply.get("status")
        if status == "timeout":
            self._count("n_timeouts")
        elif status == "error":
            self._count("n_errors")
            logger.warning("math-verify worker error: %s", reply.get("detail"))
        return reply.get("result") is True


_default_checker: AnswerChecker | None = None
_default_lock = threading.Lock()


def default_checker() -> AnswerChecker:
    """The process-wide checker behind :func:`answers_match` (created on first use)."""
    global _default_checker
    with _default_lock:
        if _default_checker is None:
            _default_checker = AnswerChecker()
        return _default_checker


def answers_match(
    predicted: str, reference: str, *, timeout: float = DEFAULT_TIMEOUT, rel_tol: float = 0.0
) -> bool:
    """Whether ``predicted`` equals ``reference``, using the shared :class:`AnswerChecker`, within ``timeout`` seconds.

    ``rel_tol`` as in :meth:`AnswerChecker.match` (0: exact rules).
    """
    return default_checker().match(predicted, reference, timeout=timeout, rel_tol=rel_tol)
