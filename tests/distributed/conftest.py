"""Fixtures shared by the distributed tests."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def local_ray():
    """A local Ray (2 CPUs) for one test module; the module is skipped where Ray cannot start at all.

    Ray is shut down after the module whatever its tests did (its processes and ports go with it), and after a
    start that failed half-way too.
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
