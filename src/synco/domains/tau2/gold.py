"""τ²'s gold agent's script: the turns an agent that knows a task's gold actions writes. ``synco eval --tau2``'s gold
agent plays it; training replays it as a verified card's gold episode (:meth:`Tau2Domain.gold_turns`, EvoSyn's SFT
on verified trajectories, ``rounds.target=reference``)."""

from __future__ import annotations

from typing import Any


def final_message(task: Any) -> str:
    """The gold agent's last message: every piece of the task's ``communicate_info``, then the stop token."""
    from synco.domains.tau2.env import AGENT_STOP

    info = (task.evaluation_criteria.communicate_info or []) if task.evaluation_criteria is not None else []
    return (f"To confirm: {'; '.join(info)}. " if info else "Your request is complete. ") + AGENT_STOP


def gold_turns(task: Any, solo: bool) -> list[str]:
    """The gold agent's turns: each gold action as a tool call (``format_call``, the text the parser reads), then the
    final message -- or, solo with nothing to state, the ``done`` call. In user mode the user's own actions are left
    out (the agent cannot make them)."""
    from synco.domains.tau2.calls import format_call
    from synco.domains.tau2.world import STOP_TOOL

    criteria = task.evaluation_criteria
    actions = (criteria.actions or []) if criteria is not None else []
    calls = [format_call(a.name, dict(a.arguments)) for a in actions if solo or a.requestor == "assistant"]
    info = (criteria.communicate_info or []) if criteria is not None else []
    last = format_call(STOP_TOOL, {}) if solo and not info else final_message(task)
    return [*calls, last]
