"""The ``evosyn`` config section: the three switches of EvoSyn's ablations, the opt-in LLM proposer and their knobs."""

from __future__ import annotations

import math
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator


class DesignerConfig(BaseModel):
    """How the Designer splits the card slots of a step over cells.

    Defaults were chosen from ``bench/transfer_probe.py`` (seed 0): 30 steps on one arith
    level gained 0.05-0.13 on it but cost its neighbours up to 0.10 (net mean -0.006 to
    -0.028), while uniform practice gained +0.007. So the budget goes where learning is
    possible (not to cells at success 0 or 1), proportionally rather than peaked, with a
    floor for every cell and a retention share for mastered ones."""

    model_config = ConfigDict(extra="forbid")

    target: float = Field(0.5, gt=0, lt=1, description="Success rate the Designer aims at: a cell's need is 1 there and falls linearly to 0 at success 0 and 1 (the teachable band's centre; GRPO's signal peaks at 0.5).")
    floor: float = Field(0.2, ge=0, le=1, description="Exploration floor: this share of the slots is spread evenly over all cells, so no cell starves and a cell that becomes learnable is noticed.")
    retention: float = Field(0.15, ge=0, le=1, description="Retention share: this share of the slots goes to cells the Reasoner has mastered, so skills are not forgotten (moves to the need-driven share when none is mastered).")
    mastered: float = Field(0.9, gt=0, le=1, description="A cell with (smoothed) success >= this is mastered.")
    min_tasks: int = Field(4, ge=0, description="Coverage: a cell with fewer measured tasks in the window gets full need (unmeasured cells are explored first).")
    coverage: Literal["full", "parent"] = Field("full", description="Need of a cell with fewer than min_tasks measured tasks: full (1: unmeasured cells are explored first) or parent (its success estimated with its parent cell -- the first factor's bucket alone, e.g. its level -- as a prior worth min_tasks tasks, so a new fine cell under a mastered or hopeless level is not paid for as maximally teachable).")
    prior: float = Field(1.0, ge=0, description="Beta prior pseudo-count on each side when smoothing a cell's success rate (Laplace at 1).")
    sharpness: float = Field(1.0, gt=0, description="need ** sharpness sets the need-driven shares (1: proportional; larger: more focus on the most teachable cells). Proportional by default: in the arith world practice on one level costs the others (bench/transfer_probe.py), so the Designer spreads the budget over every learnable cell instead of piling it on the most teachable.")
    min_group: int = Field(2, ge=1, description="A cell that gets any slots gets at least this many (a Synthesizer GRPO group of one card has no advantage).")
    effect: bool = Field(False, description="Learning-effect feedback: each cell's need is scaled by effect_floor + (1 - effect_floor) * P(training on it raises its success), from its gains over the last effect_memory transitions (learning_effect.jsonl; synco.evosyn.effect), so a cell that was targeted and did not move yields budget to cells that do. Off: the need is the gap alone.")
    effect_floor: float = Field(0.25, ge=0, le=1, description="Learning-effect feedback: the smallest weight a cell's measured effect can give its need (and the Synthesizer's learnability=progress reward), so a cell that did not move can come back.")
    effect_memory: int = Field(3, ge=1, description="Learning-effect feedback: a cell's effect is its gains over this many most recent transitions, pooled by inverse variance.")

    @model_validator(mode="after")
    def _shares(self) -> "DesignerConfig":
        if self.floor + self.retention > 1:
            raise ValueError(f"floor + retention must be <= 1, got {self.floor} + {self.retention}")
        return self


class ReflectorConfig(BaseModel):
    """When and on what evidence the Reflector changes the factor space."""

    model_config = ConfigDict(extra="forbid")

    every: int = Field(10, ge=1, description="Reflect every this many steps.")
    window: int = Field(3000, ge=1, description="Most recent task records the Reflector measures on.")
    min_tasks: int = Field(300, ge=1, description="Minimum evidence: measured valid tasks in the window.")
    min_bucket_tasks: int = Field(20, ge=1, description="Minimum evidence: a candidate needs at least two buckets with this many tasks.")
    permutations: int = Field(200, ge=10, description="Stratified permutations (z shuffled within each cell) for the p-value.")
    alpha: float = Field(0.01, gt=0, lt=1, description="Promote only when the permutation p-value is <= alpha.")
    min_excess_cmi: float = Field(0.002, ge=0, description="... and the CMI exceeds its permutation-null mean by at least this many nats.")
    retire_alpha: float = Field(0.2, gt=0, lt=1, description="An experimental factor whose p-value given the other factors is above this at its next reflection is retired; below it, confirmed.")
    max_cells: int = Field(96, ge=1, description="Never promote a factor that would make the space have more feasible cells than this.")
    min_control: float = Field(0.75, ge=0, le=1, description="Control check: a promoted factor whose targeted cards realise the requested bucket less often than this stays in use but observed only (out of the Designer's cells); at or above it, it stays a control. 0: no check, every promoted factor is steered. The arith warm start follows level 1.00, answer_digits 0.62, carries 0.42 (synco.evosyn.control).")
    min_control_cards: int = Field(200, ge=1, description="Control check: targeted valid cards a promoted factor needs before it is judged (about two steps of the arith preset).")


class ProposerConfig(BaseModel):
    """How often, from what and how long the Synthesizer model proposes a keyword factor (``evosyn.proposer``)."""

    model_config = ConfigDict(extra="forbid")

    every: int = Field(20, ge=1, description="Propose every this many steps (just before a reflection due at the same step).")
    examples: int = Field(6, ge=1, le=32, description="Failed and solved problems (each) shown in the proposer prompt, from the Reflector's window.")
    max_new_tokens: int = Field(160, ge=16, le=4096, description="Generation budget of one proposal (greedy).")
    max_candidates: int = Field(4, ge=1, le=64, description="Proposals not in use kept as Reflector candidates; a new one drops the oldest beyond this.")


class EvoSynConfig(BaseModel):
    """EvoSyn's closed loop inside co-training; each switch is one of the paper's ablations."""

    model_config = ConfigDict(extra="forbid")

    designer: bool = Field(True, description="Designer on: each step's card slots are split over factor cells by need; each Synthesizer context names its cell. Off: plain SynCo (every context gets the same report-only prompt).")
    reflector: bool = Field(True, description="Reflector on: every reflector.every steps, promote a candidate factor that explains Reasoner failure beyond the current cells (and retire ones that stopped).")
    feedback: bool = Field(True, description="Learner feedback on. Off: no learner information reaches the Synthesizer or the Designer (empty report; the Designer sees coverage only, never success; the Reflector has nothing to measure and makes no change).")
    factors: list[str] | None = Field(None, description="The factors the space starts with (its first cells), e.g. [pattern, family] in the tools world; null: the domain's built-in ones (tools and tau2: pattern, arith: level, math: topic). Every other factor the domain computes stays a Reflector candidate. A run that starts on a factor the Synthesizer cannot follow is steered by it anyway (the control check judges promoted factors only).")
    effect_every: int = Field(10, ge=1, description="Learning effect (learning_effect.jsonl): steps per measuring period in protocols without rounds; with rounds (protocol=rounds / rft) a period is a round, in which the Reasoner does not change. Each period's new tasks probe the learner trained before it.")
    control_penalty: float = Field(0.3, ge=0, description="Subtracted from the Synthesizer reward of a valid card whose realised cell (recomputed by the domain) differs from the requested one.")
    control_gate: bool = Field(False, description="Instead of the penalty, a card that misses its cell gets the invalid penalty (strict).")
    control_absolute: bool = Field(False, description="The off-target term (control_penalty, or the gate's) reaches the Synthesizer's GRPO advantages whole: each context group's mean off-target term is added back after centring, so a group whose cards all miss their cell is still pushed away from it. Off: the term is part of the reward and centred with it, and a whole group that misses gets no gradient from it (docs/RGYM.md, why-section point 5).")
    designer_settings: DesignerConfig = Field(default_factory=DesignerConfig, description="Designer knobs.")
    reflector_settings: ReflectorConfig = Field(default_factory=ReflectorConfig, description="Reflector knobs.")
    proposer: bool = Field(False, description="LLM proposer on: every proposer_settings.every steps the Synthesizer model proposes one keyword factor from recent failed/solved problems; it joins the Reflector's candidates and is promoted only on the same evidence test. Its values are computed from the problem text, never written by the model. Needs reflector and feedback on and a chat-model domain (math).")
    proposer_settings: ProposerConfig = Field(default_factory=ProposerConfig, description="LLM proposer knobs.")

    @model_validator(mode="after")
    def _factor_names(self) -> "EvoSynConfig":
        if self.factors is not None and (not self.factors or len(set(self.factors)) != len(self.factors)):
            raise ValueError(f"evosyn.factors must name at least one factor, each once, got {self.factors}")
        return self

    @model_validator(mode="after")
    def _finite(self) -> "EvoSynConfig":
        if not math.isfinite(self.control_penalty):
            raise ValueError(f"control_penalty must be finite, got {self.control_penalty}")
        return self

    @model_validator(mode="after")
    def _proposer_needs_reflector(self) -> "EvoSynConfig":
        """A proposal is only ever used as a Reflector candidate: without the Reflector it would be ignored."""
        if self.proposer and not (self.reflector and self.feedback):
            off = "reflector" if not self.reflector else "feedback"
            raise ValueError(f"evosyn.proposer=true needs evosyn.{off}=true (proposals are tested and promoted only "
                             f"by the Reflector); set evosyn.proposer=false or evosyn.{off}=true")
        return self


def proposer_problem(evosyn: EvoSynConfig, domain: str, mode: str, chat_model: bool, writes_tasks: bool) -> str | None:
    """Why ``evosyn.proposer`` cannot run with ``domain`` and ``mode``, naming the fields, or None when it can.

    ``chat_model``: whether the domain's Synthesizer is a chat LM that can write a proposal (the domain
    says so itself, ``DomainNeeds.chat_model``; arith's tiny char models cannot). ``writes_tasks``: whether the
    mode has the Synthesizer write the tasks (its declared ``reads_report``: cotrain, frozen).
    """
    if not evosyn.proposer:
        return None
    if not chat_model:
        return (f"evosyn.proposer=true needs a domain whose Synthesizer is a chat model "
                f"(DomainNeeds.chat_model, e.g. math), got domain={domain!r}")
    if not writes_tasks:
        return (f"evosyn.proposer=true needs a mode where the Synthesizer writes tasks (cotrain, frozen), "
                f"got mode={mode!r}")
    return None
