"""The snapshot: an in-process :class:`~synco.core.policy.Sampler` on a copy of the learner's weights.

:class:`~synco.learn.hf_policy.HFGenerator` samples with the training model itself, so sampling and an update
cannot run at the same time. :class:`SnapshotSampler` samples a copy that an optimizer step does not reach; the
learner's :meth:`~synco.learn.hf_policy.HFPolicy.publish` copies its exported weights (those an update changes:
the adapters under LoRA) in, at the pipeline's publish point (:mod:`synco.cotrain.pipeline`). Memory: one more
copy of the model (a shared base's two agents share one copy: :meth:`synco.learn.shared_base.SharedBase.sampling_model`).
An engine with weights of its own (vLLM, a server, Ray's rollout workers) needs none.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence

import torch

from synco.learn.hf_policy import HFGenerator


def frozen_copy(model: torch.nn.Module) -> torch.nn.Module:
    """A deep copy of ``model`` in eval mode that no optimizer reaches (no parameter requires a gradient)."""
    out = copy.deepcopy(model).eval()
    for p in out.parameters():
        p.requires_grad_(False)
    return out


class SnapshotSampler(HFGenerator):
    """An :class:`HFGenerator` on a copy of the learner's weights, changed only by :meth:`load`.

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


__all__ = ["SnapshotSampler", "frozen_copy"]
