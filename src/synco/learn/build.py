"""One learner from its config: the model path resolved (built-in warm starts, model presets) and the
policy built, with a LoRA checkpoint folder loaded on top of its configured base."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from synco.core.engines import engine_factory
from synco.core.policy import PolicyConfig
from synco.domains.registry import BUILTIN_MODEL_PREFIX, builtin_model, resolve
from synco.learn.hf_policy import HFPolicy


def resolve_model_path(path: str) -> str:
    """``builtin:<domain>/<role>`` -> that role's folder in the domain's warm start (``WarmStart.folder``, the shipped
    checkpoint or one pretrained on first use); a model preset (``smollm2``) -> its cached HF folder (converted on
    first use, see ``synco.learn.models``); anything else unchanged."""
    if path.startswith(BUILTIN_MODEL_PREFIX):
        warm_start, role = builtin_model(path)
        return str(Path(resolve(warm_start.folder)()) / role)
    from synco.learn.models import resolve_model

    return resolve_model(path)


def build_policy(cfg: PolicyConfig, model_path: str | None = None, role: str = "agent",
                 frozen: bool | None = None) -> Any:
    """One learner from its config; ``model_path`` (a checkpoint folder) replaces the config's model.

    A LoRA checkpoint folder holds the adapter only (``adapter_config.json``):
    the base still comes from the config and the adapter is loaded on top.

    The engine is chosen here, once (:mod:`synco.core.engines`: ``hf`` and ``vllm`` are the learner's own, any other
    builds the learner's sampler). ``rollout_engine: served``: a frozen role (``frozen``, default ``not
    cfg.trainable``) on a chat endpoint is a :class:`~synco.rollout.served.ServedPolicy` with no local weights;
    otherwise the learner keeps the weights and samples through a :class:`~synco.rollout.served.ServedGenerator`.
    ``role`` names the config section in messages (``reasoner.served.base_url``).
    """
    frozen = not cfg.trainable if frozen is None else frozen
    if cfg.rollout_engine == "served" and frozen and cfg.served is not None and cfg.served.endpoint == "chat":
        from synco.rollout.served import ServedPolicy

        return ServedPolicy(cfg, role)
    if model_path is not None and cfg.lora is not None and (Path(model_path) / "adapter_config.json").is_file():
        cfg = cfg.model_copy(update={"lora": cfg.lora.model_copy(update={"adapter_path": model_path})})
        model_path = None
    policy = HFPolicy.from_config(cfg.model_copy(update={"model_path": model_path or resolve_model_path(cfg.model_path)}))
    factory = engine_factory(cfg.rollout_engine) or _BUILT_HERE.get(cfg.rollout_engine)
    if factory is not None:  # a sampler apart from the learner's own (hf, vllm): a server, a registered engine
        policy.generator = factory(policy, role, not frozen)
    return policy


def _served_sampler(policy: HFPolicy, role: str, trains: bool) -> Any:
    from synco.rollout.served import ServedGenerator

    return ServedGenerator.for_policy(policy, role, trains)


_BUILT_HERE = {"served": _served_sampler}
"""The built-in engines whose sampler is built beside the learner (``hf`` and ``vllm`` are the learner's own)."""
