"""Text preparation shared by extraction and checking.

The hostile-text filter, invisible characters and Unicode folding, outer wrappers (``$..$``, ``\\boxed``,
``\\text``), units, currency and degree marks, script digits: :func:`_prepare` turns an answer into the
normalised text and key that :mod:`synco.grading.values` parses and :mod:`synco.grading.checker` compares.
Also the brace matching the extraction uses, and :func:`_to_latex`, which rewrites plain-text maths
(``sqrt(3)/2``, ``x**2``) as LaTeX for math-verify.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass



MAX_ANSWER_CHARS = 1000
"""Answers longer than this (after extraction) are treated as wrong, never parsed."""
_BRACE_TOKEN = re.compile(r"\\.|[{}]", re.DOTALL)


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
