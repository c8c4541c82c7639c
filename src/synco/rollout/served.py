"""Sampling on a served endpoint (``rollout_engine: served``): one more engine behind the rollout seam.

* :class:`ServedGenerator`: a :class:`~synco.core.policy.Sampler` over token ids. The learner keeps the weights
  and the server samples: prompt ids go out, the sampled ids and their log-probs come back, so an update trains
  exactly what was sampled. At each publish (the learner's, after every update or at the pipeline's publish point)
  a LoRA agent's adapter is saved and loaded into the server under a versioned name (vLLM's runtime LoRA loading,
  ``--enable-lora``), the previous one unloaded, and requests name the current one: every completion is stamped
  with the learner version that sampled it. Old log-probs are recomputed
  by the trainer (the server's numerics are not the trainer's), as with the in-process vLLM engine. The server reads
  the adapter folder, so it must see the learner's filesystem (the same machine, or a shared mount). The sampled ids
  are checked against the learner's vocabulary. A frozen role's completions may come without ids (llama.cpp's
  server, most providers): the text is tokenised locally, with placeholder log-probs (nothing trains on them).
* :class:`ServedPolicy`: a frozen role with no local weights on the chat endpoint of any OpenAI-compatible server or
  API provider (EvoSyn's setting: a strong synthesis model behind an API writes the tasks; the consensus checker).

Per-request seeds are derived from the request's seed and the row, so results do not depend on the order the
responses arrive in.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from synco.core.policy import PolicyConfig, UpdateStats
from synco.core.sampling import Completion, Experience, SamplingParams, SFTExample
from synco.core.seeds import derive_seed
from synco.core.served import ChatRequest, ServedClient, ServedError, ServedSettings, sampling_fields

__all__ = ["ServedGenerator", "ServedPolicy", "request_seeds", "served_problem"]


def request_seeds(seed: int, n_rows: int) -> list[int | None]:
    """One seed per row of a request, derived from the request's seed: the rows' samples do not depend on the order
    the responses arrive in."""
    return [derive_seed(seed, "served", i) % (2 ** 31) for i in range(n_rows)]


def _seed(seed: int | None) -> int:
    """The request's seed; without one, drawn from the global torch RNG (so an unseeded run still follows its seed
    and resumes exactly, as the in-process engines do)."""
    if seed is not None:
        return seed
    import torch

    return int(torch.randint(0, 2 ** 31 - 1, (1,)).item())


def _sampling(params: SamplingParams) -> dict[str, Any]:
    return sampling_fields(params.temperature, params.top_p, params.top_k, params.max_new_tokens, params.greedy)


def served_problem(cfg: PolicyConfig, role: str, frozen: bool | None = None) -> str | None:
    """Why ``cfg`` cannot run on its served endpoint (None: it can); checked when the config loads. ``frozen``: the
    role never trains in this run (default ``not cfg.trainable``)."""
    if cfg.rollout_engine != "served":
        return None
    if cfg.served is None:
        return f"{role}.rollout_engine=served needs a {role}.served section (base_url, model)"
    trains = cfg.trainable if frozen is None else not frozen
    if trains and cfg.lora is None:
        return (f"{role}.rollout_engine=served trains through the server's runtime LoRA loading: set {role}.lora "
                f"(full fine-tuning through a server would reload every weight each step; not supported), or "
                f"freeze the role")
    if trains and cfg.served.endpoint != "completions":
        return (f"{role}.served.endpoint=chat cannot train: an update needs the sampled token ids "
                f"({role}.served.endpoint=completions on a vLLM server)")
    return None


class ServedGenerator:
    """Token-id sampling on a served vLLM (a trained agent's, or a frozen base model's)."""

    recompute_proximal = True  # declared: the server's numerics are not the trainer's, the learner recomputes them

    def __init__(self, settings: ServedSettings, tokenizer: Any, eos_ids: Sequence[int], role: str = "agent",
                 lora: bool = False, vocab_size: int | None = None, trains: bool = True) -> None:
        self.client = ServedClient(settings, f"{role}.served", vocab_size=vocab_size, need_ids=trains)
        self.settings, self.tokenizer, self.eos_ids, self.role, self.lora = settings, tokenizer, list(eos_ids), role, lora
        self.loaded: int | None = None  # the server's name suffix of the adapter it holds (None: none loaded yet)
        self.version = 0  # the learner version of the weights the server samples
        self.pending: Any = None  # the model whose adapter the next request must see (the one built, at first)
        self._dir = Path(tempfile.mkdtemp(prefix=f"synco-{role}-adapters-"))
        self._tag = f"{settings.model}-{role}-{self._dir.name.rsplit('-', 1)[-1]}"

    @classmethod
    def for_policy(cls, policy: Any, role: str = "agent", trains: bool = True) -> "ServedGenerator":
        """The engine of an HF learner (its tokenizer, stop ids and vocabulary; its adapter under LoRA); ``trains``:
        the role is updated in this run (its completions must carry the sampled ids)."""
        cfg = policy.config
        if cfg.served is None:
            raise ServedError(f"{role}.rollout_engine=served needs a {role}.served section (base_url, model)")
        vocab = int(policy.model.get_input_embeddings().num_embeddings)
        gen = cls(cfg.served, policy.tokenizer, policy.eos_ids, role, lora=policy.is_peft, vocab_size=vocab,
                  trains=trains)
        if policy.is_peft:
            gen.pending = policy.model  # the adapter as built (a warm-started one too) goes up before the first request
        return gen

    @property
    def served_model(self) -> str:
        """The model name requests use: the current adapter's under LoRA, else the served base."""
        return self.settings.model if self.loaded is None else self.adapter_name(self.loaded)

    def adapter_name(self, version: int) -> str:
        return f"{self._tag}-v{version}"

    def load(self, model: Any, version: int) -> None:
        """The learner's adapter goes up now, as version ``version`` (a full model cannot: see
        :func:`served_problem`)."""
        if self.lora and version != self.version:
            self.pending = model
            self._push()
        self.version = version

    def _push(self) -> None:
        model, self.pending = self.pending, None
        version = 0 if self.loaded is None else self.loaded + 1
        folder = self._dir / f"v{version}"
        model.save_pretrained(folder)
        name = self.adapter_name(version)  # a load whose answer was lost but that took effect is not done twice
        self.client.post("/load_lora_adapter", {"lora_name": name, "lora_path": str(folder)},
                         settled=lambda names: name in names)
        old, self.loaded = self.loaded, version
        if old is not None:
            gone = self.adapter_name(old)
            self.client.post("/unload_lora_adapter", {"lora_name": gone}, settled=lambda names: gone not in names)
            shutil.rmtree(self._dir / f"v{old}", ignore_errors=True)

    def generate(self, prompt_ids: Sequence[Sequence[int]], n: int, params: SamplingParams,
                 seed: int | None = None) -> list[list[Completion]]:
        """``n`` completions of each token-id prompt; ids and log-probs as the server sampled them."""
        if self.pending is not None:
            self._push()
        got = self.client.complete_ids(prompt_ids, n, _sampling(params), request_seeds(_seed(seed), len(prompt_ids)),
                                       self.served_model)
        return [[self._completion(ids, s) for s in group] for ids, group in zip(prompt_ids, got)]

    def session(self) -> Any:
        """An async session for rows sampled one at a time (:meth:`sample_row`); the adapter goes up first."""
        if self.pending is not None:
            self._push()
        return self.client.session()

    def base_seed(self, seed: int | None) -> int:
        """A request's seed (drawn from the run's torch RNG when the caller has none)."""
        return _seed(seed)

    async def sample_row(self, conn: Any, ids: Sequence[int], params: SamplingParams, seed: int) -> Completion:
        """One completion of one token-id prompt inside a :meth:`session`: what an episode samples each turn as soon
        as its previous observation is in (``seed``: the episode's own seed for this turn)."""
        client, sem = conn
        s = await self.client.complete_row(client, sem, ids, _sampling(params), derive_seed(seed, "served", 0) % 2 ** 31,
                                           self.served_model)
        return self._completion(ids, s)

    def _completion(self, ids: Sequence[int], s: Any) -> Completion:
        out, logprobs = list(s.token_ids), list(s.logprobs)
        if out:
            text = self.tokenizer.decode(out, skip_special_tokens=True)
        else:  # a frozen role's completion without ids: the server's text, tokenised here (EOS closing a stop)
            text = s.text
            out = self.tokenizer.encode(text, add_special_tokens=False)
            out += self.eos_ids[:1] if s.finish_reason == "stop" else []
        if len(logprobs) != len(out):  # a frozen role's, none sent: placeholders (never trained on)
            logprobs = [0.0] * len(out)
        stopped = bool(out) and out[-1] in self.eos_ids
        return Completion(text=text, prompt_ids=list(ids), completion_ids=out, logprobs=logprobs,
                          truncated=not stopped and s.finish_reason == "length",
                          finish_reason="stop" if stopped or s.finish_reason == "stop" else "length",
                          version=self.version)

    def close(self) -> None:
        """Unload the adapter this run loaded (best effort: the server may be gone) and delete the local copies."""
        if self.loaded is not None:
            try:
                self.client.post("/unload_lora_adapter", {"lora_name": self.adapter_name(self.loaded)})
            except ServedError:
                pass
            self.loaded = None
        shutil.rmtree(self._dir, ignore_errors=True)


class ServedPolicy:
    """A frozen role on a chat endpoint, with no local weights: implements the :class:`~synco.core.policy.Policy`
    contract for sampling; updates are refused. A formatted prompt is the chat request itself (JSON), which only
    this policy reads back."""

    policy_version = 0  # frozen

    def __init__(self, config: PolicyConfig, role: str) -> None:
        if config.served is None:
            raise ServedError(f"{role}.rollout_engine=served needs a {role}.served section")
        self.config, self.role = config, role
        self.client = ServedClient(config.served, f"{role}.served")

    def format_prompt(self, user_text: str, system: str | None = None,
                      tools: Sequence[Mapping[str, Any]] | None = None) -> str:
        system = self.config.system_prompt if system is None else system
        messages = ([["system", system]] if system else []) + [["user", user_text]]
        return json.dumps({"messages": messages, "tools": list(tools or [])})

    def generate(self, prompts: Sequence[str], n: int, params: SamplingParams | None = None,
                 seed: int | None = None) -> list[list[Completion]]:
        params = params or self.config.sampling
        requests = []
        for p in prompts:
            data = json.loads(p)
            requests.append(ChatRequest(tuple((str(r), str(c)) for r, c in data["messages"]), tuple(data["tools"])))
        got = self.client.chat(requests, n, _sampling(params), request_seeds(_seed(seed), len(prompts)))
        return [[Completion(text=_reply_text(s.text, s.tool_calls), prompt_ids=[], completion_ids=[], logprobs=[],
                            truncated=s.finish_reason == "length", finish_reason=s.finish_reason) for s in group]
                for group in got]

    def update(self, batch: Sequence[Experience]) -> UpdateStats:
        raise RuntimeError(f"the {self.role} is served and frozen: it takes no updates")

    def sft_update(self, batch: Sequence[SFTExample], lr: float | None = None) -> UpdateStats:
        raise RuntimeError(f"the {self.role} is served and frozen: it takes no updates")

    def save(self, path: str | Path) -> None:
        """Which endpoint played the role (never the key): the checkpoint's record of a served agent."""
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        s = self.config.served
        assert s is not None
        (path / "served.json").write_text(json.dumps({"base_url": s.base_url, "model": s.model,
                                                      "endpoint": s.endpoint}))

    def save_state(self, path: str | Path) -> None:
        return None

    def load_state(self, path: str | Path) -> None:
        return None

    def trainable_parameters(self) -> list[tuple[str, Any]]:
        return []

    def close(self) -> None:
        return None


def _reply_text(text: str, calls: Sequence[tuple[str, str]]) -> str:
    """A chat reply as the text an environment parses: the tool calls (JSON ``{"name": ..., "arguments": ...}``, the
    arguments as the server returned them, parsed again by the environment as hostile text), else the message."""
    if not calls:
        return text
    parts = []
    for name, arguments in calls:
        try:
            args: Any = json.loads(arguments)
        except json.JSONDecodeError:
            args = arguments
        parts.append(json.dumps({"name": name, "arguments": args}))
    return "\n".join(parts)
