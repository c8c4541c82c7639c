"""Shared test settings: one torch thread per test process (``make test`` runs three xdist workers on 2 cores)."""

import os

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

try:
    import torch

    torch.set_num_threads(1)
except ImportError:  # pragma: no cover - torch is a hard dependency
    pass


import pytest  # noqa: E402
from hypothesis import settings  # noqa: E402

# Property tests draw the same examples on every run (CI included): a run that passed here passes there.
# HYPOTHESIS_PROFILE=explore searches with fresh random examples instead.
settings.register_profile("ci", derandomize=True)
settings.register_profile("explore", derandomize=False)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


def _has_vllm() -> bool:
    import importlib.util

    return importlib.util.find_spec("vllm") is not None


def pytest_report_header(config: pytest.Config) -> str | None:
    if not _has_vllm():
        return "vllm tests (marker vllm): deselected, no vllm here; `make test` runs them in .venv-vllm"
    return None


@pytest.hookimpl(tryfirst=True)  # before xdist reads the groups
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Every test on the local Ray (fixture ``local_ray``) joins the xdist group ``ray``: one worker, one Ray.

    Without the vllm package the real in-process engine's tests (marker ``vllm``) are deselected, not skipped:
    ``make test`` runs them in the server's environment, where vllm is installed (see the Makefile)."""
    for item in items:
        if "local_ray" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.xdist_group("ray"))
    if _has_vllm():
        return
    gone = [it for it in items if it.get_closest_marker("vllm")]
    if gone:
        config.hook.pytest_deselected(items=gone)
        items[:] = [it for it in items if not it.get_closest_marker("vllm")]


@pytest.fixture()
def one_thread():  # noqa: ANN201 - a fixture
    """One torch thread for this test, restored afterwards (a run config may have changed it)."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _served(tmp_path_factory: pytest.TempPathFactory, url_env: str, what: str):  # noqa: ANN202 - a generator
    """One real ``vllm serve`` of ``what`` (a ``served.ServedModel`` name) for the session, or the one already
    running at ``$<url_env>``."""
    import served

    model = getattr(served, what)
    url = os.environ.get(url_env)
    if url:
        yield served.attach_server(url, model)
        return
    server = served.start_server(tmp_path_factory.mktemp(f"vllm-{model.name}") / "server.log", model)
    yield server
    served.stop_server(server)


@pytest.fixture(scope="session")
def vllm_server(tmp_path_factory: pytest.TempPathFactory):  # noqa: ANN201 - a fixture
    """One real ``vllm serve`` (SmolLM2, CPU) per test run (the served tests share the ``served`` xdist group);
    ``$SYNCO_TEST_VLLM_URL``: one already running, started as tests/served.py starts it."""
    yield from _served(tmp_path_factory, "SYNCO_TEST_VLLM_URL", "SMOL")


@pytest.fixture(scope="session")
def vllm_tiny_server(tmp_path_factory: pytest.TempPathFactory):  # noqa: ANN201 - a fixture
    """One real ``vllm serve`` of the default world's tiny Reasoner (``builtin:arith/reasoner``, CPU) per test run,
    its tests in their own ``served-tiny`` xdist group (under ``--dist loadgroup`` it starts on the other worker
    while the SmolLM2 server starts); ``$SYNCO_TEST_VLLM_TINY_URL``: one already running."""
    yield from _served(tmp_path_factory, "SYNCO_TEST_VLLM_TINY_URL", "TINY")


@pytest.fixture()
def relay(vllm_server):  # noqa: ANN001, ANN201 - a fixture
    """An HTTP relay in front of the real SmolLM2 server (tests/served.py), passing responses on until a test sets a
    fault (rewrite, truncate, drip, withhold)."""
    from urllib.parse import urlparse

    from served import Relay

    r = Relay(urlparse(vllm_server.base_url).port or 80, http=True).start()
    yield r
    r.cut()
