"""Asynchronous co-training (``max_staleness: N`` >= 1): the next steps' synthesis and rollouts overlap the update.

One step ``t`` at staleness N, in the steady state::

    learner thread   update_agents(t) ........................┐
    main thread      collect(t + N), on the engines' weights ─┴ join ─ finish(t): the pool, one transaction ─ publish

Each trained agent's samplers hold weights apart from its learner's (:meth:`~synco.core.policy.Learner.sample_apart`:
the transformers engine's snapshot, vLLM's engine, a server's adapter, Ray's rollout workers), loaded only at the
learner's ``publish(version)``, after a step is finished::

    learner ──update──▶ learner ──publish(v)──▶ samplers (snapshot | vLLM | server | Ray workers) ──▶ Completion.version = v

 So the attempts of step ``t + N`` were sampled by the weights after update
``t - 1`` and are trained by update ``t + N``: N published versions behind the learner. An attempt more than
``max_staleness`` versions behind (:func:`staleness`) is not trained on (:func:`fresh`; counted per step) -- with
one update per step this never happens, it guards every other schedule. The update corrects for the lag with
the decoupled objective (behaviour log-probs recorded at sampling, the learner at the update's start as the
proximal policy, importance weights bounded at ``grpo.is_cap``, truncated or masked: ``grpo.decoupled``,
``grpo.is_mode``).

Where the sampling runs is a placement chosen once at setup (``async_placement``): on this process's main thread
beside the learner thread, or, for the transformers engine's snapshot, in a child process of its own
(:class:`~synco.learn.process_sampler.ProcessSampler`); the pipeline is the same under both.

Determinism: a collection reads the pool, the capability report, the Designer's window and the novelty index as
recorded after the last finished step, and the run's rng is drawn by collections in step order; nothing the
learner thread does touches them. So a run repeats exactly whatever the threads' timing, and a checkpoint that
holds the collected steps not yet trained (:attr:`Pipeline.pending`) lets ``--resume`` continue exactly.

The pipeline takes the run's protocol object, as the synchronous loop does: its plan of each step, what it runs
after a step (``after``: a round's training), and its boundaries. It never collects past a step after which the
Reasoner is trained by something other than the step's own update (``closes_round``): the next step must see that
training, as it does synchronously. With ``max_staleness: 0`` none of this exists: the step is :func:`~synco.cotrain.engine.cotrain_step`.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from synco.core.policy import Learner, UpdateStats
from synco.core.records import TaskRecord
from synco.cotrain.engine import Collected, CoTrainState, Updates, collect, finish, update_agents
from synco.cotrain.protocols.base import TrainingProtocol
from synco.cotrain.stats import PipelineStats, StepStats


def staleness(sampled: int | None, published: Iterable[int]) -> int:
    """Published versions newer than ``sampled``, the version an attempt (or card) was sampled by: how far
    behind the learner it is when the learner, at its newest published version, trains on it. None (not
    recorded) counts as current. ``published`` may hold only the recent versions (:class:`Pipeline` keeps
    ``max_staleness + 1``): an older sample then counts as that many behind, which is still too stale."""
    if sampled is None:
        return 0
    return len({v for v in published if v > sampled})


def fresh(records: Sequence[TaskRecord], max_staleness: int, reasoner: Sequence[int],
          synthesizer: Sequence[int]) -> tuple[list[TaskRecord], list[TaskRecord], int, int]:
    """What each learner may train on: ``(for the Reasoner, for the Synthesizer, attempts dropped, cards dropped)``.

    A task whose attempts are more than ``max_staleness`` published versions behind the Reasoner keeps its
    record but loses its attempts for the Reasoner's batch (a task's K attempts share a version: the group goes
    whole); a card sampled that far behind the Synthesizer is left out of the Synthesizer's batch.
    """
    for_r: list[TaskRecord] = []
    dropped_attempts = 0
    for rec in records:
        stale = [a for a in rec.rollouts if staleness(a.policy_version, reasoner) > max_staleness]
        if stale:
            dropped_attempts += len(rec.rollouts)
            rec = rec.model_copy(update={"rollouts": []})
        for_r.append(rec)
    for_s = [r for r in records if staleness(r.synth_version, synthesizer) <= max_staleness]
    return for_r, for_s, dropped_attempts, len(records) - len(for_s)


def mean_staleness(records: Sequence[TaskRecord], published: Sequence[int]) -> float | None:
    """Mean staleness of the attempts of ``records`` (None without any)."""
    lags = [staleness(a.policy_version, published) for r in records for a in r.rollouts]
    return sum(lags) / len(lags) if lags else None


def importance(prefix: str, update: UpdateStats | None) -> dict[str, float | None]:
    """An update's importance-weight numbers as :class:`PipelineStats` fields (None: no update taken)."""
    if update is None:
        return {}
    return {f"{prefix}_is_weight_mean": update.is_weight_mean, f"{prefix}_is_weight_std": update.is_weight_std,
            f"{prefix}_is_truncated": update.is_truncated_frac}


@dataclass
class Pipeline:
    """The asynchronous step loop of one run: collections ahead of the learners, at most ``max_staleness``.

    ``protocol``: the run's protocol (its plan of a step, what it runs once a step is finished, its round ends);
    ``learners``: the trained agents, each published to its samplers once a step is finished. ``pending``: collected steps not yet trained
    (restored from a checkpoint on resume).
    """

    state: CoTrainState
    max_staleness: int
    steps: int
    protocol: TrainingProtocol
    learners: Sequence[Learner]
    pending: deque[Collected] = field(default_factory=deque)
    published: dict[str, list[int]] = field(default_factory=lambda: {"reasoner": [], "synthesizer": []})
    _pool: ThreadPoolExecutor = field(default_factory=lambda: ThreadPoolExecutor(1, thread_name_prefix="learner"))

    def __post_init__(self) -> None:
        if self.max_staleness < 1:
            raise ValueError(f"the pipeline runs at max_staleness >= 1, got {self.max_staleness}")
        if not self.published["reasoner"]:
            self._note_versions()

    def step(self, step: int) -> StepStats:
        """Train on step ``step`` (collected earlier, or now when nothing is pending), collecting ahead meanwhile."""
        t_start = time.perf_counter()
        c = self.pending.popleft() if self.pending else collect(self.state, step, self.protocol.plan(step))
        if c.step != step:
            raise RuntimeError(f"the pipeline holds step {c.step} where step {step} was due (a resume out of order)")
        lag = mean_staleness(c.records, self.published["reasoner"])
        for_r, for_s, dropped_attempts, dropped_cards = fresh(c.records, self.max_staleness,
                                                              self.published["reasoner"], self.published["synthesizer"])
        t0 = time.perf_counter()
        job = self._pool.submit(update_agents, self.state, c, for_r, for_s)
        ahead = self._next_to_collect(step)
        if ahead is not None:
            self.pending.append(collect(self.state, ahead, self.protocol.plan(ahead)))
        t_collect = time.perf_counter() - t0
        updates: Updates = job.result()
        stats = self.protocol.after(self.state, step, finish(self.state, c, updates))
        for learner in self.learners:  # the publish point: the learner thread is idle, nothing is sampling
            learner.publish()
        self._note_versions()
        stats.pipeline = PipelineStats(max_staleness=self.max_staleness, collected_ahead=len(self.pending),
                                       staleness=lag, stale_attempts_dropped=dropped_attempts,
                                       stale_cards_dropped=dropped_cards,
                                       t_overlap=min(t_collect, updates.t_train) if ahead is not None else 0.0,
                                       t_step=time.perf_counter() - t_start,
                                       **importance("reasoner", updates.reasoner), **importance("synth",
                                                                                               updates.synthesizer))
        return stats

    def _next_to_collect(self, step: int) -> int | None:
        """The step to collect while ``step`` trains: the one after the pending ones, unless the run ends first,
        N are already pending, or a Reasoner-training boundary lies between."""
        nxt = step + len(self.pending) + 1
        if nxt >= self.steps or len(self.pending) >= self.max_staleness:
            return None
        if any(self.protocol.closes_round(s) for s in range(step, nxt)):
            return None
        return nxt

    def _note_versions(self) -> None:
        """Each learner's version just published; the last ``max_staleness + 1`` are all a staleness needs."""
        for role in ("reasoner", "synthesizer"):
            versions = self.published[role]
            versions.append(int(getattr(self.state, role).policy_version))
            del versions[:-(self.max_staleness + 1)]

    def checkpoint(self) -> dict:
        """What a checkpoint keeps of the pipeline: the collected steps not yet trained and the recent published
        versions (those a pending step's staleness is counted against)."""
        keep = self.max_staleness + 1
        return {"pending": list(self.pending), "published": {k: v[-keep:] for k, v in self.published.items()},
                "max_staleness": self.max_staleness}

    def restore(self, saved: dict) -> None:
        """Continue from :meth:`checkpoint`'s dict."""
        self.pending = deque(saved["pending"])
        self.published = {k: list(v) for k, v in saved["published"].items()}

    def close(self) -> None:
        """Stop the learner thread (after the update it may be running)."""
        self._pool.shutdown(wait=True)


__all__ = ["Pipeline", "fresh", "importance", "mean_staleness", "staleness"]
