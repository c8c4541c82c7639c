"""``synco verify``: screen a file of task cards the way a training step does, with no model loaded.

The domain and the task verifier are built from the run config as a run builds them
(:func:`synco.run.build.build_domain`, :func:`synco.run.build.local_verifier`); the whole file is one
batch (novelty within the file counts, as within a step's cards; the pool is empty) and the domain's part
(factors, ``reject_reason``) is the step's own :func:`synco.cotrain.engine.screen_card`. Consensus is not
applied: it needs a model's answers.

Input: one card per line. A line holding a JSON string literal (``"..."``) is decoded first, so a raw
Synthesizer output with newlines fits on one line; any other line (a card's JSON object, a
``valid_tasks.jsonl`` row, free text) is the card text as it stands. Blank lines are skipped: they get no
verdict, and ``line`` keeps counting the file's lines, so a verdict points at its line.

With ``domain=tau2`` a line may also be a τ² task JSON object (an object with ``id`` and ``user_scenario`` or
``evaluation_criteria``, what τ²'s ``tasks.json`` holds, one per line): :func:`verify_tau2_lines` replays it on the
τ² domain with its own initial state (:func:`synco.domains.tau2.verify.verify_task`); ``reasons`` are the
replay's reason codes and ``reference`` the information the agent must communicate, as a JSON list.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

from pydantic import BaseModel, Field

from synco.config import RunConfig
from synco.cotrain.engine import screen_card
from synco.evosyn.space import HasFactorSpace
from synco.grading.checker import AnswerChecker
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
    """The card text of one input line: a JSON string literal decoded, anything else as it stands."""
    s = line.strip()
    if s.startswith('"'):
        try:
            value = json.loads(s)
        except ValueError:
            return line
        if isinstance(value, str):
            return value
    return line


def read_lines(lines: Iterable[str]) -> list[tuple[int, str]]:
    """``(line number, card text)`` of every non-blank line, numbered from 1 over all lines."""
    return [(n, card_text(line.rstrip("\r\n"))) for n, line in enumerate(lines, start=1) if line.strip()]


MAX_TAU2_LINE_CHARS = 200_000
"""Longest τ² task line read (τ²'s own longest airline task is under 6 KB; a mock task with history ~2 KB)."""


def tau2_task_object(text: str) -> dict[str, Any] | None:
    """The τ² task JSON object a line holds (``id`` plus ``user_scenario`` or ``evaluation_criteria``), else None."""
    s = text.strip()
    if not s.startswith("{") or len(s) > MAX_TAU2_LINE_CHARS:
        return None
    try:
        obj = json.loads(s)
    except (ValueError, RecursionError):
        return None
    if isinstance(obj, dict) and "id" in obj and ("user_scenario" in obj or "evaluation_criteria" in obj):
        return obj
    return None


def verify_tau2_lines(lines: Sequence[tuple[int, str]], domain_name: str) -> list[LineVerdict]:
    """One verdict per ``(line number, text)`` on τ² domain ``domain_name``: a τ² task JSON object is replayed with
    its initial state, a synco card (JSON object) as a synthesized τ² card; anything else is ``not_a_tau2_task``.
    Factors are the τ² ones of the accepted task's gold trajectory."""
    from synco.core.records import CardRejected, TaskCard
    from synco.domains.tau2.factors import factor_subject, tau2_factor_defs
    from synco.domains.tau2.tasks import card_fields
    from synco.domains.tau2.verify import tool_kinds, verify_card, verify_task

    defs = tau2_factor_defs(tool_kinds(domain_name), domain_name)
    out = []
    for n, text in lines:
        obj = tau2_task_object(text)
        try:
            if obj is not None:
                verdict = verify_task(domain_name, obj)
            else:
                try:
                    card = TaskCard.model_validate_json(text)
                except ValueError:
                    raise CardRejected("not_a_tau2_task", "neither a τ² task JSON object nor a synco card") from None
                verdict = verify_card(domain_name, card)
        except CardRejected as err:
            out.append(LineVerdict(line=n, valid=False, reasons=[err.code], reference=None, details=[str(err)],
                                   quality=0.0, factors={}))
            continue
        subject = factor_subject(card_fields(verdict.card))
        factors = {d.name: v for d in defs if (v := d.value(subject)) is not None}
        out.append(LineVerdict(line=n, valid=True, reasons=[], reference=json.dumps(list(verdict.reference)),
                               details=[], quality=1.0, factors=factors))
    return out


def verify_cards(cfg: RunConfig, cards: Sequence[tuple[int, str]], progress: bool = False,
                 tau2_domain: str | None = None) -> list[LineVerdict]:
    """One verdict per ``(line number, card text)``, in order, as one training step's verification would give.

    ``progress``: a progress bar on stderr over the per-card checks. ``tau2_domain`` (default: a τ² run's
    ``tau2.domain``): the lines that hold τ² task JSON objects are replayed by :func:`verify_tau2_lines` on that
    domain, the others verified as cards; verdicts stay in line order.
    """
    if tau2_domain is None and cfg.domain == "tau2":
        tau2_domain = cfg.tau2.domain
    if tau2_domain is not None:
        tau2 = [(n, t) for n, t in cards if tau2_task_object(t) is not None]
        rest = [(n, t) for n, t in cards if tau2_task_object(t) is None]
        merged = verify_tau2_lines(tau2, tau2_domain) + (verify_cards(cfg, rest, progress) if rest else [])
        return sorted(merged, key=lambda v: v.line)
    from tqdm.auto import tqdm

    domain = build_domain(cfg)
    defs = list(domain.factor_defs()) if isinstance(domain, HasFactorSpace) else None
    with AnswerChecker() as checker:
        verifier = local_verifier(cfg, domain, checker)
        checks = []
        for slot, (_, raw) in enumerate(tqdm(cards, desc="verify", unit="card", disable=not progress)):
            checks += verifier.check_cards([raw], first_slot=slot)
        checked = verifier.finish_batch(checks)
    out = []
    for (n, _), (card, verdict) in zip(cards, checked):
        screened = card is not None and verdict.valid
        verdict = screen_card(domain, defs, card, verdict)
        out.append(LineVerdict(line=n, valid=verdict.valid, reasons=verdict.reason_codes, reference=verdict.reference,
                               details=verdict.reasons, quality=verdict.quality,
                               factors=dict(card.factors) if screened and card is not None else {}))
    return out
