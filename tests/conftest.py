"""Shared test settings: one torch thread per test process (the suite runs in two xdist workers on 2 cores)."""

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


@pytest.fixture()
def one_thread():  # noqa: ANN201 - a fixture
    """One torch thread for this test, restored afterwards (a run config may have changed it)."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="session")
def vllm_server(tmp_path_factory: pytest.TempPathFactory):  # noqa: ANN201 - a fixture
    """One real ``vllm serve`` (SmolLM2, CPU) per test run (the served tests share the ``served`` xdist group);
    ``$SYNCO_TEST_VLLM_URL``: one already running, started as tests/served.py starts it."""
    from served import attach_server, start_server, stop_server

    url = os.environ.get("SYNCO_TEST_VLLM_URL")
    if url:
        yield attach_server(url)
        return
    server = start_server(tmp_path_factory.mktemp("vllm") / "server.log")
    yield server
    stop_server(server)
