"""What a training protocol is: one object, built once at setup, that the loop and the pipeline both take.

A protocol decides, for the co-training step of :func:`synco.cotrain.engine.cotrain_step` (which it never
replaces):

* the mode it runs with (:meth:`TrainingProtocol.run_mode`: rft draws from the fixed corpus; alternating needs the
  Synthesizer to train), read at setup to choose the card source and who may train;
* what a step plans (:meth:`~TrainingProtocol.plan`: a :class:`~synco.cotrain.settings.StepPlan`, who updates and
  the step's round and phase);
* what runs after a step is recorded (:meth:`~TrainingProtocol.after`: a round's training);
* where its boundaries are (:meth:`~TrainingProtocol.closes_round`: the Reasoner is trained by ``after``, the report
  and the factor space are refreshed; the learning-effect periods, :meth:`~TrainingProtocol.period_length`);
* what a checkpoint records of it and what a resume checks (:meth:`~TrainingProtocol.checkpoint`,
  :meth:`~TrainingProtocol.resume_problem`);
* how it describes its rows in the run's summary (:meth:`~TrainingProtocol.describe`) and names its run's folder
  (:meth:`~TrainingProtocol.run_label`);
* what the config checks of it against the domain (:attr:`~TrainingProtocol.sft_on_references`).

This base class is online co-training: every default is "nothing special". A protocol overrides what it changes;
one added from outside the package is a subclass registered by name
(:func:`synco.cotrain.protocols.registry.register_protocol`) and needs no edit in ``cotrain/`` or ``run/``.
Torch-free: configs build a protocol to validate it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Sequence

from synco.cotrain.settings import StepPlan
from synco.cotrain.stats import StepStats

if TYPE_CHECKING:
    from synco.cotrain.engine import CoTrainState


@dataclass(frozen=True, kw_only=True)
class TrainingProtocol:
    """A training protocol on one trainer; the base is online co-training (every step as ``mode`` says)."""

    name: str
    steps: int  # the run's steps: its last step closes a partial round or period
    effect_every: int = 10  # evosyn.effect_every: the learning-effect period of a protocol without rounds

    def run_mode(self, mode: str) -> str:
        """The engine mode this protocol runs with, given the configured one; ValueError naming both when they
        cannot go together."""
        return mode

    @property
    def sft_on_references(self) -> bool:
        """Whether the protocol fine-tunes the Reasoner on each task's verified reference: in a domain whose Reasoner
        acts (``HasEnvironment``) that is a replayed gold episode, so the config asks the domain for one
        (``HasGoldTurns``)."""
        return False

    def run_label(self, mode: str) -> str:
        """What a new run's folder is named after, given the configured ``mode`` (``<domain>-<label>-s<seed>-...``):
        the protocol's name (online runs: the mode)."""
        return self.name

    def plan(self, step: int) -> StepPlan:
        """What the protocol changes in the co-training step ``step``: who updates, its round and phase."""
        return StepPlan(protocol=self.name)

    def after(self, state: CoTrainState, step: int, stats: StepStats) -> StepStats:
        """What runs once step ``step`` is recorded (a round's training); returns the step's stats, amended."""
        return stats

    def closes_round(self, step: int) -> bool:
        """Whether the Reasoner is trained by :meth:`after` at ``step``: the report and the factor space are rebuilt
        then, and the asynchronous pipeline never collects past it (the next step must see that training)."""
        return False

    def period_length(self) -> int:
        """Steps per learning-effect period (:mod:`synco.evosyn.effect`): a stretch in which the Reasoner is
        measured as one learner."""
        return self.effect_every

    def effect_period(self, step: int) -> int:
        """The learning-effect period ``step`` belongs to."""
        return step // self.period_length()

    def effect_period_steps(self, period: int) -> range:
        """The steps of a learning-effect period (the run's last may be cut short by ``steps``)."""
        n = self.period_length()
        return range(period * n, min((period + 1) * n, self.steps))

    def closes_effect_period(self, step: int) -> bool:
        """Whether ``step`` is its learning-effect period's last."""
        return step + 1 == self.steps or self.effect_period(step + 1) != self.effect_period(step)

    def settings(self) -> dict[str, Any]:
        """The config sections that lay out the protocol's steps, as dicts (a resumed run must keep them)."""
        return {}

    def checkpoint(self, step: int) -> dict[str, Any]:
        """What a checkpoint after ``step`` records of the protocol: its name, settings and round. A round's data
        are the pool's rows, rebuilt from the pool on resume, so nothing else is needed."""
        return {"protocol": self.name, "round": self.plan(step).round, "settings": self.settings()}

    def saved_settings(self, saved: dict[str, Any]) -> dict[str, Any]:
        """A checkpoint's settings in today's names (a protocol whose settings were renamed overrides it)."""
        return saved

    def resume_problem(self, saved: dict[str, Any] | None) -> str | None:
        """Why a run checkpointed with protocol state ``saved`` cannot resume under this protocol (None: it can).
        A checkpoint without protocol state was written by an online run."""
        saved = saved or {"protocol": "online", "settings": {}}
        if saved["protocol"] != self.name:
            return f"protocol={self.name!r} but the run was trained with protocol={saved['protocol']!r}"
        before = self.saved_settings(dict(saved.get("settings") or {}))
        changed = [f"{section}.{k}={v!r} (was {before.get(section, {}).get(k)!r})"
                   for section, values in self.settings().items() for k, v in values.items()
                   if before.get(section, {}).get(k) != v]
        if changed:
            return "the protocol's settings changed: " + ", ".join(changed)
        return None

    def describe(self, rows: Sequence[dict[str, Any]]) -> list[str]:
        """The summary's lines about the protocol, from metrics.jsonl rows (none for online)."""
        return []


__all__ = ["TrainingProtocol"]
