"""Rollout engines other than ``transformers`` generate: the vLLM engine (``rollout_engine: vllm``).

* :mod:`synco.core.rollout_config`: :class:`VLLMSettings`, the ``vllm:`` section of a
  :class:`~synco.core.policy.PolicyConfig` (torch-free, vLLM-free).
* :mod:`synco.rollout.vllm_engine`: :class:`VLLMEngine` (one ``vllm.LLM`` in this
  process, shared by the LoRA agents of one base) and :class:`VLLMGenerator`, the
  :class:`~synco.core.policy.Generator` an :class:`~synco.learn.hf_policy.HFPolicy` samples
  through when its config says ``rollout_engine: vllm``.

Importing this package loads neither torch nor vLLM; vLLM is imported when an
engine is built, and a missing vLLM fails then with how to install it.
"""

from __future__ import annotations

from typing import Any

from synco.core.rollout_config import RolloutEngine, VLLMSettings

__all__ = ["RolloutEngine", "VLLMSettings", "VLLMEngine", "VLLMGenerator", "VLLMUnavailable", "import_vllm"]

_ENGINE_NAMES = frozenset({"VLLMEngine", "VLLMGenerator", "VLLMUnavailable", "import_vllm"})


def __getattr__(name: str) -> Any:
    """The engine names, from :mod:`synco.rollout.vllm_engine`, loaded only when asked for."""
    if name in _ENGINE_NAMES:
        from synco.rollout import vllm_engine

        return getattr(vllm_engine, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
