"""``ToolsDomain``: the embedded tool-use world as a synco domain (tiny character models, exact oracle).

* Card: the nine fields as compact JSON (:meth:`ToolsDomain.format_card`): ``problem`` the instruction,
  ``solution`` the gold action list (``find_user(bob);list_orders(u2);cancel_order(o58)``),
  ``final_answer`` the outputs (``12`` or ``none``), ``difficulty_estimate`` the family.
* Oracle: verification by execution (``synco.domains.tools.verify``); it returns the canonical outputs
  (what the verifier's answer check compares ``final_answer`` with), or raises ``CardRejected``.
* Environment: :class:`~synco.domains.tools.env.ToolsEnv` per episode, the gold hash from the card's
  actions replayed (cached per action list). With ``tools.db_variants`` N > 0 (:class:`ToolsSettings`), an episode
  whose instruction is one of the world's templates runs on database variant
  :func:`~synco.domains.tools.db.episode_variant` (instruction, attempt, N) and is graded against that task solved
  on the variant (:meth:`ToolsDomain.environment`); verification, held-out membership and factors stay on the
  fixed database (variant 0).
* Held-out: the tasks in a stable 10 % hash bucket of their canonical trajectory
  (:func:`~synco.domains.tools.tasks.task_key`), grouped by the number of writes (``w0``, ``w1``, ``w2``,
  ``w3+``); a :class:`~synco.domains.base.HeldoutItem` carries the instruction (``problem``) and the
  outputs (``answer``), and :meth:`ToolsDomain.heldout_card` rebuilds its card from the instruction.
* Factors: computed from the *subject* ``instruction + "\\n" + actions`` (``ToolsPayload.factor_subject``),
  i.e. from the gold trajectory, never from the card's claims. Built in: ``pattern``; candidates:
  ``num_write``, ``num_read``, ``computation``, ``distinct_tools``, ``family``. ``pattern``, ``num_*`` and
  ``distinct_tools`` are ``synco.evosyn.trajectory``'s definitions (one definition for every tool world).
"""

from __future__ import annotations

import json
import random
from collections import OrderedDict
from collections.abc import Callable

from synco.core.episodes import ToolCall
from synco.core.records import CARD_FIELDS, CardRejected, TaskCard
from synco.domains.base import DomainNeeds, HeldoutItem, compact_synthesizer_prompt
from synco.domains.tools.db import DB, build_db, episode_variant
from synco.domains.tools.payload import ToolsPayload
from synco.domains.tools.env import ToolsEnv
from synco.domains.tools.settings import ToolsSettings
from synco.domains.tools.syntax import (DONE, ActionError, format_actions, format_call, format_outputs, parse_actions,
                                        parse_outputs)
from synco.domains.tools.tasks import (
    FAMILY_NAMES,
    HELDOUT_GROUPS,
    MAX_INSTRUCTION_CHARS,
    Task,
    family_of_instruction,
    is_heldout_task,
    raw_task,
    sample_task,
    task_of_instruction,
    task_on_variant,
    writes_group,
)
from synco.domains.tools.tools import TOOL_KINDS
from synco.domains.tools.verify import instruction_words, replay, verify_task
from synco.evosyn.space import Cell, FactorDef, factor_subject, factor_values
from synco.evosyn.trajectory import DISTINCT_BUCKETS, distinct_tools, read_write_factor_defs

_GOLD_CACHE_SIZE = 4096


def split_subject(subject: str) -> tuple[str, str]:
    """``(instruction, solution)`` of a factor subject ``instruction + "\\n" + solution``."""
    instruction, _, solution = subject.partition("\n")
    return instruction, solution


OTHER_GROUP = "other"
"""The held-out group pooling the families whose bucket holds fewer than ``heldout_per_group`` tasks."""


def _heldout_item(task: Task, group: str) -> HeldoutItem:
    """A held-out task as the run scores it: its instruction, its canonical outputs, its group."""
    return HeldoutItem(problem=task.instruction, answer=format_outputs(task.outputs), group=group)


class ToolsDomain:
    """The tools world (see the module docstring and ``synco.domains.tools``)."""

    name = "tools"
    payload_type = ToolsPayload
    needs = DomainNeeds(chat_model=False)
    """Tiny character models: no chat template (chat models may still call tools in JSON)."""
    min_problem_chars = 8
    max_problem_chars = MAX_INSTRUCTION_CHARS
    report_budget = 64
    """Characters of the compact capability report put in the Synthesizer prompt."""

    def __init__(self, settings: ToolsSettings | None = None) -> None:
        self.settings = settings or ToolsSettings()
        self.db: DB = build_db()
        self.families: list[str] = list(FAMILY_NAMES)
        self._gold: OrderedDict[tuple[int, str], str] = OrderedDict()  # (variant, action list) -> gold final-state hash
        self._producers: dict[str, list[str]] | None = None  # writes group -> families (see _group_families)

    @property
    def has_oracle(self) -> bool:
        return True

    # --- verification and environments

    def oracle(self, card: TaskCard) -> str:
        """The canonical outputs (``12``, ``none``) of a card whose task verifies; CardRejected (with a code) if not.

        An instruction in one of the world's own templates is solved on the database (the exact oracle, as
        arith's evaluator is): the card's actions must replay, grounded, to the *same end state* as the solved
        task (else ``wrong_end_state``), and the reference is the solved task's outputs, whatever outputs the
        card claims (a wrong claim is corrected, as the verifier records with ``reference_corrected``). Any
        other instruction is checked by execution and grounding alone, its outputs as claimed.
        """
        payload = ToolsPayload.of(card)
        solved = task_of_instruction(self.db, payload.instruction)
        if solved is None:
            rep = verify_task(self.db, payload.instruction, payload.actions, payload.outputs)
            self._remember((0, format_actions(rep.actions)), rep.final_hash)
            return format_outputs(rep.outputs)
        _, task = solved
        truth = format_outputs(task.outputs)
        rep = verify_task(self.db, payload.instruction, payload.actions, truth)
        self._remember((0, format_actions(rep.actions)), rep.final_hash)
        if rep.final_hash != self.gold_hash(format_actions(task.actions)):
            raise CardRejected("wrong_end_state", "the actions do not do what the instruction asks "
                                                  "(another end state than the instruction's own solution)")
        return truth

    def canonical_answer(self, text: str) -> str | None:
        """Outputs as the oracle writes them (``12,lamp``; ``none`` for ``None``, ``NONE`` or an empty text), None
        for a text that is no outputs (:class:`~synco.domains.base.HasAnswerForm`)."""
        try:
            return format_outputs(parse_outputs(text))
        except ActionError:
            return None

    def _remember(self, key: tuple[int, str], gold: str) -> None:
        self._gold[key] = gold
        self._gold.move_to_end(key)
        while len(self._gold) > _GOLD_CACHE_SIZE:
            self._gold.popitem(last=False)

    def gold_hash(self, solution: str) -> str:
        """The final-state hash after the action list ``solution`` (cached); CardRejected if it does not run."""
        try:
            actions = parse_actions(solution)
        except ActionError as err:
            raise CardRejected(err.code, err.detail) from None
        return self._variant_gold(0, self.db, actions)

    def _variant_gold(self, variant: int, db: DB, actions: list[ToolCall]) -> str:
        """The final-state hash after ``actions`` on ``db`` (the database of ``variant``), cached per variant."""
        key = (variant, format_actions(actions))
        if key not in self._gold:
            state, _ = replay(db, actions)
            self._remember(key, state.state_hash())
        return self._gold[key]

    def environment(self, card: TaskCard, reference: str, attempt: int = 0) -> ToolsEnv:
        """A fresh environment for one episode: its own database copy, the gold hash of the card's actions,
        the outputs of ``reference`` (the verdict's canonical outputs).

        With ``tools.db_variants`` N > 0: the episode's database is variant ``episode_variant(instruction, attempt,
        N)`` and its gold is the card's instruction solved there (``task_of_instruction`` on the variant: the end
        state of its actions, its outputs; a conditional task may take another branch). An instruction outside
        the world's templates, or one the variant cannot solve, runs on the fixed database (variant 0) with the
        gold above. The grade records the variant either way.
        """
        payload = ToolsPayload.of(card)
        try:
            outputs = parse_outputs(reference)
        except ActionError as err:
            raise CardRejected(err.code, err.detail) from None
        n = self.settings.db_variants
        if n:
            variant = episode_variant(payload.instruction.strip().lower(), attempt, n)
            on_variant = task_on_variant(payload.instruction, variant)
            if on_variant is not None:
                db, task = on_variant
                return ToolsEnv(db, self._variant_gold(variant, db, list(task.actions)), task.outputs,
                                variant=variant, gold_actions=task.actions)
        return ToolsEnv(self.db, self.gold_hash(payload.actions), outputs, variant=0 if n else None)

    tool_kinds = TOOL_KINDS
    """Each tool's tag, ``read`` or ``write`` (for ``synco.evosyn.trajectory``)."""

    def gold_actions(self, card: TaskCard) -> list[ToolCall]:
        """The card's gold trajectory: its parsed action list (CardRejected with a code if it does not parse)."""
        payload = ToolsPayload.of(card)
        try:
            return parse_actions(payload.actions)
        except ActionError as err:
            raise CardRejected(err.code, err.detail) from None

    def gold_turns(self, card: TaskCard, reference: str, attempt: int = 0) -> list[str]:
        """The agent turns of the card's gold episode on the environment ``environment(card, reference, attempt)``
        builds: each gold call in the call syntax, then ``done(outputs)`` with the reference's outputs. On a
        database variant that re-solves the instruction, that task's calls and outputs (a conditional task may take
        another branch there). CardRejected with a code when the actions or outputs do not parse."""
        payload = ToolsPayload.of(card)
        n = self.settings.db_variants
        on_variant = (task_on_variant(payload.instruction, episode_variant(payload.instruction.strip().lower(), attempt, n))
                      if n else None)
        try:
            actions, outputs = ((list(on_variant[1].actions), list(on_variant[1].outputs)) if on_variant is not None
                                else (parse_actions(payload.actions), parse_outputs(reference)))
        except ActionError as err:
            raise CardRejected(err.code, err.detail) from None
        return [format_call(a) for a in actions] + [f"{DONE}({format_outputs(outputs) if outputs else ''})"]

    def export_fields(self, card: TaskCard) -> dict[str, object]:
        """``valid_tasks.jsonl`` columns of a card: ``instruction``, ``actions`` (``{"name", "arguments"}`` each) and
        ``outputs`` (the values the agent must state: the oracle's, the solved task's for a template instruction,
        not a wrong claim of the card); empty lists when the card's actions or outputs do not parse."""
        payload = ToolsPayload.of(card)
        solved = task_of_instruction(self.db, payload.instruction)
        try:
            actions = [{"name": c.name, "arguments": dict(c.arguments)} for c in parse_actions(payload.actions)]
            outputs = list(solved[1].outputs if solved is not None else parse_outputs(payload.outputs))
        except ActionError:
            actions, outputs = [], []
        return {"instruction": payload.instruction, "actions": actions, "outputs": outputs}

    def family_of(self, card: TaskCard) -> str | None:
        """The family whose template the card's instruction is (solvable on the database), else None."""
        payload = ToolsPayload.of(card)
        solved = task_of_instruction(self.db, payload.instruction)
        return None if solved is None else solved[0]

    def is_heldout(self, card: TaskCard) -> bool:
        """Whether the card's task falls in the held-out bucket: the task its instruction names when it is in one of
        the world's templates (so neither other actions to the same end nor wrong outputs escape the bucket), else
        its actions and outputs as written; False if they do not parse."""
        payload = ToolsPayload.of(card)
        solved = task_of_instruction(self.db, payload.instruction)
        if solved is not None:
            return is_heldout_task(solved[1].actions, solved[1].outputs)
        try:
            return is_heldout_task(parse_actions(payload.actions), parse_outputs(payload.outputs))
        except ActionError:
            return False

    def reject_reason(self, card: TaskCard) -> str | None:
        """``heldout_task`` when the card's task is held out (so held-out stays unseen), else None."""
        return "heldout_task" if self.is_heldout(card) else None

    # --- factors

    def card_factors(self, card: TaskCard) -> dict[str, str]:
        """Every applicable factor of the card's subject (``ToolsPayload.factor_subject``: its instruction and gold
        actions, never its claims)."""
        return factor_values(factor_subject(card, ToolsPayload), self.factor_defs())

    builtin_factors: tuple[str, ...] = ("pattern",)
    """Factors the space starts with; the rest of :meth:`factor_defs` are the Reflector's candidates."""

    def factor_defs(self) -> list[FactorDef]:
        """Every factor this world computes from a subject, built-in first (see :func:`tool_factor_defs`)."""
        return tool_factor_defs(self.db)

    def sample_any(self, rng: random.Random) -> str:
        """The subject of a training task of a uniformly drawn family (to enumerate feasible cells)."""
        task = self.sample_task(rng, rng.choice(self.families))
        return ToolsPayload(instruction=task.instruction, actions=format_actions(task.actions), outputs="").factor_subject()

    # --- prompts and formats

    def synthesizer_prompt(self, report: object, target: Cell | None = None) -> str:
        """``<compact report>\\n[DO:<cell>\\n]CARD:`` for the tiny char Synthesizer (as in the arith world)."""
        return compact_synthesizer_prompt(report, self.report_budget, target, [d.name for d in self.factor_defs()])

    def reasoner_prompt(self, problem: str) -> str:
        """``T:<instruction>\\n``: the agent's first call follows on the next line."""
        return f"T:{problem}\n"

    def synthesizer_system_prompt(self) -> str | None:
        return None

    def reasoner_system_prompt(self) -> str | None:
        return None

    def format_card(self, instruction: str, actions: object, outputs: object, family: str) -> str:
        """The compact JSON card (nine fields): ``actions`` a list of calls or their text, ``outputs`` values or text."""
        solution = actions if isinstance(actions, str) else format_actions(actions)  # type: ignore[arg-type]
        answer = outputs if isinstance(outputs, str) else format_outputs(outputs)  # type: ignore[arg-type]
        values = {
            "teaching_intent": "tools",
            "target_reasoning_style": "act",
            "expected_reasoner_weakness": "lookup",
            "difficulty_estimate": family,
            "problem": instruction,
            "solution": solution,
            "final_answer": answer,
            "verification_notes": "x",
            "novelty_notes": "x",
        }
        return json.dumps({k: values[k] for k in CARD_FIELDS}, separators=(",", ":"))

    # --- generators

    def sample_task(self, rng: random.Random, family: str) -> Task:
        """A random training task of ``family``; never a held-out one."""
        return sample_task(self.db, rng, family)

    def static_cards(self, rng: random.Random, n: int) -> list[str]:
        """``n`` correct card texts with families drawn uniformly: the ``static`` baseline's source."""
        out = []
        for _ in range(n):
            family = rng.choice(self.families)
            task = self.sample_task(rng, family)
            out.append(self.format_card(task.instruction, task.actions, task.outputs, family))
        return out

    def heldout(self, n_per_group: int, seed: int) -> list[HeldoutItem]:
        """Distinct held-out tasks (by instruction) per group, deterministic in ``seed``; ``problem`` is the
        instruction, ``answer`` the canonical outputs. ``tools.heldout_groups`` chooses the groups (see
        :class:`ToolsSettings`): :meth:`_heldout_by_family` or :meth:`_heldout_by_writes`."""
        if self.settings.heldout_groups == "family":
            return self._heldout_by_family(n_per_group, seed)
        return self._heldout_by_writes(n_per_group, seed)

    def _heldout_by_family(self, n_per_group: int, seed: int) -> list[HeldoutItem]:
        """``n_per_group`` held-out tasks of each family whose bucket holds that many, in the world's family order;
        then one group ``other`` pooling every task of the families that hold fewer (``lookup`` 4, ``total`` 1, ...
        at 20), so every group's mean rests on about ``n_per_group`` tasks. A family's draws stop once it has
        ``n_per_group`` or 1000 draws in a row brought no instruction not drawn before (its bucket is exhausted);
        one with no held-out task (``cancel``) adds none. Each family draws from its own seeded stream, so its items
        do not depend on the others'."""
        items: list[HeldoutItem] = []
        rare: list[Task] = []
        for family in self.families:
            rng = random.Random(f"{seed}:{family}")
            found: dict[str, Task] = {}
            seen: set[str] = set()
            stale = 0
            while len(found) < n_per_group and stale < 1000:
                task = raw_task(self.db, rng, family)
                stale = 0 if task.instruction not in seen else stale + 1
                seen.add(task.instruction)
                if is_heldout_task(task.actions, task.outputs):
                    found.setdefault(task.instruction, task)
            if len(found) < n_per_group:
                rare += found.values()
                continue
            items += [_heldout_item(t, family) for t in found.values()]
        return items + [_heldout_item(t, OTHER_GROUP) for t in rare]

    def _heldout_by_writes(self, n_per_group: int, seed: int) -> list[HeldoutItem]:
        """``n_per_group`` tasks per writes group (``w0``, ``w1``, ``w2``, ``w3+``), each drawn from the families
        that produce it. The bucket holds 184 read-only (``w0``) instructions and over a thousand of each other
        group; a larger request is a ValueError naming the shortfall (after ``100 n + 20000`` draws, a few seconds).
        """
        rng = random.Random(seed)
        producers = self._group_families()
        items: list[HeldoutItem] = []
        for group in HELDOUT_GROUPS:
            found: dict[str, Task] = {}
            for _ in range(100 * n_per_group + 20_000):  # ~70 draws per item in the rarest group (w2)
                if len(found) >= n_per_group:
                    break
                task = raw_task(self.db, rng, rng.choice(producers[group]))
                if writes_group(task.actions) == group and is_heldout_task(task.actions, task.outputs):
                    found.setdefault(task.instruction, task)
            if len(found) < n_per_group:
                raise ValueError(f"held-out group {group}: found {len(found)} distinct tasks, "
                                 f"{n_per_group} requested")
            items += [_heldout_item(t, group) for t in found.values()]
        return items

    def _group_families(self) -> dict[str, list[str]]:
        """The families that produce each writes group (probed once with a fixed seed: 100 tasks per family)."""
        if self._producers is None:
            rng = random.Random(0)
            producers: dict[str, list[str]] = {g: [] for g in HELDOUT_GROUPS}
            for family in self.families:
                for group in sorted({writes_group(raw_task(self.db, rng, family).actions) for _ in range(100)}):
                    producers[group].append(family)
            self._producers = producers
        return self._producers  # type: ignore[return-value]

    def heldout_card(self, item: HeldoutItem) -> TaskCard:
        """The card of a held-out item (rebuilt from its instruction), for :meth:`environment`."""
        solved = task_of_instruction(self.db, item.problem)
        if solved is None:
            raise ValueError(f"held-out problem {item.problem!r} is not an instruction of this world's templates")
        family, task = solved
        return TaskCard(**json.loads(self.format_card(task.instruction, task.actions, task.outputs, family)))


# ----------------------------------------------------------------- factor extractors


def _actions(subject: str) -> list[ToolCall] | None:
    try:
        return parse_actions(split_subject(subject)[1])
    except ActionError:
        return None


def _on_actions(fn: Callable[[list[ToolCall]], str]) -> Callable[[str], str | None]:
    """A subject extractor from a function of the parsed gold actions (None when they do not parse)."""
    def extract(subject: str) -> str | None:
        actions = _actions(subject)
        return None if actions is None else fn(actions)
    return extract


def _family(subject: str) -> str | None:
    return family_of_instruction(split_subject(subject)[0])


TOOLS_PATTERNS: tuple[str, ...] = ("r", "rw", "rwr", "rw+")
"""The patterns a valid task of this world can have: it reads before it writes (a write's ids come from reads),
so of :data:`~synco.evosyn.trajectory.PATTERN_BUCKETS` only these occur."""


def tool_factor_defs(db: DB) -> list[FactorDef]:
    """The tools world's factors; ``computation`` replays the actions on ``db`` (None if they do not run)."""

    def computation(subject: str) -> str | None:
        """``yes`` when the trajectory implies working a value out rather than copying it: a write task with a
        read before its last write whose result no later action uses (it only decides: a comparison or a
        condition; a read after the last write reports an output), or a read-only
        task that reads more than one record or whose instruction gives a number (its output combines values)."""
        instruction, _ = split_subject(subject)
        actions = _actions(subject)
        if not actions:
            return None
        try:
            _, observations = replay(db, actions)
        except CardRejected:
            return None
        writes = [a for a in actions if TOOL_KINDS[a.name] == "write"]
        if not writes:
            has_number = any(w.isdigit() for w in instruction_words(instruction))
            return "yes" if len(actions) > 1 or has_number else "no"
        last_write = max(i for i, a in enumerate(actions) if TOOL_KINDS[a.name] == "write")
        for i, (call, obs) in enumerate(zip(actions[:last_write], observations)):
            if TOOL_KINDS[call.name] != "read":
                continue
            tokens = set(obs.replace(":", ",").split(","))
            later = {str(v) for a in actions[i + 1:] for v in a.arguments.values()}
            if not tokens & later:
                return "yes"
        return "no"

    return [
        *read_write_factor_defs(_actions, TOOL_KINDS, TOOLS_PATTERNS),
        FactorDef("computation", ("no", "yes"), computation,
                  "a comparison, condition or arithmetic the gold trajectory implies"),
        FactorDef("distinct_tools", DISTINCT_BUCKETS, _on_actions(distinct_tools),
                  "distinct tools the gold trajectory calls"),
        FactorDef("family", FAMILY_NAMES, _family, "the generator template the instruction follows (if any)"),
    ]
