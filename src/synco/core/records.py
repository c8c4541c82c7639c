"""Typed records that flow through one co-training step and into the pool.

Everything the loop passes between stages is one of these models, never a
string-keyed dict: a task card, the verifier's verdict, one Reasoner rollout,
the Synthesizer's reward components, and the whole task record that the pool
stores. All are pydantic models so they round-trip through JSON unchanged.
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal, Mapping, Protocol, Sequence, TypeVar, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field, SerializeAsAny, SkipValidation, field_validator, model_validator

from synco.core.episodes import Finish, Turn
from synco.core.sampling import Completion, Experience

CARD_FIELDS: tuple[str, ...] = (
    "teaching_intent",
    "target_reasoning_style",
    "expected_reasoner_weakness",
    "difficulty_estimate",
    "problem",
    "solution",
    "final_answer",
    "verification_notes",
    "novelty_notes",
)
"""The nine required task-card fields, in the order the prompt lists them."""

CHECK_NAMES: tuple[str, ...] = ("format", "schema", "problem", "answer", "novelty", "reliability")
"""Per-check scores every verdict carries (each in [0, 1])."""

ExtractionMethod = Literal[
    "boxed", "boxed_all", "final_answer_line", "answer_line", "gsm8k_marker", "last_sentence", "domain", "none"
]
"""How an answer was found (see :func:`synco.grading.extract.extract_answer_with_method`); ``boxed_all``,
``gsm8k_marker`` and ``last_sentence`` only come from its evaluation options; ``domain``: a domain's own
reader (``synco.domains.base.HasAnswerExtractor``)."""


class TaskCardError(ValueError):
    """Model text could not be turned into a task card; the message says why."""


class CardRejected(ValueError):
    """An oracle's refusal of a card, with a stable reason code (``action_failed``, ``unknown_tool``, ...).

    A domain's ``oracle`` raises it to say *why* a card has no reference; the verifier records
    ``"<code>: <detail>"`` as a hard failure (a plain ``None`` from the oracle is ``oracle_rejected``).
    """

    def __init__(self, code: str, detail: str = "") -> None:
        if not code or not code.replace("_", "").isalnum():
            raise ValueError(f"CardRejected code must be a word like 'unknown_tool', got {code!r}")
        super().__init__(f"{code}: {detail}" if detail else code)
        self.code = code
        self.detail = detail


HEADER_FIELDS: tuple[str, ...] = (
    "teaching_intent",
    "target_reasoning_style",
    "expected_reasoner_weakness",
    "difficulty_estimate",
    "novelty_notes",
)
"""The synthesis header every card has, whatever its domain: why and how the Synthesizer wrote it."""

WIRE_PAYLOAD_FIELDS: tuple[str, ...] = ("problem", "solution", "final_answer", "verification_notes")
"""The card fields the Synthesizer writes its task in (the model-facing layout of :data:`CARD_FIELDS`); a domain's
payload says which of its own fields each one carries (:attr:`TaskPayload.wire_names`)."""


class TaskPayload(BaseModel):
    """A domain's typed task: what its card is about, beside the shared synthesis header.

    A subclass names its ``kind`` (a ``Literal`` field, stored with the payload so a pool reads it back as the same
    type) and ``wire_names``: which card field of the model-facing layout (:data:`WIRE_PAYLOAD_FIELDS`) each of its
    fields is written in. The layout the Synthesizer writes and reads stays one JSON object of nine strings; the
    payload is how everything after parsing reads it. Subclasses register themselves by ``kind``.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)

    kind: str
    wire_names: ClassVar[Mapping[str, str]] = {}
    """``{payload field: card field}``; a card field no payload field takes is the header's (``verification_notes``)."""
    _kinds: ClassVar[dict[str, type["TaskPayload"]]] = {}

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: Any) -> None:
        super().__pydantic_init_subclass__(**kwargs)
        kind = cls.model_fields["kind"].default
        if isinstance(kind, str) and kind:
            TaskPayload._kinds[kind] = cls

    @classmethod
    def of_kind(cls, kind: str) -> type["TaskPayload"]:
        """The payload type registered as ``kind`` (a domain's module must be imported first)."""
        try:
            return TaskPayload._kinds[kind]
        except KeyError:
            raise ValueError(f"payload kind {kind!r} is not a known domain payload "
                             f"(known: {', '.join(sorted(TaskPayload._kinds))})") from None

    def wire(self) -> dict[str, str]:
        """The payload in the card fields the Synthesizer writes (``{card field: text}``)."""
        return {card: str(getattr(self, name)) for name, card in self.wire_names.items()}

    @classmethod
    def from_wire(cls, fields: Mapping[str, str]) -> "TaskPayload":
        """The payload of the card fields a Synthesizer wrote (the inverse of :meth:`wire`)."""
        return cls(**{name: str(fields.get(card, "")) for name, card in cls.wire_names.items()})

    @classmethod
    def of(cls: type["P"], card: "TaskCard") -> "P":
        """``card``'s payload as this type (read from its card fields when the card holds another type)."""
        return card.payload_as(cls)

    # What generic code reads of a task, whatever its domain (the verifier, novelty, the rounds protocol, exports,
    # the factor space): each payload type names the field that answers each question (or overrides the reader).

    prompt_field: ClassVar[str] = ""
    """The field holding what the Reasoner is asked (:meth:`prompt_text`)."""
    solution_field: ClassVar[str] = ""
    """The field saying how the task is solved (:meth:`solution_text`); "": none."""
    answer_field: ClassVar[str] = ""
    """The field holding the answer the card claims (:meth:`claimed_answer`); "": none."""

    def _field_text(self, name: str) -> str:
        return str(getattr(self, name)) if name else ""

    def prompt_text(self) -> str:
        """What the Reasoner is asked: the text its prompt is built from, and what novelty, contamination and the
        capability report compare."""
        if not self.prompt_field:
            raise NotImplementedError(f"{type(self).__name__} does not say what the Reasoner is asked (prompt_field)")
        return self._field_text(self.prompt_field)

    def solution_text(self) -> str:
        """How the card says the task is solved (a worked solution, gold actions; "" when it says nothing): what the
        answer-leak check looks for in :meth:`prompt_text`, and a supervised reference argues with."""
        return self._field_text(self.solution_field)

    def claimed_answer(self) -> str:
        """The answer the card claims: what the Reasoner is graded against unless an oracle or consensus replaces it."""
        return self._field_text(self.answer_field)

    def factor_subject(self) -> str:
        """The text the domain's factor extractors read: :meth:`prompt_text` unless the payload says more (the gold
        actions of an instruction). The step, the Designer, the Reflector and the learning effect all read this."""
        return self.prompt_text()

    solution_is_gold: ClassVar[bool] = False
    """True: :meth:`solution_text` is the gold path an oracle computes the answer from (tools, τ² actions), so it
    stays valid where the oracle corrected the card's claim; False: it argues for the claim and is withheld there."""

    @classmethod
    def schema_text(cls) -> str:
        """What each card field the Synthesizer writes holds in this payload, one line each (its field's docstring):
        ``"solution": actions -- the gold action list ...``; for a chat Synthesizer's prompt."""
        lines = []
        for name, card in cls.wire_names.items():
            doc = " ".join((cls.model_fields[name].description or "").split())
            lines.append(f'"{card}": {name}' + (f" -- {doc}" if doc else ""))
        return "\n".join(lines)


class ProblemPayload(TaskPayload):
    """A problem with its worked solution and final answer (arith, math, any domain answered in one text)."""

    kind: Literal["problem"] = "problem"
    problem: str
    """What the Reasoner is asked."""
    solution: str
    """The Synthesizer's worked solution."""
    answer: str
    """The answer the card claims."""
    wire_names: ClassVar[Mapping[str, str]] = {"problem": "problem", "solution": "solution", "answer": "final_answer"}
    prompt_field: ClassVar[str] = "problem"
    solution_field: ClassVar[str] = "solution"
    answer_field: ClassVar[str] = "answer"


P = TypeVar("P", bound=TaskPayload)


@runtime_checkable
class HasPayloadType(Protocol):
    """A domain whose cards carry a payload of their own type (an instruction with gold actions, a generator
    config...), a domain capability; without it a card's payload is a :class:`ProblemPayload`. Defined here, beside
    the payloads, so every layer that reads a card (the factor space included) reads it as its domain's type."""

    payload_type: type[TaskPayload]
    """The payload model of the domain's cards (declared in the domain's own package)."""


def payload_type(domain: object) -> type[TaskPayload]:
    """The domain's card payload type (:class:`HasPayloadType`), else :class:`ProblemPayload`."""
    return domain.payload_type if isinstance(domain, HasPayloadType) else ProblemPayload


class TaskCard(BaseModel):
    """A synthesized task: the shared synthesis header plus the domain's typed payload.

    The header (:data:`HEADER_FIELDS` and ``notes``, the card's verification notes when its payload does not take
    that field) says why the Synthesizer wrote the card; ``payload`` is the task itself, of the domain's own type
    (:class:`ProblemPayload` for a problem with solution and answer). ``factors`` holds optional categorical labels
    (topic, skill, level, ...) used by the capability report; ``extra`` keeps any unknown keys the model wrote, so
    nothing it produced is lost.

    Built from the nine card fields the Synthesizer writes (``TaskCard(**fields)``), a card holds a
    :class:`ProblemPayload`; :meth:`typed` gives it its domain's payload type; :meth:`wire` gives the card back in
    that layout (what the model sees). Everything else reads the payload by what it means
    (:meth:`TaskPayload.prompt_text`, ``solution_text``, ``claimed_answer``, ``factor_subject``), never by a card
    field named for a math problem.
    """

    model_config = ConfigDict(frozen=False, extra="forbid")

    teaching_intent: str
    target_reasoning_style: str
    expected_reasoner_weakness: str
    difficulty_estimate: str
    notes: str = ""
    novelty_notes: str
    payload: SerializeAsAny[TaskPayload]
    factors: dict[str, str] = Field(default_factory=dict)
    extra: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="before")
    @classmethod
    def _from_card_fields(cls, data: Any) -> Any:
        """The nine card fields (what a Synthesizer writes, what a pool before payloads stored) as header plus a
        :class:`ProblemPayload`."""
        if not isinstance(data, dict) or not any(k in data for k in WIRE_PAYLOAD_FIELDS):
            return data
        data = dict(data)
        wire = {k: data.pop(k) for k in WIRE_PAYLOAD_FIELDS if k in data}
        if "payload" in data:
            raise ValueError("a card has either a payload or the fields problem/solution/final_answer, not both")
        data.setdefault("notes", wire.pop("verification_notes", ""))
        data["payload"] = ProblemPayload.from_wire(wire)
        return data

    @field_validator("payload", mode="before")
    @classmethod
    def _payload_of_its_kind(cls, value: Any) -> Any:
        if isinstance(value, dict):
            return TaskPayload.of_kind(str(value.get("kind", ""))).model_validate(value)
        return value

    def wire(self) -> dict[str, str]:
        """The nine card fields, in :data:`CARD_FIELDS` order: the layout the Synthesizer writes."""
        values = {name: getattr(self, name) for name in HEADER_FIELDS}
        values["verification_notes"] = self.notes
        values.update({k: "" for k in WIRE_PAYLOAD_FIELDS if k != "verification_notes"})
        values.update(self.payload.wire())
        return {name: values[name] for name in CARD_FIELDS}

    def flat(self) -> dict[str, Any]:
        """The card as the Synthesizer's JSON object: the nine fields, then ``factors`` and ``extra``."""
        return {**self.wire(), "factors": dict(self.factors), "extra": dict(self.extra)}

    def typed(self, payload_type: type[TaskPayload]) -> "TaskCard":
        """This card with its payload read as ``payload_type`` (itself when it already is one)."""
        if isinstance(self.payload, payload_type):
            return self
        wire = self.wire()
        owns_notes = "verification_notes" in payload_type.wire_names.values()
        return self.model_copy(update={"payload": payload_type.from_wire(wire),
                                       "notes": "" if owns_notes else self.notes})

    def payload_as(self, payload_type: type[P]) -> P:
        """The payload as ``payload_type`` (read from the card fields when the card holds another type)."""
        payload = self.typed(payload_type).payload
        assert isinstance(payload, payload_type)
        return payload

    def with_fields(self, **fields: str) -> "TaskCard":
        """This card with some of its nine card fields rewritten (as if the Synthesizer had written them), its
        payload of the same type."""
        unknown = sorted(set(fields) - set(CARD_FIELDS))
        if unknown:
            raise ValueError(f"with_fields: {unknown[0]!r} is not a card field (one of {', '.join(CARD_FIELDS)})")
        card = TaskCard(**{**self.wire(), **fields}, factors=dict(self.factors), extra=dict(self.extra))
        return card.typed(type(self.payload))

    def model_copy(self, *, update: Mapping[str, Any] | None = None, deep: bool = False) -> "TaskCard":
        """pydantic's copy; the card fields a payload carries are rewritten with :meth:`with_fields`, not here."""
        wire = sorted(set(update or ()) & set(WIRE_PAYLOAD_FIELDS))
        if wire:
            raise ValueError(f"TaskCard.model_copy: {wire[0]!r} is in the payload; use card.with_fields({wire[0]}=...)")
        return super().model_copy(update=update, deep=deep)

    def to_json(self) -> str:
        return self.model_dump_json()

    @classmethod
    def from_json(cls, text: str) -> "TaskCard":
        return cls.model_validate_json(text)


DUPLICATE_CODES: frozenset[str] = frozenset({"near_duplicate", "duplicate_in_step"})
"""The verifier's novelty codes: rejections, or soft reasons where ``verifier.reject_duplicates`` is false."""


class Verdict(BaseModel):
    """The verifier's judgement of one card.

    ``reasons`` start with a stable code (``near_duplicate``, ``missing_field``,
    ...) optionally followed by ``": detail"``, so counting codes does not split
    on numbers. ``reference`` is the answer rollouts are graded against: the
    answer the card claims, or the domain oracle's answer when one exists.
    """

    valid: bool
    scores: dict[str, float] = Field(default_factory=dict)
    quality: float = 0.0
    reliability: float = 0.0
    reasons: list[str] = Field(default_factory=list)
    reference: str | None = None
    agreement: float | None = None  # consensus: share of independent answers that match the reference

    @property
    def reason_codes(self) -> list[str]:
        return [r.split(":", 1)[0].strip() for r in self.reasons]


class Attempt(BaseModel):
    """One Reasoner attempt at one task, graded: the record that travels from the engine that sampled it to the
    pool and into the training batch (torchforge's ``Episode``).

    Every attempt is an episode; a single-turn domain's is the one-turn case (one agent turn, mask all ones: its
    ``turns`` are None and ``transcript`` gives the one turn).
    ``text`` is the whole transcript after the prompt (the domain's prefilled response prefix included);
    ``prompt_ids`` the ids the engine conditioned on; ``completion_ids`` every id after them (prefix excluded,
    EOS included when one was sampled; for an episode agent and environment ids in order) and ``mask`` one 0/1
    per id (1 sampled and trained, 0 written by the environment); ``logprobs`` the sampling log-probs (0.0 on
    environment ids). ``policy_version`` is the sampling agent's optimizer-step count when the engine sampled,
    so staleness can be measured and bounded. ``t_sample`` is the wall-clock seconds of the request that sampled
    it (shared by the request's attempts).

    The pool keeps everything but the prompt ids, the log-probs and the timing (``TaskPool.by_step(...,
    token_ids=True)`` loads the sampled ids); ``completion_ids`` is None for an attempt read without them or
    stored by a pool written before ids were kept.
    """

    text: str
    answer: str | None = None
    method: ExtractionMethod = "none"
    correct: bool = False
    reward: float = 0.0
    truncated: bool = False
    n_tokens: int = 0  # sampled (trained) ids
    completion_ids: list[int] | None = None
    policy_version: int | None = None  # None: a pool written before versions were kept
    # an episode's transcript, why it ended and the reward's parts
    turns: list[Turn] | None = None  # None: a single-turn answer, one agent turn that is the text (``transcript``)
    finish: Finish | None = None  # an episode's (a single-turn answer's is ``truncated``)
    reward_parts: dict[str, float] | None = None
    episode_info: dict[str, str] | None = None  # the environment's notes on the episode (EpisodeGrade.info)
    first_wrong: str | None = None  # a failed episode: where it first left the gold trajectory (``wrong_tool:cancel_order``)
    prompt_ids: list[int] | None = Field(None, exclude=True)
    logprobs: list[float] | None = Field(None, exclude=True)
    t_sample: float | None = Field(None, exclude=True)

    @property
    def loss_mask(self) -> list[int] | None:
        """1 per agent id, 0 per environment id, in ``completion_ids`` order (None: no environment ids, every id
        was sampled and is trained)."""
        if self.turns is None or all(t.role == "agent" for t in self.turns):
            return None
        return [int(t.role == "agent") for t in self.turns for _ in range(t.n_tokens)]

    @property
    def transcript(self) -> list[Turn]:
        """The turns; a single-turn answer's one agent turn is its text."""
        return self.turns if self.turns is not None else [Turn(role="agent", text=self.text, n_tokens=self.n_tokens)]

    def to_experience(self, advantage: float) -> Experience:
        """The GRPO row of this attempt: every id after the prompt with the sampling log-probs, environment ids
        masked. Needs the in-memory fields (an attempt read back from the pool has no prompt ids)."""
        if self.prompt_ids is None or self.completion_ids is None:
            raise ValueError("an attempt read back from the pool has no prompt ids: it cannot enter a GRPO batch")
        return Experience(prompt_ids=list(self.prompt_ids), completion_ids=list(self.completion_ids),
                          advantage=float(advantage), old_logprobs=None if self.logprobs is None else list(self.logprobs),
                          loss_mask=self.loss_mask)


def success_rate(attempts: Sequence[Attempt]) -> float | None:
    """The share of correct attempts at one task (None: no attempt)."""
    return sum(a.correct for a in attempts) / len(attempts) if attempts else None


class SynthReward(BaseModel):
    """The Synthesizer's reward for one card and every component behind it."""

    total: float
    quality: float = 0.0
    reliability: float = 0.0
    teachability: float = 0.0  # the learner term: teachability or the gap (synth_rewards.learnability)
    novelty: float = 0.0
    success_rate: float | None = None
    alignment: float | None = None  # synco.core.rewards.card_alignment of a valid card (None: not measured)
    penalty: float = 0.0  # invalid / duplicate penalties already folded into ``total``
    control: float = 0.0  # the off-target term folded into ``total`` (also in ``penalty``); 0 on target
    mode: str = "gated"


class TaskRecord(BaseModel):
    """Everything the pool keeps about one synthesized card."""

    task_id: int = -1  # assigned by the pool; unique over the run, never reused
    step: int
    slot: int
    context_id: int = 0  # which synthesis context (GRPO group) produced it
    raw: str
    card: TaskCard | None = None
    verdict: Verdict
    rollouts: list[Attempt] = Field(default_factory=list)  # the Reasoner's attempts at the task
    success_rate: float | None = None
    synth_reward: SynthReward | None = None
    target: str | None = None  # the Designer's cell for this card's context (``level=L8,carries=0``), if any
    on_target: bool | None = None  # valid targeted cards: did the realised cell (recomputed) match the target?
    synth_version: int | None = None  # the Synthesizer's optimizer-step count when it wrote the card (None: no model did)
    sample: Annotated[Completion | None, SkipValidation] = Field(None, exclude=True)  # the Synthesizer's sample
    target_cell: tuple[tuple[str, str], ...] | None = Field(None, exclude=True)  # ``target`` as the Designer's cell

    @property
    def valid(self) -> bool:
        return self.verdict.valid

    @property
    def reference(self) -> str | None:
        """The answer the Reasoner is graded against: the verifier's (an oracle or consensus may have replaced the
        card's claim), else the answer the card claims; None without a card."""
        return self.verdict.reference or (self.card.payload.claimed_answer() if self.card is not None else None)

    @property
    def gradient_bearing(self) -> bool:
        """At least two rollouts received different rewards."""
        rewards = {r.reward for r in self.rollouts}
        return len(rewards) > 1
