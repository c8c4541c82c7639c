"""The supervised (SFT) loss: next-token cross-entropy on the completion tokens only.

One implementation for every supervised update in synco: the arith warm start
(``synco.pretrain.train_sft``) and :meth:`synco.hf_policy.HFPolicy.sft_update`,
which the ``rounds`` and ``rft`` protocols call, both go through
:func:`completion_loss`, which takes token ids (the targets), never text. Prompt and
padding positions carry :data:`IGNORE` and add nothing to the loss or its normaliser.

torch is imported inside the functions, so :class:`SFTExample` loads torch-free
(the :class:`~synco.policy.Policy` contract names it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

IGNORE = -100
"""Target id of a position that is not trained (prompt, padding); the value HF labels use."""


@dataclass(frozen=True)
class SFTExample:
    """One supervised example: the formatted prompt (as ``generate`` gets it) and the completion to learn.

    The policy encodes ``prompt`` exactly as it encodes a prompt for sampling, so the
    prompt ids are the ones generation conditioned on. The completion's target ids are
    ``completion_ids`` when given: the ids a rollout sampled, trained as they are (EOS
    included exactly when it was sampled). Decoding them and tokenising the text again
    can give other ids with a BPE tokenizer (another split of the same characters,
    ``" ,"`` cleaned to ``","``, special tokens dropped by the decoder), and a supervised
    update must train the tokens that were sampled and scored. Without ids (a reference
    answer the policy never sampled, or an attempt from a pool written before ids were
    kept) the policy tokenises ``completion`` and appends EOS, so the model also learns
    to stop. ``completion`` is the decoded text either way (for de-duplication and reading).
    """

    prompt: str
    completion: str
    completion_ids: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        if self.completion_ids is None:
            return
        if not self.completion_ids:
            raise ValueError(f"SFTExample.completion_ids is empty for completion {self.completion[:40]!r} "
                             f"(None: tokenise the text instead)")
        object.__setattr__(self, "completion_ids", tuple(int(t) for t in self.completion_ids))  # hashable


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
