"""The :class:`~synco.core.policy.Policy` on ``transformers``: :class:`HFPolicy` and its :class:`HFGenerator`.

:class:`HFPolicy` is a causal LM (optionally with ``peft`` LoRA adapters) with an
AdamW optimizer: GRPO updates in micro-batches over a global token normalizer,
fp32 master weights for bf16/fp16 parameters (:mod:`synco.learn.precision`),
checkpoints of weights and optimizer state. Prompts are built by
:func:`synco.core.prompts.build_prompt`, the same function evaluation uses.
"""

from __future__ import annotations

import copy
import inspect
import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from synco.learn.grpo import policy_loss
from synco.core.policy import STATE_FILE, LoraSettings, PolicyConfig, Sampler, UpdateStats
from synco.learn.fsdp import DataShard, all_reduce_max, all_reduce_sum, rank_micro_batches
from synco.core.seeds import chunk_seed, regroup, row_chunks
from synco.learn.precision import LossScaler, MasterWeights
from synco.learn.sft import IGNORE, completion_loss
from synco.core.sampling import SFTExample
from synco.core.prompts import build_prompt
from synco.core.sampling import Completion, Experience, SamplingParams
from synco.core.tokens import TokenText, eos_token_ids as stop_ids

if TYPE_CHECKING:
    from synco.rollout.episodes import RowSampler

DTYPES: dict[str, torch.dtype] = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
"""Torch dtype of each ``PolicyConfig.dtype`` name."""


@dataclass
class GradientStats:
    """Result of :meth:`HFPolicy.compute_gradients`: the whole-batch loss and token-weighted diagnostics.

    The ``is_*`` numbers (``grpo.decoupled`` only, else None) describe the importance weights as
    :class:`~synco.core.policy.UpdateStats` does.
    """

    loss: float
    n_forwarded: int
    n_tokens_forwarded: int
    clip_frac: float
    ratio_mean: float
    kl: float
    is_weight_mean: float | None = None
    is_weight_std: float | None = None
    is_weight_max: float | None = None
    is_truncated_frac: float | None = None
    old_logprobs: dict[int, torch.Tensor] = field(default_factory=dict)


# --------------------------------------------------------------------------- helpers


def resolve_device(device: str) -> torch.device:
    """``'auto'`` → cuda when available, else cpu; ``cuda`` / ``cuda:N`` checked against the visible GPUs."""
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    dev = torch.device(device)
    if dev.type == "cuda":
        visible = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if visible == 0:
            raise ValueError(f"device={device!r} but no CUDA GPU is available here (use device=cpu or auto)")
        if dev.index is not None and dev.index >= visible:
            raise ValueError(f"device={device!r} but only {visible} GPU(s) are visible (cuda:0..cuda:{visible - 1}; "
                             "check CUDA_VISIBLE_DEVICES)")
    return dev


def eos_token_ids(model: torch.nn.Module, tokenizer: Any) -> list[int]:
    """Every token id that ends a completion: the tokenizer's EOS plus the model's generation-config EOS ids."""
    return stop_ids(tokenizer, getattr(model, "generation_config", None))


def _cut_at_eos(ids: list[int], eos: set[int]) -> tuple[list[int], bool]:
    """Ids up to and including the first EOS, and whether one was found."""
    for i, t in enumerate(ids):
        if t in eos:
            return ids[: i + 1], True
    return ids, False


def _left_pad(rows: Sequence[Sequence[int]], pad_id: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """Left-padded ``(R, L)`` ids and attention mask."""
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    att = torch.zeros((len(rows), width), dtype=torch.long)
    for i, r in enumerate(rows):
        if r:
            ids[i, width - len(r) :] = torch.tensor(list(r), dtype=torch.long)
            att[i, width - len(r) :] = 1
    return ids.to(device), att.to(device)


def accepts_kwarg(model: torch.nn.Module, name: str) -> bool:
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    try:
        return name in inspect.signature(base.forward).parameters
    except (TypeError, ValueError):
        return False


def _is_peft_model(model: torch.nn.Module) -> bool:
    """True for a ``peft`` wrapper (checked without importing peft unless it is already loaded)."""
    import sys

    peft = sys.modules.get("peft")
    return peft is not None and isinstance(model, peft.PeftModel)


def enable_checkpointing(model: torch.nn.Module) -> None:
    """Activation checkpointing, non-reentrant (works with frozen inputs, e.g. under LoRA); v5 name first."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    if hasattr(base, "activation_checkpointing_enable"):
        base.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
    else:  # transformers < 5
        base.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})


def _model_device(model: torch.nn.Module) -> torch.device:
    return next(model.parameters()).device


@contextmanager
def seeded_rng(seed: int) -> Iterator[None]:
    """Run the body on torch's RNGs seeded with ``seed``, then put them back as they were (CPU and every
    initialised GPU), so a seeded draw never moves the run's own random stream."""
    cuda = torch.cuda.is_available() and torch.cuda.is_initialized()
    with torch.random.fork_rng(devices=list(range(torch.cuda.device_count())) if cuda else []):
        torch.manual_seed(seed)
        yield


def lora_config(lora: LoraSettings, trainable: bool = True) -> Any:
    """The ``peft.LoraConfig`` of ``lora`` settings (a causal-LM task; ``inference_mode`` when not trainable)."""
    from peft import LoraConfig

    return LoraConfig(
        r=lora.rank,
        lora_alpha=lora.alpha,
        lora_dropout=lora.dropout,
        target_modules=lora.target_modules,
        task_type="CAUSAL_LM",
        inference_mode=not trainable,
    )


# --------------------------------------------------------------------------- HF generator


class HFGenerator:
    """Default :class:`~synco.core.policy.Sampler`: batched ``model.generate`` with left padding, on the training
    model itself (``load`` copies nothing: it samples what the learner holds, so sampling and an update cannot
    overlap; :class:`SnapshotSampler` is the copy that can).

    ``n`` samples per prompt are made by repeating each prompt ``n`` times.
    Per-token log-probs come from the raw (pre-temperature, pre-top-k/p) logits
    that ``output_logits=True`` returns, so they are the model's temperature-1
    log-probs — what the GRPO ratio compares against. Those logits are stored for
    every step, hence ``batch_size`` rows per ``generate`` call. Evaluation sets
    ``keep_logprobs=False`` (``logprobs`` stay empty; storing batch x steps x
    vocab floats is 12 GB for 16 rows x 4096 steps x 49k vocab) and
    ``max_positions`` (the budget is capped at the model's context length). ``view``: what to enter around
    sampling on a model holding several adapters (a shared base's: :mod:`synco.learn.shared_base`), given the model.
    """

    recompute_proximal = False  # the trainer's own numerics: its log-probs serve as the old log-probs
    holds_copy = False  # samples the training model itself (SnapshotSampler: a copy)

    def __init__(self, model: torch.nn.Module, tokenizer: Any, eos_ids: Sequence[int], pad_id: int,
                 batch_size: int = 64, keep_logprobs: bool = True, max_positions: int | None = None,
                 view: Callable[[torch.nn.Module], AbstractContextManager[Any]] | None = None) -> None:
        self.model = model
        self.view = view
        self.version = 0
        self.tokenizer = tokenizer
        self.eos_ids = list(eos_ids)
        self.pad_id = pad_id
        self.batch_size = batch_size
        self.keep_logprobs = keep_logprobs
        self.max_positions = max_positions
        self.constraint: Any = None  # a synco.rollout.card_decoding.CardGrammar: masked sampling and log-probs

    def load(self, model: torch.nn.Module, version: int) -> None:
        """Nothing to copy: sampling uses the training model itself, now at ``version``."""
        self.model, self.version = model, version

    def close(self) -> None:
        """Nothing held outside this process."""

    def _generation_config(self, params: SamplingParams) -> Any:
        from transformers import GenerationConfig

        # Neutral values are set explicitly: None would be filled in from the checkpoint's generation_config.
        common: dict[str, Any] = dict(
            max_new_tokens=params.max_new_tokens,
            min_length=0,
            num_beams=1,
            repetition_penalty=1.0,
            no_repeat_ngram_size=0,
            return_dict_in_generate=self.keep_logprobs,
            output_logits=self.keep_logprobs,
            pad_token_id=self.pad_id,
            eos_token_id=self.eos_ids,
            use_cache=True,
        )
        if params.greedy:  # sampling knobs at transformers' neutral defaults (others trigger a warning)
            return GenerationConfig(do_sample=False, temperature=1.0, top_p=1.0, top_k=50, **common)
        return GenerationConfig(
            do_sample=True,
            temperature=params.temperature,
            top_p=params.top_p,
            top_k=params.top_k,
            typical_p=1.0,
            epsilon_cutoff=0.0,
            eta_cutoff=0.0,
            **common,
        )

    def generate(self, prompt_ids: Sequence[Sequence[int]], n: int, params: SamplingParams,
                 seed: int | None = None) -> list[list[Completion]]:
        """``n`` completions per prompt; with ``seed``, sampled under :func:`seeded_rng` (global RNGs untouched)."""
        with self.view(self.model) if self.view is not None else nullcontext():
            if seed is None:
                return self._generate(prompt_ids, n, params)
            with seeded_rng(seed):
                return self._generate(prompt_ids, n, params)

    def _generate(self, prompt_ids: Sequence[Sequence[int]], n: int, params: SamplingParams) -> list[list[Completion]]:
        if n < 1:
            raise ValueError(f"n must be >= 1, got {n}")
        rows = [(p, list(ids)) for p, ids in enumerate(prompt_ids) for _ in range(n)]
        out: list[list[Completion]] = [[] for _ in prompt_ids]
        eos = set(self.eos_ids)
        device = _model_device(self.model)
        was_training = self.model.training
        self.model.eval()
        try:
            for start in range(0, len(rows), self.batch_size):
                chunk = rows[start : start + self.batch_size]
                ids, att = _left_pad([r for _, r in chunk], self.pad_id, device)
                budget = params.max_new_tokens
                if self.max_positions is not None:
                    budget = max(1, min(budget, self.max_positions - ids.shape[1]))
                gen_cfg = self._generation_config(params.model_copy(update={"max_new_tokens": budget}))
                extra: dict[str, Any] = {}
                if self.constraint is not None:
                    from transformers import LogitsProcessorList

                    extra["logits_processor"] = LogitsProcessorList(
                        [self.constraint.processor(ids.shape[1], prompts=[r for _, r in chunk])])
                with torch.no_grad():
                    res = self.model.generate(input_ids=ids, attention_mask=att, generation_config=gen_cfg, **extra)
                if self.keep_logprobs:
                    gen = res.sequences[:, ids.shape[1] :]
                    steps = min(len(res.logits), gen.shape[1])
                    lp = torch.empty((len(chunk), steps), dtype=torch.float32, device=gen.device)
                    allowed = (None if self.constraint is None
                               else self.constraint.allowed_mask(gen[:, :steps].tolist(), steps, gen.device,
                                                                 prompts=[r for _, r in chunk]))
                    for t in range(steps):
                        logits_t = res.logits[t].float()
                        if allowed is not None:  # the masked distribution the token was sampled from
                            logits_t = logits_t.masked_fill(~allowed[:, t], float("-inf"))
                        step_lp = torch.log_softmax(logits_t, dim=-1)
                        lp[:, t] = step_lp.gather(-1, gen[:, t : t + 1]).squeeze(-1)
                    del res
                    gen_list, lp_list = [g[:steps] for g in gen.tolist()], lp.tolist()
                else:
                    gen_list = res[:, ids.shape[1] :].tolist()
                    lp_list = [[] for _ in chunk]
                for (p, prompt), g, lps in zip(chunk, gen_list, lp_list, strict=True):
                    comp, stopped = _cut_at_eos(g, eos)
                    out[p].append(
                        Completion(
                            text=self.tokenizer.decode(comp, skip_special_tokens=True),
                            prompt_ids=prompt,
                            completion_ids=comp,
                            logprobs=lps[: len(comp)],
                            truncated=not stopped,
                            finish_reason="stop" if stopped else "length",
                            version=self.version,
                        )
                    )
        finally:
            self.model.train(was_training)
        return out


def frozen_copy(model: torch.nn.Module) -> torch.nn.Module:
    """A deep copy of ``model`` in eval mode that no optimizer reaches (no parameter requires a gradient)."""
    out = copy.deepcopy(model).eval()
    for p in out.parameters():
        p.requires_grad_(False)
    return out


class SnapshotSampler(HFGenerator):
    """The snapshot: an :class:`HFGenerator` on a copy of the learner's weights, changed only by :meth:`load`.

    :class:`HFGenerator` samples with the training model itself, so sampling and an update cannot run at the same
    time; this copy can (asynchronous co-training, :mod:`synco.cotrain.pipeline`): the learner's :meth:`HFPolicy.publish`
    copies its exported weights (those an update changes: the adapters under LoRA) in at the pipeline's publish point.
    Memory: one more copy of the model (a shared base's two agents share one:
    :meth:`synco.learn.shared_base.SharedBase.sampling_model`). An engine with weights of its own (vLLM, a server,
    Ray's rollout workers) needs none.

    ``names``: the parameters :meth:`load` copies (the learner's export); ``model``: the copy to sample (default:
    a fresh one of ``base``'s model).
    """

    holds_copy = True

    def __init__(self, base: HFGenerator, version: int, names: Sequence[str],
                 model: torch.nn.Module | None = None) -> None:
        super().__init__(model if model is not None else frozen_copy(base.model), base.tokenizer, base.eos_ids,
                         base.pad_id, batch_size=base.batch_size, keep_logprobs=base.keep_logprobs,
                         max_positions=base.max_positions, view=base.view)
        self.constraint = base.constraint
        self.names = list(names)
        self.version = version

    def load(self, model: torch.nn.Module, version: int) -> None:
        """Copy the learner's exported weights in now; the copy samples version ``version`` from the next generate."""
        src = dict(model.named_parameters())
        dst = dict(self.model.named_parameters())
        with torch.no_grad():
            for name in self.names:
                dst[name].copy_(src[name])
        self.version = version


# --------------------------------------------------------------------------- HF policy


def _warmup_lambda(warmup_steps: int):  # noqa: ANN202 - a plain closure for LambdaLR
    def f(step: int) -> float:
        return 1.0 if warmup_steps <= 0 else min(1.0, (step + 1) / warmup_steps)

    return f


class HFPolicy(TokenText):
    """A ``transformers`` causal LM trained with GRPO (implements :class:`Policy`).

    Build it with :meth:`from_config` (loads ``model_path``), or pass an
    already-built ``model`` and ``tokenizer`` (tests, shared bases): that model
    is moved to ``config.device`` but keeps its dtype, and is wrapped with LoRA
    adapters when ``config.lora`` is set and it is not a peft model already.

    With ``grpo.kl_coef > 0`` a frozen reference is kept (the base with
    adapters disabled under LoRA, else a deep copy made at construction); with
    ``kl_coef == 0`` there is none.
    """

    adapter_name: str | None = None  # a shared base's adapter (synco.learn.shared_base); None: the model's own

    def __init__(
        self,
        model: torch.nn.Module,
        tokenizer: Any,
        config: PolicyConfig | None = None,
        generator: Sampler | None = None,
    ) -> None:
        cfg = config or PolicyConfig(model_path=str(getattr(getattr(model, "config", None), "_name_or_path", "") or ""))
        self.config = cfg
        self.tokenizer = tokenizer
        if cfg.seed is not None:
            torch.manual_seed(cfg.seed)
        self.device = resolve_device(cfg.device)
        model = model.to(self.device)
        self.is_peft = _is_peft_model(model)
        if cfg.lora is not None and not self.is_peft:
            model = self._wrap_lora(model, cfg.lora, trainable=cfg.trainable)
            self.is_peft = True
        if not cfg.trainable:
            for p in model.parameters():
                p.requires_grad_(False)
            model.eval()
        elif cfg.gradient_checkpointing:
            enable_checkpointing(model)
        ref_model = None
        if cfg.trainable and cfg.grpo.kl_coef > 0 and not self.is_peft:
            ref_model = copy.deepcopy(model).eval()
            for p in ref_model.parameters():
                p.requires_grad_(False)
        self._bind(model, tokenizer, ref_model, generator)

    def _bind(self, model: torch.nn.Module, tokenizer: Any, ref_model: torch.nn.Module | None,
              generator: Sampler | None) -> None:
        """Attach a placed model: EOS/pad ids, the sampling engine, the KL reference, the optimizer.

        The one piece of construction every learner on a HF model shares (a
        :class:`~synco.learn.shared_base.AdapterPolicy` binds the shared model here too).
        """
        cfg = self.config
        self.model = model
        self.tokenizer = tokenizer
        self.eos_ids = eos_token_ids(model, tokenizer)
        self._turn_frames: dict[tuple[str, bool], tuple[str, str] | None] = {}  # format_message's cached template parts (TokenText)
        pad = tokenizer.pad_token_id
        self.pad_id = int(pad if pad is not None else self.eos_ids[0])
        if generator is None and cfg.rollout_engine == "vllm":  # vLLM is imported only here (synco.rollout)
            from synco.rollout.vllm_engine import VLLMGenerator

            generator = VLLMGenerator.for_policy(self)
        self.generator: Sampler = generator or HFGenerator(
            model, tokenizer, self.eos_ids, self.pad_id, batch_size=cfg.generation_batch_size, view=self._sampler_view()
        )
        self.publishes_updates = True  # synchronous: every update is published; sample_apart: the pipeline does
        self._keep_arg = accepts_kwarg(model, "logits_to_keep")
        self.shard: DataShard | None = None  # set by synco.learn.fsdp.shard_policy
        self.token_constraint: Any = None  # see set_token_constraint
        self.ref_model: torch.nn.Module | None = ref_model
        self.step = 0
        self._build_optimizer()

    def _build_optimizer(self) -> None:
        """AdamW over :meth:`trainable_parameters` and its warmup scheduler (None for a frozen policy)."""
        cfg = self.config
        self.optimizer: torch.optim.Optimizer | None = None
        self.scheduler: torch.optim.lr_scheduler.LambdaLR | None = None
        self.masters = MasterWeights([])
        self.scaler: LossScaler | None = None
        if cfg.trainable:
            g = cfg.grpo
            params = [p for _, p in self.trainable_parameters()]
            if not params:
                raise ValueError("the policy is trainable but has no parameter with requires_grad")
            if cfg.fp32_master_weights:
                self.masters = MasterWeights(params)
                params = self.masters.optimizer_params
            self.optimizer = torch.optim.AdamW(
                params, lr=g.lr, betas=g.betas, eps=g.adam_eps, weight_decay=g.weight_decay
            )
            self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, _warmup_lambda(g.warmup_steps))
            if cfg.fp16_loss_scaling and any(p.dtype == torch.float16 for p in self.model.parameters()):
                self.scaler = LossScaler()

    # ------------------------------------------------------------------ construction

    @classmethod
    def from_config(cls, cfg: PolicyConfig) -> "HFPolicy":
        """Load tokenizer and model from ``cfg.model_path`` (and a saved LoRA adapter when configured)."""
        from transformers import AutoModelForCausalLM, AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(cfg.model_path)
        kwargs: dict[str, Any] = {"dtype": DTYPES[cfg.dtype]}
        if cfg.attn_implementation:
            kwargs["attn_implementation"] = cfg.attn_implementation
        model = AutoModelForCausalLM.from_pretrained(cfg.model_path, **kwargs)
        if cfg.lora is not None and cfg.lora.adapter_path:
            from peft import PeftModel

            model = PeftModel.from_pretrained(model, cfg.lora.adapter_path, is_trainable=cfg.trainable)
        return cls(model, tokenizer, cfg)

    @staticmethod
    def _wrap_lora(model: torch.nn.Module, lora: LoraSettings, trainable: bool) -> torch.nn.Module:
        from peft import get_peft_model

        return get_peft_model(model, lora_config(lora, trainable))

    def trainable_parameters(self) -> list[tuple[str, torch.nn.Parameter]]:
        """``(name, parameter)`` of every parameter the optimizer updates."""
        return [(n, p) for n, p in self.model.named_parameters() if p.requires_grad]

    # ------------------------------------------------------------------ prompts and sampling

    def format_prompt(self, user_text: str, system: str | None = None,
                      tools: Sequence[Mapping[str, Any]] | None = None) -> str:
        """The prompt text for one user message.

        ``system=None`` uses ``config.system_prompt``; pass ``""`` for none. With
        a chat template the system prompt is a system message and the assistant
        generation prompt is appended; without one it is ``system + "\\n\\n" + user``.
        ``tools``: the JSON schemas of the tools an agent may call (:func:`synco.core.prompts.build_prompt`).
        """
        cfg = self.config
        return build_prompt(self.tokenizer, user_text, cfg.system_prompt if system is None else system,
                            use_chat_template=cfg.use_chat_template, enable_thinking=cfg.enable_thinking, tools=tools)

    def generate(self, prompts: Sequence[str], n: int, params: SamplingParams | None = None,
                 seed: int | None = None) -> list[list[Completion]]:
        """``n`` sampled completions for each (already formatted) prompt, in prompt order.

        ``seed``: the rows are sampled in chunks of ``generation_batch_size``, each from its own seed
        (:mod:`synco.core.seeds`), so a Ray rollout worker sampling one chunk gets the same completions.
        """
        return self.generate_ids([self.encode_prompt(p) for p in prompts], n, params, seed)

    def generate_ids(self, ids: Sequence[Sequence[int]], n: int, params: SamplingParams | None = None,
                     seed: int | None = None) -> list[list[Completion]]:
        """:meth:`generate` on token ids: token-in/token-out, what an episode's later turns sample from (its ids
        so far, never re-tokenised). Same chunking and seeds as :meth:`generate`."""
        if any(not x for x in ids):
            raise ValueError("a prompt tokenized to zero tokens")
        params = params or self.config.sampling
        if seed is None:
            return self.generator.generate(ids, n, params)
        chunks = row_chunks(len(ids), n, self.config.generation_batch_size)
        results = [[g[0] for g in self.generator.generate([ids[p] for p in rows], 1, params, seed=chunk_seed(seed, j))]
                   for j, rows in enumerate(chunks)]
        return regroup(len(ids), chunks, results)

    def row_sampler(self) -> RowSampler | None:
        """Its sampler when that samples one row at a time (a served endpoint: episodes then advance each as its
        response arrives; :class:`~synco.rollout.episodes.RowSampler`), else None."""
        from synco.rollout.episodes import RowSampler

        return self.generator if isinstance(self.generator, RowSampler) else None

    # ------------------------------------------------------------------ training

    def _require_trainable(self) -> tuple[torch.optim.Optimizer, torch.optim.lr_scheduler.LambdaLR]:
        if self.optimizer is None or self.scheduler is None:
            raise RuntimeError("this policy was built with trainable=False")
        return self.optimizer, self.scheduler

    @staticmethod
    def _check_batch(batch: Sequence[Experience]) -> None:
        for i, e in enumerate(batch):
            if not e.prompt_ids:
                raise ValueError(f"experience {i}: empty prompt_ids (the first completion token needs a context)")
            if e.old_logprobs is not None and len(e.old_logprobs) != len(e.completion_ids):
                raise ValueError(
                    f"experience {i}: {len(e.old_logprobs)} old_logprobs for {len(e.completion_ids)} completion tokens"
                )
            if e.loss_mask is not None and (len(e.loss_mask) != len(e.completion_ids)
                                            or any(m not in (0, 1) for m in e.loss_mask)):
                raise ValueError(f"experience {i}: loss_mask must be {len(e.completion_ids)} values of 0 or 1 "
                                 f"(one per completion id), got {len(e.loss_mask)}")

    def set_token_constraint(self, constraint: Any) -> None:
        """Sample under ``constraint`` (a :class:`~synco.rollout.card_decoding.CardGrammar`; None: unconstrained).

        Sampling masks the disallowed tokens, and every log-prob (sampling's old log-probs, the
        GRPO update's, the KL reference's) is taken from the same masked distribution, replayed
        from each completion's tokens. Needs the default :class:`HFGenerator`.
        """
        if not isinstance(self.generator, HFGenerator):
            raise TypeError(f"{type(self.generator).__name__} cannot sample under a token constraint")
        self.generator.constraint = constraint
        self.token_constraint = constraint

    def _completion_logprobs(self, model: torch.nn.Module, rows: Sequence[Experience]) -> tuple[torch.Tensor, torch.Tensor]:
        """Log-probs ``(B, Tc)`` of each row's completion tokens, and the completion mask ``(B, Tc)``."""
        logits, targets, mask = self._completion_logits(model, rows)
        if self.token_constraint is not None:  # the masked distribution sampling used (see set_token_constraint)
            allowed = self.token_constraint.allowed_mask([e.completion_ids for e in rows], logits.shape[1],
                                                         logits.device, prompts=[e.prompt_ids for e in rows])
            logits = logits.masked_fill(~allowed, float("-inf"))
        logp = logits.gather(-1, targets.unsqueeze(-1)).squeeze(-1) - torch.logsumexp(logits, dim=-1)
        return logp, mask

    def _completion_logits(self, model: torch.nn.Module,
                           rows: Sequence[Experience]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """float32 logits ``(B, Tc, V)`` predicting each row's completion tokens, those tokens ``(B, Tc)`` and the mask.

        Rows are laid out as ``[pad.. prompt | completion ..pad]`` (prompts left-,
        completions right-padded) so every completion starts at the same column and
        only the last ``Tc + 1`` positions' logits are computed. Position ids follow
        the attention mask, as in generation, so the numbers match sampling.
        """
        dev = self.device
        p_len = max(len(e.prompt_ids) for e in rows)
        c_len = max(len(e.completion_ids) for e in rows)
        ids = torch.full((len(rows), p_len + c_len), self.pad_id, dtype=torch.long)
        att = torch.zeros_like(ids)
        mask = torch.zeros((len(rows), c_len), dtype=torch.float32)
        for i, e in enumerate(rows):
            p, c = len(e.prompt_ids), len(e.completion_ids)
            ids[i, p_len - p : p_len] = torch.tensor(e.prompt_ids, dtype=torch.long)
            ids[i, p_len : p_len + c] = torch.tensor(e.completion_ids, dtype=torch.long)
            att[i, p_len - p : p_len + c] = 1
            mask[i, :c] = 1.0 if e.loss_mask is None else torch.tensor(e.loss_mask, dtype=torch.float32)
        ids, att, mask = ids.to(dev), att.to(dev), mask.to(dev)
        pos = (att.cumsum(-1) - 1).clamp(min=0)
        kwargs: dict[str, Any] = {"input_ids": ids, "attention_mask": att, "position_ids": pos, "use_cache": False}
        if self._keep_arg:
            kwargs["logits_to_keep"] = c_len + 1
            logits = model(**kwargs).logits[:, :-1]
        else:
            logits = model(**kwargs).logits[:, p_len - 1 : p_len + c_len - 1]
        return logits.float(), ids[:, p_len:], mask

    def _reference_logprobs(self, rows: Sequence[Experience]) -> torch.Tensor:
        with torch.no_grad():
            if self.is_peft:
                with self.model.disable_adapter():
                    return self._completion_logprobs(self.model, rows)[0]
            assert self.ref_model is not None
            return self._completion_logprobs(self.ref_model, rows)[0]

    def compute_gradients(
        self, batch: Sequence[Experience], old_cache: dict[int, torch.Tensor] | None = None
    ) -> GradientStats:
        """Forward/backward the whole batch in micro-batches, *adding* the GRPO gradient to ``.grad``.

        The first half of :meth:`update`, exposed so gradients can be checked.
        Uses the global normalizer (completion tokens — or non-empty sequences for
        seq-mean-token-mean — of the whole batch); rows with advantage 0 are not
        forwarded when ``kl_coef == 0`` (they would contribute exactly 0). Old
        log-probs are the rows' own, else ``old_cache[row]``, else the current
        detached ones (returned in ``GradientStats.old_logprobs`` for reuse).

        With ``grpo.decoupled`` the rows' own log-probs are the *behaviour* policy's
        (the sampler's, possibly some steps stale) and the old (proximal) ones are
        always ``old_cache[row]`` or the current detached ones; a row without its
        own gets behaviour = proximal (importance weight 1).
        """
        g = self.config.grpo
        self._check_batch(batch)
        old_cache = {} if old_cache is None else old_cache
        n_tokens = sum(e.n_trainable for e in batch)
        n_seqs = sum(1 for e in batch if e.n_trainable)
        normalizer = float(n_tokens if g.loss_agg == "token-mean" else n_seqs)
        active = [i for i, e in enumerate(batch) if e.n_trainable and (g.kl_coef > 0 or e.advantage != 0.0)]
        total_loss, w_clip, w_ratio, w_kl, n_fwd_tok = 0.0, 0.0, 0.0, 0.0, 0
        w_is, w_is_sq, w_trunc, is_max = 0.0, 0.0, 0.0, 0.0  # decoupled: sums of n*mean, n*E[w^2], n*share; max
        new_old: dict[int, torch.Tensor] = {}
        self.model.train()
        if self.shard is None:
            micro, scale = [active[s : s + g.micro_batch_size] for s in range(0, len(active), g.micro_batch_size)], 1.0
        else:  # FSDP: this rank's share, as many micro-batches as every other rank; gradients are averaged
            micro = rank_micro_batches(active, g.micro_batch_size, self.shard.rank, self.shard.world)
            scale = float(self.shard.world)
        for idx in micro:
            padding = not idx  # an empty micro-batch still runs (FSDP's collectives), at weight 0
            idx = idx or active[:1]
            rows = [batch[i] for i in idx]
            logp, mask = self._completion_logprobs(self.model, rows)
            old = logp.detach().clone()
            behav = old.clone() if g.decoupled else None
            for r, i in enumerate(idx):
                e, c = batch[i], len(batch[i].completion_ids)
                if e.old_logprobs is not None and behav is None:
                    old[r, :c] = torch.tensor(e.old_logprobs, dtype=old.dtype, device=old.device)
                elif i in old_cache:
                    old[r, :c] = old_cache[i].to(old.device)
                elif not padding:
                    new_old[i] = old[r, :c].cpu()
                if behav is not None:  # the sampler's log-probs, else the proximal ones (weight 1)
                    behav[r, :c] = (old[r, :c] if e.old_logprobs is None
                                    else torch.tensor(e.old_logprobs, dtype=old.dtype, device=old.device))
            ref = self._reference_logprobs(rows) if g.kl_coef > 0 else None
            adv = torch.tensor([batch[i].advantage for i in idx], dtype=torch.float32, device=logp.device)
            loss, st = policy_loss(
                logp, old, adv, mask,
                clip_low=g.clip_low, clip_high=g.clip_high, loss_agg=g.loss_agg,
                normalizer=normalizer, ref_logprobs=ref, kl_coef=g.kl_coef,
                behaviour_logprobs=behav, is_cap=g.is_cap, is_mode=g.is_mode,
            )  # fmt: skip
            (loss * (0.0 if padding else scale * self._loss_scale())).backward()
            if padding:
                continue
            total_loss += float(loss.item())
            w_clip += st.clip_frac * st.n_tokens
            w_ratio += st.ratio_mean * st.n_tokens
            w_kl += st.kl * st.n_tokens
            n_fwd_tok += st.n_tokens
            if st.is_weight_mean is not None:
                assert st.is_weight_std is not None and st.is_weight_max is not None and st.is_truncated_frac is not None
                w_is += st.is_weight_mean * st.n_tokens
                w_is_sq += (st.is_weight_std**2 + st.is_weight_mean**2) * st.n_tokens
                w_trunc += st.is_truncated_frac * st.n_tokens
                is_max = max(is_max, st.is_weight_max)
        if self.shard is not None:
            total_loss, w_clip, w_ratio, w_kl, n_tok, w_is, w_is_sq, w_trunc = all_reduce_sum(
                [total_loss, w_clip, w_ratio, w_kl, n_fwd_tok, w_is, w_is_sq, w_trunc], self.shard)
            n_fwd_tok = int(n_tok)
            if g.decoupled:
                is_max = all_reduce_max([is_max], self.shard)[0]
        d = max(n_fwd_tok, 1)
        weights: dict[str, float] = {}
        if g.decoupled and n_fwd_tok:
            mean = w_is / d
            weights = {"is_weight_mean": mean, "is_weight_std": math.sqrt(max(w_is_sq / d - mean**2, 0.0)),
                       "is_weight_max": is_max, "is_truncated_frac": w_trunc / d}
        return GradientStats(
            loss=total_loss,
            n_forwarded=len(active),
            n_tokens_forwarded=n_fwd_tok,
            clip_frac=w_clip / d,
            ratio_mean=w_ratio / d if n_fwd_tok else 1.0,
            kl=w_kl / d,
            old_logprobs=new_old,
            **weights,
        )

    def update(self, batch: Sequence[Experience]) -> UpdateStats:
        """One GRPO optimizer step over the whole batch (``grpo.epochs`` steps when > 1).

        Never raises on bad numbers: a non-finite loss or gradient norm zeroes the
        gradients, skips the step and reports ``nan_skipped=True``.

        ``grpo.decoupled``: the rows' sampling log-probs are the behaviour policy's and the
        proximal ones are the weights' at the start of this update, computed once and reused
        across ``grpo.epochs`` (see :meth:`compute_gradients`); a sampler whose numbers are
        not the trainer's (its declared ``recompute_proximal``) keeps them as the behaviour log-probs; on-policy,
        the old log-probs are then recomputed here. Published to the samplers when it stepped (unless
        :meth:`sample_apart`: the pipeline publishes).
        """
        opt, _ = self._require_trainable()
        g = self.config.grpo
        if self.generator.recompute_proximal and not g.decoupled:
            from dataclasses import replace  # the sampler's numbers are not the trainer's: recompute

            batch = [replace(e, old_logprobs=None) for e in batch]
        n_tokens = sum(e.n_trainable for e in batch)
        skipped = 0 if g.kl_coef > 0 else sum(1 for e in batch if e.n_trainable and e.advantage == 0.0)
        stats = UpdateStats(
            loss=0.0, n_sequences=len(batch), n_tokens=n_tokens, n_skipped_zero_adv=skipped,
            grad_norm=0.0, clip_frac=0.0, kl=0.0, lr=float(opt.param_groups[0]["lr"]), nan_skipped=False,
        )  # fmt: skip
        old_cache: dict[int, torch.Tensor] = {}
        losses: list[GradientStats] = []
        for _ in range(g.epochs):
            opt.zero_grad(set_to_none=True)
            self.masters.zero_model_grads()
            gs = self.compute_gradients(batch, old_cache)
            old_cache.update(gs.old_logprobs)
            if gs.n_forwarded == 0:
                self.masters.zero_model_grads()
                break  # nothing gradient-bearing: no step, no scheduler tick
            losses.append(gs)
            if not self._optimizer_step(gs.loss, stats):
                break
        if losses:
            k = len(losses)
            stats.loss = sum(x.loss for x in losses) / k
            stats.clip_frac = sum(x.clip_frac for x in losses) / k
            stats.ratio_mean = sum(x.ratio_mean for x in losses) / k
            stats.kl = sum(x.kl for x in losses) / k
            weighed = [x for x in losses if x.is_weight_mean is not None]
            if weighed:  # decoupled: the same weights every epoch (proximal and behaviour stay fixed)
                j = len(weighed)
                stats.is_weight_mean = sum(x.is_weight_mean or 0.0 for x in weighed) / j
                stats.is_weight_std = sum(x.is_weight_std or 0.0 for x in weighed) / j
                stats.is_weight_max = max(x.is_weight_max or 0.0 for x in weighed)
                stats.is_truncated_frac = sum(x.is_truncated_frac or 0.0 for x in weighed) / j
        self._published_if(stats)
        return stats

    def _loss_scale(self) -> float:
        """What the loss is multiplied by before backward: the fp16 loss scaler's scale, else 1."""
        return 1.0 if self.scaler is None else self.scaler.scale

    def close(self) -> None:
        """Release what the sampling engine holds outside this process (a served adapter), if anything."""
        self.generator.close()

    @property
    def version(self) -> int:
        """Optimizer steps taken (restored on resume): the learner's version."""
        return self.step

    @property
    def policy_version(self) -> int:
        """The version of the weights the policy samples from: its sampler's, the last one published."""
        return self.generator.version

    def publish(self) -> int:
        """The one weight sync: the sampler samples the current weights as version :attr:`version` from now on
        (nothing to do when it already does)."""
        if self.generator.version != self.step:
            self.generator.load(self.model, self.step)
        return self.step

    def _published_if(self, stats: UpdateStats) -> None:
        """After an update: publish it when it stepped, unless the pipeline publishes (:meth:`sample_apart`)."""
        if stats.stepped and self.publishes_updates:
            self.publish()

    def sample_apart(self) -> None:
        """Asynchronous co-training: sample from weights only :meth:`publish` changes. An engine holding weights of
        its own (vLLM, a server) keeps sampling them; the in-process one becomes a copy
        (:class:`SnapshotSampler`), whose sampling draws from torch's random stream while the
        update runs on another thread: the update must draw none (no dropout), or a run would not repeat."""
        if isinstance(self.generator, HFGenerator) and not self.generator.holds_copy:
            drops = [name for name, m in self.model.named_modules() if isinstance(m, torch.nn.Dropout) and m.p > 0]
            if drops:
                raise ValueError(f"its model has dropout in training ({drops[0]}{' and more' if len(drops) > 1 else ''}"
                                 f"), which draws from torch's random stream beside sampling: set the model's dropout "
                                 f"(and lora.dropout) to 0")
            self.generator = self._snapshot()
        self.publishes_updates = False

    def _snapshot(self) -> Sampler:
        """The in-process sampler's copy, at the current version (a shared base's views share one)."""
        assert isinstance(self.generator, HFGenerator)
        return SnapshotSampler(self.generator, self.step, [name for name, _ in self.trainable_parameters()])

    def _sampler_view(self) -> Callable[[torch.nn.Module], AbstractContextManager[Any]] | None:
        """What the in-process sampler enters around sampling (a shared base's adapter; nothing here)."""
        return None

    def _optimizer_step(self, loss: float, stats: UpdateStats, lr: float | None = None) -> bool:
        """Clip and apply the gradients now in ``.grad`` (through the fp32 masters), tick the scheduler, sync the
        sampler; fills ``stats``. The one optimizer step of every update (GRPO and SFT).

        ``lr`` replaces the scheduled learning rate for this step only. Returns False, with the gradients
        zeroed and ``stats.nan_skipped`` set, when the loss or the gradient norm is not finite.
        """
        opt, sched = self._require_trainable()
        params = [p for group in opt.param_groups for p in group["params"]]  # the fp32 masters where there are any
        self.masters.grads_to_masters()
        if self.scaler is not None:
            self.scaler.unscale(params)
        norm_t = torch.nn.utils.clip_grad_norm_(params, self.config.grpo.max_grad_norm)
        norm = float(norm_t.full_tensor() if hasattr(norm_t, "full_tensor") else norm_t)  # a DTensor when sharded
        stats.grad_norm = norm
        if not (math.isfinite(loss) and math.isfinite(norm)):
            opt.zero_grad(set_to_none=True)
            self.masters.zero_model_grads()
            if self.scaler is not None and math.isfinite(loss):  # fp16 overflow at this scale: back off, not an alarm
                self.scaler.update(finite=False)
                stats.overflow_skipped = True
            else:
                stats.nan_skipped = True
            return False
        if self.scaler is not None:
            self.scaler.update(finite=True)
        if lr is not None:
            for group in opt.param_groups:  # the scheduler's step below sets its own rate again
                group["lr"] = lr
        stats.lr = float(opt.param_groups[0]["lr"])
        opt.step()
        self.masters.masters_to_model()
        sched.step()
        self.step += 1
        stats.stepped = True
        opt.zero_grad(set_to_none=True)
        return True

    def encode_sft(self, example: SFTExample) -> Experience:
        """The token rows of one SFT example: the prompt as ``generate`` encodes it (the ids sampling
        conditioned on), then the sampled ``completion_ids`` as they are, or, for an example without ids
        (a reference answer), the completion text's tokens + EOS. An episode's ``completion_mask`` becomes the
        row's loss mask (the environment's ids are context, not targets)."""
        if example.completion_ids is not None:
            completion = list(example.completion_ids)
        else:
            completion = list(self.tokenizer(example.completion, add_special_tokens=False)["input_ids"])
            completion.append(self.eos_ids[0])
        mask = None if example.completion_mask is None else list(example.completion_mask)
        return Experience(self.encode_prompt(example.prompt), completion, 0.0, loss_mask=mask)

    def sft_update(self, batch: Sequence[SFTExample], lr: float | None = None) -> UpdateStats:
        """One supervised optimizer step: the completion-only loss (:func:`~synco.learn.sft.completion_loss`).

        Each example trains its sampled ids when it carries them (:meth:`encode_sft`). The loss is the mean
        over every trained completion token of the batch (EOS included; an episode's environment ids are
        neither trained nor counted), computed in micro-batches
        of ``grpo.micro_batch_size`` rows against that global token count, then the same optimizer, scheduler
        and fp32-master path as :meth:`update` (``lr`` replaces the scheduled rate for this step). Never raises
        on bad numbers: a non-finite loss or gradient norm skips the step (``nan_skipped``).
        """
        opt, _ = self._require_trainable()
        rows = [self.encode_sft(e) for e in batch]
        self._check_batch(rows)
        n_tokens = sum(r.n_trainable for r in rows)
        stats = UpdateStats(loss=0.0, n_sequences=len(rows), n_tokens=n_tokens, n_skipped_zero_adv=0, grad_norm=0.0,
                            clip_frac=0.0, kl=0.0, lr=float(opt.param_groups[0]["lr"]), nan_skipped=False)
        if not rows:
            return stats
        opt.zero_grad(set_to_none=True)
        self.masters.zero_model_grads()
        self.model.train()
        size = self.config.grpo.micro_batch_size
        if self.shard is None:
            micro, scale = [list(range(s, min(s + size, len(rows)))) for s in range(0, len(rows), size)], 1.0
        else:  # FSDP: this rank's share, as in compute_gradients (empty micro-batches run at weight 0)
            micro = rank_micro_batches(range(len(rows)), size, self.shard.rank, self.shard.world)
            scale = float(self.shard.world)
        for idx in micro:
            logits, targets, mask = self._completion_logits(self.model, [rows[i] for i in idx or [0]])
            loss = completion_loss(logits, targets.masked_fill(mask == 0, IGNORE), normalizer=n_tokens)
            (loss * (scale * self._loss_scale() if idx else 0.0)).backward()
            stats.loss += float(loss.item()) if idx else 0.0
        if self.shard is not None:
            stats.loss = all_reduce_sum([stats.loss], self.shard)[0]
        self._optimizer_step(stats.loss, stats, lr)
        self._published_if(stats)
        return stats

    # ------------------------------------------------------------------ persistence

    def save(self, path: str | Path) -> None:
        """``save_pretrained`` of the model (only the adapter under LoRA) and the tokenizer."""
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        self.model.save_pretrained(path)
        self.tokenizer.save_pretrained(path)

    def merge_and_save(self, path: str | Path) -> None:
        """Save a full HF model: LoRA adapters merged into a copy of the base (plain ``save`` without LoRA)."""
        if not self.is_peft:
            self.save(path)
            return
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        merged = copy.deepcopy(self.model).merge_and_unload()
        merged.save_pretrained(path)
        self.tokenizer.save_pretrained(path)
        del merged

    def save_state(self, path: str | Path) -> None:
        """Write optimizer, scheduler, step counter and fp32 master weights to ``path/learner_state.pt``.

        The model's own weights go through ``save``; with low-precision parameters
        those are the masters rounded, so the masters travel here for an exact resume.
        """
        opt, sched = self._require_trainable()
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        torch.save(
            {"optimizer": opt.state_dict(), "scheduler": sched.state_dict(), "step": self.step,
             "masters": self.masters.state_dict(),
             "loss_scaler": None if self.scaler is None else self.scaler.state_dict()},
            path / STATE_FILE,
        )

    def load_state(self, path: str | Path) -> None:
        """Restore what ``save_state`` wrote (the model weights must already be the saved ones)."""
        opt, sched = self._require_trainable()
        state = torch.load(Path(path) / STATE_FILE, map_location=self.device, weights_only=True)
        opt.load_state_dict(state["optimizer"])
        sched.load_state_dict(state["scheduler"])
        self.step = int(state["step"])
        self.publish()
        if self.scaler is not None and state.get("loss_scaler"):
            self.scaler.load_state_dict(state["loss_scaler"])
        if self.masters:
            if "masters" not in state or not state["masters"]:
                raise ValueError(f"{Path(path) / STATE_FILE} has no fp32 master weights but this policy trains "
                                 f"{self.config.dtype} parameters through them (saved with another dtype, or by an older synco)")
            self.masters.load_state_dict(state["masters"])
