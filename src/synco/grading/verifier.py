"""The task verifier: screen each Synthesizer card before the Reasoner sees it.

``TaskVerifier.verify_batch`` turns raw Synthesizer outputs into ``(card, verdict)``
pairs; ``apply_consensus`` updates a verdict once the Reasoner's attempts are in.
Every verdict, valid or not, carries all ``CHECK_NAMES`` scores in [0, 1] and a
quality (the weighted sum of format, schema, problem, answer and novelty), so
rejected cards still give the Synthesizer a graded reward signal.

``verify_batch`` runs in two phases: ``check_cards`` checks every card on its own
(format, schema, problem, answer, oracle; a ``CardCheck`` each, in any order or
process: the Ray backend runs it on check workers), then ``finish_batch`` adds
the checks that depend on other cards (novelty, contamination) in slot order.

Checks, with their reason codes (H = hard failure: the card is invalid; S = soft:
only the score and the reasons record it):

* format / schema (H): the parser's codes ``no_json``, ``truncated_json``,
  ``invalid_json``, ``too_deep``, ``unclosed_think``, ``input_too_long``,
  ``missing_field``, ``empty_field``. format = 1 when a JSON object was found
  and loaded; schema = the share of the nine fields present and non-empty.
* problem (H): ``problem_too_short``, ``problem_too_long``, ``references_figure``
  (a figure/diagram/table "shown"/"below"...), ``answer_leaked`` (the problem
  contains the solution text, ``\\boxed{answer}``, "the answer is <answer>", or
  ends with ``= <answer>``; an answer that merely occurs in the problem, like
  ``2``, is not a leak), ``banned_term`` (benchmark names, ...). Score = share
  of these four checks passed.
* answer, without an oracle: ``answer_unparseable`` (H: the checker does not
  understand ``final_answer``), ``answer_inconsistent`` (H unless
  ``require_consistent_answer`` is off: the solution's own answer, i.e. its last
  ``\\boxed{}``, else its "answer:" line, else its last number, differs from
  ``final_answer``), ``solution_no_answer`` (S, H with ``require_solution_answer``:
  nothing to compare),
  ``solution_answer_unclear`` (S: no boxed/answer line, the last number differs
  but ``final_answer`` is one of the solution's earlier numbers). Score 1 /
  0.5 (no or unclear solution answer) / 0.25 (inconsistent) / 0 (unparseable).
* answer, with an oracle: ``oracle_rejected`` (H: the oracle returns None, the
  card is outside the domain) and ``reference_corrected`` (S: the card's
  ``final_answer`` differs from the oracle's answer, which becomes the
  reference; answer score 0.5 instead of 1). The Synthesizer may thus propose
  tasks harder than it can solve itself.
* novelty (H, S when not ``reject_duplicates``): ``duplicate_in_step`` (near-duplicate of an earlier parsed card
  of the same batch, whatever that card's verdict) and ``near_duplicate`` (of a
  problem admitted to the pool). Score = 1 - highest similarity seen (pool,
  batch or benchmark).
* contamination (H when ``reject_contaminated``, else S): ``contaminated``, a
  near copy of a benchmark question (default Jaccard >= 0.5 on character
  5-grams: a GSM8K question with every number changed scores ~0.67-0.94,
  unrelated GSM8K questions < 0.1).
* consensus (after solving, H): ``consensus_disagrees`` (a clear majority of
  the attempts agree on another answer) and ``unreliable`` (reliability below
  ``reliability_threshold``; off by default).
* ``check_timeout`` (H): checking the card took longer than ``card_timeout``
  seconds; the checks not yet run are skipped. Every checker call of a card
  gets at most the card's remaining time, so one card cannot stall a step.
* ``internal_error`` (H): an unexpected exception while checking one card. It
  is logged with its traceback and counted in ``n_internal_errors`` (re-raised
  when ``strict``), so a bug never passes silently as a bad card.

Reliability: 1.0 with an oracle. Without one it is provisional until
``apply_consensus``: 1.0 when the solution agrees with ``final_answer``, 0.5
when its answer is missing or unclear, 0.0 when it disagrees (or the answer
is not understood); consensus then sets it to the share of attempts that match
the reference.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass, field

from pydantic import BaseModel, ConfigDict, Field, model_validator

from synco.grading.checker import AnswerChecker
from synco.grading.extract import extract_answer
from synco.grading.benchmarks import load_benchmark, resolve_benchmark_paths
from synco.grading.cards import CardError, parse_task_card
from synco.grading.novelty import NoveltyIndex, normalize_text
from synco.core.records import (CARD_FIELDS, CHECK_NAMES, CardRejected, ProblemPayload, TaskCard, TaskCardError, TaskPayload,
                                 Verdict)

logger = logging.getLogger(__name__)

Oracle = Callable[[TaskCard], "str | None"]

AnswerForm = Callable[[str], "str | None"]
"""A domain's canonical form of an answer text (None when it does not read as one): a card's claim whose form is the
oracle's answer's form is the oracle's answer, however it is spelled (τ²'s ``none`` / ``None`` / ``[]``)."""

DEFAULT_BANNED_TERMS: tuple[str, ...] = (
    "GSM8K", "GSM-8K", "GSM 8K", "GSM-Hard", "GSMHard", "MATH-500", "MATH500", "MATH dataset", "AIME",
    "AMC 8", "AMC 10", "AMC 12", "SVAMP", "ASDiv", "Minerva Math", "OlympiadBench", "benchmark dataset",
    "according to the figure", "according to the diagram", "according to the table",
)
"""Benchmark names and figure-dependent phrases a synthesized problem must not contain."""

_FIGURE_NOUN = r"(?:figure|diagram|image|picture|graph|chart|table|illustration|drawing|fig\.)"
_FIGURE = re.compile(
    rf"\b{_FIGURE_NOUN}\s+(?:shown|below|above|provided|attached)\b"
    rf"|\b(?:shown|given|depicted|pictured|illustrated|drawn)\s+(?:in|on|below|above)\s+(?:the\s+|this\s+)?{_FIGURE_NOUN}"
    rf"|\b(?:following|above|below|accompanying|attached|adjacent)\s+{_FIGURE_NOUN}"
    rf"|\b(?:see|refer\s+to|look\s+at)\s+(?:the\s+)?{_FIGURE_NOUN}"
    rf"|\baccording\s+to\s+the\s+{_FIGURE_NOUN}"
    r"|\bin\s+the\s+(?:figure|diagram|image|picture|illustration|drawing)\b"
    r"|\bas\s+shown\b",
    re.IGNORECASE,
)
_LAST_NUMBER = re.compile(r"-?\d+(?:,\d{3})*(?:\.\d+)?(?:/\d+)?")
_MAX_NUMBERS_CHECKED = 20  # earlier numbers of an unboxed solution compared with final_answer


class VerifierConfig(BaseModel):
    """Task verification settings."""

    model_config = ConfigDict(extra="forbid")

    min_problem_chars: int = Field(3, ge=0, description="Shortest acceptable problem, in characters after stripping.")
    max_problem_chars: int = Field(4000, ge=1, description="Longest acceptable problem, in characters.")
    novelty_threshold: float = Field(0.8, gt=0.0, le=1.0, description="Jaccard similarity (character n-grams) at which a problem duplicates another.")
    reject_duplicates: bool = Field(True, description="A near_duplicate or duplicate_in_step card is rejected. Off: they are soft reasons that only lower the card's novelty score -- for a world whose items are synco's seeded draws (rgym), where a small cell repeats its questions whatever the Synthesizer writes.")
    novelty_window: int | None = Field(None, ge=1, description="Steps back the pool novelty check looks: a card duplicating a valid task of the last N steps is rejected, an older task may recur (null: the whole pool, so no task is ever trained twice -- in a world with few distinct tasks per skill the pool then runs out of the most teachable ones). Duplicates within a step are rejected either way.")
    ngram: int = Field(5, ge=1, description="Character n-gram length of the similarity measure.")
    num_perm: int = Field(64, ge=8, description="MinHash permutations of the novelty indexes (a multiple of 8).")
    bands: int = Field(16, ge=1, description="LSH bands of the pool/batch novelty index (must divide num_perm).")
    contamination_threshold: float = Field(0.5, gt=0.0, le=1.0, description="Jaccard similarity to a benchmark question that counts as contamination.")
    benchmark_paths: list[str] = Field(default_factory=list, description="Benchmark JSONL files or folders (<name>/test.jsonl, or a data dir of those) screened for contamination.")
    reject_contaminated: bool = Field(True, description="Contamination is a hard failure (otherwise only a reason and a lower novelty score).")
    banned_terms: list[str] = Field(default_factory=lambda: list(DEFAULT_BANNED_TERMS), description="Terms a problem must not contain (case-insensitive, whole words).")
    require_consistent_answer: bool = Field(True, description="Without an oracle, reject a card whose solution's answer differs from its final_answer.")
    require_solution_answer: bool = Field(False, description="Without an oracle, reject a card whose solution states no answer at all (no boxed / answer line, no number): its final_answer is then checked by nothing. Off: a soft reason (answer score 0.5).")
    w_format: float = Field(0.05, ge=0.0, description="Quality weight of the format score.")
    w_schema: float = Field(0.30, ge=0.0, description="Quality weight of the schema score.")
    w_problem: float = Field(0.30, ge=0.0, description="Quality weight of the problem score.")
    w_answer: float = Field(0.25, ge=0.0, description="Quality weight of the answer score.")
    w_dedup: float = Field(0.10, ge=0.0, description="Quality weight of the novelty (deduplication) score.")
    consensus_min_attempts: int = Field(2, ge=1, description="Fewest solve attempts for which consensus is applied (fewer: verdict unchanged).")
    consensus_majority: float = Field(0.5, ge=0.0, lt=1.0, description="A different answer shared by more than this share of attempts rejects the card.")
    reliability_threshold: float = Field(0.0, ge=0.0, le=1.0, description="After consensus, a reliability below this rejects the card (0 disables).")
    strict: bool = Field(False, description="Re-raise unexpected per-card exceptions instead of recording internal_error (tests, debugging).")
    card_timeout: float = Field(10.0, gt=0.0, description="Wall-clock budget in seconds for checking one card (parse, problem, answer, novelty); past it the card is rejected as check_timeout. Answer checks get at most the remaining time.")

    @model_validator(mode="after")
    def _check(self) -> "VerifierConfig":
        if self.max_problem_chars < self.min_problem_chars:
            raise ValueError(f"max_problem_chars ({self.max_problem_chars}) < min_problem_chars ({self.min_problem_chars})")
        if self.num_perm % self.bands:
            raise ValueError(f"bands ({self.bands}) must divide num_perm ({self.num_perm})")
        if self.num_perm % 8:
            raise ValueError(f"num_perm ({self.num_perm}) must be a multiple of 8 (packed sketches; 2-row contamination bands)")
        if self.w_format + self.w_schema + self.w_problem + self.w_answer + self.w_dedup <= 0:
            raise ValueError("quality weights must not all be zero")
        return self


class _CardTimeout(Exception):
    """The card's time budget ran out (``VerifierConfig.card_timeout``)."""


@dataclass
class _Checks:
    """Scores and reasons collected for one card."""

    scores: dict[str, float] = field(default_factory=lambda: dict.fromkeys(CHECK_NAMES, 0.0))
    reasons: list[str] = field(default_factory=list)
    hard: bool = False

    def fail(self, reason: str, hard: bool = True) -> None:
        self.reasons.append(reason)
        self.hard = self.hard or hard


@dataclass
class CardCheck:
    """Phase 1 of verifying one raw card: what the checks that need no other card found.

    Parse, schema, problem checks, answer consistency (with its checker calls) and the oracle depend on
    the card alone, so they may run anywhere and in any order (``synco.distributed.ray_checks`` runs them
    on Ray); :meth:`TaskVerifier.finish_batch` adds novelty and contamination in slot order. ``done`` is a
    verdict phase 1 already settled (unparseable, out of time): phase 2 passes it through. ``error`` is the
    ``internal_error`` reason of a card whose checking raised (the per-card boundary caught it).
    """

    card: TaskCard | None
    checks: _Checks
    reference: str | None
    reliability: float
    done: Verdict | None = None
    error: str | None = None

    @classmethod
    def failed(cls, err: BaseException) -> "CardCheck":
        """The record of a card whose phase 1 raised ``err``."""
        return cls(None, _Checks(), None, 0.0, error=_internal_error_reason(err))

    @classmethod
    def settled(cls, card: TaskCard | None, verdict: Verdict) -> "CardCheck":
        """The record of a card whose verdict was given elsewhere (a domain's own task format): phase 2 passes it
        through, as a card phase 1 rejected."""
        return cls(card, _Checks(), verdict.reference, 0.0, done=verdict)

    @classmethod
    def passed(cls, card: TaskCard, reference: str | None) -> "CardCheck":
        """The record of a card checked on its own elsewhere, and passed (a domain's own task format replayed): phase
        2 still compares it with the batch, the pool and the benchmarks."""
        checks = _Checks(scores={**dict.fromkeys(CHECK_NAMES, 1.0), "novelty": 0.0})
        return cls(card, checks, reference, 1.0)


class TaskVerifier:
    """Parses and screens task cards, keeps the pool's novelty index and applies consensus."""

    def __init__(self, config: VerifierConfig | None = None, checker: AnswerChecker | None = None,
                 oracle: Oracle | None = None, answer_form: AnswerForm | None = None,
                 payload_type: type[TaskPayload] = ProblemPayload) -> None:
        self.config = config or VerifierConfig()
        self.checker = checker if checker is not None else AnswerChecker()
        self.oracle = oracle
        self.answer_form = answer_form
        self.payload_type = payload_type  # the domain's card payload (``synco.domains.base.payload_type``)
        self.n_internal_errors = 0
        self._deadline: float | None = None  # time.monotonic() by which the card being checked must be done
        self._startup_mark = 0.0  # the checker's worker start-up seconds when the card began
        self._pool = self._new_index()
        self._banned = [(t, re.compile(rf"(?<!\w){re.escape(t)}(?!\w)", re.IGNORECASE)) for t in self.config.banned_terms if t.strip()]
        self._benchmarks = self._load_benchmarks(self.config.benchmark_paths)

    # ------------------------------------------------------------------ public

    def verify_batch(self, raws: Sequence[str]) -> list[tuple[TaskCard | None, Verdict]]:
        """One ``(card or None, verdict)`` per raw output, in order; never raises on bad model output.

        Two phases: :meth:`check_cards` checks each card on its own (parse, schema, problem, answer,
        oracle), :meth:`finish_batch` then runs the checks that depend on other cards (novelty within
        the batch and against the pool, contamination) in slot order. A subclass may run the first
        phase elsewhere (``synco.distributed.ray_checks``); the verdicts are the same.
        """
        return self.finish_batch(self.check_cards(raws))

    def check_cards(self, raws: Sequence[str], first_slot: int = 0) -> list[CardCheck]:
        """Phase 1 of :meth:`verify_batch` for each raw output (slots numbered from ``first_slot``, for logs).

        The per-card exception boundary: an unexpected exception is logged with its traceback and becomes
        an error record (re-raised when ``strict``); :meth:`finish_batch` counts it in ``n_internal_errors``
        and rejects the card as ``internal_error``, so a bug never passes silently as a bad card.
        """
        out: list[CardCheck] = []
        for slot, raw in enumerate(raws, start=first_slot):
            try:
                out.append(self.check_card(raw))
            except Exception as err:  # the per-card boundary: recorded, counted and logged, never silent
                if self.config.strict:
                    raise
                logger.exception("verifier failed on card %d", slot)
                out.append(CardCheck.failed(err))
        return out

    def finish_batch(self, checked: Sequence[CardCheck]) -> list[tuple[TaskCard | None, Verdict]]:
        """Phase 2 of :meth:`verify_batch`: novelty and contamination of each checked card, in slot order.

        A card phase 1 settled (unparseable, out of time, raised) keeps that verdict and is not added
        to the batch's novelty index; the others are compared with the pool, the earlier cards of the
        batch and the benchmarks, within the same per-card exception boundary.
        """
        batch = self._new_index()
        out: list[tuple[TaskCard | None, Verdict]] = []
        for slot, check in enumerate(checked):
            if check.error is not None:
                self.n_internal_errors += 1
                out.append((None, _error_verdict(check.error)))
                continue
            if check.done is not None:
                out.append((check.card, check.done))
                continue
            try:
                assert check.card is not None, "a checked card that is neither settled nor parsed"
                self._check_novelty(check.card, slot, batch, check.checks)
                out.append((check.card, self._verdict(check.checks, check.reference, check.reliability)))
            except Exception as err:  # the per-card boundary, as in phase 1
                if self.config.strict:
                    raise
                self.n_internal_errors += 1
                logger.exception("verifier failed on card %d", slot)
                out.append((None, _internal_error_verdict(err)))
        return out

    def consensus_batch(self, verdicts: Sequence[Verdict], answers: Sequence[Sequence[str | None]]) -> list[Verdict]:
        """:meth:`apply_consensus` of each verdict with its answers, the agreement checks asked in one batch.

        Every ``(answer, reference)`` check :meth:`apply_consensus` would make goes to the checker's
        ``match_many`` at once (a Ray-backed checker fans them out); grouping the other answers stays
        here, since which pairs it compares depends on the earlier results.
        """
        if len(verdicts) != len(answers):
            raise ValueError(f"consensus_batch: {len(verdicts)} verdicts but {len(answers)} answer lists")
        judged = [self._consensus_applies(v, group) for v, group in zip(verdicts, answers)]
        pairs = [(a, v.reference) for v, group, ok in zip(verdicts, answers, judged) if ok
                 for a in group if a is not None]
        found = iter(self._match_many(pairs))  # type: ignore[arg-type]  # reference is set where consensus applies
        out = []
        for v, group, ok in zip(verdicts, answers, judged):
            agree = [a is not None and next(found) for a in group] if ok else None
            out.append(self.apply_consensus(v, group, agree=agree))
        return out

    def apply_consensus(self, verdict: Verdict, answers: Sequence[str | None],
                        agree: Sequence[bool] | None = None) -> Verdict:
        """A new verdict after ``answers`` (independent attempts' extracted answers) are in.

        ``agreement`` = share of attempts matching the reference (None counts as
        disagreement). ``reliability`` = 1 - the largest share of attempts that agree
        on one *other* answer: scattered wrong answers are no evidence against the
        reference, a competing answer is. (Reusing the Reasoner's K attempts, plain
        agreement would equal the success rate, and the gated reward would then be
        zero for every task the Reasoner solves half the time or less.) More than
        ``consensus_majority`` of the attempts agreeing on one other answer rejects the card. No-op with an oracle, without
        a reference, or with fewer than ``consensus_min_attempts`` attempts.

        ``agree`` (optional): whether each answer matches the reference, already checked with this
        verifier's checker (the engine's grades of the same attempts, or :meth:`consensus_batch`), so
        those checks are not made twice.
        """
        cfg = self.config
        ref = verdict.reference
        if not self._consensus_applies(verdict, answers):
            return verdict.model_copy(deep=True)
        assert ref is not None
        n = len(answers)
        if agree is None:
            agree = [a is not None and self._match(a, ref) for a in answers]
        elif len(agree) != n:
            raise ValueError(f"apply_consensus: agree has {len(agree)} entries for {n} answers")
        share = sum(agree) / n
        clusters: list[list[str]] = []  # other answers, grouped by checker equivalence
        for answer, ok in zip(answers, agree):
            if answer is None or ok:
                continue
            home = next((c for c in clusters if self._match(answer, c[0])), None)
            if home is None:
                clusters.append([answer])
            else:
                home.append(answer)
        valid, reasons = verdict.valid, list(verdict.reasons)
        alt_share = max((len(c) for c in clusters), default=0) / n
        reliability = 1.0 - alt_share
        if clusters:
            top = max(clusters, key=len)  # the first of equally large clusters
            if len(top) / n > cfg.consensus_majority:
                valid = False
                reasons.append(f"consensus_disagrees: majority={_short(top[0])} share={len(top) / n:.2f}")
        if reliability < cfg.reliability_threshold:
            valid = False
            reasons.append(f"unreliable: reliability={reliability:.2f} < {cfg.reliability_threshold:.2f}")
        scores = {**verdict.scores, "reliability": reliability}
        return verdict.model_copy(update={"valid": valid, "reasons": reasons, "reliability": reliability,
                                          "agreement": share, "scores": scores})

    def _consensus_applies(self, verdict: Verdict, answers: Sequence[str | None]) -> bool:
        """Whether consensus judges this verdict: no oracle, a reference, enough attempts."""
        return (self.oracle is None and verdict.reference is not None
                and len(answers) >= self.config.consensus_min_attempts)

    def admit(self, key: Hashable, problem: str) -> None:
        """Add an accepted problem to the pool novelty index (after its step is recorded)."""
        self._pool.add(key, problem)

    def reset_pool(self, problems: Iterable[tuple[Hashable, str]]) -> int:
        """Replace the pool novelty index by exactly ``problems`` (``(key, problem)``: a window of recent tasks,
        ``novelty_window``); returns how many."""
        self._pool = self._new_index()
        return self.load_pool(problems)

    def load_pool(self, problems: Iterable[tuple[Hashable, str]]) -> int:
        """Admit every ``(key, problem)`` (rebuilding the index when a run resumes); returns how many."""
        n = 0
        for key, problem in problems:
            self._pool.add(key, problem)
            n += 1
        return n

    @property
    def pool_size(self) -> int:
        """Problems in the pool novelty index."""
        return len(self._pool)

    @property
    def n_benchmark_questions(self) -> int:
        """Benchmark questions screened for contamination."""
        return 0 if self._benchmarks is None else len(self._benchmarks)

    # ------------------------------------------------------------------ one card

    def check_card(self, raw: str) -> CardCheck:
        """Phase 1 of one raw output within ``card_timeout`` seconds: parse, problem, answer (oracle included).

        The budget covers what the card needs before its novelty check, as when one process checks the
        card whole; past it the card is settled as ``check_timeout``. Raises on a bug (see :meth:`check_cards`).
        """
        self._deadline = time.monotonic() + min(self.config.card_timeout, 1e9)
        self._startup_mark = self._checker_startup()
        try:
            return self._check_card_timed(raw)
        finally:
            self._deadline = None

    def _check_card_timed(self, raw: str) -> CardCheck:
        checks = _Checks()
        try:
            card = parse_task_card(raw, self.payload_type)
        except CardError as err:
            if err.json_loaded:
                checks.scores["format"] = 1.0
                checks.scores["schema"] = err.fields_present / len(CARD_FIELDS)
            checks.fail(f"{err.code}: {err}")
            return CardCheck(None, checks, None, 0.0, done=self._verdict(checks, reference=None, reliability=0.0))
        except TaskCardError as err:  # a plain TaskCardError has no code
            checks.fail(f"parse_error: {err}")
            return CardCheck(None, checks, None, 0.0, done=self._verdict(checks, reference=None, reliability=0.0))
        checks.scores["format"] = checks.scores["schema"] = 1.0
        reference, reliability = card.payload.claimed_answer(), 0.0
        try:
            self._time_left()
            self._check_problem(card, checks)
            self._time_left()
            reference, reliability = self._check_answer(card, checks)
            self._time_left()  # the novelty check (phase 2) runs only on a card still within its budget
        except _CardTimeout:
            checks.fail(f"check_timeout: checking the card took over {self.config.card_timeout:g} s")
            return CardCheck(card, checks, reference, 0.0, done=self._verdict(checks, reference=reference, reliability=0.0))
        return CardCheck(card, checks, reference, reliability)

    def _check_problem(self, card: TaskCard, checks: _Checks) -> None:
        """Length, figure references, leaked answers, banned terms of what the Reasoner is asked; score = share passed."""
        cfg, task = self.config, card.payload
        prompt = task.prompt_text()
        failed = 0
        if len(prompt) < cfg.min_problem_chars:
            checks.fail(f"problem_too_short: {len(prompt)} chars < {cfg.min_problem_chars}")
            failed += 1
        elif len(prompt) > cfg.max_problem_chars:
            checks.fail(f"problem_too_long: {len(prompt)} chars > {cfg.max_problem_chars}")
            failed += 1
        figure = _FIGURE.search(prompt)
        if figure:
            checks.fail(f"references_figure: {figure.group()!r}")
            failed += 1
        leak = answer_leak(prompt, task.solution_text(), task.claimed_answer())
        if leak:
            checks.fail(f"answer_leaked: {leak}")
            failed += 1
        banned = [term for term, pattern in self._banned if pattern.search(prompt)]
        if banned:
            checks.fail(f"banned_term: {', '.join(banned)}")
            failed += 1
        checks.scores["problem"] = 1.0 - failed / 4

    def _check_answer(self, card: TaskCard, checks: _Checks) -> tuple[str | None, float]:
        """Answer score and reasons; returns (reference, provisional reliability)."""
        final = card.payload.claimed_answer()
        if self.oracle is not None:
            try:
                truth = self.oracle(card)
            except CardRejected as err:  # the oracle says why (a domain's own reason code)
                checks.fail(str(err))
                return None, 0.0
            if truth is None:
                checks.fail("oracle_rejected: the oracle has no answer for this problem")
                return None, 0.0
            if self._same_form(final, truth) or self._match(final, truth):
                checks.scores["answer"] = 1.0
            else:
                checks.scores["answer"] = 0.5
                checks.fail(f"reference_corrected: card={_short(final)} oracle={_short(truth)}", hard=False)
            return truth, 1.0
        if not self._understands(final):
            checks.fail(f"answer_unparseable: {_short(final)}")
            return final, 0.0
        solution = card.payload.solution_text()
        explicit = extract_answer(solution)
        numbers = [] if explicit is not None else _LAST_NUMBER.findall(solution)
        stated = explicit if explicit is not None else (numbers[-1] if numbers else None)
        if stated is None:
            checks.scores["answer"] = 0.5
            checks.fail("solution_no_answer: the solution states no answer to compare",
                        hard=self.config.require_solution_answer)
            return final, 0.5
        if self._match(stated, final):
            checks.scores["answer"] = 1.0
            return final, 1.0
        if explicit is None and any(self._match(n, final) for n in numbers[-_MAX_NUMBERS_CHECKED:-1]):
            # e.g. "... so 7 are left (check: 7 + 35 = 42)": the last number is a check, not the answer
            checks.scores["answer"] = 0.5
            checks.fail(f"solution_answer_unclear: last number {_short(stated)}, final={_short(final)} appears earlier",
                        hard=False)
            return final, 0.5
        checks.scores["answer"] = 0.25
        checks.fail(f"answer_inconsistent: solution={_short(stated)} final={_short(final)}",
                    hard=self.config.require_consistent_answer)
        return final, 0.0

    def _check_novelty(self, card: TaskCard, slot: int, batch: NoveltyIndex, checks: _Checks) -> None:
        """Pool, batch and benchmark similarity of what the Reasoner is asked; adds the card to the batch index."""
        cfg, prompt = self.config, card.payload.prompt_text()
        sims = [0.0]
        hit = batch.nearest(prompt)
        if hit is not None:
            sims.append(hit[1])
            if hit[1] >= cfg.novelty_threshold:
                checks.fail(f"duplicate_in_step: sim={hit[1]:.2f} slot={hit[0]}", hard=cfg.reject_duplicates)
        hit = self._pool.nearest(prompt)
        if hit is not None:
            sims.append(hit[1])
            if hit[1] >= cfg.novelty_threshold:
                checks.fail(f"near_duplicate: sim={hit[1]:.2f} task={hit[0]}", hard=cfg.reject_duplicates)
        if self._benchmarks is not None:
            hit = self._benchmarks.nearest(prompt)
            if hit is not None:
                sims.append(hit[1])
                if hit[1] >= cfg.contamination_threshold:
                    checks.fail(f"contaminated: {hit[0]} sim={hit[1]:.2f}", hard=cfg.reject_contaminated)
        checks.scores["novelty"] = 1.0 - max(sims)
        batch.add(slot, prompt)

    # ------------------------------------------------------------------ helpers

    def _verdict(self, checks: _Checks, reference: str | None, reliability: float) -> Verdict:
        """Assemble the verdict: weighted quality, all scores clipped to [0, 1]."""
        cfg = self.config
        scores = {k: min(1.0, max(0.0, v)) for k, v in checks.scores.items()}
        scores["reliability"] = reliability
        weights = {"format": cfg.w_format, "schema": cfg.w_schema, "problem": cfg.w_problem,
                   "answer": cfg.w_answer, "novelty": cfg.w_dedup}
        quality = sum(w * scores[k] for k, w in weights.items()) / sum(weights.values())
        return Verdict(valid=not checks.hard, scores=scores, quality=min(1.0, quality), reliability=reliability,
                       reasons=checks.reasons, reference=reference)

    def _checker_startup(self) -> float:
        """Seconds the checker has waited for its math-verify worker to start (0 for checkers that do not say)."""
        spent = getattr(self.checker, "startup_seconds", 0.0)
        return spent if isinstance(spent, (int, float)) else 0.0

    def _time_left(self) -> float | None:
        """Seconds left of the current card's budget (None outside a card); raises _CardTimeout when none are.

        Time the checker spent starting its worker during the card is not charged to the card, as the
        checker does not charge it to its own calls.
        """
        if self._deadline is None:
            return None
        left = self._deadline + (self._checker_startup() - self._startup_mark) - time.monotonic()
        if left <= 0:
            raise _CardTimeout()
        return left

    def _checker_kwargs(self) -> dict[str, float]:
        """``timeout=`` for a checker call: the card's remaining time when it is below the checker's own timeout.

        Only a checker with a numeric ``timeout`` attribute (an ``AnswerChecker``) is given one, so simple
        stand-ins with ``match(predicted, reference)`` keep working.
        """
        left = self._time_left()
        own = getattr(self.checker, "timeout", None)
        if left is None or not isinstance(own, (int, float)) or own <= left:
            return {}
        return {"timeout": left}

    def _same_form(self, claim: str, truth: str) -> bool:
        """Whether the domain reads the card's claim as the oracle's answer (its :data:`AnswerForm`; False without one)."""
        if self.answer_form is None:
            return False
        form = self.answer_form(claim)
        return form is not None and form == self.answer_form(truth)

    def _match(self, predicted: str, reference: str) -> bool:
        """Checker equality within the card's budget; a timeout the checker lets through counts as no match."""
        kwargs = self._checker_kwargs()
        try:
            return self.checker.match(predicted, reference, **kwargs)
        except TimeoutError:
            logger.warning("answer check timed out: %r vs %r", predicted[:80], reference[:80])
            return False

    def _match_many(self, pairs: Sequence[tuple[str, str]]) -> list[bool]:
        """:meth:`_match` of every pair, in one ``match_many`` call when the checker has it (outside a card's budget)."""
        if not pairs:
            return []
        many = getattr(self.checker, "match_many", None)
        if many is None or self._deadline is not None:
            return [self._match(p, r) for p, r in pairs]
        return list(many(pairs))

    def _understands(self, answer: str) -> bool:
        """Checker parseability within the card's budget; a timeout counts as not understood."""
        kwargs = self._checker_kwargs()
        try:
            return self.checker.understands(answer, **kwargs)
        except TimeoutError:
            logger.warning("answer parse timed out: %r", answer[:80])
            return False

    def _new_index(self) -> NoveltyIndex:
        cfg = self.config
        return NoveltyIndex(threshold=cfg.novelty_threshold, ngram=cfg.ngram, num_perm=cfg.num_perm, bands=cfg.bands)

    def _load_benchmarks(self, paths: Sequence[str]) -> NoveltyIndex | None:
        """Index every benchmark question (key ``<benchmark>/<id>``); None when no paths are given.

        2-row bands: a question at Jaccard 0.5 becomes a candidate with
        probability 1 - (1 - 0.25)^(num_perm/2) ≈ 1, so contamination is not missed.
        """
        if not paths:
            return None
        cfg = self.config
        index = NoveltyIndex(threshold=cfg.contamination_threshold, ngram=cfg.ngram, num_perm=cfg.num_perm,
                             bands=cfg.num_perm // 2, max_exact=8)
        for name, path in resolve_benchmark_paths(paths).items():
            for item in load_benchmark(path, name=name):
                index.add(f"{name}/{item.id}", item.question)
        return index


def solution_answer(solution: str) -> str | None:
    """The answer a solution states: its last ``\\boxed{}`` or answer line, else its last number."""
    stated = extract_answer(solution)
    if stated is not None:
        return stated
    numbers = _LAST_NUMBER.findall(solution)
    return numbers[-1] if numbers else None


def answer_leak(problem: str, solution: str, final_answer: str) -> str | None:
    """How the problem gives its own answer away, or None.

    A leak is the problem containing the solution text (at least 8 characters
    after normalisation), ``\\boxed{<answer>}``, "answer is/: <answer>", or
    ending with ``= <answer>``. The answer merely occurring in the problem is
    not a leak (``2`` occurs naturally).
    """
    norm_problem = normalize_text(problem)
    norm_solution = normalize_text(solution)
    if len(norm_solution) >= 8 and norm_solution in norm_problem:
        return "the problem contains the solution"
    answer = normalize_text(final_answer)
    if not answer:
        return None
    if answer not in norm_problem:  # every pattern below contains the answer verbatim; skip building them
        return None
    a = re.escape(answer)
    end = r"(?!\w|[.,]\d)"
    if re.search(rf"\\boxed\s*\{{\s*\$?{a}\s*\$?\s*\}}", norm_problem):
        return "the problem contains \\boxed{answer}"
    if re.search(rf"\banswers?\s*(?:is|are|was|will\s+be|:|=)\s*\$?{a}{end}", norm_problem):
        return f"the problem states the answer {_short(final_answer)}"
    if re.search(rf"=\s*\$?{a}\s*\$?\s*[.?!]?\s*$", norm_problem):
        return f"the problem ends with = {_short(final_answer)}"
    return None


def _short(text: str, limit: int = 60) -> str:
    """One-line excerpt for a reason string."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


def _internal_error_reason(err: BaseException) -> str:
    """The reason recorded for a card whose checking raised unexpectedly."""
    return f"internal_error: {type(err).__name__}: {_short(str(err))}"


def _internal_error_verdict(err: Exception) -> Verdict:
    """The verdict of a card whose checking raised unexpectedly."""
    return _error_verdict(_internal_error_reason(err))


def _error_verdict(reason: str) -> Verdict:
    """A rejected card with every score 0 and one ``internal_error`` reason."""
    return Verdict(valid=False, scores=dict.fromkeys(CHECK_NAMES, 0.0), quality=0.0, reliability=0.0,
                   reasons=[reason])
