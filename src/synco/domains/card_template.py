"""The shape of a task card a domain asks the Synthesizer to fill in (``synth_decoding: card``).

A :class:`CardTemplate` is the domain's declaration: the slots (the values the model writes) and the
fixed JSON text around them. It is torch-free; :mod:`synco.rollout.card_decoding` compiles it for one
tokenizer into the token masks sampling applies.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

ANSWER_CHARSET = "0123456789-./ "
"""Characters an answer slot may hold: integers, decimals, fractions ``a/b``, negative numbers."""


@dataclass(frozen=True)
class CardSlot:
    """One value of the card: its field name, token budget and (optionally) its only allowed characters."""

    name: str
    max_tokens: int
    charset: str | None = None
    no_copy: bool = False  # the template's max_copy applies: no long verbatim run of the prompt
    boxed: int = 0  # > 0: the value ends with ``\\boxed{<answer>}.``, the answer at most this many tokens of ANSWER_CHARSET

    def __post_init__(self) -> None:
        if self.boxed < 0:
            raise ValueError(f"slot {self.name!r}: boxed must be >= 0 (0: a plain value), got {self.boxed}")
        if self.boxed and self.charset is not None:
            raise ValueError(f"slot {self.name!r}: a boxed value is free text with an answer; it takes no charset")
        if not self.name or '"' in self.name or "\\" in self.name:
            raise ValueError(f"slot name {self.name!r} must be non-empty, without quotes or backslashes")
        if self.max_tokens < 1:
            raise ValueError(f"slot {self.name!r}: max_tokens must be >= 1, got {self.max_tokens}")
        if self.charset is not None and (not self.charset.strip() or '"' in self.charset or "\\" in self.charset):
            raise ValueError(f"slot {self.name!r}: charset {self.charset!r} needs a visible character and no quote or backslash")


@dataclass(frozen=True)
class CardTemplate:
    """The fixed JSON around the slots: ``{"a": "<a>",\\n"b": "<b>"}`` (one field per line, as the prompt's examples)."""

    slots: tuple[CardSlot, ...]
    max_copy: int = 0  # no_copy slots repeat at most this many consecutive prompt tokens; 0: no limit

    def __post_init__(self) -> None:
        if not self.slots:
            raise ValueError("a card template needs at least one slot")
        if self.max_copy < 0:
            raise ValueError(f"max_copy must be >= 0 (0: no limit), got {self.max_copy}")
        names = [s.name for s in self.slots]
        if len(set(names)) != len(names):
            raise ValueError(f"slot names repeat: {names}")

    def parts(self) -> list[CardSlot]:
        """What the model writes, in order: each slot, and after a boxed slot's text its answer (``<name>.boxed``)."""
        out: list[CardSlot] = []
        for slot in self.slots:
            if slot.boxed:
                out.append(CardSlot(slot.name, slot.max_tokens, None, slot.no_copy))
                out.append(CardSlot(slot.name + ".boxed", slot.boxed, ANSWER_CHARSET))
            else:
                out.append(slot)
        return out

    def fixed_texts(self) -> list[str]:
        """The fixed text before part 0, between parts, and after the last (``"}``); ``len(parts()) + 1`` texts.

        ``fixed[i]`` (i >= 1) starts with the character that ends part ``i - 1`` (the closing
        quote, or ``\\`` opening a boxed answer, or ``}`` closing it), which that part's text never holds.
        """
        out = ['{"']
        for slot in self.slots:
            out[-1] += slot.name + '": "'
            if slot.boxed:
                out += [BOXED_OPEN, BOXED_CLOSE]
            else:
                out.append('"')
            out[-1] += ",\n\""
        out[-1] = out[-1][: -len(",\n\"")] + "}"
        return out

    def render(self, values: Sequence[str]) -> str:
        """The card text the template produces for these slot values (raw JSON string contents; a boxed slot's
        value ends with ``\\boxed{<answer>}.``): what sampling writes, minus end-of-sequence."""
        if len(values) != len(self.slots):
            raise ValueError(f"{len(values)} values for {len(self.slots)} slots")
        parts: list[str] = []
        for slot, value in zip(self.slots, values, strict=True):
            if slot.boxed:
                if not value.endswith(BOXED_CLOSE[:2]) or BOXED_OPEN not in value:
                    raise ValueError(f"slot {slot.name!r}: value {value[-40:]!r} does not end with \\boxed{{...}}.")
                text, _, answer = value[: -2].rpartition(BOXED_OPEN)
                parts += [text, answer]
            else:
                parts.append(value)
        fixed = self.fixed_texts()
        return fixed[0] + "".join(v + f for v, f in zip(parts, fixed[1:], strict=True))


BOXED_OPEN = "\\\\boxed{"
"""The raw JSON text that ends a boxed slot's free text and opens its answer (``\\boxed{`` once decoded)."""
BOXED_CLOSE = '}."'
"""The raw JSON text after a boxed answer: the brace, a full stop, the value's closing quote."""
