"""Where a step's cards come from, chosen once at setup (:func:`card_source`).

* :class:`SynthesizerCards`: the Synthesizer writes them from the capability report, in one context per
  Designer cell (EvoSyn: the Designer splits the N slots over the factor space's cells, each context's prompt
  names its cell and its cards form one GRPO group) or in ``n_contexts`` report-only contexts (plain SynCo).
* :class:`DesignerCards`: the Designer alone (``designer``): its cells and slots, each cell's cards drawn uniformly
  within it by the domain's generator (:class:`~synco.domains.base.HasCellCards`), no Synthesizer.
* :class:`CorpusCards`: no model writes them: ``static`` revisits a fixed corpus drawn once from the domain's
  generator (the paper's static-corpus baseline), ``uniform`` draws fresh ones every step.

A source returns one :class:`Draft` per card slot — its raw text, the sample that wrote it (for the
Synthesizer's update), its context and target cell — and the Designer's decision (:class:`Design`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Protocol

from synco.core.policy import generate_seeded
from synco.core.report import build_report
from synco.core.sampling import Completion
from synco.cotrain.settings import MODE_TRAITS, StepState, request_seed
from synco.cotrain.stats import Design
from synco.domains.base import HasCellCards
from synco.evosyn.designer import allocate, cell_needs, cell_stats
from synco.evosyn.space import Cell



@dataclass(frozen=True)
class Draft:
    """One card slot before verification: the raw text, the Synthesizer's sample that wrote it (None: a corpus
    card), its synthesis context (its GRPO group), the cell that context asked for, and the Synthesizer's version."""

    raw: str
    sample: Completion | None = None
    context_id: int = 0
    target: Cell | None = None
    version: int | None = None


@dataclass
class ContextPlan:
    """One Synthesizer context of a step: its target cell (None: no target) and its number of cards."""

    target: Cell | None
    n: int


class CardSource(Protocol):
    """A step's cards: ``n_cards`` drafts and what the Designer decided (``t``: seconds spent sampling)."""

    def draw(self, state: StepState) -> tuple[list[Draft], Design, float]: ...


class SynthesizerCards:
    """The Synthesizer writes the step's cards, steered by the Designer when the run has one."""

    def __init__(self, designer: bool) -> None:
        self.designer = designer

    def draw(self, state: StepState) -> tuple[list[Draft], Design, float]:
        s = state.settings
        contexts, design = self.plan(state)
        report = state.report if s.evosyn.feedback else build_report([])
        system = state.domain.synthesizer_system_prompt()
        prompts = [state.synthesizer.format_prompt(state.domain.synthesizer_prompt(report, target=c.target),
                                                   system=system) for c in contexts]
        t = time.perf_counter()
        if len({c.n for c in contexts}) == 1:
            groups = generate_seeded(state.synthesizer, prompts, contexts[0].n, s.synth_sampling, request_seed(state))
        else:  # contexts of different sizes: one row per card, regrouped by context
            flat = generate_seeded(state.synthesizer, [p for p, c in zip(prompts, contexts) for _ in range(c.n)], 1,
                                   s.synth_sampling, request_seed(state))
            it = iter(g[0] for g in flat)
            groups = [[next(it) for _ in range(c.n)] for c in contexts]
        dt = time.perf_counter() - t
        drafts = [Draft(c.text, c, ci, contexts[ci].target, c.version) for ci, g in enumerate(groups) for c in g]
        return drafts, design, dt

    def plan(self, state: StepState) -> tuple[list[ContextPlan], Design]:
        """The step's contexts: one per cell with slots (Designer), else ``n_contexts`` equal-as-possible ones.

        Never drops or adds a card: the context sizes always sum to ``n_cards``.
        """
        s, evo = state.settings, state.evo
        if self.designer and evo is not None and evo.cells:
            cfg = s.evosyn.designer_settings
            stats = cell_stats(state.pool.recent(s.window), evo.space) if s.evosyn.feedback else {}
            effect = evo.cell_effects(cfg) if cfg.effect and s.evosyn.feedback else None  # learning-effect feedback
            slots = allocate(evo.cells, stats, s.n_cards, cfg, feedback=s.evosyn.feedback, offset=state.rng.random(),
                             effect=effect)
            gaps = cell_needs(evo.cells, stats, cfg, s.evosyn.feedback)
            return [ContextPlan(c or None, n) for c, n in slots.items() if n > 0], Design(slots, gaps)  # () = no target
        n_ctx = min(s.n_contexts, s.n_cards)
        base, extra = divmod(s.n_cards, n_ctx)
        return [ContextPlan(None, base + (i < extra)) for i in range(n_ctx)], Design()


class DesignerCards(SynthesizerCards):
    """The Designer's cells and slots, as a steered Synthesizer gets them, filled by the domain's own generator."""

    def __init__(self) -> None:
        super().__init__(designer=True)

    def draw(self, state: StepState) -> tuple[list[Draft], Design, float]:
        domain = state.domain
        if not isinstance(domain, HasCellCards):  # the config refuses it; a domain swapped in later is a bug
            raise TypeError(f"mode=designer: domain {domain.name!r} cannot draw cards inside a cell (HasCellCards)")
        contexts, design = self.plan(state)
        drafts = [Draft(raw, None, ci, c.target) for ci, c in enumerate(contexts)
                  for raw in domain.cell_cards(state.rng, c.target or (), c.n)]
        return drafts, design, 0.0


class CorpusCards:
    """Cards no model wrote: the fixed corpus, revisited (``static``; distinct within a step while it lasts), or
    fresh draws from the domain's generator every step (``uniform``, or a static run without a corpus)."""

    def __init__(self, corpus: list[str] | None) -> None:
        self.corpus = corpus

    def draw(self, state: StepState) -> tuple[list[Draft], Design, float]:
        n, rng = state.settings.n_cards, state.rng
        if not self.corpus:
            raws = state.domain.static_cards(rng, n)
        else:
            raws = []
            while len(raws) < n:
                raws += rng.sample(self.corpus, min(len(self.corpus), n - len(raws)))
        return [Draft(raw) for raw in raws], Design(), 0.0


def card_source(mode: str, designer: bool, corpus: list[str] | None) -> CardSource:
    """The run's card source, from its mode's traits: the Synthesizer (steered by the Designer in ``cotrain`` /
    ``frozen`` runs with one), the domain drawing inside the Designer's cells (``designer``) or, in ``static`` /
    ``uniform`` runs, the domain's generator (a fixed corpus, or fresh draws)."""
    traits = MODE_TRAITS[mode]
    if traits.revisits_corpus:
        return CorpusCards(corpus)
    if traits.draws_in_cells:
        return DesignerCards()
    if traits.reads_report:
        return SynthesizerCards(designer)
    return CorpusCards(None)


__all__ = ["CardSource", "ContextPlan", "CorpusCards", "DesignerCards", "Draft", "SynthesizerCards", "card_source"]
