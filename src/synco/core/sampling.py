"""What generation produces and a GRPO update consumes: sampling settings, completions, experiences.

Plain records with no torch import, so the evaluation and analysis paths (and
``synco --help``) load them cheaply; ``synco.core.policy`` re-exports them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

FinishReason = Literal["stop", "length"]


class SamplingParams(BaseModel):
    """How completions are sampled. Everything not listed here is neutral (no repetition penalty, no min-p, ...)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    temperature: float = Field(1.0, gt=0, description="Softmax temperature used for sampling (log-probs are still reported at temperature 1).")
    top_p: float = Field(1.0, gt=0, le=1, description="Nucleus sampling mass; 1.0 disables it.")
    top_k: int = Field(0, ge=0, description="Sample among the k most likely tokens; 0 disables it.")
    max_new_tokens: int = Field(256, ge=1, description="Completion length budget; a completion without EOS within it is 'truncated'.")
    greedy: bool = Field(False, description="Argmax decoding (ignores temperature/top_p/top_k).")


@dataclass
class Experience:
    """One sampled completion with its advantage, ready for a GRPO update.

    ``old_logprobs`` are the per-completion-token log-probs under the sampling
    policy (e.g. ``Completion.logprobs``); None means "use the current policy's
    detached log-probs", i.e. an exactly on-policy step with ratio 1.

    ``loss_mask`` (one 0/1 per completion id) marks the ids the policy sampled (1) in an
    episode whose completion also holds environment ids (0: a tool result, fed to the model
    as context, never trained and not counted in the loss normaliser); None: every
    completion id is trainable (a single-turn completion).
    """

    prompt_ids: list[int]
    completion_ids: list[int]
    advantage: float
    old_logprobs: list[float] | None = None
    loss_mask: list[int] | None = None

    @property
    def n_trainable(self) -> int:
        """Completion ids that carry loss (all of them without a ``loss_mask``)."""
        return len(self.completion_ids) if self.loss_mask is None else sum(1 for m in self.loss_mask if m)


@dataclass
class Completion:
    """One sampled completion.

    ``completion_ids`` carry no padding and include the EOS token when one was
    generated; ``logprobs`` has one entry per completion id (log-prob under the
    model at temperature 1); ``text`` is decoded with special tokens skipped. ``version`` is the learner version of
    the weights that sampled it, stamped by the sampler (:class:`~synco.core.policy.Sampler`; 0: never loaded).
    """

    text: str
    prompt_ids: list[int]
    completion_ids: list[int]
    logprobs: list[float]
    truncated: bool
    finish_reason: FinishReason
    version: int = 0

    def to_experience(self, advantage: float, keep_logprobs: bool = True) -> Experience:
        """The :class:`Experience` of this completion with ``advantage`` (sampling log-probs kept as old log-probs)."""
        return Experience(
            prompt_ids=list(self.prompt_ids),
            completion_ids=list(self.completion_ids),
            advantage=float(advantage),
            old_logprobs=list(self.logprobs) if keep_logprobs else None,
        )


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

    ``completion_mask`` (one 0/1 per completion id, only with ``completion_ids``): an episode's, where the
    completion also holds the environment's ids (tool results: 0, context only, no loss and no share of the
    normaliser) between the agent's sampled ids (1). None: every completion id is a target.
    """

    prompt: str
    completion: str
    completion_ids: tuple[int, ...] | None = None
    completion_mask: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        if self.completion_mask is not None:
            if self.completion_ids is None or len(self.completion_mask) != len(self.completion_ids):
                n = None if self.completion_ids is None else len(self.completion_ids)
                raise ValueError(f"SFTExample.completion_mask has {len(self.completion_mask)} entries for "
                                 f"completion_ids of {n} (a mask needs the ids it marks, one entry each)")
            mask = tuple(int(bool(m)) for m in self.completion_mask)
            if not any(mask):
                raise ValueError(f"SFTExample.completion_mask marks no id to train in {self.completion[:40]!r}")
            object.__setattr__(self, "completion_mask", mask)
        if self.completion_ids is None:
            return
        if not self.completion_ids:
            raise ValueError(f"SFTExample.completion_ids is empty for completion {self.completion[:40]!r} "
                             f"(None: tokenise the text instead)")
        object.__setattr__(self, "completion_ids", tuple(int(t) for t in self.completion_ids))  # hashable
