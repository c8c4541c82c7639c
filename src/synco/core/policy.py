"""The learner's contract: the :class:`Policy` protocol, its settings and what an update reports.

The Synthesizer and the Reasoner are two instances of one learner. The
co-training engine only sees the :class:`Policy` protocol:

* ``format_prompt`` turns a user message (and optional system prompt) into the
  model's prompt text, through its chat template when it has one;
* ``generate`` samples ``n`` completions per prompt, with token ids and
  per-token log-probs;
* ``update`` takes one GRPO optimizer step on a batch of :class:`Experience`;
* ``sft_update`` takes one supervised optimizer step (completion-only loss) on a
  batch of :class:`~synco.core.sampling.SFTExample` (the ``rounds`` / ``rft`` protocols);
* ``save`` / ``save_state`` / ``load_state`` persist weights and optimizer.

This module is torch-free (configs load, and runs are planned, without it).
The implementation on ``transformers`` is :class:`synco.learn.hf_policy.HFPolicy`;
generation goes through a :class:`Sampler` (the default
:class:`~synco.learn.hf_policy.HFGenerator` calls ``model.generate``), so a faster
engine such as vLLM plugs in without changing the caller. A trained policy is also a
:class:`Learner`, whose ``publish`` is the one weight sync to its samplers. The records a
policy samples and trains on live in :mod:`synco.core.sampling`, the engines'
settings in :mod:`synco.core.rollout_config` and :mod:`synco.core.served`: import
them from there (this module names no implementation and re-exports nothing).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field, field_validator

from synco.core.sampling import Completion, Experience, SamplingParams, SFTExample
from synco.core.rollout_config import RolloutEngine, VLLMSettings
from synco.core.served import ServedSettings

if TYPE_CHECKING:
    import torch


GENERATION_BATCH_SIZE = 64
"""Rows per generate call (``PolicyConfig.generation_batch_size``) and episodes per job unless a run says otherwise:
the one default."""

DType = Literal["float32", "bfloat16", "float16"]
LossAgg = Literal["token-mean", "seq-mean-token-mean"]
ISMode = Literal["truncate", "mask"]
"""How the decoupled objective bounds an importance weight above ``grpo.is_cap``: cut to the cap, or the token dropped."""
STATE_FILE = "learner_state.pt"
"""File name ``save_state`` writes inside its directory."""


# --------------------------------------------------------------------------- records


@dataclass
class UpdateStats:
    """What one ``update()`` did.

    ``n_tokens`` is the completion-token count of the whole batch (the token-mean
    normalizer); ``n_skipped_zero_adv`` rows had advantage 0 and no KL term, so
    they were not even forwarded. ``stepped`` is False when no optimizer step was
    taken (nothing gradient-bearing, or a non-finite loss/gradient, in which case
    ``nan_skipped`` is True; or, in float16 with loss scaling, gradients that overflowed
    at the current scale: ``overflow_skipped``, the scale is halved and training goes on). ``clip_frac``, ``ratio_mean`` and ``kl`` are
    token-weighted means over the rows that were forwarded.

    With ``grpo.decoupled`` (the off-policy correction), the ``is_*`` fields describe
    the importance weights ``pi_prox / pi_behav`` over the forwarded tokens, before
    truncation: token-weighted mean, population std, max, and ``is_truncated_frac``,
    the share above ``grpo.is_cap`` (cut to it, or dropped with ``grpo.is_mode: mask``). They are None when not decoupled.
    """

    loss: float
    n_sequences: int
    n_tokens: int
    n_skipped_zero_adv: int
    grad_norm: float
    clip_frac: float
    kl: float
    lr: float
    nan_skipped: bool
    stepped: bool = False
    ratio_mean: float = 1.0
    overflow_skipped: bool = False  # float16 only: gradients overflowed at the loss scale, which was halved
    is_weight_mean: float | None = None
    is_weight_std: float | None = None
    is_weight_max: float | None = None
    is_truncated_frac: float | None = None


# --------------------------------------------------------------------------- config


class GRPOConfig(BaseModel):
    """Optimisation settings of one GRPO learner (the Synthesizer and the Reasoner each have one)."""

    model_config = ConfigDict(extra="forbid")

    lr: float = Field(1e-6, gt=0, description="AdamW peak learning rate (1e-6 as in the paper for real models; tiny models need ~1e-3).")
    weight_decay: float = Field(0.0, ge=0, description="AdamW decoupled weight decay.")
    warmup_steps: int = Field(0, ge=0, description="Optimizer steps of linear LR warm-up from lr/warmup_steps to lr; constant afterwards.")
    betas: tuple[float, float] = Field((0.9, 0.999), description="AdamW (beta1, beta2).")
    adam_eps: float = Field(1e-8, gt=0, description="AdamW epsilon.")
    max_grad_norm: float = Field(1.0, gt=0, description="Global gradient-norm clip applied before every optimizer step.")
    clip_low: float = Field(0.2, ge=0, description="Lower ratio clip: the ratio is clipped below at 1 - clip_low.")
    clip_high: float = Field(0.28, ge=0, description="Upper ratio clip: clipped above at 1 + clip_high (DAPO clip-higher).")
    loss_agg: LossAgg = Field("token-mean", description="'token-mean' (every completion token of the batch weighs the same) or 'seq-mean-token-mean' (per-sequence mean, then mean over sequences).")
    kl_coef: float = Field(0.0, ge=0, description="Weight of the k3 KL penalty to the frozen initial policy; 0 keeps no reference model at all.")
    scale_adv_by_std: bool = Field(True, description="GRPO advantages (r-mean)/std when True; Dr. GRPO (r-mean) when False.")
    micro_batch_size: int = Field(16, ge=1, description="Sequences per forward/backward pass; gradients are accumulated, so it changes memory, not the result.")
    epochs: int = Field(1, ge=1, description="Optimizer steps one update() takes over the same batch; old log-probs stay fixed from before the first, so clipping matters from the second on.")
    decoupled: bool = Field(False, description="Off-policy correction (AReaL's decoupled PPO) for attempts sampled by weights some optimizer steps older than the learner's: behaviour log-probs are the sampling ones (each Experience's old_logprobs, kept even from an engine whose numbers are otherwise recomputed), the proximal policy is the learner at the update's start (recomputed, the clip's reference), and each token's surrogate is weighted by pi_prox / pi_behav bounded at is_cap (is_mode: truncated, or the token masked). Rows without sampling log-probs get weight 1. False: the plain on-policy loss.")
    is_cap: float = Field(2.0, ge=1.0, description="decoupled only: the bound on the importance weight pi_prox / pi_behav (>= 1), limiting the variance a stale, unlikely token adds; what happens above it is is_mode.")
    is_mode: ISMode = Field("truncate", description="decoupled only: a token whose importance weight is above is_cap is truncated (weight is_cap: truncated importance sampling, every token trains) or masked (weight 0, the token dropped, as AReaL does). Both are biased where the cap binds.")



class LoraSettings(BaseModel):
    """LoRA adapters via ``peft``: only the adapter weights train; the base stays frozen."""

    model_config = ConfigDict(extra="forbid")

    rank: int = Field(16, ge=1, description="Adapter rank r.")
    alpha: float = Field(32.0, gt=0, description="LoRA scaling numerator (scale = alpha / rank).")
    dropout: float = Field(0.0, ge=0, lt=1, description="Dropout on the adapter input (0 keeps sampling and training log-probs identical).")
    target_modules: list[str] | str = Field("all-linear", description="Module names to adapt, or 'all-linear' (every linear layer except the output head).")
    adapter_path: str | None = Field(None, description="Load (and keep training) a previously saved adapter from this directory instead of fresh ones.")


class PolicyConfig(BaseModel):
    """Everything needed to build one learner (Synthesizer or Reasoner)."""

    model_config = ConfigDict(extra="forbid")

    model_path: str = Field(description="HF hub id or local directory of the causal LM and its tokenizer.")
    dtype: DType = Field("float32", description="Parameter dtype when loading; bfloat16/float16 halve memory (compute and generation run in that dtype; see fp32_master_weights for the update).")
    fp16_loss_scaling: bool = Field(True, description="float16 parameters only: dynamic loss scaling (synco.learn.precision.LossScaler), so small gradients do not flush to zero in float16's narrow range; a step whose gradients overflow is skipped and the scale halved. bfloat16 needs none.")
    fp32_master_weights: bool = Field(True, description="Train bfloat16/float16 parameters through fp32 master copies and fp32 optimizer state, rounded back into the model after every step, so small updates (lr 1e-6) are not lost to rounding. False: AdamW steps the low-precision weights directly (most small updates vanish).")
    device: str = Field("auto", pattern=r"^(cpu|auto|cuda(:[0-9]+)?)$", description="'cpu', 'cuda' (the current GPU), 'cuda:N' (give each agent its own GPU, e.g. the synthesizer on cuda:0 and the reasoner on cuda:1), or 'auto' (cuda when available, else cpu).")
    grpo: GRPOConfig = Field(default_factory=GRPOConfig, description="Optimiser and loss settings.")
    sampling: SamplingParams = Field(default_factory=SamplingParams, description="Default sampling parameters of generate().")
    use_chat_template: bool | None = Field(None, description="None: use the tokenizer's chat template when it has one; True: require it; False: plain text prompts.")
    system_prompt: str | None = Field(None, description="Default system prompt of format_prompt() (sent as a system message with a chat template, else prepended).")
    enable_thinking: bool | None = Field(None, description="Passed to apply_chat_template as enable_thinking when set (Qwen3-style templates).")
    lora: LoraSettings | None = Field(None, description="Train LoRA adapters instead of all weights.")
    trainable: bool = Field(True, description="False: a frozen, generation-only policy (update() raises).")
    max_prompt_tokens: int | None = Field(None, ge=1, description="Prompts longer than this keep only their last max_prompt_tokens tokens.")
    add_bos: bool | None = Field(None, description="Prepend the BOS token to prompts. None: when the tokenizer has one and the prompt does not already start with it. Prompts are tokenized without special tokens, so BOS is never doubled.")
    gradient_checkpointing: bool = Field(False, description="Recompute activations in backward to save memory.")
    generation_batch_size: int = Field(GENERATION_BATCH_SIZE, ge=1, description="Rows (prompt x sample) per model.generate call; bounds the memory of the stored logits.")
    attn_implementation: str | None = Field(None, description="Passed to from_pretrained (e.g. 'sdpa', 'eager', 'flash_attention_2'); None keeps the default.")
    seed: int | None = Field(None, description="torch.manual_seed at construction when set (sampling uses the global torch RNG).")
    rollout_engine: RolloutEngine = Field("hf", description="Sampling engine of generate(): 'hf' (transformers generate on the training model), 'vllm' (a vLLM engine in this process, weights or LoRA adapters synced after every optimizer step; needs `pip install synco[vllm]`, see synco.rollout) or 'served' (an OpenAI-compatible server, the `served` section: a trained agent's LoRA adapter is loaded into the server after every optimizer step; a frozen role may be any provider's chat model; see synco.rollout.served); or an engine registered with synco.core.engines.register_engine.")
    served: ServedSettings | None = Field(None, description="The endpoint of rollout_engine: served (base_url, model, api_key_env, timeout_s, max_retries, max_concurrency, endpoint).")
    vllm: VLLMSettings = Field(default_factory=VLLMSettings, description="Settings of the vLLM engine (used only with rollout_engine: vllm).")

    @field_validator("rollout_engine")
    @classmethod
    def _known_engine(cls, name: str) -> str:
        from synco.core.engines import engine_names

        if name not in engine_names():
            raise ValueError(f"unknown rollout_engine {name!r}; choose one of {', '.join(engine_names())}")
        return name



# --------------------------------------------------------------------------- protocols


@runtime_checkable
class Sampler(Protocol):
    """A sampling engine for a learner's weights: it samples, and it loads the weights of a given version.

    Every engine is one: ``transformers`` on the training model (:class:`~synco.learn.hf_policy.HFGenerator`), a
    copy of it (:class:`~synco.learn.hf_policy.SnapshotSampler`), vLLM in process
    (:class:`~synco.rollout.vllm_engine.VLLMGenerator`), a served endpoint
    (:class:`~synco.rollout.served.ServedGenerator`), Ray's rollout workers (each holds one of the above). The
    learner changes a sampler's weights only through :meth:`load`, called by its :meth:`Learner.publish`.
    """

    recompute_proximal: bool
    """Declared by the engine: its log-probs are not the trainer's numerics (vLLM, a server), so the learner
    recomputes the proximal (old) log-probs at the start of an update; the sampler's own stay the behaviour
    log-probs (``grpo.decoupled``). False: the sampler's log-probs are the trainer's and serve as both."""

    version: int
    """The learner version of the weights it samples with (0 before any load): stamped on every
    :class:`~synco.core.sampling.Completion` it returns."""

    def generate(self, prompt_ids: Sequence[Sequence[int]], n: int, params: SamplingParams,
                 seed: int | None = None) -> list[list[Completion]]:
        """``n`` completions for each tokenized prompt, in prompt order, each stamped with :attr:`version`.

        ``seed``: sample this call from that seed alone, leaving every global RNG as it was
        (None: the engine's own random stream).
        """
        ...

    def load(self, model: torch.nn.Module, version: int) -> None:
        """Sample ``model``'s weights, as version ``version``, from the next :meth:`generate` on. The learner calls it
        between updates only; an engine with weights of its own copies them now."""
        ...

    def close(self) -> None:
        """Release what the engine holds outside this process (a served adapter); nothing for most."""
        ...


@runtime_checkable
class Learner(Protocol):
    """What trains one agent: updates, its version, the export of its weights, and the one weight sync.

    ``publish`` is the only way weights reach the learner's samplers: after every update in a synchronous run
    (the learner does it itself), at the pipeline's publish point once :meth:`sample_apart` was called
    (asynchronous co-training, :mod:`synco.cotrain.pipeline`).
    """

    @property
    def version(self) -> int:
        """Optimizer steps taken so far (restored on resume): the version :meth:`publish` gives its samplers."""
        ...

    def update(self, batch: Sequence[Experience]) -> UpdateStats: ...

    def sft_update(self, batch: Sequence[SFTExample], lr: float | None = None) -> UpdateStats: ...

    def trainable_parameters(self) -> list[tuple[str, torch.nn.Parameter]]:
        """The export: ``(name, tensor)`` of every weight an update changes (the adapters under LoRA), all a
        sampler's copy of the frozen rest needs."""
        ...

    def publish(self) -> int:
        """Load the current weights into every sampler as version :attr:`version`; returns it."""
        ...

    def sample_apart(self) -> None:
        """From now on the samplers keep their weights through updates until :meth:`publish` (asynchronous
        co-training: sampling overlaps the update). A ``ValueError`` saying why when this learner cannot."""
        ...


@runtime_checkable
class Policy(Protocol):
    """What the co-training engine needs from a learner."""

    def format_prompt(self, user_text: str, system: str | None = None,
                      tools: Sequence[Mapping[str, Any]] | None = None) -> str:
        """The prompt text of one user message (``tools``: JSON schemas of callable tools, for an agent)."""
        ...

    def generate(self, prompts: Sequence[str], n: int, params: SamplingParams | None = None,
                 seed: int | None = None) -> list[list[Completion]]:
        """``n`` completions per formatted prompt. With ``seed`` the rows are sampled in chunks of
        ``generation_batch_size``, chunk ``j`` from ``chunk_seed(seed, j)`` (:mod:`synco.core.seeds`):
        the same completions in any process, whoever samples which chunk."""
        ...

    def update(self, batch: Sequence[Experience]) -> UpdateStats: ...

    @property
    def policy_version(self) -> int:
        """The version of the weights :meth:`generate` samples from (its sampler's; 0 for a frozen policy): the
        learner's last published version."""
        ...

    def sft_update(self, batch: Sequence[SFTExample], lr: float | None = None) -> UpdateStats: ...

    def save(self, path: str | Path) -> None: ...

    def save_state(self, path: str | Path) -> None: ...

    def load_state(self, path: str | Path) -> None: ...

    def trainable_parameters(self) -> list[tuple[str, torch.nn.Parameter]]: ...


def generate_seeded(policy: Policy, prompts: Sequence[str], n: int, params: SamplingParams | None,
                    seed: int | None) -> list[list[Completion]]:
    """``policy.generate``, passing ``seed=`` only when there is one (a policy written before per-request
    seeds, e.g. a test double, keeps working while ``seed_per_request`` is off)."""
    if seed is None:
        return policy.generate(prompts, n, params)
    return policy.generate(prompts, n, params, seed=seed)
