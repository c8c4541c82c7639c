"""Benchmark metrics of ``synco eval``: avg@k, unbiased pass@k and their standard errors.

Pure functions over per-problem outcomes (no torch, no files), so every number
``accuracy.json`` and ``eval_metrics.json`` hold can be checked by hand.

* **avg@k** (what ``accuracy.json`` reports per benchmark): the mean, over
  problems, of each problem's share of correct samples; with the same k for
  every problem this is the mean over all samples. Its standard error is the
  sample standard deviation (ddof 1) of the per-problem shares over
  sqrt(#problems): problems are the random draw a benchmark stands for, so the
  spread *between* problems is what a rerun on other problems would move. With
  k = 1 this is the usual binomial error sqrt(p(1 - p) / (P - 1)).
* **pass@k**: the chance that at least one of k samples is right, estimated
  from n >= k samples with c right by Chen et al. (2021)'s unbiased
  ``1 - C(n - c, k) / C(n, k)`` per problem, averaged over problems; its
  standard error is taken over problems the same way. pass@1 equals avg@n.
* The unweighted average over benchmarks has the standard error
  ``sqrt(sum SE_b^2) / B`` (benchmarks are independent samples).

Values are fractions in [0, 1] here; the files hold percent.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from pydantic import BaseModel, Field


class Estimate(BaseModel):
    """A mean over a benchmark's problems (or a split's tasks) and its standard error, in the same unit: percent
    and percentage points in ``eval_metrics.json``, fractions in τ²'s summary. ``stderr`` None: below two values."""

    value: float
    stderr: float | None


class BenchmarkMetrics(BaseModel):
    """avg@k and pass@k of one complete benchmark (``eval_metrics.json``)."""

    problems: int = Field(description="Problems graded.")
    samples: int = Field(description="Samples per problem (k of avg@k; the smallest count when they differ).")
    avg_at_k: Estimate = Field(description="Mean per-problem share of correct samples, percent (= accuracy.json's number).")
    pass_at_k: dict[int, Estimate] = Field(default_factory=dict, description="Unbiased pass@k for each chosen k <= samples.")


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k of one problem with ``c`` of ``n`` samples right: ``1 - C(n-c, k) / C(n, k)``.

    Exact integer binomials (Python's int division rounds correctly), so large n
    loses no precision. 1.0 when fewer than k samples are wrong.
    """
    if n < 1 or not 0 <= c <= n:
        raise ValueError(f"pass@k needs 0 <= c <= n and n >= 1, got n={n}, c={c}")
    if not 1 <= k <= n:
        raise ValueError(f"pass@k needs 1 <= k <= n, got k={k}, n={n}")
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def mean_and_stderr(values: Sequence[float]) -> tuple[float, float | None]:
    """Mean of ``values`` and its standard error sd / sqrt(len) (sample sd, ddof 1; None below 2 values)."""
    if not values:
        raise ValueError("mean_and_stderr needs at least one value")
    n = len(values)
    mean = math.fsum(values) / n
    if n < 2:
        return mean, None
    var = math.fsum((v - mean) ** 2 for v in values) / (n - 1)
    return mean, math.sqrt(var / n)


def estimate(values: Sequence[float], scale: float = 1.0) -> Estimate:
    """The mean of ``values`` and its standard error (:func:`mean_and_stderr`), both times ``scale`` (100: percent)."""
    mean, se = mean_and_stderr(values)
    return Estimate(value=scale * mean, stderr=None if se is None else scale * se)


def benchmark_metrics(outcomes: Mapping[str, Sequence[bool]], ks: Sequence[int] = (1,)) -> BenchmarkMetrics:
    """avg@k and pass@k (for each k in ``ks`` that every problem has samples for) of per-problem outcomes.

    ``outcomes`` maps a problem id to the correctness of each of its samples.
    """
    if not outcomes or any(len(v) == 0 for v in outcomes.values()):
        raise ValueError("benchmark_metrics needs at least one problem and one sample per problem")
    counts = [(len(v), sum(bool(x) for x in v)) for v in outcomes.values()]
    n_min = min(n for n, _ in counts)
    avg = estimate([c / n for n, c in counts], scale=100.0)
    passes = {k: estimate([pass_at_k(n, c, k) for n, c in counts], scale=100.0)
              for k in sorted(set(ks)) if 1 <= k <= n_min}
    return BenchmarkMetrics(problems=len(counts), samples=n_min, avg_at_k=avg, pass_at_k=passes)


def average_stderr(stderrs: Sequence[float | None]) -> float | None:
    """Standard error of the unweighted mean of independent estimates: sqrt(sum SE^2) / count (None if any is None)."""
    if not stderrs or any(se is None for se in stderrs):
        return None
    return math.sqrt(math.fsum(se * se for se in stderrs if se is not None)) / len(stderrs)
