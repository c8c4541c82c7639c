"""``synco verify``: screen a file of task cards the way a training step does, with no model loaded.

The domain and the task verifier are built from the run config as a run builds them
(:func:`synco.run.build.build_domain`, :func:`synco.run.build.local_verifier`); the whole file is one
batch (novelty within the file counts, as within a step's cards; the pool is empty) and the domain's part
(factors, ``reject_reason``) is the step's own :func:`synco.cotrain.engine.screen_card`. Consensus is not
applied: it needs a model's answers.

Input: one card per line. A line holding a JSON string literal (``"..."``) is decoded first, so a raw
Synthesizer output with newlines fits on one line; a run's own ``valid_tasks.jsonl`` row is the card it holds
(``final_answer`` the verified reference; a solution the export withheld, null on a row whose answer the oracle
corrected, read as that reference); any other line (a card's JSON object, free text) is the card text as it stands. Blank lines are skipped: they get no
verdict, and ``line`` keeps counting the file's lines, so a verdict points at its line.

A domain whose benchmark has a task format of its own (:class:`~synco.domains.base.HasNativeTasks`, e.g. τ²'s
task JSON) verifies the lines in that format itself (``native_task``); the other lines are verified as cards, and
verdicts stay in line order. Both kinds are one batch: a task that repeats an earlier line, in either form, is a
``duplicate_in_step``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence

from pydantic import BaseModel, Field

from synco.config import RunConfig
from synco.core.pool import card_of_export_row, is_export_row
from synco.cotrain.engine import screen_card
from synco.domains.base import HasNativeTasks, NativeTask
from synco.evosyn.space import HasFactorSpace
from synco.grading.checker import AnswerChecker
from synco.grading.verifier import CardCheck
from synco.run.build import build_domain, local_verifier


class LineVerdict(BaseModel):
    """The verdict on one input line; one JSON object of ``synco verify``'s output."""

    line: int = Field(description="1-based line number in the input file.")
    valid: bool
    reasons: list[str] = Field(description="Reason codes (missing_field, near_duplicate, heldout_problem, ...).")
    reference: str | None = Field(description="The answer a Reasoner would be graded against (the oracle's when the domain has one).")
    details: list[str] = Field(description="The reasons with their details, as the pool records them.")
    quality: float = Field(description="The verifier's quality score in [0, 1].")
    factors: dict[str, str] = Field(description="Factors computed by the domain (cards the verifier passed; else empty).")


def card_text(line: str) -> str:
    """The card text of one input line: a JSON string literal decoded, a row of a run's ``valid_tasks.jsonl`` as the
    card it holds (:func:`~synco.core.pool.card_of_export_row`), anything else as it stands."""
    s = line.strip()
    if not s.startswith(('"', "{")):
        return line
    try:
        value = json.loads(s)
    except (ValueError, RecursionError):
        return line
    if isinstance(value, str) and s.startswith('"'):
        return value
    if is_export_row(value):
        return json.dumps({k: v for k, v in card_of_export_row(value).flat().items() if k != "extra"}, ensure_ascii=False)
    return line


def read_lines(lines: Iterable[str]) -> list[tuple[int, str]]:
    """``(line number, card text)`` of every non-blank line, numbered from 1 over all lines."""
    return [(n, card_text(line.rstrip("\r\n"))) for n, line in enumerate(lines, start=1) if line.strip()]


def verify_cards(cfg: RunConfig, cards: Sequence[tuple[int, str]], progress: bool = False) -> list[LineVerdict]:
    """One verdict per ``(line number, card text)``, in order, as one training step's verification would give.

    ``progress``: a progress bar on stderr over the per-card checks. A domain with a task format of its own
    (:class:`HasNativeTasks`) verifies the lines in that format; the others are verified as cards. The whole file is
    one batch either way: a task of either kind that repeats an earlier line is a ``duplicate_in_step``.
    """
    from tqdm.auto import tqdm

    domain = build_domain(cfg)
    defs = list(domain.factor_defs()) if isinstance(domain, HasFactorSpace) else None
    with AnswerChecker() as checker:
        verifier = local_verifier(cfg, domain, checker)
        checks: list[CardCheck] = []
        natives: dict[int, NativeTask] = {}
        for slot, (_, text) in enumerate(tqdm(cards, desc="verify", unit="card", disable=not progress)):
            found = domain.native_task(text) if isinstance(domain, HasNativeTasks) else None
            if found is None:
                checks += verifier.check_cards([text], first_slot=slot)
                continue
            natives[slot] = found
            if found.card is None or not found.verdict.valid:
                checks.append(CardCheck.settled(found.card, found.verdict))
            else:  # replayed by the domain: the batch's checks (duplicate_in_step, contamination) remain
                checks.append(CardCheck.passed(found.card, found.verdict.reference))
        checked = verifier.finish_batch(checks)
    out = []
    for slot, ((n, _), (card, verdict)) in enumerate(zip(cards, checked)):
        native = natives.get(slot)
        if native is not None:
            factors = native.factors if verdict.valid else {}
        else:
            screened = card is not None and verdict.valid
            verdict = screen_card(domain, defs, card, verdict)
            factors = dict(card.factors) if screened and card is not None else {}
        out.append(LineVerdict(line=n, valid=verdict.valid, reasons=verdict.reason_codes, reference=verdict.reference,
                               details=verdict.reasons, quality=verdict.quality, factors=factors))
    return out
