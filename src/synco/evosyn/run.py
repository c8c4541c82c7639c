"""The factor space inside a run: build it from the domain, reflect between steps, log and restore it.

Run-directory files::

    factor_space.json   the current space (rewritten whenever it changes)
    factors.jsonl       one line per change (promote / confirm / retire) with the step and its evidence
    reflector.jsonl     one line per reflection: every candidate's evidence, promoted or not
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
import random
from collections.abc import Callable

from synco.evosyn.config import EvoSynConfig
from synco.evosyn.reflector import Reflection, python_seed, reflect
from synco.evosyn.space import Cell, FactorDef, FactorSpace, feasible_cells
from synco.records import TaskRecord


@dataclass
class EvoState:
    """The factor space of a run and what the domain offers for it."""

    space: FactorSpace
    defs: list[FactorDef]  # every factor the domain can compute: the built-in ones and the candidates
    builtin: list[str]
    cells: list[Cell]  # feasible cells of the current space (recomputed when it changes)
    sample: Callable[[random.Random], str] | None = None  # the domain's problem generator, for feasibility

    def refresh_cells(self) -> None:
        """Recompute the feasible cells after the space changed."""
        self.cells = self.feasible(self.space)

    def feasible(self, space: FactorSpace) -> list[Cell]:
        """Feasible cells of ``space`` (this space or a trial one) under the domain's generator."""
        return feasible_cells(space, self.defs, self.sample) if self.sample is not None else []


def build_evo_state(domain: object, space: FactorSpace | None = None) -> EvoState | None:
    """The domain's factor space (``space`` when resuming), or None when the domain offers no factors."""
    defs_fn = getattr(domain, "factor_defs", None)
    sample = getattr(domain, "sample_any", None)
    if not callable(defs_fn) or not callable(sample):
        return None
    defs = list(defs_fn())
    builtin = list(getattr(domain, "builtin_factors", ()))
    if space is None:
        space = FactorSpace.from_defs([d for d in defs if d.name in builtin])
    evo = EvoState(space=space, defs=defs, builtin=builtin, cells=[], sample=sample)
    evo.refresh_cells()
    return evo


def reflect_and_log(evo: EvoState, records: list[TaskRecord], cfg: EvoSynConfig, step: int, seed: int,
                    run_dir: Path) -> Reflection:
    """One reflection on ``records`` (mutates the space); appends to factors.jsonl / reflector.jsonl."""
    r = cfg.reflector_settings
    reflection = reflect(records, evo.space, evo.defs, evo.builtin, r, step, python_seed(seed, step),
                         n_cells=lambda sp: len(evo.feasible(sp)))
    with open(run_dir / "reflector.jsonl", "a") as f:
        f.write(json.dumps({"step": step, "n_tasks": reflection.n_tasks, "space_version": evo.space.version,
                            "candidates": {k: {**v.model_dump(), "excess": v.excess}
                                           for k, v in reflection.candidates.items()}}) + "\n")
    if reflection.changes:
        with open(run_dir / "factors.jsonl", "a") as f:
            for ch in reflection.changes:
                f.write(ch.model_dump_json() + "\n")
        evo.refresh_cells()
        write_space(evo, run_dir)
    return reflection


def write_space(evo: EvoState, run_dir: Path) -> None:
    """``factor_space.json``: the space and its feasible cells."""
    data = {**evo.space.model_dump(), "n_cells": len(evo.cells)}
    tmp = run_dir / ".factor_space.json.tmp"
    tmp.write_text(json.dumps(data, indent=2))
    tmp.replace(run_dir / "factor_space.json")


def truncate_logs(run_dir: Path, last_step: int) -> None:
    """Drop factors.jsonl / reflector.jsonl lines of reflections after ``last_step`` (a resumed run redoes them).

    A torn last line (a kill while writing) is dropped too.
    """
    for name in ("factors.jsonl", "reflector.jsonl"):
        path = run_dir / name
        if not path.exists():
            continue
        keep = []
        for ln in path.read_text().splitlines():
            try:
                if json.loads(ln)["step"] <= last_step:
                    keep.append(ln)
            except (json.JSONDecodeError, KeyError, TypeError):
                continue
        path.write_text("".join(ln + "\n" for ln in keep))
