"""One τ² episode on one task: an :class:`~synco.core.episodes.Environment` over τ²'s own environment and evaluator.

The episode follows τ²'s orchestrator: the environment starts from the task's initial state (``set_state`` with
its initialization data, actions and message history); in user mode the conversation opens with τ²'s greeting and
the simulated user's first message (:attr:`Tau2Env.opening`, for the prompt). Then each agent turn is either

* a tool call (:mod:`~synco.domains.tau2.calls`): checked here first (a known tool, argument names and types
  against τ²'s own parameter model, :func:`guard_arguments`), then run by τ²'s ``Environment.get_response``;
  the observation is the tool's output, cut at :data:`MAX_OBSERVATION_CHARS` (``role="tool"``). A call refused
  here never reaches τ² and is not in τ²'s transcript (it changed nothing; the evaluator replays the transcript);
* a message: with a user it goes to :class:`UserSim`, whose reply is the observation (``role="user"``); the
  episode ends when the reply holds a user stop token (``###STOP###``, ``###TRANSFER###``,
  ``###OUT-OF-SCOPE###``) or the agent's message holds ``###STOP###``. In solo mode we follow τ²'s solo agent: the
  agent may only call tools; it ends with the ``done`` tool (or a message holding ``###STOP###``), and any other
  message ends the episode as an agent error (reward 0, as τ² scores it).

Grade: τ²'s own evaluators on the τ² transcript, per the task's ``reward_basis``: ``EnvironmentEvaluator`` (DB
hash against the gold replay, env assertions; its environments come from the fast :meth:`World.fresh_env`),
``ActionEvaluator``, ``CommunicateEvaluator``; NL assertions need an LLM judge and are skipped
(``parts["NL_ASSERTION_skipped"] = 1``). As in τ²'s ``evaluate_simulation``, an episode that did not end on a stop
(turn limit, too many errors, an agent error) scores 0; ``parts["stop"]`` says whether it did. Reward = the product.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Literal, Protocol, runtime_checkable

from pydantic import ValidationError

from synco.core.episodes import EnvStep, EpisodeGrade, ToolCall
from synco.domains.tau2.calls import AgentTurn, parse_turn
from synco.domains.tau2.world import STOP_TOOL, World, _import

if TYPE_CHECKING:
    from tau2.data_model.message import Message
    from tau2.data_model.tasks import Task

logger = logging.getLogger(__name__)

__all__ = ["AGENT_STOP", "GREETING", "MAX_OBSERVATION_CHARS", "MAX_USER_CHARS", "USER_STOPS", "Tau2Env", "Termination",
           "UserSim", "guard_arguments"]

AGENT_STOP = "###STOP###"
"""The token that ends an episode from the agent's side (τ²'s ``STOP_TOKEN``)."""

USER_STOPS = ("###STOP###", "###TRANSFER###", "###OUT-OF-SCOPE###")
"""Tokens that end an episode from the user's side (τ²'s user simulator)."""

GREETING = "Hi! How can I help you today?"
"""The agent's first message in user mode: τ²'s orchestrator opens every conversation with it."""

MAX_OBSERVATION_CHARS = 6000
"""Longest observation (a tool's output or the user's reply) the agent is shown; the transcript keeps it whole."""

MAX_USER_CHARS = 4000
"""Longest user reply kept (a runaway simulated user is cut)."""

MAX_TURNS = 64
MAX_ERRORS = 10  # τ²'s orchestrator's default: this many failed calls end the episode (reward 0)
MAX_CALCULATE_CHARS = 200
CUT = " ...[cut]"

Termination = Literal["agent_stop", "user_stop", "agent_error", "user_error", "max_turns", "too_many_errors"]
"""How an episode ended (τ²'s ``TerminationReason`` values); only the two stops are graded above 0."""


@runtime_checkable
class UserSim(Protocol):
    """The simulated user: its next message given the task (its ``user_scenario``) and the τ² transcript so far.

    Its text is an observation (never trained on). A reply holding a user stop token ends the episode."""

    def reply(self, task: Task, transcript: Sequence[Message]) -> str: ...


def bound(text: str, limit: int = MAX_OBSERVATION_CHARS) -> str:
    """``text`` cut to ``limit`` characters, the cut marked."""
    return text if len(text) <= limit else text[: limit - len(CUT)] + CUT


def guard_arguments(tool: Any, name: str, arguments: dict[str, Any]) -> str | None:
    """Why ``arguments`` may not be passed to τ²'s tool ``tool`` (its ``Tool``), or None when they may.

    τ²'s toolkit calls the Python method with the raw JSON arguments unchecked, so: unknown argument names and
    values of the wrong type (τ²'s own parameter model, lax pydantic) are refused here; and τ²'s ``calculate``
    evaluates its expression, so a long one or one with ``**`` (``9**9**9`` runs for ever) is refused."""
    fields = tool.params.model_fields
    unknown = sorted(set(arguments) - set(fields))
    if unknown:
        return f"unknown argument(s) {', '.join(k[:40] for k in unknown[:5])}"
    try:
        tool.params.model_validate(arguments)
    except ValidationError as err:
        first = err.errors()[0]
        where = ".".join(str(x)[:40] for x in first["loc"])
        return f"{where}: {first['msg']}"
    if name == "calculate":
        expr = arguments.get("expression", "")
        if len(expr) > MAX_CALCULATE_CHARS or "**" in expr:
            return f"expression over {MAX_CALCULATE_CHARS} chars or with '**'"
    return None


class Tau2Env:
    """One episode of ``task`` in ``world``: τ²'s environment, the τ² transcript, and τ²'s evaluator at the end."""

    def __init__(self, world: World, task: Task, user: UserSim | None = None, solo: bool = False,
                 max_turns: int = MAX_TURNS, max_errors: int = MAX_ERRORS) -> None:
        if solo and not world.solo_ok(task):
            raise ValueError(f"task {task.id!r} of tau2 domain {world.name!r} cannot run solo (no ticket or no solo mode)")
        if not solo and user is None:
            raise ValueError(f"task {task.id!r}: user mode needs a UserSim (or solo=True where the task has a ticket)")
        self._msg = _import("tau2.data_model.message")
        self.world, self.task, self.user, self.solo = world, task, user, solo
        self.max_turns, self.max_errors = max_turns, max_errors
        self.env = world.fresh_env(solo=solo)
        init = task.initial_state
        history = copy.deepcopy(init.message_history) if init is not None and init.message_history else []
        self.env.set_state(initialization_data=init.initialization_data if init is not None else None,
                           initialization_actions=init.initialization_actions if init is not None else None,
                           message_history=history)
        self.transcript: list[Message] = list(history)
        self.tools = {t.name: t for t in self.env.get_tools()}
        if solo and self.env.user_tools is not None:
            self.tools.update({t.name: t for t in self.env.get_user_tools()})
        self.turns = self.errors = self.n_calls = 0
        self.termination: Termination | None = None
        self.opening = self._open()

    # ------------------------------------------------------------ the conversation

    def _open(self) -> str | None:
        """In user mode, τ²'s greeting (when there is no history) and the user's first message; None in solo mode or
        when the history already ends on the agent's turn."""
        if self.solo:
            return None
        last = self.transcript[-1] if self.transcript else None
        if last is None:
            self.transcript.append(self._msg.AssistantMessage(role="assistant", content=GREETING))
        elif not (isinstance(last, self._msg.AssistantMessage) and not last.is_tool_call()):
            return last.content if isinstance(last, self._msg.UserMessage) else None
        return self._user_turn()

    def _user_turn(self) -> str:
        """Ask the user for its next message, record it, and end the episode on a user stop token."""
        assert self.user is not None
        text = bound(str(self.user.reply(self.task, tuple(self.transcript))), MAX_USER_CHARS)
        if not text.strip():
            self.termination = "user_error"
            return ""
        self.transcript.append(self._msg.UserMessage(role="user", content=text))
        if any(tok in text for tok in USER_STOPS):
            self.termination = "user_stop"
        return text

    @property
    def done(self) -> bool:
        return self.termination is not None

    def step(self, text: str) -> EnvStep:
        """Parse the agent's turn, run it (a call, or a message to the user) and answer; never raises on ``text``."""
        if self.done:
            return EnvStep(observation="", done=True, error="episode_over")
        self.turns += 1
        turn = parse_turn(text)
        if turn.call is not None:
            result = self._call(turn)
        elif turn.message is not None:
            result = self._message(turn.message)
        else:
            result = self._refuse(None, turn.error or "bad_call", turn.detail)
        if not self.done and self.turns >= self.max_turns:
            self.termination = "max_turns"
        if not self.done and self.errors >= self.max_errors:
            self.termination = "too_many_errors"
        return EnvStep(observation="" if self.done else result.observation, done=self.done,
                       tool_call=result.tool_call, error=result.error, role=result.role)

    def _refuse(self, call: ToolCall | None, code: str, detail: str = "") -> EnvStep:
        """An error observation for a turn τ² never sees (counted as an error, not in τ²'s transcript)."""
        self.errors += 1
        body = f"Error: {code}" + (f" ({detail})" if detail else "")
        return EnvStep(observation=bound(body), done=False, tool_call=call, error=code, role="tool")

    def _call(self, turn: AgentTurn) -> EnvStep:
        """Check a call, run it through τ²'s environment and record it (τ²'s ``AssistantMessage`` + ``ToolMessage``)."""
        call = turn.call
        assert call is not None
        if self.solo and call.name == STOP_TOOL:  # τ²'s solo agent turns this call into a stop message
            self.transcript.append(self._msg.AssistantMessage(role="assistant", content=AGENT_STOP))
            self.termination = "agent_stop"
            return EnvStep(observation="", done=True, tool_call=call)
        tool = self.tools.get(call.name)
        if tool is None:
            return self._refuse(call, "unknown_tool", f"no tool named {call.name}")
        why = guard_arguments(tool, call.name, call.arguments)
        if why is not None:
            return self._refuse(call, "bad_arguments", why)
        self.n_calls += 1
        tc = self._msg.ToolCall(id=f"call_{self.n_calls}", name=call.name, arguments=copy.deepcopy(call.arguments),
                                requestor="assistant")
        self.transcript.append(self._msg.AssistantMessage(role="assistant", tool_calls=[tc]))
        response = self.env.get_response(tc)
        self.transcript.append(response)
        if response.error:
            self.errors += 1
        return EnvStep(observation=bound(response.content or ""), done=False, tool_call=call,
                       error="tool_error" if response.error else None, role="tool")

    def _message(self, text: str) -> EnvStep:
        """Record the agent's message; a stop ends the episode, solo mode allows no other message, else the user replies."""
        self.transcript.append(self._msg.AssistantMessage(role="assistant", content=text))
        if AGENT_STOP in text:
            self.termination = "agent_stop"
            return EnvStep(observation="", done=True)
        if self.solo:
            self.termination = "agent_error"
            return EnvStep(observation="", done=True, error="solo_message")
        return EnvStep(observation=bound(self._user_turn()), done=False, role="user")

    # ------------------------------------------------------------ the grade

    def grade(self) -> EpisodeGrade:
        """τ²'s evaluators on the transcript, per the task's reward basis; 0 unless the episode ended on a stop."""
        parts = basis_scores(self.world, self.task, self.transcript, self.solo)
        parts["stop"] = float(self.termination in ("agent_stop", "user_stop"))
        reward = 1.0
        for key, value in parts.items():
            if not key.endswith("_skipped"):
                reward *= value
        info = {"termination": self.termination or "not_ended", "user": "solo" if self.solo else self.user_name}
        return EpisodeGrade(reward=reward, correct=reward == 1.0, parts=parts, info=info)

    @property
    def user_name(self) -> str:
        """Who plays the user: the simulated user's ``model_name`` (the config's ``tau2.user_model``)."""
        return str(getattr(self.user, "model_name", type(self.user).__name__))


def basis_scores(world: World, task: Task, transcript: Sequence[Message], solo: bool) -> dict[str, float]:
    """Each reward basis' score of ``transcript`` by τ²'s own evaluator (``DB``, ``ENV_ASSERTION``, ``ACTION``,
    ``COMMUNICATE``); ``NL_ASSERTION`` needs an LLM judge: skipped, marked ``NL_ASSERTION_skipped``. A task without
    evaluation criteria scores ``{}`` (τ² gives it 1)."""
    criteria = task.evaluation_criteria
    if criteria is None:
        return {}
    ev_env = _import("tau2.evaluator.evaluator_env")
    ev_act = _import("tau2.evaluator.evaluator_action")
    ev_com = _import("tau2.evaluator.evaluator_communicate")
    basis = {b.value for b in criteria.reward_basis}
    trajectory = list(transcript)
    parts: dict[str, float] = {}
    if basis & {"DB", "ENV_ASSERTION"}:
        info = ev_env.EnvironmentEvaluator.calculate_reward(environment_constructor=world.env_constructor(), task=task,
                                                            full_trajectory=trajectory, solo_mode=solo)
        breakdown = {k.value: float(v) for k, v in (info.reward_breakdown or {}).items()}
        parts.update({b: breakdown.get(b, float(info.reward)) for b in sorted(basis & {"DB", "ENV_ASSERTION"})})
    if "ACTION" in basis:
        parts["ACTION"] = float(ev_act.ActionEvaluator.calculate_reward(task=task, full_trajectory=trajectory).reward)
    if "COMMUNICATE" in basis:
        parts["COMMUNICATE"] = float(ev_com.CommunicateEvaluator.calculate_reward(task=task,
                                                                                  full_trajectory=trajectory).reward)
    if "NL_ASSERTION" in basis:
        parts["NL_ASSERTION_skipped"] = 1.0
    return parts
