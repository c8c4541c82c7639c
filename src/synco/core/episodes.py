"""Episodes: the Reasoner's unit of experience when it acts on an environment over several turns.

An *environment* is the Reasoner's side of a domain for one task (one database copy, one
transcript): the agent writes a turn, :meth:`Environment.step` parses it (a tool call, or the
final message), runs it and answers with an observation; when the episode is over,
:meth:`Environment.grade` scores the whole of it. Nothing is shared between two environments, so
nothing leaks between episodes or steps.

An :class:`Episode` is token-in/token-out: its ids grow turn by turn (the agent's sampled ids,
then the observation's ids as they were fed to the model) and are never re-tokenised from text.
``mask`` marks which ids the agent sampled (1, trained) and which the environment wrote (0, no
gradient, no share of the loss normaliser). A single-turn domain is the one-turn case: one agent
turn, mask all ones. Everything here is torch-free.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field


Finish = Literal["done", "max_turns", "token_budget"]
"""Why an episode ended: the environment said done, the turn limit, or the episode's token budget."""


class ToolCall(BaseModel):
    """One tool call as the environment parsed it from an agent turn."""

    model_config = ConfigDict(frozen=True)

    name: str
    arguments: dict[str, Any] = Field(default_factory=dict)


class Turn(BaseModel):
    """One turn of an episode's transcript: an agent turn (sampled) or an environment turn (observation)."""

    role: Literal["agent", "env"]
    text: str
    n_tokens: int = 0
    tool_call: ToolCall | None = None  # agent turns: the call the environment parsed, if any
    error: str | None = None  # env turns: the error code of a call that failed (``unknown_tool``, ...)


class EpisodeGrade(BaseModel):
    """How a finished episode scored: the reward, whether it counts as solved, and the reward's parts."""

    reward: float
    correct: bool
    parts: dict[str, float] = Field(default_factory=dict)
    info: dict[str, str] = Field(default_factory=dict)
    """What else the environment reports about the episode, e.g. how it ended in τ²'s terms (``termination``) and
    which model played the user (``user_model``)."""
    gold_actions: list[ToolCall] | None = None
    """The gold trajectory the environment graded the episode against when it chose its own (a tools episode on a
    database variant: the task solved there, which may take another branch than the card's); None: the card's.
    Where a failed episode first leaves the gold trajectory is measured against this one."""


@dataclass(frozen=True)
class EnvStep:
    """What :meth:`Environment.step` answers to one agent turn."""

    observation: str  # text appended to the context before the agent's next turn ("" when done)
    done: bool
    tool_call: ToolCall | None = None
    error: str | None = None
    role: Literal["tool", "user"] | None = None
    """Who speaks in the observation, for a chat agent: the runner writes it as that role's chat message
    (``TokenPolicy.format_message``). None: the observation is raw text appended as is (the tools world)."""


@runtime_checkable
class Environment(Protocol):
    """The Reasoner's side of one task: step on the agent's text, then grade the finished episode.

    ``step`` must never raise on model text: malformed calls, unknown tools, bad or giant
    arguments become an error observation. It is bounded in time and in the observation's length.
    """

    def step(self, text: str) -> EnvStep: ...

    def grade(self) -> EpisodeGrade: ...


MAX_TURNS = 6
"""Agent turns per episode unless a run says otherwise (the config's ``max_turns``): the one default."""

MAX_EPISODE_TOKENS = 384
"""Tokens after the prompt per episode unless a run says otherwise (the config's ``max_episode_tokens``)."""

USER_MAX_NEW_TOKENS = 64
"""Tokens per simulated-user message (an environment's user, e.g. τ²'s) unless a run says otherwise."""


@dataclass(frozen=True)
class EpisodeLimits:
    """Bounds of one episode: agent turns, and tokens after the prompt (agent and environment together)."""

    max_turns: int = MAX_TURNS
    max_tokens: int = MAX_EPISODE_TOKENS

    def __post_init__(self) -> None:
        if self.max_turns < 1:
            raise ValueError(f"max_turns must be >= 1, got {self.max_turns}")
        if self.max_tokens < 1:
            raise ValueError(f"max_tokens must be >= 1, got {self.max_tokens}")


@dataclass
class Episode:
    """One Reasoner episode on one task, token-in/token-out.

    ``prompt_ids`` are the ids of the first message (the formatted prompt); ``completion_ids`` every
    id after it, agent and environment turns in order; ``mask[i]`` is 1 where the agent sampled
    ``completion_ids[i]`` and 0 where the environment wrote it; ``logprobs[i]`` the sampling log-prob
    of an agent id (0.0 on environment ids, never used). ``version``: the oldest learner version its agent turns
    were sampled by (their samplers' stamps; 0 before the first turn).
    """

    prompt_ids: list[int]
    completion_ids: list[int] = field(default_factory=list)
    mask: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    turns: list[Turn] = field(default_factory=list)
    finish: Finish | None = None
    grade: EpisodeGrade | None = None
    version: int | None = None

    @property
    def n_turns(self) -> int:
        """Agent turns taken."""
        return sum(t.role == "agent" for t in self.turns)

    @property
    def done(self) -> bool:
        return self.finish is not None

    @property
    def text(self) -> str:
        """The transcript after the prompt, as the turns' texts joined."""
        return "".join(t.text for t in self.turns)

    def add_agent(self, text: str, ids: Sequence[int], logprobs: Sequence[float], step: EnvStep | None,
                  version: int = 0) -> None:
        """Append one sampled agent turn (mask 1), sampled by learner ``version``."""
        if len(ids) != len(logprobs):
            raise ValueError(f"an agent turn of {len(ids)} ids has {len(logprobs)} log-probs")
        self.version = version if self.version is None else min(self.version, version)
        self.completion_ids += ids
        self.mask += [1] * len(ids)
        self.logprobs += [float(x) for x in logprobs]
        self.turns.append(Turn(role="agent", text=text, n_tokens=len(ids),
                               tool_call=step.tool_call if step is not None else None))

    def add_env(self, text: str, ids: Sequence[int], error: str | None) -> None:
        """Append one observation (mask 0): ids exactly as they are fed to the model."""
        self.completion_ids += ids
        self.mask += [0] * len(ids)
        self.logprobs += [0.0] * len(ids)
        self.turns.append(Turn(role="env", text=text, n_tokens=len(ids), error=error))
