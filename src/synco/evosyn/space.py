"""The factor space: named, bucketed task factors the loop steers by, as versioned run state.

A *factor* is a function of a problem computed by the domain (never taken from
the card's claims): ``level`` of an arithmetic problem, the number of carries,
the topic of a word problem. ``FactorDef`` is that function with its buckets;
``FactorSpace`` is the serialisable state of which factors are in use, their
status and where they came from:

* ``standard`` — in use; a built-in factor, or a promoted one that held up;
* ``experimental`` — promoted by the Reflector at some step, in use, to be
  confirmed (→ standard) or retired at the next reflection;
* ``retired`` — no longer in use (kept, with the evidence, for the history).

A factor in use is also either *steered* (the default: the Designer's cells split on it
and a context's prompt asks for its bucket) or *observed* only: a promoted factor the
Synthesizer turned out not to follow (:mod:`synco.evosyn.control`) stays in the space --
it still explains failure, strata the Reflector's later tests and is reported -- but no
longer splits the cells, so the Designer never spends slots on requests that miss.

With ``evosyn.proposer`` on, the space also keeps the keyword factors the Synthesizer
model proposed (``proposed``; see :mod:`synco.evosyn.proposer`), so their extractors are
rebuilt on resume; an unpromoted proposal is a Reflector candidate like any other.

A *cell* is one bucket per steered factor, e.g. ``level=L5,carries=2``: the unit
the Designer allocates card slots to and a Synthesizer context asks for.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol, runtime_checkable

from pydantic import BaseModel, Field

from synco.core.records import TaskCard, TaskPayload
from synco.evosyn.proposed import ProposedFactor

Cell = tuple[tuple[str, str], ...]
"""``((factor, bucket), ...)`` in the space's factor order."""

Status = Literal["standard", "experimental", "retired"]


@dataclass(frozen=True)
class FactorDef:
    """A factor the domain can compute: ``extract(problem)`` -> one of ``buckets``, or None (not applicable)."""

    name: str
    buckets: tuple[str, ...]
    extract: Callable[[str], str | None]
    description: str = ""

    def value(self, problem: str) -> str | None:
        """The problem's bucket; None when the extractor does not apply or returns an unknown bucket."""
        v = self.extract(problem)
        return v if v in self.buckets else None


@runtime_checkable
class HasFactorSpace(Protocol):
    """A domain's optional factor space (a capability, checked with ``isinstance``): what EvoSyn steers by.

    Defined here, where the factor space lives, so this layer needs nothing from the domains above it;
    ``synco.domains.base`` lists it with the other capabilities. A domain without it runs without a
    Designer or Reflector (every context gets the report-only prompt).
    """

    builtin_factors: tuple[str, ...]
    """The factors the space starts with; the rest of :meth:`factor_defs` are the Reflector's candidates."""

    def factor_defs(self) -> list[FactorDef]:
        """Every factor the domain can compute from a problem, the built-in ones included."""
        ...

    def sample_any(self, rng: random.Random) -> str:
        """A problem from the domain's own generator (never a held-out one): to find the feasible cells."""
        ...


class FactorEvidence(BaseModel):
    """What the Reflector measured about one factor on the recent window."""

    cmi: float = Field(description="I(fail; z | current cell) in nats (plug-in estimate).")
    cmi_null: float = Field(description="Mean CMI under the stratified permutation null (the estimate's bias).")
    p_value: float = Field(description="Permutation p-value: (1 + #null >= observed) / (1 + permutations).")
    n_tasks: int
    n_attempts: int
    failure_by_bucket: dict[str, float] = Field(default_factory=dict)
    n_by_bucket: dict[str, int] = Field(default_factory=dict, description="Tasks per bucket.")

    @property
    def excess(self) -> float:
        """CMI above what shuffled labels give: the bias-corrected information."""
        return self.cmi - self.cmi_null


class ControlEvidence(BaseModel):
    """How well the Synthesizer followed one factor: its targeted valid cards since the factor was promoted."""

    rate: float = Field(description="Share of those cards whose realised bucket (recomputed) is the requested one.")
    chance: float = Field(description="The share expected if requests were ignored: sum over buckets of "
                                      "P(requested b) * P(realised b).")
    n_cards: int


class FactorState(BaseModel):
    """One factor in the space: buckets, status, provenance, and whether the Designer steers by it."""

    name: str
    buckets: list[str]
    status: Status = "standard"
    origin: Literal["builtin", "promoted"] = "builtin"
    since_step: int | None = None  # step of promotion (None: built in)
    evidence: FactorEvidence | None = None  # the evidence it was promoted (or last confirmed) on
    steered: bool = True  # False: observed only (the Synthesizer did not follow it): not part of the cells
    control: ControlEvidence | None = None  # the control check's evidence (None: not judged yet)


SPACE_CHANGES = ("promote", "confirm", "retire", "observe")
"""``FactorChange`` actions that change the factor space or its cells (the LLM proposer's ``propose`` /
``reject`` and the control check's ``steer`` -- the factor stays as it is -- do not)."""


class FactorChange(BaseModel):
    """One line of ``factors.jsonl``: a decision of the Reflector (or its control check) and its evidence."""

    step: int
    # propose / reject: the LLM proposer; steer / observe: the control check (a promoted factor kept as a
    # control, or kept observed only because the Synthesizer did not follow it)
    action: Literal["promote", "confirm", "retire", "reject", "propose", "steer", "observe"]
    factor: str
    version: int  # space version after the change
    evidence: FactorEvidence | None = None
    control: ControlEvidence | None = None
    note: str = ""


class FactorSpace(BaseModel):
    """The factors in use (versioned): saved with checkpoints, restored on resume."""

    version: int = 0
    factors: list[FactorState] = Field(default_factory=list)
    proposed: list[ProposedFactor] = Field(default_factory=list, description="Keyword factors the LLM proposer suggested, oldest first (promoted ones stay).")

    @classmethod
    def from_defs(cls, defs: Iterable[FactorDef]) -> "FactorSpace":
        """A space whose built-in (standard) factors are ``defs``."""
        return cls(factors=[FactorState(name=d.name, buckets=list(d.buckets)) for d in defs])

    def active(self) -> list[FactorState]:
        """Factors in use (standard and experimental), in order."""
        return [f for f in self.factors if f.status != "retired"]

    def active_names(self) -> list[str]:
        return [f.name for f in self.active()]

    def steered(self) -> list[FactorState]:
        """Factors in use that split the cells (the Designer steers by them), in order."""
        return [f for f in self.active() if f.steered]

    def get(self, name: str) -> FactorState | None:
        return next((f for f in self.factors if f.name == name), None)

    def cell_of(self, values: Mapping[str, str]) -> Cell | None:
        """The cell of a problem's factor values, or None when a steered factor is missing/out of its buckets."""
        out = []
        for f in self.steered():
            v = values.get(f.name)
            if v is None or v not in f.buckets:
                return None
            out.append((f.name, v))
        return tuple(out)

    def promote(self, d: FactorDef, step: int, evidence: FactorEvidence) -> FactorChange:
        """Add ``d`` as an experimental factor (or bring a retired one back)."""
        old = self.get(d.name)
        if old is not None:
            self.factors.remove(old)
        self.factors.append(FactorState(name=d.name, buckets=list(d.buckets), status="experimental",
                                        origin="promoted", since_step=step, evidence=evidence))
        self.version += 1
        return FactorChange(step=step, action="promote", factor=d.name, version=self.version, evidence=evidence)

    def confirm(self, name: str, step: int, evidence: FactorEvidence) -> FactorChange:
        """An experimental factor that still explains failure becomes standard."""
        f = self._require(name)
        f.status, f.evidence = "standard", evidence
        self.version += 1
        return FactorChange(step=step, action="confirm", factor=name, version=self.version, evidence=evidence)

    def steer(self, name: str, step: int, control: ControlEvidence, note: str = "") -> FactorChange:
        """The Synthesizer follows a promoted factor: it stays a control (the cells are unchanged)."""
        f = self._require(name)
        f.control = control
        return FactorChange(step=step, action="steer", factor=name, version=self.version, control=control, note=note)

    def observe(self, name: str, step: int, control: ControlEvidence, note: str = "") -> FactorChange:
        """The Synthesizer does not follow a promoted factor: keep it in use, observed only (out of the cells)."""
        f = self._require(name)
        f.steered, f.control = False, control
        self.version += 1
        return FactorChange(step=step, action="observe", factor=name, version=self.version, control=control,
                            note=note)

    def retire(self, name: str, step: int, evidence: FactorEvidence | None, note: str = "") -> FactorChange:
        """Take a factor out of use (it stays in the history)."""
        f = self._require(name)
        f.status = "retired"
        self.version += 1
        return FactorChange(step=step, action="retire", factor=name, version=self.version, evidence=evidence,
                            note=note)

    def add_proposal(self, p: ProposedFactor, max_candidates: int) -> list[ProposedFactor]:
        """Keep ``p``; drop the oldest proposals not in use beyond ``max_candidates``; returns the dropped ones.

        The version is unchanged: the factors in use are the same.
        """
        if max_candidates < 1:
            raise ValueError(f"max_candidates must be >= 1, got {max_candidates}")
        if self.get(p.name) is not None or any(q.name == p.name for q in self.proposed):
            raise ValueError(f"proposed factor name {p.name!r} is already in the space")
        self.proposed.append(p)
        in_use = set(self.active_names())
        idle = [q for q in self.proposed if q.name not in in_use]
        dropped = idle[:max(0, len(idle) - max_candidates)]
        gone = {q.name for q in dropped}
        self.proposed = [q for q in self.proposed if q.name not in gone]
        return dropped

    def _require(self, name: str) -> FactorState:
        f = self.get(name)
        if f is None:
            raise KeyError(f"factor {name!r} is not in the space ({', '.join(x.name for x in self.factors)})")
        return f


def cell_key(cell: Cell) -> str:
    """``level=L5,carries=2`` (the form used in prompts, metrics and plots)."""
    return ",".join(f"{k}={v}" for k, v in cell)


def parse_cell_key(key: str) -> Cell:
    """Inverse of :func:`cell_key`; the empty string is the empty cell."""
    if not key:
        return ()
    out = []
    for part in key.split(","):
        name, sep, value = part.partition("=")
        if not sep or not name:
            raise ValueError(f"cell {key!r}: part {part!r} is not factor=bucket")
        out.append((name, value))
    return tuple(out)


def factor_subject(card: TaskCard, kind: type[TaskPayload] | None = None) -> str:
    """What the factor extractors read for ``card``: its payload's :meth:`~synco.core.records.TaskPayload.factor_subject`
    (the problem; the instruction and its gold actions in the tools world), the payload read as ``kind`` (the domain's
    payload type; None: as the card holds it). The one source of a card's factor values: the step, the Reflector's
    values of older cards, and through the cards' factors the Designer and the learning effect."""
    return (card.payload if kind is None else card.payload_as(kind)).factor_subject()


def factor_values(subject: str, defs: Sequence[FactorDef]) -> dict[str, str]:
    """Every applicable factor value of ``subject`` (a card's :func:`factor_subject`, or a generated problem),
    bucketed, computed by the domain's extractors."""
    out = {}
    for d in defs:
        v = d.value(subject)
        if v is not None:
            out[d.name] = v
    return out


def feasible_cells(space: FactorSpace, defs: Sequence[FactorDef], sample: Callable[[random.Random], str],
                   n: int = 4000, seed: int = 0) -> list[Cell]:
    """Cells of the space that occur among ``n`` problems from the domain's generator, in a stable order.

    Cells no problem can realise (``level=L1,answer_digits=6``) are never allocated.
    """
    rng = random.Random(seed)
    by_name = {d.name: d for d in defs}
    active = [by_name[f.name] for f in space.steered() if f.name in by_name]
    seen: dict[Cell, None] = {}
    for _ in range(n):
        cell = space.cell_of(factor_values(sample(rng), active))
        if cell is not None:
            seen.setdefault(cell, None)
    order = {f.name: {b: i for i, b in enumerate(f.buckets)} for f in space.active()}
    return sorted(seen, key=lambda c: tuple(order[k][v] for k, v in c))
