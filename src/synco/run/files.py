"""Small file helpers of the run directory: whole-or-nothing writes and forgiving reads."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def write_atomic(path: Path, text: str) -> None:
    """Write a whole file or nothing: a kill mid-write leaves the old file (or none), never half of one."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    tmp.replace(path)


def read_json(path: Path) -> Any:
    """A JSON file's content, or None when it is absent or unreadable."""
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def jsonl_rows(path: Path) -> list[dict[str, Any]]:
    """The JSON objects of a JSONL file (none when it is absent)."""
    if not path.exists():
        return []
    return [json.loads(ln) for ln in path.read_text().splitlines() if ln.strip()]
