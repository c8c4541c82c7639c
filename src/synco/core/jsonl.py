"""The one reader of a JSONL file of typed records (run files, evaluation records): each line one pydantic model;
and the one rewind of a run's step-stamped JSONL logs (:func:`truncate_jsonl`).

Torch-free and free of the layers above, so ``synco.analysis`` (torch-free), ``synco.eval``, ``synco.evosyn`` and
``synco.run`` read their files with the same rules: a missing file is no records, blank lines are skipped, a torn
last line (a write cut by a kill) is dropped where appends may be cut, and any other line that is not a record is an
error naming the file, the line and what is wrong, raised as the caller's own error type. No bad line is skipped
silently.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from pydantic import BaseModel, ValidationError

__all__ = ["read_jsonl", "truncate_jsonl", "validation_message"]

M = TypeVar("M", bound=BaseModel)


def validation_message(e: Exception) -> str:
    """The first message of a pydantic ValidationError (its field and why), else the exception's text."""
    if isinstance(e, ValidationError):
        err = e.errors()[0]
        where = ".".join(str(p) for p in err["loc"])
        return f"{where}: {err['msg']}" if where else err["msg"]
    return str(e)


def read_jsonl(path: Path, model: type[M], what: str, *, error: type[Exception] = ValueError,
               torn_tail: bool = False) -> list[M]:
    """Every line of ``path`` as ``model``, in file order; [] when the file does not exist.

    ``torn_tail``: the file is appended to while it is read or after a crash (raw evaluation records, τ² trials),
    so a last line without its newline is an interrupted write and is dropped. Otherwise every line counts.
    A line that is not a ``model`` raises ``error("<path>:<line>: not a <what> (<field>: <why>)")``.
    """
    if not path.is_file():
        return []
    lines = path.read_text(encoding="utf-8").split("\n")
    last = lines.pop()  # "" after a final newline, else the last line, unterminated
    if last and not torn_tail:
        lines.append(last)
    records: list[M] = []
    for lineno, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            records.append(model.model_validate_json(line))
        except ValidationError as err:
            raise error(f"{path}:{lineno}: not a {what} ({validation_message(err)})") from err
    return records


def truncate_jsonl(path: Path, last_step: int, *, error: type[Exception] = ValueError,
                   log: Callable[[str], None] = print) -> int:
    """Drop the rows of a step-stamped JSONL log (each line an object with a ``step``) logged after ``last_step``
    (rows a resumed run logs again); returns how many lines were dropped. Nothing to do when the file is absent.

    A torn last line (the run was killed while writing it) is dropped and reported through ``log``; an unreadable
    line elsewhere raises ``error`` naming the file and line. The file is rewritten whole or not at all.
    """
    if not path.exists():
        return 0
    lines = [ln for ln in path.read_bytes().decode("utf-8", errors="replace").splitlines() if ln.strip()]
    keep = []
    for i, ln in enumerate(lines):
        try:
            step = json.loads(ln)["step"]
        except (ValueError, KeyError, TypeError) as e:
            if i == len(lines) - 1:
                log(f"{path}: dropped a torn last line (the run was stopped while writing it)")
                continue
            raise error(f"{path}: line {i + 1} is not a JSON object with a step ({e}); fix or delete that line") from None
        if step <= last_step:
            keep.append(ln)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text("".join(ln + "\n" for ln in keep))
    tmp.replace(path)
    return len(lines) - len(keep)
