"""synco.domains.rgym.gym: reasoning-gym in a worker process; a hanging generator or a raising scorer costs one
bounded call, never the caller."""

from __future__ import annotations

import gc
import time

import pytest

from synco.domains.rgym.gym import Gym, GymFailure


def test_generation_is_deterministic_in_the_seed(gym: Gym) -> None:
    a = gym.generate("chain_sum", {"max_terms": 3}, 8)
    assert a == gym.generate("chain_sum", {"max_terms": 3}, 8) and a != gym.generate("chain_sum", {"max_terms": 3}, 10)
    question, answer = a
    assert "=" in question and gym.score("chain_sum", {"max_terms": 3}, 8, answer).value == 1.0


def test_a_refused_config_is_a_generator_error(gym: Gym) -> None:
    with pytest.raises(GymFailure) as err:
        gym.generate("chain_sum", {"min_terms": 5, "max_terms": 3}, 2)
    assert err.value.code == "generator_error"


def test_a_runaway_generator_times_out_and_the_worker_recovers() -> None:
    gym = Gym(timeout_s=1.0)
    try:
        t = time.monotonic()
        with pytest.raises(GymFailure) as err:  # 10**6 terms of 10**5 digits: far past any curriculum level
            gym.generate("chain_sum", {"min_terms": 10**6, "max_terms": 10**6, "min_digits": 10**5,
                                       "max_digits": 10**5}, 4)
        assert err.value.code == "generator_timeout" and time.monotonic() - t < 30
        assert gym.failures["generate_timeout"] == 1
        assert gym.generate("chain_sum", {}, 4)[0]  # a new worker answers
    finally:
        gym.close()


def test_a_raising_scorer_scores_zero_and_is_counted(gym: Gym) -> None:
    before = gym.failures["score_error"]
    got = gym.score("prime_factorization", {}, 3, "2 × × banana")  # this scorer raises on such text
    assert got.value == 0.0
    if got.status == "ok":
        pytest.skip("this reasoning-gym's prime_factorization scorer no longer raises")
    assert got.status == "error" and gym.failures["score_error"] == before + 1


def test_a_closed_or_dropped_gym_stops_its_worker() -> None:
    gym = Gym()
    gym.generate("chain_sum", {}, 4)
    first = gym._worker.proc
    gym.close()
    assert first.poll() is not None
    assert gym.generate("chain_sum", {}, 4)[0]  # a later call starts a new one
    second = gym._worker.proc
    del gym
    gc.collect()
    assert second.poll() is not None  # dropped without close: its finalizer killed the worker
