"""The one rollout seam: tasks in, graded :class:`~synco.core.records.Attempt` records out, for every domain.

Every Reasoner attempt of a run goes through :meth:`Solver.attempts` — the step's, the held-out evaluation's and
the protocols' own (rounds' GRPO update) — so an attempt is one record from the engine that sampled it to the
pool and the batch, stamped with the sampling policy's version (its optimizer-step count when it sampled).

A domain is solved one of two ways, chosen once by :func:`make_solver` (the trainer never asks again):

* :class:`AnswerSolver`: a single-turn domain, the one-turn case of an episode. The engine samples one turn per
  attempt (``domains.base.solve``: the domain's prompts and prefilled response prefix); the "environment" of that
  turn grades its answer with the answer checker, all of a request's answers in ONE ``grade`` call (one
  ``match_many``, so a checker that fans checks out sees the whole batch).
* :class:`EpisodeSolver`: a domain with an environment (:class:`~synco.domains.base.HasEnvironment`). K episodes
  per task over several turns (:func:`synco.rollout.episodes.act`), each graded by its own environment.

Which engine samples (transformers or vLLM in process, Ray workers) is the policy's business, chosen when the
policy is built; the seam only calls the :class:`~synco.core.policy.Policy` contract.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from synco.core.episodes import Episode, EpisodeLimits, ToolCall
from synco.core.policy import GENERATION_BATCH_SIZE, Policy, generate_seeded
from synco.core.records import Attempt, TaskCard
from synco.core.rewards import ReasonerRewardConfig, reasoner_reward
from synco.core.sampling import Completion, SamplingParams
from synco.domains.base import (Domain, HasEnvironment, HasTrajectories, HeldoutItem, answer_extractor,
                                problem_response_prefix, reasoner_prompts)
from synco.evosyn.trajectory import first_wrong_call
from synco.grading.checker import AnswerChecker
from synco.grading.grade import Graded, grade
from synco.rollout.episodes import act

__all__ = ["AnswerSolver", "EpisodeSolver", "PolicyOutputError", "Solver", "Task", "answer_attempt", "episode_attempt", "heldout_successes",
           "heldout_tasks", "make_solver", "sample_answers"]


class PolicyOutputError(ValueError):
    """A policy returned another number of completions than it was asked for (a bug in the policy, not model text)."""


@dataclass(frozen=True)
class Task:
    """What an attempt answers: what the Reasoner is asked (its card's ``payload.prompt_text()``), the reference it is
    graded against, and the card an environment is built from (acting domains; a single-turn domain needs only the
    prompt text)."""

    prompt: str
    reference: str
    card: TaskCard | None = None

    @classmethod
    def of(cls, card: TaskCard, reference: str) -> "Task":
        return cls(card.payload.prompt_text(), reference, card)


class Solver(Protocol):
    """Turns tasks into graded attempts: ``n`` per task, grouped per task in task order."""

    def attempts(self, policy: Policy, tasks: Sequence[Task], n: int, params: SamplingParams,
                 seed: int | None = None) -> list[list[Attempt]]: ...


def answer_attempt(c: Completion, graded: Graded, t_sample: float, cfg: ReasonerRewardConfig) -> Attempt:
    """A single-turn attempt: one sampled agent turn (the whole text: ``turns`` None), its grade and reward.

    It keeps the sampled ids, so an update on it (GRPO, or SFT in ``synco.cotrain.protocols.rounds``) trains the
    tokens that were sampled and graded, never a re-tokenisation of the decoded text; its version is the one its
    sampler stamped on it.
    """
    return Attempt(text=c.text, answer=graded.answer, method=graded.method, correct=graded.correct,
                   reward=reasoner_reward(graded.correct, graded.boxed, cfg), truncated=c.truncated,
                   n_tokens=len(c.completion_ids), completion_ids=list(c.completion_ids), policy_version=c.version,
                   prompt_ids=list(c.prompt_ids),
                   logprobs=list(c.logprobs), t_sample=t_sample)


def episode_attempt(ep: Episode, t_sample: float | None = None,
                    gold: Sequence[ToolCall] | None = None, tools: Collection[str] = ()) -> Attempt:
    """The attempt of one graded episode: its transcript, ids (agent and environment) with their mask, reward and
    parts.

    ``answer`` is the text of the last agent turn (the final message, when the episode ended on one);
    ``truncated`` means the episode ended on a limit (turns or tokens) instead of finishing. With the task's
    ``gold`` trajectory and the domain's ``tools``, a failed episode records where its calls first left it
    (``first_wrong``, for the capability report): its calls of those tools, and the turns that did not parse as
    a call; a call outside the inventory (the final message, e.g. ``done``) is no step of the trajectory. An episode
    its environment graded against another gold trajectory (``EpisodeGrade.gold_actions``: a database variant's) is
    measured against that one.
    """
    g = ep.grade
    assert g is not None, "an episode is graded before it is recorded"
    agent = [t for t in ep.turns if t.role == "agent"]
    first_wrong = None
    if gold is not None and g.gold_actions is not None:
        gold = g.gold_actions
    if gold is not None and not g.correct:
        calls = [t.tool_call for t in agent if t.tool_call is None or t.tool_call.name in tools]
        wrong = first_wrong_call(calls, gold)
        first_wrong = wrong[1] if wrong is not None else None
    return Attempt(text=ep.text, answer=agent[-1].text[:200] if agent else None, correct=g.correct,
                   reward=g.reward, truncated=ep.finish != "done", n_tokens=sum(ep.mask),
                   completion_ids=list(ep.completion_ids), policy_version=ep.version, turns=list(ep.turns),
                   finish=ep.finish, reward_parts=dict(g.parts), first_wrong=first_wrong,
                   episode_info=dict(g.info) or None, prompt_ids=list(ep.prompt_ids), logprobs=list(ep.logprobs),
                   t_sample=t_sample)


def sample_answers(policy: Policy, prompts: Sequence[str], references: Sequence[str], n: int,
                   params: SamplingParams | None, seed: int | None, checker: AnswerChecker,
                   rewards: ReasonerRewardConfig | None = None, prefixes: Sequence[str] | None = None,
                   **grading: Any) -> list[list[Attempt]]:
    """The single-turn core of the seam: ``n`` one-turn attempts per formatted prompt, graded against its reference
    in ONE :func:`~synco.grading.grade.grade` call (``grading``: its options, e.g. ``mode="eval"``, ``boxed``,
    ``rel_tol``, ``extract``), rewarded, each with the version its sampler stamped. ``prefixes``: each prompt's prefilled
    response prefix, put back in front of its texts (never decoded or trained). ``synco eval`` calls it with a
    benchmark's prompts and grading options; :class:`AnswerSolver` with a domain's."""
    t = time.perf_counter()
    groups = generate_seeded(policy, prompts, n, params, seed)
    dt = time.perf_counter() - t
    if len(groups) != len(prompts) or any(len(g) != n for g in groups):
        raise PolicyOutputError(f"the policy returned {[len(g) for g in groups]} completions for {len(prompts)} "
                                f"prompts ({n} each expected)")
    if prefixes is not None and any(prefixes):
        groups = [[replace(c, text=prefix + c.text) for c in group] for prefix, group in zip(prefixes, groups)]
    marks = iter(grade(checker, [(c.text, ref) for ref, group in zip(references, groups, strict=True) for c in group],
                       **grading))
    cfg = rewards or ReasonerRewardConfig()
    return [[answer_attempt(c, next(marks), dt, cfg) for c in group] for group in groups]


@dataclass(frozen=True)
class AnswerSolver:
    """Single-turn domains: one sampled turn per attempt (the domain's prompts and prefilled prefix, as
    :func:`~synco.domains.base.solve` builds them), every answer of a request graded in one batch."""

    domain: Domain
    checker: AnswerChecker
    rewards: ReasonerRewardConfig = field(default_factory=ReasonerRewardConfig)

    def attempts(self, policy: Policy, tasks: Sequence[Task], n: int, params: SamplingParams,
                 seed: int | None = None) -> list[list[Attempt]]:
        if not tasks:
            return []
        prompts = [task.prompt for task in tasks]
        return sample_answers(policy, reasoner_prompts(policy, self.domain, prompts),
                              [task.reference for task in tasks], n, params, seed, self.checker, self.rewards,
                              [problem_response_prefix(self.domain, p) for p in prompts], mode="reward",
                              extract=answer_extractor(self.domain))


@dataclass(frozen=True)
class EpisodeSolver:
    """Domains with an environment: ``n`` episodes per task, each on a fresh environment that grades it."""

    domain: Domain
    limits: EpisodeLimits
    group_size: int = GENERATION_BATCH_SIZE  # episodes per job (one lockstep batch, one seed): the Reasoner's generation_batch_size

    def attempts(self, policy: Policy, tasks: Sequence[Task], n: int, params: SamplingParams,
                 seed: int | None = None) -> list[list[Attempt]]:
        if not tasks:
            return []
        cards = [_card(task) for task in tasks]
        t = time.perf_counter()
        episodes = act(policy, self.domain, cards, [task.reference for task in tasks], n, params, self.limits, seed,
                       self.group_size)
        dt = time.perf_counter() - t
        return [[episode_attempt(e, dt, *_gold(self.domain, card)) for e in group]
                for card, group in zip(cards, episodes)]


def make_solver(domain: Domain, checker: AnswerChecker, rewards: ReasonerRewardConfig | None = None,
                limits: EpisodeLimits | None = None, group_size: int = GENERATION_BATCH_SIZE) -> Solver:
    """The domain's solver, chosen once: episodes where the domain has an environment, else graded answers."""
    if isinstance(domain, HasEnvironment):
        return EpisodeSolver(domain, limits or EpisodeLimits(), group_size)
    return AnswerSolver(domain, checker, rewards or ReasonerRewardConfig())


def heldout_successes(policy: Policy, domain: Domain, items: Sequence[HeldoutItem], n: int, params: SamplingParams,
                      limits: EpisodeLimits | None = None, seed: int | None = None, group_size: int = GENERATION_BATCH_SIZE,
                      checker: AnswerChecker | None = None) -> list[list[bool]]:
    """Whether each of ``n`` attempts at each held-out item succeeded, item by item, through the seam: the one
    held-out path (the run's held-out curve, the warm starts' scores, the benches). Sample ``j`` of an item is its
    attempt ``j``, so a domain that varies its world by attempt (the tools world's database variants) varies it per
    item and sample, the same before and after training. A single-turn domain needs the ``checker``."""
    if checker is None and not isinstance(domain, HasEnvironment):
        raise ValueError(f"domain {domain.name!r} grades answers: held-out success needs an answer checker")
    solver = make_solver(domain, checker or AnswerChecker(use_math_verify=False), limits=limits, group_size=group_size)
    return [[a.correct for a in g] for g in solver.attempts(policy, heldout_tasks(domain, items), n, params, seed)]


def heldout_tasks(domain: Domain, items: Sequence[HeldoutItem]) -> list[Task]:
    """The tasks of held-out items (with their cards where the domain builds environments from one)."""
    card: Callable[[HeldoutItem], TaskCard | None] = (
        domain.heldout_card if isinstance(domain, HasEnvironment) else lambda it: None)
    return [Task(it.problem, it.answer, card(it)) for it in items]


def _card(task: Task) -> TaskCard:
    if task.card is None:
        raise ValueError(f"an episode needs its task's card to build the environment (task {task.prompt[:40]!r})")
    return task.card


def _gold(domain: Domain, card: TaskCard) -> tuple[list[ToolCall] | None, Collection[str]]:
    """The card's gold trajectory and the tool inventory in a :class:`HasTrajectories` domain (``(None, ())``
    otherwise, or when the actions do not parse)."""
    if not isinstance(domain, HasTrajectories):
        return None, ()
    try:
        return domain.gold_actions(card), domain.tool_kinds.keys()
    except ValueError:
        return None, ()
