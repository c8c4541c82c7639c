"""The built-in protocols' settings sections, ``rounds`` and ``alternating`` (torch-free: loaded with every config).

Each protocol is one object (:mod:`synco.cotrain.protocols.base`), named by ``protocol`` in the registry
(:mod:`synco.cotrain.protocols.registry`):

=============  =================================================================================
online         co-training as in the paper (default): every step both agents take their GRPO step
               (as ``mode`` says: the Synthesizer only in ``cotrain``)
rounds         EvoSyn: rounds of ``rounds.steps_per_round`` synthesis steps in which the Reasoner
               only solves (nothing trains it), then, at the round's last step, the Reasoner is
               fine-tuned on the round's verified data (``rounds.accumulate``: on every round's so
               far) by SFT, or by GRPO on those tasks (``rounds.update``)
alternating    R-Zero-style self-evolution: phases of ``alternating.phase_steps`` steps in which
               only one agent learns (the Synthesizer on the frozen Reasoner's outcomes, then the
               Reasoner on the frozen Synthesizer's tasks); needs ``mode=cotrain``
rft            rejection-sampling fine-tuning: rounds on the fixed corpus of ``mode=static`` (the
               Synthesizer is not used): the Reasoner samples ``k`` answers per task, keeps the
               correct ones and is fine-tuned on them at each round's end
=============  =================================================================================
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

SFT_LR = 1e-5
"""Default peak learning rate of a round's supervised steps (``rounds.sft_lr``): of the order of the rates
used for full-weight supervised fine-tuning of 1-8B-parameter LMs (5e-6 to 2e-5), ten times the paper's GRPO
rate (1e-6), which an SFT step has no reason to share: it follows the plain NLL gradient of every token of a
correct attempt, not a clipped, advantage-weighted ratio. Not tuned on any run here. LoRA wants about ten
times more (the paper-1gpu preset sets 1e-4); the tiny arith models set their own (the arith preset)."""


def legacy_rounds(data: dict[str, Any]) -> dict[str, Any]:
    """A ``rounds`` section in today's names: ``lr`` (before ``sft_lr`` existed) becomes ``sft_lr``.

    ``lr: null`` meant "the Reasoner's GRPO rate" and maps to ``sft_lr: null``, which still means that, so
    a config or checkpoint written before keeps its numbers. ValueError naming both when both are given,
    or naming ``rounds.lr`` when its value cannot be a rate.
    """
    if "lr" not in data:
        return data
    out = {k: v for k, v in data.items() if k != "lr"}
    lr = data["lr"]
    if "sft_lr" in data:
        raise ValueError(f"rounds.lr={lr!r} is the old name of rounds.sft_lr={data['sft_lr']!r}: give only sft_lr")
    if lr is not None and not (isinstance(lr, (int, float)) and not isinstance(lr, bool) and lr > 0):
        raise ValueError(f"rounds.lr={lr!r} must be a number > 0 (or null: the GRPO rate); it is now rounds.sft_lr")
    if lr is not None and data.get("update", "sft") != "sft":
        raise ValueError(f"rounds.lr={lr} applies to rounds.update=sft only (update=grpo uses reasoner.grpo.lr)")
    out["sft_lr"] = lr
    return out


class RoundsConfig(BaseModel):
    """The ``rounds`` section: how a round of ``protocol=rounds`` or ``protocol=rft`` collects and trains."""

    model_config = ConfigDict(extra="forbid")

    steps_per_round: int = Field(25, ge=1, description="Steps per round: each writes (or, for rft, draws) n_cards tasks that the Reasoner solves k times without training; the round's last step then trains the Reasoner. The run's last step closes a partial round.")
    accumulate: bool = Field(False, description="Train on every round's data so far (EvoSyn-Final-SFT) instead of this round's only (EvoSyn-R1 for the first round). Data are read back from the pool, distinct (prompt, completion) pairs only.")
    update: Literal["sft", "grpo"] = Field("sft", description="sft: supervised fine-tuning on the examples of `target`; grpo: GRPO on the round's valid tasks instead (k fresh attempts per task, graded against the task's reference; those attempts count as extra Reasoner rollouts and are not stored in the pool).")
    target: Literal["attempts", "reference"] = Field("attempts", description="update=sft: what a task's SFT completion is. attempts: the Reasoner's own correct attempts (rejection sampling); reference: the verified answer in the Reasoner's answer format (the domain's format_reasoner_answer, else the card's solution and a boxed answer), for every valid task; in a world whose cards carry a gold trajectory (tools), the gold episode replayed on the task's environment, trained on the agent's turns (EvoSyn's SFT on verified trajectories).")
    per_task: int = Field(1, ge=1, description="target=attempts: at most this many distinct correct attempts per task.")
    epochs: int = Field(1, ge=1, description="Passes over the round's training data.")
    batch_size: int = Field(64, ge=1, description="SFT examples (update=sft) or tasks (update=grpo) per optimizer step; the policy still splits them into micro-batches of grpo.micro_batch_size rows.")
    sft_lr: float | None = Field(SFT_LR, gt=0, description="update=sft: peak learning rate of the round's SFT steps, its own setting (1e-5: a usual full-weight SFT rate; LoRA wants ~10x; see synco.cotrain.protocols.config.SFT_LR); null: the Reasoner's scheduled grpo.lr, as before this setting existed. update=grpo ignores it (it uses reasoner.grpo.lr). The optimizer (AdamW state, scheduler) is the Reasoner's own either way. rounds.lr, its former name, is still read as sft_lr.")

    @model_validator(mode="before")
    @classmethod
    def _read_legacy_lr(cls, data: Any) -> Any:
        return legacy_rounds(data) if isinstance(data, dict) else data


class AlternatingConfig(BaseModel):
    """The ``alternating`` section: the phases of ``protocol=alternating``."""

    model_config = ConfigDict(extra="forbid")

    phase_steps: int = Field(10, ge=1, description="Steps per phase; phases alternate between the two learners.")
    first: Literal["synthesizer", "reasoner"] = Field("synthesizer", description="The agent that learns in the first phase (R-Zero: the Synthesizer, on the initial Reasoner).")
