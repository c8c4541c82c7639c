"""What every step of a run shares: its frozen :class:`StepSettings`, a protocol's :class:`StepPlan` for one step,
the :class:`StepState` a stage reads, and :func:`request_seed`, where every request of a run draws its seed.

A leaf of ``synco.cotrain``: the stages (``cards``, ``labels``) and the step (``engine``) import it, never the
other way round.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Literal, Protocol

from synco.core.episodes import MAX_EPISODE_TOKENS, MAX_TURNS, EpisodeLimits
from synco.core.policy import GENERATION_BATCH_SIZE, Policy
from synco.core.sampling import SamplingParams
from synco.core.pool import TaskPool
from synco.core.report import CapabilityReport
from synco.core.rewards import ReasonerRewardConfig, SynthesizerRewardConfig
from synco.domains.base import Domain
from synco.evosyn.config import EvoSynConfig
from synco.evosyn.run import EvoState
from synco.grading.verifier import TaskVerifier

Mode = Literal["cotrain", "frozen", "static", "uniform", "designer"]


@dataclass(frozen=True)
class ModeTraits:
    """What a mode means to the step and to the config's checks, declared once per mode (read these, never the
    mode's name)."""

    trains_synthesizer: bool
    """The Synthesizer may take its GRPO step (``cotrain``; a step's plan may still skip it)."""
    revisits_corpus: bool
    """The cards come from a fixed corpus revisited on purpose (``static``): no novelty against the pool, and a valid
    problem is not admitted to the novelty index."""
    reads_report: bool
    """A model writes the cards from the capability report (``cotrain`` / ``frozen``), so a card is rewarded for
    following what the report asks."""
    draws_in_cells: bool
    """The domain draws the cards inside the Designer's cells (``designer``: needs the Designer and ``HasCellCards``)."""

    @property
    def cells_decide_cards(self) -> bool:
        """Whether the cards can follow the Designer's cells (a model writing from the report, or the domain drawing
        inside the cells), so the Reflector's factors can steer them."""
        return self.reads_report or self.draws_in_cells


MODE_TRAITS: dict[str, ModeTraits] = {
    "cotrain": ModeTraits(trains_synthesizer=True, revisits_corpus=False, reads_report=True, draws_in_cells=False),
    "frozen": ModeTraits(trains_synthesizer=False, revisits_corpus=False, reads_report=True, draws_in_cells=False),
    "static": ModeTraits(trains_synthesizer=False, revisits_corpus=True, reads_report=False, draws_in_cells=False),
    "uniform": ModeTraits(trains_synthesizer=False, revisits_corpus=False, reads_report=False, draws_in_cells=False),
    "designer": ModeTraits(trains_synthesizer=False, revisits_corpus=False, reads_report=False, draws_in_cells=True),
}
"""Every :data:`Mode`'s traits."""


@dataclass(frozen=True)
class StepSettings:
    """The per-step knobs of the loop (a view of the run config), the same for every step of a run.

    Frozen: what a protocol changes per step is a :class:`StepPlan`; a different setting is a new object
    (``dataclasses.replace``).
    """

    mode: Mode = "cotrain"
    n_cards: int = 32
    n_contexts: int = 1
    k: int = 4
    group_factor: str = "level"
    synth_sampling: SamplingParams = field(default_factory=SamplingParams)
    reasoner_sampling: SamplingParams = field(default_factory=SamplingParams)
    reasoner_rewards: ReasonerRewardConfig = field(default_factory=ReasonerRewardConfig)
    synth_rewards: SynthesizerRewardConfig = field(default_factory=SynthesizerRewardConfig)
    synth_scale_by_std: bool = True
    reasoner_scale_by_std: bool = True
    consensus: bool = True  # apply the verifier's consensus check (no-oracle domains)
    consensus_m: int = 4  # answers the separate consensus checker samples per valid card
    checker_sampling: SamplingParams = field(default_factory=SamplingParams)
    evosyn: EvoSynConfig = field(default_factory=lambda: EvoSynConfig(designer=False, reflector=False))
    window: int = 500  # recent pool records the Designer measures cells on
    seed_per_request: bool = False  # every generate call gets its own seed from the run's rng (see request_seed)
    max_turns: int = MAX_TURNS  # domains with an environment: agent turns per episode
    max_episode_tokens: int = MAX_EPISODE_TOKENS  # domains with an environment: ids after the prompt per episode
    episode_group_size: int = GENERATION_BATCH_SIZE  # episodes per job (one lockstep batch, one seed): the Reasoner's generation_batch_size

    @property
    def limits(self) -> EpisodeLimits:
        return EpisodeLimits(self.max_turns, self.max_episode_tokens)

    # What the mode means to the step, in one place (the step reads these, never the mode's name): ModeTraits.

    @property
    def trains_synthesizer(self) -> bool:
        return MODE_TRAITS[self.mode].trains_synthesizer

    @property
    def revisits_corpus(self) -> bool:
        return MODE_TRAITS[self.mode].revisits_corpus

    @property
    def reads_report(self) -> bool:
        return MODE_TRAITS[self.mode].reads_report

    @property
    def cells_decide_cards(self) -> bool:
        return MODE_TRAITS[self.mode].cells_decide_cards


@dataclass(frozen=True)
class StepPlan:
    """What a training protocol decides for one step (``synco.cotrain.protocols``); the default is online co-training."""

    update_synthesizer: bool = True  # False: the Synthesizer takes no GRPO step (alternating: the Reasoner's phases)
    update_reasoner: bool = True  # False: the Reasoner only solves (rounds / rft collection, the Synthesizer's phases)
    protocol: str = "online"
    round: int | None = None  # recorded with the step (pool and metrics) when set
    phase: str | None = None


ONLINE = StepPlan()


class StepState(Protocol):
    """What the step's stages read of the run's state (``synco.cotrain.engine.CoTrainState``)."""

    settings: StepSettings
    domain: Domain
    synthesizer: Policy
    reasoner: Policy
    verifier: TaskVerifier
    pool: TaskPool
    report: CapabilityReport
    rng: random.Random
    evo: EvoState | None


def request_seed(state: StepState) -> int | None:
    """The seed of the next generate call of a step (or of a protocol's own request), drawn from the run's
    rng, when ``seed_per_request`` is on; every request of a run draws its seed here, in call order.

    Off (the default), generation draws from the global torch RNG as it always did, and the run's rng
    does not move. On, each call's samples depend only on the weights, the prompts and this seed, so a
    Ray run (rollout workers in other processes) records the same step as the in-process one; the rng
    is checkpointed, so resume stays exact.
    """
    return state.rng.getrandbits(63) if state.settings.seed_per_request else None
