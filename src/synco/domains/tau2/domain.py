"""``Tau2Domain``: τ²-bench's domains as a synco domain, on τ²'s own environments, tools, policies and evaluator.

* **Card** (:mod:`~synco.domains.tau2.tasks`): ``problem`` the user side (the ticket in solo mode, the user
  scenario as JSON otherwise), ``solution`` the gold actions (JSON), ``final_answer`` what the agent must
  communicate (a JSON list). The Synthesizer is shown records of the database and an example task.
* **Oracle**: verification by replay in τ²'s environment (:func:`~synco.domains.tau2.verify.verify_card`);
  the reference is the communicate info. Held-out: τ²'s ``heldout_split`` (``test``); a card whose gold actions
  or user side are a held-out task's is rejected (``heldout_task``).
* **Episodes** (:class:`~synco.domains.tau2.env.Tau2Env`): the Reasoner is a chat agent whose system prompt is the
  domain's policy and whose tools are τ²'s (JSON schemas in the chat template's tool format); its calls run in a
  fresh τ² environment; the user side is the ticket (solo) or a frozen local model playing the user; the reward
  is τ²'s own evaluator's.
* **Solo or not** is decided per run, not per card (the system prompt is the run's): ``tau2.user: solo`` or
  ``auto`` on a domain with a solo mode (telecom, mock) -> solo, and cards need a ticket (``no_ticket``);
  otherwise the simulated user.
* **Factors** (:mod:`~synco.domains.tau2.factors`): from the gold trajectory, with τ²'s read/write tags.
"""

from __future__ import annotations

import json
import random
from collections import OrderedDict
from collections.abc import Callable, Sequence
from functools import cached_property
from typing import TYPE_CHECKING, Any

from synco.core.episodes import ToolCall
from synco.core.records import CARD_FIELDS, CardRejected, TaskCard
from synco.core.seeds import derive_seed
from synco.domains.base import DomainNeeds, HeldoutItem
from synco.domains.tau2.settings import Tau2Settings
from synco.evosyn.space import Cell, FactorDef, cell_key

if TYPE_CHECKING:
    from synco.domains.tau2.env import Tau2Env
    from synco.domains.tau2.verify import Tau2Verdict
    from synco.domains.tau2.world import World

_CACHE = 2048
MAX_SLICE_CHARS = 1500
"""Most characters of database records shown to the Synthesizer."""

SYNTH_SYSTEM = (
    "You write training tasks for a customer-service agent in the tau2-bench {domain} domain. A task is one JSON "
    "object with these string fields: teaching_intent, target_reasoning_style, expected_reasoner_weakness, "
    "difficulty_estimate, problem, solution, final_answer, verification_notes, novelty_notes. {problem_rule} "
    "`solution` is the gold action list as a JSON list of {{\"name\": <tool>, \"arguments\": {{...}}}} using only "
    "the domain's tools and ids that exist in the records shown; `final_answer` is a JSON list of the values the agent "
    "must tell the user ([] if none). Reply with the JSON object only.")
PROBLEM_RULE_SOLO = "`problem` is the ticket the agent works alone: what is wrong and what to do, with the ids it needs."
PROBLEM_RULE_USER = ("`problem` is the user's scenario as a JSON object with reason_for_call, known_info, "
                     "unknown_info and task_instructions.")


class UserAdapter:
    """τ²'s ``UserSim`` (``reply(task, transcript)``) on a local chat model (``synco.learn.user_sim.LocalUserSim``):
    τ²'s user-simulator guidelines and the task's scenario as its system prompt, the conversation's messages as its
    turns (tool calls and results are the agent's business and not shown). Replies are cached per conversation."""

    def __init__(self, sim: Any, guidelines: str) -> None:
        self.sim = sim
        self.guidelines = guidelines
        self._cache: OrderedDict[str, str] = OrderedDict()

    @property
    def model_name(self) -> str:
        return str(getattr(self.sim, "model_name", type(self.sim).__name__))

    def system_prompt(self, task: Any) -> str:
        return f"{self.guidelines}\n\n<scenario>\n{task.user_scenario}\n</scenario>"

    def reply(self, task: Any, transcript: Sequence[Any]) -> str:
        conversation: list[tuple[str, str]] = []
        for m in transcript:
            role, content = getattr(m, "role", None), getattr(m, "content", None)
            if content and role in ("assistant", "user") and not getattr(m, "tool_calls", None):
                conversation.append(("agent" if role == "assistant" else "user", str(content)))
        system = self.system_prompt(task)
        key = json.dumps([system, conversation])
        if key not in self._cache:
            self._cache[key] = self.sim.reply(system, conversation)
            while len(self._cache) > _CACHE:
                self._cache.popitem(last=False)
        self._cache.move_to_end(key)
        return self._cache[key]


class Tau2Domain:
    """A τ²-bench domain (``tau2.domain``) as a synco domain; see the module docstring."""

    name = "tau2"
    needs = DomainNeeds(chat_model=True)
    report_budget = 400

    def __init__(self, settings: Tau2Settings | None = None, user_factory: Callable[[], Any] | None = None) -> None:
        self.settings = settings or Tau2Settings()
        self._user_factory = user_factory
        self._user: UserAdapter | None = None
        self._verdicts: OrderedDict[tuple[str, str, str, str], Tau2Verdict | CardRejected] = OrderedDict()

    def __getstate__(self) -> dict[str, Any]:  # a Ray worker rebuilds the world, the user and the caches
        return {"settings": self.settings, "_user_factory": self._user_factory}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["settings"], state["_user_factory"])  # type: ignore[misc]

    # --- the τ² side, loaded on first use

    @cached_property
    def world(self) -> World:
        from synco.domains.tau2.world import load_world

        return load_world(self.settings.domain)

    @property
    def solo(self) -> bool:
        """Whether this run's episodes are solo (the ticket, no user): see the module docstring."""
        mode = self.settings.user
        if mode == "solo" and not self.world.supports_solo:
            raise ValueError(f"tau2.user=solo: tau2 domain {self.settings.domain!r} has no solo mode "
                             f"(telecom and mock do); use tau2.user=simulated or auto")
        return mode == "solo" or (mode == "auto" and self.world.supports_solo)

    def user(self) -> UserAdapter:
        """The simulated user (built on first need from the run's ``user_factory``)."""
        if self._user is None:
            if self._user_factory is None:
                raise ValueError("this tau2 run needs a simulated user (tau2.user=simulated, or a domain without solo "
                                 "mode) but none was configured (tau2.user_model)")
            self._user = UserAdapter(self._user_factory(), user_guidelines())
        return self._user

    @property
    def has_oracle(self) -> bool:
        return True

    # --- verification

    def verdict(self, card: TaskCard) -> Tau2Verdict:
        """The card's verdict (cached: K environments and the factors read it), or CardRejected with its code."""
        from synco.domains.tau2.verify import verify_card

        key = (card.problem, card.solution, card.final_answer, card.verification_notes)
        if key not in self._verdicts:
            try:
                self._verdicts[key] = verify_card(self.settings.domain, card)
            except CardRejected as err:
                self._verdicts[key] = err
            while len(self._verdicts) > _CACHE:
                self._verdicts.popitem(last=False)
        found = self._verdicts[key]
        if isinstance(found, CardRejected):
            raise CardRejected(found.code, found.detail)
        return found

    def oracle(self, card: TaskCard) -> str:
        """The communicate info (a canonical JSON list) of a card whose gold actions replay; CardRejected if not.
        In a solo run the card must carry a ticket (``no_ticket``)."""
        verdict = self.verdict(card)
        if self.solo and not verdict.card.ticket:
            raise CardRejected("no_ticket", "this run is solo (the agent gets the ticket): the card's problem has none")
        if len(verdict.card.actions) > self.settings.max_actions:
            raise CardRejected("too_many_actions", f"{len(verdict.card.actions)} gold actions, at most "
                                                   f"{self.settings.max_actions} (tau2.max_actions)")
        return json.dumps(list(verdict.reference), separators=(",", ":"), ensure_ascii=False)

    @cached_property
    def _heldout_keys(self) -> frozenset[str]:
        from synco.domains.tau2.tasks import card_of_task

        keys: set[str] = set()
        for task in self.world.tasks(self.settings.heldout_split):
            card = card_of_task(task, solo=self.solo and self.world.solo_ok(task))
            keys |= {"p:" + card.problem, "a:" + _actions_key(card.solution)}
        return frozenset(keys)

    def reject_reason(self, card: TaskCard) -> str | None:
        """``heldout_task`` when the card's user side or gold actions are a held-out task's, else None."""
        if "p:" + card.problem in self._heldout_keys or "a:" + _actions_key(card.solution) in self._heldout_keys:
            return "heldout_task"
        return None

    # --- episodes

    def environment(self, card: TaskCard, reference: str) -> Tau2Env:
        """A fresh τ² environment for one episode on a verified card (the verdict's τ² task)."""
        from synco.domains.tau2.env import Tau2Env

        task = self.verdict(card).task
        if self.solo:
            return Tau2Env(self.world, task, user=None, solo=True)
        return Tau2Env(self.world, task, user=self.user(), solo=False)

    def tool_schemas(self) -> list[dict[str, Any]]:
        """τ²'s tools of this domain (solo: the user's tools too and the ``done`` stop tool)."""
        return [dict(s) for s in (self.world.solo_tool_schemas if self.solo else self.world.tool_schemas)]

    @property
    def tool_kinds(self) -> dict[str, str]:
        """τ²'s tag of every tool: read, write, think or generic."""
        return dict(self.world.tool_kinds)

    def gold_actions(self, card: TaskCard) -> list[ToolCall]:
        from synco.domains.tau2.tasks import parse_actions

        return [ToolCall(name=a.name, arguments=dict(a.arguments)) for a in parse_actions(card.solution)]

    def export_fields(self, card: TaskCard) -> dict[str, Any]:
        """``valid_tasks.jsonl``'s ``tau2_task``: the card as a τ² task JSON object (what τ²'s loaders read)."""
        from synco.domains.tau2.tasks import task_json

        task_id = f"synco_{derive_seed(card.problem, card.solution) % 10**10:010d}"
        try:
            return {"tau2_task": task_json(card, task_id, self.settings.domain)}
        except CardRejected:
            return {"tau2_task": None}

    # --- prompts

    def reasoner_system_prompt(self) -> str:
        """The domain's policy (its solo variant in a solo run), as τ²'s agent gets it."""
        return str(self.world.solo_policy if self.solo else self.world.policy)

    def reasoner_prompt(self, problem: str) -> str:
        """The agent's first user message: the ticket (solo), or the simulated user's opening line for the scenario."""
        from synco.domains.tau2.tasks import parse_scenario

        from synco.domains.tau2.env import GREETING
        from synco.domains.tau2.tasks import task_json
        from synco.domains.tau2.world import _import

        scenario, ticket = parse_scenario(problem)
        if self.solo:
            return str(ticket or problem)
        card = TaskCard(**{**{k: "" for k in CARD_FIELDS}, "problem": problem, "solution": "[]", "final_answer": "[]"})
        task = _import("tau2.data_model.tasks").Task.model_validate(task_json(card, "opening", self.settings.domain))
        greeting = _import("tau2.data_model.message").AssistantMessage(role="assistant", content=GREETING)
        return self.user().reply(task, [greeting])  # what Tau2Env's opening asks: the same reply

    def synthesizer_system_prompt(self) -> str:
        rule = PROBLEM_RULE_SOLO if self.solo else PROBLEM_RULE_USER
        return SYNTH_SYSTEM.format(domain=self.settings.domain, problem_rule=rule)

    def synthesizer_prompt(self, report: object, target: Cell | None = None) -> str:
        """The report, the Designer's target, the tools, records of the database and one example task (chosen by a
        stable hash of the report and target among the training tasks in the target cell when there are some)."""
        render = getattr(report, "render_compact", None)
        text = render(self.report_budget) if callable(render) else str(report or "")
        example = self._example(text, target)
        tools = ", ".join(f"{s['function']['name']} ({self.world.tool_kinds.get(s['function']['name'], '?')})"
                          for s in self.tool_schemas())
        parts = [f"Capability report: {' '.join(text.split())[:self.report_budget]}"]
        if target:
            parts.append(f"Write a task in this cell: {cell_key(target)}")
        parts += [f"Tools: {tools}", f"Records: {self._records(example)}",
                  f"Example task: {json.dumps(example.model_dump(), separators=(',', ':'), ensure_ascii=False)}",
                  "Write a new task about these records."]
        return "\n".join(parts)

    # --- the training split: examples, the static corpus, the factor space's generator

    @cached_property
    def _train_cards(self) -> list[TaskCard]:
        from synco.domains.tau2.tasks import card_of_task

        out = []
        for task in self.world.tasks(self.settings.train_split):
            if self.solo and not self.world.solo_ok(task):
                continue
            card = card_of_task(task, solo=self.solo)
            if self.reject_reason(card) is None:
                out.append(card)
        if not out:
            raise ValueError(f"tau2 domain {self.settings.domain!r}: no task of split {self.settings.train_split!r} "
                             f"fits this run ({'solo: none has a ticket' if self.solo else 'none left'})")
        return out

    def _example(self, report_text: str, target: Cell | None) -> TaskCard:
        cards = self._train_cards
        if target:
            want = dict(target)
            inside = [c for c in cards if all(self.card_factors(c).get(k) == v for k, v in want.items())]
            cards = inside or cards
        return cards[derive_seed(report_text, cell_key(target) if target else "") % len(cards)]

    def _records(self, card: TaskCard) -> str:
        """The database records the card's actions name (by id), compact JSON, at most :data:`MAX_SLICE_CHARS`."""
        ids = {str(v) for a in self.gold_actions(card) for v in a.arguments.values() if isinstance(v, (str, int))}
        return records_for(self.world.fresh_env().tools.db, ids, MAX_SLICE_CHARS)

    def static_cards(self, rng: random.Random, n: int) -> list[str]:
        """``n`` cards of the training split's tasks (drawn with replacement): the ``static`` baseline's corpus."""
        return [json.dumps(rng.choice(self._train_cards).model_dump(), ensure_ascii=False) for _ in range(n)]

    def heldout(self, n_per_group: int, seed: int) -> list[HeldoutItem]:
        """Up to ``n_per_group`` tasks of τ²'s held-out split per writes group (``w0``, ``w1``, ``w2+``),
        drawn with ``seed``; ``problem`` the task's user side, ``answer`` its communicate info."""
        from synco.domains.tau2.tasks import card_of_task

        groups: dict[str, list[HeldoutItem]] = {}
        for task in self.world.tasks(self.settings.heldout_split):
            if self.solo and not self.world.solo_ok(task):
                continue
            card = card_of_task(task, solo=self.solo)
            self._heldout_tasks[card.problem] = task
            writes = sum(self.world.tool_kinds.get(a.name) == "write" for a in self.gold_actions(card))
            group = f"w{writes}" if writes < 2 else "w2+"
            groups.setdefault(group, []).append(HeldoutItem(problem=card.problem, answer=card.final_answer, group=group))
        rng = random.Random(seed)
        out: list[HeldoutItem] = []
        for group in sorted(groups):
            items = groups[group]
            out += rng.sample(items, min(n_per_group, len(items)))
        return out

    @cached_property
    def _heldout_tasks(self) -> dict[str, Any]:
        return {}

    def heldout_card(self, item: HeldoutItem) -> TaskCard:
        """The card of a held-out item (its τ² task, initial state dropped as on every card)."""
        from synco.domains.tau2.tasks import card_of_task

        if item.problem not in self._heldout_tasks:
            self.heldout(10**6, 0)
        task = self._heldout_tasks.get(item.problem)
        if task is None:
            raise ValueError(f"held-out problem {item.problem[:80]!r} is not a task of split {self.settings.heldout_split!r}")
        return card_of_task(task, solo=self.solo)

    # --- factors

    builtin_factors: tuple[str, ...] = ("pattern",)

    def factor_defs(self) -> list[FactorDef]:
        from synco.domains.tau2.factors import tau2_factor_defs

        return tau2_factor_defs(self.world.tool_kinds)

    def factor_subject(self, card: TaskCard) -> str:
        """What the factors read: the gold actions (``solution``)."""
        return card.solution

    def card_factors(self, card: TaskCard) -> dict[str, str]:
        subject = self.factor_subject(card)
        return {d.name: v for d in self.factor_defs() if (v := d.value(subject)) is not None}

    def sample_any(self, rng: random.Random) -> str:
        return self.factor_subject(rng.choice(self._train_cards))


def records_for(db: Any, ids: set[str], limit: int) -> str:
    """``{table: {id: record}}`` of the records of ``db`` (a τ² database: tables are ``{id: record}`` fields) whose id
    is in ``ids``, as compact JSON cut to ``limit`` characters."""
    found: dict[str, dict[str, Any]] = {}
    for name, table in vars(db).items():
        if isinstance(table, dict):
            for key in sorted(ids & {str(k) for k in table}):
                record = table[key]
                found.setdefault(name, {})[key] = record.model_dump(mode="json") if hasattr(record, "model_dump") else record
    return json.dumps(found, separators=(",", ":"), ensure_ascii=False, default=str)[:limit]


def user_guidelines() -> str:
    """τ²'s own guidelines for its simulated user (its packaged ``simulation_guidelines.md``)."""
    from pathlib import Path

    from synco.domains.tau2.world import require_tau2

    root = Path(str(require_tau2().__file__)).parent
    return (root / "data" / "tau2" / "user_simulator" / "simulation_guidelines.md").read_text(encoding="utf-8")


def _actions_key(solution: str) -> str:
    """The gold actions of a card as canonical JSON (order kept, keys sorted), or the raw text if they do not parse."""
    try:
        return json.dumps(json.loads(solution), sort_keys=True, separators=(",", ":"))
    except ValueError:
        return solution
