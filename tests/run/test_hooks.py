"""The step hooks: when each is due (hand-computed steps), which hooks a config builds and in what order,
and how the loop runs them and gathers their stop requests."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from synco.config import load_config
from synco.cotrain.stats import StepStats
from synco.cotrain.health import Alert
from synco.run.hooks import (
    CheckpointHook,
    ControlCheckHook,
    HealthHook,
    HeldoutCurveHook,
    LearningEffectHook,
    ProposerHook,
    ReflectorHook,
    ReportRefreshHook,
    StepContext,
    build_hooks,
    every,
    health_monitor,
    run_hooks,
)
from synco.run.build import step_settings
from synco.run.logs import Loggers
from synco.run.state import Run
from synco.run.stopping import StopSignals


def make_run(tmp_path: Path, *overrides: str, evo: object | None = object(), heldout: bool = True) -> Run:
    """A Run around a config; the state is a stand-in holding only what ``build_hooks`` reads (``evo``)."""
    cfg = load_config("arith", overrides=["tensorboard=false", *overrides])
    return Run(cfg=cfg, dir=tmp_path, state=SimpleNamespace(evo=evo, settings=step_settings(cfg)),  # type: ignore[arg-type]
               start_step=0, heldout=[object()] if heldout else [])  # type: ignore[list-item]


def ctx_at(run: Run, step: int, signum: int | None = None) -> StepContext:
    signals = StopSignals()
    signals.signum = signum
    return StepContext(run, step, StepStats(step=step, mode=run.cfg.mode), signals)


def due_steps(hook, run: Run) -> list[int]:
    return [s for s in range(run.cfg.steps) if hook.due(ctx_at(run, s))]


def alert(step: int, action: str, check: str = "collapse") -> Alert:
    return Alert(step=step, check=check, value=0.0, threshold=0.1, action=action, message=f"{check} at {step}")


# ------------------------------------------------------------------ cadences


def test_every_n_steps_counts_steps_done():
    assert [s for s in range(12) if every(5, s)] == [4, 9]  # after 5 and 10 steps
    assert [s for s in range(4) if every(1, s)] == [0, 1, 2, 3]


def test_report_refresh_every_n_steps_and_at_round_ends(tmp_path):
    run = make_run(tmp_path, "steps=12", "report_refresh_every=5")
    assert due_steps(ReportRefreshHook(run.cfg), run) == [4, 9]
    # rounds of 4 steps: also after steps 3, 7 and the run's last step 11
    rounds = make_run(tmp_path, "steps=12", "report_refresh_every=5", "protocol=rounds", "rounds.steps_per_round=4")
    assert due_steps(ReportRefreshHook(rounds.cfg), rounds) == [3, 4, 7, 9, 11]


def test_reflector_and_proposer_cadences(tmp_path):
    run = make_run(tmp_path, "steps=45", "evosyn.reflector_settings.every=10", "domain=math", "evosyn.proposer=true",
                   "evosyn.proposer_settings.every=20")  # the proposer needs a chat-model Synthesizer
    assert due_steps(ReflectorHook(run.cfg), run) == [9, 19, 29, 39]
    assert due_steps(ProposerHook(run.cfg), run) == [19, 39]
    # a partial last round (steps 40..44) closes at the run's last step
    rounds = make_run(tmp_path, "steps=45", "evosyn.reflector_settings.every=10", "protocol=rft",
                      "rounds.steps_per_round=15")
    assert due_steps(ReflectorHook(rounds.cfg), rounds) == [9, 14, 19, 29, 39, 44]


def test_learning_effect_at_each_period_end_from_the_second(tmp_path):
    run = make_run(tmp_path, "steps=25", "evosyn.effect_every=10")
    assert due_steps(LearningEffectHook(run.cfg), run) == [19, 24]  # periods 0-9, 10-19, 20-24 (cut short)
    rounds = make_run(tmp_path, "steps=12", "protocol=rounds", "rounds.steps_per_round=4", "evosyn.effect_every=10")
    assert due_steps(LearningEffectHook(rounds.cfg), rounds) == [7, 11]  # a period is a round


def test_control_check_runs_after_every_step(tmp_path):
    run = make_run(tmp_path, "steps=3")
    assert due_steps(ControlCheckHook(run.cfg), run) == [0, 1, 2]


def test_heldout_curve_every_n_steps(tmp_path):
    run = make_run(tmp_path, "steps=10", "heldout_every=3")
    assert due_steps(HeldoutCurveHook(run.cfg, loggers=None), run) == [2, 5, 8]  # type: ignore[arg-type]


def test_checkpoint_by_steps_never_on_the_last_step(tmp_path):
    run = make_run(tmp_path, "steps=10", "save_every=3")
    assert due_steps(CheckpointHook(run.cfg), run) == [2, 5, 8]  # step 9 is saved by train itself


def test_checkpoint_by_minutes_since_the_last_one(tmp_path):
    now = [100.0]
    run = make_run(tmp_path, "steps=10", "save_every=0", "save_every_minutes=5")
    hook = CheckpointHook(run.cfg, clock=lambda: now[0])
    assert hook.last_save == 100.0
    now[0] = 100.0 + 4 * 60
    assert not hook.due(ctx_at(run, 0))
    now[0] = 100.0 + 5 * 60
    assert hook.due(ctx_at(run, 1))
    hook.last_save = now[0]  # what after_step does once saved
    assert not hook.due(ctx_at(run, 2))
    now[0] += 60 * 60
    assert not hook.due(ctx_at(run, 9))  # the last step: train saves it


def test_a_stop_makes_the_checkpoint_due_except_on_the_last_step(tmp_path):
    run = make_run(tmp_path, "steps=10", "save_every=100")
    hook = CheckpointHook(run.cfg)
    assert not hook.due(ctx_at(run, 3))
    assert hook.due(ctx_at(run, 3, signum=2))
    ctx = ctx_at(run, 4)
    ctx.stops.append(alert(4, "stop"))
    assert hook.due(ctx)
    assert not hook.due(ctx_at(run, 9, signum=2))


def test_the_stop_decision_is_taken_once_per_step(tmp_path):
    run = make_run(tmp_path, "steps=10")
    ctx = ctx_at(run, 3)
    assert not ctx.stopping()
    ctx.signals.signum = 15  # a SIGTERM after the checkpoint decided: handled after the next step
    assert not ctx.stopping()
    assert ctx_at(run, 3, signum=15).stopping()


# ------------------------------------------------------------------ which hooks, in which order


def kinds(hooks) -> list[str]:
    return [type(h).__name__ for h in hooks]


def test_the_default_run_builds_its_hooks_in_the_order_that_keeps_its_numbers(tmp_path):
    run = make_run(tmp_path, "heldout_every=25")
    loggers = Loggers(run)
    try:
        hooks = build_hooks(run, loggers, health_monitor(run))
    finally:
        loggers.close()
    assert kinds(hooks) == ["HealthHook", "ReportRefreshHook", "LearningEffectHook", "ControlCheckHook",
                            "ReflectorHook", "HeldoutCurveHook", "CheckpointHook"]


@pytest.mark.parametrize(("overrides", "evo", "heldout", "expected"), [
    (["domain=math", "evosyn.proposer=true"], object(), True,
     ["Health", "ReportRefresh", "LearningEffect", "ControlCheck", "Proposer", "Reflector", "HeldoutCurve",
      "Checkpoint"]),
    (["evosyn.reflector=false"], object(), True, ["Health", "ReportRefresh", "LearningEffect", "HeldoutCurve",
                                                 "Checkpoint"]),
    (["evosyn.feedback=false"], object(), True, ["Health", "ReportRefresh", "LearningEffect", "HeldoutCurve",
                                                "Checkpoint"]),
    (["mode=static"], object(), True, ["Health", "ReportRefresh", "LearningEffect", "HeldoutCurve", "Checkpoint"]),
    ([], None, True, ["Health", "ReportRefresh", "HeldoutCurve", "Checkpoint"]),  # a domain without factors
    (["heldout_every=0"], object(), True, ["Health", "ReportRefresh", "LearningEffect", "ControlCheck", "Reflector",
                                           "Checkpoint"]),
    ([], object(), False, ["Health", "ReportRefresh", "LearningEffect", "ControlCheck", "Reflector", "Checkpoint"]),
], ids=["proposer", "no-reflector", "no-feedback", "static", "no-evo", "no-curve", "no-heldout-set"])
def test_a_feature_that_is_off_has_no_hook(tmp_path, overrides, evo, heldout, expected):
    run = make_run(tmp_path, "heldout_every=25", *overrides, evo=evo, heldout=heldout)
    hooks = build_hooks(run, loggers=None, monitor=None)  # type: ignore[arg-type]
    assert kinds(hooks) == [k + "Hook" for k in expected]


# ------------------------------------------------------------------ running them


class Recorder:
    """A hook that records its calls; due on the steps given, returning the alerts given."""

    def __init__(self, name: str, calls: list[str], due_on: set[int], returns=None) -> None:
        self.name, self.calls, self.due_on, self.returns = name, calls, due_on, returns

    def due(self, ctx: StepContext) -> bool:
        return ctx.step in self.due_on

    def after_step(self, ctx: StepContext):
        self.calls.append(f"{self.name}@{ctx.step} stops={len(ctx.stops)}")
        return self.returns


def test_run_hooks_runs_the_due_ones_in_order_and_gathers_their_stops(tmp_path):
    run = make_run(tmp_path, "steps=10")
    calls: list[str] = []
    stop = alert(2, "stop")
    hooks = [Recorder("a", calls, {1, 2}), Recorder("b", calls, {2}, returns=[stop]), Recorder("c", calls, {2, 3})]
    for step in (1, 2, 3):
        ctx = ctx_at(run, step)
        run_hooks(hooks, ctx)
        assert ctx.stops == ([stop] if step == 2 else [])
    # c, after b, sees b's stop request (so the checkpoint, which comes last, sees the health hook's)
    assert calls == ["a@1 stops=0", "a@2 stops=0", "b@2 stops=0", "c@2 stops=1", "c@3 stops=0"]


def test_health_hook_logs_every_alert_and_stops_on_stop_alerts_except_at_the_end(tmp_path, capsys):
    run = make_run(tmp_path, "steps=5")
    fired = [alert(3, "warn", "valid_rate"), alert(3, "stop")]
    monitor = SimpleNamespace(observe=lambda stats: fired)  # what HealthMonitor.observe returns
    loggers = Loggers(run)
    try:
        hook = HealthHook(monitor, loggers)  # type: ignore[arg-type]
        assert hook.due(ctx_at(run, 0))
        assert hook.after_step(ctx_at(run, 3)) == [fired[1]]
        assert hook.after_step(ctx_at(run, 4)) == []  # the last step ends the run anyway
    finally:
        loggers.close()
    rows = [json.loads(ln) for ln in (tmp_path / "alerts.jsonl").read_text().splitlines()]
    assert [(r["check"], r["action"]) for r in rows] == [("valid_rate", "warn"), ("collapse", "stop")] * 2
    assert "health alert (stop) at step 3: collapse at 3" in capsys.readouterr().err


def test_the_health_checks_do_not_watch_duplicates_a_verifier_keeps(tmp_path):
    """With verifier.reject_duplicates false (rgym's default) a repeat is a soft reason, not a rejection: the
    rejection_code check ignores the duplicate codes (beside its own soft list); with it true, it watches them."""
    kept = health_monitor(make_run(tmp_path, "verifier.reject_duplicates=false")).config.rejection_code.ignore_codes
    assert {"near_duplicate", "duplicate_in_step", "reference_corrected"} <= set(kept)
    rejected = health_monitor(make_run(tmp_path)).config.rejection_code.ignore_codes
    assert "near_duplicate" not in rejected and "reference_corrected" in rejected
