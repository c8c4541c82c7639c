"""A model on an OpenAI-compatible server (vLLM, SGLang, llama.cpp, an API provider): settings and a bounded client.

Every role can sample from a served endpoint (``rollout_engine: served`` with a ``served:`` section; τ²'s simulated
user under ``tau2.served``). This module is the one place that talks to such a server, through the official
``openai`` client (async, imported lazily):

* :meth:`ServedClient.complete_ids`: token ids in, token ids and their log-probs out (vLLM's ``return_token_ids``),
  for agents that train: the learner updates on exactly the ids the server sampled, never re-tokenised text.
* :meth:`ServedClient.chat`: the chat endpoint (messages and tool schemas in; text or tool calls out), for frozen
  roles on any provider.

Server responses are hostile input: every field is checked (types, lengths, sizes) before it is used. Every request
is bounded: ``timeout_s`` per attempt, up to ``max_retries`` retries with exponential backoff on connection errors,
timeouts, 429 and 5xx, at most ``max_concurrency`` requests in flight. A request that still fails raises
:class:`ServedError`, naming the endpoint and the setting to look at; the key itself (read from the environment
variable ``api_key_env`` names) never appears in a message, a log or a file.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

MAX_TEXT_CHARS = 200_000
"""The longest completion text accepted from a server (a larger one is a malformed response, not a sample)."""


class ServedSettings(BaseModel):
    """One agent's endpoint (``<role>.served``, ``tau2.served``)."""

    model_config = ConfigDict(extra="forbid")

    base_url: str = Field(description="The server's OpenAI-compatible base URL, e.g. http://127.0.0.1:8000/v1 (vLLM, SGLang, llama.cpp) or a provider's.")
    model: str = Field(description="The model name the server serves (checked against its /v1/models at startup); a trained agent's adapters are served as '<model>-v<version>'.")
    api_key_env: str | None = Field(None, description="The NAME of the environment variable holding the API key (the key itself never goes into config.yaml, a log, the pool or a checkpoint); None: no key (a local server).")
    timeout_s: float = Field(60.0, gt=0, description="Seconds one request may take before it is retried (or fails).")
    max_retries: int = Field(3, ge=0, description="Retries of a request after a connection error, a timeout, a 429 or a 5xx, with exponential backoff.")
    max_concurrency: int = Field(16, ge=1, description="Requests in flight at once.")
    endpoint: Literal["completions", "chat"] = Field("completions", description="completions: token ids in, token ids and log-probs out (needs vLLM's return_token_ids; required to train); chat: messages and tool schemas in, text or tool calls out (any provider; frozen roles).")
    backoff_s: float = Field(0.5, gt=0, description="The first retry's wait; each further retry waits twice as long (plus jitter).")

    @field_validator("base_url")
    @classmethod
    def _http(cls, url: str) -> str:
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"must start with http:// or https:// (got {url!r})")
        return url.rstrip("/")

    @field_validator("api_key_env")
    @classmethod
    def _a_name(cls, name: str | None) -> str | None:
        if name is not None and (not name or not name.replace("_", "").isalnum()):
            raise ValueError(f"must be the name of an environment variable, like OPENAI_API_KEY (got {name!r}): "
                             f"the key itself never goes into the config")
        return name


class ServedError(RuntimeError):
    """A served request failed for good (after its retries) or the server's answer was malformed; the message names
    the endpoint and the setting (``field``) to look at, never the key."""

    def __init__(self, message: str, field: str = "served") -> None:
        super().__init__(message)
        self.field = field


@dataclass(frozen=True)
class ServedSample:
    """One sampled completion as the server returned it (checked)."""

    text: str
    token_ids: tuple[int, ...] = ()
    logprobs: tuple[float, ...] = ()
    finish_reason: Literal["stop", "length"] = "stop"
    tool_calls: tuple[tuple[str, str], ...] = ()  # chat: (name, arguments JSON text) of each call, as returned


@dataclass(frozen=True)
class ChatRequest:
    """One chat request: the messages (role, content) and the tool schemas offered."""

    messages: tuple[tuple[str, str], ...]
    tools: tuple[Mapping[str, Any], ...] = ()


def sampling_fields(temperature: float, top_p: float, top_k: int, max_new_tokens: int, greedy: bool) -> dict[str, Any]:
    """The request's sampling fields from synco's sampling settings (greedy: temperature 0)."""
    out: dict[str, Any] = {"max_tokens": max_new_tokens, "temperature": 0.0 if greedy else temperature}
    if not greedy and top_p < 1.0:
        out["top_p"] = top_p
    if not greedy and top_k > 0:
        out["top_k"] = top_k  # vLLM / SGLang read it from the body; providers ignore it
    return out


class ServedClient:
    """A bounded client of one endpoint. Thread-compatible: each call runs its requests on a fresh event loop."""

    def __init__(self, settings: ServedSettings, field: str = "served") -> None:
        self.settings, self.field = settings, field
        key = None
        if settings.api_key_env is not None:
            key = os.environ.get(settings.api_key_env)
            if not key:
                raise ServedError(f"{field}.api_key_env={settings.api_key_env!r}: that environment variable is not set "
                                  f"(export it before the run; the key is never written anywhere)", f"{field}.api_key_env")
        self._key = key or "none"  # local servers accept any key; never printed

    def __repr__(self) -> str:  # never the key
        return f"ServedClient({self.settings.base_url!r}, model={self.settings.model!r})"

    # ------------------------------------------------------------------ requests

    def models(self) -> list[str]:
        """The model names the server lists (``/v1/models``): one request, no retries beyond the settings'."""
        async def run() -> list[str]:
            client = self._client()
            try:
                page = await self._retrying(lambda: client.models.list(), "GET /models")
                return [str(m.id) for m in page.data]
            finally:
                await client.close()
        return asyncio.run(run())

    def check(self) -> None:
        """Refuse a wrong ``base_url`` or ``model`` within seconds, before any model loads (names the field)."""
        s = self.settings
        try:
            names = self.models()
        except ServedError as err:
            raise ServedError(f"{self.field}.base_url={s.base_url!r}: {err}", f"{self.field}.base_url") from None
        if s.model not in names:
            raise ServedError(f"{self.field}.model={s.model!r}: {s.base_url} serves {names[:8]}",
                              f"{self.field}.model")

    def complete_ids(self, prompts: Sequence[Sequence[int]], n: int, sampling: Mapping[str, Any],
                     seeds: Sequence[int | None], model: str | None = None) -> list[list[ServedSample]]:
        """``n`` completions of each token-id prompt (one request per prompt, ``seeds[i]`` its seed), in prompt
        order whatever order the responses arrive in; each with its sampled token ids and their log-probs."""
        if len(seeds) != len(prompts):
            raise ValueError(f"{len(prompts)} prompts but {len(seeds)} seeds")

        return self._gather([lambda c, s, p=p, seed=seed: self._complete(c, s, p, n, sampling, seed, model)
                             for p, seed in zip(prompts, seeds)])

    def session(self) -> "ServedSession":
        """An async session for callers that keep many requests in flight over time (episodes that each advance as
        their own response arrives): one client and one ``max_concurrency`` bound for the whole session."""
        return ServedSession(self)

    async def complete_row(self, client: Any, sem: asyncio.Semaphore, ids: Sequence[int], sampling: Mapping[str, Any],
                           seed: int | None, model: str | None = None) -> ServedSample:
        """One token-id completion inside a session (:meth:`session`), bounded and checked like
        :meth:`complete_ids`."""
        [sample] = await self._complete(client, sem, ids, 1, sampling, seed, model)
        return sample

    async def _complete(self, client: Any, sem: asyncio.Semaphore, ids: Sequence[int], n: int,
                        sampling: Mapping[str, Any], seed: int | None, model: str | None) -> list[ServedSample]:
        """``n`` completions of one token-id prompt: the one completions request (bounded, retried, checked)."""
        body = {"model": model or self.settings.model, "prompt": [int(t) for t in ids], "n": n, "logprobs": 0,
                **sampling}
        if seed is not None:
            body["seed"] = seed
        async with sem:
            resp = await self._retrying(lambda: client.completions.create(**body,
                                                                          extra_body={"return_token_ids": True}),
                                        "POST /completions")
        return self._read_completion(resp, n, int(sampling.get("max_tokens", 1 << 30)))

    def chat(self, requests: Sequence[ChatRequest], n: int, sampling: Mapping[str, Any],
             seeds: Sequence[int | None], model: str | None = None) -> list[list[ServedSample]]:
        """``n`` replies to each chat request (text, or the tool calls the server parsed), in request order."""
        if len(seeds) != len(requests):
            raise ValueError(f"{len(requests)} requests but {len(seeds)} seeds")

        async def one(client: Any, sem: asyncio.Semaphore, req: ChatRequest, seed: int | None) -> list[ServedSample]:
            body: dict[str, Any] = {"model": model or self.settings.model, "n": n, **sampling,
                                    "messages": [{"role": r, "content": c} for r, c in req.messages]}
            if req.tools:
                body["tools"] = [dict(t) for t in req.tools]
            if seed is not None:
                body["seed"] = seed
            async with sem:
                resp = await self._retrying(lambda: client.chat.completions.create(**body), "POST /chat/completions")
            return self._read_chat(resp, n)

        return self._gather([lambda c, s, r=r, seed=seed: one(c, s, r, seed) for r, seed in zip(requests, seeds)])

    def post(self, path: str, payload: Mapping[str, Any]) -> None:
        """A plain POST to the server (vLLM's ``/v1/load_lora_adapter`` and ``/v1/unload_lora_adapter``), bounded and
        retried like every request; a 4xx is a ServedError with the server's message."""
        async def run() -> None:
            client = self._client()
            try:
                await self._retrying(lambda: client.post(path, body=dict(payload), cast_to=str), f"POST {path}")
            finally:
                await client.close()
        asyncio.run(run())

    # ------------------------------------------------------------------ plumbing

    def _client(self) -> Any:
        try:
            from openai import AsyncOpenAI
        except ImportError as err:  # pragma: no cover - openai is a dependency
            raise ServedError(f"rollout_engine: served needs the openai package ({err})", self.field) from None
        return AsyncOpenAI(base_url=self.settings.base_url, api_key=self._key, timeout=self.settings.timeout_s,
                           max_retries=0)

    def _gather(self, calls: Sequence[Any]) -> list[list[ServedSample]]:
        async def run() -> list[list[ServedSample]]:
            client, sem = self._client(), asyncio.Semaphore(self.settings.max_concurrency)
            try:
                return list(await asyncio.gather(*(call(client, sem) for call in calls)))
            finally:
                await client.close()
        return asyncio.run(run()) if calls else []

    async def _retrying(self, make: Any, what: str) -> Any:
        """``await make()``, retried on what a retry can cure; any failure left is a ServedError naming the endpoint."""
        import openai

        s = self.settings
        for attempt in range(s.max_retries + 1):
            try:
                return await make()
            except (openai.APIConnectionError, openai.RateLimitError, openai.InternalServerError) as err:
                last: Exception = err
            except openai.APIStatusError as err:  # 4xx other than 429: retrying will not change the answer
                raise ServedError(f"{what} to {s.base_url} was refused ({err.status_code}: {_short(err.message)})",
                                  self.field) from None
            except (openai.APIResponseValidationError, json.JSONDecodeError, ValueError) as err:
                raise ServedError(f"{what} to {s.base_url}: the response is not what an OpenAI-compatible server "
                                  f"sends ({_short(str(err))})", self.field) from None
            if attempt < s.max_retries:
                await asyncio.sleep(s.backoff_s * 2 ** attempt * (1 + 0.25 * random.random()))
        kind = type(last).__name__.replace("Error", "").replace("API", "") or "error"
        raise ServedError(f"{what} to {s.base_url} failed after {s.max_retries + 1} tries ({kind}: "
                          f"{_short(str(last))}); is the server up? ({self.field}.base_url, .timeout_s, .max_retries)",
                          f"{self.field}.base_url") from None

    def _choices(self, resp: Any, n: int) -> list[Any]:
        """The response's ``n`` choices in index order (a ServedError for a malformed body or another count)."""
        try:
            choices = sorted(_field(resp, "choices", list), key=lambda c: int(_field(c, "index", int)))
        except (ValueError, TypeError, AttributeError) as err:
            raise ServedError(f"{self.settings.base_url} sent a malformed response ({_short(str(err))})",
                              self.field) from None
        if len(choices) != n:
            raise ServedError(f"{self.settings.base_url} returned {len(choices)} choices for n={n}", self.field)
        return choices

    def _read_completion(self, resp: Any, n: int, max_tokens: int) -> list[ServedSample]:
        choices = self._choices(resp, n)
        out = []
        for c in choices:
            extra = getattr(c, "model_extra", None) or {}
            ids = extra.get("token_ids", getattr(c, "token_ids", None))
            if not isinstance(ids, list) or not all(isinstance(t, int) and t >= 0 for t in ids):
                raise ServedError(f"{self.settings.base_url} sent no token ids (a vLLM server with return_token_ids is "
                                  f"needed to train through {self.field}; or use {self.field}.endpoint=chat for a "
                                  f"frozen role)", f"{self.field}.endpoint")
            lp = getattr(getattr(c, "logprobs", None), "token_logprobs", None)
            if not isinstance(lp, list) or len(lp) != len(ids) or not all(isinstance(x, (int, float)) for x in lp):
                raise ServedError(f"{self.settings.base_url} sent {len(lp) if isinstance(lp, list) else 'no'} log-probs "
                                  f"for {len(ids)} token ids", self.field)
            if len(ids) > max_tokens + 1:
                raise ServedError(f"{self.settings.base_url} sent {len(ids)} ids for max_tokens={max_tokens}",
                                  self.field)
            out.append(ServedSample(text=_text(c.text, self), token_ids=tuple(ids), logprobs=tuple(float(x) for x in lp),
                                    finish_reason="length" if c.finish_reason == "length" else "stop"))
        return out

    def _read_chat(self, resp: Any, n: int) -> list[ServedSample]:
        choices = self._choices(resp, n)
        out = []
        for c in choices:
            msg = c.message
            calls = tuple((_text(t.function.name, self)[:200], _text(t.function.arguments, self))
                          for t in (msg.tool_calls or []) if getattr(t, "function", None) is not None)
            out.append(ServedSample(text=_text(msg.content or "", self), tool_calls=calls,
                                    finish_reason="length" if c.finish_reason == "length" else "stop"))
        return out


class ServedSession:
    """``async with client.session() as (openai_client, semaphore)``: one connection pool and one concurrency bound
    for every request made inside it."""

    def __init__(self, client: ServedClient) -> None:
        self.client = client
        self._openai: Any = None

    async def __aenter__(self) -> tuple[Any, asyncio.Semaphore]:
        self._openai = self.client._client()
        return self._openai, asyncio.Semaphore(self.client.settings.max_concurrency)

    async def __aexit__(self, *exc: object) -> None:
        await self._openai.close()


def _field(obj: Any, name: str, kind: type) -> Any:
    value = getattr(obj, name, None)
    if not isinstance(value, kind):
        raise ValueError(f"{name} is {type(value).__name__}, not {kind.__name__}")
    return value


def _text(value: Any, client: ServedClient) -> str:
    if not isinstance(value, str):
        raise ServedError(f"{client.settings.base_url} sent a {type(value).__name__} where text belongs", client.field)
    if len(value) > MAX_TEXT_CHARS:
        raise ServedError(f"{client.settings.base_url} sent {len(value)} characters in one completion (at most "
                          f"{MAX_TEXT_CHARS})", client.field)
    return value


def _short(text: str, n: int = 200) -> str:
    text = " ".join(text.split())
    return text if len(text) <= n else text[:n] + "..."
