"""A sampling engine on its own copy of a learner's weights: what asynchronous co-training samples from.

:class:`~synco.learn.hf_policy.HFGenerator` samples with the training model itself, so sampling and an update
cannot run at the same time. :class:`SnapshotGenerator` holds a copy that an optimizer step does not reach
(``sync_weights`` is a no-op); the pipeline (:mod:`synco.cotrain.pipeline`) copies the learner's weights into it
with :func:`publish` once a step is finished, and the policy then reports the snapshot's version as the version
its samples come from. Memory: one more copy of the weights (LoRA: of the base as well).
"""

from __future__ import annotations

import copy
from typing import Any

import torch

from synco.learn.hf_policy import HFGenerator, HFPolicy


class SnapshotGenerator(HFGenerator):
    """An :class:`HFGenerator` on a frozen copy of the learner's weights, refreshed only by :meth:`publish`."""

    def __init__(self, base: HFGenerator, version: int) -> None:
        model = copy.deepcopy(base.model).eval()
        for p in model.parameters():
            p.requires_grad_(False)
        super().__init__(model, base.tokenizer, base.eos_ids, base.pad_id, batch_size=base.batch_size,
                         keep_logprobs=base.keep_logprobs, max_positions=base.max_positions)
        self.constraint = base.constraint
        self.weights_version = version

    def sync_weights(self, model: torch.nn.Module) -> None:
        """An optimizer step does not reach the engine: it samples the published weights until the next publish."""

    def publish(self, model: torch.nn.Module, version: int) -> None:
        """Copy ``model``'s weights (and buffers) in; the engine now samples version ``version``."""
        with torch.no_grad():
            self.model.load_state_dict(model.state_dict())
        self.weights_version = version


def snapshot_problem(policy: Any) -> str | None:
    """Why ``policy`` cannot sample from a snapshot beside its updates, or None when it can.

    It must be an in-process ``transformers`` learner on the default engine, and its update must draw no random
    numbers: torch's CPU random stream is one per process, and sampling (on the main thread) and the update (on the
    learner's thread) would otherwise interleave their draws by timing, so a run would not repeat.
    """
    if not isinstance(policy, HFPolicy) or type(policy.generator) is not HFGenerator:
        engine = type(getattr(policy, "generator", policy)).__name__
        return f"its sampling engine ({engine}) is not the in-process transformers one (rollout_engine: hf)"
    drops = [name for name, m in policy.model.named_modules() if isinstance(m, torch.nn.Dropout) and m.p > 0]
    if drops:
        return (f"its model has dropout in training ({drops[0]}{' and more' if len(drops) > 1 else ''}), which draws "
                f"from torch's random stream beside sampling: set the model's dropout (and lora.dropout) to 0")
    return None


def use_snapshot(policy: HFPolicy) -> SnapshotGenerator:
    """Make ``policy`` sample from a snapshot of its current weights (its version: the optimizer steps so far)."""
    gen = SnapshotGenerator(policy.generator, policy.step)  # type: ignore[arg-type]
    policy.generator = gen
    return gen


def publish(policy: Any) -> None:
    """Copy a learner's weights into its snapshot engine, if it samples from one (a frozen agent has none)."""
    gen = getattr(policy, "generator", None)
    if isinstance(gen, SnapshotGenerator):
        gen.publish(policy.model, policy.step)


__all__ = ["SnapshotGenerator", "publish", "snapshot_problem", "use_snapshot"]
