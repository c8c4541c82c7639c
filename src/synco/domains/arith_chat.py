"""The arithmetic world for real chat models (``domain: arith-chat``): the same problems, asked in words.

Everything but the Reasoner's side is :class:`~synco.domains.arith.ArithDomain`'s: the eleven levels,
the exact oracle, the held-out hash bucket, the factors, the static generator and the tiny char
Synthesizer's compact prompt (so ``builtin:arith/synthesizer`` writes its cards unchanged). The Reasoner,
a chat LM such as SmolLM2-135M-Instruct, is asked through its chat template::

    user:       What is 964 + 6?
    assistant:  964 + 6 = |970.          (everything before | is prefilled)

Its response is prefilled with the problem's own equation (a per-problem prefix,
:class:`~synco.domains.base.HasProblemResponsePrefix`), and the answer is the first number written after
the ``=`` (:class:`~synco.domains.base.HasAnswerExtractor`). Measured on SmolLM2-135M-Instruct (greedy,
docs/SMOLLM2_ARITH.md): prefilled ``\\boxed{`` it copies an operand (``964}``), asked for an ``Answer:``
line it rambles; prefilled with the equation it writes a number at once (``1020.``, ``22\\n\\nThis is``),
which the strict reward-mode extraction (last box or an answer line alone) cannot read.

Multiplication is written ``*`` (docs/SMOLLM2_ARITH.md compares it with ``×``).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from synco.domains.arith import LEVEL_SPECS, ArithDomain
from synco.domains.base import HeldoutItem

__all__ = ["ANSWER_SCAN_CHARS", "ArithChatDomain", "EQUATION_SCAN_CHARS", "HELDOUT_LEVELS", "MUL_SIGN",
           "read_equation_answer", "spoken_problem"]

HELDOUT_LEVELS: tuple[str, ...] = ("L1", "L2", "L3", "L8")
"""The levels the held-out evaluation covers: where SmolLM2-135M-Instruct starts inside the teachable band,
greedy 0.10-0.32 on 50 problems each (3d+1d, 3d-1d, 2d+2d, 3d*1d; docs/SMOLLM2_ARITH.md). It gets 0-4 % of
the other seven, which would cost a CPU evaluation minutes to show a floor."""

MUL_SIGN = "*"
"""How ``*`` is written to the Reasoner: SmolLM2 read ``*`` no worse than ``×`` (docs/SMOLLM2_ARITH.md)."""

EQUATION_SCAN_CHARS = 256
"""Characters of a response searched for the prefilled equation's ``=`` (the prefix is under 100)."""

ANSWER_SCAN_CHARS = 32
"""Characters after the ``=`` (on its line) the answer is read from: enough for any arith answer."""

_OPERATOR = re.compile(r"\s*([+\-*])\s*")
_NUMBER = re.compile(r"-?[0-9]+(?:,[0-9]{3})*(?:\.[0-9]+)?")


def spoken_problem(problem: str, mul: str = MUL_SIGN) -> str:
    """``347*6`` -> ``347 * 6``: one space around each operator (``*`` written ``mul``), the rest as it is.

    Linear in the problem, which the verifier has already bounded (arith's ``max_problem_chars``).
    """
    return _OPERATOR.sub(lambda m: f" {mul if m.group(1) == '*' else m.group(1)} ", problem.strip())


def read_equation_answer(response: str) -> str | None:
    """The first number after the first ``=`` of ``response`` (or from its start when it has none), or None.

    Only the first :data:`EQUATION_SCAN_CHARS` characters are searched for the ``=`` and only the first
    :data:`ANSWER_SCAN_CHARS` characters after it, up to the end of that line, for the number, so any
    response costs bounded time. Thousands commas are dropped (``1,020`` -> ``1020``); a decimal stays
    whole (``516.5``, which no integer answer matches); only ASCII digits count; a sentence's full stop is not a decimal point
    (``970.`` -> ``970``). ``964 + 6 = 970.`` -> ``970``; ``964 + 6 = \\n970`` -> None (the line after the
    ``=`` is empty); ``964 + 6 = about 970`` -> ``970``.
    """
    head = response[:EQUATION_SCAN_CHARS]
    cut = head.find("=")
    tail = response[cut + 1:cut + 1 + ANSWER_SCAN_CHARS] if cut >= 0 else response[:ANSWER_SCAN_CHARS]
    line = tail.split("\n", 1)[0]
    m = _NUMBER.search(line)
    return m.group(0).replace(",", "") if m else None


class ArithChatDomain(ArithDomain):
    """The arithmetic world with the Reasoner's side for chat models (see the module docstring)."""

    name = "arith-chat"
    reasoner_response_prefix = ""
    """No fixed prefix: the prefix is the problem's equation (:meth:`reasoner_response_prefix_for`)."""

    def __init__(self, heldout_levels: Sequence[str] = HELDOUT_LEVELS, mul_sign: str = MUL_SIGN) -> None:
        super().__init__()
        if not mul_sign.strip() or len(mul_sign) > 3:
            raise ValueError(f"mul_sign: {mul_sign!r} must be a short visible sign such as '*' or '×'")
        self.mul_sign = mul_sign
        unknown = [lv for lv in heldout_levels if lv not in self.levels]
        if unknown or not heldout_levels:
            raise ValueError(f"heldout_levels: {list(heldout_levels)!r} must be a non-empty list of levels "
                             f"{', '.join(s.name for s in LEVEL_SPECS)}")
        self.heldout_levels = tuple(heldout_levels)

    def heldout(self, n_per_level: int, seed: int) -> list[HeldoutItem]:
        """The arith world's held-out problems (the very same ones per level) of :attr:`heldout_levels` only."""
        return [it for it in super().heldout(n_per_level, seed) if it.group in self.heldout_levels]

    def reasoner_prompt(self, problem: str) -> str:
        """``What is 964 + 6?``: the question a chat model is asked (its chat template wraps it)."""
        return f"What is {spoken_problem(problem, self.mul_sign)}?"

    def reasoner_response_prefix_for(self, problem: str) -> str:
        """``964 + 6 = ``: the response is prefilled with the problem's equation, so the model writes the number."""
        return f"{spoken_problem(problem, self.mul_sign)} = "

    def extract_reasoner_answer(self, response: str) -> str | None:
        """The first number after the equation's ``=`` (:func:`read_equation_answer`)."""
        return read_equation_answer(response)

    def format_reasoner_answer(self, answer: str | int) -> str:
        """What follows the prefilled equation in a target response (supervised rounds): the bare answer."""
        return str(answer)
