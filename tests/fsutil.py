"""File-system helpers shared by tests in several folders (tests/ is on sys.path through its conftest)."""

from __future__ import annotations

import shutil
import subprocess
from contextlib import contextmanager
from pathlib import Path

import pytest


def _writable(path: Path) -> bool:
    probe = path / ".probe"
    try:
        probe.touch()
        probe.unlink()
        return True
    except OSError:
        return False


@contextmanager
def read_only(path: Path):
    """Make a directory read-only: chmod, and as root (who ignores modes) the immutable attribute."""
    mode = path.stat().st_mode
    path.chmod(0o555)
    immutable = False
    try:
        if _writable(path) and shutil.which("chattr"):
            immutable = subprocess.run(["chattr", "+i", str(path)], capture_output=True).returncode == 0
        if _writable(path):
            pytest.skip("cannot make a directory read-only here")
        yield path
    finally:
        if immutable:
            subprocess.run(["chattr", "-i", str(path)], check=True)
        path.chmod(mode)
