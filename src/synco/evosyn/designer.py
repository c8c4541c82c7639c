"""The Designer: split one step's card slots over factor cells, from the pool's recent window.

Per cell the window gives a (smoothed) Reasoner success rate ``p``. The slots are
the sum of three shares, then rounded to whole slots:

* **exploration floor** (``floor``): spread evenly over every cell, so no cell starves
  and a cell that becomes learnable is noticed;
* **retention** (``retention``): spread over *mastered* cells (``p >= mastered``), so
  skills the Reasoner has are still practised; when no cell is mastered it joins the
  need share;
* **need** (the rest): proportional to ``need(p) ** sharpness`` over the cells that are
  not mastered, where ``need`` is the capability gap measured toward the teachable band:
  1 at ``p = target`` (where GRPO's signal peaks), falling linearly to 0 at ``p = 0``
  and ``p = 1``. A cell with fewer than ``min_tasks`` measured tasks has need 1
  (``coverage: full``: unmeasured cells are explored first), or (``coverage: parent``)
  the need of its success estimated with its *parent* cell as the prior -- the cell
  of its first factor alone (``level=L8`` for ``level=L8,carries=2``), worth
  ``min_tasks`` tasks of evidence: a new fine cell under a mastered or impossible
  level is not paid for as if it were maximally teachable.

With learner feedback off, success is not seen: every cell has need 1, i.e. the
allocation only balances coverage. With learning-effect feedback (``effect``, from
:func:`synco.evosyn.effect.effect_weights`) each need is scaled by its cell's weight:
a cell whose training measurably moved the learner keeps its need, one that did not
keeps at least ``effect_floor`` of it.

Rounding is systematic sampling with a given offset, so each cell's expected slots equal
its share and the total is exact.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from synco.evosyn.config import DesignerConfig
from synco.evosyn.space import Cell, FactorSpace
from synco.core.records import TaskRecord


@dataclass(frozen=True)
class CellStats:
    """What the window says about one cell."""

    n_tasks: int = 0
    n_attempts: int = 0
    n_correct: int = 0

    def success(self, prior: float = 1.0) -> float | None:
        """Beta-smoothed attempt success rate; None when nothing was measured."""
        if self.n_attempts == 0:
            return None
        return (self.n_correct + prior) / (self.n_attempts + 2 * prior)


def cell_stats(records: Iterable[TaskRecord], space: FactorSpace) -> dict[Cell, CellStats]:
    """Per-cell tasks, attempts and correct attempts of the valid, solved records.

    A record's cell comes from ``card.factors`` (computed by the domain when the card
    was verified, never the model's claim); records outside every cell are skipped.
    """
    acc: dict[Cell, list[int]] = {}
    for rec in records:
        if not rec.valid or rec.card is None or not rec.rollouts:
            continue
        cell = space.cell_of(rec.card.factors)
        if cell is None:
            continue
        a = acc.setdefault(cell, [0, 0, 0])
        a[0] += 1
        a[1] += len(rec.rollouts)
        a[2] += sum(r.correct for r in rec.rollouts)
    return {c: CellStats(*v) for c, v in acc.items()}


def need(p: float, target: float = 0.5) -> float:
    """Gap of success ``p`` toward the teachable band: 1 at ``target``, linearly 0 at p = 0 and p = 1."""
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"success rate p must be in [0, 1], got {p!r}")
    return 1.0 - (target - p) / target if p <= target else 1.0 - (p - target) / (1.0 - target)


def parent_stats(stats: Mapping[Cell, CellStats]) -> dict[Cell, CellStats]:
    """Tasks, attempts and correct attempts pooled by each cell's first factor (its parent cell)."""
    acc: dict[Cell, list[int]] = {}
    for cell, st in stats.items():
        a = acc.setdefault(cell[:1], [0, 0, 0])
        a[0] += st.n_tasks
        a[1] += st.n_attempts
        a[2] += st.n_correct
    return {c: CellStats(*v) for c, v in acc.items()}


def backed_off_success(st: CellStats, parent: CellStats, min_tasks: int) -> float | None:
    """A cell's success rate with its parent's rate as a prior worth ``min_tasks`` tasks (None: parent unmeasured).

    ``(correct + w * p_parent) / (attempts + w)`` with ``w`` = ``min_tasks`` times the parent's
    attempts per task: with few own attempts the parent decides, with many the cell does.
    """
    if parent.n_attempts == 0 or parent.n_tasks == 0:
        return None
    p_parent = parent.n_correct / parent.n_attempts
    w = min_tasks * parent.n_attempts / parent.n_tasks
    return (st.n_correct + w * p_parent) / (st.n_attempts + w) if st.n_attempts + w > 0 else p_parent


def cell_needs(cells: Sequence[Cell], stats: Mapping[Cell, CellStats], cfg: DesignerConfig,
               feedback: bool = True) -> dict[Cell, float]:
    """Each cell's need (see module docstring); 1 without feedback, and for under-measured cells unless backed off."""
    parents = parent_stats(stats) if cfg.coverage == "parent" else {}
    out = {}
    for c in cells:
        st = stats.get(c, CellStats())
        p = st.success(cfg.prior)
        if not feedback:
            out[c] = 1.0
        elif p is not None and st.n_tasks >= cfg.min_tasks:
            out[c] = need(p, cfg.target)
        elif cfg.coverage == "parent" and len(c) > 1:
            q = backed_off_success(st, parents.get(c[:1], CellStats()), cfg.min_tasks)
            out[c] = 1.0 if q is None else need(q, cfg.target)
        else:
            out[c] = 1.0
    return out


def mastered_cells(cells: Sequence[Cell], stats: Mapping[Cell, CellStats], cfg: DesignerConfig) -> list[Cell]:
    """Cells measured on at least ``min_tasks`` tasks with smoothed success >= ``mastered``."""
    out = []
    for c in cells:
        st = stats.get(c, CellStats())
        p = st.success(cfg.prior)
        if p is not None and st.n_tasks >= max(1, cfg.min_tasks) and p >= cfg.mastered:
            out.append(c)
    return out


def shares(cells: Sequence[Cell], stats: Mapping[Cell, CellStats], n_slots: int, cfg: DesignerConfig,
           feedback: bool = True, effect: Mapping[Cell, float] | None = None) -> dict[Cell, float]:
    """Fractional slots per cell (they sum to ``n_slots``): floor + retention + need shares, each need scaled by
    the cell's learning-effect weight in ``effect`` (absent: 1)."""
    if not cells:
        raise ValueError("the Designer needs at least one cell")
    needs = cell_needs(cells, stats, cfg, feedback)
    mastered = set(mastered_cells(cells, stats, cfg)) if feedback else set()
    floor = cfg.floor * n_slots
    retention = cfg.retention * n_slots if mastered else 0.0
    rest = n_slots - floor - retention
    effect = effect or {}
    weights = {c: (0.0 if c in mastered else needs[c] ** cfg.sharpness * effect.get(c, 1.0)) for c in cells}
    total_w = sum(weights.values())
    if total_w <= 0:  # every cell mastered or at need 0: spread the rest evenly
        weights, total_w = {c: 1.0 for c in cells}, float(len(cells))
    return {c: floor / len(cells) + (retention / len(mastered) if c in mastered else 0.0)
            + rest * weights[c] / total_w for c in cells}


def round_systematic(share: Sequence[float], offset: float) -> list[int]:
    """Whole numbers with the same total as ``share`` (an integer), each floor or ceil of its share.

    Systematic sampling: slot i gets ``floor(S_i + u) - floor(S_{i-1} + u)`` with S the running
    sums and u = ``offset`` in [0, 1): over random offsets each entry's mean is exactly its share.
    """
    if not 0.0 <= offset < 1.0:
        raise ValueError(f"offset must be in [0, 1), got {offset!r}")
    out, prev, run = [], math.floor(offset + 1e-9), 0.0
    for s in share:
        run += s
        cur = math.floor(run + offset + 1e-9)
        out.append(cur - prev)
        prev = cur
    return out


def allocate(cells: Sequence[Cell], stats: Mapping[Cell, CellStats], n_slots: int, cfg: DesignerConfig,
             feedback: bool = True, offset: float = 0.5,
             effect: Mapping[Cell, float] | None = None) -> dict[Cell, int]:
    """Card slots per cell (summing to ``n_slots``; cells with 0 slots are included); ``effect``: the cells'
    learning-effect weights (see :func:`shares`).

    After rounding, a cell left with fewer than ``min_group`` (but some) slots is raised to
    ``min_group`` with slots taken from the largest allocations, so every Synthesizer group has
    an advantage signal; when that is impossible (too few slots) it gives its slots away instead.
    """
    if n_slots < 0:
        raise ValueError(f"n_slots must be >= 0, got {n_slots}")
    sh = shares(cells, stats, n_slots, cfg, feedback, effect)
    slots = dict(zip(cells, round_systematic([sh[c] for c in cells], offset)))
    small = sorted((c for c in cells if 0 < slots[c] < cfg.min_group), key=lambda c: -sh[c])
    for c in small:
        if not 0 < slots[c] < cfg.min_group:  # it received an earlier small cell's slots: no longer small
            continue
        donors = sorted((d for d in cells if slots[d] > cfg.min_group), key=lambda d: (-slots[d], cells.index(d)))
        missing = cfg.min_group - slots[c]
        if sum(slots[d] - cfg.min_group for d in donors) >= missing:
            for d in donors:
                take = min(missing, slots[d] - cfg.min_group)
                slots[d] -= take
                missing -= take
                if not missing:
                    break
            slots[c] = cfg.min_group
        else:  # not enough to go round: hand this cell's slots to the largest group
            big = max(cells, key=lambda d: (slots[d], -cells.index(d)))
            if big != c:
                slots[big] += slots[c]
                slots[c] = 0
    return slots
