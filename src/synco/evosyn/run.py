"""The factor space inside a run: build it from the domain, reflect between steps, log and restore it.

Run-directory files::

    factor_space.json   the current space (rewritten whenever it changes)
    factors.jsonl       one line per change (promote / confirm / retire) with the step and its evidence,
                        and the control check's steer / observe with its control evidence; with the LLM
                        proposer also propose (a new candidate) / reject (an unusable proposal)
    reflector.jsonl     one line per reflection: every candidate's evidence, promoted or not
    learning_effect.jsonl  one line per training transition: each cell's success before and after it, on new
                        tasks, and its share of what the training received (:mod:`synco.evosyn.effect`)
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
import random
from collections.abc import Callable, Sequence

from synco.evosyn.config import EvoSynConfig
from synco.evosyn.control import check_control, pending
from synco.evosyn.config import DesignerConfig
from synco.evosyn.effect import EffectWeights, Period, Transition, effect_weights, transition
from synco.evosyn.proposed import RAW_CHARS, ProposedFactor
from synco.evosyn.proposer import parse_proposal, pick_examples, proposer_prompt, to_def
from synco.evosyn.reflector import Reflection, python_seed, reflect
from synco.evosyn.space import (Cell, FactorChange, FactorDef, FactorSpace, HasFactorSpace, cell_key,
                                factor_subject, feasible_cells)
from synco.core.jsonl import read_jsonl, truncate_jsonl
from synco.core.records import CARD_FIELDS, TaskCard, TaskPayload, TaskRecord, payload_type


@dataclass
class EvoState:
    """The factor space of a run and what the domain offers for it."""

    space: FactorSpace
    defs: list[FactorDef]  # every factor the domain can compute: the built-in ones and the candidates
    builtin: list[str]
    cells: list[Cell]  # feasible cells of the current space (recomputed when it changes)
    sample: Callable[[random.Random], str] | None = None  # the domain's problem generator, for feasibility
    effects: list[Transition] = field(default_factory=list)  # learning_effect.jsonl so far: the measured transitions
    payload_type: type[TaskPayload] | None = None
    """The domain's card payload type: a card's factor values are computed from its payload read as this type
    (:func:`~synco.evosyn.space.factor_subject`, as the step's); None: each card's payload as it holds it."""

    def refresh_cells(self) -> None:
        """Recompute the feasible cells after the space changed."""
        self.cells = self.feasible(self.space)

    def feasible(self, space: FactorSpace) -> list[Cell]:
        """Feasible cells of ``space`` (this space or a trial one) under the domain's generator."""
        return feasible_cells(space, self.defs, self.sample) if self.sample is not None else []

    def effect_weights(self, cfg: DesignerConfig) -> EffectWeights:
        """The cells' learning-effect weights from the measured transitions (:func:`~synco.evosyn.effect.effect_weights`)."""
        return effect_weights(self.effects, cfg.effect_memory, cfg.effect_floor)

    def cell_effects(self, cfg: DesignerConfig) -> dict[Cell, float]:
        """The Designer's view of :meth:`effect_weights`: one weight per feasible cell."""
        w = self.effect_weights(cfg)
        return {c: w.of(cell_key(c)) for c in self.cells}

    def add_proposal(self, p: ProposedFactor, max_candidates: int) -> list[ProposedFactor]:
        """Keep ``p`` in the space and its extractor in ``defs`` (dropping the oldest idle proposals beyond
        ``max_candidates``, returned); the cells are unchanged since the factors in use are."""
        before = {q.name for q in self.space.proposed} | {p.name}
        dropped = self.space.add_proposal(p, max_candidates)
        self.defs = [d for d in self.defs if d.name not in before] + [to_def(q) for q in self.space.proposed]
        return dropped


def check_factor_names(domain: object, factors: Sequence[str] | None) -> None:
    """Raise ValueError naming every factor of ``evosyn.factors`` the domain cannot compute (and the ones it can);
    nothing to check for None or a domain without a factor space."""
    if factors is None or not isinstance(domain, HasFactorSpace):
        return
    known = [d.name for d in domain.factor_defs()]
    unknown = [n for n in factors if n not in known]
    if unknown:
        raise ValueError(f"evosyn.factors: unknown factor(s) {unknown} for this domain; known: {', '.join(known)}")


def build_evo_state(domain: object, space: FactorSpace | None = None,
                    factors: Sequence[str] | None = None) -> EvoState | None:
    """The domain's factor space (``space`` when resuming), or None when the domain has none (:class:`HasFactorSpace`).

    ``factors``: the factors a new space starts with (``evosyn.factors``; None: the domain's built-in ones); they
    are never retired. A name the domain cannot compute raises ValueError naming it and the known ones.
    """
    if not isinstance(domain, HasFactorSpace):
        return None
    check_factor_names(domain, factors)
    defs = list(domain.factor_defs())
    builtin = list(domain.builtin_factors if factors is None else factors)
    sample = domain.sample_any
    if space is None:
        by_name = {d.name: d for d in defs}
        space = FactorSpace.from_defs([by_name[n] for n in builtin])  # in the order given: the first is each cell's parent
    known = {d.name for d in defs}
    defs += [to_def(p) for p in space.proposed if p.name not in known]  # the LLM proposer's, on resume
    evo = EvoState(space=space, defs=defs, builtin=builtin, cells=[], sample=sample,
                   payload_type=payload_type(domain))
    evo.refresh_cells()
    return evo


def reflect_and_log(evo: EvoState, records: list[TaskRecord], cfg: EvoSynConfig, step: int, seed: int,
                    run_dir: Path) -> Reflection:
    """One reflection on ``records`` (mutates the space); appends to factors.jsonl / reflector.jsonl."""
    r = cfg.reflector_settings
    records = with_proposed_values(records, evo)
    reflection = reflect(records, evo.space, evo.defs, evo.builtin, r, step, python_seed(seed, step),
                         n_cells=lambda sp: len(evo.feasible(sp)))
    with open(run_dir / "reflector.jsonl", "a") as f:
        f.write(json.dumps({"step": step, "n_tasks": reflection.n_tasks, "space_version": evo.space.version,
                            "candidates": {k: {**v.model_dump(), "excess": v.excess}
                                           for k, v in reflection.candidates.items()}}) + "\n")
    if reflection.changes:
        with open(run_dir / "factors.jsonl", "a") as f:
            for ch in reflection.changes:
                f.write(ch.model_dump_json() + "\n")
        evo.refresh_cells()
        write_space(evo, run_dir)
    return reflection


def control_and_log(evo: EvoState, recent: Callable[[], list[TaskRecord]], cfg: EvoSynConfig, step: int,
                    run_dir: Path) -> list[FactorChange]:
    """The control check after a step (:mod:`synco.evosyn.control`): judge promoted factors with enough targeted
    cards, append the decisions to factors.jsonl and refresh the cells when one leaves them.

    ``recent()`` (the Reflector's window) is read only while a promoted factor awaits its check.
    """
    if cfg.reflector_settings.min_control <= 0 or not pending(evo.space):
        return []
    changes = check_control(recent(), evo.space, cfg.reflector_settings, step)
    for ch in changes:
        _append_change(run_dir, ch)
    if any(ch.action == "observe" for ch in changes):  # a steer leaves the cells as they are
        evo.refresh_cells()
    if changes:
        write_space(evo, run_dir)
    return changes


EFFECT_FILE = "learning_effect.jsonl"


def log_transition(evo: EvoState, pre: Period, post: Period, before: Period | None, step: int, period: int,
                   run_dir: Path) -> Transition:
    """One training transition (the pre period, the post period, and the period before the pre one for the change
    in allocation); appended to ``learning_effect.jsonl`` and to ``evo.effects``."""
    t = Transition(step=step, period=period, pre_steps=pre.steps, post_steps=post.steps, pre_version=pre.version,
                   post_version=post.version,
                   cells=transition(pre.cells, post.cells, before.cells if before is not None else None))
    with open(run_dir / EFFECT_FILE, "a") as f:
        f.write(t.model_dump_json() + "\n")
    evo.effects.append(t)
    return t


def read_effects(run_dir: Path, error: type[Exception] = ValueError) -> list[Transition]:
    """The transitions ``learning_effect.jsonl`` holds (a resumed run's, already rewound by :func:`truncate_logs`):
    a torn last line is dropped, any other line that is not a transition raises ``error`` naming file:line
    (:func:`synco.core.jsonl.read_jsonl`)."""
    return read_jsonl(run_dir / EFFECT_FILE, Transition, "learning-effect transition", error=error, torn_tail=True)


def with_proposed_values(records: list[TaskRecord], evo: EvoState) -> list[TaskRecord]:
    """``records`` with each proposed factor's value filled in where the card lacks it (cards recorded before the
    proposal), computed from the card's factor subject as the step computes it for new cards
    (:func:`~synco.evosyn.space.factor_subject` of the payload: the problem, or e.g. the tools world's instruction and
    gold actions); the given records are not changed."""
    names = {p.name for p in evo.space.proposed}
    defs = [d for d in evo.defs if d.name in names]
    if not defs:
        return records
    out = []
    for rec in records:
        card = rec.card
        missing = [d for d in defs if card is not None and d.name not in card.factors]
        if card is None or not missing:
            out.append(rec)
            continue
        factors = dict(card.factors)
        subject = factor_subject(card, evo.payload_type)
        for d in missing:
            v = d.value(subject)
            if v is not None:
                factors[d.name] = v
        out.append(rec.model_copy(update={"card": card.model_copy(update={"factors": factors})}))
    return out


def factor_names(evo: EvoState, domain: object) -> set[str]:
    """Names a proposal must not take: every factor the space or the domain knows, and the factors the domain
    writes on every card (``card_factors`` of a blank card, e.g. the math domain's ``difficulty``)."""
    names = {d.name for d in evo.defs} | {f.name for f in evo.space.factors} | {p.name for p in evo.space.proposed}
    card_factors = getattr(domain, "card_factors", None)
    if callable(card_factors):
        try:
            names |= set(card_factors(TaskCard(**{f: "" for f in CARD_FIELDS})))
        except Exception:  # noqa: BLE001 - a domain that cannot label a blank card reserves nothing more
            pass
    return names


def propose_and_log(evo: EvoState, records: list[TaskRecord], cfg: EvoSynConfig, step: int, seed: int,
                    run_dir: Path, generate: Callable[[str], str], domain: object = None,
                    prompts_dir: str | Path | None = None) -> ProposedFactor | None:
    """One LLM proposal: pick failed / solved problems of ``records``, ask ``generate`` (prompt -> model text),
    parse; a valid one joins the space's candidates (``propose`` in factors.jsonl, factor_space.json rewritten),
    anything else is a ``reject`` line with the text clipped. Returns the proposal, or None.

    Skipped (None, nothing logged) when the window has no failed or no solved problem: there is nothing to
    separate yet. A ``generate`` that raises is logged as a reject, never raised: a proposal is never worth a step.
    """
    ps = cfg.proposer_settings
    ex = pick_examples(records, ps.examples, random.Random(f"proposer:{seed}:{step}"))
    if not ex.failed or not ex.solved:
        return None
    taken = factor_names(evo, domain)
    prompt = proposer_prompt(ex.failed, ex.solved, taken, prompts_dir)
    try:
        text = generate(prompt)
    except Exception as e:  # noqa: BLE001 - the step goes on without a proposal
        text, why = "", f"generation failed: {type(e).__name__}: {str(e)[:200]}"
    else:
        why = "no valid proposal (strict JSON with a new name and 2-4 keyword buckets)"
    p = parse_proposal(text, taken, step)
    if p is None:
        _append_change(run_dir, FactorChange(step=step, action="reject", factor="proposal",
                                             version=evo.space.version, note=f"{why}: {text[:RAW_CHARS]!r}"))
        return None
    dropped = evo.add_proposal(p, ps.max_candidates)
    note = "; ".join(f"{b}: {', '.join(kws)}" for b, kws in p.buckets.items())
    if dropped:
        note += " (dropped the oldest candidate " + ", ".join(q.name for q in dropped) + ")"
    _append_change(run_dir, FactorChange(step=step, action="propose", factor=p.name, version=evo.space.version,
                                         note=note))
    write_space(evo, run_dir)
    return p


def _append_change(run_dir: Path, change: FactorChange) -> None:
    with open(run_dir / "factors.jsonl", "a") as f:
        f.write(change.model_dump_json() + "\n")


def write_space(evo: EvoState, run_dir: Path) -> None:
    """``factor_space.json``: the space and its feasible cells."""
    data = {**evo.space.model_dump(), "n_cells": len(evo.cells)}
    tmp = run_dir / ".factor_space.json.tmp"
    tmp.write_text(json.dumps(data, indent=2))
    tmp.replace(run_dir / "factor_space.json")


def truncate_logs(run_dir: Path, last_step: int, error: type[Exception] = ValueError,
                  log: Callable[[str], None] = print) -> None:
    """Drop factors.jsonl / reflector.jsonl / learning_effect.jsonl lines after ``last_step`` (a resumed run redoes
    them), as the run's other logs (:func:`synco.core.jsonl.truncate_jsonl`): a torn last line (a kill while
    writing) is dropped and reported through ``log``; an unreadable line elsewhere raises ``error`` naming it."""
    for name in ("factors.jsonl", "reflector.jsonl", EFFECT_FILE):
        truncate_jsonl(run_dir / name, last_step, error=error, log=log)
