"""Reward functions for both agents: small pure functions, tested by hand.

Reasoner: correctness, with a small preference for a boxed final answer.
Synthesizer: ``gated`` (default) = gate(quality) * gate(reliability) * teach(p),
or ``additive`` = a weighted sum of quality, reliability, a success band,
novelty and alignment. Invalid cards get a fixed penalty.

Alignment (:func:`card_alignment`, 0 or 1) measures whether a valid card is what
its context asked for: with a Designer target cell, whether the card's realised
cell (recomputed by the domain) is that cell; without one, whether the card
carries a factor value the capability report asks for (one of its weakest or
under-covered values). The engine computes it for every card.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from typing import TYPE_CHECKING, Literal, Sequence

from pydantic import BaseModel, Field, model_validator

from synco.core.records import DUPLICATE_CODES, SynthReward, TaskCard

if TYPE_CHECKING:
    from synco.core.report import CapabilityReport


def teachability(p: float) -> float:
    """How much a task with success rate ``p`` can teach under group-relative RL.

    2p for p <= 0.5, else 2(1 - p): zero when all attempts agree (no advantage
    signal), one when half of them succeed. With K = 4: 0, .5, 1, .5, 0.
    """
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"success rate p must be in [0, 1], got {p!r}")
    return 2.0 * p if p <= 0.5 else 2.0 * (1.0 - p)


def supervised_gap(p: float) -> float:
    """How much a verified task can teach when the Reasoner is fine-tuned on its gold solution: 1 - p.

    Under supervised fine-tuning on verified tasks (EvoSyn's protocol, ``rounds.target=reference``) the gold answer is
    the target whatever the attempts did, so a task teaches by what the Reasoner still gets wrong: EvoSyn's capability
    gap. One when every attempt fails, zero when every attempt succeeds. With K = 4: 1, .75, .5, .25, 0.
    """
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"success rate p must be in [0, 1], got {p!r}")
    return 1.0 - p


def gate(x: float, threshold: float = 0.5) -> float:
    """clip((x - t) / (1 - t), 0, 1): zero at or below the threshold, one at x = 1."""
    if not 0.0 <= threshold < 1.0:
        raise ValueError(f"gate threshold must be in [0, 1), got {threshold!r}")
    return min(1.0, max(0.0, (x - threshold) / (1.0 - threshold)))


def success_band(p: float, low: float = 0.2, high: float = 0.8) -> float:
    """The additive mode's band score: 1.0 inside [low, high], 0.2 at p in {0, 1}, 0.6 elsewhere."""
    if low <= p <= high:
        return 1.0
    if p <= 0.0 or p >= 1.0:
        return 0.2
    return 0.6


class ReasonerRewardConfig(BaseModel):
    """Reasoner reward settings."""

    correct_boxed: float = Field(1.0, description="Reward for a correct answer given in \\boxed{}.")
    correct_unboxed: float = Field(0.9, description="Reward for a correct answer without \\boxed{}.")
    wrong: float = Field(0.0, description="Reward for a wrong or missing answer.")
    format_bonus: float = Field(0.0, description="Added when the response has exactly one distinct boxed answer (the paper's reference code uses 0.1).")


def reasoner_reward(correct: bool, boxed: Sequence[str], config: ReasonerRewardConfig = ReasonerRewardConfig()) -> float:
    """Reward of one Reasoner response.

    ``boxed`` are all ``\\boxed{}`` contents of the response. Several *different*
    boxed answers count as wrong (no hedging), whatever ``correct`` says.
    """
    distinct = {b.strip() for b in boxed}
    if len(distinct) > 1:
        return config.wrong
    bonus = config.format_bonus if len(distinct) == 1 else 0.0
    if not correct:
        return config.wrong + bonus
    return (config.correct_boxed if distinct else config.correct_unboxed) + bonus


class SynthesizerRewardConfig(BaseModel):
    """Synthesizer reward settings (defaults from the paper)."""

    mode: Literal["gated", "additive"] = Field("gated", description="gated: gate(q)*gate(r)*teach(p); additive: weighted sum.")
    invalid_penalty: float = Field(-0.5, description="Reward of a card the verifier rejects.")
    duplicate_penalty: float = Field(-0.5, description="Reward of a card rejected as a duplicate (within the step or of a recent pool task).")
    learnability: Literal["teachability", "gap", "progress", "effect"] = Field(
        "teachability",
        description="Gated mode's learner term: teachability (2p, or 2(1-p) above 0.5: the group-relative RL signal), "
                    "gap (1-p: what supervised fine-tuning on the gold solution can still teach, EvoSyn's gap) or "
                    "progress (the gap times the card's cell's learning-effect weight, in [effect_floor, 1]: what "
                    "training on that cell measurably changed; synco.evosyn.effect, needs a factor space) or "
                    "effect (the cell's learning-effect weight alone, SOAR-style: the reward is the measured "
                    "improvement training on the card's cell brought, not an intrinsic learnability; needs a factor "
                    "space).")
    quality_threshold: float = Field(0.5, description="Gate threshold for quality.")
    reliability_threshold: float = Field(0.5, description="Gate threshold for reliability.")
    w_quality: float = Field(0.30, description="Additive mode: weight of quality.")
    w_reliability: float = Field(0.20, description="Additive mode: weight of reliability.")
    w_band: float = Field(0.20, description="Additive mode: weight of the success band.")
    w_novelty: float = Field(0.15, description="Additive mode: weight of novelty.")
    w_alignment: float = Field(0.15, description="Additive mode: weight of alignment (synco.core.rewards.card_alignment): 1 when a valid card hits the Designer's target cell, or, without a target, carries a factor value the capability report asks for (weakest or under-covered); else 0.")
    band_low: float = Field(0.2, description="Lower edge of the learnable success band.")
    band_high: float = Field(0.8, description="Upper edge of the learnable success band.")

    @model_validator(mode="after")
    def _learnability_needs_gated(self) -> "SynthesizerRewardConfig":
        """The additive mode scores success by its band, not a learner term: a gap setting there would do nothing."""
        if self.learnability != "teachability" and self.mode != "gated":
            raise ValueError(f"learnability={self.learnability!r} is the gated mode's learner term; "
                             f"mode={self.mode!r} scores success by its band (set mode=gated or drop learnability)")
        return self


EFFECT_TERMS = frozenset({"progress", "effect"})  # learner terms that read the cells' learning effect


def synthesizer_reward(
    valid: bool,
    quality: float,
    reliability: float,
    success_rate: float | None,
    novelty: float = 1.0,
    alignment: float | None = None,
    reason_codes: Sequence[str] = (),
    config: SynthesizerRewardConfig = SynthesizerRewardConfig(),
    progress: float = 1.0,
) -> SynthReward:
    """The Synthesizer's reward for one card, with every component kept.

    Invalid cards get ``invalid_penalty`` (``duplicate_penalty`` when the
    rejection is a duplicate). A valid card without rollouts (``success_rate``
    None) scores as p = 0. ``alignment`` (:func:`card_alignment`, in [0, 1]) is
    recorded when given and needed by the additive mode, which raises without it
    rather than score every card 0 on that term. ``progress`` (in [0, 1]): the card's cell's learning-effect
    weight, the factor of ``learnability=progress`` on the gap and the whole learner term of ``learnability=effect``.
    """
    if not 0.0 <= progress <= 1.0:
        raise ValueError(f"progress must be in [0, 1], got {progress!r}")
    if alignment is not None and not 0.0 <= alignment <= 1.0:
        raise ValueError(f"alignment must be in [0, 1], got {alignment!r}")
    if not valid:
        penalty = config.duplicate_penalty if DUPLICATE_CODES.intersection(reason_codes) else config.invalid_penalty
        return SynthReward(total=penalty, quality=quality, reliability=reliability, novelty=novelty,
                           success_rate=success_rate, penalty=penalty, mode=config.mode)
    p = 0.0 if success_rate is None else success_rate
    teach = learner_term(config.learnability, p, progress)
    if config.mode == "gated":
        total = gate(quality, config.quality_threshold) * gate(reliability, config.reliability_threshold) * teach
    else:
        if alignment is None:
            raise ValueError("the additive Synthesizer reward needs the card's alignment (synco.core.rewards.card_alignment); got None")
        total = (
            config.w_quality * quality
            + config.w_reliability * reliability
            + config.w_band * success_band(p, config.band_low, config.band_high)
            + config.w_novelty * novelty
            + config.w_alignment * alignment
        )
    return SynthReward(total=total, quality=quality, reliability=reliability, teachability=teach,
                       novelty=novelty, success_rate=success_rate, alignment=alignment, mode=config.mode)


def learner_term(learnability: str, p: float, progress: float = 1.0) -> float:
    """The gated reward's learner term for success rate ``p``: teachability, the gap, the gap times the cell's
    learning-effect weight ``progress``, or that weight alone (``effect``: grounded in measured improvement)."""
    if learnability == "teachability":
        return teachability(p)
    if learnability == "gap":
        return supervised_gap(p)
    if learnability == "progress":
        return supervised_gap(p) * progress
    if learnability == "effect":
        return progress
    raise ValueError(f"unknown learnability {learnability!r}: teachability, gap, progress or effect")


Focus = Collection[tuple[str, str]]
"""(factor key, value) pairs a capability report asks the Synthesizer for."""


def report_focus(report: "CapabilityReport") -> frozenset[tuple[str, str]]:
    """The factor values ``report`` asks for: its weakest values (Reasoner) and under-covered ones (Synthesizer).

    These are the values its recommendations name ("target the Reasoner's weak spots", "cover more").
    """
    return frozenset((f.key, f.value) for f in report.weakest) | frozenset((c.key, c.value) for c in report.under_covered)


def card_alignment(card: TaskCard | None, target: Iterable[tuple[str, str]] | None, focus: Focus = ()) -> float:
    """Whether a card is what its context asked for: 1.0 or 0.0.

    With a ``target`` cell (the Designer's ``(factor, bucket)`` pairs): 1 when every
    requested bucket is the card's realised value in ``card.factors`` (which the
    engine recomputes from the problem; the card's own claims never count). Without
    one: 1 when a factor label of the card (its factors, style and difficulty, as the
    report reads them) is in ``focus`` (:func:`report_focus`); 0 when none is or the
    report asks for nothing. No card, no alignment.
    """
    if card is None:
        return 0.0
    if target is not None:
        return float(all(card.factors.get(k) == v for k, v in target))
    if not focus:
        return 0.0
    from synco.core.report import record_factors

    return float(any(pair in focus for pair in record_factors(card).items()))


def off_target(reward: SynthReward, penalty: float, invalid_penalty: float, strict: bool = False) -> SynthReward:
    """The reward of a valid card whose realised cell is not the one the Designer asked for.

    ``total - penalty`` (the penalty is recorded in ``penalty``), or, when ``strict``, the
    invalid-card penalty: a gate that treats a missed control like a rejected card. The shift
    of ``total`` is also recorded in ``control`` (what :func:`synco.cotrain.batches.with_control`
    may keep out of the group's centring).
    """
    if strict:
        shift = invalid_penalty - reward.total
        return reward.model_copy(update={"total": invalid_penalty, "penalty": reward.penalty + shift,
                                         "control": reward.control + shift})
    return reward.model_copy(update={"total": reward.total - penalty, "penalty": reward.penalty - penalty,
                                     "control": reward.control - penalty})


def is_gradient_bearing(rewards: Sequence[float], tol: float = 1e-9) -> bool:
    """A group carries a GRPO gradient only when its rewards are not all equal."""
    return len(rewards) > 1 and (max(rewards) - min(rewards)) > tol
