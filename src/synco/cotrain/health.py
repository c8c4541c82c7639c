"""Run health checks: warn, or stop cleanly, before a co-training run goes bad.

Every step the trainer hands the run's ``StepStats`` history to :func:`new_alerts`.
Each check reads a windowed value from it (the mean over the last ``window`` steps,
so one noisy step moves it little), compares it with a threshold, and fires an
:class:`Alert` only when the value has been bad for ``patience`` steps in a row.
It fires once per episode: it stays quiet while the value stays bad and can fire
again after one good step. Everything here is a pure function of the history, so a
resumed run (the history is reloaded from ``metrics.jsonl``) fires exactly as the
uninterrupted run would.

Checks (config section ``health``, each with ``action: off | warn | stop``, default warn; ``health.valid_rate=stop``
is short for ``health.valid_rate.action=stop``):

* ``synth_collapse``: the Synthesizer writes an ever narrower set of tasks. Two
  measures: the spread of valid cards over factor values (``factor_balance``, EvoSyn's
  normalised entropy over the feasible cells, when the run has a factor space; else
  the normalised entropy of valid cards over the ``group_factor`` values seen) and the
  distinct-problem share (``n_distinct / n_cards``). Bad when either falls below its
  floor or by ``max_drop`` of its early level.
* ``valid_rate``: the share of cards the verifier accepts falls below ``min_rate`` or
  by ``max_drop`` of its early level.
* ``label_agreement``: domains without an oracle: the mean share of consensus answers
  that match the reference falls below ``min_agreement`` or by ``max_drop`` of its
  early level (quiet where no step measured it).
* ``rejection_code``: the share of cards carrying one reason code (e.g.
  ``answer_leaked``, ``near_duplicate``) reaches ``max_share`` and has risen by at
  least ``min_rise`` over its early level. Soft codes that do not reject a card
  (``ignore_codes``) are not watched.
* ``nan_skips``: more than ``max_skips`` updates were skipped for a NaN/inf loss or
  gradient within the window (patience 1: it fires at once).
* ``reward_saturation``: the Reasoner's accuracy on valid tasks sits at or below ``low``
  or at or above ``high``: every attempt group then has equal rewards and GRPO gets no
  gradient. Steps without valid tasks are not counted.

"Early level" is the mean over the run's first ``baseline_steps`` steps; drops and
rises are judged only once ``baseline_steps + window`` steps are recorded, so the
window never overlaps the baseline. Floors (and saturation, NaN skips) are judged as
soon as the window holds a measured step.

The defaults stay quiet on the default arith run (`synco train`, 100 steps), where the
valid rate drifts from ~0.88 to ~0.72, ``near_duplicate`` rises from 0 to ~0.19 of the
cards and factor_balance from ~1.0 to ~0.8; they fire on the failures named above.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Literal, Sequence

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

if TYPE_CHECKING:  # pragma: no cover - typing only (synco.cotrain.engine needs torch; this module does not)
    from synco.cotrain.stats import StepStats

HealthAction = Literal["off", "warn", "stop"]


class _CheckConfig(BaseModel):
    """Settings every check has: what to do when it fires and, optionally, its own window and patience."""

    model_config = ConfigDict(extra="forbid")

    action: HealthAction = Field("warn", description="off: never evaluated; warn: record and print the alert; stop: also checkpoint and stop the run cleanly (exit code 3, resumable).")
    window: int | None = Field(None, ge=1, description="Steps the value is averaged over (None: health.window).")
    patience: int | None = Field(None, ge=1, description="Consecutive bad steps before the check fires (None: health.patience).")

    @model_validator(mode="before")
    @classmethod
    def _action_alone(cls, value: object) -> object:
        """A check given a plain value (``health.valid_rate=stop``) is given its action; a bad one is then named as
        ``health.<check>.action``."""
        return value if isinstance(value, (dict, BaseModel)) else {"action": value}

    @field_validator("action", mode="before")
    @classmethod
    def _off_as_read(cls, value: object) -> object:
        """``off`` as YAML reads it (false) is ``off``."""
        return "off" if value is False else value


class CollapseCheck(_CheckConfig):
    """``synth_collapse``: factor-value spread or distinct-problem share falling."""

    min_balance: float = Field(0.5, ge=0, le=1, description="Floor of the factor-value spread (normalised entropy in [0, 1]).")
    min_distinct_share: float = Field(0.5, ge=0, le=1, description="Floor of the distinct-problem share n_distinct / n_cards.")
    max_drop: float = Field(0.4, gt=0, le=1, description="Fire when either measure falls by this fraction of its early level.")


class ValidRateCheck(_CheckConfig):
    """``valid_rate``: the verifier's acceptance rate falling."""

    min_rate: float = Field(0.2, ge=0, le=1, description="Floor of the valid rate.")
    max_drop: float = Field(0.5, gt=0, le=1, description="Fire when the valid rate falls by this fraction of its early level.")


class LabelAgreementCheck(_CheckConfig):
    """``label_agreement``: consensus agreement with the references falling (no-oracle domains)."""

    min_agreement: float = Field(0.2, ge=0, le=1, description="Floor of the mean label agreement.")
    max_drop: float = Field(0.4, gt=0, le=1, description="Fire when label agreement falls by this fraction of its early level.")


SOFT_REASON_CODES = ("reference_corrected", "solution_no_answer", "solution_answer_unclear")
"""Verifier reason codes that never reject a card (see ``synco.grading.verifier``)."""


class RejectionCodeCheck(_CheckConfig):
    """``rejection_code``: one reason code taking a rising share of the cards."""

    max_share: float = Field(0.35, gt=0, le=1, description="Fire when one code's share of the cards reaches this ...")
    min_rise: float = Field(0.25, gt=0, le=1, description="... and has risen by at least this much over its early share.")
    ignore_codes: list[str] = Field(list(SOFT_REASON_CODES), description="Reason codes not watched (soft codes that do not reject a card).")


class NanSkipCheck(_CheckConfig):
    """``nan_skips``: updates skipped for a non-finite loss or gradient."""

    patience: int | None = Field(1, ge=1, description="Consecutive bad steps before the check fires (None: health.patience).")
    max_skips: int = Field(1, ge=0, description="Fire when more than this many updates (both agents) were skipped within the window.")


class SaturationCheck(_CheckConfig):
    """``reward_saturation``: Reasoner accuracy pinned at 0 or 1, so GRPO has no gradient."""

    low: float = Field(0.02, ge=0, le=1, description="Fire when the Reasoner's windowed accuracy on valid tasks is at or below this.")
    high: float = Field(0.98, ge=0, le=1, description="Fire when it is at or above this.")

    @model_validator(mode="after")
    def _low_below_high(self) -> "SaturationCheck":
        if self.low >= self.high:
            raise ValueError(f"low={self.low} must be below high={self.high}")
        return self


class HealthConfig(BaseModel):
    """The ``health`` section: thresholds and actions of the per-step health checks."""

    model_config = ConfigDict(extra="forbid")

    window: int = Field(5, ge=1, description="Steps each value is averaged over (a check may set its own).")
    patience: int = Field(3, ge=1, description="Consecutive bad steps before a check fires (a check may set its own).")
    baseline_steps: int = Field(5, ge=1, description="The run's first this many steps give each value's early level, which drops and rises are measured against.")
    synth_collapse: CollapseCheck = Field(default_factory=CollapseCheck, description="Synthesizer collapse: factor-value spread or distinct-problem share falling.")
    valid_rate: ValidRateCheck = Field(default_factory=ValidRateCheck, description="The valid rate falling.")
    label_agreement: LabelAgreementCheck = Field(default_factory=LabelAgreementCheck, description="Label agreement falling (domains without an oracle).")
    rejection_code: RejectionCodeCheck = Field(default_factory=RejectionCodeCheck, description="A rising share of one rejection code (e.g. answer_leaked).")
    nan_skips: NanSkipCheck = Field(default_factory=NanSkipCheck, description="Updates skipped for NaN/inf.")
    reward_saturation: SaturationCheck = Field(default_factory=SaturationCheck, description="Reasoner accuracy saturated at 0 or 1 (no gradient).")


CHECK_NAMES = ("synth_collapse", "valid_rate", "label_agreement", "rejection_code", "nan_skips", "reward_saturation")
"""Every check, in evaluation order (the field names of ``HealthConfig``)."""


class Alert(BaseModel):
    """One firing of a check: a line of ``alerts.jsonl``."""

    step: int
    check: str
    value: float
    threshold: float
    action: Literal["warn", "stop"]
    message: str


@dataclass(frozen=True)
class Reading:
    """A check's value at one step; ``bad`` when it crosses ``threshold``."""

    value: float
    threshold: float
    bad: bool
    message: str


# ------------------------------------------------------------------ measuring


def _window_mean(rows: Sequence["StepStats"], get: Callable[["StepStats"], float | None]) -> float | None:
    """Mean of ``get`` over the rows where it is measured (not None), or None when none is."""
    xs = [x for x in map(get, rows) if x is not None]
    return sum(xs) / len(xs) if xs else None


def _parts(history: Sequence["StepStats"], cfg: HealthConfig, window: int) -> tuple[list, list, bool]:
    """(baseline rows, window rows, whether drops can be judged: the two do not overlap)."""
    base = list(history[: cfg.baseline_steps])
    recent = list(history[-window:])
    return base, recent, len(history) >= cfg.baseline_steps + window


def _falling(value: float | None, early: float | None, floor: float, max_drop: float) -> tuple[float, bool] | None:
    """(threshold, bad) of a value that should not fall: below its floor or by ``max_drop`` of its early level."""
    if value is None:
        return None
    threshold = floor if early is None else max(floor, (1.0 - max_drop) * early)
    return threshold, value < threshold


def _entropy(counts: dict[str, int], k: int) -> float | None:
    """Entropy of ``counts`` normalised by log(k), in [0, 1]; None when it cannot be measured (k < 2 or no counts)."""
    n = sum(counts.values())
    if k < 2 or n == 0:
        return None
    h = -sum(c / n * math.log(c / n) for c in counts.values() if c > 0)
    return h / math.log(k)


def _summed(rows: Sequence["StepStats"]) -> dict[str, int]:
    out: dict[str, int] = {}
    for r in rows:
        for g, n in r.groups.items():
            out[g] = out.get(g, 0) + n
    return out


def _balance(rows: Sequence["StepStats"], k: int) -> float | None:
    """Factor-value spread of valid cards in ``rows``: mean factor_balance if measured, else group entropy."""
    measured = _window_mean(rows, lambda r: r.evosyn.factor_balance)
    return measured if measured is not None else _entropy(_summed(rows), k)


def read_collapse(history: Sequence["StepStats"], cfg: HealthConfig) -> Reading | None:
    """``synth_collapse`` at the last step: the worse of factor-value spread and distinct-problem share."""
    c = cfg.synth_collapse
    base, recent, judge = _parts(history, cfg, c.window or cfg.window)
    k = len(_summed([*base, *recent]))
    spread = (_balance(recent, k), _balance(base, k) if judge else None)
    distinct = (_window_mean(recent, lambda r: r.n_distinct / r.n_cards if r.n_cards else None),
                _window_mean(base, lambda r: r.n_distinct / r.n_cards if r.n_cards else None) if judge else None)
    readings = []
    for name, (value, early), floor in (("factor-value spread", spread, c.min_balance),
                                        ("distinct-problem share", distinct, c.min_distinct_share)):
        judged = _falling(value, early, floor, c.max_drop)
        if judged is not None:
            threshold, bad = judged
            readings.append(Reading(value, threshold, bad, _fall_message(f"Synthesizer collapse: {name}", value,
                                                                         threshold, early)))
    if not readings:
        return None
    return next((r for r in readings if r.bad), readings[0])


def read_valid_rate(history: Sequence["StepStats"], cfg: HealthConfig) -> Reading | None:
    """``valid_rate`` at the last step."""
    c = cfg.valid_rate
    base, recent, judge = _parts(history, cfg, c.window or cfg.window)
    value = _window_mean(recent, lambda r: r.valid_rate if r.n_cards else None)
    early = _window_mean(base, lambda r: r.valid_rate if r.n_cards else None) if judge else None
    judged = _falling(value, early, c.min_rate, c.max_drop)
    if judged is None:
        return None
    return Reading(value, judged[0], judged[1], _fall_message("valid rate", value, judged[0], early))  # type: ignore[arg-type]


def read_label_agreement(history: Sequence["StepStats"], cfg: HealthConfig) -> Reading | None:
    """``label_agreement`` at the last step; None when no step in the window measured it (oracle domains)."""
    c = cfg.label_agreement
    base, recent, judge = _parts(history, cfg, c.window or cfg.window)
    value = _window_mean(recent, lambda r: r.label_agreement)
    early = _window_mean(base, lambda r: r.label_agreement) if judge else None
    judged = _falling(value, early, c.min_agreement, c.max_drop)
    if judged is None:
        return None
    return Reading(value, judged[0], judged[1], _fall_message("label agreement", value, judged[0], early))  # type: ignore[arg-type]


def _code_shares(rows: Sequence["StepStats"]) -> dict[str, float]:
    """Share of the cards in ``rows`` that carry each reason code."""
    n = sum(r.n_cards for r in rows)
    counts: dict[str, int] = {}
    for r in rows:
        for code, k in r.reasons.items():
            counts[code] = counts.get(code, 0) + k
    return {code: k / n for code, k in counts.items()} if n else {}


def read_rejection_code(history: Sequence["StepStats"], cfg: HealthConfig) -> Reading | None:
    """``rejection_code`` at the last step: the watched code closest to (or furthest past) its threshold."""
    c = cfg.rejection_code
    base, recent, judge = _parts(history, cfg, c.window or cfg.window)
    if not judge:
        return None  # a rise needs the early level
    now, early = _code_shares(recent), _code_shares(base)
    best: Reading | None = None
    for code in sorted(now):
        if code in c.ignore_codes:
            continue
        threshold = max(c.max_share, early.get(code, 0.0) + c.min_rise)
        value = now[code]
        if best is None or value - threshold > best.value - best.threshold:
            best = Reading(value, threshold, value >= threshold,
                           f"rejection code {code} on {value:.0%} of cards (early {early.get(code, 0.0):.0%}; "
                           f"threshold {threshold:.0%})")
    return best


def read_nan_skips(history: Sequence["StepStats"], cfg: HealthConfig) -> Reading | None:
    """``nan_skips`` at the last step: updates skipped for NaN/inf within the window."""
    c = cfg.nan_skips
    window = c.window or cfg.window
    recent = history[-window:]
    if not recent:
        return None
    value = float(sum(r.nan_skipped for r in recent))
    return Reading(value, float(c.max_skips), value > c.max_skips,
                   f"{value:.0f} update(s) skipped for a NaN/inf loss or gradient in the last {len(recent)} steps "
                   f"(more than {c.max_skips})")


def read_reward_saturation(history: Sequence["StepStats"], cfg: HealthConfig) -> Reading | None:
    """``reward_saturation`` at the last step: Reasoner accuracy on valid tasks at or beyond ``low`` / ``high``."""
    c = cfg.reward_saturation
    value = _window_mean(history[-(c.window or cfg.window):], lambda r: r.reasoner_accuracy if r.n_valid else None)
    if value is None:
        return None
    if value < (c.low + c.high) / 2:
        threshold, bad, side = c.low, value <= c.low, "0"
    else:
        threshold, bad, side = c.high, value >= c.high, "1"
    return Reading(value, threshold, bad, f"Reasoner accuracy {value:.3f} saturated at {side} (threshold {threshold}): "
                                          "attempt groups have equal rewards, so GRPO gets no gradient")


def _fall_message(name: str, value: float, threshold: float, early: float | None) -> str:
    early_text = "" if early is None else f", early level {early:.3f}"
    return f"{name} {value:.3f} below {threshold:.3f}{early_text}"


READERS: dict[str, Callable[[Sequence["StepStats"], HealthConfig], Reading | None]] = {
    "synth_collapse": read_collapse,
    "valid_rate": read_valid_rate,
    "label_agreement": read_label_agreement,
    "rejection_code": read_rejection_code,
    "nan_skips": read_nan_skips,
    "reward_saturation": read_reward_saturation,
}


# ------------------------------------------------------------------ firing


def check_config(cfg: HealthConfig, name: str) -> _CheckConfig:
    """The settings of check ``name``."""
    return getattr(cfg, name)


def patience_of(cfg: HealthConfig, name: str) -> int:
    c = check_config(cfg, name)
    return c.patience or cfg.patience


def window_of(cfg: HealthConfig, name: str) -> int:
    c = check_config(cfg, name)
    return c.window or cfg.window


def readings(history: Sequence["StepStats"], cfg: HealthConfig) -> dict[str, Reading]:
    """Every enabled check's reading at the last step of ``history`` (checks without a measurement left out)."""
    out = {}
    for name in CHECK_NAMES:
        if check_config(cfg, name).action == "off":
            continue
        reading = READERS[name](history, cfg)
        if reading is not None:
            out[name] = reading
    return out


def _bad(history: Sequence["StepStats"], cfg: HealthConfig, name: str) -> bool:
    reading = READERS[name](history, cfg) if history else None
    return reading is not None and reading.bad


def new_alerts(history: Sequence["StepStats"], cfg: HealthConfig) -> list[Alert]:
    """The alerts that fire at the last step of ``history``: checks bad for exactly ``patience`` steps in a row.

    Exactly, not at least: an episode of bad steps fires once, when it reaches its patience;
    one good step ends the episode.
    """
    if not history:
        return []
    alerts = []
    step = history[-1].step
    for name in CHECK_NAMES:
        c = check_config(cfg, name)
        if c.action == "off":
            continue
        p = patience_of(cfg, name)
        n = len(history)
        if n < p or not all(_bad(history[: n - i], cfg, name) for i in range(p)):
            continue
        if n > p and _bad(history[: n - p], cfg, name):
            continue  # the episode already fired
        reading = READERS[name](history, cfg)
        assert reading is not None
        alerts.append(Alert(step=step, check=name, value=reading.value, threshold=reading.threshold,
                            action=c.action, message=f"{name}: {reading.message}"))  # type: ignore[arg-type]
    return alerts


def history_needed(cfg: HealthConfig) -> tuple[int, int]:
    """(head, tail): the rows of the history the checks read — the first ``head`` and the last ``tail``."""
    tail = max(window_of(cfg, n) + patience_of(cfg, n) for n in CHECK_NAMES) + 1
    return cfg.baseline_steps, tail


def trim_history(history: list["StepStats"], cfg: HealthConfig) -> list["StepStats"]:
    """Drop the middle rows no check reads, so a long run keeps a bounded history (results unchanged)."""
    head, tail = history_needed(cfg)
    if len(history) <= head + tail:
        return history
    return [*history[:head], *history[-tail:]]


@dataclass
class HealthMonitor:
    """The trainer's view: feed each step's stats, get the alerts that fire; counts alerts so far."""

    config: HealthConfig
    history: list["StepStats"] = field(default_factory=list)
    n_alerts: int = 0

    def observe(self, stats: "StepStats") -> list[Alert]:
        """Add one step and return its alerts."""
        self.history = trim_history([*self.history, stats], self.config)
        alerts = new_alerts(self.history, self.config)
        self.n_alerts += len(alerts)
        return alerts
