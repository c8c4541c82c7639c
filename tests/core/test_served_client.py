"""The served client's bounds and faults (``synco.core.served``): a refused connection, a timeout, a wrong model
name and a refused request each end in one ServedError naming the endpoint and the setting, within the timeouts and
retries; the key never appears. The server is a real ``vllm serve`` (tests/served.py); its faults come from the relay
in front of it, which rewrites, truncates, drips or withholds the server's own bytes. The retry policy on 429 / 5xx
is unit-tested on the client's own retry loop, and the settings' refusals of anything that could carry a key."""

from __future__ import annotations

import asyncio
import math
import time
from pathlib import Path

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


# ---------------------------------------------------------------------------------------------- keys in the settings

TOKEN = "hf_AbCdEfGhIjKlMnOpQrStUvWxYz0123456789"  # the shape of a pasted Hugging Face token (not a real one)


def test_api_key_env_must_be_a_variable_name_and_a_pasted_key_is_never_echoed() -> None:
    assert ServedSettings(base_url="http://x/v1", model="m", api_key_env="OPENAI_API_KEY").api_key_env == "OPENAI_API_KEY"
    for bad in (TOKEN, "openai_api_key", "1KEY", "MY-KEY"):
        with pytest.raises(ValueError, match="api_key_env") as err:
            ServedSettings(base_url="http://x/v1", model="m", api_key_env=bad)
        assert bad not in str(err.value)


def test_a_base_url_carrying_credentials_is_refused_pointing_to_api_key_env() -> None:
    for url, secret in (("http://bob:s3cr3t-pw@127.0.0.1:8000/v1", "s3cr3t-pw"),
                        (f"https://api.example.com/v1?api_key={TOKEN}", TOKEN),
                        ("https://api.example.com/v1?key=abc123secret", "abc123secret")):
        with pytest.raises(ValueError, match="api_key_env") as err:
            ServedSettings(base_url=url, model="m")
        assert secret not in str(err.value)


def test_no_config_error_prints_a_value_that_could_be_a_key(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    from synco.cli import main
    from synco.config import ConfigError, load_config

    for override in (f"synthesizer.served.api_key_env={TOKEN}", f"synthesizer.served.api_key={TOKEN}",
                     f"synthesizer.served.base_url=https://u:{TOKEN}@api.example.com/v1"):
        with pytest.raises(ConfigError) as err:
            load_config(overrides=["synthesizer.rollout_engine=served", "synthesizer.served.model=m",
                                   "synthesizer.served.base_url=http://127.0.0.1:9/v1", override])
        assert TOKEN not in str(err.value) and "synthesizer.served." in str(err.value)
    code = main(["train", "mode=frozen", "synthesizer.rollout_engine=served", "synthesizer.served.model=m",
                 "synthesizer.served.base_url=http://127.0.0.1:9/v1", f"synthesizer.served.api_key_env={TOKEN}",
                 f"runs_dir={tmp_path}", "run_id=r"])
    out = capsys.readouterr()
    assert code == 2 and TOKEN not in out.out + out.err and "api_key_env" in out.err
    assert not any(TOKEN.encode() in f.read_bytes() for f in tmp_path.rglob("*") if f.is_file())  # no config.yaml


# ---------------------------------------------------------------------------------------------- retry policy


def test_the_retry_wait_doubles_up_to_30_s_and_follows_retry_after() -> None:
    from synco.core.served import MAX_BACKOFF_S, parse_retry_after, retry_wait

    assert MAX_BACKOFF_S == 30.0
    assert [retry_wait(a, 0.5, None, 0.0) for a in range(8)] == [0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0]
    assert retry_wait(0, 0.5, None, 1.0) == 0.625  # jitter: up to a quarter more
    assert retry_wait(0, 0.5, 3.0, 0.0) == 3.0  # the server asked for longer: its wait
    assert retry_wait(3, 0.5, 1.0, 0.0) == 4.0  # it asked for less than the backoff: the backoff
    assert retry_wait(0, 0.5, 3600.0, 0.0) == 30.0  # the ceiling holds whatever it asks
    assert parse_retry_after("2") == 2.0 and parse_retry_after("-3") == 0.0 and parse_retry_after(None) is None
    assert parse_retry_after("Wed, 21 Oct 2015 07:28:10 GMT", now=1445412485.0) == 5.0  # an HTTP date: 5 s from now
    assert parse_retry_after("soon") is None and parse_retry_after("nan") is None
    assert ServedSettings(base_url="http://x/v1", model="m", max_retries=10).max_retries == 10
    with pytest.raises(ValueError, match="max_retries"):
        ServedSettings(base_url="http://x/v1", model="m", max_retries=11)


# ---------------------------------------------------------------------------------------------- faults, real server

SAMPLING = {"max_tokens": 4, "temperature": 1.0}


def on_server(test):  # noqa: ANN001, ANN201 - a decorator
    """A test beside the real server (its xdist group; slow)."""
    return pytest.mark.slow(pytest.mark.xdist_group("served")(test))


def _tool_calls(data: dict) -> None:
    call = {"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    data["choices"][0]["message"]["tool_calls"] = [dict(call, id=f"c{i}") for i in range(33)]


def _set(key: str, value: object, where: str = "choice") -> object:
    def edit(data: dict) -> None:
        target = data["choices"][0] if where == "choice" else data["choices"][0]["logprobs"]
        target[key] = value(target[key]) if callable(value) else value
    return edit


MALFORMED = {  # fault: (the request it breaks, how)
    "a chat reply whose message is null": ("chat", _set("message", None)),
    "a models list whose data is null": ("models", lambda d: d.update(data=None)),
    "choices null": ("completions", lambda d: d.update(choices=None)),
    "one choice fewer than n": ("completions", lambda d: d["choices"].pop()),
    "no token ids": ("completions", _set("token_ids", None)),
    "a log-prob that is NaN": ("completions", _set("token_logprobs", lambda x: [math.nan] + x[1:], "logprobs")),
    "an infinite log-prob": ("completions", _set("token_logprobs", lambda x: [-math.inf] + x[1:], "logprobs")),
    "a positive log-prob": ("completions", _set("token_logprobs", lambda x: [0.5] + x[1:], "logprobs")),
    "one log-prob short": ("completions", _set("token_logprobs", lambda x: x[:-1], "logprobs")),
    "a text over the size limit": ("completions", _set("text", "x" * 200_001)),
    "33 tool calls in one reply": ("chat", _tool_calls),
}


@on_server
@pytest.mark.parametrize("fault", list(MALFORMED))
def test_a_malformed_reply_is_one_served_error_naming_the_endpoint(relay, fault: str) -> None:  # noqa: ANN001
    from served import only, rewrite

    from synco.core.served import ChatRequest

    kind, edit = MALFORMED[fault]
    path = {"chat": "/chat/completions", "models": "/models", "completions": "/completions"}[kind]
    relay.fault = only(path, rewrite(edit))
    client = ServedClient(settings(relay.base_url, timeout_s=120.0), "reasoner.served")  # a loaded server: no retry
    with pytest.raises(ServedError) as err:
        if kind == "chat":
            client.chat([ChatRequest((("user", "Say hi."),))], 1, SAMPLING, [0])
        elif kind == "models":
            client.models()
        else:
            client.complete_ids([[1, 2, 3]], 2, SAMPLING, [0])
    assert ("GET " if kind == "models" else "POST ") + path in str(err.value) and relay.base_url in str(err.value)
    assert len(relay.heads) == 1  # a malformed body is the server's answer: not retried


@on_server
def test_a_dripping_server_is_cut_at_the_attempt_deadline(relay) -> None:  # noqa: ANN001
    from served import drip, only

    relay.fault = only("/completions", drip(0.5, for_s=8.0))
    client = ServedClient(settings(relay.base_url, timeout_s=2.0, max_retries=0))
    t = time.monotonic()
    with pytest.raises(ServedError, match=r"POST /completions .*Timeout"):
        client.complete_ids([[1, 2, 3]], 1, SAMPLING, [0])
    assert time.monotonic() - t < 4


@on_server
def test_a_silent_host_is_refused_by_the_startup_check_within_10_s(relay) -> None:  # noqa: ANN001
    from served import only, withhold

    relay.fault = only("/models", withhold(for_s=15.0))
    client = ServedClient(settings(relay.base_url, timeout_s=60.0, max_retries=1), "synthesizer.served")
    t = time.monotonic()
    with pytest.raises(ServedError, match=r"synthesizer\.served\.base_url=.*GET /models"):
        client.check()
    assert time.monotonic() - t < 10


@on_server
def test_an_endless_body_is_refused_at_the_cap_before_it_is_all_read(relay) -> None:  # noqa: ANN001
    from served import Endless, only

    from synco.core.served import MAX_BODY_BYTES

    endless = Endless(limit=160 << 20)
    relay.fault = only("/completions", endless)
    client = ServedClient(settings(relay.base_url, timeout_s=30.0, max_retries=0))
    with pytest.raises(ServedError, match=r"POST /completions .*larger than"):
        client.complete_ids([[1, 2, 3]], 1, SAMPLING, [0])
    assert MAX_BODY_BYTES <= endless.sent < endless.limit  # refused at the cap, long before the end


@on_server
def test_a_truncated_body_is_retried(relay) -> None:  # noqa: ANN001
    from served import only, truncate

    relay.fault = only("/completions", truncate, times=1)
    [[sample]] = ServedClient(settings(relay.base_url)).complete_ids([[1, 2, 3]], 1, SAMPLING, [0])
    assert sample.token_ids and len(relay.heads) == 2


@on_server
def test_retry_after_is_honoured(relay) -> None:  # noqa: ANN001
    from served import only, rewrite

    relay.fault = only("/completions", rewrite(lambda d: {"error": {"message": "slow down"}}, status=429,
                                               headers={"retry-after": "2"}), times=1)
    t = time.monotonic()
    [[sample]] = ServedClient(settings(relay.base_url)).complete_ids([[1, 2, 3]], 1, SAMPLING, [0])
    assert time.monotonic() - t >= 2.0 and sample.token_ids and len(relay.heads) == 2

