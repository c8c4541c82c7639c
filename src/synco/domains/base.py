"""What a task domain supplies to the co-training loop: the contract, its optional capabilities, its needs.

A domain owns the prompts of both agents (user and system messages) and the
knowledge that is specific to its tasks: an exact oracle when one exists
(arithmetic), the factors that the capability report groups by, a fixed task
generator for the ``static`` baseline and a held-out set that training must
never touch. The loop itself is domain-free.

* :class:`Domain` -- the members every domain has (checked when the registry builds one).
* Optional capabilities, each a small protocol the loop checks with ``isinstance``:

  - answering: :class:`HasResponsePrefix`, :class:`HasProblemResponsePrefix`, :class:`HasAnswerExtractor`,
    :class:`HasAnswerFormat`, :class:`HasAnswerForm` (answers that are the domain's own texts, not maths);
  - the Synthesizer's card: :class:`HasCardTemplate`;
  - factors: :class:`HasFactorSpace` (defined in ``synco.evosyn.space``, where the factor space lives); what
    they read of a card is its payload's ``factor_subject``;
  - agents that act: :class:`HasEnvironment`, :class:`HasGoldTurns`, :class:`HasToolSchemas`,
    :class:`HasTrajectories`, :class:`HasExportFields`;
  - its own task files: :class:`HasNativeTasks` (``synco verify`` reads lines in the domain's task format);
  - its cards' payload: ``synco.core.records.HasPayloadType`` (the payload model; a problem with solution and
    answer without it), defined beside the payloads;
  - the Designer alone: :class:`HasCellCards` (``mode=designer``: cards drawn inside a cell by the domain).
* :class:`DomainNeeds` -- what a domain asks of a run (``Domain.needs``), read by config validation.

``docs/ADDING_A_DOMAIN.md`` walks through all of it with a complete example;
``synco.domains.registry`` maps a config's ``domain:`` name to a domain.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from synco.domains.card_template import CardTemplate
from synco.evosyn.space import Cell, HasFactorSpace, cell_key
from synco.core.episodes import Environment, ToolCall
from synco.core.records import TaskCard, Verdict
from synco.core.report import CapabilityReport
from synco.core.sampling import Completion, SamplingParams

if TYPE_CHECKING:
    from synco.core.policy import Policy


__all__ = ["Domain", "DomainNeeds", "HasAnswerExtractor", "HasAnswerForm", "HasAnswerFormat", "HasCardTemplate", "HasCellCards", "HasEnvironment", "HasExportFields", "HasGoldTurns", "HasFactorSpace",
           "HasNativeTasks", "HasProblemResponsePrefix", "HasResponsePrefix", "HasToolSchemas", "HasTrajectories", "answer_extractor",
           "answer_form", "compact_synthesizer_prompt", "export_fields", "HeldoutItem", "NativeTask", "problem_response_prefix", "reasoner_prompts",
           "response_prefix", "solve"]


@dataclass(frozen=True)
class DomainNeeds:
    """What a domain asks of a run beyond its :class:`Domain` members (``Domain.needs``).

    Config validation reads it (building the domain only when a setting depends on it), so a
    setting the domain cannot serve fails at load, naming the field, not inside the first step.
    Whether the labels come from an exact oracle or from consensus is ``Domain.has_oracle``.
    """

    chat_model: bool = False
    """Its prompts are instructions for chat LMs (system prompts, a chat template): a Synthesizer that can
    follow an instruction, which the LLM factor proposer (``evosyn.proposer``) needs. False for arith's tiny
    character models."""


@dataclass(frozen=True)
class HeldoutItem:
    """One held-out evaluation problem with its exact answer and group (e.g. difficulty level)."""

    problem: str
    answer: str
    group: str


@runtime_checkable
class Domain(Protocol):
    """The members every domain has; the loop calls nothing else without an ``isinstance`` check first.

    See ``synco.domains.arith.ArithDomain`` (exact oracle, tiny char models) and
    ``synco.domains.math.MathDomain`` (consensus labels, chat models) for the built-in ones.
    """

    name: str
    """Short name for messages and run ids (usually the name it is registered under)."""

    needs: DomainNeeds
    """What it asks of a run (:class:`DomainNeeds`)."""

    def synthesizer_prompt(self, report: CapabilityReport, target: Cell | None = None) -> str:
        """The Synthesizer's user prompt, built from the latest capability report; ``target`` names the
        Designer's cell for this context (domains with a factor space), None for a report-only prompt."""
        ...

    def reasoner_prompt(self, problem: str) -> str:
        """The Reasoner's user prompt: only the problem (and the answer-format instruction)."""
        ...

    def synthesizer_system_prompt(self) -> str | None:
        """The Synthesizer's system prompt, or None to leave it to the policy (``PolicyConfig.system_prompt``)."""
        ...

    def reasoner_system_prompt(self) -> str | None:
        """The Reasoner's system prompt, or None to leave it to the policy (``PolicyConfig.system_prompt``)."""
        ...

    def oracle(self, card: TaskCard) -> str | None:
        """The exact answer to the card's task, or None when the card is outside the domain.

        Domains without an exact oracle set ``has_oracle = False`` and rely on consensus.
        """
        ...

    @property
    def has_oracle(self) -> bool:
        """True: :meth:`oracle` labels every card; False: the loop labels by consensus of independent answers."""
        ...

    def card_factors(self, card: TaskCard) -> dict[str, str]:
        """Categorical labels of a card (topic, level, ...) computed from the card itself."""
        ...

    def reject_reason(self, card: TaskCard) -> str | None:
        """A domain-specific hard rejection (e.g. ``heldout_problem``), or None."""
        ...

    def static_cards(self, rng: random.Random, n: int) -> list[str]:
        """``n`` raw card texts from a fixed generator: the ``static`` baseline's task source."""
        ...

    def heldout(self, n_per_group: int, seed: int) -> list[HeldoutItem]:
        """Held-out problems that no training path may produce."""
        ...


@runtime_checkable
class HasResponsePrefix(Protocol):
    """A fixed text every Reasoner response starts with (see :func:`response_prefix`)."""

    reasoner_response_prefix: str


@runtime_checkable
class HasProblemResponsePrefix(Protocol):
    """A Reasoner response prefix that depends on the problem (see :func:`problem_response_prefix`).

    E.g. ``arith-chat`` prefills the problem's own equation, ``964 + 6 = ``, so a small chat model
    answers with the number instead of restating the question. It takes precedence over
    :class:`HasResponsePrefix`.
    """

    def reasoner_response_prefix_for(self, problem: str) -> str:
        """The text the Reasoner's response to ``problem`` starts with (prefilled)."""
        ...


@runtime_checkable
class HasAnswerExtractor(Protocol):
    """The domain reads the Reasoner's answer itself, instead of the reward-mode extraction of
    ``synco.grading.extract`` (the last ``\\boxed{}`` or an ``answer:`` line).

    For a prefilled format the strict rules cannot read, e.g. ``arith-chat``'s ``964 + 6 = 970.``. Used
    wherever a Reasoner response is graded in a run: training rewards, consensus and held-out evaluation.
    """

    def extract_reasoner_answer(self, response: str) -> str | None:
        """The answer stated by ``response`` (a whole response, prefix included), or None. Must be bounded:
        the response is model output of any size and content."""
        ...


@runtime_checkable
class HasAnswerFormat(Protocol):
    """How a verified answer is written as a whole Reasoner response: what supervised rounds train on
    (``rounds.target: reference``). Without it the card's solution followed by ``\\boxed{answer}`` is used."""

    def format_reasoner_answer(self, answer: str) -> str:
        """The Reasoner's target response for ``answer`` (response prefix included), e.g. ``\\boxed{2082}``;
        in a domain with a per-problem prefix (:class:`HasProblemResponsePrefix`), what follows that prefix."""
        ...


@runtime_checkable
class HasCardTemplate(Protocol):
    """A fixed card layout the Synthesizer can be made to fill in (``synth_decoding: card``)."""

    def card_template(self) -> CardTemplate:
        """The slots the model writes and the fixed JSON around them (``synco.domains.card_template``)."""
        ...


@runtime_checkable
class HasEnvironment(Protocol):
    """The Reasoner acts on an environment over several turns (``synco.core.episodes``) instead of
    answering once: each attempt is an episode on a fresh :class:`~synco.core.episodes.Environment`,
    graded by the environment, not by the answer checker."""

    def environment(self, card: TaskCard, reference: str, attempt: int = 0) -> Environment:
        """A fresh environment for one episode on a verified card (``reference`` is its verdict's).

        ``attempt`` is the episode's index among the card's attempts in one request (0..K-1; for a held-out item,
        its sample index): a domain may use it to vary the episode's world deterministically (the tools world's
        database variants); one that does not ignores it. It travels with the episode's job, so every process
        builds the same environment."""
        ...

    def heldout_card(self, item: HeldoutItem) -> TaskCard:
        """The card of a held-out item (from :meth:`Domain.heldout`), to build its environments."""
        ...


@runtime_checkable
class HasGoldTurns(Protocol):
    """A verified card's gold episode can be replayed turn by turn (the tools world): what a supervised update on
    verified trajectories (EvoSyn's SFT, ``rounds.target=reference``) trains on."""

    def gold_turns(self, card: TaskCard, reference: str, attempt: int = 0) -> list[str]:
        """The agent's turns of the card's gold episode on ``environment(card, reference, attempt)``, in the
        Reasoner's own syntax, its final turn included (CardRejected when the card's actions do not parse)."""
        ...


@runtime_checkable
class HasToolSchemas(Protocol):
    """The Reasoner is a chat agent with callable tools (τ²): their JSON schemas go into its prompt, in the chat
    template's own tool format when it has one (``synco.core.prompts.build_prompt``)."""

    def tool_schemas(self) -> list[dict[str, Any]]:
        """OpenAI-style function schemas of the tools the Reasoner may call."""
        ...


@runtime_checkable
class HasTrajectories(Protocol):
    """A card's gold solution is a tool-call trajectory (the tools world): what the structural metrics of a step
    (interaction coverage, pattern diversity, distinct action sequences, contrastive support) are computed on."""

    tool_kinds: Mapping[str, str]
    """Every tool's tag, ``read`` or ``write``."""

    def gold_actions(self, card: TaskCard) -> list[ToolCall]:
        """The card's gold trajectory (CardRejected when its action list does not parse)."""
        ...


@runtime_checkable
class HasAnswerForm(Protocol):
    """Its answers are its own texts, not maths (τ²'s information to communicate, the tools world's outputs): a
    card's claim is its oracle's answer when the domain reads both as the same (``none``, ``None`` and ``[]`` all
    say nothing to communicate), not only when the answer checker matches them."""

    def canonical_answer(self, text: str) -> str | None:
        """The canonical form of an answer text (what the oracle returns), None when it does not read as one."""
        ...


@runtime_checkable
class HasExportFields(Protocol):
    """Columns of its own in ``valid_tasks.jsonl`` (e.g. the tools world's ``instruction``, ``actions``, ``outputs``).

    A column named as one of the export's own replaces it. Whether ``solution`` stays on a row whose answer the oracle
    corrected is the payload's (``TaskPayload.solution_is_gold``), not a column to give back."""

    def export_fields(self, card: TaskCard) -> dict[str, Any]:
        """The domain's export columns of a valid card (JSON values)."""
        ...


@dataclass(frozen=True)
class NativeTask:
    """What a domain found in a line holding one of its own tasks (:class:`HasNativeTasks`)."""

    verdict: Verdict
    """The domain's own verdict on the task (its replay), before the file's other lines are looked at."""
    factors: dict[str, str]
    """The task's factors (empty when it is invalid)."""
    card: TaskCard | None = None
    """The task as a card, for the checks that compare it with the file's other lines (``duplicate_in_step``); None
    when it does not read as one."""


@runtime_checkable
class HasNativeTasks(Protocol):
    """The domain's benchmark writes its tasks in a format of its own (τ²'s task JSON): ``synco verify`` replays a
    line in that format as the benchmark's task instead of reading it as a card."""

    def native_task(self, text: str) -> NativeTask | None:
        """What the domain finds in a line holding one task in its own format; None when ``text`` is not in that
        format (it is then verified as a card). ``text`` is a file's line: bound the work, never raise on it."""
        ...


def answer_form(domain: Domain) -> Callable[[str], str | None] | None:
    """``domain.canonical_answer`` when its answers have a form of their own (:class:`HasAnswerForm`), else None."""
    return domain.canonical_answer if isinstance(domain, HasAnswerForm) else None


@runtime_checkable
class HasCellCards(Protocol):
    """The domain draws cards inside a factor cell from its own generator: ``mode=designer`` (the Designer alone, no
    Synthesizer: the bench's control for whose credit a gain is)."""

    def cell_cards(self, rng: random.Random, cell: Cell, n: int) -> list[str]:
        """``n`` card texts inside ``cell`` (``()``: anywhere), drawn uniformly within it; never a held-out problem."""
        ...


def export_fields(domain: Domain) -> Callable[[TaskCard], dict[str, Any]] | None:
    """``domain.export_fields`` when it has its own export columns (:class:`HasExportFields`), else None."""
    return domain.export_fields if isinstance(domain, HasExportFields) else None


def compact_synthesizer_prompt(report: object, budget: int, target: Cell | None, factor_order: Sequence[str]) -> str:
    """``<compact report>\n[DO:<cell>\n]CARD:``: the tiny char Synthesizers' prompt (arith, tools).

    ``report`` is a ``CapabilityReport`` (its ``render_compact(budget)`` is used) or already-rendered text,
    flattened to one line of at most ``budget`` characters; ``target`` is the Designer's cell, written in
    ``factor_order`` (the domain's factor order, whatever order the space lists it in).
    """
    render = getattr(report, "render_compact", None)
    text = render(budget) if callable(render) else str(report or "")
    text = " ".join(text.split())[:budget]
    if target:
        order = {name: i for i, name in enumerate(factor_order)}
        text += "\nDO:" + cell_key(tuple(sorted(target, key=lambda kv: order.get(kv[0], len(order)))))
    return f"{text}\nCARD:"


def response_prefix(domain: Domain) -> str:
    """The fixed text every Reasoner response starts with (:class:`HasResponsePrefix`; "" if none).

    E.g. ``\\boxed{`` in the arithmetic world: it is put at the end of the prompt
    (prefilled, so no decoding step and no gradient is spent on it) and in front
    of every completion's text before the answer is extracted, graded or stored.
    """
    return str(domain.reasoner_response_prefix or "") if isinstance(domain, HasResponsePrefix) else ""


def problem_response_prefix(domain: Domain, problem: str) -> str:
    """The text the Reasoner's response to ``problem`` starts with: the domain's per-problem prefix
    (:class:`HasProblemResponsePrefix`), else its fixed one (:func:`response_prefix`)."""
    if isinstance(domain, HasProblemResponsePrefix):
        return str(domain.reasoner_response_prefix_for(problem) or "")
    return response_prefix(domain)


def answer_extractor(domain: Domain) -> Callable[[str], str | None] | None:
    """``domain.extract_reasoner_answer`` when the domain reads its Reasoner's answers itself
    (:class:`HasAnswerExtractor`), else None (grading then uses reward-mode extraction)."""
    return domain.extract_reasoner_answer if isinstance(domain, HasAnswerExtractor) else None


def reasoner_prompts(policy: Policy, domain: Domain, problems: Sequence[str]) -> list[str]:
    """The Reasoner's formatted prompt for each problem, ending with the domain's prefilled response prefix
    (the problem's own one in a :class:`HasProblemResponsePrefix` domain).

    What :func:`solve` samples from, and what supervised updates (``synco.cotrain.protocols``) train on.
    """
    system = domain.reasoner_system_prompt()
    if isinstance(domain, HasToolSchemas):
        tools = domain.tool_schemas()
        return [policy.format_prompt(domain.reasoner_prompt(p), system=system, tools=tools)
                + problem_response_prefix(domain, p) for p in problems]
    return [policy.format_prompt(domain.reasoner_prompt(p), system=system) + problem_response_prefix(domain, p)
            for p in problems]


def solve(policy: Policy, domain: Domain, problems: Sequence[str], n: int,
          params: SamplingParams | None = None, seed: int | None = None) -> list[list[Completion]]:
    """``n`` answers of ``policy`` to each problem with the domain's prompts; texts are whole responses.

    The one place where Reasoner-style prompts are built (training attempts,
    consensus checker, held-out evaluation), so they always match. ``seed``: one seed for the
    whole request (``Policy.generate``; None: the policy's own random stream).
    """
    from synco.core.policy import generate_seeded

    prefixes = [problem_response_prefix(domain, p) for p in problems]
    groups = generate_seeded(policy, reasoner_prompts(policy, domain, problems), n, params, seed)
    if not any(prefixes):
        return groups
    return [[replace(c, text=prefix + c.text) for c in group] for prefix, group in zip(prefixes, groups)]
