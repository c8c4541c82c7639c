"""Small text helpers for what synco prints to a user."""

from __future__ import annotations


def counted(n: int, noun: str) -> str:
    """``1 step``, ``2 steps``: a count and its noun in the number it takes (nouns that add an s)."""
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"
