"""A model on an OpenAI-compatible server (vLLM, SGLang, llama.cpp, an API provider): settings and a bounded client.

Every role can sample from a served endpoint (``rollout_engine: served`` with a ``served:`` section; τ²'s simulated
user under ``tau2.served``). This module is the one place that talks to such a server, through the official
``openai`` client (async, imported lazily):

* :meth:`ServedClient.complete_ids`: token ids in, token ids and their log-probs out (vLLM's ``return_token_ids``),
  for agents that train: the learner updates on exactly the ids the server sampled, never re-tokenised text.
* :meth:`ServedClient.chat`: the chat endpoint (messages and tool schemas in; text or tool calls out), for frozen
  roles on any provider.

Server responses are hostile input: a body is read only up to :data:`MAX_BODY_BYTES` (refused as it streams in, never
held whole), parsed as plain JSON and every field checked (types, counts, lengths, finite log-probs, ids inside the
vocabulary, at most :data:`MAX_TOOL_CALLS` tool calls) before it is used. Every request is bounded: a wall-clock
deadline of ``timeout_s`` per attempt whatever the server does with its bytes, up to ``max_retries`` retries (at most
10) on connection errors, timeouts, 429 and 5xx, waiting ``backoff_s`` doubling up to :data:`MAX_BACKOFF_S` or what a
``Retry-After`` asks (capped alike), at most ``max_concurrency`` requests in flight; the startup check has its own
deadline (:data:`CHECK_DEADLINE_S`). A request that still fails, or a malformed answer (not retried: it is what the
server answers), raises :class:`ServedError` naming the endpoint (``POST /completions to URL``) and the setting to look
at. The key (read from the environment variable ``api_key_env`` names; never from the config, never in ``base_url``)
never appears in a message, a log or a file.
"""

from __future__ import annotations

import asyncio
import email.utils
import json
import math
import os
import random
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Callable, Literal
from urllib.parse import parse_qsl, urlsplit

from pydantic import BaseModel, ConfigDict, Field, field_validator

MAX_TEXT_CHARS = 200_000
"""The longest completion text accepted from a server (a larger one is a malformed response, not a sample)."""
MAX_BODY_BYTES = 64 << 20
"""The largest response body read (64 MiB: n completions of MAX_TEXT_CHARS each with their ids and log-probs fit);
a larger one is refused while it streams in, before it is all in memory."""
MAX_TOOL_CALLS = 32
"""The most tool calls accepted in one chat reply."""
MAX_BACKOFF_S = 30.0
"""The longest wait between two tries of a request, whatever the backoff or a ``Retry-After`` asks."""
CHECK_DEADLINE_S = 8.0
"""The startup check's deadline (``/v1/models``), whatever ``timeout_s``: a host that accepts connections but never
answers is refused in seconds, not after ``timeout_s`` x tries."""
LOGPROB_SLACK = 1e-4
"""A log-prob above this is refused (a probability above 1); the slack absorbs float rounding at 0."""
KEY_VAR = re.compile(r"^[A-Z][A-Z0-9_]*$")
"""What ``api_key_env`` must look like: an environment variable's name (a pasted key does not)."""
_KEY_LIKE = re.compile(r"(?:sk|hf|pk|rk|ghp|gho|ghs|ghu|glpat|xox[abprs]|AKIA|AIza)[-_][A-Za-z0-9_-]{8,}"
                       r"|(?=[A-Za-z_-]*[0-9])[A-Za-z0-9_-]{24,}")
"""Text shaped like an API key or token: a known prefix, or 24+ key characters with a digit among them."""
_KEY_PARAMS = ("key", "token", "secret", "password", "passwd", "auth", "sig", "credential")


class ServedSettings(BaseModel):
    """One agent's endpoint (``<role>.served``, ``tau2.served``)."""

    model_config = ConfigDict(extra="forbid", hide_input_in_errors=True)  # a value here could be a key

    base_url: str = Field(description="The server's OpenAI-compatible base URL, e.g. http://127.0.0.1:8000/v1 (vLLM, SGLang, llama.cpp) or a provider's.")
    model: str = Field(description="The model name the server serves (checked against its /v1/models at startup); a trained agent's adapters are served as '<model>-v<version>'.")
    api_key_env: str | None = Field(None, description="The NAME of the environment variable holding the API key (the key itself never goes into config.yaml, a log, the pool or a checkpoint); None: no key (a local server).")
    timeout_s: float = Field(300.0, gt=0, description="Seconds one request attempt may take, start to last byte, before it is retried (or fails): a wall-clock deadline, so it must cover a whole batch of completions on a slow server (a CPU server takes minutes for a large one).")
    max_retries: int = Field(3, ge=0, le=10, description="Retries of a request after a connection error, a timeout, a 429 or a 5xx, with exponential backoff (at most 10).")
    max_concurrency: int = Field(16, ge=1, description="Requests in flight at once.")
    endpoint: Literal["completions", "chat"] = Field("completions", description="completions: token ids in, token ids and log-probs out (needs vLLM's return_token_ids; required to train); chat: messages and tool schemas in, text or tool calls out (any provider; frozen roles).")
    backoff_s: float = Field(0.5, gt=0, description="The first retry's wait; each further retry waits twice as long (plus jitter), at most 30 s; longer when the server's Retry-After asks (capped alike).")

    @field_validator("base_url")
    @classmethod
    def _http(cls, url: str) -> str:
        if not url.startswith(("http://", "https://")):
            raise ValueError("must start with http:// or https://")
        if url_carries_credentials(url):
            raise ValueError("must not carry credentials (user:password@ or a key in the query): put the key in an "
                             "environment variable and name it in api_key_env")
        return url.rstrip("/")

    @field_validator("api_key_env")
    @classmethod
    def _a_name(cls, name: str | None) -> str | None:
        if name is not None and not KEY_VAR.match(name):
            raise ValueError("must be the name of an environment variable (capitals, digits and _, like "
                             "OPENAI_API_KEY), not the key itself: export the key under that name")
        return name


def url_carries_credentials(url: str) -> bool:
    """Whether ``url`` holds user info (``user:pass@``) or a key in its query (a key-like parameter or value)."""
    try:
        parts = urlsplit(url)
        userinfo = parts.username is not None or parts.password is not None
    except ValueError:
        return True  # unparsable: not shown, not used
    return userinfo or any(any(k in name.lower() for k in _KEY_PARAMS) or _KEY_LIKE.search(value)
                           for name, value in parse_qsl(parts.query, keep_blank_values=True))


def could_be_secret(field: str, value: Any) -> bool:
    """Whether a config error must not print ``value`` (of the dotted ``field``): an API-key setting's, anything
    shaped like a key or token, a URL carrying credentials. Errors name the field, never such a value."""
    name = field.rsplit(".", 1)[-1].lower()
    if any(k in name for k in ("key", "token", "secret", "password")):
        return True
    if not isinstance(value, str):
        return False
    return bool(_KEY_LIKE.search(value)) or ("://" in value and url_carries_credentials(value))


def retry_wait(attempt: int, backoff_s: float, retry_after: float | None, jitter: float) -> float:
    """Seconds to wait before try ``attempt + 1``: ``backoff_s`` doubling per try, plus up to a quarter (``jitter`` in
    [0, 1]), or the server's ``Retry-After`` when it asks for longer; never above :data:`MAX_BACKOFF_S`."""
    wait = backoff_s * 2 ** min(attempt, 60) * (1 + 0.25 * jitter)
    return min(MAX_BACKOFF_S, max(wait, retry_after or 0.0))


def parse_retry_after(value: str | None, now: float | None = None) -> float | None:
    """A ``Retry-After`` header's seconds (a number, or an HTTP date); None when absent or unreadable."""
    if value is None:
        return None
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value).timestamp()
        except (TypeError, ValueError, IndexError):
            return None
        seconds = when - (time.time() if now is None else now)
    return max(0.0, seconds) if math.isfinite(seconds) else None


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
    """A bounded client of one endpoint. Thread-compatible: each call runs its requests on a fresh event loop.

    ``vocab_size``: token ids at or above it are refused (the learner's embedding rows; None: not checked).
    ``need_ids``: completions must carry token ids and their log-probs (an agent that trains on them); a frozen
    role's (False) may come without (llama.cpp's server, most providers): text only."""

    def __init__(self, settings: ServedSettings, field: str = "served", vocab_size: int | None = None,
                 need_ids: bool = True) -> None:
        self.settings, self.field, self.vocab_size, self.need_ids = settings, field, vocab_size, need_ids
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

    def models(self, deadline_s: float | None = None) -> list[str]:
        """The model names the server lists (``/v1/models``), retried as the settings say; ``deadline_s`` bounds the
        whole call, retries included."""
        async def run() -> list[str]:
            client = self._client()
            try:
                async with asyncio.timeout(deadline_s):
                    return await self._model_names(client, deadline_s)
            except TimeoutError:
                raise ServedError(f"GET /models to {self.settings.base_url} did not answer within {deadline_s:g} s "
                                  f"(the host accepts connections but does not answer?)",
                                  f"{self.field}.base_url") from None
            finally:
                await client.close()
        return asyncio.run(run())

    def check(self) -> None:
        """Refuse a wrong ``base_url`` or ``model`` within seconds (:data:`CHECK_DEADLINE_S`, whatever
        ``timeout_s``), before any model loads (names the field)."""
        s = self.settings
        try:
            names = self.models(CHECK_DEADLINE_S)
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
        what = "POST /completions"
        async with sem:
            data = await self._retrying(lambda: _json(client.completions.with_raw_response.create(
                **body, extra_body={"return_token_ids": True})), what)
        return self._read_completion(data, n, int(sampling.get("max_tokens", 1 << 30)), what)

    def chat(self, requests: Sequence[ChatRequest], n: int, sampling: Mapping[str, Any],
             seeds: Sequence[int | None], model: str | None = None) -> list[list[ServedSample]]:
        """``n`` replies to each chat request (text, or the tool calls the server parsed), in request order."""
        if len(seeds) != len(requests):
            raise ValueError(f"{len(requests)} requests but {len(seeds)} seeds")
        what = "POST /chat/completions"

        async def one(client: Any, sem: asyncio.Semaphore, req: ChatRequest, seed: int | None) -> list[ServedSample]:
            body: dict[str, Any] = {"model": model or self.settings.model, "n": n, **sampling,
                                    "messages": [{"role": r, "content": c} for r, c in req.messages]}
            if req.tools:
                body["tools"] = [dict(t) for t in req.tools]
            if seed is not None:
                body["seed"] = seed
            async with sem:
                data = await self._retrying(lambda: _json(client.chat.completions.with_raw_response.create(**body)),
                                            what)
            return self._read_chat(data, n, what)

        return self._gather([lambda c, s, r=r, seed=seed: one(c, s, r, seed) for r, seed in zip(requests, seeds)])

    def post(self, path: str, payload: Mapping[str, Any], settled: Callable[[list[str]], bool] | None = None) -> None:
        """A plain POST to the server (vLLM's ``/v1/load_lora_adapter`` and ``/v1/unload_lora_adapter``), bounded and
        retried like every request; a 4xx is a ServedError with the server's message. ``settled(names)``: whether
        the POST took effect, judged from the server's model list; asked before each retry, so a POST whose answer
        was lost (it timed out, yet the server did it) is not done twice (a second adapter load would fail on
        "already loaded")."""
        import openai

        async def run() -> None:
            client = self._client()

            async def done() -> bool:  # one bounded look; not known to have taken effect when it fails
                assert settled is not None
                try:
                    async with asyncio.timeout(self.settings.timeout_s):
                        return settled(self._read_models(await _json(client.models.with_raw_response.list()),
                                                         "GET /models"))
                except (TimeoutError, openai.OpenAIError, BodyRefused, ServedError, ValueError, RecursionError):
                    return False

            try:
                await self._retrying(lambda: client.post(path, body=dict(payload), cast_to=str), f"POST {path}",
                                     None if settled is None else done)
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
                           max_retries=0, http_client=_capped_http_client(self.settings.timeout_s))

    def _gather(self, calls: Sequence[Any]) -> list[list[ServedSample]]:
        async def run() -> list[list[ServedSample]]:
            client, sem = self._client(), asyncio.Semaphore(self.settings.max_concurrency)
            try:
                return list(await asyncio.gather(*(call(client, sem) for call in calls)))
            finally:
                await client.close()
        return asyncio.run(run()) if calls else []

    async def _model_names(self, client: Any, attempt_s: float | None = None) -> list[str]:
        what = "GET /models"
        return self._read_models(await self._retrying(lambda: _json(client.models.with_raw_response.list()), what,
                                                      attempt_s=attempt_s), what)

    async def _retrying(self, make: Any, what: str, settled: Any = None, attempt_s: float | None = None) -> Any:
        """``await make()``, each try within its deadline (``timeout_s``, or ``attempt_s`` when shorter), retried on
        what a retry can cure; ``settled()``: asked before each retry, True when the last try took effect after all
        (its answer was lost). Any failure left is a ServedError naming the endpoint."""
        import openai

        s = self.settings
        deadline = s.timeout_s if attempt_s is None else min(s.timeout_s, attempt_s)
        for attempt in range(s.max_retries + 1):
            if attempt and settled is not None and await settled():
                return None
            retry_after = None
            try:
                async with asyncio.timeout(deadline):
                    return await make()
            except TimeoutError:
                last = f"Timeout: no complete answer within {deadline:g} s"
            except (openai.RateLimitError, openai.InternalServerError) as err:
                last = f"{err.status_code}: {_short(err.message)}"
                retry_after = parse_retry_after(err.response.headers.get("retry-after"))
            except openai.APIConnectionError as err:  # refused, reset, a body cut short, the client's own timeout
                cause = err.__cause__ or err
                last = f"{type(err).__name__.replace('API', '').replace('Error', '')}: {_short(str(cause) or str(err))}"
            except openai.APIStatusError as err:  # 4xx other than 429: retrying will not change the answer
                raise ServedError(f"{what} to {s.base_url} was refused ({err.status_code}: {_short(err.message)})",
                                  self.field) from None
            except BodyRefused as err:
                raise ServedError(f"{what} to {s.base_url}: {err}", self.field) from None
            except (openai.APIResponseValidationError, ValueError, RecursionError) as err:
                raise ServedError(f"{what} to {s.base_url}: the response is not what an OpenAI-compatible server "
                                  f"sends ({_short(str(err)) or type(err).__name__})", self.field) from None
            if attempt < s.max_retries:
                await asyncio.sleep(retry_wait(attempt, s.backoff_s, retry_after, random.random()))
        raise ServedError(f"{what} to {s.base_url} failed after {s.max_retries + 1} tries ({last}); is the server "
                          f"up? ({self.field}.base_url, .timeout_s, .max_retries)", f"{self.field}.base_url")

    def _bad(self, what: str, problem: str, field: str | None = None) -> ServedError:
        return ServedError(f"{what} to {self.settings.base_url}: {problem}", field or self.field)

    def _read_models(self, data: Any, what: str) -> list[str]:
        models = data.get("data") if isinstance(data, dict) else None
        if not isinstance(models, list) or not all(isinstance(m, dict) and isinstance(m.get("id"), str)
                                                   for m in models):
            raise self._bad(what, "the answer holds no list of models (data: [{id: ...}])")
        return [m["id"][:200] for m in models]

    def _choices(self, data: Any, n: int, what: str) -> list[dict[str, Any]]:
        """The response's ``n`` choices in index order (a ServedError for a malformed body or another count)."""
        choices = data.get("choices") if isinstance(data, dict) else None
        if not isinstance(choices, list) or not all(isinstance(c, dict) for c in choices):
            raise self._bad(what, "the answer holds no list of choices")
        if len(choices) != n:
            raise self._bad(what, f"{len(choices)} choices for n={n}")
        index = [c.get("index") for c in choices]
        if sorted(i for i in index if isinstance(i, int) and not isinstance(i, bool)) != list(range(n)):
            raise self._bad(what, f"choice indices {_short(repr(index), 80)} for n={n}")
        return sorted(choices, key=lambda c: int(c["index"]))

    def _read_completion(self, data: Any, n: int, max_tokens: int, what: str) -> list[ServedSample]:
        out = []
        for c in self._choices(data, n, what):
            text = self._text(c.get("text"), what)
            ids = c.get("token_ids")
            lp = c.get("logprobs")
            lp = lp.get("token_logprobs") if isinstance(lp, dict) else None
            if ids is None and not self.need_ids:  # llama.cpp, most providers: a frozen role needs only the text
                out.append(ServedSample(text=text, finish_reason=_finish(c)))
                continue
            if not isinstance(ids, list) or not all(isinstance(t, int) and not isinstance(t, bool) for t in ids):
                raise self._bad(what, f"no token ids (a vLLM server with return_token_ids is needed to train through "
                                      f"{self.field}; or freeze the role, or use {self.field}.endpoint=chat)",
                                f"{self.field}.endpoint")
            if len(ids) > max_tokens + 1:
                raise self._bad(what, f"{len(ids)} token ids for max_tokens={max_tokens}")
            for t in ids:
                if t < 0 or (self.vocab_size is not None and t >= self.vocab_size):
                    raise self._bad(what, f"a token id ({t}) outside the vocabulary"
                                          + (f" (0 to {self.vocab_size - 1})" if self.vocab_size else ""))
            if lp is None and not self.need_ids:
                out.append(ServedSample(text=text, token_ids=tuple(ids), finish_reason=_finish(c)))
                continue
            if not isinstance(lp, list) or len(lp) != len(ids):
                raise self._bad(what, f"{len(lp) if isinstance(lp, list) else 'no'} log-probs for {len(ids)} token ids")
            for x in lp:
                if not _a_logprob(x):
                    raise self._bad(what, f"a log-prob of {_short(repr(x), 40)} (log-probs are finite and at most 0)")
            out.append(ServedSample(text=text, token_ids=tuple(ids), logprobs=tuple(float(x) for x in lp),
                                    finish_reason=_finish(c)))
        return out

    def _read_chat(self, data: Any, n: int, what: str) -> list[ServedSample]:
        out = []
        for c in self._choices(data, n, what):
            msg = c.get("message")
            if not isinstance(msg, dict):
                raise self._bad(what, "a choice without a message")
            calls = msg.get("tool_calls") or []
            if not isinstance(calls, list):
                raise self._bad(what, "tool_calls is not a list")
            if len(calls) > MAX_TOOL_CALLS:
                raise self._bad(what, f"{len(calls)} tool calls in one reply (at most {MAX_TOOL_CALLS})")
            parsed = []
            for t in calls:
                fn = t.get("function") if isinstance(t, dict) else None
                if fn is None:
                    continue  # not a function call: nothing an environment runs
                if not isinstance(fn, dict):
                    raise self._bad(what, "a tool call whose function is not an object")
                args = fn.get("arguments")
                args = json.dumps(args) if isinstance(args, dict) else args
                parsed.append((self._text(fn.get("name"), what)[:200], self._text(args, what)))
            content = msg.get("content")
            out.append(ServedSample(text=self._text("" if content is None else content, what), tool_calls=tuple(parsed),
                                    finish_reason=_finish(c)))
        return out

    def _text(self, value: Any, what: str) -> str:
        if not isinstance(value, str):
            raise self._bad(what, f"a {type(value).__name__} where text belongs")
        if len(value) > MAX_TEXT_CHARS:
            raise self._bad(what, f"{len(value)} characters in one completion (at most {MAX_TEXT_CHARS})")
        return value


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


class BodyRefused(Exception):
    """A response refused while it streams in (too large, or encoded though identity was asked for)."""


async def _json(raw: Any) -> Any:
    """The JSON body of a raw openai response (read within the body cap)."""
    return json.loads((await raw).content)


def _a_logprob(x: Any) -> bool:
    """A number that can be a log-prob: finite and at most 0 (plus :data:`LOGPROB_SLACK`)."""
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return False
    try:
        return math.isfinite(float(x)) and float(x) <= LOGPROB_SLACK
    except OverflowError:  # an int past any float
        return False


def _finish(choice: Mapping[str, Any]) -> Literal["stop", "length"]:
    return "length" if choice.get("finish_reason") == "length" else "stop"


def _capped_http_client(timeout_s: float) -> Any:
    """An HTTP client whose responses are read at most :data:`MAX_BODY_BYTES` deep: a larger body (announced, or as
    it streams in) raises :class:`BodyRefused` before it is all in memory. Bodies come unencoded (a compressed one
    could inflate past any cap after it is counted)."""
    import httpx2

    class Capped(httpx2.AsyncByteStream):
        def __init__(self, inner: Any) -> None:
            self.inner = inner

        async def __aiter__(self) -> Any:
            seen = 0
            async for chunk in self.inner:
                seen += len(chunk)
                if seen > MAX_BODY_BYTES:
                    raise BodyRefused(f"the response body is larger than {MAX_BODY_BYTES >> 20} MiB")
                yield chunk

        async def aclose(self) -> None:
            await self.inner.aclose()

    async def cap(response: Any) -> None:
        encoding = response.headers.get("content-encoding", "identity").strip().lower()
        if encoding not in ("", "identity"):
            raise BodyRefused(f"the response is encoded ({_short(encoding, 20)}) though identity was asked for")
        length = response.headers.get("content-length", "")
        if length.isdigit() and int(length) > MAX_BODY_BYTES:
            raise BodyRefused(f"the response body is larger than {MAX_BODY_BYTES >> 20} MiB ({length} bytes)")
        response.stream = Capped(response.stream)

    return httpx2.AsyncClient(timeout=timeout_s, headers={"accept-encoding": "identity"}, follow_redirects=False,
                              event_hooks={"response": [cap]})


def _short(text: str, n: int = 200) -> str:
    text = " ".join(text.split())
    return text if len(text) <= n else text[:n] + "..."
