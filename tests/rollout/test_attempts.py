"""The rollout seam (``synco.rollout.attempts``): graded attempts with their ids, mask, log-probs and the sampling
policy's version, single-turn answers checked in one batch."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from synco.core.episodes import Episode, EpisodeGrade
from synco.core.rewards import ReasonerRewardConfig
from synco.core.sampling import Completion, SamplingParams
from synco.domains.math import MathDomain
from synco.rollout.attempts import AnswerSolver, Task, episode_attempt


class BatchOnlyChecker:
    """A checker that answers only in batches (a single match would be a missed batch), recording each batch."""

    def __init__(self) -> None:
        self.batches: list[list[tuple[str, str]]] = []

    def match(self, predicted: str, reference: str) -> bool:
        raise AssertionError("the seam should check a request's answers in one match_many call")

    def match_many(self, pairs, *, timeout=None, rel_tol=0.0):  # noqa: ANN001, ANN201
        assert timeout is None and rel_tol == 0.0  # training rewards: the checker's bound, exact
        self.batches.append(list(pairs))
        return [p.strip() == r for p, r in pairs]


class Scripted:
    """A policy whose answers are scripted per prompt, sampled (and stamped) at version ``policy_version``."""

    def __init__(self, texts: Sequence[Sequence[str]], version: int) -> None:
        self.texts, self.policy_version = texts, version

    def format_prompt(self, user_text: str, system: str | None = None, tools: object = None) -> str:
        return user_text

    def generate(self, prompts: Sequence[str], n: int, params: SamplingParams | None = None) -> list[list[Completion]]:
        assert len(prompts) == len(self.texts)
        return [[Completion(text=t, prompt_ids=[1, 2], completion_ids=[3, 4], logprobs=[-0.1, -0.2], truncated=False,
                            finish_reason="stop", version=self.policy_version) for t in group] for group in self.texts]


def test_a_requests_answers_are_checked_in_one_batch_and_carry_the_version() -> None:
    texts = [["\\boxed{7}", "no answer here", "\\boxed{8}"], ["\\boxed{ 3}", "\\boxed{3}", "x"]]
    checker = BatchOnlyChecker()
    solver = AnswerSolver(MathDomain(), checker, ReasonerRewardConfig())  # type: ignore[arg-type]
    groups = solver.attempts(Scripted(texts, version=5), [Task("p1", "7"), Task("p2", "3")], 3,  # type: ignore[arg-type]
                             SamplingParams())
    assert checker.batches == [[("7", "7"), ("8", "7"), ("3", "3"), ("3", "3")]]  # no answer: wrong unchecked
    assert [[a.correct for a in g] for g in groups] == [[True, False, False], [True, True, False]]
    assert [a.method for a in groups[0]] == ["boxed", "none", "boxed"]
    right, wrong = groups[0][0], groups[0][2]
    assert right.answer == "7" and right.n_tokens == 2 and wrong.answer == "8" and right.reward > wrong.reward
    a = groups[1][1]
    assert (a.policy_version, a.prompt_ids, a.completion_ids, a.logprobs) == (5, [1, 2], [3, 4], [-0.1, -0.2])
    assert a.turns is None and [(t.role, t.text) for t in a.transcript] == [("agent", "\\boxed{3}")]  # one turn
    assert a.loss_mask is None and a.t_sample is not None and a.t_sample >= 0
    assert solver.attempts(Scripted([], 0), [], 3, SamplingParams()) == []  # type: ignore[arg-type]


def test_an_episode_attempt_keeps_ids_mask_logprobs_and_version() -> None:
    ep = Episode(prompt_ids=[5, 6])
    ep.add_agent("a", [7, 8], [-1.0, -0.5], None, version=7)
    ep.add_env("e", [9], None)
    ep.add_agent("b", [2], [-0.25], None, version=8)  # the episode is as old as its oldest turn
    ep.finish, ep.grade = "done", EpisodeGrade(reward=1.0, correct=True, parts={"db": 1.0})
    a = episode_attempt(ep, t_sample=0.5)
    assert (a.policy_version, a.prompt_ids, a.completion_ids) == (7, [5, 6], [7, 8, 9, 2])
    assert a.loss_mask == [1, 1, 0, 1] and a.logprobs == [-1.0, -0.5, 0.0, -0.25] and a.n_tokens == 3
    assert a.transcript == a.turns and a.finish == "done" and a.reward_parts == {"db": 1.0}
    e = a.to_experience(0.5)
    assert e.loss_mask == [1, 1, 0, 1] and e.old_logprobs == [-1.0, -0.5, 0.0, -0.25]


def test_an_episode_needs_its_card() -> None:
    from synco.domains.tools.domain import ToolsDomain
    from synco.rollout.attempts import make_solver

    solver = make_solver(ToolsDomain(), BatchOnlyChecker())  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="needs its task's card"):
        solver.attempts(Scripted([["x"]], 0), [Task("p", "r")], 1, SamplingParams())  # type: ignore[arg-type]
