"""Gold episodes: a verified card's gold trajectory played through the same episode loop the Reasoner acts in.

EvoSyn trains its task agent by supervised fine-tuning on verified, executable trajectories. For a domain whose
cards carry one (:class:`~synco.domains.base.HasGoldTurns`), :func:`gold_episodes` replays each card's gold turns
as if the policy had sampled them: :func:`~synco.rollout.episodes.run_episodes` steps a fresh environment per card,
appends each observation's ids exactly as in a rollout (mask 0), and grades the episode. So a gold episode's ids
and mask are built by the code that builds every sampled episode -- nothing is assembled from text by a second
path that could drift from what the model sees when it acts. Each agent turn is the turn's text encoded as inside
a sequence plus the end-of-turn id a sampled turn stops on. A gold episode that does not pass its own grade (it
did not fit ``max_turns`` or the token budget) is not training data: None.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

from synco.core.episodes import Episode, EpisodeLimits
from synco.core.records import CardRejected, TaskCard
from synco.core.sampling import Completion, SamplingParams
from synco.domains.base import Domain, HasEnvironment, HasGoldTurns, reasoner_prompts, response_prefix
from synco.rollout.episodes import run_episodes

__all__ = ["GoldPolicy", "gold_episodes"]


@runtime_checkable
class GoldPolicy(Protocol):
    """What a gold replay needs of a policy: its prompt format and the text side of :class:`~synco.rollout.episodes.TokenPolicy` (no
    sampling), and the ids a sampled turn stops on (the first is written after each gold turn)."""

    eos_ids: list[int]

    def format_prompt(self, user_text: str, system: str | None = None, tools: Any = None) -> str: ...

    def encode_prompt(self, text: str) -> list[int]: ...

    def encode_text(self, text: str) -> list[int]: ...

    def decode(self, ids: Sequence[int]) -> str: ...

    def format_message(self, role: str, content: str, closed: bool) -> str: ...


class _Replay:
    """A TokenPolicy whose every "sample" is the next gold turn of its one episode (the real policy's tokenizer)."""

    def __init__(self, policy: GoldPolicy, turns: Sequence[str], prefix: str) -> None:
        self.policy, self.prefix, self.turns, self.next = policy, prefix, list(turns), 0

    def encode_prompt(self, text: str) -> list[int]:
        return self.policy.encode_prompt(text)

    def encode_text(self, text: str) -> list[int]:
        return self.policy.encode_text(text)

    def decode(self, ids: Sequence[int]) -> str:
        return self.policy.decode(ids)

    def format_message(self, role: str, content: str, closed: bool) -> str:
        return self.policy.format_message(role, content, closed)

    def row_sampler(self) -> None:
        """Gold turns are replayed in lockstep."""
        return None

    def generate_ids(self, ids: Sequence[Sequence[int]], n: int, params: SamplingParams | None = None,
                     seed: int | None = None) -> list[list[Completion]]:
        if len(ids) != 1 or n != 1 or self.next >= len(self.turns):
            raise RuntimeError(f"a gold replay plays one episode of {len(self.turns)} turns, one turn a call")
        turn = self.turns[self.next]
        self.next += 1
        text = turn[len(self.prefix):] if self.prefix and turn.startswith(self.prefix) else turn
        comp = [*self.policy.encode_text(text), self.policy.eos_ids[0]]
        return [[Completion(text=text, prompt_ids=list(ids[0]), completion_ids=comp, logprobs=[0.0] * len(comp),
                            truncated=False, finish_reason="stop")]]


def gold_episodes(policy: GoldPolicy, domain: Domain, cards: Sequence[TaskCard], references: Sequence[str],
                  limits: EpisodeLimits) -> list[Episode | None]:
    """Each card's gold episode (attempt 0's environment), or None where the card has none that passes its grade
    (its actions do not parse, its environment cannot be built, or it runs past ``limits``)."""
    if not isinstance(domain, HasEnvironment) or not isinstance(domain, HasGoldTurns):
        raise TypeError(f"domain {domain.name!r} has no replayable gold episodes (HasEnvironment and HasGoldTurns)")
    if not policy.eos_ids:
        raise ValueError("the policy names no end-of-turn id (eos_ids is empty)")
    if len(references) != len(cards):
        raise ValueError(f"{len(cards)} cards but {len(references)} references")
    prompts = reasoner_prompts(policy, domain, [c.payload.prompt_text() for c in cards])  # type: ignore[arg-type]
    prefix = response_prefix(domain)
    out: list[Episode | None] = []
    for prompt, card, reference in zip(prompts, cards, references):
        try:
            turns = domain.gold_turns(card, reference)
        except CardRejected:
            out.append(None)
            continue
        replay = _Replay(policy, turns, prefix)
        [ep] = run_episodes(replay, [prompt], lambda _: domain.environment(card, reference, 0), SamplingParams(),
                            EpisodeLimits(min(limits.max_turns, len(turns)), limits.max_tokens), turn_prefix=prefix)
        ok = ep.finish == "done" and ep.grade is not None and ep.grade.correct
        out.append(ep if ok else None)
    return out
