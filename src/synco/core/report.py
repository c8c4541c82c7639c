"""The capability report: what the Reasoner can and cannot do yet, for the Synthesizer's prompt.

Built from the pool's recent window of task records, the report measures the
Reasoner (success-rate bands, per-factor success, the weakest factors) and the
Synthesizer's output (validity, duplicates, rejection reasons, factor coverage),
and turns that into a few recommendations. ``render`` writes it as prompt text
within a character budget; ``render_compact`` gives a one-liner for tiny models.

Factor values, reason codes and card text are model output: they are only ever
concatenated, never passed through ``str.format``, so LaTeX braces survive.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict, Field, model_validator

from synco.core.records import DUPLICATE_CODES, TaskCard, TaskRecord

MAX_LABEL_CHARS = 40
"""Factor keys, values and reason codes are cut to this many characters."""

RECENT_PROBLEM_CHARS = 300
"""Problems kept in ``CapabilityReport.recent_problems`` are cut to this many characters."""


class ReportConfig(BaseModel):
    """Thresholds and sizes of the capability report."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    window: int = Field(500, ge=1, description="Most recent records the report looks at.")
    too_easy: float = Field(0.95, ge=0, le=1, description="Success rate >= this: too easy (no signal).")
    too_hard: float = Field(0.05, ge=0, le=1, description="Success rate < this: too hard (no signal).")
    learnable_low: float = Field(0.2, ge=0, le=1, description="Lower edge of the learnable band (inclusive).")
    learnable_high: float = Field(0.8, ge=0, le=1, description="Upper edge of the learnable band (inclusive).")
    min_samples: int = Field(5, ge=1, description="Measured tasks a factor value needs before it can be 'weakest'.")
    top_k: int = Field(5, ge=1, description="Length of the weakest / coverage / rejection-reason lists.")
    char_budget: int = Field(2000, ge=0, description="Default character budget of render().")
    over_ratio: float = Field(1.5, gt=1, description="Share > over_ratio x uniform share: over-covered.")
    under_ratio: float = Field(0.5, gt=0, lt=1, description="Share < under_ratio x uniform share: under-covered.")
    min_valid_rate: float = Field(0.5, ge=0, le=1, description="Valid rate below this triggers a validity hint.")
    duplicate_alert: float = Field(0.1, ge=0, le=1, description="Duplicate share above this triggers a hint.")
    min_learnable_share: float = Field(0.5, ge=0, le=1, description="Learnable share below this triggers a hint.")
    band_alert: float = Field(0.3, ge=0, le=1, description="Too-easy or too-hard share >= this triggers a hint.")
    recent_problems: int = Field(4, ge=0, description="Latest valid problems the report keeps (prompts that list them ask for something different).")

    @model_validator(mode="after")
    def _ordered_bands(self) -> "ReportConfig":
        """The bands must nest: too_hard <= learnable_low <= learnable_high <= too_easy."""
        if not self.too_hard <= self.learnable_low <= self.learnable_high <= self.too_easy:
            raise ValueError("need too_hard <= learnable_low <= learnable_high <= too_easy")
        return self


class FactorStat(BaseModel):
    """Reasoner success on the valid tasks that carry one factor value.

    ``n_tasks`` counts valid tasks with the value; ``n_measured`` those of them
    with rollouts. ``success_rate`` is the mean of per-task success rates (each
    task weighs the same whatever its number of rollouts).
    """

    key: str
    value: str
    n_tasks: int
    n_measured: int = 0
    n_rollouts: int = 0
    success_rate: float | None = None
    gradient_bearing_rate: float | None = None


class CoverageStat(BaseModel):
    """How often the Synthesizer wrote one factor value, against a uniform spread over the key's values."""

    key: str
    value: str
    n_tasks: int
    share: float
    uniform_share: float


class ReasonCount(BaseModel):
    """How many rejected cards carried one verdict reason code."""

    code: str
    count: int


class BandCounts(BaseModel):
    """Measured valid tasks per success-rate band."""

    too_easy: int = 0
    learnable: int = 0
    too_hard: int = 0
    in_between: int = 0

    @property
    def total(self) -> int:
        return self.too_easy + self.learnable + self.too_hard + self.in_between


class CapabilityReport(BaseModel):
    """The Synthesizer's view of the run: Reasoner weaknesses and its own output's quality."""

    step: int = 0
    n_records: int = 0
    n_valid: int = 0
    valid_rate: float = 0.0
    n_duplicates: int = 0
    top_reasons: list[ReasonCount] = Field(default_factory=list)
    bands: BandCounts = Field(default_factory=BandCounts)
    n_measured: int = 0
    mean_success_rate: float | None = None
    gradient_bearing_share: float | None = None
    factors: list[FactorStat] = Field(default_factory=list)
    weakest: list[FactorStat] = Field(default_factory=list)
    over_covered: list[CoverageStat] = Field(default_factory=list)
    under_covered: list[CoverageStat] = Field(default_factory=list)
    recommendations: list[str] = Field(default_factory=list)
    recent_problems: list[str] = Field(default_factory=list)  # latest valid problems, oldest first, each <= RECENT_PROBLEM_CHARS
    first_wrong: list[ReasonCount] = Field(default_factory=list)  # failed episodes: where they first left the gold trajectory
    config: ReportConfig = Field(default_factory=ReportConfig)

    @property
    def learnable_share(self) -> float | None:
        """Share of measured tasks in the learnable band, or None before any measurement."""
        return self.bands.learnable / self.n_measured if self.n_measured else None

    def to_json(self) -> str:
        return self.model_dump_json()

    @classmethod
    def from_json(cls, text: str) -> "CapabilityReport":
        return cls.model_validate_json(text)

    def render(self, budget: int | None = None) -> str:
        """Prompt text of at most ``budget`` characters (default: config.char_budget).

        Whole lines of the least important sections are dropped first; a line
        is cut only when not even the title line fits.
        """
        limit = self.config.char_budget if budget is None else budget
        return _fit_sections(_sections(self), limit)

    def render_compact(self, budget: int = 120) -> str:
        """A one-line summary for tiny models, e.g. ``weak:5,6|easy:1|hard:9|ok:0.41``.

        Built from the factor key ``level`` when present, else ``difficulty``:
        ``hard`` values have success < too_hard, ``easy`` >= too_easy, ``weak``
        are the other values with the lowest success; ``ok`` is the learnable
        share. Values need min_samples measured tasks. At most ``budget`` chars.
        """
        if budget <= 0:
            return ""
        if self.n_records == 0:
            return "no data"[:budget]
        cfg = self.config
        key = "level" if any(f.key == "level" for f in self.factors) else "difficulty"
        stats = sorted(
            (
                f
                for f in self.factors
                if f.key == key and f.n_measured >= cfg.min_samples and f.success_rate is not None
            ),
            key=_weak_order,
        )
        hard = [f.value for f in stats if _rate(f) < cfg.too_hard]
        easy = [f.value for f in reversed(stats) if _rate(f) >= cfg.too_easy]
        weak = [f.value for f in stats if cfg.too_hard <= _rate(f) < cfg.too_easy]
        tail: list[tuple[str, list[str]]] = []
        if self.learnable_share is not None:
            tail.append(("ok", [_num(self.learnable_share)]))
        if self.valid_rate < cfg.min_valid_rate:
            tail.append(("valid", [_num(self.valid_rate)]))
        lists = [("weak", weak), ("easy", easy), ("hard", hard)]
        for cap in (3, 2, 1, 0):
            text = _join_compact([(label, values[:cap]) for label, values in lists] + tail)
            if text and len(text) <= budget:
                return text
        return (_join_compact(tail) or "no measurements")[:budget]


# ---------------------------------------------------------------- building


def normalise_label(text: str) -> str:
    """Factor key/value as the report groups it: whitespace collapsed, lowercased, <= 40 chars."""
    return " ".join(text.split()).lower()[:MAX_LABEL_CHARS]


def record_factors(card: TaskCard) -> dict[str, str]:
    """The factor labels of a card: its ``factors`` plus ``style`` and ``difficulty``.

    The card's own ``factors`` win over the derived labels on a name clash;
    labels that normalise to the empty string are left out.
    """
    out: dict[str, str] = {}
    derived = (("style", card.target_reasoning_style), ("difficulty", card.difficulty_estimate))
    for key, value in (*card.factors.items(), *derived):
        nkey, nvalue = normalise_label(key), normalise_label(value)
        if nkey and nvalue:
            out.setdefault(nkey, nvalue)
    return out


def task_success(record: TaskRecord) -> float | None:
    """The record's success rate: its stored value, else the share of correct rollouts, else None."""
    if record.success_rate is not None:
        return record.success_rate
    if record.rollouts:
        return sum(r.correct for r in record.rollouts) / len(record.rollouts)
    return None


def band_of(p: float, config: ReportConfig) -> str:
    """Which success-rate band ``p`` falls in: too_easy, too_hard, learnable or in_between."""
    if p >= config.too_easy:
        return "too_easy"
    if p < config.too_hard:
        return "too_hard"
    if config.learnable_low <= p <= config.learnable_high:
        return "learnable"
    return "in_between"


def build_report(
    records: Sequence[TaskRecord], config: ReportConfig = ReportConfig(), step: int | None = None
) -> CapabilityReport:
    """Build the capability report from the last ``config.window`` of ``records``.

    ``step`` is the step the report is for; None: the step after the latest record's, as a run builds it after
    that step (0 without records).
    """
    window = list(records)[-config.window :]
    if step is None:
        step = max((r.step for r in window), default=-1) + 1
    n_records = len(window)
    valid = [r for r in window if r.valid]
    measured = [(r, p) for r in valid if (p := task_success(r)) is not None]
    bands = BandCounts(**Counter(band_of(p, config) for _, p in measured))
    n_measured = len(measured)
    factors = _factor_stats(valid)
    report = CapabilityReport(
        step=step,
        n_records=n_records,
        n_valid=len(valid),
        valid_rate=len(valid) / n_records if n_records else 0.0,
        n_duplicates=sum(1 for r in window if DUPLICATE_CODES & set(r.verdict.reason_codes)),
        top_reasons=_reason_counts(window, config.top_k),
        bands=bands,
        n_measured=n_measured,
        mean_success_rate=sum(p for _, p in measured) / n_measured if n_measured else None,
        gradient_bearing_share=sum(r.gradient_bearing for r, _ in measured) / n_measured if n_measured else None,
        factors=factors,
        weakest=_weakest(factors, n_measured, config),
        over_covered=[],
        under_covered=[],
        recent_problems=_recent_problems(valid, config.recent_problems),
        first_wrong=_first_wrong(valid, config.top_k),
        config=config,
    )
    report.over_covered, report.under_covered = _coverage(valid, config)
    report.recommendations = _recommendations(report)
    return report


def _recent_problems(valid: Sequence[TaskRecord], n: int) -> list[str]:
    """The problems of the latest ``n`` valid records (oldest first), whitespace collapsed and cut."""
    if n <= 0:
        return []
    problems = [" ".join(r.card.payload.prompt_text().split())[:RECENT_PROBLEM_CHARS] for r in valid if r.card is not None]
    return problems[-n:]


def _first_wrong(valid: Sequence[TaskRecord], top_k: int) -> list[ReasonCount]:
    """Failed episodes' first departures from the gold trajectory (``wrong_arguments:cancel_order``), most frequent
    first: which tool call the Reasoner gets wrong first (domains with an environment and gold trajectories)."""
    counts = Counter(ro.first_wrong for r in valid for ro in r.rollouts if ro.first_wrong)
    ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    return [ReasonCount(code=code, count=n) for code, n in ranked[:top_k]]


def _reason_counts(records: Sequence[TaskRecord], top_k: int) -> list[ReasonCount]:
    """Reason codes of the rejected cards, each counted once per card, most frequent first."""
    counts: Counter[str] = Counter()
    for record in records:
        if not record.valid:
            counts.update({normalise_label(code) for code in record.verdict.reason_codes} - {""})
    ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    return [ReasonCount(code=code, count=n) for code, n in ranked[:top_k]]


def _factor_stats(valid: Sequence[TaskRecord]) -> list[FactorStat]:
    """Per (key, value) statistics over valid tasks, sorted by key then most tasks first."""
    n_tasks: Counter[tuple[str, str]] = Counter()
    n_rollouts: Counter[tuple[str, str]] = Counter()
    rates: defaultdict[tuple[str, str], list[float]] = defaultdict(list)
    bearing: Counter[tuple[str, str]] = Counter()
    for record in valid:
        if record.card is None:
            continue
        p = task_success(record)
        for pair in record_factors(record.card).items():
            n_tasks[pair] += 1
            if p is not None:
                rates[pair].append(p)
                n_rollouts[pair] += len(record.rollouts)
                bearing[pair] += int(record.gradient_bearing)
    stats = [
        FactorStat(
            key=key,
            value=value,
            n_tasks=n,
            n_measured=len(rates[(key, value)]),
            n_rollouts=n_rollouts[(key, value)],
            success_rate=sum(rates[(key, value)]) / len(rates[(key, value)]) if rates[(key, value)] else None,
            gradient_bearing_rate=bearing[(key, value)] / len(rates[(key, value)]) if rates[(key, value)] else None,
        )
        for (key, value), n in n_tasks.items()
    ]
    stats.sort(key=lambda f: (f.key, -f.n_tasks, f.value))
    return stats


def _rate(stat: FactorStat) -> float:
    return stat.success_rate if stat.success_rate is not None else 0.0


def _weak_order(stat: FactorStat) -> tuple[float, int, str, str]:
    """Sort key: lowest success first, then the better-measured value, then by name."""
    return (_rate(stat), -stat.n_measured, stat.key, stat.value)


def _weakest(factors: Sequence[FactorStat], n_measured: int, config: ReportConfig) -> list[FactorStat]:
    """Factor values with >= min_samples measured tasks and the lowest Reasoner success.

    A value carried by every measured task says nothing beyond the overall mean,
    and a value already solved at the too-easy rate is no weakness: both are left out.
    """
    eligible = [
        f
        for f in factors
        if f.success_rate is not None
        and f.success_rate < config.too_easy
        and config.min_samples <= f.n_measured < n_measured
    ]
    return sorted(eligible, key=_weak_order)[: config.top_k]


def _coverage(valid: Sequence[TaskRecord], config: ReportConfig) -> tuple[list[CoverageStat], list[CoverageStat]]:
    """Over- and under-covered factor values among valid tasks, against a uniform spread.

    Only keys with at least two observed values and min_samples tasks are judged.
    """
    per_key: defaultdict[str, Counter[str]] = defaultdict(Counter)
    for record in valid:
        if record.card is not None:
            for key, value in record_factors(record.card).items():
                per_key[key][value] += 1
    over: list[CoverageStat] = []
    under: list[CoverageStat] = []
    for key, counts in per_key.items():
        total = sum(counts.values())
        if len(counts) < 2 or total < config.min_samples:
            continue
        uniform = 1 / len(counts)
        for value, n in counts.items():
            stat = CoverageStat(key=key, value=value, n_tasks=n, share=n / total, uniform_share=uniform)
            if stat.share > config.over_ratio * uniform:
                over.append(stat)
            elif stat.share < config.under_ratio * uniform:
                under.append(stat)
    over.sort(key=lambda c: (-c.share / c.uniform_share, c.key, c.value))
    under.sort(key=lambda c: (c.share / c.uniform_share, c.key, c.value))
    return over[: config.top_k], under[: config.top_k]


def _pct(x: float) -> str:
    return str(round(100 * x)) + "%"


def _num(x: float) -> str:
    return format(x, ".2f")


def _pair(key: str, value: str) -> str:
    """``key=value`` by concatenation (model text must never meet str.format)."""
    return key + "=" + value


def _recommendations(report: CapabilityReport) -> list[str]:
    """Short hints for the Synthesizer, most important first."""
    cfg = report.config
    if report.n_records == 0:
        return ["no data yet: write clear, verifiable problems across a range of difficulty levels"]
    out: list[str] = []
    if report.valid_rate < cfg.min_valid_rate:
        hint = "make cards valid first: only " + _pct(report.valid_rate) + " were valid"
        if report.top_reasons:
            top = report.top_reasons[0]
            hint += "; most common rejection: " + top.code + " (" + str(top.count) + ")"
        out.append(hint)
    if report.n_duplicates / report.n_records > cfg.duplicate_alert:
        out.append(
            "avoid repeats: " + str(report.n_duplicates) + " of " + str(report.n_records)
            + " cards duplicated earlier problems"
        )
    share = report.learnable_share
    if share is not None:
        if share < cfg.min_learnable_share:
            out.append("aim between too easy and too hard: learnable share is " + _pct(share))
        if report.bands.too_easy / report.n_measured >= cfg.band_alert:
            out.append("make tasks harder: " + _pct(report.bands.too_easy / report.n_measured)
                       + " were solved by nearly every attempt")
        if report.bands.too_hard / report.n_measured >= cfg.band_alert:
            out.append("make tasks easier or clearer: " + _pct(report.bands.too_hard / report.n_measured)
                       + " were almost never solved")
    if report.weakest:
        out.append("target the Reasoner's weak spots: " + ", ".join(
            _pair(f.key, f.value) + " (" + _num(_rate(f)) + ")" for f in report.weakest[:3]))
    if report.under_covered:
        out.append("cover more: " + ", ".join(_pair(c.key, c.value) for c in report.under_covered[:3]))
    if report.over_covered:
        out.append("vary more, fewer of: " + ", ".join(_pair(c.key, c.value) for c in report.over_covered[:3]))
    return out or ["keep going: the task mix looks balanced"]


# ---------------------------------------------------------------- rendering


def _sections(report: CapabilityReport) -> list[tuple[str, list[str]]]:
    """(title, lines) of each section, most important first."""
    cfg = report.config
    title = "Capability report (step " + str(report.step) + ", last " + str(report.n_records) + " cards)"
    if report.n_records == 0:
        return [
            ("Capability report (step " + str(report.step) + "): no data yet", []),
            ("Recommendations:", ["- " + r for r in report.recommendations]),
        ]
    summary = (
        "valid " + str(report.n_valid) + "/" + str(report.n_records) + " (" + _pct(report.valid_rate) + ")"
        + ", duplicates " + str(report.n_duplicates)
    )
    if report.mean_success_rate is not None and report.gradient_bearing_share is not None:
        summary += (
            ", mean success " + _num(report.mean_success_rate)
            + ", gradient-bearing " + _pct(report.gradient_bearing_share)
            + " of " + str(report.n_measured) + " solved tasks"
        )
    else:
        summary += ", no solved tasks yet"
    sections: list[tuple[str, list[str]]] = [
        (title, [summary]),
        ("Recommendations:", ["- " + r for r in report.recommendations]),
    ]
    if report.weakest:
        sections.append((
            "Weakest (lowest Reasoner success, >= " + str(cfg.min_samples) + " tasks):",
            ["- " + _pair(f.key, f.value) + ": " + _num(_rate(f)) + " over " + str(f.n_measured) + " tasks"
             for f in report.weakest],
        ))
    if report.first_wrong:
        n_failed = sum(c.count for c in report.first_wrong)
        sections.append((
            "Failed episodes first go wrong at (top " + str(len(report.first_wrong)) + "):",
            ["- " + c.code + ": " + str(c.count) + " (" + _pct(c.count / n_failed) + ")" for c in report.first_wrong],
        ))
    if report.n_measured:
        b = report.bands
        sections.append((
            "Success bands (" + str(report.n_measured) + " solved tasks):",
            [
                "- learnable (" + _num(cfg.learnable_low) + "-" + _num(cfg.learnable_high) + "): "
                + str(b.learnable),
                "- too easy (>= " + _num(cfg.too_easy) + "): " + str(b.too_easy),
                "- too hard (< " + _num(cfg.too_hard) + "): " + str(b.too_hard),
                "- in between: " + str(b.in_between),
            ],
        ))
    if report.top_reasons:
        sections.append(("Top rejection reasons:", ["- " + r.code + ": " + str(r.count) for r in report.top_reasons]))
    if report.under_covered:
        sections.append(("Under-covered (rarer than uniform):", [_coverage_line(c) for c in report.under_covered]))
    if report.over_covered:
        sections.append(("Over-covered (commoner than uniform):", [_coverage_line(c) for c in report.over_covered]))
    shown = [f for f in report.factors if f.n_measured >= cfg.min_samples]
    shown.sort(key=lambda f: -f.n_measured)
    if shown:
        sections.append((
            "Success by factor:",
            ["- " + _pair(f.key, f.value) + ": " + _num(_rate(f)) + " (n=" + str(f.n_measured) + ")" for f in shown],
        ))
    return sections


def _coverage_line(c: CoverageStat) -> str:
    return "- " + _pair(c.key, c.value) + ": " + _pct(c.share) + " of tasks (uniform " + _pct(c.uniform_share) + ")"


def _fit_sections(sections: Sequence[tuple[str, list[str]]], budget: int) -> str:
    """Join as many whole lines as fit in ``budget`` characters, favouring earlier sections.

    The first section's title always comes first; any other section appears
    with its title and at least one line. A line that does not fit is skipped
    (later, shorter ones may still fit). Only a first title longer than the
    budget is cut.
    """
    if budget <= 0 or not sections:
        return ""
    head = sections[0][0]
    if len(head) > budget:
        return head[:budget]
    kept: list[list[str]] = [[] for _ in sections]
    kept[0].append(head)
    used = len(head)
    for i, (title, lines) in enumerate(sections):
        for line in lines:
            extra = len(line) + 1 + (len(title) + 1 if not kept[i] else 0)
            if used + extra <= budget:
                if not kept[i]:
                    kept[i].append(title)
                kept[i].append(line)
                used += extra
    return "\n".join(line for block in kept for line in block)


def _join_compact(parts: Sequence[tuple[str, list[str]]]) -> str:
    return "|".join(label + ":" + ",".join(values) for label, values in parts if values)
