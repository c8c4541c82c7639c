"""Measure label accuracy in a domain without an oracle: how often do the verifier and consensus keep a
wrong reference answer, and how often do they reject a right one?

The math domain has no oracle: a card's own ``final_answer`` is the reference, screened by the verifier
(its solution must state the same answer, ...) and, after solving, by consensus (a clear majority of
independent answers agreeing on another answer rejects the card). This module measures that filter
against ground truth:

1. :func:`draw_labelled_cards` draws ``n`` distinct problems from the math domain's own generator (exact
   answers), and corrupts an exact, seeded share of their reference answers in the ways a Synthesizer
   gets them wrong (:data:`CORRUPTION_KINDS`: off by one, sign flip, a number copied from the problem,
   a doubled or halved value, an inverted fraction, two digits swapped). By default the card's solution
   states the wrong answer too (``consistent``), as when the Synthesizer's own working is wrong; otherwise
   only ``final_answer`` changes, which the verifier's consistency check should catch.
2. :func:`run_label_harness` puts those cards through :func:`synco.cotrain.engine.cotrain_step` itself, in
   ``uniform`` mode (the cards stand in for the domain's generator), so the screen, the consensus rule and
   the answer extraction are exactly a training step's. The solver answers K times (``reasoner``: consensus
   reuses the attempts) or a frozen checker answers M times (``checker``). Nothing is trained: the solver's
   ``update`` is a no-op, and the step's records are kept in memory instead of a pool.
3. :func:`summarize` counts, with positive = "label rejected": precision and recall of wrong-label
   detection, the share of correct labels wrongly rejected, detection per corruption kind, where cards were
   rejected (screen or consensus) and how many cards consensus could judge at all (it needs more extracted
   answers than ``consensus_majority`` of the attempts, or no majority can form). Every rate carries its
   count and binomial standard error.

Corruption and the metrics are pure (no torch); only :func:`run_label_harness` imports the engine.
``bench/label_accuracy.py`` is the command line.
"""

from __future__ import annotations

import json
import math
import random
import re
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from fractions import Fraction
from typing import TYPE_CHECKING, Any, Literal

from synco.grading.extract import extract_answer
from synco.domains.base import response_prefix
from synco.core.policy import UpdateStats
from synco.core.sampling import Completion, SamplingParams
from synco.grading.verifier import VerifierConfig
from synco.domains.math import Generated, MathDomain, fmt, fraction_text, problem_key

if TYPE_CHECKING:
    from synco.cotrain.stats import StepStats
    from synco.core.records import TaskRecord

SolverKind = Literal["reasoner", "checker"]
Stage = Literal["screen", "consensus"]

CORRUPTION_KINDS: tuple[str, ...] = (
    "off_by_one", "sign_flip", "problem_number", "double_or_half", "reciprocal", "digit_swap",
)
"""Ways a reference answer is corrupted (each kind applies only where it yields a different value):
``off_by_one`` (value +-1; the numerator +-1 for a fraction answer), ``sign_flip`` (-value),
``problem_number`` (a number copied from the problem), ``double_or_half`` (a forgotten or extra factor 2),
``reciprocal`` (an inverted fraction; non-integer answers), ``digit_swap`` (two adjacent digits of an
integer transposed)."""

CONSENSUS_REASONS = frozenset({"consensus_disagrees", "unreliable"})
"""Reason codes ``TaskVerifier.apply_consensus`` adds when it rejects a card."""

_PROBLEM_NUMBER = re.compile(r"\d+(?:\.\d+)?")


# ----------------------------------------------------------------- corruption (pure)


@dataclass(frozen=True)
class LabelledCard:
    """One generated problem with its true answer and the label (reference answer) its card carries."""

    index: int
    problem: str
    truth: str
    label: str
    corruption: str | None  # a CORRUPTION_KINDS entry; None when the label is the truth
    raw: str  # the card JSON, as a Synthesizer would write it

    @property
    def corrupted(self) -> bool:
        return self.corruption is not None


def answer_value(text: str) -> Fraction:
    """The exact value of a generator answer (``12``, ``-3``, ``12.5``, ``3/8``); ValueError names the text."""
    try:
        return Fraction(text.strip())
    except (ValueError, ZeroDivisionError):
        raise ValueError(f"answer {text!r} is not an exact number (integer, decimal or a/b)") from None


def format_like(truth: str, value: Fraction) -> str:
    """``value`` written as the generator writes ``truth``: ``a/b`` when the truth is a fraction, else ``fmt``."""
    return fraction_text(value) if "/" in truth else fmt(value)


def corruption_candidate(kind: str, truth: str, problem: str, rng: random.Random) -> str | None:
    """A wrong answer of ``kind`` for ``truth`` (written like it), or None when the kind does not apply.

    The result always differs from the truth in value, not only in form.
    """
    v = answer_value(truth)
    wrong: Fraction | None = None
    if kind == "off_by_one":
        step = rng.choice((1, -1))
        wrong = Fraction(v.numerator + step, v.denominator) if "/" in truth else v + step
    elif kind == "sign_flip":
        wrong = -v if v != 0 else None
    elif kind == "problem_number":
        seen: list[Fraction] = []
        for text in _PROBLEM_NUMBER.findall(problem):
            x = Fraction(text)
            if x != v and x not in seen:
                seen.append(x)
        wrong = rng.choice(seen) if seen else None
    elif kind == "double_or_half":
        wrong = (v * 2 if rng.random() < 0.5 else v / 2) if v != 0 else None
    elif kind == "reciprocal":
        wrong = 1 / v if v.denominator != 1 else None
    elif kind == "digit_swap":
        wrong = _digit_swap(v, rng)
    else:
        raise ValueError(f"corruption kind {kind!r} is unknown; known: {', '.join(CORRUPTION_KINDS)}")
    if wrong is None or wrong == v:
        return None
    return format_like(truth, wrong)


def _digit_swap(v: Fraction, rng: random.Random) -> Fraction | None:
    """An integer with two adjacent, different digits swapped (never a leading zero), or None."""
    if v.denominator != 1 or abs(v.numerator) < 10:
        return None
    digits = str(abs(v.numerator))
    spots = [i for i in range(len(digits) - 1) if digits[i] != digits[i + 1] and not (i == 0 and digits[1] == "0")]
    if not spots:
        return None
    i = rng.choice(spots)
    swapped = digits[:i] + digits[i + 1] + digits[i] + digits[i + 2:]
    return Fraction(int(swapped) * (1 if v.numerator > 0 else -1))


def corrupt_answer(truth: str, problem: str, rng: random.Random,
                   kinds: Sequence[str] = CORRUPTION_KINDS) -> tuple[str, str]:
    """``(kind, wrong answer)``: one of ``kinds`` that applies, drawn uniformly; ValueError when none does."""
    candidates = [(k, c) for k in kinds if (c := corruption_candidate(k, truth, problem, rng)) is not None]
    if not candidates:
        raise ValueError(f"no corruption of kinds {list(kinds)} applies to answer {truth!r}")
    return rng.choice(candidates)


def n_corrupted(n: int, share: float) -> int:
    """How many of ``n`` labels a ``share`` corrupts: ``share * n`` rounded half up (0.3 of 200 -> 60)."""
    if not 0.0 <= share <= 1.0:
        raise ValueError(f"corrupt share must be in [0, 1], got {share}")
    return min(n, math.floor(share * n + 0.5))


def labelled_card_text(domain: MathDomain, g: Generated, label: str, consistent: bool) -> str:
    """The card JSON of ``g`` with ``label`` as its reference answer.

    ``consistent``: the solution states ``label`` too (its last step's result and its ``\\boxed{}``), as
    when the Synthesizer's own working is wrong. Otherwise only ``final_answer`` is replaced.
    """
    if label == g.answer:
        return domain.format_card(g)
    if consistent:
        steps = list(g.steps)
        steps[-1] = _replace_last_number(steps[-1], g.answer, label)
        return domain.format_card(replace(g, answer=label, steps=tuple(steps)))
    card = json.loads(domain.format_card(g))
    card["final_answer"] = label
    return json.dumps(card, ensure_ascii=False)


def _replace_last_number(text: str, old: str, new: str) -> str:
    """``text`` with its last standalone occurrence of the number ``old`` replaced by ``new`` (if any)."""
    hits = list(re.finditer(rf"(?<![\d./]){re.escape(old)}(?![\d/]|\.\d)", text))
    if not hits:
        return text
    m = hits[-1]
    return text[: m.start()] + new + text[m.end():]


def draw_labelled_cards(domain: MathDomain, n: int, corrupt_share: float, seed: int, consistent: bool = True,
                        kinds: Sequence[str] = CORRUPTION_KINDS) -> list[LabelledCard]:
    """``n`` distinct generated problems, exactly ``n_corrupted(n, corrupt_share)`` of them with a wrong label.

    Problems come from one seeded stream and the corrupted indices and values from another, so the same
    seed gives the same problems at every share. Never returns a held-out problem (``MathDomain.sample``).
    """
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    unknown = sorted(set(kinds) - set(CORRUPTION_KINDS))
    if unknown or not kinds:
        raise ValueError(f"kinds must be a non-empty subset of {list(CORRUPTION_KINDS)}, got {list(kinds)}")
    problems_rng = random.Random(f"synco-labels-problems:{seed}")
    drawn: list[Generated] = []
    seen: set[str] = set()
    for _ in range(200 * n):
        if len(drawn) == n:
            break
        g = domain.sample(problems_rng)
        key = problem_key(g.problem)
        if key not in seen:
            seen.add(key)
            drawn.append(g)
    if len(drawn) < n:
        raise ValueError(f"n={n}: the generator gave only {len(drawn)} distinct problems")
    corrupt_rng = random.Random(f"synco-labels-corrupt:{seed}")
    chosen = set(corrupt_rng.sample(range(n), n_corrupted(n, corrupt_share)))
    cards = []
    for i, g in enumerate(drawn):
        kind, label = corrupt_answer(g.answer, g.problem, corrupt_rng, kinds) if i in chosen else (None, g.answer)
        cards.append(LabelledCard(index=i, problem=g.problem, truth=g.answer, label=label, corruption=kind,
                                  raw=labelled_card_text(domain, g, label, consistent)))
    return cards


# ----------------------------------------------------------------- outcomes and metrics (pure)


@dataclass(frozen=True)
class CardOutcome:
    """What the screen and consensus did with one labelled card."""

    index: int
    corruption: str | None
    rejected: bool  # positive: the label was rejected (the card is invalid after the step)
    stage: Stage | None  # where it was rejected; None when kept
    reasons: tuple[str, ...]  # the final verdict's reason codes
    n_answers: int  # answers consensus saw (0: the card never reached consensus)
    n_extracted: int  # of those, answers the extractor found
    judged: bool  # consensus could have rejected it (enough extracted answers for a clear majority)
    agreement: float | None  # share of answers matching the label (None: not reached)

    @property
    def corrupted(self) -> bool:
        return self.corruption is not None


def could_judge(n_answers: int, n_extracted: int, config: VerifierConfig) -> bool:
    """Whether consensus can reject a card with these answers: it applies (``consensus_min_attempts``) and
    more than ``consensus_majority`` of the answers were extracted, so a clear majority could form."""
    return n_answers >= config.consensus_min_attempts and n_extracted > config.consensus_majority * n_answers


@dataclass(frozen=True)
class Rate:
    """``hits`` out of ``total``, with its binomial standard error (value and se are None when total is 0)."""

    hits: int
    total: int

    @property
    def value(self) -> float | None:
        return self.hits / self.total if self.total else None

    @property
    def se(self) -> float | None:
        p = self.value
        return None if p is None else math.sqrt(p * (1.0 - p) / self.total)

    def to_dict(self) -> dict[str, Any]:
        return {"hits": self.hits, "total": self.total, "value": self.value, "se": self.se}

    def __str__(self) -> str:
        if self.value is None:
            return "   n/a  (0/0)"
        return f"{self.value:6.3f} ± {self.se:.3f} ({self.hits}/{self.total})"


@dataclass(frozen=True)
class Confusion:
    """Wrong-label detection counts; positive = the label was rejected, actual positive = the label is wrong."""

    tp: int  # wrong label, rejected
    fp: int  # correct label, rejected
    fn: int  # wrong label, kept
    tn: int  # correct label, kept

    @classmethod
    def of(cls, pairs: Sequence[tuple[bool, bool]]) -> "Confusion":
        """From ``(label is wrong, label was rejected)`` pairs."""
        c = Counter(pairs)
        return cls(tp=c[(True, True)], fp=c[(False, True)], fn=c[(True, False)], tn=c[(False, False)])

    @property
    def precision(self) -> Rate:
        """Of the rejected labels, the share that were wrong."""
        return Rate(self.tp, self.tp + self.fp)

    @property
    def recall(self) -> Rate:
        """Of the wrong labels, the share rejected."""
        return Rate(self.tp, self.tp + self.fn)

    @property
    def false_rejection(self) -> Rate:
        """Of the correct labels, the share wrongly rejected."""
        return Rate(self.fp, self.fp + self.tn)

    def to_dict(self) -> dict[str, Any]:
        return {"tp": self.tp, "fp": self.fp, "fn": self.fn, "tn": self.tn, "precision": self.precision.to_dict(),
                "recall": self.recall.to_dict(), "false_rejection": self.false_rejection.to_dict()}


@dataclass(frozen=True)
class LabelAccuracy:
    """The harness's result: detection over all cards, consensus alone on the cards it could judge, and counts."""

    n_cards: int
    n_corrupted: int
    overall: Confusion  # screen + consensus, every card (a card consensus could not judge counts as kept)
    consensus: Confusion  # consensus alone, over the judged cards
    screen_rejected: Rate  # of all cards
    reached: Rate  # of all cards: passed the screen and were answered for consensus
    judged: Rate  # of the reached cards: enough extracted answers for consensus to decide
    extracted: Rate  # of all answers consensus saw: how many the extractor found
    by_kind: dict[str, Rate]  # per corruption kind: wrong labels rejected (screen or consensus)
    screen_reasons: dict[str, int]  # reason codes of the screen's rejections
    settings: dict[str, Any] = field(default_factory=dict)  # what was run (model, solver, n, share, seed, ...)

    def to_dict(self) -> dict[str, Any]:
        return {
            "settings": self.settings, "n_cards": self.n_cards, "n_corrupted": self.n_corrupted,
            "overall": self.overall.to_dict(), "consensus_on_judged": self.consensus.to_dict(),
            "screen_rejected": self.screen_rejected.to_dict(), "reached_consensus": self.reached.to_dict(),
            "judged": self.judged.to_dict(), "answers_extracted": self.extracted.to_dict(),
            "detected_by_kind": {k: r.to_dict() for k, r in self.by_kind.items()},
            "screen_reasons": dict(self.screen_reasons),
        }


def summarize(outcomes: Sequence[CardOutcome], settings: dict[str, Any] | None = None) -> LabelAccuracy:
    """The metrics of a harness run (pure: hand-made outcomes give hand-checkable numbers)."""
    reached = [o for o in outcomes if o.n_answers > 0]
    judged = [o for o in reached if o.judged]
    screen = [o for o in outcomes if o.stage == "screen"]
    by_kind: dict[str, Rate] = {}
    for kind in sorted({o.corruption for o in outcomes if o.corruption is not None}):
        group = [o for o in outcomes if o.corruption == kind]
        by_kind[kind] = Rate(sum(o.rejected for o in group), len(group))
    return LabelAccuracy(
        n_cards=len(outcomes),
        n_corrupted=sum(o.corrupted for o in outcomes),
        overall=Confusion.of([(o.corrupted, o.rejected) for o in outcomes]),
        consensus=Confusion.of([(o.corrupted, o.stage == "consensus") for o in judged]),
        screen_rejected=Rate(len(screen), len(outcomes)),
        reached=Rate(len(reached), len(outcomes)),
        judged=Rate(len(judged), len(reached)),
        extracted=Rate(sum(o.n_extracted for o in reached), sum(o.n_answers for o in reached)),
        by_kind=by_kind,
        screen_reasons=dict(Counter(code for o in screen for code in o.reasons).most_common()),
        settings=dict(settings or {}),
    )


def format_table(result: LabelAccuracy) -> str:
    """A plain-text table of a result (rates as value ± standard error (hits/total))."""
    s = result.settings
    head = ", ".join(f"{k}={v}" for k, v in s.items())
    o, c = result.overall, result.consensus
    rows = [
        f"label accuracy harness: {head}" if head else "label accuracy harness",
        f"cards: {result.n_cards}, wrong labels: {result.n_corrupted}   (positive = label rejected)",
        "",
        f"{'screen + consensus, all cards':<48} TP={o.tp} FP={o.fp} FN={o.fn} TN={o.tn}",
        f"  {'precision (rejected that were wrong)':<46} {o.precision}",
        f"  {'recall (wrong labels rejected)':<46} {o.recall}",
        f"  {'correct labels wrongly rejected':<46} {o.false_rejection}",
        f"{'consensus alone, judged cards':<48} TP={c.tp} FP={c.fp} FN={c.fn} TN={c.tn}",
        f"  {'precision':<46} {c.precision}",
        f"  {'recall':<46} {c.recall}",
        f"  {'correct labels wrongly rejected':<46} {c.false_rejection}",
        "",
        f"{'rejected by the screen (of all cards)':<48} {result.screen_rejected}",
        f"{'reached consensus (of all cards)':<48} {result.reached}",
        f"{'judged: enough answers extracted (of reached)':<48} {result.judged}",
        f"{'answers extracted (of answers sampled)':<48} {result.extracted}",
    ]
    if result.by_kind:
        rows.append("wrong labels rejected, by corruption kind:")
        rows += [f"  {kind:<46} {rate}" for kind, rate in result.by_kind.items()]
    if result.screen_reasons:
        rows.append("screen rejections: " + ", ".join(f"{k}={v}" for k, v in result.screen_reasons.items()))
    return "\n".join(rows)


# ----------------------------------------------------------------- the harness (runs a real step)


class _ReplayDomain:
    """The math domain with its generator replaced by a queue of prepared cards (``uniform`` mode draws
    them in order); remembers which problem each Reasoner-style prompt asked."""

    def __init__(self, base: MathDomain) -> None:
        self._base = base
        self.queue: list[str] = []
        self.problem_of: dict[str, str] = {}  # user prompt -> problem

    def __getattr__(self, name: str) -> Any:
        return getattr(self._base, name)

    def static_cards(self, rng: random.Random, n: int) -> list[str]:
        if len(self.queue) != n:
            raise RuntimeError(f"the step asked for {n} cards, {len(self.queue)} were prepared")
        out, self.queue = self.queue, []
        return out

    def reasoner_prompt(self, problem: str) -> str:
        text = self._base.reasoner_prompt(problem)
        self.problem_of[text] = problem
        return text


def _no_update(batch: Sequence[Any]) -> UpdateStats:
    """The stats of an update that did not happen (a NaN loss keeps it out of the step's metrics)."""
    return UpdateStats(loss=float("nan"), n_sequences=len(batch), n_tokens=0, n_skipped_zero_adv=0,
                       grad_norm=0.0, clip_frac=0.0, kl=0.0, lr=0.0, nan_skipped=False, stepped=False)


class _LoggingSolver:
    """A frozen view of a policy: generates as the policy does, logs each problem's completions, never trains."""

    policy_version = 0  # frozen: it never steps

    def __init__(self, policy: Any, domain: _ReplayDomain) -> None:
        self._policy = policy
        self._domain = domain
        self._user_of: dict[str, str] = {}  # formatted prompt -> user prompt
        self.answers: dict[str, list[str]] = {}  # problem -> whole response texts (prefix included)

    def format_prompt(self, user_text: str, system: str | None = None) -> str:
        formatted = self._policy.format_prompt(user_text, system=system)
        self._user_of[formatted] = user_text
        return formatted

    def generate(self, prompts: Sequence[str], n: int, params: SamplingParams | None = None) -> list[list[Completion]]:
        groups = self._policy.generate(prompts, n, params)
        prefix = response_prefix(self._domain)  # type: ignore[arg-type]
        for prompt, group in zip(prompts, groups):
            formatted = prompt[: len(prompt) - len(prefix)] if prefix else prompt
            problem = self._domain.problem_of[self._user_of[formatted]]
            self.answers[problem] = [prefix + c.text for c in group]
        return groups

    def update(self, batch: Sequence[Any]) -> UpdateStats:
        """No training: a measurement must not change the solver between batches."""
        return _no_update(batch)

    def trainable_parameters(self) -> list[Any]:
        return []


class _SilentReasoner:
    """The Reasoner of a ``checker`` run: its attempts come after the checker's verdict, so it answers ""
    at no cost instead of spending a model's time on answers the measurement never reads."""

    policy_version = 0  # frozen: it never steps

    def format_prompt(self, user_text: str, system: str | None = None) -> str:
        return user_text

    def generate(self, prompts: Sequence[str], n: int, params: SamplingParams | None = None) -> list[list[Completion]]:
        return [[Completion(text="", prompt_ids=[], completion_ids=[], logprobs=[], truncated=False,
                            finish_reason="stop") for _ in range(n)] for _ in prompts]

    def update(self, batch: Sequence[Any]) -> UpdateStats:
        return _no_update(batch)

    def trainable_parameters(self) -> list[Any]:
        return []


class _Unused:
    """The Synthesizer of a harness step: ``uniform`` mode never asks it for anything."""

    def __getattr__(self, name: str) -> Any:
        raise RuntimeError(f"the label harness's Synthesizer was used ({name}); the step must run in uniform mode")


class _RecordsOnly:
    """Stands in for the pool: keeps each step's records in memory."""

    def __init__(self) -> None:
        self.records: list[TaskRecord] = []

    def record_step(self, step: int, records: Sequence[TaskRecord], metrics: Any = None) -> None:
        self.records.extend(records)

    def recent(self, n: int) -> list[TaskRecord]:
        return []


@dataclass(frozen=True)
class HarnessSettings:
    """How the harness runs the step (the training config's values, see ``settings_from_config``)."""

    solver: SolverKind = "reasoner"
    n_answers: int = 4  # K attempts (reasoner) or M checker answers
    sampling: SamplingParams = field(default_factory=SamplingParams)
    verifier: VerifierConfig = field(default_factory=lambda: VerifierConfig(novelty_threshold=1.0))
    batch_size: int = 16  # cards per step

    def __post_init__(self) -> None:
        if self.solver not in ("reasoner", "checker"):
            raise ValueError(f"solver must be 'reasoner' or 'checker', got {self.solver!r}")
        if self.n_answers < 1:
            raise ValueError(f"n_answers must be >= 1, got {self.n_answers}")
        if self.batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {self.batch_size}")


def settings_from_config(cfg: Any, solver: SolverKind, n_answers: int | None = None, batch_size: int = 16,
                         novelty_threshold: float | None = 1.0) -> HarnessSettings:
    """Harness settings from a ``RunConfig``: K / M, the solver's sampling and the verifier config as a run uses.

    ``novelty_threshold`` (default 1.0: only exact repeats) replaces the config's, because family members of
    the generator differ only in numbers and would otherwise be screened out as near-duplicates, which says
    nothing about labels; None keeps the config's.
    """
    if solver == "checker":
        n = cfg.consensus_m if n_answers is None else n_answers
        sampling = (cfg.checker or cfg.reasoner).sampling
    else:
        n = cfg.k if n_answers is None else n_answers
        sampling = cfg.reasoner.sampling
    verifier = cfg.verifier if novelty_threshold is None else cfg.verifier.model_copy(
        update={"novelty_threshold": novelty_threshold})
    return HarnessSettings(solver=solver, n_answers=n, sampling=sampling, verifier=verifier, batch_size=batch_size)


def run_label_harness(cards: Sequence[LabelledCard], solver_policy: Any, settings: HarnessSettings,
                      domain: MathDomain | None = None, checker: Any = None,
                      on_step: Callable[[int, "StepStats"], None] | None = None) -> list[CardOutcome]:
    """Run the cards through real co-training steps (screen + consensus) and return one outcome per card.

    ``solver_policy`` answers for consensus: it is the Reasoner (``reasoner``, K attempts reused) or the
    frozen consensus checker (``checker``, M answers). It is wrapped so it never trains. ``checker`` is the
    ``AnswerChecker`` (one is started and closed here when None).
    """
    from synco.grading.checker import AnswerChecker
    from synco.cotrain.engine import CoTrainState, cotrain_step
    from synco.cotrain.settings import StepSettings
    from synco.evosyn.config import EvoSynConfig
    from synco.core.report import build_report
    from synco.grading.verifier import TaskVerifier

    domain = domain or MathDomain()
    if domain.has_oracle:
        raise ValueError(f"domain {domain.name!r} has an oracle: consensus never runs, there is nothing to measure")
    replay = _ReplayDomain(domain)
    solver = _LoggingSolver(solver_policy, replay)
    own_checker = checker is None
    answer_checker = AnswerChecker() if own_checker else checker
    try:
        verifier = TaskVerifier(settings.verifier, checker=answer_checker, oracle=None)
        use_checker = settings.solver == "checker"
        step_settings = StepSettings(
            mode="uniform", n_cards=1, n_contexts=1, k=1 if use_checker else settings.n_answers,
            group_factor="topic", reasoner_sampling=settings.sampling, consensus=True,
            consensus_m=settings.n_answers, checker_sampling=settings.sampling,
            evosyn=EvoSynConfig(designer=False, reflector=False),
        )
        pool = _RecordsOnly()
        state = CoTrainState(settings=step_settings, domain=replay, synthesizer=_Unused(),  # type: ignore[arg-type]
                             reasoner=_SilentReasoner() if use_checker else solver,  # type: ignore[arg-type]
                             verifier=verifier, checker=answer_checker, pool=pool,  # type: ignore[arg-type]
                             report=build_report([]), rng=random.Random(0),
                             consensus_checker=solver if use_checker else None)  # type: ignore[arg-type]
        for step, start in enumerate(range(0, len(cards), settings.batch_size)):
            batch = cards[start: start + settings.batch_size]
            replay.queue = [c.raw for c in batch]
            state.settings = replace(step_settings, n_cards=len(batch))
            stats = cotrain_step(state, step)
            if on_step is not None:
                on_step(step, stats)
    finally:
        if own_checker:
            answer_checker.close()
    if len(pool.records) != len(cards):
        raise RuntimeError(f"the steps recorded {len(pool.records)} cards for {len(cards)} prepared")
    return [_outcome(c, r, solver.answers, settings.verifier) for c, r in zip(cards, pool.records)]


def _outcome(card: LabelledCard, record: TaskRecord, answers: dict[str, list[str]],
             config: VerifierConfig) -> CardOutcome:
    """One card's outcome from its step record and the answers consensus saw."""
    texts = answers.get(card.problem, [])
    extracted = sum(extract_answer(t) is not None for t in texts)
    rejected = not record.valid
    stage: Stage | None = None
    if rejected:
        stage = "consensus" if texts and CONSENSUS_REASONS & set(record.verdict.reason_codes) else "screen"
    return CardOutcome(index=card.index, corruption=card.corruption, rejected=rejected, stage=stage,
                       reasons=tuple(record.verdict.reason_codes), n_answers=len(texts), n_extracted=extracted,
                       judged=bool(texts) and could_judge(len(texts), extracted, config),
                       agreement=record.verdict.agreement if texts else None)


def outcomes_to_jsonl(outcomes: Sequence[CardOutcome]) -> str:
    """One JSON object per outcome (for inspecting individual cards)."""
    return "\n".join(json.dumps(asdict(o)) for o in outcomes)
