"""The arith world's warm-start data: what its two tiny agents are trained on and how their outputs are scored.

* the **Reasoner** on ``Q:<problem>\\nA:`` -> ``\\boxed{<answer>}``, levels weighted toward the easy end
  (:data:`REASONER_LEVEL_WEIGHTS`), so that before co-training it solves the easy levels, fails the hard ones and is
  *partially* competent on several levels in between;
* the **Synthesizer** on ``<report>\\nDO:<cell>\\nCARD:`` -> a compact nine-field JSON card of a problem *in* that
  cell, so it learns ``target cell -> card`` (the Designer's cell, e.g. ``level=L8,carries=0``: the level plus, with
  some probability, one or rarely two of the candidate factors the Reflector may promote; half of the cells drawn
  uniformly among the feasible ones so rare cells are trained too, see :class:`TargetMix`). The report prefix is
  random, so the card never depends on it; without a ``DO:`` line (15 % of prompts) the level is uniform.

Each example stream draws from a ``random.Random`` the trainer seeds; nothing here imports torch. The training
itself is :mod:`synco.learn.pretrain`'s and the recipe (steps, sizes, what ``meta.json`` records) is
:mod:`synco.run.pretrain.arith`'s.
"""

from __future__ import annotations

import json
import random
from collections import Counter
from collections.abc import Generator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from itertools import combinations
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, Field

from synco.core.records import CARD_FIELDS
from synco.domains.arith import ARITH_FACTORS, ArithDomain
from synco.domains.warm_start import Pair, draw_factors, random_report
from synco.evosyn.space import Cell, FactorSpace, factor_values, feasible_cells

if TYPE_CHECKING:
    from synco.domains.base import HeldoutItem

REASONER_LEVEL_WEIGHTS: tuple[float, ...] = (6, 6, 5, 5, 4, 3, 3, 2, 1.5, 1, 1)
"""Relative share of each level (L1..L11) in the Reasoner's SFT data.

Easy levels must dominate: they bootstrap the digit-alignment circuits every
level needs (with the weight shifted toward L4..L8 the model did not leave its
loss plateau within 700 steps; with this mix it leaves it after ~500)."""


HELDOUT_SEED = 12345
"""Seed of the held-out sample the warm start is scored on."""


class TargetMix(BaseModel):
    """How the Synthesizer's training prompts name a target cell (``DO:level=L8,carries=0``).

    A target always names the level, plus candidate factors the Reflector may
    promote at run time (usually one, at most two). Half of the cells are drawn
    uniformly among the feasible cells of their factor set, so rare-but-feasible
    cells are trained as well as common ones; the rest come from the natural
    distribution (uniform level, then the realised cell of a sampled problem).

    ``carries`` is drawn 4x as often as each other candidate: it is the factor
    measured to explain failure beyond the level, and the slowest to learn (a
    cell depends on digit sums; measured on the 64 x 2 Synthesizer: with carries
    in ~35 % of 48k prompts its cards landed in the target cell barely above
    following the level alone, with 100 % of 38k clearly above).
    """

    model_config = ConfigDict(frozen=True)

    p_target: float = Field(0.85, description="Share of prompts with a DO: line (the rest: uniform level, no target).")
    p_one: float = Field(0.7, description="Of the targets: level plus one candidate factor.")
    p_two: float = Field(0.15, description="Of the targets: level plus two candidate factors (else level only).")
    p_uniform: float = Field(0.5, description="Cell uniform over the feasible cells of its factor set (else natural).")
    max_tries: int = Field(2000, description="Problems drawn per cell by rejection before falling back to natural.")
    factor_weights: dict[str, float] = Field(
        default_factory=lambda: {"carries": 4.0},
        description="Relative weight of each candidate factor in a target (missing: 1).")


class ControlStats(BaseModel):
    """How well Synthesizer cards follow their ``DO:`` target cells (one group of targets, one temperature)."""

    n_targets: int
    n: int = Field(description="Cards sampled (n_targets x cards per target).")
    wellformed_rate: float
    valid_rate: float = Field(description="Well-formed, in a level family and not held out.")
    distinct_rate: float = Field(description="Distinct well-formed problems / n.")
    hit_rate: float = Field(description="Share of the valid cards whose realised cell equals the target.")
    level_hit_rate: float = Field(description="Share of the valid cards with the target's level.")
    chance: float = Field(description="hit_rate of a Synthesizer that ignores the target (uniform level).")
    chance_given_level: float = Field(description="hit_rate of one that follows the level only.")


@dataclass(frozen=True)
class CardStats:
    """How well a batch of Synthesizer outputs works as task cards."""

    n: int
    wellformed_rate: float  # json.loads gives an object with all nine fields as non-empty strings
    valid_rate: float  # well-formed, in a level family (the oracle answers) and not held out
    distinct_rate: float  # distinct well-formed problems / n
    level_counts: dict[str, int]  # true level (from the problem) of the valid cards


def reasoner_pair(domain: ArithDomain, rng: random.Random, weights: Sequence[float]) -> Pair:
    """One Reasoner SFT example: (prompt, completion) for a level drawn by ``weights``."""
    level = rng.choices(domain.levels, weights=weights)[0]
    problem = domain.sample_problem(rng, level)
    answer = domain.answer(problem)
    return domain.reasoner_prompt(problem), domain.format_reasoner_answer(answer or "")


CATALOG_SEED = 777
"""Seed of the fixed problem sample the cell catalog (feasible cells, P(cell | level)) is computed on."""


@dataclass(frozen=True)
class CellCatalog:
    """Which cells each target factor set can reach, and how often, under ``domain.sample_problem``.

    ``share`` is P(cell | its level) for every cell seen in the sample (all factor
    sets in one map: a cell names its factors); ``cells`` lists, per factor set,
    the cells seen at least ``min_count`` times (the ones trained uniformly).
    """

    candidates: tuple[str, ...]  # the non-built-in factors, in ARITH_FACTORS order
    cells: Mapping[tuple[str, ...], tuple[Cell, ...]]
    share: Mapping[Cell, float] = field(repr=False)


FACTOR_ORDER = {d.name: i for i, d in enumerate(ARITH_FACTORS)}


_FACTOR_DEFS = {d.name: d for d in ARITH_FACTORS}


def target_tokens() -> list[str]:
    """Whole tokens for the factor names of a ``DO:`` target (``DO:level=``, ``,carries=``, ...).

    Measured: with names split into characters, ``carries``, ``answer_digits``,
    ``zeros`` and ``ones`` all end in ``s=``, and a tiny model learned to read
    their buckets more slowly.
    """
    return ["DO:level=", *(f",{d.name}=" for d in ARITH_FACTORS if d.name != "level")]


def cell_of_problem(problem: str, names: Sequence[str]) -> Cell:
    """The problem's bucket of each factor in ``names`` (an in-family problem has them all)."""
    out = []
    for name in names:
        value = _FACTOR_DEFS[name].value(problem)
        if value is None:
            raise ValueError(f"problem {problem!r} has no {name!r} bucket (not an in-family problem?)")
        out.append((name, value))
    return tuple(out)


def target_factor_sets(candidates: Sequence[str], max_extra: int = 2) -> list[tuple[str, ...]]:
    """``("level",)`` and ``level`` plus every combination of up to ``max_extra`` candidates."""
    return [("level", *combo) for k in range(max_extra + 1) for combo in combinations(candidates, k)]


@lru_cache(maxsize=4)
def cell_catalog(n_per_level: int = 2000, min_count: int = 3, seed: int = CATALOG_SEED) -> CellCatalog:
    """The catalog of the arith world from ``n_per_level`` problems per level (seeded; cached per process).

    A cell seen ``min_count`` times has P(cell | level) >= ~0.0015, so rejection
    sampling with :attr:`TargetMix.max_tries` finds a problem in it almost always.
    """
    domain = ArithDomain()
    builtin = set(domain.builtin_factors)
    candidates = tuple(d.name for d in ARITH_FACTORS if d.name not in builtin)
    sets = target_factor_sets(candidates)
    rng = random.Random(seed)
    counts: Counter[Cell] = Counter()
    for level in domain.levels:
        for _ in range(n_per_level):
            values = factor_values(domain.sample_problem(rng, level), ARITH_FACTORS)
            for names in sets:
                counts[tuple((n, values[n]) for n in names)] += 1
    cells = {names: tuple(sorted((c for c, k in counts.items() if k >= min_count and tuple(n for n, _ in c) == names),
                                 key=cell_order))
             for names in sets}
    return CellCatalog(candidates=candidates, cells=cells, share={c: k / n_per_level for c, k in counts.items()})


def cell_order(cell: Cell) -> tuple[int, ...]:
    """Sort key of a cell: by level, then by each factor's bucket order."""
    return tuple(_FACTOR_DEFS[n].buckets.index(v) for n, v in cell)


def problem_in_cell(domain: ArithDomain, rng: random.Random, cell: Cell, max_tries: int) -> str | None:
    """A training problem whose realised cell is ``cell`` (rejection sampling in its level), or None."""
    level = dict(cell)["level"]
    names = [n for n, _ in cell]
    for _ in range(max_tries):
        problem = domain.sample_problem(rng, level)
        if cell_of_problem(problem, names) == cell:
            return problem
    return None


def synthesizer_example(domain: ArithDomain, rng: random.Random, catalog: CellCatalog,
                        mix: TargetMix) -> tuple[Cell | None, str]:
    """``(target, problem)`` of one Synthesizer example; the problem is always in the target cell.

    No target (probability ``1 - p_target``): a uniform level, as in the untargeted warm start.
    """
    if rng.random() >= mix.p_target:
        return None, domain.sample_problem(rng, rng.choice(domain.levels))
    roll = rng.random()
    k = 2 if roll < mix.p_two else 1 if roll < mix.p_two + mix.p_one else 0
    names = ("level", *sorted(draw_factors(rng, catalog.candidates, mix.factor_weights, k),
                              key=FACTOR_ORDER.__getitem__))
    if rng.random() < mix.p_uniform:
        cell = rng.choice(catalog.cells[names])
        problem = problem_in_cell(domain, rng, cell, mix.max_tries)
        if problem is not None:
            return cell, problem
    problem = domain.sample_problem(rng, rng.choice(domain.levels))
    return cell_of_problem(problem, names), problem


def synthesizer_pair(domain: ArithDomain, rng: random.Random, catalog: CellCatalog | None = None,
                     mix: TargetMix | None = None) -> Pair:
    """One Synthesizer SFT example: a report-like prompt, mostly with a ``DO:`` target, and a correct card in it.

    The report is random (the card never depends on it); the card's level and
    problem follow the target cell when there is one, else the level is uniform.
    """
    report = random_report(rng, domain.levels)
    target, problem = synthesizer_example(domain, rng, catalog or cell_catalog(), mix or TargetMix())
    card = domain.format_card(problem, domain.level_of(problem) or "", domain.answer(problem) or "")
    return domain.synthesizer_prompt(report, target=target), card


def boxed_int(text: str) -> str | None:
    """The integer inside the last ``\\boxed{...}`` of ``text``, or None."""
    start = text.rfind("\\boxed{")
    if start < 0:
        return None
    end = text.find("}", start)
    inner = text[start + 7:end] if end >= 0 else ""
    body = inner[1:] if inner.startswith("-") else inner
    return inner if body and all("0" <= ch <= "9" for ch in body) else None


def wellformed_problem(text: str) -> str | None:
    """The stripped problem of a well-formed card text (a JSON object with all nine fields as non-empty
    strings), else None."""
    try:
        obj = json.loads(text)
    except json.JSONDecodeError:
        return None
    if not isinstance(obj, dict) or not all(isinstance(obj.get(k), str) and obj[k].strip() for k in CARD_FIELDS):
        return None
    return obj["problem"].strip()


def card_stats(domain: ArithDomain, texts: Sequence[str]) -> CardStats:
    """Well-formed, valid and distinct rates of raw card texts, and the true levels of the valid ones."""
    problems: list[str] = []
    levels: Counter[str] = Counter()
    valid = 0
    for text in texts:
        problem = wellformed_problem(text)
        if problem is None:
            continue
        problems.append(problem)
        level = domain.level_of(problem)
        if level is not None and not domain.is_heldout(problem):
            valid += 1
            levels[level] += 1
    n = max(1, len(texts))
    return CardStats(
        n=len(texts),
        wellformed_rate=len(problems) / n,
        valid_rate=valid / n,
        distinct_rate=len(set(problems)) / n,
        level_counts={lv: levels[lv] for lv in domain.levels},
    )


CONTROL_LEVELS = ("L2", "L6", "L8", "L10")
"""Levels of the level x other-factor targets measured (besides carries, which is measured on every level):
one subtraction, one addition and two multiplications."""


def control_targets(domain: ArithDomain, levels: Sequence[str] = CONTROL_LEVELS) -> dict[str, list[Cell]]:
    """Target cells to measure controllability on, by group, as the Designer would allocate them.

    ``level``: every feasible level cell; ``carries``: every feasible level x carries
    cell; each other candidate factor: its feasible cells on ``levels``. Feasible is
    :func:`synco.evosyn.space.feasible_cells` with ``domain.sample_any`` (the Designer's call).
    """
    out: dict[str, list[Cell]] = {}
    defs = domain.factor_defs()
    for d in defs:
        names = ("level",) if d.name == "level" else ("level", d.name)
        space = FactorSpace.from_defs(x for x in defs if x.name in names)
        cells = feasible_cells(space, defs, domain.sample_any)
        if d.name not in ("level", "carries"):
            cells = [c for c in cells if dict(c)["level"] in levels]
        out[d.name] = cells
    return out


def control_stats(domain: ArithDomain, targets: Sequence[Cell], texts: Sequence[str],
                  catalog: CellCatalog) -> ControlStats:
    """Rates of ``texts[i]`` sampled for ``targets[i]``; the realised cell is recomputed from the problem."""
    if len(targets) != len(texts):
        raise ValueError(f"targets ({len(targets)}) and texts ({len(texts)}) differ in length")
    problems: list[str] = []
    valid = hits = level_hits = 0
    for target, text in zip(targets, texts):
        problem = wellformed_problem(text)
        if problem is None:
            continue
        problems.append(problem)
        if domain.level_of(problem) is None or domain.is_heldout(problem):
            continue
        valid += 1
        realised = factor_values(problem, ARITH_FACTORS)
        hits += all(realised.get(k) == v for k, v in target)
        level_hits += realised.get("level") == dict(target).get("level")
    n, distinct_targets = max(1, len(texts)), list(dict.fromkeys(targets))
    share = [catalog.share.get(c, 0.0) for c in distinct_targets]
    return ControlStats(
        n_targets=len(distinct_targets), n=len(texts), wellformed_rate=len(problems) / n, valid_rate=valid / n,
        distinct_rate=len(set(problems)) / n, hit_rate=hits / max(1, valid), level_hit_rate=level_hits / max(1, valid),
        chance=sum(share) / max(1, len(share)) / len(domain.levels),
        chance_given_level=sum(share) / max(1, len(share)),
    )


CONTROL_TEMPERATURES = (0.7, 1.0)
"""Sampling temperatures controllability is measured at (0.7: the arith preset's)."""


# ----------------------------------------------------------------- example streams (what the trainer is handed)


def reasoner_examples(rng: random.Random) -> Generator[Pair, None, None]:
    """The Reasoner's endless stream of :func:`reasoner_pair` examples, levels by :data:`REASONER_LEVEL_WEIGHTS`."""
    domain = ArithDomain()
    while True:
        yield reasoner_pair(domain, rng, REASONER_LEVEL_WEIGHTS)


def synthesizer_examples(rng: random.Random, targets: TargetMix) -> Generator[Pair, None, None]:
    """The Synthesizer's endless stream of :func:`synthesizer_pair` examples, target cells named by ``targets``."""
    domain = ArithDomain()
    catalog = cell_catalog()
    while True:
        yield synthesizer_pair(domain, rng, catalog, targets)


# ----------------------------------------------------------------- scoring generated texts


def reasoner_prompts(domain: ArithDomain, items: Sequence[HeldoutItem]) -> list[str]:
    """The Reasoner's prompt of each held-out item."""
    return [domain.reasoner_prompt(it.problem) for it in items]


def reasoner_accuracy(domain: ArithDomain, items: Sequence[HeldoutItem], texts: Sequence[str]) -> dict[str, float]:
    """Accuracy per level (item group) in the domain's level order: ``texts[i]`` answers ``items[i]``."""
    hits: dict[str, list[bool]] = {}
    for it, text in zip(items, texts):
        hits.setdefault(it.group, []).append(boxed_int(text) == it.answer)
    return {lv: sum(hits[lv]) / len(hits[lv]) for lv in domain.levels if lv in hits}


def control_prompts(domain: ArithDomain, targets: Mapping[str, Sequence[Cell]], per_target: int,
                    seed: int = 0) -> tuple[list[tuple[str, Cell]], list[str]]:
    """``per_target`` rows ``(group, cell)`` per target cell and their Synthesizer prompts (random report prefixes,
    drawn from ``seed``), in one list for one batched generation."""
    rng = random.Random(f"control-{seed}")
    rows = [(group, cell) for group, cells in targets.items() for cell in cells for _ in range(per_target)]
    return rows, [domain.synthesizer_prompt(random_report(rng, domain.levels), target=cell) for _, cell in rows]


def control_by_group(domain: ArithDomain, groups: Sequence[str], rows: Sequence[tuple[str, Cell]],
                     texts: Sequence[str]) -> dict[str, ControlStats]:
    """:func:`control_stats` of each group's texts (``texts[i]`` was sampled for ``rows[i]``)."""
    catalog = cell_catalog()
    return {group: control_stats(domain, [c for g, c in rows if g == group],
                                 [t for (g, _), t in zip(rows, texts) if g == group], catalog)
            for group in groups}
