"""Verification by execution: replay a card's gold actions on a fresh database copy and check grounding.

A card passes when its action list parses, every action runs without error or policy violation on a
fresh copy of the initial database, and the task is *grounded*:

* every argument comes from somewhere the agent can see: a name (``find_user(bob)``) is a word of the
  instruction (a plural ``s``/``es`` or a possessive allowed); an id (``u3``) appeared in an earlier
  observation (never the instruction: ids come from lookups, so every write needs reads first); an
  integer is a number of the instruction (digits, or ``a``/``an``/``one``..``ten``) or of an earlier
  observation, literally;
* every stated output is an observed value, a word of the instruction, or computable from the observed
  and instruction numbers: a sum of 2..4 of them, a difference, a product or an integer quotient of two;
* an instruction that asks for a change (a verb such as cancel, buy, ship, send, give) writes, and one
  that asks for none does not; a task that writes nothing states at least one output (else any agent
  that does nothing would pass).

A failure raises :class:`~synco.core.records.CardRejected` with one of the codes ``bad_actions``,
``too_many_actions``, ``unknown_tool``, ``bad_arguments``, ``bad_outputs``, ``action_failed``,
``policy_violation``, ``ungrounded_argument``, ``ungrounded_output``, ``no_write``, ``unasked_write``,
``nothing_to_check``, and ``bad_instruction`` (empty, over 80 characters, or not one line of printable
ASCII: the tiny models' alphabet). Everything is bounded: at most 12 actions, short texts, and the output search
looks at most :data:`MAX_NUMBERS` numbers (C(24,4) sums), well under 50 ms.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Sequence
from dataclasses import dataclass

from synco.core.episodes import ToolCall
from synco.core.records import CardRejected
from synco.domains.tools.db import DB
from synco.domains.tools.syntax import ActionError, canonical_value, format_call, parse_actions, parse_outputs
from synco.domains.tools.tasks import MAX_INSTRUCTION_CHARS
from synco.domains.tools.tools import TOOL_KINDS, TOOLS, call_tool

CHANGE_VERBS = frozenset({"cancel", "buy", "ship", "send", "give", "transfer", "pay", "place", "purchase",
                          "refund", "move"})
"""Words of an instruction that ask for a change (matched as whole words: ``buying`` is not one)."""

NUMBER_WORDS = {"a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7,
                "eight": 8, "nine": 9, "ten": 10}
"""Instruction words that state a number (``buy bob a lamp`` grounds the quantity 1)."""

MAX_NUMBERS = 24
"""Most numbers the output search combines (bounds its time)."""

_WORD = re.compile(r"[a-z0-9]+")
_OBS_SPLIT = re.compile(r"[,:]")
_INSTRUCTION = re.compile(rf"[ -~]{{8,{MAX_INSTRUCTION_CHARS}}}")


@dataclass(frozen=True)
class Replay:
    """A verified task: its parsed actions, each action's result text, its outputs, and the final-state hash."""

    actions: tuple[ToolCall, ...]
    observations: tuple[str, ...]
    outputs: tuple[str, ...]
    final_hash: str


def instruction_words(instruction: str) -> list[str]:
    """The lowercase words of an instruction (``bob's`` gives ``bob`` and ``s``)."""
    return _WORD.findall(instruction.lower()[:MAX_INSTRUCTION_CHARS * 2])


def _instruction_numbers(words: Sequence[str]) -> list[int]:
    """The numbers an instruction states, in order (digits, or number words such as ``a`` and ``two``)."""
    return [int(w) if w.isdigit() else NUMBER_WORDS[w] for w in words
            if (w.isdigit() and len(w) <= 6) or w in NUMBER_WORDS]


def _names_grounded(value: str, words: set[str]) -> bool:
    return value in words or f"{value}s" in words or f"{value}es" in words


def _computable(target: int, numbers: Sequence[int]) -> bool:
    """Whether ``target`` is one of ``numbers``, a sum of 2..4 of them, or a difference, product or quotient of two
    (each entry used once; a value listed twice may be used twice). Only the first :data:`MAX_NUMBERS` count."""
    nums = list(numbers)[:MAX_NUMBERS]
    if target in nums:
        return True
    for a, b in itertools.permutations(nums, 2):
        if a - b == target or a * b == target or (b > 0 and a // b == target):
            return True
    return any(sum(c) == target for k in (2, 3, 4) for c in itertools.combinations(nums, k))


def _reject(code: str, detail: str) -> CardRejected:
    return CardRejected(code, detail)


def replay(db: DB, actions: Sequence[ToolCall]) -> tuple[DB, list[str]]:
    """Run ``actions`` on a copy of ``db``: (the copy, each result text); CardRejected on the first failure."""
    state = db.copy()
    observations = []
    for i, call in enumerate(actions):
        result = call_tool(state, call)
        if not result.ok:
            code = {"not_found": "action_failed"}.get(result.code or "", result.code or "action_failed")
            raise _reject(code, f"action {i + 1} {format_call(call)}: {result.code} {result.detail}".rstrip())
        observations.append(result.text)
    return state, observations


def verify_task(db: DB, instruction: str, solution: str, final_answer: str) -> Replay:
    """Replay and check a card's task (see the module docstring); CardRejected with a reason code if it fails."""
    if not isinstance(instruction, str) or not _INSTRUCTION.fullmatch(instruction):
        raise _reject("bad_instruction", f"the instruction must be 8..{MAX_INSTRUCTION_CHARS} printable ASCII "
                                         f"characters on one line, got {len(str(instruction))}")
    try:
        actions = parse_actions(solution)
        outputs = parse_outputs(final_answer)
    except ActionError as err:
        raise _reject(err.code, err.detail) from None
    words = instruction_words(instruction)
    word_set, numbers = set(words), _instruction_numbers(words)
    seen_tokens: set[str] = set()
    seen_numbers: list[int] = []
    state = db.copy()
    observations = []
    for i, call in enumerate(actions):
        for param in TOOLS[call.name].params:
            value = call.arguments[param.name]
            grounded = (_names_grounded(str(value), word_set) if param.type == "name"
                        else str(value) in seen_tokens if param.type == "id"
                        else value in numbers or value in seen_numbers)
            if not grounded:
                where = ("a word of the instruction" if param.type == "name" else "an earlier observation"
                         if param.type == "id" else "a number of the instruction or an earlier observation")
                raise _reject("ungrounded_argument", f"action {i + 1} {format_call(call)}: {param.name}={value} "
                                                     f"is not {where}")
        state, obs = replay(state, [call])
        observations += obs
        for token in _OBS_SPLIT.split(obs[0]):
            seen_tokens.add(token)
            if token.isdigit() and len(token) <= 6:
                seen_numbers.append(int(token))  # a multiset: 15 + 15 needs both
    n_writes = sum(TOOL_KINDS[a.name] == "write" for a in actions)
    asks = sorted(word_set & CHANGE_VERBS)
    if asks and not n_writes:
        raise _reject("no_write", f"the instruction asks to {asks[0]} but no action writes")
    if n_writes and not asks:
        raise _reject("unasked_write", f"{n_writes} write(s) but the instruction asks for no change")
    if not n_writes and not outputs:
        raise _reject("nothing_to_check", "the task writes nothing and states no output")
    pool = numbers + seen_numbers  # the instruction's first: 5 cups at 5 is 5 * 5
    for value in outputs:
        ok = (value in seen_tokens or value in word_set
              or (value.isdigit() and len(value) <= 9 and _computable(int(value), pool)))
        if not ok:
            raise _reject("ungrounded_output", f"{value!r} is not observed, named, or computable from observed numbers")
    return Replay(tuple(actions), tuple(observations), tuple(canonical_value(v) for v in outputs), state.state_hash())
