"""Held-out accuracy of the Reasoner per group (e.g. difficulty level): before, during and after a run."""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

from synco.core.policy import Policy, SamplingParams
from synco.core.episodes import EpisodeLimits
from synco.domains.base import Domain, HasEnvironment, HeldoutItem, answer_extractor, solve
from synco.grading.checker import AnswerChecker
from synco.grading.grade import grade
from synco.rollout.episodes import heldout_successes

if TYPE_CHECKING:
    from synco.run.state import Run


def evaluate_heldout(policy: Policy, domain: Domain, items: Sequence[HeldoutItem], checker: AnswerChecker,
                     max_new_tokens: int, batch_size: int = 256, params: SamplingParams | None = None,
                     n: int = 1, seed: int = 0, seed_per_request: bool = False,
                     limits: EpisodeLimits | None = None, group_size: int = 64) -> dict[str, float]:
    """Held-out accuracy per group (e.g. difficulty level): greedy by default, else the mean over ``n`` samples.

    Sampling runs under a forked torch RNG seeded with ``seed``, so the evaluation is
    repeatable and never shifts the training run's random stream. ``seed_per_request``: each
    batch is one request with its own seed derived from ``seed`` (the same in every backend). In a domain with
    an environment each item is an episode (``limits`` bound it) and success is its environment's grade.
    """
    import torch

    from synco.core.seeds import derive_seed

    params = params or SamplingParams(greedy=True, max_new_tokens=max_new_tokens)
    correct: dict[str, list[bool]] = {}
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        for start in range(0, len(items), batch_size):
            chunk = items[start:start + batch_size]
            request = derive_seed(seed, "heldout", start) if seed_per_request else None
            if isinstance(domain, HasEnvironment):  # episodes, graded by their environments
                wins = heldout_successes(policy, domain, chunk, n, params, limits or EpisodeLimits(), request,
                                         group_size)
                for it, won in zip(chunk, wins):
                    correct.setdefault(it.group, []).extend(won)
                continue
            outs = solve(policy, domain, [it.problem for it in chunk], n, params, request)
            marks = iter(grade(checker, [(c.text, it.answer) for it, group in zip(chunk, outs) for c in group],
                               extract=answer_extractor(domain)))
            for it, group in zip(chunk, outs):
                correct.setdefault(it.group, []).extend(next(marks).correct for _ in group)
    return {g: sum(v) / len(v) for g, v in sorted(correct.items(), key=lambda kv: group_key(kv[0]))}


def evaluate_heldout_greedy(run: Run) -> dict[str, float]:
    """Greedy held-out accuracy per group of the run's Reasoner."""
    st = run.state
    return evaluate_heldout(st.reasoner, st.domain, run.heldout, st.checker, run.cfg.reasoner.sampling.max_new_tokens,
                            seed_per_request=run.cfg.seed_per_request, limits=episode_limits(run),
                            group_size=run.cfg.reasoner.generation_batch_size)


def evaluate_heldout_both(run: Run, greedy: dict[str, float] | None = None) -> dict[str, dict[str, float]]:
    """``{"greedy": ..., "sampled": ...}`` held-out accuracy of the run's Reasoner (sampled only when asked);
    ``greedy``, when given, is a greedy result already computed for the current weights."""
    cfg, st = run.cfg, run.state
    out = {"greedy": greedy if greedy is not None else evaluate_heldout_greedy(run)}
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
