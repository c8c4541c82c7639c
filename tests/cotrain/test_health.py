"""Health checks on hand-made step histories: each fires on its failure, stays quiet on a healthy run."""

from __future__ import annotations

import pytest

from synco.config import ConfigError, load_config
from synco.cotrain.stats import StepStats
from synco.cotrain.health import CHECK_NAMES, HealthConfig, HealthMonitor, new_alerts, readings

LEVELS = [f"L{i}" for i in range(1, 11)]


def row(step: int, **kw) -> StepStats:
    """A healthy step of 100 cards: 80 valid, all distinct, spread evenly over ten levels, accuracy 0.4."""
    base = dict(step=step, mode="cotrain", n_cards=100, n_valid=80, valid_rate=0.8, n_distinct=100,
                reasoner_accuracy=0.4, reasoner_reward=0.4, factor_balance=0.95,
                groups={g: 8 for g in LEVELS}, reasons={"heldout_problem": 10, "reference_corrected": 85})
    base.update(kw)
    return StepStats(**base)


def changed(r: StepStats, update: dict) -> StepStats:
    """``r`` with some metrics-line keys changed (a feature's keys go to its record, as when a line is read)."""
    return StepStats.model_validate({**r.model_dump(), **update})


def healthy(n: int = 40) -> list[StepStats]:
    """Steps with a little deterministic noise on every measured value."""
    wobble = [0.0, 0.03, -0.02, 0.01, -0.03]
    return [row(s, valid_rate=0.8 + wobble[s % 5], reasoner_accuracy=0.4 - wobble[s % 5],
                factor_balance=0.95 + wobble[s % 5] / 3) for s in range(n)]


def run_monitor(history: list[StepStats], cfg: HealthConfig | None = None) -> list:
    monitor = HealthMonitor(cfg or HealthConfig())
    return [a for r in history for a in monitor.observe(r)]


def test_a_healthy_run_and_one_noisy_step_stay_quiet():
    assert run_monitor(healthy()) == []
    noisy = healthy()
    noisy[20] = row(20, valid_rate=0.0, n_valid=0, n_distinct=10, factor_balance=0.0, groups={},
                    nan_skipped=1, reasons={"answer_leaked": 100})
    assert run_monitor(noisy) == []


def test_the_default_arith_drift_stays_quiet():
    """The default arith run (100 steps): valid 0.88 -> 0.72, near_duplicate 0 -> 19 %, balance 0.95 -> 0.8."""
    hist = []
    for s in range(100):
        t = s / 99
        hist.append(row(s, n_cards=128, valid_rate=0.88 - 0.16 * t, n_valid=int(128 * (0.88 - 0.16 * t)),
                        n_distinct=126, factor_balance=0.95 - 0.15 * t, reasoner_accuracy=0.3 + 0.1 * t,
                        reasons={"reference_corrected": 105, "heldout_problem": 13, "near_duplicate": int(24 * t)}))
    assert run_monitor(hist) == []


def bad_from(start: int, n: int = 40, **bad) -> list[StepStats]:
    hist = healthy(n)
    return [*hist[:start], *(changed(r, bad) for r in hist[start:])]


@pytest.mark.parametrize("check,bad", [
    ("synth_collapse", {"factor_balance": 0.3}),
    ("synth_collapse", {"n_distinct": 30}),
    ("valid_rate", {"valid_rate": 0.1}),
    ("valid_rate", {"valid_rate": 0.35}),  # above the floor, but down by more than half of its early 0.8
    ("label_agreement", {"label_agreement": 0.1}),
    ("rejection_code", {"reasons": {"answer_leaked": 45, "heldout_problem": 10}}),
    ("reward_saturation", {"reasoner_accuracy": 1.0}),
    ("reward_saturation", {"reasoner_accuracy": 0.0}),
], ids=lambda x: x if isinstance(x, str) else "-".join(map(str, x)))
def test_each_check_fires_once_after_its_patience(check, bad):
    hist = bad_from(20, **bad)
    if check == "label_agreement":  # measured from the start in a no-oracle domain
        hist = [changed(r, {"label_agreement": 0.9}) if r.step < 20 else r for r in hist]
    alerts = run_monitor(hist)
    assert [a.check for a in alerts] == [check]  # once per episode, although it stays bad for 20 steps
    [alert] = alerts
    # the window mean crosses the threshold within a few bad steps, then patience (3) bad steps in a row
    assert 22 <= alert.step <= 20 + 5 + 2
    assert alert.action == "warn" and check in alert.message
    rising = check == "rejection_code" or (check == "reward_saturation" and alert.value > 0.5)
    assert (alert.value >= alert.threshold) if rising else (alert.value < alert.threshold)
    assert readings(hist, HealthConfig())[check].bad


def test_collapse_without_a_factor_space_reads_the_group_spread():
    hist = [changed(r, {"factor_balance": None}) for r in healthy()]
    assert run_monitor(hist) == []
    collapsed = [r if r.step < 20 else changed(r, {"groups": {"L5": 78, "L4": 2}}) for r in hist]
    [alert] = run_monitor(collapsed)
    assert alert.check == "synth_collapse" and "spread" in alert.message and alert.value < 0.2


def test_rejection_code_must_rise_and_soft_codes_are_not_watched():
    always_high = [changed(r, {"reasons": {"invalid_json": 50}}) for r in healthy()]
    assert run_monitor(always_high) == []  # high from the start: not a rise (valid_rate watches the level)
    soft = bad_from(20, reasons={"reference_corrected": 100, "solution_no_answer": 90})
    assert run_monitor(soft) == []
    [alert] = run_monitor(bad_from(20, reasons={"near_duplicate": 40}))
    assert "near_duplicate" in alert.message and alert.value == pytest.approx(0.4)
    assert alert.threshold == pytest.approx(0.35)


def test_label_agreement_is_quiet_where_it_is_never_measured():
    assert run_monitor(bad_from(20, valid_rate=0.8)) == []  # label_agreement None throughout (an oracle domain)
    assert "label_agreement" not in readings(healthy(), HealthConfig())


def test_nan_skips_fire_at_once_on_the_second_skip_in_the_window():
    hist = healthy()
    hist[10] = hist[10].model_copy(update={"nan_skipped": 1})
    assert run_monitor(hist) == []  # one skipped update: tolerated
    hist[12] = hist[12].model_copy(update={"nan_skipped": 1})
    [alert] = run_monitor(hist)
    assert (alert.check, alert.step, alert.value, alert.threshold) == ("nan_skips", 12, 2.0, 1.0)


def test_steps_without_valid_tasks_do_not_count_as_saturated():
    hist = bad_from(20, n_valid=0, valid_rate=0.0, reasoner_accuracy=0.0)
    assert [a.check for a in run_monitor(hist)] == ["valid_rate"]


def test_patience_and_a_new_episode_after_a_good_step():
    cfg = HealthConfig(window=1, patience=3)
    bad = {"valid_rate": 0.1}
    hist = healthy(30)
    for s in (10, 11):  # two bad steps: below patience
        hist[s] = hist[s].model_copy(update=bad)
    assert run_monitor(hist, cfg) == []
    for s in (15, 16, 17, 18, 19, 21, 22, 23):  # an episode of five, a good step, an episode of three
        hist[s] = hist[s].model_copy(update=bad)
    assert [(a.check, a.step) for a in run_monitor(hist, cfg)] == [("valid_rate", 17), ("valid_rate", 23)]
    per_check = cfg.model_copy(update={"valid_rate": cfg.valid_rate.model_copy(update={"patience": 6})})
    assert run_monitor(hist, per_check) == []  # a check's own patience wins


def test_off_and_stop_actions():
    hist = bad_from(20, valid_rate=0.1)
    off = HealthConfig.model_validate({"valid_rate": {"action": "off"}})
    assert run_monitor(hist, off) == []
    assert "valid_rate" not in readings(hist, off)
    stop = HealthConfig.model_validate({"valid_rate": {"action": "stop"}})
    [alert] = run_monitor(hist, stop)
    assert alert.action == "stop"


def test_the_monitor_trims_its_history_without_changing_the_alerts():
    """A long run keeps a bounded history; alerts equal those computed on the whole history (as on resume)."""
    hist = healthy(200)
    for s in range(150, 200):
        hist[s] = hist[s].model_copy(update={"valid_rate": 0.3, "reasoner_accuracy": 0.99})
    for s in (60, 62):
        hist[s] = hist[s].model_copy(update={"nan_skipped": 1})
    cfg = HealthConfig()
    monitor = HealthMonitor(cfg)
    trimmed = [a for r in hist for a in monitor.observe(r)]
    assert len(monitor.history) < 30
    whole = [a for n in range(1, len(hist) + 1) for a in new_alerts(hist[:n], cfg)]
    assert trimmed == whole
    assert sorted({a.check for a in whole}) == ["nan_skips", "reward_saturation", "valid_rate"]
    assert monitor.n_alerts == len(whole)


def test_health_defaults_are_documented_and_warn():
    cfg = load_config("arith").health
    assert all(getattr(cfg, name).action == "warn" for name in CHECK_NAMES)
    assert set(CHECK_NAMES) == {n for n in HealthConfig.model_fields if n not in ("window", "patience", "baseline_steps")}


@pytest.mark.parametrize("override,field", [
    ("health.valid_rate.action=explode", "health.valid_rate.action"),
    ("health.window=0", "health.window"),
    ("health.synth_collapse.max_drop=1.5", "health.synth_collapse.max_drop"),
    ("health.rejection_code.max_shar=0.3", "health.rejection_code.max_shar"),
    ("health.nan_skips.patience=0", "health.nan_skips.patience"),
])
def test_a_bad_health_config_names_the_field(override, field):
    with pytest.raises(ConfigError) as e:
        load_config("arith", overrides=[override])
    assert field in str(e.value)


def test_saturation_bounds_must_be_ordered():
    with pytest.raises(ConfigError) as e:
        load_config("arith", overrides=["health.reward_saturation.low=0.9", "health.reward_saturation.high=0.5"])
    assert "health.reward_saturation" in str(e.value) and "low=0.9" in str(e.value)
