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
from synco.core.records import CardRejected, TaskCard, Verdict
from synco.core.seeds import derive_seed
from synco.domains.base import DomainNeeds, HeldoutItem, NativeTask
from synco.domains.card_template import CardSlot, CardTemplate
from synco.domains.spec import DomainContext, DomainError
from synco.domains.tau2.payload import Tau2Payload, tau2_card
from synco.domains.tau2.settings import Tau2Settings
from synco.evosyn.space import Cell, FactorDef, cell_key, factor_subject, factor_values

if TYPE_CHECKING:
    from synco.domains.tau2.env import Tau2Env
    from synco.domains.tau2.verify import Tau2Verdict
    from synco.domains.tau2.world import World

WRITE_ORDER: tuple[str, ...] = ("problem", "solution", "final_answer", "difficulty_estimate", "teaching_intent",
                                 "target_reasoning_style", "expected_reasoner_weakness", "verification_notes",
                                 "novelty_notes")
"""The order a Synthesizer writes a card's fields in: the task first, the notes after."""

CARD_SLOT_TOKENS: dict[str, int] = {"problem": 80, "solution": 96, "final_answer": 24, "difficulty_estimate": 4,
                                    "teaching_intent": 10, "target_reasoning_style": 6, "expected_reasoner_weakness": 8,
                                    "verification_notes": 8, "novelty_notes": 8}
"""Token budget of each slot under ``synth_decoding: card``."""

EXAMPLE_NOTES: dict[str, str] = {"teaching_intent": "practice the tools", "target_reasoning_style": "act",
                                 "expected_reasoner_weakness": "looks up ids", "verification_notes": "replayed",
                                 "novelty_notes": "new values"}
"""Short note fields of the example card (a small model's imitation stays short)."""

_CACHE = 2048
HASH_HELDOUT_SHARE = 0.3
"""Share of a domain's tasks held out when it has no ``heldout_split`` of its own (by a stable hash of the id)."""
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
        return str(self.sim.model_name)

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
    payload_type = Tau2Payload
    needs = DomainNeeds(chat_model=True)
    report_budget = 400

    def __init__(self, settings: Tau2Settings | None = None, user_factory: Callable[[], Any] | None = None) -> None:
        self.settings = settings or Tau2Settings()
        self._user_factory = user_factory
        self._user: UserAdapter | None = None
        self._verdicts: OrderedDict[tuple[str, str, str, str], Tau2Verdict | CardRejected] = OrderedDict()
        self._own: dict[tuple[str, str], Any] = {}  # (problem, solution) of a card of one of τ²'s tasks -> the task
        self._heldout_tasks: dict[str, Any] = {}  # a held-out item's problem -> its τ² task

    def __getstate__(self) -> dict[str, Any]:
        """What a Ray worker gets: the settings, the user factory and which cards are τ²'s own tasks (so their
        episodes start from the task's initial state there too); it rebuilds the world, the user and the caches."""
        return {"settings": self.settings, "_user_factory": self._user_factory, "_own": dict(self._own)}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["settings"], state["_user_factory"])  # type: ignore[misc]
        self._own.update(state["_own"])

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
        """The simulated user (built on first need by ``user_factory``, see :func:`make_domain`)."""
        if self._user is None:
            if self._user_factory is None:
                raise ValueError("this tau2 run needs a simulated user (tau2.user=simulated, or a domain without solo "
                                 "mode) but none was configured (tau2.user_model)")
            self._user = UserAdapter(self._user_factory(), user_guidelines())
        return self._user

    @property
    def has_oracle(self) -> bool:
        return True

    @property
    def reasoner_response_prefix(self) -> str:
        """``tau2.tool_choice: required``: the opening of a tool call, prefilled at every agent turn (the runner's
        ``turn_prefix``); "" otherwise."""
        if self.settings.tool_choice != "required":
            return ""
        if not self.solo:
            raise ValueError("tau2.tool_choice=required needs a solo run (tau2.user=solo or auto on telecom/mock): "
                             "with a user the agent must be able to send messages")
        from synco.domains.tau2.calls import CALL_PREFIX

        return CALL_PREFIX

    # --- verification

    def verdict(self, card: TaskCard) -> Tau2Verdict:
        """The card's verdict (cached: K environments and the factors read it), or CardRejected with its code.

        A card of one of τ²'s own tasks (the static corpus, the held-out set) is verified as that task, with its
        initial state (a card carries none), so its episodes start where τ²'s do."""
        payload = Tau2Payload.of(card)
        from synco.domains.tau2.verify import verify_card, verify_task

        key = (payload.scenario, payload.actions, payload.outputs, payload.criteria)
        if key not in self._verdicts:
            own = self._own.get((payload.scenario, payload.actions))
            try:
                self._verdicts[key] = (verify_card(self.settings.domain, card) if own is None
                                       else verify_task(self.settings.domain, own))
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
        if self.solo and verdict.card.communicate_info and "COMMUNICATE" in verdict.card.reward_basis:
            raise CardRejected("solo_communicate", "a solo agent sends no message, so information it must communicate "
                                                   "can never be checked as told")
        if len(verdict.card.actions) > self.settings.max_actions:
            raise CardRejected("too_many_actions", f"{len(verdict.card.actions)} gold actions, at most "
                                                   f"{self.settings.max_actions} (tau2.max_actions)")
        return json.dumps(list(verdict.reference), separators=(",", ":"), ensure_ascii=False)

    def canonical_answer(self, text: str) -> str | None:
        """The information to communicate as the oracle writes it (a canonical JSON list): ``[]`` for every way of
        saying there is none (``none``, ``None``, an empty text, ``[]``), so such a claim is never a correction;
        None for a text that does not read as information (:class:`~synco.domains.base.HasAnswerForm`)."""
        from synco.domains.tau2.tasks import parse_outputs

        try:
            return json.dumps(list(parse_outputs(text)), separators=(",", ":"), ensure_ascii=False)
        except CardRejected:
            return None

    @cached_property
    def _heldout_keys(self) -> frozenset[str]:
        from synco.domains.tau2.tasks import card_of_task

        keys: set[str] = set()
        for task in self._split(heldout=True):
            card = self._card_of(task) if not self.solo or self.world.solo_ok(task) else card_of_task(task)
            payload = Tau2Payload.of(card)
            keys |= {"p:" + payload.scenario, "a:" + _actions_key(payload.actions)}
        return frozenset(keys)

    def reject_reason(self, card: TaskCard) -> str | None:
        """``heldout_task`` when the card's user side or gold actions are a held-out task's, else None."""
        payload = Tau2Payload.of(card)
        if "p:" + payload.scenario in self._heldout_keys or "a:" + _actions_key(payload.actions) in self._heldout_keys:
            return "heldout_task"
        return None

    def native_task(self, text: str) -> NativeTask | None:
        """``synco verify`` on a line holding one of τ²'s task JSON objects (``id`` plus ``user_scenario`` or
        ``evaluation_criteria``, what τ²'s ``tasks.json`` holds): the task replayed on this run's τ² domain with its
        own initial state (:func:`~synco.domains.tau2.verify.verify_task`). The verdict's reasons are the replay's
        reason codes, its reference the information the agent must communicate (a JSON list); the factors are the τ²
        ones of the task's gold trajectory; the card is the task's (its scenario, gold actions, information), which
        ``synco verify`` compares with the file's other lines. None for any other line (it is verified as a card)."""
        from synco.domains.tau2.factors import tau2_factor_defs
        from synco.domains.tau2.tasks import card_fields, task_object
        from synco.domains.tau2.verify import tool_kinds, verify_task

        obj = task_object(text)
        if obj is None:
            return None
        try:
            verdict = verify_task(self.settings.domain, obj)
        except CardRejected as err:
            return NativeTask(Verdict(valid=False, reasons=[str(err)]), {})
        defs = tau2_factor_defs(tool_kinds(self.settings.domain), self.settings.domain)
        card = card_fields(verdict.card)
        factors = factor_values(factor_subject(card, Tau2Payload), defs)
        return NativeTask(Verdict(valid=True, quality=1.0, reference=json.dumps(list(verdict.reference))), factors, card)

    # --- episodes

    def environment(self, card: TaskCard, reference: str, attempt: int = 0) -> Tau2Env:
        """A fresh τ² environment for one episode on a verified card (the verdict's τ² task); every attempt gets the
        same one (``attempt`` is not used: τ²'s database is the domain's)."""
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

    def gold_turns(self, card: TaskCard, reference: str, attempt: int = 0) -> list[str]:
        """The gold agent's turns on the card's τ² task (``synco.domains.tau2.gold``): each gold action as the call
        text the parser reads (the user's own actions left out in user mode), then the final message stating the
        task's ``communicate_info``, or, solo with nothing to state, the ``done`` call."""
        from synco.domains.tau2.gold import gold_turns

        return gold_turns(self.verdict(card).task, self.solo)

    def gold_actions(self, card: TaskCard) -> list[ToolCall]:
        payload = Tau2Payload.of(card)
        from synco.domains.tau2.tasks import parse_actions

        return [ToolCall(name=a.name, arguments=dict(a.arguments)) for a in parse_actions(payload.actions)]

    def export_fields(self, card: TaskCard) -> dict[str, Any]:
        """``valid_tasks.jsonl``'s ``tau2_task``: the card as a τ² task JSON object (what τ²'s loaders read); None
        when the card does not convert."""
        payload = Tau2Payload.of(card)
        from synco.domains.tau2.tasks import task_json

        task_id = f"synco_{derive_seed(payload.scenario, payload.actions) % 10**10:010d}"
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
        card = tau2_card(Tau2Payload(scenario=problem, actions="[]", outputs="[]"))
        task = _import("tau2.data_model.tasks").Task.model_validate(task_json(card, "opening", self.settings.domain))
        greeting = _import("tau2.data_model.message").AssistantMessage(role="assistant", content=GREETING)
        return self.user().reply(task, [greeting])  # what Tau2Env's opening asks: the same reply

    def card_template(self) -> CardTemplate:
        """The τ² card for ``synth_decoding: card``: the fields in :data:`WRITE_ORDER`, the actions in the compact
        ``name(key=value, ...); ...`` syntax and the communicate info as ``none`` or ``a; b`` (no quotes in a slot)."""
        return CardTemplate(tuple(CardSlot(name, tokens) for name, tokens in CARD_SLOT_TOKENS.items()))

    def example_card(self, card: TaskCard) -> str:
        """A training card as the Synthesizer's example, in the template's layout (one field per line, the fields in
        :data:`WRITE_ORDER`), actions and information in the compact form when they fit it, short notes."""
        payload = Tau2Payload.of(card)
        from synco.domains.tau2.tasks import format_compact_actions, parse_actions, parse_outputs

        compact = format_compact_actions(parse_actions(payload.actions))
        info = parse_outputs(payload.outputs)
        values = {**card.wire(), **EXAMPLE_NOTES,
                  "solution": compact if compact is not None else payload.actions,
                  "final_answer": "; ".join(info) if compact is not None and info and not any(";" in v for v in info)
                  else ("none" if compact is not None and not info else payload.outputs)}
        return "{" + ",\n".join(f"{json.dumps(k)}: {json.dumps(values[k], ensure_ascii=False)}" for k in WRITE_ORDER) + "}"

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
        parts += [f"Tools: {tools}", f"Records: {self._records(example)}"]
        if self.settings.payload_schema:
            parts.append(f"Card fields:\n{Tau2Payload.schema_text()}")
        parts += [f"Example task:\n{self.example_card(example)}", "Write a new task about these records."]
        return "\n".join(parts)

    # --- the training split: examples, the static corpus, the factor space's generator

    def _card_of(self, task: Any) -> TaskCard:
        """The card of one of τ²'s tasks (its ticket alone in a solo run), remembered as that task's."""
        from synco.domains.tau2.tasks import card_of_task

        card = card_of_task(task, solo=self.solo)
        payload = Tau2Payload.of(card)
        self._own[(payload.scenario, payload.actions)] = task
        return card

    def _split(self, heldout: bool) -> list[Any]:
        """τ²'s tasks of ``tau2.heldout_split`` / ``tau2.train_split``. A domain without those splits (mock has only
        ``base``) is split by a stable hash of the task id: :data:`HASH_HELDOUT_SHARE` of it held out."""
        wanted = self.settings.heldout_split if heldout else self.settings.train_split
        if wanted in self.world.splits():
            return self.world.tasks(wanted)
        base = self.world.tasks("base")
        return [t for t in base if (derive_seed("tau2-heldout", t.id) % 100 < HASH_HELDOUT_SHARE * 100) == heldout]

    @cached_property
    def _train_cards(self) -> list[TaskCard]:
        out = []
        for task in self._split(heldout=False):
            if self.solo and not self.world.solo_ok(task):
                continue
            card = self._card_of(task)
            if self.reject_reason(card) is not None:
                continue
            try:
                self.oracle(card)
            except CardRejected:  # e.g. a solo task with information to tell: no episode could pass it
                continue
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
        return [json.dumps(rng.choice(self._train_cards).flat(), ensure_ascii=False) for _ in range(n)]

    def heldout(self, n_per_group: int, seed: int) -> list[HeldoutItem]:
        """Up to ``n_per_group`` tasks of τ²'s held-out split per writes group (``w0``, ``w1``, ``w2+``),
        drawn with ``seed``; ``problem`` the task's user side, ``answer`` its communicate info. Tasks this run's oracle
        refuses (e.g. in a solo run, ones with information to tell) are left out: no episode could pass them."""
        groups: dict[str, list[HeldoutItem]] = {}
        for task in self._split(heldout=True):
            if self.solo and not self.world.solo_ok(task):
                continue
            card = self._card_of(task)
            try:
                self.oracle(card)
            except CardRejected:  # a task no episode of this run can pass (e.g. solo with information to tell)
                continue
            self._heldout_tasks[Tau2Payload.of(card).scenario] = task
            writes = sum(self.world.tool_kinds.get(a.name) == "write" for a in self.gold_actions(card))
            group = f"w{writes}" if writes < 2 else "w2+"
            groups.setdefault(group, []).append(HeldoutItem(problem=Tau2Payload.of(card).scenario, answer=Tau2Payload.of(card).outputs, group=group))
        rng = random.Random(seed)
        out: list[HeldoutItem] = []
        for group in sorted(groups):
            items = groups[group]
            out += rng.sample(items, min(n_per_group, len(items)))
        return out

    def heldout_card(self, item: HeldoutItem) -> TaskCard:
        """The card of a held-out item; its episodes run on its τ² task (initial state included, see :meth:`verdict`)."""
        if item.problem not in self._heldout_tasks:
            self.heldout(10**6, 0)
        task = self._heldout_tasks.get(item.problem)
        if task is None:
            raise ValueError(f"held-out problem {item.problem[:80]!r} is not a task of split {self.settings.heldout_split!r}")
        return self._card_of(task)

    # --- factors

    builtin_factors: tuple[str, ...] = ("pattern",)

    @cached_property
    def _factor_defs(self) -> list[FactorDef]:
        from synco.domains.tau2.factors import tau2_factor_defs

        return tau2_factor_defs(self.world.tool_kinds, self.settings.domain, observe=self._observations)

    def factor_defs(self) -> list[FactorDef]:
        """``pattern`` (built in), ``num_write``, ``num_read``, ``family``, ``computation``, ``distinct_tools``."""
        return list(self._factor_defs)

    def _observations(self, subject: str) -> tuple[str, ...] | None:
        """The gold observations of a subject (its replay's, from the verdict cache), for ``computation``."""
        data = json.loads(subject)
        card = tau2_card(Tau2Payload(scenario=data["scenario"], actions=data["actions"], outputs="[]"))
        try:
            return tuple(self.verdict(card).observations)
        except CardRejected:
            return None

    def card_factors(self, card: TaskCard) -> dict[str, str]:
        """The factors of the card's user side and gold actions (``Tau2Payload.factor_subject``)."""
        return factor_values(factor_subject(card, Tau2Payload), self.factor_defs())

    def sample_any(self, rng: random.Random) -> str:
        return factor_subject(rng.choice(self._train_cards), Tau2Payload)


def make_domain(context: DomainContext) -> Tau2Domain:
    """The registry's factory (``domain: tau2``): the domain of the run's ``tau2:`` section, its simulated user played
    by the model ``tau2.user_model`` names through the run's ``context.simulated_user`` (loaded on first need, by
    the process that runs the episode), or by the endpoint of ``tau2.served``. DomainError when τ²-bench is not installed."""
    from functools import partial

    from synco.domains.tau2.world import Tau2Missing, require_tau2

    try:
        require_tau2()
    except Tau2Missing as err:
        raise DomainError(str(err)) from None
    settings = context.settings if isinstance(context.settings, Tau2Settings) else Tau2Settings()
    if settings.served is not None:  # the user on a served chat endpoint (τ²'s published setting)
        from synco.domains.tau2.served_user import served_user

        user = partial(served_user, settings.served, max_new_tokens=settings.user_max_new_tokens,
                       temperature=settings.user_temperature)
    else:
        user = None if context.simulated_user is None else partial(
            context.simulated_user, settings.user_model, max_new_tokens=settings.user_max_new_tokens,
            temperature=settings.user_temperature)
    return Tau2Domain(settings, user_factory=user)


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
    """The gold actions of a card as canonical JSON (order kept, keys sorted), whichever syntax they are written in
    (so a compact rewrite of a held-out task's actions is still that task's), or the raw text if they do not parse."""
    from synco.domains.tau2.tasks import parse_actions

    try:
        actions = parse_actions(solution)
    except CardRejected:
        return solution
    return json.dumps([[a.name, a.arguments, a.requestor] for a in actions], sort_keys=True, separators=(",", ":"))
