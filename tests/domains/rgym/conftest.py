"""One reasoning-gym worker for the rgym tests (starting one imports reasoning-gym: ~2 s)."""

from __future__ import annotations

import pytest

from synco.domains.rgym.gym import Gym


@pytest.fixture(scope="module")
def gym():  # noqa: ANN201 - a fixture
    g = Gym(memory_mb=2048, timeout_s=5.0)
    yield g
    g.close()


@pytest.fixture(scope="module")
def description(gym: Gym):  # noqa: ANN201 - a fixture
    return gym.describe()
