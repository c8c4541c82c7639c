"""Answer checking and card verification fanned out as Ray tasks (``backend: ray``, settings ``ray.checks``).

The loop, the pool and the report stay in the driver, and ``cotrain_step`` does not change: it asks its
checker and its verifier through two batch seams, which the classes here implement on Ray.

* :class:`RayAnswerChecker` is an :class:`~synco.grading.checker.AnswerChecker` whose ``match_many`` (every
  batch :func:`synco.grading.grade.grade` checks in one call: a step's attempts against their cards'
  references, a held-out batch; and the consensus checker's answers) cuts the pairs into chunks of
  ``ray.checks.answers_per_task`` and sends each chunk as one task to a check worker. Every single call
  (``match``, ``understands``: grouping consensus answers, a chunk checked here) runs in the driver, as in process.
* :class:`RayTaskVerifier` is a :class:`~synco.grading.verifier.TaskVerifier` whose first phase
  (:meth:`~synco.grading.verifier.TaskVerifier.check_cards`: parse, schema, problem checks, answer consistency
  with its checker calls, the domain's oracle, each card alone within ``verifier.card_timeout``) runs on
  the check workers, ``ray.checks.cards_per_task`` cards per task. The second phase, which depends on the
  other cards (novelty within the batch and against the pool's index, contamination), and consensus run
  in the driver in slot order, where the indexes are. The domain's ``reject_reason`` is the engine's and
  stays in the driver too.

**Actors, not plain tasks.** A check worker is an actor holding one ``AnswerChecker``: its math-verify child
process (importing sympy takes seconds) starts once and is reused by every task, and the verifier's
settings and the domain's oracle are sent once when the worker starts, not with every chunk. The workers'
resources (``ray.checks.worker``) are fixed, so the run's resource check counts them before anything starts.
Chunks go to the workers round-robin, all submitted at once, and run in parallel.

**Same results.** A worker runs the very code the driver would (``AnswerChecker.match``,
``TaskVerifier.check_cards``) with the same settings, and the results come back in order, so every grade
and every verdict (scores, reasons, reference) equals the in-process one. An exception inside one card's
checks is that card's ``internal_error`` as in process (counted in the driver's ``n_internal_errors``;
re-raised when ``verifier.strict``).

**Failures.** A chunk whose worker died, whose task raised outside the per-card boundary, or that has not
answered within its checks' own bounds plus ``ray.checks.task_timeout_s`` (the worker is then killed, and
Ray restarts it up to ``ray.max_restarts`` times) is checked in the driver instead: logged, counted in
``n_local_chunks``, with the same result. A worker that is gone for good is dropped; with none left, all
checking runs in the driver.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import ray
from ray.exceptions import ActorDiedError, GetTimeoutError, RayError, RayTaskError

from synco.grading.checker import AnswerChecker
from synco.distributed.ray_backend import RayBackendError, last_line, actor_options
from synco.config.ray import RayCheckSettings, RaySettings
from synco.grading.verifier import AnswerForm, CardCheck, Oracle, TaskVerifier, VerifierConfig

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class CheckerSettings:
    """What builds an :class:`AnswerChecker` like the driver's, in a check worker."""

    timeout: float
    use_math_verify: bool
    memory_limit_mb: int
    startup_timeout: float
    warm_up: bool

    @classmethod
    def of(cls, checker: AnswerChecker) -> CheckerSettings:
        """The settings of an existing checker."""
        return cls(checker.timeout, checker.use_math_verify, checker.memory_limit_mb, checker.startup_timeout,
                   checker.warm_up)

    def build(self) -> AnswerChecker:
        """A new checker with these settings (its math-verify worker starts on first use)."""
        return AnswerChecker(self.timeout, self.use_math_verify, memory_limit_mb=self.memory_limit_mb,
                             startup_timeout=self.startup_timeout, warm_up=self.warm_up)


def chunks(items: Sequence[Any], size: int) -> list[list[Any]]:
    """``items`` cut into consecutive lists of at most ``size`` (none for no items)."""
    if size < 1:
        raise ValueError(f"chunk size must be at least 1, got {size}")
    return [list(items[i:i + size]) for i in range(0, len(items), size)]


def chunk_deadline(sizes: Sequence[int], workers: int, item_bound: float, extra: float) -> float:
    """Seconds from submission by which every chunk must be back.

    Chunk ``j`` runs on worker ``j mod workers`` after that worker's earlier chunks, so the bound is the
    busiest worker's items times one item's own bound, plus ``extra`` (start-up, transfers).
    """
    load = [0] * max(1, workers)
    for j, size in enumerate(sizes):
        load[j % len(load)] += size
    return max(load) * item_bound + extra


# --------------------------------------------------------------------------- the actor


class CheckWorker:
    """A check-worker actor: one AnswerChecker and the per-card phase of a TaskVerifier built like the driver's.

    Benchmarks are not loaded here: contamination is a phase-2 check, in the driver.
    """

    def __init__(self, checker: CheckerSettings, verifier: VerifierConfig, oracle: Oracle | None,
                 answer_form: AnswerForm | None = None) -> None:
        self.checker = checker.build()
        self.verifier = TaskVerifier(verifier.model_copy(update={"benchmark_paths": []}), checker=self.checker,
                                     oracle=oracle, answer_form=answer_form)

    def pid(self) -> int:
        import os

        return os.getpid()

    def match_many(self, pairs: list[tuple[str, str]], timeout: float | None, rel_tol: float = 0.0) -> list[bool]:
        return self.checker.match_many(pairs, timeout=timeout, rel_tol=rel_tol)

    def check_cards(self, raws: list[str], first_slot: int) -> list[CardCheck]:
        return self.verifier.check_cards(raws, first_slot)


# --------------------------------------------------------------------------- driver side


class CheckPool:
    """The check-worker actors, seen from the driver: runs chunks on them, or here when one cannot."""

    def __init__(self, settings: RayCheckSettings, max_restarts: int, checker: CheckerSettings,
                 verifier: VerifierConfig, oracle: Oracle | None, answer_form: AnswerForm | None = None) -> None:
        self.settings = settings
        self.startup_timeout = checker.startup_timeout
        cls = ray.remote(CheckWorker).options(**actor_options(settings.worker, max_restarts))
        self.actors: list[Any] = [cls.remote(checker, verifier, oracle, answer_form) for _ in range(settings.workers)]
        self.n_remote_chunks = 0  # chunks a check worker answered
        self.n_local_chunks = 0  # chunks checked in the driver after their worker failed

    def wait_ready(self) -> None:
        """Block until every check worker is up (a clear error instead of a first step that hangs)."""
        for i, actor in enumerate(self.actors):
            try:
                ray.get(actor.pid.remote())
            except RayError as e:
                raise RayBackendError(f"check worker {i} could not start: {last_line(e)}") from e

    def pids(self) -> list[int]:
        """The process id of every live check worker."""
        return ray.get([a.pid.remote() for a in self.actors])

    def run(self, method: str, calls: Sequence[tuple[Any, ...]], sizes: Sequence[int], item_bound: float,
            local: Callable[..., list[Any]], strict: bool = False) -> list[Any]:
        """``method(*call)`` of every call, call ``j`` on worker ``j mod workers`` (all at once); the lists joined in order.

        ``sizes`` are the calls' item counts and ``item_bound`` one item's own time bound (for the deadline);
        ``local(*call)`` checks a call here when its worker cannot. ``strict``: an exception the task raised
        is re-raised instead (``verifier.strict``).
        """
        if not calls:
            return []
        if not self.actors:
            return [x for call in calls for x in local(*call)]
        actors = list(self.actors)
        refs = [getattr(actors[j % len(actors)], method).remote(*call) for j, call in enumerate(calls)]
        deadline = time.monotonic() + chunk_deadline(sizes, len(actors), item_bound,
                                                     self.startup_timeout + self.settings.task_timeout_s)
        out: list[Any] = []
        gone: set[int] = set()
        for j, (call, ref) in enumerate(zip(calls, refs)):
            index = j % len(actors)
            try:
                out.extend(ray.get(ref, timeout=max(0.0, deadline - time.monotonic())))
                self.n_remote_chunks += 1
                continue
            except RayTaskError as e:
                if strict:
                    raise
                why = f"its task raised {last_line(e)}"
            except GetTimeoutError:
                why = f"no answer within {self.settings.task_timeout_s:g} s beyond its checks' bounds"
                try:
                    ray.kill(actors[index], no_restart=False)  # stuck: Ray restarts it (ray.max_restarts)
                except Exception:  # noqa: BLE001 - already gone
                    pass
            except RayError as e:  # died, restarting, unreachable
                why = f"{type(e).__name__}: {last_line(e)}"
                if isinstance(e, ActorDiedError):
                    gone.add(index)
            self.n_local_chunks += 1
            logger.warning("check worker %d could not %s chunk %d (%s): checking it in the driver",
                           index, method, j, why)
            out.extend(local(*call))
        if gone:
            self.actors = [a for i, a in enumerate(actors) if i not in gone]
            logger.warning("%d check worker(s) gone for good; %d left", len(gone), len(self.actors))
        return out

    def close(self) -> None:
        """Stop the check workers; later checks run in the driver."""
        for actor in self.actors:
            try:
                ray.kill(actor, no_restart=True)
            except Exception:  # noqa: BLE001 - already gone, or Ray already shut down
                pass
        self.actors = []


class RayAnswerChecker(AnswerChecker):
    """An :class:`AnswerChecker` whose ``match_many`` runs on the check workers; every other call runs here."""

    def __init__(self, pool: CheckPool, settings: CheckerSettings, answers_per_task: int) -> None:
        super().__init__(settings.timeout, settings.use_math_verify, memory_limit_mb=settings.memory_limit_mb,
                         startup_timeout=settings.startup_timeout, warm_up=settings.warm_up)
        self.pool = pool
        self.answers_per_task = answers_per_task

    def match_many(self, pairs: Sequence[tuple[str, str]], *, timeout: float | None = None,
                   rel_tol: float = 0.0) -> list[bool]:
        """As :meth:`AnswerChecker.match_many`, ``answers_per_task`` pairs per Ray task."""
        bound = self._call_timeout(timeout)  # validated here: a bad timeout is the caller's error, not a worker's
        AnswerChecker.match_many(self, [], rel_tol=rel_tol)  # likewise a bad tolerance (refused for no pairs)
        parts = chunks(pairs, self.answers_per_task)
        return self.pool.run("match_many", [(part, timeout, rel_tol) for part in parts], [len(p) for p in parts],
                             bound, self._local_match_many)

    def _local_match_many(self, pairs: list[tuple[str, str]], timeout: float | None,
                          rel_tol: float = 0.0) -> list[bool]:
        return AnswerChecker.match_many(self, pairs, timeout=timeout, rel_tol=rel_tol)

    def close_remote(self) -> None:
        """Stop the check workers (the verifier's too: they share them) and this checker's math-verify worker."""
        self.pool.close()
        self.close()


class RayTaskVerifier(TaskVerifier):
    """A :class:`TaskVerifier` whose per-card phase runs on the check workers; phase 2 and consensus stay here."""

    def __init__(self, config: VerifierConfig, checker: RayAnswerChecker, oracle: Oracle | None, pool: CheckPool,
                 cards_per_task: int, answer_form: AnswerForm | None = None) -> None:
        super().__init__(config, checker=checker, oracle=oracle, answer_form=answer_form)
        self.pool = pool
        self.cards_per_task = cards_per_task

    def check_cards(self, raws: Sequence[str], first_slot: int = 0) -> list[CardCheck]:
        """As :meth:`TaskVerifier.check_cards`, ``cards_per_task`` cards per Ray task."""
        parts = chunks(raws, self.cards_per_task)
        calls = [(part, first_slot + j * self.cards_per_task) for j, part in enumerate(parts)]
        bound = self.config.card_timeout + self.checker.timeout  # a card's budget; its last check may start just inside
        return self.pool.run("check_cards", calls, [len(p) for p in parts], bound, self._local_check_cards,
                             strict=self.config.strict)

    def _local_check_cards(self, raws: list[str], first_slot: int) -> list[CardCheck]:
        return TaskVerifier.check_cards(self, raws, first_slot)


def build_ray_checks(settings: RaySettings, verifier: VerifierConfig, oracle: Oracle | None,
                     checker: AnswerChecker | None = None,
                     answer_form: AnswerForm | None = None) -> tuple[RayAnswerChecker, RayTaskVerifier]:
    """The checker and verifier of a ``backend: ray`` run, sharing ``settings.checks.workers`` check workers.

    ``checker`` gives the answer checker's settings (default: ``AnswerChecker()``'s). Ray must be initialised
    (``ensure_ray``, which also checks that the cluster can place the workers).
    """
    cs = CheckerSettings.of(checker if checker is not None else AnswerChecker())
    pool = CheckPool(settings.checks, settings.max_restarts, cs, verifier, oracle, answer_form)
    try:
        pool.wait_ready()
    except BaseException:
        pool.close()
        raise
    answer_checker = RayAnswerChecker(pool, cs, settings.checks.answers_per_task)
    return answer_checker, RayTaskVerifier(verifier, answer_checker, oracle, pool, settings.checks.cards_per_task,
                                           answer_form)
