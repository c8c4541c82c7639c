"""τ²'s pass^k, success rule and summary metrics against numbers worked out by hand (and τ²'s own function)."""

from __future__ import annotations

import math

import pytest

from synco.eval.tau2_metrics import is_success, pass_hat_k, tau2_metrics


@pytest.mark.parametrize("n,c,k,expected", [
    (4, 2, 2, 1 / 6),  # C(2,2)/C(4,2)
    (4, 3, 2, 3 / 6),  # C(3,2)/C(4,2)
    (5, 4, 3, 4 / 10),  # C(4,3)/C(5,3)
    (4, 1, 2, 0.0),  # one success cannot make two
    (4, 4, 4, 1.0),
    (8, 5, 1, 5 / 8),  # pass^1 is the success rate
    (1, 0, 1, 0.0),
])
def test_pass_hat_k_hand_computed(n: int, c: int, k: int, expected: float) -> None:
    assert pass_hat_k(n, c, k) == pytest.approx(expected, rel=1e-12)


def test_pass_hat_k_falls_with_k() -> None:
    values = [pass_hat_k(8, 6, k) for k in range(1, 9)]
    assert values == sorted(values, reverse=True) and values[0] == 0.75 and values[-1] == 0.0


@pytest.mark.parametrize("n,c,k", [(4, 5, 1), (4, -1, 1), (4, 2, 5), (4, 2, 0), (0, 0, 1)])
def test_pass_hat_k_rejects_impossible_counts(n: int, c: int, k: int) -> None:
    with pytest.raises(ValueError, match="pass\\^k"):
        pass_hat_k(n, c, k)


def test_pass_hat_k_agrees_with_tau2s_own() -> None:
    agent_metrics = pytest.importorskip("tau2.metrics.agent_metrics")
    for n in range(1, 7):
        for c in range(n + 1):
            for k in range(1, n + 1):
                assert pass_hat_k(n, c, k) == agent_metrics.pass_hat_k(n, c, k)


def test_success_is_reward_one_within_tolerance() -> None:
    assert is_success(1.0) and is_success(1.0 - 5e-7) and is_success(1.0 + 5e-7)
    assert not is_success(0.999) and not is_success(0.0) and not is_success(0.5)


def test_tau2_metrics_hand_computed() -> None:
    rewards = {"a": [1.0, 1.0, 0.0], "b": [0.0, 0.0, 0.0], "c": [1.0, 1.0, 1.0], "d": [1.0, 0.5, 1.0]}
    m = tau2_metrics(rewards)
    assert (m.tasks, m.trials) == (4, 3) and sorted(m.pass_hat_k) == [1, 2, 3]
    # pass^1 per task: 2/3, 0, 1, 2/3 (0.5 is not a success) -> 7/12
    p1 = [2 / 3, 0.0, 1.0, 2 / 3]
    assert m.pass_hat_k[1].value == pytest.approx(7 / 12)
    mean = 7 / 12
    sd = math.sqrt(sum((x - mean) ** 2 for x in p1) / 3)
    assert m.pass_hat_k[1].stderr == pytest.approx(sd / 2)
    # pass^2: C(2,2)/C(3,2) = 1/3, 0, 1, 1/3 -> 5/12; pass^3: 0, 0, 1, 0 -> 1/4
    assert m.pass_hat_k[2].value == pytest.approx(5 / 12)
    assert m.pass_hat_k[3].value == pytest.approx(1 / 4)
    assert m.pass_hat_k[3].stderr == pytest.approx(math.sqrt(0.25 * 0.75 * 4 / 3) / 2)  # sd of (0,0,1,0)
    # mean reward per task 2/3, 0, 1, 5/6 -> 5/2 / 4
    assert m.avg_reward.value == pytest.approx((2 / 3 + 0 + 1 + 5 / 6) / 4)


def test_tau2_metrics_k_stops_at_the_fewest_trials_and_one_task_has_no_stderr() -> None:
    m = tau2_metrics({"a": [1.0, 1.0, 1.0, 0.0], "b": [1.0, 1.0]})
    assert sorted(m.pass_hat_k) == [1, 2] and m.trials == 2
    assert m.pass_hat_k[2].value == pytest.approx((3 / 6 + 1.0) / 2)
    single = tau2_metrics({"a": [1.0]})
    assert single.pass_hat_k[1].value == 1.0 and single.pass_hat_k[1].stderr is None
    with pytest.raises(ValueError):
        tau2_metrics({})
    with pytest.raises(ValueError):
        tau2_metrics({"a": []})
