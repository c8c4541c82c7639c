"""Fixtures shared by the distributed tests."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def local_ray():
    """One local Ray (2 CPUs) for the session; a test that asks for it is skipped where Ray cannot start at all.

    Every test that asks for it runs in one xdist worker (the ``ray`` group, tests/conftest.py), so the suite starts
    Ray once, not once per module and worker (4-7 s each on 2 cores), and two clusters never compete for the
    cores. Ray is shut down at the session's end whatever the tests did (its processes and ports go with it), and
    after a start that failed half-way too.
    """
    ray = pytest.importorskip("ray")
    try:
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    except Exception as e:  # noqa: BLE001 - only a Ray that cannot start at all skips
        ray.shutdown()
        pytest.skip(f"local Ray cannot start here: {e}")
    try:
        yield
    finally:
        ray.shutdown()
