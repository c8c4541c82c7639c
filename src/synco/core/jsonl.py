"""The one reader of a JSONL file of typed records (run files, evaluation records): each line one pydantic model.

Torch-free and free of the layers above, so ``synco.analysis`` (torch-free) and ``synco.eval`` read their files
with the same rules: a missing file is no records, blank lines are skipped, and a line that is not a record is an
error naming the file, the line and the first field that is wrong, raised as the caller's own error type.
"""

from __future__ import annotations

from pathlib import Path
from typing import TypeVar

from pydantic import BaseModel, ValidationError

__all__ = ["read_jsonl", "validation_message"]

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
