"""Turn messy Synthesizer output into a ``TaskCard``, or say exactly why not.

Model output is hostile input. ``parse_task_card`` accepts what models really
write and rejects the rest with a ``CardError`` (a ``TaskCardError``) whose
message names the problem and whose ``code`` is a stable reason code.

What is tolerated, in order of processing:

* ``<think>...</think>``: only the text after the last ``</think>`` counts; a
  ``<think>`` that is never closed means the model never wrote its card.
* Prose and markdown code fences around the object: the parser looks for a
  balanced ``{...}`` that starts like a JSON object (``{`` then ``"``), matching
  braces outside string literals only, and tries up to ``MAX_CANDIDATES`` such
  objects until one holds a card.
* Trailing commas before ``}`` / ``]``; a missing comma between a string and
  the next key (``"value"\n"key":``, a small model's usual slip: two adjacent
  strings are never valid JSON, so the repair only turns an error into the one
  reading there is); raw control characters inside strings.
* LaTeX backslashes that are not JSON escapes. Inside string literals, ``\\"``,
  ``\\\\``, ``\\/`` and ``\\uXXXX`` keep their JSON meaning. ``\\b`` and ``\\f``
  are always literal backslashes (a backspace/form feed is never meant, while
  ``\\frac``, ``\\beta``, ``\\boxed`` are common). ``\\n``, ``\\r``, ``\\t`` are
  newline/CR/tab unless they start a known LaTeX command (``\\neq``, ``\\theta``,
  ``\\right``, ``\\text``...) or a letter word directly followed by ``{``:
  ``"a\\nStep 2"`` is a newline, ``"x \\neq 0"`` is LaTeX. Any other backslash
  (``\\sqrt``, ``\\(``, ``\\,``) is kept literally.
* Non-string values of the nine fields: numbers keep their exact JSON text
  (``3`` -> ``"3"``, ``0.50`` -> ``"0.50"``), booleans become ``"true"``/
  ``"false"``, ``null`` counts as empty. A list of scalars is joined with
  newlines (``", "`` for ``final_answer``), any other list or object becomes
  its compact JSON text.
* Field names are matched exactly first, then case-insensitively with spaces
  and hyphens read as underscores (``"Final Answer"``). An object with none of
  the fields but exactly one object value holding some of them is unwrapped
  (``{"task_card": {...}}``).
* Unknown keys go to ``card.extra``; a ``factors`` object goes to
  ``card.factors`` (scalar values as strings, nested values dropped).

Values of the nine fields are stripped of surrounding whitespace; a missing or
whitespace-only field is an error. Inputs over ``MAX_INPUT_CHARS`` or nested
deeper than ``MAX_DEPTH`` are rejected, so no input can hang the parser or
raise anything but ``CardError``.
"""

from __future__ import annotations

import json
import re
from typing import Any

from synco.core.records import CARD_FIELDS, ProblemPayload, TaskCard, TaskCardError, TaskPayload

MAX_INPUT_CHARS = 200_000
"""Longer inputs are rejected outright (bounds the parser's time)."""

MAX_CANDIDATES = 8
"""How many ``{"...}`` objects are tried before giving up."""

MAX_DEPTH = 64
"""Deeper ``{``/``[`` nesting is rejected before ``json.loads`` sees it."""

_THINK_CLOSE = re.compile(r"</think\s*>", re.IGNORECASE)
_THINK_OPEN = re.compile(r"<think\s*>", re.IGNORECASE)
_OBJECT_START = re.compile(r'\{\s*"')
_TOKEN = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*(")?|[{}\[\]]', re.DOTALL)
_CLEAN_TOKENS = re.compile(r'["\\,]')
_TRAILING_WS = re.compile(r"\s*")
_HEX4 = re.compile(r"[0-9a-fA-F]{4}")
_LETTERS = re.compile(r"[A-Za-z]+")
_SURROGATE = re.compile("[\ud800-\udfff]")
_KEY_AHEAD = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"\s*:')

# LaTeX commands whose names start with n, r or t: after a backslash these are
# LaTeX, not the JSON escapes \n, \r, \t followed by a word.
_LATEX_NRT = frozenset(
    """
    ne neq nu nabla neg not notin ni nmid nleq ngeq nless ngtr nsubseteq nsupseteq nsubset nsupset
    newline noindent nonumber nolimits natural nexists nparallel nearrow nwarrow newcommand normalsize
    nleftarrow nrightarrow nLeftarrow nRightarrow ncong nsim nvdash nleqslant ngeqslant nprec nsucc
    right rightarrow Rightarrow rho rangle rfloor rceil rm rbrace rbrack rvert rVert rightharpoonup
    rightleftharpoons rgroup root rule raisebox renewcommand rightrightarrows rtimes rmoustache
    theta tau times tan tanh text textbf textit textrm textsf texttt textnormal textstyle textup textsc
    textcolor tfrac tbinom tilde top to triangle triangleleft triangleright trianglelefteq trianglerighteq
    therefore thinspace tiny tt tag thicksim thickapprox twoheadrightarrow tdots textdegree textperthousand
    """.split()
)

_CONTROL_ESCAPES = {"n": "\\u000a", "r": "\\u000d", "t": "\\u0009", "b": "\\u0008", "f": "\\u000c"}


class CardError(TaskCardError):
    """Why a text is not a task card.

    ``code`` is a stable reason code; ``json_loaded`` says whether some JSON
    object was found and loaded (the verifier's format check); ``fields_present``
    counts the non-empty card fields of the best object found (its schema check).
    """

    def __init__(self, code: str, message: str, *, json_loaded: bool = False, fields_present: int = 0) -> None:
        super().__init__(message)
        self.code = code
        self.json_loaded = json_loaded
        self.fields_present = fields_present


def parse_task_card(text: str, payload_type: type[TaskPayload] = ProblemPayload) -> TaskCard:
    """Parse one Synthesizer completion into a ``TaskCard`` whose payload is a ``payload_type`` (the domain's, read
    from the card fields the model wrote); raise ``CardError`` saying why not."""
    if not isinstance(text, str):
        raise TypeError(f"parse_task_card expects str, got {type(text).__name__}")
    if len(text) > MAX_INPUT_CHARS:
        raise CardError("input_too_long", f"input too long: {len(text)} chars > {MAX_INPUT_CHARS}")
    body = _after_think(text)
    errors: list[CardError] = []
    found_start = False
    pos, tried = 0, 0
    while tried < MAX_CANDIDATES:
        m = _OBJECT_START.search(body, pos)
        if m is None:
            break
        found_start, tried = True, tried + 1
        start = m.start()
        span = _balanced_end(body, start)
        if span is None:
            errors.append(CardError("truncated_json", "unterminated JSON object (output cut off?)"))
            pos = start + 1
            continue
        end, depth = span
        pos = end
        if depth > MAX_DEPTH:
            errors.append(CardError("too_deep", f"JSON nesting deeper than {MAX_DEPTH} levels"))
            continue
        try:
            obj = _load_object(body[start:end])
        except CardError as err:
            errors.append(err)
            continue
        try:
            return _card_from_object(obj).typed(payload_type)
        except CardError as err:
            errors.append(err)
    if not found_start:
        raise CardError("no_json", "no JSON object found")
    raise _best_error(errors)


def render_card_json(card: TaskCard) -> str:
    """The nine fields as compact JSON (field order of ``CARD_FIELDS``), for SFT data and examples.

    Written so that ``parse_task_card`` reads it back unchanged: a control
    character whose short escape the parser would read as LaTeX (``\\b``,
    ``\\f``, or a newline before ``neq``) is written as ``\\uXXXX``, and think
    tags inside values are escaped so they cannot be mistaken for real ones.
    """
    data = card.wire()
    dumped = json.dumps(data, ensure_ascii=False, separators=(",", ":"))

    def fix(m: re.Match[str]) -> str:
        c = m.group(1)
        if c in _CONTROL_ESCAPES and not _escape_is_json(dumped, m.start()):
            return _CONTROL_ESCAPES[c]
        return m.group(0)

    dumped = re.sub(r"\\(.)", fix, dumped)
    return re.sub(r"<(/?think\s*>)", r"\\u003c\1", dumped, flags=re.IGNORECASE)


# --------------------------------------------------------------------------- helpers


def _after_think(text: str) -> str:
    """The text after the last ``</think>``; an unclosed ``<think>`` is an error."""
    closes = list(_THINK_CLOSE.finditer(text))
    tail = text[closes[-1].end():] if closes else text
    if _THINK_OPEN.search(tail):
        raise CardError("unclosed_think", "unclosed <think> block (no card after the reasoning)")
    return tail


def _balanced_end(text: str, start: int) -> tuple[int, int] | None:
    """End index (exclusive) of the ``{...}`` opened at ``text[start]`` and its max nesting depth.

    Braces inside string literals do not count (a whole literal is one regex
    match, so the Python loop runs per token, not per character). None when the
    object never closes.
    """
    braces = brackets = max_depth = 0
    pos = start
    while True:
        m = _TOKEN.search(text, pos)
        if m is None:
            return None
        pos = m.end()
        tok = m.group()
        c = tok[0]
        if c == '"':
            if m.group(1) is None:
                return None  # unterminated string literal
            continue
        if c == "{":
            braces += 1
        elif c == "}":
            braces -= 1
            if braces == 0:
                return pos, max_depth
        elif c == "[":
            brackets += 1
        else:
            brackets = max(0, brackets - 1)
        max_depth = max(max_depth, braces + brackets)


def _escape_is_json(text: str, i: int) -> bool:
    """Whether the backslash at ``text[i]`` (inside a string literal) is a JSON escape the model meant."""
    c = text[i + 1] if i + 1 < len(text) else ""
    if c in ('"', "\\", "/"):
        return True
    if c == "u":
        return _HEX4.match(text, i + 2) is not None
    if c in ("n", "r", "t"):
        word = _LETTERS.match(text, i + 1)
        if word is None or len(word.group()) == 1:
            return True
        followed_by_brace = text.startswith("{", word.end())
        return not (word.group() in _LATEX_NRT or followed_by_brace)
    return False  # \b, \f and anything else: a literal backslash (LaTeX)


def _clean_json(obj_text: str) -> str:
    """Make a candidate object loadable: escape literal backslashes, drop trailing commas."""
    out: list[str] = []
    pos = 0
    in_string = False
    closed = -2  # index of the last closing quote outside which only whitespace has followed
    n = len(obj_text)
    while True:
        m = _CLEAN_TOKENS.search(obj_text, pos)
        if m is None:
            out.append(obj_text[pos:])
            return "".join(out)
        i = m.start()
        c = obj_text[i]
        out.append(obj_text[pos:i])
        pos = i + 1
        if in_string:
            if c == '"':
                in_string = False
                closed = i
                out.append(c)
            elif c == "\\":
                if _escape_is_json(obj_text, i):
                    out.append(obj_text[i : i + 2])
                    pos = i + 2
                else:
                    out.append("\\\\")
            else:
                out.append(c)
            continue
        if c == '"':
            if closed >= 0 and not obj_text[closed + 1 : i].strip() and _KEY_AHEAD.match(obj_text, i):
                out.append(",")  # a missing comma between members: '"value"\n"key":'
            in_string = True
            out.append(c)
        elif c == ",":
            ws = _TRAILING_WS.match(obj_text, i + 1)
            nxt = ws.end() if ws else i + 1
            if nxt < n and obj_text[nxt] in "}]":
                continue  # trailing comma: drop it
            out.append(c)
        else:
            out.append(c)  # a backslash outside strings: leave it for json to reject


def _load_object(obj_text: str) -> dict[str, Any]:
    """``json.loads`` of a cleaned candidate; numbers keep their source text."""
    cleaned = _clean_json(obj_text)
    try:
        obj = json.loads(cleaned, strict=False, parse_int=str, parse_float=str, parse_constant=str)
    except json.JSONDecodeError as err:
        raise CardError("invalid_json", f"invalid JSON: {err.msg} at char {err.pos}") from None
    except RecursionError:
        raise CardError("too_deep", "JSON nesting too deep") from None
    if not isinstance(obj, dict):  # cannot happen for text starting with '{', kept as a guard
        raise CardError("invalid_json", "JSON value is not an object")
    return obj


def _norm_key(key: str) -> str:
    """Lowercase, spaces/hyphens -> underscores: ``"Final Answer"`` -> ``final_answer``."""
    return re.sub(r"[\s\-]+", "_", key.strip().lower())


def _field_keys(obj: dict[str, Any]) -> dict[str, str]:
    """Map each card field to the key of ``obj`` that holds it (exact names win)."""
    found = {name: name for name in CARD_FIELDS if name in obj}
    for key in obj:
        name = _norm_key(key)
        if name in CARD_FIELDS and name not in found:
            found[name] = key
    return found


def _unwrap(obj: dict[str, Any]) -> dict[str, Any]:
    """``{"card": {...fields...}}`` -> the inner object; anything else unchanged."""
    if _field_keys(obj):
        return obj
    inner = [v for v in obj.values() if isinstance(v, dict) and _field_keys(v)]
    return inner[0] if len(inner) == 1 else obj


def _sanitize(value: Any, depth: int = 0) -> Any:
    """Replace lone surrogates (from ``\\ud800`` escapes) so every string encodes as UTF-8."""
    if isinstance(value, str):
        return _SURROGATE.sub("\ufffd", value) if _SURROGATE.search(value) else value
    if depth > MAX_DEPTH:
        return value
    if isinstance(value, list):
        return [_sanitize(v, depth + 1) for v in value]
    if isinstance(value, dict):
        return {_sanitize(k, depth + 1): _sanitize(v, depth + 1) for k, v in value.items()}
    return value


def _as_text(value: Any, name: str) -> str:
    """A field value as stripped text (rules in the module docstring); '' for null."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return value.strip()
    if isinstance(value, list) and all(v is None or isinstance(v, (str, bool)) for v in value):
        parts = [_as_text(v, name) for v in value]
        return (", " if name == "final_answer" else "\n").join(p for p in parts if p)
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _factors(value: Any) -> dict[str, str]:
    """Scalar entries of a ``factors`` object, as strings."""
    if not isinstance(value, dict):
        return {}
    out: dict[str, str] = {}
    for k, v in value.items():
        if isinstance(v, (str, bool)):
            text = _as_text(v, "factors")
            if text:
                out[str(k)] = text
    return out


def _card_from_object(raw: dict[str, Any]) -> TaskCard:
    """Build the card from a loaded object or raise ``CardError`` naming the first bad field."""
    obj = _sanitize(_unwrap(raw))
    keys = _field_keys(obj)
    values = {name: _as_text(obj[key], name) for name, key in keys.items()}
    missing = [name for name in CARD_FIELDS if name not in keys]
    empty = [name for name in CARD_FIELDS if name in keys and not values[name]]
    present = len(CARD_FIELDS) - len(missing) - len(empty)
    if missing:
        more = f" (+{len(missing) - 1} more: {', '.join(map(repr, missing[1:]))})" if len(missing) > 1 else ""
        raise CardError("missing_field", f"missing field '{missing[0]}'{more}", json_loaded=True, fields_present=present)
    if empty:
        more = f" (+{len(empty) - 1} more: {', '.join(map(repr, empty[1:]))})" if len(empty) > 1 else ""
        raise CardError("empty_field", f"empty field '{empty[0]}'{more}", json_loaded=True, fields_present=present)
    used = set(keys.values())
    factors = _factors(obj.get("factors"))
    extra = {k: v for k, v in obj.items() if k not in used and not (k == "factors" and isinstance(v, dict))}
    return TaskCard(**values, factors=factors, extra=extra)


def _best_error(errors: list[CardError]) -> CardError:
    """The most informative failure: a loaded object with the most fields, else the first error."""
    loaded = [e for e in errors if e.json_loaded]
    if loaded:
        return max(loaded, key=lambda e: e.fields_present)  # max keeps the first among equals
    return errors[0]
