"""What the trainer asks of a protocol: its step function, its round boundaries, its resume state, its summary.

A protocol never changes the run's ``StepSettings``: what it decides per step is a ``StepPlan``
(:func:`step_plan`) that its step function hands to :func:`~synco.cotrain.engine.cotrain_step`.
"""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING, Any, Callable, Sequence

from synco.cotrain.engine import CoTrainState, cotrain_step
from synco.cotrain.settings import ONLINE, StepPlan
from synco.cotrain.stats import StepStats
from synco.cotrain.protocols import alternating, rounds
from synco.cotrain.protocols.config import legacy_rounds

if TYPE_CHECKING:
    from synco.config import RunConfig

StepFn = Callable[[CoTrainState, int], StepStats]


def protocol_step(cfg: RunConfig) -> StepFn:
    """The function the run loop calls for each step: ``cotrain_step`` itself for ``online``."""
    if cfg.protocol == "online":
        return cotrain_step
    if cfg.protocol == "alternating":
        return partial(alternating.alternating_step, cfg=cfg.alternating)
    return partial(rounds.rounds_step, cfg=cfg.rounds, total_steps=cfg.steps, seed=cfg.seed, protocol=cfg.protocol)


def protocol_after(cfg: RunConfig) -> Callable[[CoTrainState, int, StepStats], StepStats]:
    """What the protocol does once a step is recorded (the asynchronous pipeline calls it): a round's training at
    the round's last step; nothing for the others."""
    if cfg.protocol in ("rounds", "rft"):
        return partial(_after_round, cfg=cfg)
    return lambda state, step, stats: stats


def _after_round(state: CoTrainState, step: int, stats: StepStats, cfg: RunConfig) -> StepStats:
    return rounds.after_round_step(state, step, stats, cfg.rounds, cfg.steps, cfg.seed)


def step_plan(cfg: RunConfig, step: int) -> StepPlan:
    """What the protocol changes in the co-training step ``step``: who updates, its round and phase."""
    if cfg.protocol in ("rounds", "rft"):
        return rounds.round_plan(step, cfg.rounds, cfg.steps, cfg.protocol)
    if cfg.protocol == "alternating":
        return alternating.phase_plan(step, cfg.alternating)
    return ONLINE


def closes_round(cfg: RunConfig, step: int) -> bool:
    """Whether ``step`` ends a round of ``rounds`` / ``rft``: the report and the factor space are rebuilt then."""
    return cfg.protocol in ("rounds", "rft") and rounds.round_ends(step, cfg.rounds, cfg.steps)


def effect_period(cfg: RunConfig, step: int) -> int:
    """The learning-effect period ``step`` belongs to (:mod:`synco.evosyn.effect`): its round under a protocol
    with rounds, in which the Reasoner does not change, else its window of ``evosyn.effect_every`` steps."""
    if cfg.protocol in ("rounds", "rft"):
        return rounds.round_of(step, cfg.rounds)
    return step // cfg.evosyn.effect_every


def effect_period_steps(cfg: RunConfig, period: int) -> range:
    """The steps of a learning-effect period (the run's last period may be cut short by ``steps``)."""
    n = cfg.rounds.steps_per_round if cfg.protocol in ("rounds", "rft") else cfg.evosyn.effect_every
    return range(period * n, min((period + 1) * n, cfg.steps))


def closes_effect_period(cfg: RunConfig, step: int) -> bool:
    """Whether ``step`` is its learning-effect period's last."""
    return step + 1 == cfg.steps or effect_period(cfg, step + 1) != effect_period(cfg, step)


def _settings(cfg: RunConfig) -> dict[str, Any]:
    """The section that lays out a protocol's steps (a resumed run must keep it)."""
    if cfg.protocol in ("rounds", "rft"):
        return {"rounds": cfg.rounds.model_dump()}
    if cfg.protocol == "alternating":
        return {"alternating": cfg.alternating.model_dump()}
    return {}


def protocol_state(cfg: RunConfig, step: int) -> dict[str, Any]:
    """What a checkpoint after ``step`` records of the protocol: its name, settings and round.

    The round's data are the pool's rows, rebuilt from the pool on resume, so nothing else is needed.
    """
    return {"protocol": cfg.protocol, "round": step_plan(cfg, step).round, "settings": _settings(cfg)}


def resume_problem(saved: dict[str, Any] | None, cfg: RunConfig) -> str | None:
    """Why a run checkpointed with protocol state ``saved`` cannot resume under ``cfg`` (None: it can).

    A checkpoint without protocol state was written by an online run.
    """
    saved = saved or {"protocol": "online", "settings": {}}
    if saved["protocol"] != cfg.protocol:
        return f"protocol={cfg.protocol!r} but the run was trained with protocol={saved['protocol']!r}"
    now = _settings(cfg)
    before = dict(saved.get("settings") or {})
    if isinstance(before.get("rounds"), dict):  # a checkpoint written before rounds.lr became rounds.sft_lr
        before["rounds"] = legacy_rounds(before["rounds"])
    changed = [f"{section}.{k}={v!r} (was {before.get(section, {}).get(k)!r})"
               for section, values in now.items() for k, v in values.items() if before.get(section, {}).get(k) != v]
    if changed:
        return "the protocol's settings changed: " + ", ".join(changed)
    return None


def round_training(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per trained round, from metrics.jsonl rows: step, round, examples, updates, loss, rollouts, retokenized."""
    return [{"step": r["step"], "round": r.get("round"), "examples": r["round_examples"],
             "updates": r.get("round_updates"), "loss": r.get("round_loss"), "rollouts": r.get("round_rollouts"),
             "retokenized": r.get("round_retokenized")}
            for r in rows if r.get("round_examples") is not None]


def counted(n: int, noun: str) -> str:
    """``1 step``, ``2 steps``: a count and its noun in the number it takes (nouns that add an s)."""
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def describe(protocol: str, rows: Sequence[dict[str, Any]]) -> list[str]:
    """The summary's lines about the protocol, from metrics.jsonl rows (none for online)."""
    if protocol == "online" or not rows:
        return []
    phases = list(dict.fromkeys((r.get("round"), r.get("phase")) for r in rows))
    if protocol == "alternating":
        learners = [p for _, p in phases]
        return [f"protocol alternating: {counted(len(phases), 'phase')} ({', '.join(str(p) for p in learners)})"]
    out = [f"protocol {protocol}: {counted(len({r for r, _ in phases}), 'round')}; the Reasoner trained at the end of "
           "each on"]
    for t in round_training(rows):
        loss = "-" if t["loss"] is None else f"{t['loss']:.4f}"
        extra = f", {t['rollouts']} fresh rollouts" if t.get("rollouts") else ""
        if t.get("retokenized"):
            extra += f", {t['retokenized']} attempts re-tokenised from text (no stored ids)"
        unit = counted(t["examples"], "task") + " (GRPO)" if t.get("rollouts") else \
            counted(t["examples"], "example") + " (SFT)"
        out.append(f"  round {t['round']} (step {t['step']}): {unit}, {counted(t['updates'], 'update')}, "
                   f"loss {loss}{extra}")
    return out
