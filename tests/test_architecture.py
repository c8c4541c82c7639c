"""The layering is a checked contract: no import cycle, no upward import, and a new upward import fails.

The contract itself is ``[tool.importlinter]`` in pyproject.toml (run by ``make test`` as ``lint-imports``);
these tests pin what it must catch, lazy imports included, so a loosened contract fails here too.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = ROOT / "pyproject.toml"
LINT = ("from importlinter.cli import lint_imports; import sys; "
        "sys.exit(lint_imports(config_filename=sys.argv[1], no_cache=True, no_logo=True))")

pytest.importorskip("importlinter")
grimp = pytest.importorskip("grimp")


def _lint(src_root: Path, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """``lint-imports`` on the package found under ``src_root`` (a copy, so the check sees the edit)."""
    env = {"PYTHONPATH": str(src_root), "PATH": "/usr/bin:/bin"}
    return subprocess.run([sys.executable, "-c", LINT, str(PYPROJECT)], capture_output=True, text=True,
                          cwd=tmp_path, env=env, timeout=300)


def _cycles(graph) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    for root in sorted(graph.modules):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.find_modules_directly_imported_by(root))))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.find_modules_directly_imported_by(child)))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                comp = []
                while True:
                    m = stack.pop()
                    on_stack.discard(m)
                    comp.append(m)
                    if m == node:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return out


def test_cycle_finder_finds_a_hand_made_cycle() -> None:
    class Graph:
        modules = {"a", "b", "c", "d"}
        edges = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}

        def find_modules_directly_imported_by(self, m: str) -> set[str]:
            return self.edges[m]

    assert _cycles(Graph()) == [["a", "b", "c"]]


def test_the_package_has_no_import_cycle() -> None:
    """Lazy (function-level) and TYPE_CHECKING imports count: grimp reads every import statement."""
    graph = grimp.build_graph("synco")
    assert _cycles(graph) == []


def test_the_layer_contract_holds(tmp_path: Path) -> None:
    res = _lint(ROOT / "src", tmp_path)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "1 kept, 0 broken" in res.stdout


def test_an_upward_import_breaks_the_contract_and_is_named(tmp_path: Path) -> None:
    """A lazy import of the run layer from a core module (the kind of shortcut the contract exists to stop)."""
    copy = tmp_path / "src"
    shutil.copytree(ROOT / "src" / "synco", copy / "synco", ignore=shutil.ignore_patterns("__pycache__", "assets"))
    records = copy / "synco" / "core" / "records.py"
    records.write_text(records.read_text() + "\n\ndef _shortcut():\n    from synco.run.loop import train\n\n"
                       "    return train\n")
    res = _lint(copy, tmp_path)
    assert res.returncode != 0
    assert "synco.core is not allowed to import synco.run" in res.stdout
    assert "synco.core.records -> synco.run.loop" in res.stdout

