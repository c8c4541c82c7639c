"""Sampling apart from the learner's weights: what asynchronous co-training samples from.

:class:`~synco.learn.hf_policy.HFGenerator` samples with the training model itself, so sampling and an update
cannot run at the same time. :class:`SnapshotGenerator` holds a copy that an optimizer step does not reach
(``sync_weights`` is a no-op); the pipeline (:mod:`synco.cotrain.pipeline`) copies the learner's weights into it
with :func:`publish` once a step is finished, and the policy then reports the snapshot's version as the version
its samples come from. Memory: one more copy of the weights (LoRA: of the base as well). A served engine and the
Ray backend's rollout workers already hold their own copy: :func:`detach` only defers their updates to
:func:`publish`.
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
    """Why ``policy`` cannot sample beside its updates, or None when it can.

    An in-process ``transformers`` learner samples from a :class:`SnapshotGenerator` (its update must then draw no
    random numbers: torch's CPU random stream is one per process, and sampling on the main thread and the update
    on the learner's thread would interleave their draws by timing, so a run would not repeat); a served one from
    the adapter pushed at the last publish; a Ray agent from its rollout workers, loaded at the last publish.
    """
    if hasattr(policy, "defer_sync"):  # the Ray backend: the rollout workers hold the sampling copy
        return policy.defer_problem() if hasattr(policy, "defer_problem") else None
    gen = getattr(policy, "generator", None)
    if not isinstance(policy, HFPolicy) or not (type(gen) is HFGenerator or hasattr(gen, "defer")):
        engine = type(gen if gen is not None else policy).__name__
        return f"its sampling engine ({engine}) cannot hold weights apart from the learner's"
    if type(gen) is HFGenerator:
        drops = [name for name, m in policy.model.named_modules() if isinstance(m, torch.nn.Dropout) and m.p > 0]
        if drops:
            return (f"its model has dropout in training ({drops[0]}{' and more' if len(drops) > 1 else ''}), which "
                    f"draws from torch's random stream beside sampling: set the model's dropout (and lora.dropout) to 0")
    return None


def detach(policy: Any) -> None:
    """Make ``policy`` sample from weights that only :func:`publish` changes (see :func:`snapshot_problem`)."""
    if hasattr(policy, "defer_sync"):
        policy.defer_sync()
        return
    gen = policy.generator
    if type(gen) is HFGenerator:
        policy.generator = SnapshotGenerator(gen, policy.step)
    else:
        gen.defer(policy.step)


def publish(policy: Any) -> None:
    """Copy a learner's weights into what it samples from (nothing for a frozen agent, which never changes)."""
    if hasattr(policy, "publish_samplers"):
        policy.publish_samplers()
        return
    gen = getattr(policy, "generator", None)
    if gen is not None and hasattr(gen, "publish"):
        gen.publish(policy.model, policy.step)


__all__ = ["SnapshotGenerator", "detach", "publish", "snapshot_problem"]
