"""The suite's xdist groups hold: under ``make test`` (``-n 3 --dist loadgroup``) every test of a group runs on one
worker, so each served group starts its inference server once. pytest 9.2 stopped reading the group suffix that
pytest-xdist 3.8 writes into a test's id (``item._nodeid``): the groups silently split, both workers started every
server and the suite grew by minutes. pyproject.toml keeps pytest below 9.2; this test fails if a pair that splits
the groups comes back."""

from __future__ import annotations

import pytest


@pytest.mark.xdist_group("group-check")
def test_a_grouped_test_carries_its_group_under_loadgroup(request: pytest.FixtureRequest) -> None:
    if not getattr(request.config.option, "loadgroup", False):
        pytest.skip("not run under xdist's --dist loadgroup (make test runs it so)")
    assert request.node.nodeid.endswith("@group-check"), request.node.nodeid


def test_every_test_on_the_local_ray_is_in_the_ray_group(request: pytest.FixtureRequest) -> None:
    """tests/conftest.py puts every test that asks for ``local_ray`` into the group ``ray`` (one worker, one Ray)."""
    if not getattr(request.config.option, "loadgroup", False):
        pytest.skip("not run under xdist's --dist loadgroup (make test runs it so)")
    on_ray = [it.nodeid for it in request.session.items if "local_ray" in getattr(it, "fixturenames", ())]
    if not on_ray:
        pytest.skip("no test on the local Ray was collected (a -k or a path chose others)")
    assert all(n.endswith("@ray") for n in on_ray), [n for n in on_ray if not n.endswith("@ray")]
