"""Print the lines of a pip constraints file whose packages are not installed in the running interpreter.

``make serve-venv`` installs synco's test dependencies into the vLLM server's environment pinned by constraints.txt,
but vllm pins its own torch and transformers there: constraining those too would make pip replace them. So the
constraints it uses are constraints.txt less every package already installed.

    .venv-vllm/bin/python tests/vllm_constraints.py constraints.txt > .venv-vllm/constraints-synco.txt
"""

from __future__ import annotations

import re
import sys
from importlib.metadata import distributions


def canonical(name: str) -> str:
    """A distribution name as pip compares them (PEP 503)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def missing(lines: list[str], installed: set[str]) -> list[str]:
    """The requirement lines of ``lines`` whose package is not in ``installed`` (canonical names); comments dropped."""
    out = []
    for line in lines:
        text = line.split("#", 1)[0].strip()
        name = re.split(r"[=<>!~;\[ ]", text, maxsplit=1)[0]
        if name and canonical(name) not in installed:
            out.append(text)
    return out


def main() -> None:
    installed = {canonical(d.metadata["Name"]) for d in distributions() if d.metadata["Name"]}
    with open(sys.argv[1], encoding="utf-8") as f:
        print("\n".join(missing(f.read().splitlines(), installed)))


if __name__ == "__main__":
    main()
