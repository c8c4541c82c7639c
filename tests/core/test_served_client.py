"""The served client's bounds and faults (``synco.core.served``): a refused connection, a timeout, a wrong model
name and a refused request each end in one ServedError naming the endpoint and the setting, within the timeouts and
retries; the key never appears. The server is a real ``vllm serve`` (tests/served.py); the retry policy on 429 / 5xx
is unit-tested on the client's own retry loop."""

from __future__ import annotations

import asyncio
import time

import pytest

from synco.core.served import ServedClient, ServedError, ServedSettings, sampling_fields

SECRET = "sk-test-0123456789-do-not-print"


def settings(base_url: str, **kw) -> ServedSettings:  # noqa: ANN003
    return ServedSettings(**{"base_url": base_url, "model": "smol", "max_retries": 1, "backoff_s": 0.05,
                             "timeout_s": 5.0, **kw})


def test_settings_name_the_bad_field_and_keep_keys_out_of_the_config() -> None:
    with pytest.raises(ValueError, match="base_url"):
        ServedSettings(base_url="localhost:8000", model="m")
    with pytest.raises(ValueError, match="name of an environment variable"):
        ServedSettings(base_url="http://x/v1", model="m", api_key_env="sk-live abc")
    assert sampling_fields(0.7, 0.9, 0, 16, greedy=False) == {"max_tokens": 16, "temperature": 0.7, "top_p": 0.9}
    assert sampling_fields(0.7, 0.9, 5, 16, greedy=True) == {"max_tokens": 16, "temperature": 0.0}


def test_a_missing_key_variable_is_named_and_the_key_is_never_shown(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SYNCO_TEST_KEY", raising=False)
    with pytest.raises(ServedError, match="SYNCO_TEST_KEY"):
        ServedClient(settings("http://127.0.0.1:9/v1", api_key_env="SYNCO_TEST_KEY"), "reasoner.served")
    monkeypatch.setenv("SYNCO_TEST_KEY", SECRET)
    from served import free_port

    client = ServedClient(settings(f"http://127.0.0.1:{free_port()}/v1", api_key_env="SYNCO_TEST_KEY"))
    assert SECRET not in repr(client)
    with pytest.raises(ServedError) as err:
        client.check()
    assert SECRET not in str(err.value)


def test_a_refused_connection_fails_within_the_retries_naming_base_url() -> None:
    from served import free_port

    client = ServedClient(settings(f"http://127.0.0.1:{free_port()}/v1", max_retries=2), "synthesizer.served")
    t = time.monotonic()
    with pytest.raises(ServedError, match=r"synthesizer\.served\.base_url=.*failed after 3 tries") as err:
        client.check()
    assert time.monotonic() - t < 10 and err.value.field == "synthesizer.served.base_url"


class _Flaky:
    """A request that fails ``n`` times with ``error`` before it answers."""

    def __init__(self, n: int, error: Exception) -> None:
        self.n, self.error, self.calls = n, error, 0

    async def __call__(self) -> str:
        self.calls += 1
        if self.calls <= self.n:
            raise self.error
        return "ok"


def _status_error(cls: type, status: int) -> Exception:
    import httpx2
    return cls("boom", response=httpx2.Response(status, request=httpx2.Request("POST", "http://s/v1/x")), body=None)


def test_429_and_5xx_are_retried_with_backoff_and_4xx_is_not() -> None:
    import openai

    client = ServedClient(settings("http://s/v1", max_retries=2, backoff_s=0.01))
    flaky = _Flaky(2, _status_error(openai.RateLimitError, 429))
    assert asyncio.run(client._retrying(flaky, "POST /x")) == "ok" and flaky.calls == 3
    flaky = _Flaky(3, _status_error(openai.InternalServerError, 503))
    with pytest.raises(ServedError, match="failed after 3 tries"):
        asyncio.run(client._retrying(flaky, "POST /x"))
    flaky = _Flaky(1, _status_error(openai.BadRequestError, 400))
    with pytest.raises(ServedError, match=r"refused \(400"):
        asyncio.run(client._retrying(flaky, "POST /x"))
    assert flaky.calls == 1


@pytest.mark.xdist_group("served")
@pytest.mark.slow
def test_a_wrong_model_a_timeout_and_a_refused_request_against_a_real_server(vllm_server) -> None:  # noqa: ANN001
    with pytest.raises(ServedError, match=r"reasoner\.served\.model='nope': .* serves \['smol'"):
        ServedClient(settings(vllm_server.base_url, model="nope"), "reasoner.served").check()
    ServedClient(settings(vllm_server.base_url), "reasoner.served").check()  # the right one passes
    slow = ServedClient(settings(vllm_server.base_url, timeout_s=0.001, max_retries=1))
    t = time.monotonic()
    with pytest.raises(ServedError, match="failed after 2 tries"):
        slow.complete_ids([[1, 2, 3]], 1, {"max_tokens": 64, "temperature": 1.0}, [0])
    assert time.monotonic() - t < 10
    with pytest.raises(ServedError, match=r"refused \(400"):  # longer than the server's context: no retry helps
        ServedClient(settings(vllm_server.base_url)).complete_ids([[1] * 5000], 1, {"max_tokens": 4}, [0])
