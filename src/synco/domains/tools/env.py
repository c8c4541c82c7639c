"""The Reasoner's side of one tools task: an :class:`~synco.core.episodes.Environment` on a database copy.

Transcript (after the prompt ``T:<instruction>\\n``), one call per agent turn, each answered by an
observation that starts and ends with a newline, so the next call starts on a fresh line::

    find_user(bob)
    =u2,24
    list_orders(u2)
    =o22:shipped,o29:shipped,o58:pending,o61:pending
    cancel_order(o58)
    =ok
    done()

``=<result>`` is a successful call, ``!<code>`` a failed one (``!policy_violation:stock``); the
observation never echoes the agent's text and is at most :data:`MAX_OBSERVATION_CHARS` long.
``done(v1,..)`` ends the episode and states the outputs.

Grade: ``state`` is 1 when the final database hash equals the gold one (the card's actions replayed on a
fresh copy: any path to the same end state passes); ``outputs`` is the share of the required outputs
among the values stated in ``done(...)`` (only there; 1 when none are required), and 0 when more values
are stated than required (no guessing by listing); ``done`` is 1 when the agent ended with ``done``.
Reward 1.0 iff all three are 1, else 0.0.

On a database variant (``tools.db_variants``) the environment is built on the variant with the gold of the task
solved there; its grade then says which variant (``info["db_variant"]``), the outputs it required
(``info["gold_outputs"]``) and, when they are not the card's, the gold actions it was graded against
(:attr:`~synco.core.episodes.EpisodeGrade.gold_actions`).
"""

from __future__ import annotations

from collections.abc import Sequence

from synco.core.episodes import EnvStep, EpisodeGrade, ToolCall
from synco.domains.tools.db import DB
from synco.domains.tools.syntax import DONE, TurnError, canonical_value, format_outputs, parse_turn
from synco.domains.tools.tools import MAX_RESULT_CHARS, call_tool

MAX_OBSERVATION_CHARS = MAX_RESULT_CHARS + 4
"""Longest observation: ``\\n=`` + a result + ``\\n``."""

MAX_STEPS = 64
"""Calls after which the environment ends the episode itself (the loop's ``max_turns`` is usually far lower)."""


def observation(text: str, error: str | None = None, detail: str = "") -> str:
    """``\\n=<text>\\n`` for a result, ``\\n!<code>[:<detail>]\\n`` for an error (fixed words only)."""
    body = f"!{error}:{detail}" if error and detail and error == "policy_violation" else f"!{error}" if error else f"={text}"
    return f"\n{body[: MAX_OBSERVATION_CHARS - 2]}\n"


class ToolsEnv:
    """One episode on one task: a private copy of the database, the gold hash and the required outputs."""

    def __init__(self, db: DB, gold_hash: str, outputs: Sequence[str], max_steps: int = MAX_STEPS,
                 variant: int | None = None, gold_actions: Sequence[ToolCall] | None = None) -> None:
        """``variant``: the database variant ``db`` is, recorded in the grade (None: variants are off, nothing is
        recorded); ``gold_actions``: the gold trajectory the episode is graded against when it is not the card's."""
        self.db = db.copy()
        self.gold_hash = gold_hash
        self.outputs = tuple(canonical_value(v) for v in outputs)
        self.max_steps = max_steps
        self.variant = variant
        self.gold_actions = None if gold_actions is None else list(gold_actions)
        self.stated: tuple[str, ...] = ()
        self.finished = False  # the agent called done
        self.steps = 0
        self.calls: list[ToolCall] = []  # every parsed call, in order (failed ones included)

    @property
    def over(self) -> bool:
        return self.finished or self.steps >= self.max_steps

    def step(self, text: str) -> EnvStep:
        """Parse the turn, run its call and answer; never raises on the agent's text."""
        if self.over:
            return EnvStep(observation="", done=True, error="episode_over")
        self.steps += 1
        try:
            call = parse_turn(text).call
        except TurnError as err:
            return EnvStep(observation(text="", error=err.code), done=self.over, error=err.code)
        self.calls.append(call)
        if call.name == DONE:
            self.finished = True
            self.stated = tuple(call.arguments.get("values", ()))
            return EnvStep(observation="", done=True, tool_call=call)
        result = call_tool(self.db, call)
        if not result.ok:
            return EnvStep(observation("", result.code, result.detail), done=self.over, tool_call=call, error=result.code)
        return EnvStep(observation(result.text), done=self.over, tool_call=call)

    def grade(self) -> EpisodeGrade:
        """Reward 1.0 iff the final state is the gold one, every required output was stated in done, and done was called."""
        state = float(self.db.state_hash() == self.gold_hash)
        if len(self.stated) > len(self.outputs):
            outputs = 0.0
        elif not self.outputs:
            outputs = 1.0
        else:
            stated = set(self.stated)
            outputs = sum(v in stated for v in self.outputs) / len(self.outputs)
        done = float(self.finished)
        reward = 1.0 if state == outputs == done == 1.0 else 0.0
        info = {} if self.variant is None else {"db_variant": str(self.variant), "gold_outputs": format_outputs(self.outputs)}
        return EpisodeGrade(reward=reward, correct=reward == 1.0, parts={"state": state, "outputs": outputs, "done": done},
                            info=info, gold_actions=self.gold_actions)
