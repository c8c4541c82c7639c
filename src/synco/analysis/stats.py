"""Small pure statistics for the run analysis: correlations, enrichment, orderings.

Plain Python on purpose: the pools are a few thousand tasks, and keeping numpy
out of the formulas keeps them readable and testable by hand. Every function
returns None where a number is undefined (constant input, empty set) instead of
NaN, so summary.json never carries a NaN.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence

from pydantic import BaseModel


def mean(values: Sequence[float]) -> float | None:
    """Arithmetic mean, or None for no values."""
    return sum(values) / len(values) if values else None


def pearson(x: Sequence[float], y: Sequence[float]) -> float | None:
    """Pearson correlation of two equal-length series; None if undefined.

    Undefined when there are fewer than two points or either series is constant
    (checked exactly with min == max, not with a float variance that rounding can
    make tiny but non-zero). Against a 0/1 series this is the point-biserial r.
    """
    if len(x) != len(y):
        raise ValueError(f"pearson: series lengths differ ({len(x)} vs {len(y)})")
    if len(x) < 2 or min(x) == max(x) or min(y) == max(y):
        return None
    mx, my = sum(x) / len(x), sum(y) / len(y)
    sxy = sum((a - mx) * (b - my) for a, b in zip(x, y))
    sxx = sum((a - mx) ** 2 for a in x)
    syy = sum((b - my) ** 2 for b in y)
    r = sxy / math.sqrt(sxx * syy)
    return max(-1.0, min(1.0, r))


class TopShare(BaseModel):
    """Positive share among the top ``k`` items ranked by a score."""

    k: int
    share: float


def top_share(scores: Sequence[float], positive: Sequence[bool], fraction: float = 0.25) -> TopShare | None:
    """Share of positives among the top ``ceil(fraction * n)`` items by score (highest first).

    Ties at the cut-off are resolved by expectation, as if tied items were
    ordered at random: items strictly above the cut-off value count fully, and
    the remaining slots take the tied group's positive rate. This keeps the
    number deterministic for discrete signals (teachability has only a few
    values), where an arbitrary sort order would decide the result. None for no
    items.
    """
    if len(scores) != len(positive):
        raise ValueError(f"top_share: lengths differ ({len(scores)} vs {len(positive)})")
    if not 0.0 < fraction <= 1.0:
        raise ValueError(f"top_share: fraction must be in (0, 1], got {fraction!r}")
    n = len(scores)
    if n == 0:
        return None
    k = max(1, math.ceil(fraction * n - 1e-9))
    cutoff = sorted(scores, reverse=True)[k - 1]
    above = [p for s, p in zip(scores, positive) if s > cutoff]
    tied = [p for s, p in zip(scores, positive) if s == cutoff]
    expected = sum(above) + (k - len(above)) * sum(tied) / len(tied)
    return TopShare(k=k, share=expected / k)


class PrecisionRecall(BaseModel):
    """A binary predictor against a binary outcome."""

    n: int
    predicted: int  # items the predictor flags
    actual: int  # items with the outcome
    true_positive: int
    precision: float | None  # None when nothing is flagged
    recall: float | None  # None when no item has the outcome
    r: float | None  # phi coefficient (Pearson of the two 0/1 series)


def precision_recall(predicted: Sequence[bool], actual: Sequence[bool]) -> PrecisionRecall:
    """Precision, recall and phi correlation of ``predicted`` for ``actual``."""
    if len(predicted) != len(actual):
        raise ValueError(f"precision_recall: lengths differ ({len(predicted)} vs {len(actual)})")
    tp = sum(1 for p, a in zip(predicted, actual) if p and a)
    n_pred, n_act = sum(map(bool, predicted)), sum(map(bool, actual))
    return PrecisionRecall(
        n=len(actual),
        predicted=n_pred,
        actual=n_act,
        true_positive=tp,
        precision=tp / n_pred if n_pred else None,
        recall=tp / n_act if n_act else None,
        r=pearson([float(p) for p in predicted], [float(a) for a in actual]),
    )


def moving_average(values: Sequence[float], window: int) -> list[float]:
    """Trailing moving average: point i is the mean of the last ``window`` values up to i.

    The first ``window - 1`` points average what is available, so the curve
    starts at the first value instead of being shifted or padded.
    """
    if window < 1:
        raise ValueError(f"moving_average: window must be >= 1, got {window}")
    out: list[float] = []
    total = 0.0
    for i, v in enumerate(values):
        total += v
        if i >= window:
            total -= values[i - window]
        out.append(total / min(i + 1, window))
    return out


def natural_key(label: str) -> tuple[list[str | int], str]:
    """Sort key that orders digit runs numerically: L2 < L10, case-insensitively."""
    parts = re.split(r"(\d+)", label.strip().lower())
    return [int(p) if i % 2 else p for i, p in enumerate(parts)], label


# Recognised difficulty words, easiest first. Equal ranks are synonyms.
_DIFFICULTY_WORDS: dict[str, int] = {
    "trivial": 0,
    "very easy": 1,
    "easy": 2,
    "simple": 2,
    "basic": 2,
    "learnable": 3,
    "medium": 4,
    "moderate": 4,
    "intermediate": 4,
    "mid": 4,
    "hard": 5,
    "difficult": 5,
    "challenging": 5,
    "advanced": 5,
    "very hard": 6,
    "very difficult": 6,
    "too hard": 7,
    "extreme": 7,
    "impossible": 8,
}
_WORD_RE = re.compile(
    r"\b(" + "|".join(re.escape(w).replace(r"\ ", r"[\s_-]+")
                      for w in sorted(_DIFFICULTY_WORDS, key=len, reverse=True)) + r")\b"
)


def difficulty_word_rank(label: str) -> int | None:
    """Rank of the first recognised difficulty word in ``label`` (leftmost, longest), or None.

    "Medium-hard: two carries" ranks as medium; "Very hard" as very hard.
    """
    match = _WORD_RE.search(label.lower())
    if match is None:
        return None
    return _DIFFICULTY_WORDS[re.sub(r"[\s_-]+", " ", match.group(1))]


class DifficultyOrder(BaseModel):
    """How difficulty labels were turned into ordinal ranks."""

    method: str  # "vocabulary" (easy < medium < hard ...) or "natural" (L1 < L2 < ... < L10)
    ranks: dict[str, int]  # label -> rank; labels without a rank are absent
    unranked: list[str] = []  # labels left out (vocabulary method only)


def difficulty_order(labels: Sequence[str]) -> DifficultyOrder:
    """Ordinal ranks for difficulty labels (one entry per occurrence; counts matter).

    When more than half of the occurrences carry a recognised difficulty word,
    ranks come from the word list and labels without one are left unranked
    (rather than guessing where free text belongs). Otherwise every distinct
    label is ranked by natural sort order (L1 < L2 < ... < L10).
    """
    distinct = sorted(set(labels), key=natural_key)
    word = {lab: difficulty_word_rank(lab) for lab in distinct}
    recognised = sum(1 for lab in labels if word[lab] is not None)
    if labels and recognised * 2 > len(labels):
        return DifficultyOrder(
            method="vocabulary",
            ranks={lab: r for lab, r in word.items() if r is not None},
            unranked=[lab for lab, r in word.items() if r is None],
        )
    return DifficultyOrder(method="natural", ranks={lab: i for i, lab in enumerate(distinct)})


class Histogram(BaseModel):
    """Counts of values in bins; ``labels`` name the bins in order."""

    labels: list[str]
    edges: list[float] | None = None  # bin edges when binned, None when counting exact values
    counts: list[int]


def success_histogram(values: Sequence[float], max_exact: int = 21, bins: int = 10) -> Histogram:
    """Histogram of success rates in [0, 1].

    With K rollouts a success rate takes at most K + 1 values, so when there are
    at most ``max_exact`` distinct values each gets its own bar (0, 0.25, ...).
    Otherwise ``bins`` equal bins over [0, 1], the last one closed.
    """
    distinct = sorted({round(v, 6) for v in values})
    if len(distinct) <= max_exact:
        return Histogram(
            labels=[f"{v:g}" for v in distinct],
            counts=[sum(1 for x in values if round(x, 6) == v) for v in distinct],
        )
    edges = [i / bins for i in range(bins + 1)]
    counts = [0] * bins
    for v in values:
        counts[min(bins - 1, max(0, int(v * bins)))] += 1
    labels = [f"[{edges[i]:g},{edges[i + 1]:g}{']' if i == bins - 1 else ')'}" for i in range(bins)]
    return Histogram(labels=labels, edges=edges, counts=counts)


def step_buckets(first: int, last: int, n_buckets: int) -> list[tuple[int, int]]:
    """Split the steps first..last into at most ``n_buckets`` contiguous equal ranges.

    Returns inclusive (lo, hi) pairs. With fewer steps than buckets, each step
    is its own bucket (no empty buckets). Sizes differ by at most one step.
    """
    if n_buckets < 1:
        raise ValueError(f"step_buckets: need at least one bucket, got {n_buckets}")
    if last < first:
        return []
    n = last - first + 1
    b = min(n_buckets, n)
    bounds = [first + (i * n) // b for i in range(b + 1)]
    return [(bounds[i], bounds[i + 1] - 1) for i in range(b)]
