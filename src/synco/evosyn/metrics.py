"""EvoSyn's data metrics on one step's cards: controllability, coverage, balance; Spearman's rho."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence

from synco.evosyn.space import Cell


def controlled(requested: Cell, realised: Mapping[str, str]) -> bool:
    """Whether the realised factor values (recomputed by the domain) match every requested bucket."""
    return all(realised.get(k) == v for k, v in requested)


def coverage(cells_seen: Sequence[Cell | None], feasible: Sequence[Cell]) -> float:
    """Share of the feasible cells that at least one valid card of the step landed in."""
    if not feasible:
        return 0.0
    seen = {c for c in cells_seen if c is not None}
    return sum(c in seen for c in feasible) / len(feasible)


def balance(cells_seen: Sequence[Cell | None], feasible: Sequence[Cell]) -> float:
    """Normalised entropy of the valid cards over the feasible cells: 1 = perfectly even, 0 = one cell."""
    counts = Counter(c for c in cells_seen if c is not None and c in set(feasible))
    n = sum(counts.values())
    if n == 0 or len(feasible) < 2:
        return 0.0
    h = -sum(k / n * math.log(k / n) for k in counts.values())
    return h / math.log(len(feasible))


def _ranks(xs: Sequence[float]) -> list[float]:
    """Average ranks (ties share the mean rank), 1-based."""
    order = sorted(range(len(xs)), key=lambda i: xs[i])
    ranks = [0.0] * len(xs)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and xs[order[j + 1]] == xs[order[i]]:
            j += 1
        for k in range(i, j + 1):
            ranks[order[k]] = (i + j) / 2 + 1
        i = j + 1
    return ranks


def spearman(x: Sequence[float], y: Sequence[float]) -> float | None:
    """Spearman's rank correlation (Pearson on average ranks); None when undefined (n < 3 or a constant)."""
    if len(x) != len(y):
        raise ValueError(f"x and y differ in length: {len(x)} vs {len(y)}")
    if len(x) < 3:
        return None
    rx, ry = _ranks(x), _ranks(y)
    mx, my = sum(rx) / len(rx), sum(ry) / len(ry)
    sxy = sum((a - mx) * (b - my) for a, b in zip(rx, ry))
    sxx = sum((a - mx) ** 2 for a in rx)
    syy = sum((b - my) ** 2 for b in ry)
    if sxx == 0 or syy == 0:
        return None
    return sxy / math.sqrt(sxx * syy)
