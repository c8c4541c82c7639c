"""Run multi-turn episodes: a policy acts on one environment per episode, token-in/token-out.

A request's episodes are cut into jobs of ``group_size`` (:func:`episode_jobs`), each with its own
seed, so a job's episodes do not depend on which process runs it (here, or a Ray rollout worker:
the environment steps where the generation happens). A job's episodes advance in lockstep, one
agent turn at a time: the active episodes' ids so far go to the policy in one
:meth:`TokenPolicy.generate_ids` call (turn ``t`` seeded by ``derive_seed(seed, "turn", t)`` when
the job is seeded), each sampled turn goes to its own
environment, and the observation's ids are appended exactly as they will be trained on (mask 0).
Nothing is decoded and encoded again: the ids an update trains are the ids the model saw.

Bounds: ``EpisodeLimits.max_turns`` agent turns and ``max_tokens`` ids after the prompt, per
episode; a turn sampled past the budget is cut at it (its text decoded from the kept ids).
An environment that raises (a bug, never model text: environments turn bad text into error
observations) ends that episode with reward 0 and the error recorded; the other episodes go on.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from synco.core.episodes import EnvStep, Environment, Episode, EpisodeGrade, EpisodeLimits
from synco.core.policy import GENERATION_BATCH_SIZE, Policy
from synco.core.records import TaskCard
from synco.core.sampling import Completion, SamplingParams
from synco.core.seeds import derive_seed
from synco.domains.base import Domain, HasEnvironment, reasoner_prompts, response_prefix

logger = logging.getLogger(__name__)

__all__ = ["EpisodeJob", "RowSampler", "RunsEpisodes", "TokenPolicy", "act", "episode_jobs", "episode_turn_seed",
           "run_episodes", "run_job", "turn_seed"]


@runtime_checkable
class TokenPolicy(Protocol):
    """What an episode needs of a policy besides ``format_prompt``: sampling on ids, and the tokenizer both ways."""

    def encode_prompt(self, text: str) -> list[int]: ...

    def encode_text(self, text: str) -> list[int]: ...

    def decode(self, ids: Sequence[int]) -> str: ...

    def format_message(self, role: str, content: str, closed: bool) -> str: ...

    def generate_ids(self, ids: Sequence[Sequence[int]], n: int, params: SamplingParams | None = None,
                     seed: int | None = None) -> list[list[Completion]]: ...

    def row_sampler(self) -> RowSampler | None:
        """Its sampler when that samples one row at a time (a served endpoint), else None (lockstep turns)."""
        ...


@runtime_checkable
class RowSampler(Protocol):
    """An engine that samples one row at a time inside a session (a served endpoint,
    :class:`synco.rollout.served.ServedGenerator`): each episode then advances as its own response arrives instead of
    in lockstep with the slowest episode of its job."""

    def session(self) -> Any:
        """An async context manager for one batch of rows (called outside the event loop: it may block first)."""
        ...

    def base_seed(self, seed: int | None) -> int: ...

    async def sample_row(self, conn: Any, ids: Sequence[int], params: SamplingParams, seed: int) -> Completion: ...


def episode_turn_seed(seed: int, episode: int, turn: int) -> int:
    """The seed of one episode's ``turn``-th request when episodes advance on their own: it depends on the episode
    and the turn only, never on the order responses arrive in."""
    return derive_seed(seed, "episode", episode, "turn", turn)


def turn_seed(seed: int | None, turn: int) -> int | None:
    """The seed of a seeded request's ``turn``-th generate call (None: unseeded)."""
    return None if seed is None else derive_seed(seed, "turn", turn)


def run_episodes(policy: TokenPolicy, prompts: Sequence[str], make_env: Callable[[int], Environment],
                 params: SamplingParams, limits: EpisodeLimits, seed: int | None = None,
                 turn_prefix: str = "") -> list[Episode]:
    """One finished, graded episode per formatted prompt; ``make_env(i)`` builds episode ``i``'s fresh environment.

    ``turn_prefix``: a text every agent turn starts with, prefilled (the domain's response prefix, e.g. the opening of
    a tool call when the agent must call a tool every turn): the prompts already end with it; after each observation
    it is appended as environment ids (no gradient), and the environment sees it in front of each sampled turn.
    """
    episodes = [Episode(prompt_ids=policy.encode_prompt(p)) for p in prompts]
    envs: list[Environment | None] = []
    for i, ep in enumerate(episodes):
        try:
            envs.append(make_env(i))
        except Exception:  # a card the environment cannot host: the episode ends before it starts
            logger.exception("building the environment of episode %d failed", i)
            ep.finish, ep.grade = "done", _failed("env_error")
            envs.append(None)
    sampler = policy.row_sampler()
    if sampler is not None:  # a served engine: each episode takes its next turn as soon as its response is in
        session = sampler.session()  # before the event loop: the engine may first push its weights (a blocking call)
        asyncio.run(_run_each(policy, sampler, session, episodes, envs, params, limits, sampler.base_seed(seed),
                              turn_prefix))
    else:
        _run_lockstep(policy, episodes, envs, params, limits, seed, turn_prefix)
    for ep, env in zip(episodes, envs):
        if ep.grade is None and env is not None:
            try:
                ep.grade = env.grade()
            except Exception:
                logger.exception("grading an episode failed")
                ep.grade = _failed("env_error")
    return episodes


def _run_lockstep(policy: TokenPolicy, episodes: Sequence[Episode], envs: Sequence[Environment | None],
                  params: SamplingParams, limits: EpisodeLimits, seed: int | None, prefix: str) -> None:
    """The active episodes' turn ``t`` in one ``generate_ids`` call (seeded by :func:`turn_seed`), then each
    sampled turn to its own environment."""
    for turn in range(limits.max_turns):
        active = [i for i, ep in enumerate(episodes) if not ep.done]
        if not active:
            break
        budget = max(limits.max_tokens - len(episodes[i].completion_ids) for i in active)
        turn_params = params.model_copy(update={"max_new_tokens": max(1, min(params.max_new_tokens, budget))})
        sampled = policy.generate_ids([episodes[i].prompt_ids + episodes[i].completion_ids for i in active], 1,
                                      turn_params, seed=turn_seed(seed, turn))
        for i, [c] in zip(active, sampled):
            _advance(policy, episodes[i], envs[i], c, limits, last_turn=turn == limits.max_turns - 1, prefix=prefix)


async def _run_each(policy: TokenPolicy, sampler: RowSampler, session: Any, episodes: Sequence[Episode],
                    envs: Sequence[Environment | None], params: SamplingParams, limits: EpisodeLimits, seed: int,
                    prefix: str) -> None:
    """Every episode on its own: sample, step its environment, append the observation, sample again; up to the
    engine's ``max_concurrency`` requests in flight. Turn ``t`` of episode ``i`` samples from
    :func:`episode_turn_seed`, so the episodes do not depend on which response comes back first."""
    async with session as conn:
        async def one(i: int) -> None:
            ep = episodes[i]
            for turn in range(limits.max_turns):
                if ep.done:
                    return
                left = limits.max_tokens - len(ep.completion_ids)
                turn_params = params.model_copy(update={"max_new_tokens": max(1, min(params.max_new_tokens, left))})
                c = await sampler.sample_row(conn, ep.prompt_ids + ep.completion_ids, turn_params,
                                             episode_turn_seed(seed, i, turn))
                _advance(policy, ep, envs[i], c, limits, last_turn=turn == limits.max_turns - 1, prefix=prefix)

        await asyncio.gather(*(one(i) for i, ep in enumerate(episodes) if not ep.done))


def _advance(policy: TokenPolicy, ep: Episode, env: Environment | None, c: Completion, limits: EpisodeLimits,
             last_turn: bool, prefix: str = "") -> None:
    """Add one sampled turn to ``ep``, step its environment, and add the observation (or end the episode)."""
    left = limits.max_tokens - len(ep.completion_ids)
    ids, logprobs, text, cut = list(c.completion_ids), list(c.logprobs), c.text, False
    if len(ids) > left:  # the turn ran past the episode's budget: keep what fits
        ids, logprobs, cut = ids[:left], logprobs[:left], True
        text = policy.decode(ids)
    assert env is not None, "an episode without an environment is finished before its first turn"
    try:
        step = env.step(prefix + text)
    except Exception:  # environments turn model text into error observations; this is a bug
        logger.exception("an environment's step raised")
        ep.add_agent(text, ids, logprobs, None, c.version)
        ep.finish, ep.grade = "done", _failed("env_error")
        return
    ep.add_agent(text, ids, logprobs, step, c.version)
    if step.done:
        ep.finish = "done"
    elif cut or len(ep.completion_ids) >= limits.max_tokens:
        ep.finish = "token_budget"
    elif last_turn:
        ep.finish = "max_turns"
    else:
        _observe(policy, ep, step, limits, closed=c.finish_reason == "stop", prefix=prefix)


def _observe(policy: TokenPolicy, ep: Episode, step: EnvStep, limits: EpisodeLimits, closed: bool,
             prefix: str = "") -> None:
    """Append the observation's ids (mask 0); an observation that does not fit ends the episode on the budget.

    An observation with a ``role`` is written as that role's chat message after the agent's turn
    (``policy.format_message``; ``closed``: the turn ended with its end-of-turn token), then the next turn's
    prefilled ``prefix``."""
    text = step.observation if step.role is None else policy.format_message(step.role, step.observation, closed)
    text += prefix
    obs = policy.encode_text(text)
    if len(ep.completion_ids) + len(obs) >= limits.max_tokens:
        ep.finish = "token_budget"
        return
    ep.add_env(text, obs, step.error)


def _failed(code: str) -> EpisodeGrade:
    """The grade of an episode an environment error ended (the traceback is in the log)."""
    return EpisodeGrade(reward=0.0, correct=False, parts={code: 1.0})


@dataclass(frozen=True)
class EpisodeJob:
    """One group of episodes, as a process needs them: prompts, the cards and references their environments are
    built from, each episode's attempt index at its card, the sampling settings, the limits and the group's seed.
    Picklable, so a Ray rollout worker runs it where it samples (:class:`RunsEpisodes`)."""

    prompts: tuple[str, ...]
    cards: tuple[TaskCard, ...]
    references: tuple[str, ...]
    attempts: tuple[int, ...]
    params: SamplingParams
    limits: EpisodeLimits
    seed: int | None


def run_job(policy: TokenPolicy, domain: Domain, job: EpisodeJob) -> list[Episode]:
    """The episodes of one job, each on a fresh environment of ``domain`` (one per episode, built from its card,
    reference and attempt index)."""
    if not isinstance(domain, HasEnvironment):
        raise TypeError(f"domain {domain.name!r} has no environment (HasEnvironment): its Reasoner answers with solve()")
    return run_episodes(policy, job.prompts,
                        lambda i: domain.environment(job.cards[i], job.references[i], job.attempts[i]),
                        job.params, job.limits, job.seed, turn_prefix=response_prefix(domain))


@runtime_checkable
class RunsEpisodes(Protocol):
    """A policy that runs episode jobs elsewhere (the Ray backend's workers), each job as :func:`run_job` would."""

    def run_episode_jobs(self, domain: Domain, jobs: Sequence[EpisodeJob]) -> list[list[Episode]]: ...


def episode_jobs(prompts: Sequence[str], cards: Sequence[TaskCard], references: Sequence[str], attempts: Sequence[int],
                 params: SamplingParams, limits: EpisodeLimits, seed: int | None, group_size: int) -> list[EpisodeJob]:
    """The episodes cut into consecutive jobs of ``group_size``; job ``g`` samples from ``derive_seed(seed, "episodes",
    g)`` alone, so its episodes are the same whichever process runs it. ``attempts``: each episode's index among its
    card's attempts (what :meth:`HasEnvironment.environment` gets)."""
    if group_size < 1:
        raise ValueError(f"group_size must be >= 1, got {group_size}")
    if not len(prompts) == len(cards) == len(references) == len(attempts):
        raise ValueError(f"episode_jobs: {len(prompts)} prompts, {len(cards)} cards, {len(references)} references and "
                         f"{len(attempts)} attempt indices (one each per episode)")
    return [EpisodeJob(tuple(prompts[a:a + group_size]), tuple(cards[a:a + group_size]),
                       tuple(references[a:a + group_size]), tuple(attempts[a:a + group_size]), params, limits,
                       None if seed is None else derive_seed(seed, "episodes", g))
            for g, a in enumerate(range(0, len(prompts), group_size))]


def act(policy: Policy, domain: Domain, cards: Sequence[TaskCard], references: Sequence[str], n: int,
        params: SamplingParams, limits: EpisodeLimits, seed: int | None = None,
        group_size: int = GENERATION_BATCH_SIZE) -> list[list[Episode]]:
    """``n`` episodes of ``policy`` on each card, each on its own fresh environment (``domain.environment``, with the
    episode's attempt index 0..n-1 at its card).

    The multi-turn counterpart of :func:`synco.domains.base.solve`: the same prompts (the card's problem as the
    first message), grouped per card in card order. The episodes run in jobs of ``group_size`` (in this process,
    or on the policy's own workers when it :class:`RunsEpisodes`), with the same episodes either way.
    """
    if not isinstance(domain, HasEnvironment):
        raise TypeError(f"domain {domain.name!r} has no environment (HasEnvironment): its Reasoner answers with solve()")
    if len(references) != len(cards):
        raise ValueError(f"{len(cards)} cards but {len(references)} references")
    prompts = reasoner_prompts(policy, domain, [c.payload.prompt_text() for c in cards])
    jobs = episode_jobs([p for p in prompts for _ in range(n)], [c for c in cards for _ in range(n)],
                        [r for r in references for _ in range(n)], [a for _ in cards for a in range(n)], params, limits,
                        seed, group_size)
    if isinstance(policy, RunsEpisodes):
        done = policy.run_episode_jobs(domain, jobs)
    elif isinstance(policy, TokenPolicy):
        done = [run_job(policy, domain, job) for job in jobs]
    else:
        raise TypeError(f"{type(policy).__name__} cannot run episodes: it lacks the TokenPolicy methods "
                        f"(encode_prompt, encode_text, decode, generate_ids)")
    flat = [ep for group in done for ep in group]
    return [flat[j * n:(j + 1) * n] for j in range(len(cards))]
