"""Held-out accuracy of the Reasoner per group (e.g. difficulty level): before, during and after a run."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Sequence

from synco.core.policy import GENERATION_BATCH_SIZE, Policy
from synco.core.sampling import SamplingParams
from synco.core.episodes import EpisodeLimits
from synco.domains.base import Domain, HeldoutItem
from synco.grading.checker import AnswerChecker
from synco.rollout.attempts import heldout_successes

if TYPE_CHECKING:
    from synco.run.state import Run


@dataclass(frozen=True)
class HeldoutScores:
    """Held-out accuracy per group and each item's mean success, keyed ``"<index>:<group>"`` (the index in the
    run's held-out list, which a seed fixes): the items are what Learn / Retain compares before and after."""

    groups: dict[str, float]
    items: dict[str, float]


def score_items(items: Sequence[HeldoutItem], outcomes: Sequence[Sequence[bool]]) -> HeldoutScores:
    """Per group and per item rates of ``outcomes`` (each item's successes, in ``items``' order)."""
    if len(outcomes) != len(items):
        raise ValueError(f"outcomes: {len(outcomes)} lists for {len(items)} held-out items")
    correct: dict[str, list[bool]] = {}
    keyed: dict[str, float] = {}
    for i, (it, won) in enumerate(zip(items, outcomes)):
        correct.setdefault(it.group, []).extend(won)
        keyed[f"{i}:{it.group}"] = sum(won) / len(won) if won else 0.0
    groups = {g: sum(v) / len(v) for g, v in sorted(correct.items(), key=lambda kv: group_key(kv[0])) if v}
    return HeldoutScores(groups=groups, items=keyed)


def evaluate_heldout(policy: Policy, domain: Domain, items: Sequence[HeldoutItem], checker: AnswerChecker,
                     max_new_tokens: int, batch_size: int = 256, params: SamplingParams | None = None,
                     n: int = 1, seed: int = 0, seed_per_request: bool = False,
                     limits: EpisodeLimits | None = None, group_size: int = GENERATION_BATCH_SIZE) -> dict[str, float]:
    """Held-out accuracy per group (e.g. difficulty level): greedy by default, else the mean over ``n`` samples
    (:func:`evaluate_heldout_scores`' groups)."""
    return evaluate_heldout_scores(policy, domain, items, checker, max_new_tokens, batch_size, params, n, seed,
                                   seed_per_request, limits, group_size).groups


def evaluate_heldout_scores(policy: Policy, domain: Domain, items: Sequence[HeldoutItem], checker: AnswerChecker,
                            max_new_tokens: int, batch_size: int = 256, params: SamplingParams | None = None,
                            n: int = 1, seed: int = 0, seed_per_request: bool = False,
                            limits: EpisodeLimits | None = None, group_size: int = GENERATION_BATCH_SIZE) -> HeldoutScores:
    """Held-out accuracy per group and per item: greedy by default, else the mean over ``n`` samples.

    Sampling runs under a forked torch RNG seeded with ``seed``, so the evaluation is
    repeatable and never shifts the training run's random stream. ``seed_per_request``: each
    batch is one request with its own seed derived from ``seed`` (the same in every backend). Every attempt goes
    through the rollout seam (:func:`synco.rollout.attempts.heldout_successes`): in a domain with an environment
    each is an episode (``limits`` bound it) and success is its environment's grade.
    """
    import torch

    from synco.core.seeds import derive_seed

    params = params or SamplingParams(greedy=True, max_new_tokens=max_new_tokens)
    outcomes: list[list[bool]] = []
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        for start in range(0, len(items), batch_size):
            chunk = items[start:start + batch_size]
            request = derive_seed(seed, "heldout", start) if seed_per_request else None
            outcomes.extend(heldout_successes(policy, domain, chunk, n, params, limits, request, group_size, checker))
    return score_items(items, outcomes)


def evaluate_heldout_greedy(run: Run) -> HeldoutScores:
    """Greedy held-out accuracy per group and per item of the run's Reasoner."""
    st = run.state
    return evaluate_heldout_scores(st.reasoner, st.domain, run.heldout, st.checker,
                                   run.cfg.reasoner.sampling.max_new_tokens, seed_per_request=run.cfg.seed_per_request,
                                   limits=episode_limits(run), group_size=run.cfg.reasoner.generation_batch_size)


def evaluate_heldout_both(run: Run, greedy: HeldoutScores | None = None) -> dict[str, dict[str, float]]:
    """``{"greedy": ..., "greedy_items": ..., "sampled": ...}``: held-out accuracy of the run's Reasoner per group,
    greedy per item (for Learn / Retain) and sampled (only when asked); the form of ``heldout_before.json``.
    ``greedy``, when given, is a greedy result already computed for the current weights."""
    cfg, st = run.cfg, run.state
    scores = greedy if greedy is not None else evaluate_heldout_greedy(run)
    out = {"greedy": scores.groups, "greedy_items": scores.items}
    if cfg.heldout_samples:
        out["sampled"] = evaluate_heldout(st.reasoner, st.domain, run.heldout, st.checker, 0,
                                          params=cfg.reasoner.sampling, n=cfg.heldout_samples, seed=cfg.seed,
                                          seed_per_request=cfg.seed_per_request, limits=episode_limits(run),
                                          group_size=cfg.reasoner.generation_batch_size)
    return out


def episode_limits(run: Run) -> EpisodeLimits:
    """The run's episode bounds (``max_turns``, ``max_episode_tokens``)."""
    return EpisodeLimits(run.cfg.max_turns, run.cfg.max_episode_tokens)


def mean(accuracy: dict[str, float]) -> float:
    """The unweighted mean over groups (NaN for none)."""
    return sum(accuracy.values()) / len(accuracy) if accuracy else float("nan")


def group_key(g: str) -> tuple[int, str]:
    """Sort key of a group name: by the number in it (``level 2`` before ``level 10``), then by name."""
    digits = "".join(ch for ch in g if ch.isdigit())
    return (int(digits) if digits else 10**9, g)
