"""Answer extraction: find the final answer in a Reasoner response, in one of two modes.

(:func:`extract_answer`, :func:`extract_answer_with_method`, :func:`boxed_answers`.)
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
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from synco.core.records import ExtractionMethod
from synco.grading.normalise import (
    _brace_pairs,
    _MATH_NAMES,
    MAX_ANSWER_CHARS,
    _prepare,
    _SHORT_UNITS,
    _TEXT_GROUP,
    _UNIT_SYNONYMS,
)
from synco.grading.values import _CHOICE, _IDENT, _parse_value, _split_top, _Value, _WORD
from synco.grading.equivalence import _equation_sides, _free_letters, _is_prose, _RELATION_MARK, _same


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
# Written without two adjacent optional runs of whitespace (``\s*(?:\*\*)?\s*``), which backtrack
# quadratically on "answer" followed by a long run of spaces.
_ANSWER_MARK = re.compile(
    r"(?i)\b(final\s+answer|answer)\b\s*(?:(?:\*\*|__)\s*)?(?:is\b\s*:?|:)\s*(?:\*\*|__)?"
)
_THINK_CLOSE_TAG = re.compile(r"(?i)</think>")
_THINK_OPEN_TAG = re.compile(r"(?i)<think>")
_HOPE_PHRASE = "i hope it is correct"
_LINE_WRAPPERS = (("$$", "$$"), ("$", "$"), ("\\(", "\\)"), ("\\[", "\\]"))


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
        if any(key == k or (value is not None and v is not None and _same(value, v) is True and _same(v, value) is True)
               for _, k, v in kept):  # one answer both ways (a base numeral reads one way per side)
            continue
        kept.append((b, key, value))
    if len(kept) == 1:
        return kept[0][0], "boxed"
    return ", ".join(form for form, _, _ in kept), "boxed_all"


_APPROX_MARK = re.compile(r"\\approx(?![A-Za-z])|\u2248|\\simeq(?![A-Za-z])")


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
