"""Small text helpers for what synco prints to a user."""

from __future__ import annotations

import yaml


def counted(n: int, noun: str) -> str:
    """``1 step``, ``2 steps``: a count and its noun in the number it takes (nouns that add an s)."""
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def yaml_problem(err: "yaml.YAMLError") -> str:
    """A YAML error in one line, ``line L, column C: problem``, for a message that names the file or key itself (the
    error's own text names the string it parsed, ``"<unicode string>"``, over several lines)."""
    mark = getattr(err, "problem_mark", None)
    problem = " ".join(str(getattr(err, "problem", None) or "").split()) or type(err).__name__
    context = " ".join(str(getattr(err, "context", None) or "").split())
    where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
    return where + problem + (f" ({context})" if context else "")
