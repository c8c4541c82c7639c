"""τ²-bench's metrics of ``synco eval --tau2``: success, pass^k per task and over a split, with standard errors.

Pure functions over per-task trial rewards (no τ², no torch, no files), so every number the summary holds
can be checked by hand.

* **success**: a trial succeeds when its reward is 1 within 1e-6, as τ² counts it (``is_successful`` in
  ``tau2/metrics/agent_metrics.py``): τ²'s reward is a product of 0/1 checks.
* **pass^k** (Yao et al., 2024, "τ-bench"): the chance that *all* k of k trials on a task succeed,
  estimated from n >= k trials with c successes as ``C(c, k) / C(n, k)`` per task and averaged over tasks
  -- τ²'s own ``pass_hat_k``. pass^1 is the mean success rate. Unlike pass@k it falls with k: it
  measures consistency.
* **standard error**: the sample standard deviation (ddof 1) of the per-task values over sqrt(#tasks),
  as :mod:`synco.eval.metrics` does for the math benchmarks: tasks are the random draw a split stands for.
* **k range**: 1 .. the smallest trial count of any task (τ² lowers its max k the same way).

Values are fractions in [0, 1], as τ² reports them.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from pydantic import BaseModel, Field

from synco.eval.metrics import Estimate, estimate

SUCCESS_TOLERANCE = 1e-6
"""A reward within this of 1.0 is a success (τ²'s ``is_successful``)."""


class Tau2Metrics(BaseModel):
    """pass^k and the mean reward of a set of tasks with their trials (``tau2_summary.json``)."""

    tasks: int = Field(description="Tasks counted.")
    trials: int = Field(description="Trials per task (the smallest count when they differ): the largest k.")
    avg_reward: Estimate = Field(description="Mean over tasks of each task's mean trial reward (a fraction).")
    pass_hat_k: dict[int, Estimate] = Field(default_factory=dict, description="pass^k for k = 1 .. trials (fractions).")


def is_success(reward: float) -> bool:
    """Whether a trial's reward counts as solved: 1.0 within :data:`SUCCESS_TOLERANCE` (τ²'s rule)."""
    return abs(reward - 1.0) <= SUCCESS_TOLERANCE


def pass_hat_k(n: int, c: int, k: int) -> float:
    """pass^k of one task with ``c`` successes in ``n`` trials: ``C(c, k) / C(n, k)`` (0 when c < k).

    The unbiased estimate of the chance that k trials drawn without replacement all succeed.
    """
    if n < 1 or not 0 <= c <= n:
        raise ValueError(f"pass^k needs 0 <= c <= n and n >= 1, got n={n}, c={c}")
    if not 1 <= k <= n:
        raise ValueError(f"pass^k needs 1 <= k <= n, got k={k}, n={n}")
    return math.comb(c, k) / math.comb(n, k)


def tau2_metrics(rewards: Mapping[str, Sequence[float]]) -> Tau2Metrics:
    """pass^k for k = 1 .. (fewest trials of a task) and the mean reward, from each task's trial rewards."""
    if not rewards or any(len(v) == 0 for v in rewards.values()):
        raise ValueError("tau2_metrics needs at least one task and one trial per task")
    counts = [(len(v), sum(is_success(r) for r in v)) for v in rewards.values()]
    k_max = min(n for n, _ in counts)
    return Tau2Metrics(
        tasks=len(counts), trials=k_max,
        avg_reward=estimate([math.fsum(v) / len(v) for v in rewards.values()]),
        pass_hat_k={k: estimate([pass_hat_k(n, c, k) for n, c in counts]) for k in range(1, k_max + 1)},
    )
