"""The tools world's warm-start data: gold episodes for the Reasoner, targeted cards for the Synthesizer.

* **Reasoner**: the task's prompt, then each gold call as an agent turn (``find_user(bob)``), the observation the
  environment really answers, and finally ``done(<outputs>)``, as :data:`~synco.domains.warm_start.Segments` whose
  targets are the agent's turns only: the same split an episode's GRPO row has, so nothing the environment writes is
  ever a target.
* **Synthesizer**: ``(prompt, card)`` pairs: a capability-report-like line, a ``DO:`` target on most prompts naming
  the drawn task's own cell -- its ``pattern`` and up to two candidate factors (``family``, ``computation``, ...), so
  the card follows whichever factor the Reflector promotes -- then the compact card.

Family weights make the Reasoner's start uneven on purpose: families that need a computed value (``cost_n``,
``afford``, ``total``...) or several writes are trained less, so the run starts with a teachable band instead of a
solved world. With ``db_variants`` N > 0 each Reasoner gold episode runs on a database variant drawn uniformly from
1..N (``synco.domains.tools.db``), the task re-solved there (the fixed world when the variant cannot pose it), so the
warm start learns to read values from observations rather than recall one database.

Pure Python; the training is :mod:`synco.learn.pretrain`'s and the recipe :mod:`synco.run.pretrain.tools`'s.
"""

from __future__ import annotations

import json
import random
from collections.abc import Generator, Sequence

from synco.core.records import CardRejected, TaskCard
from synco.domains.tools.payload import ToolsPayload
from synco.domains.tools.db import DB
from synco.domains.tools.domain import TOOLS_PATTERNS, ToolsDomain
from synco.domains.tools.env import ToolsEnv
from synco.domains.tools.syntax import DONE, format_call, format_outputs
from synco.domains.tools.tasks import FAMILY_NAMES, Task, task_on_variant
from synco.domains.tools.tools import TOOL_KINDS
from synco.domains.warm_start import Segments, draw_factors, random_report
from synco.evosyn.space import Cell
from synco.grading.cards import CardError, parse_task_card

HELDOUT_SEED = 12345


FAMILY_WEIGHTS: dict[str, float] = {
    "lookup": 4, "cancel": 4, "buy": 4, "transfer": 4, "richer": 3, "sum2": 2, "diff": 2, "ship": 2,
    "cancel_all": 2, "transfer_all": 2, "left": 1.5, "buy_cheaper": 1.5, "cancel_buy": 1.5, "cost_n": 1,
    "afford": 1, "total": 1, "buy_else": 1, "gift": 1,
}
"""Relative share of each family in the Reasoner's SFT data: plain look-ups and one-write tasks first,
computed values and long write chains least (the run's teachable band)."""


P_TARGET = 0.8
"""Share of the Synthesizer's training prompts with a ``DO:`` target."""


EXTRA_FACTORS = (0.3, 0.5, 0.2)
"""Chances that a target names 0, 1 or 2 candidate factors besides ``pattern``."""


TARGET_WEIGHTS: dict[str, float] = {"family": 3.0}
"""Relative chance of each candidate factor in a target (default 1): ``family`` has the most buckets (19), so its
targets get more examples to be learned from."""


MAX_POSITIONS = 768
"""Context of both tiny agents: a prompt plus the longest gold episode fits with room to spare."""


def gold_segments(domain: ToolsDomain, task: Task, db: DB | None = None) -> Segments:
    """The gold episode of ``task`` as segments: prompt, then (call, observation)..., then ``done(outputs)``.

    The observations come from a real :class:`ToolsEnv` stepping the gold calls on ``db`` (default: the world's
    database; ``task`` must be solved on the one given), so they are exactly what the agent will see in training.
    """
    env = ToolsEnv(domain.db if db is None else db, "", task.outputs)
    rows: Segments = [(domain.reasoner_prompt(task.instruction), False)]
    for call in task.actions:
        text = format_call(call)
        step = env.step(text)
        if step.error is not None:
            raise ValueError(f"gold call {text!r} of {task.instruction!r} failed: {step.error}")
        rows += [(text, True), (step.observation, False)]
    rows.append((f"{DONE}({format_outputs(task.outputs) if task.outputs else ''})", True))
    return rows


def weighted_family(rng: random.Random, weights: dict[str, float] = FAMILY_WEIGHTS) -> str:
    return rng.choices(list(FAMILY_NAMES), weights=[weights.get(f, 1.0) for f in FAMILY_NAMES])[0]


def reasoner_row(domain: ToolsDomain, rng: random.Random, db_variants: int = 0) -> Segments:
    """One gold episode of a training task of a weighted family; with ``db_variants`` N > 0 on a variant drawn from
    1..N (the task re-solved there; the fixed world when the variant cannot pose it, as a run's environment does)."""
    task = domain.sample_task(rng, weighted_family(rng))
    if db_variants <= 0:
        return gold_segments(domain, task)
    on_variant = task_on_variant(task.instruction, rng.randint(1, db_variants))
    return gold_segments(domain, task) if on_variant is None else gold_segments(domain, on_variant[1], on_variant[0])


def target_cell(domain: ToolsDomain, rng: random.Random, values: dict[str, str]) -> Cell | None:
    """A ``DO:`` target naming the task's own buckets: ``None`` on ``1 - P_TARGET`` of prompts, else the built-in
    ``pattern`` plus 0, 1 or 2 candidate factors (drawn by :data:`TARGET_WEIGHTS`), as the space's cells name them
    once the Reflector promotes a candidate (so the warm start can follow whichever it promotes)."""
    if values.get("pattern") not in TOOLS_PATTERNS or rng.random() >= P_TARGET:
        return None
    candidates = [n for n in values if n not in domain.builtin_factors]
    k = min(len(candidates), rng.choices((0, 1, 2), weights=EXTRA_FACTORS)[0])
    extra = draw_factors(rng, candidates, TARGET_WEIGHTS, k)
    return (("pattern", values["pattern"]), *((n, values[n]) for n in extra))


def synthesizer_pair(domain: ToolsDomain, rng: random.Random) -> tuple[str, str]:
    """``(prompt, card)``: a random report line, a ``DO:`` target naming the drawn task's own cell
    (:func:`target_cell`, from its factors computed off the gold actions), then the task's card."""
    family = rng.choice(FAMILY_NAMES)
    task = domain.sample_task(rng, family)
    card = domain.format_card(task.instruction, task.actions, task.outputs, family)
    values = domain.card_factors(TaskCard(**json.loads(card)))
    report = random_report(rng, list(FAMILY_NAMES))
    return domain.synthesizer_prompt(report, target=target_cell(domain, rng, values)), card


def tool_tokens() -> list[str]:
    """Tool names with their opening parenthesis (``find_user(``) as whole tokens of both agents' tokenizers: a call
    costs a few generated tokens instead of ~15 characters (every turn of every episode samples one)."""
    return [f"{name}(" for name in [*TOOL_KINDS, DONE]]


# ----------------------------------------------------------------- example streams (what the trainer is handed)


def reasoner_examples(rng: random.Random, db_variants: int = 0) -> Generator[Segments, None, None]:
    """The Reasoner's endless stream of gold episodes (:func:`reasoner_row`)."""
    domain = ToolsDomain()
    while True:
        yield reasoner_row(domain, rng, db_variants)


def synthesizer_examples(rng: random.Random) -> Generator[Segments, None, None]:
    """The Synthesizer's endless stream of :func:`synthesizer_pair` examples, the card its one target segment."""
    domain = ToolsDomain()
    while True:
        prompt, card = synthesizer_pair(domain, rng)
        yield [(prompt, False), (card, True)]


# ----------------------------------------------------------------- scoring generated cards


def card_validity(domain: ToolsDomain, texts: Sequence[str]) -> dict[str, float]:
    """Well-formed, valid (the task replays, not held out) and distinct rates of sampled card texts."""
    n = len(texts)
    wellformed, valid, problems = 0, 0, set()
    for text in texts:
        try:
            card: TaskCard = parse_task_card(text)
        except (CardError, ValueError):
            continue
        wellformed += 1
        try:
            domain.oracle(card)
        except CardRejected:
            continue
        if domain.reject_reason(card) is None:
            valid += 1
            task = ToolsPayload.of(card)
            problems.add(task.instruction + "|" + task.actions)
    return {"wellformed": wellformed / n, "valid": valid / n, "distinct": len(problems) / n}


def control_prompts(domain: ToolsDomain, name: str, n: int, rng: random.Random) -> tuple[list[str], list[Cell]]:
    """``n`` Synthesizer prompts asking for ``pattern`` plus factor ``name`` (``pattern`` alone for the built-in), each
    cell that of a generator task (families uniform), and those cells."""
    prompts, cells = [], []
    for _ in range(n):
        family = rng.choice(FAMILY_NAMES)
        task = domain.sample_task(rng, family)
        card = TaskCard(**json.loads(domain.format_card(task.instruction, task.actions, task.outputs, family)))
        values = domain.card_factors(card)
        cell = tuple((k, values[k]) for k in dict.fromkeys(("pattern", name)))
        cells.append(cell)
        prompts.append(domain.synthesizer_prompt(random_report(rng, list(FAMILY_NAMES)), target=cell))
    return prompts, cells


def control_hit_rate(domain: ToolsDomain, texts: Sequence[str], cells: Sequence[Cell]) -> float:
    """The share of the valid cards among ``texts`` that realise the cell each was asked for (0 with none valid)."""
    hits = valid = 0
    for text, cell in zip(texts, cells):
        try:
            card = parse_task_card(text)
            domain.oracle(card)
        except (CardError, CardRejected, ValueError):
            continue
        valid += 1
        realised = domain.card_factors(card)
        hits += all(realised.get(k) == v for k, v in cell)
    return hits / valid if valid else 0.0
