"""The supervised (SFT) loss: next-token cross-entropy on the completion tokens only.

One implementation for every supervised update in synco: the arith warm start
(``synco.learn.pretrain.train_sft``, on the data a world hands it) and :meth:`synco.learn.hf_policy.HFPolicy.sft_update`,
which the ``rounds`` and ``rft`` protocols call, both go through
:func:`completion_loss`, which takes token ids (the targets), never text. Prompt and
padding positions carry :data:`IGNORE` and add nothing to the loss or its normaliser.

torch is imported inside the functions. :class:`~synco.core.sampling.SFTExample`, the record an update takes,
lives torch-free with the other sampling records.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch


IGNORE = -100
"""Target id of a position that is not trained (prompt, padding); the value HF labels use."""


def completion_loss(logits: torch.Tensor, targets: torch.Tensor, normalizer: float | None = None) -> torch.Tensor:
    """Cross-entropy of ``targets`` under ``logits``, summed over the trained positions, / ``normalizer``.

    ``logits`` is ``(..., V)`` and ``targets`` the matching ``(...)`` ids, already
    aligned (``logits[..., t, :]`` predicts ``targets[..., t]``); :data:`IGNORE`
    positions are skipped. ``normalizer=None`` divides by the number of trained
    positions in this call (a plain token mean); pass the token count of a whole
    batch to split it into micro-batches whose losses (and gradients) add up to
    the whole batch's mean. Logits are upcast to float32 first.
    """
    import torch.nn.functional as F

    flat = logits.float().reshape(-1, logits.shape[-1])
    ids = targets.reshape(-1).to(flat.device)
    if normalizer is None:
        return F.cross_entropy(flat, ids, ignore_index=IGNORE, reduction="mean")
    if not normalizer > 0:
        raise ValueError(f"normalizer must be positive, got {normalizer}")
    return F.cross_entropy(flat, ids, ignore_index=IGNORE, reduction="sum") / normalizer


def shift_labels(labels: torch.Tensor) -> torch.Tensor:
    """Per-position labels (HF convention: ``labels[t]`` is the token *at* t) -> aligned next-token targets.

    ``targets[t] = labels[t + 1]``, and :data:`IGNORE` at the last position.
    """
    import torch.nn.functional as F

    return F.pad(labels, (0, 1), value=IGNORE)[..., 1:].contiguous()
