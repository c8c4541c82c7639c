"""avg@k, unbiased pass@k and standard errors against numbers worked out by hand."""

from __future__ import annotations

import math

import pytest

from synco.eval.metrics import average_stderr, benchmark_metrics, mean_and_stderr, pass_at_k


@pytest.mark.parametrize("n,c,k,expected", [
    (4, 2, 2, 5 / 6),  # 1 - C(2,2)/C(4,2) = 1 - 1/6
    (10, 3, 5, 11 / 12),  # 1 - C(7,5)/C(10,5) = 1 - 21/252
    (4, 0, 1, 0.0),
    (4, 3, 2, 1.0),  # only one wrong sample: any 2 contain a right one
    (5, 1, 1, 0.2),
    (16, 16, 16, 1.0),
    (1000, 1, 1, 0.001),
])
def test_pass_at_k_hand_computed(n: int, c: int, k: int, expected: float) -> None:
    assert pass_at_k(n, c, k) == pytest.approx(expected, rel=1e-12)


def test_pass_at_1_is_the_share_right_and_pass_at_k_grows_with_k() -> None:
    assert [pass_at_k(8, c, 1) for c in range(9)] == pytest.approx([c / 8 for c in range(9)])
    values = [pass_at_k(16, 3, k) for k in range(1, 17)]
    assert values == sorted(values) and values[-1] == 1.0


@pytest.mark.parametrize("n,c,k", [(4, 5, 1), (4, -1, 1), (4, 2, 5), (4, 2, 0), (0, 0, 1)])
def test_pass_at_k_rejects_impossible_counts(n: int, c: int, k: int) -> None:
    with pytest.raises(ValueError, match="pass@k"):
        pass_at_k(n, c, k)


def test_mean_and_stderr() -> None:
    mean, se = mean_and_stderr([1, 0, 1, 0, 1])
    # sample variance ((0.4^2) * 3 + (0.6^2) * 2) / 4 = 0.3; SE = sqrt(0.3 / 5)
    assert mean == pytest.approx(0.6) and se == pytest.approx(math.sqrt(0.06))
    assert mean_and_stderr([0.25]) == (0.25, None)
    assert mean_and_stderr([0.5, 0.5, 0.5]) == (0.5, 0.0)
    with pytest.raises(ValueError):
        mean_and_stderr([])


def test_benchmark_metrics_hand_computed() -> None:
    outcomes = {"a": [True, False, True, False], "b": [False] * 4, "c": [True] * 4}
    m = benchmark_metrics(outcomes, ks=(1, 2, 8))
    assert (m.problems, m.samples) == (3, 4)
    # avg@4: per-problem means .5, 0, 1 -> 50 %; sd .5 -> SE .5 / sqrt(3)
    assert m.avg_at_k.value == pytest.approx(50.0)
    assert m.avg_at_k.stderr == pytest.approx(100 * 0.5 / math.sqrt(3))
    assert sorted(m.pass_at_k) == [1, 2]  # pass@8 needs 8 samples per problem
    assert m.pass_at_k[1] == m.avg_at_k
    # pass@2: 5/6, 0, 1 -> 11/18; deviations 4/18, -11/18, 7/18 -> variance (16 + 121 + 49) / 324 / 2
    assert m.pass_at_k[2].value == pytest.approx(100 * 11 / 18)
    assert m.pass_at_k[2].stderr == pytest.approx(100 * math.sqrt(186 / 324 / 2) / math.sqrt(3))


def test_benchmark_metrics_one_problem_has_no_stderr() -> None:
    m = benchmark_metrics({"only": [True, False]})
    assert m.avg_at_k.value == pytest.approx(50.0) and m.avg_at_k.stderr is None
    with pytest.raises(ValueError):
        benchmark_metrics({})


def test_average_stderr() -> None:
    assert average_stderr([3.0, 4.0]) == pytest.approx(2.5)  # sqrt(9 + 16) / 2
    assert average_stderr([2.0]) == pytest.approx(2.0)
    assert average_stderr([3.0, None]) is None
    assert average_stderr([]) is None


def test_one_estimate_record_for_benchmarks_and_tau2() -> None:
    """Benchmarks (percent) and τ² splits (fractions) report the same record: a mean and its standard error."""
    from synco.eval.metrics import Estimate, estimate
    from synco.eval.tau2_metrics import tau2_metrics

    assert estimate([1.0]) == Estimate(value=1.0, stderr=None)
    half = estimate([0.0, 1.0], scale=100.0)
    assert half.value == 50.0 and half.stderr == pytest.approx(50.0)  # sd 0.707 / sqrt 2 = 0.5
    bench = benchmark_metrics({"a": [True], "b": [False]})
    tau2 = tau2_metrics({"a": [1.0], "b": [0.0]})
    assert type(bench.avg_at_k) is type(tau2.avg_reward) is Estimate
    assert bench.avg_at_k.value == 100.0 * tau2.pass_hat_k[1].value
