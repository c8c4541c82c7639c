"""The ``vllm:`` settings of one agent (``PolicyConfig.vllm``, used when ``rollout_engine: vllm``). Torch-free.
(``rollout_engine: served`` reads ``PolicyConfig.served``: :class:`synco.core.served.ServedSettings`.)"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

RolloutEngine = str
"""A name in :func:`synco.core.engines.engine_names`: ``hf``, ``vllm``, ``served`` or one registered from outside."""


class VLLMSettings(BaseModel):
    """How the vLLM rollout engine of one agent is built (:mod:`synco.rollout.vllm_engine`)."""

    model_config = ConfigDict(extra="forbid")

    model_path: str | None = Field(None, description="Folder (or hub id) vLLM loads; None: the folder the policy's model was loaded from, else the agent's model_path. Under LoRA this is the base; the adapters travel separately.")
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = Field("auto", description="Engine dtype; 'auto' = the agent's dtype. Old log-probs are recomputed by the trainer, so a lower engine precision changes sampling, not the GRPO ratio.")
    gpu_memory_utilization: float = Field(0.3, gt=0, le=1, description="Share of GPU memory vLLM may take (weights + KV cache); the training model and its optimizer need the rest of the same GPU. On the CPU build it is the share of host RAM reserved, unless kv_cache_memory_gb is set.")
    kv_cache_memory_gb: float | None = Field(None, gt=0, description="Fixed KV-cache size in GiB (vLLM's kv_cache_memory_bytes), overriding the gpu_memory_utilization sizing; small values suit tests and the CPU build.")
    max_model_len: int | None = Field(None, ge=1, description="Context length (prompt + completion) of the engine; None: the model's. A request's max_new_tokens is capped to fit.")
    enforce_eager: bool = Field(False, description="No CUDA graphs / torch.compile: slower decoding, faster start and less memory (use it on CPU and in tests).")
    sleep_between_steps: bool = Field(False, description="After every generate, put the engine to sleep (vLLM sleep mode: weights offloaded, KV cache freed) so training gets the GPU memory back; woken before the next generate. GPU only: building fails where vLLM has no sleep mode (its CPU build).")
    sleep_level: Literal[1, 2] = Field(1, description="vLLM sleep level: 1 offloads the weights to host RAM; 2 discards them (the full weights are pushed again on wake-up; refused under LoRA, whose base would be lost).")
    max_loras: int = Field(2, ge=1, description="Adapters one engine holds at once (LoRA agents on one base share one engine: 2 covers shared_base).")
    recompute_old_logprobs: bool = Field(True, description="GRPO's old log-probs are recomputed by the training model at the start of each update (as verl does), because vLLM's numerics differ from the trainer's; vLLM's own sampler log-probs stay in Completion.logprobs. False: use vLLM's as the old log-probs.")
    engine_kwargs: dict[str, Any] = Field(default_factory=dict, description="Further keyword arguments to vllm.LLM (e.g. max_num_seqs, enable_prefix_caching); they override synco's.")
