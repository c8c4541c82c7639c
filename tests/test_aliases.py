"""Old module paths (before the layered packages) import as the very modules that replaced them."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

from synco._aliases import MOVED


def test_every_alias_points_somewhere_else_and_resolves() -> None:
    for old, new in MOVED.items():
        assert old != new, old
        assert importlib.import_module(old) is importlib.import_module(new), old


@pytest.mark.parametrize("statement", [
    "from synco.answers import extract_answer, answers_match, AnswerChecker",
    "from synco.grading.answers import Extraction, CheckerStats, default_checker, boxed_answers",
    "from synco.trainer import train, setup_run, RunSummary",
    "from synco.worlds.arith import ArithDomain",
    "from synco.protocols.sft import completion_loss",
    "from synco.distributed.fsdp import shard_policy",
    "from synco.precision import MasterWeights",
    "from synco.health import HealthConfig",
    "from synco.card_decoding import constrain_synthesizer",
    "from synco.policy import PolicyConfig, Policy",
])
def test_old_import_statements_still_work(statement: str) -> None:
    """Names the README and users' scripts used before the move (in a fresh interpreter: no module cached)."""
    subprocess.run([sys.executable, "-c", statement], check=True, timeout=120)


def test_a_patch_through_an_old_path_patches_the_real_module(monkeypatch) -> None:
    import synco.grading as real

    monkeypatch.setattr("synco.answers.extract_answer", lambda *a, **k: "patched")
    assert real.extract_answer("x") == "patched"


def test_unknown_old_looking_paths_still_fail() -> None:
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("synco.no_such_module")
