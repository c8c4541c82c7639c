"""JSON brackets in hostile text (model output), found by one scan: where a ``{...}`` / ``[...]`` value closes and
how deep it nests, brackets inside JSON strings ignored.

Used before ``json.loads`` ever sees model text, so that the parser is only handed a bounded, balanced span and
never recurses deep: :func:`balanced_objects` (the objects inside prose, for the factor proposer) and
:func:`json_depth` (the nesting of one call body, for τ²'s agent turns). Linear in the text's length; nothing is
evaluated and no regex is built from the text.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

__all__ = ["BracketSpan", "balanced_objects", "bracket_span", "json_depth"]

_SPECIAL = re.compile(r'[][{}"\\]')
OPENERS = "{["


@dataclass(frozen=True)
class BracketSpan:
    """The value opening at ``start``: ``end`` is one past the bracket that closes it (None when the text ends
    first); ``depth`` is its deepest nesting (1 for ``{}``), counted as far as the scan went."""

    start: int
    end: int | None
    depth: int


def bracket_span(text: str, start: int = 0) -> BracketSpan:
    """Scan the bracketed value that opens at ``text[start]`` (``{`` or ``[``) to the bracket that closes it.

    Any closing bracket closes (``{]`` is a span: ``json.loads`` rejects it later); a backslash inside a string
    escapes the next character; outside strings it is an ordinary character. Linear in what it reads.
    """
    if not (0 <= start < len(text)) or text[start] not in OPENERS:
        raise ValueError(f"no opening bracket at {start}")
    depth = deepest = 0
    in_string = False
    pos = start
    while (m := _SPECIAL.search(text, pos)) is not None:
        i = m.start()
        ch = text[i]
        pos = i + 1
        if in_string:
            if ch == "\\":
                pos = i + 2  # the escaped character, whatever it is
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in OPENERS:
            depth += 1
            deepest = max(deepest, depth)
        elif ch in "}]":
            depth -= 1
            if depth == 0:
                return BracketSpan(start, i + 1, deepest)
    return BracketSpan(start, None, deepest)


def json_depth(text: str) -> int:
    """The deepest ``{``/``[`` nesting of the JSON value ``text`` starts with (leading whitespace skipped); 0 when
    it does not start with a bracket (a string, a number, prose). What ``json.loads`` would recurse into: it parses
    that value first, and any text after it is an error, not more nesting."""
    body = text.lstrip()
    if not body or body[0] not in OPENERS:
        return 0
    return bracket_span(body).depth


def balanced_objects(text: str, max_depth: int, max_objects: int) -> Iterator[str]:
    """The top-level balanced ``{...}`` spans of ``text`` in order (prose between them ignored, strings inside a
    span respected).

    A span nested deeper than ``max_depth`` is skipped; at most ``max_objects`` spans are tried; an unbalanced
    span ends the search (it runs to the end of the text). Linear in ``len(text)``.
    """
    pos = found = 0
    while found < max_objects:
        start = text.find("{", pos)
        if start < 0:
            return
        span = bracket_span(text, start)
        if span.end is None:
            return
        found += 1
        if span.depth <= max_depth:
            yield text[start:span.end]
        pos = span.end
