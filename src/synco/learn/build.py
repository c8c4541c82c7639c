"""One learner from its config: the model path resolved (built-in warm starts, model presets) and the
policy built, with a LoRA checkpoint folder loaded on top of its configured base."""

from __future__ import annotations

from pathlib import Path

from synco.core.policy import PolicyConfig
from synco.learn.hf_policy import HFPolicy


def resolve_model_path(path: str) -> str:
    """``builtin:arith/<role>`` / ``builtin:tools/<role>`` -> the shipped warm-start checkpoint; a model preset (``smollm2``) -> its
    cached HF folder (converted on first use, see ``synco.learn.models``); anything else unchanged."""
    if path.startswith("builtin:arith/"):
        from synco.learn.pretrain import load_arith_warm_start

        return str(load_arith_warm_start() / path.split("/", 1)[1])
    if path.startswith("builtin:tools/"):
        from synco.learn.pretrain_tools import load_tools_warm_start

        return str(load_tools_warm_start() / path.split("/", 1)[1])
    from synco.learn.models import resolve_model

    return resolve_model(path)


def build_policy(cfg: PolicyConfig, model_path: str | None = None) -> HFPolicy:
    """One learner from its config; ``model_path`` (a checkpoint folder) replaces the config's model.

    A LoRA checkpoint folder holds the adapter only (``adapter_config.json``):
    the base still comes from the config and the adapter is loaded on top.
    """
    if model_path is not None and cfg.lora is not None and (Path(model_path) / "adapter_config.json").is_file():
        cfg = cfg.model_copy(update={"lora": cfg.lora.model_copy(update={"adapter_path": model_path})})
        model_path = None
    return HFPolicy.from_config(cfg.model_copy(update={"model_path": model_path or resolve_model_path(cfg.model_path)}))
