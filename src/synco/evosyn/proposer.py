"""EvoSyn's LLM factor proposer: the Synthesizer model suggests a new *keyword* factor.

The Reflector only tests the factors a domain offers. With ``evosyn.proposer`` on, every
``proposer_settings.every`` steps the Synthesizer model is shown recent problems the
Reasoner failed and ones it solved and asked for ONE factor that separates them, as
strict JSON: a name and 2-4 buckets of keywords. The model never labels a problem: a
proposal is turned into a :class:`FactorDef` whose value synco computes from the problem
text (the first bucket, in order, with a keyword that occurs in the problem as a whole
word or phrase; else ``other``). It then joins the Reflector's candidates and is promoted
only on the same evidence test as any other candidate.

Model output is hostile input: :func:`parse_proposal` reads a bounded prefix, finds a
balanced ``{...}`` by scanning (no regex built from model text), ``json.loads`` it (never
eval) and validates every field; anything wrong is None.
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from synco.prompts import load_prompt, render

if TYPE_CHECKING:  # space.py stores proposals, so it imports this module
    from synco.evosyn.space import FactorDef
    from synco.records import TaskRecord

NAME_PATTERN = r"^[a-z][a-z0-9_]{1,23}$"
"""Factor and bucket names: short snake_case identifiers (they appear in cell keys and prompts)."""

KEYWORD_PATTERN = r"^[A-Za-z0-9 $%\-]{1,30}$"
"""A keyword: 1-30 ASCII letters, digits, spaces and ``$ % -``."""

FALLBACK = "other"
"""The bucket of a problem that mentions no keyword of any bucket."""

MAX_SCAN = 4000
"""Characters of model output :func:`parse_proposal` looks at."""

MAX_DEPTH = 8
"""Deepest ``{``/``[`` nesting a candidate object may have (a proposal needs 2)."""

MAX_OBJECTS = 16
"""Balanced ``{...}`` spans tried before giving up."""

MAX_PROBLEM_CHARS = 4000
"""Characters of a problem the keyword extractor reads (bounded work per problem)."""

EXAMPLE_CHARS = 300
"""Characters of each example problem shown in the proposer prompt."""

RAW_CHARS = 500
"""Characters of the model's text kept with a proposal (for the log)."""

_TOKEN = re.compile(r"[a-z0-9]+|[$%]")
"""Word tokens of lower-cased text: runs of ASCII letters/digits; ``$`` and ``%`` are tokens of their own."""


def tokens(text: str) -> tuple[str, ...]:
    """The word tokens of ``text`` lower-cased: ``"15% off!"`` -> ``("15", "%", "off")``."""
    return tuple(_TOKEN.findall(text.lower()))


class ProposedFactor(BaseModel):
    """One factor the Synthesizer model proposed: keyword buckets (``other`` is added as the fallback)."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=NAME_PATTERN, description="Factor name (snake_case, 2-24 chars).")
    buckets: dict[str, list[str]] = Field(description="Bucket name -> 1..8 keywords, 2..4 buckets, in match order.")
    step: int = Field(ge=0, description="Step the factor was proposed at.")
    raw: str = Field("", max_length=RAW_CHARS, description="The model's text (clipped), for the log.")

    @field_validator("buckets")
    @classmethod
    def _check_buckets(cls, buckets: dict[str, list[str]]) -> dict[str, list[str]]:
        if not 2 <= len(buckets) <= 4:
            raise ValueError(f"buckets: need 2 to 4 buckets, got {len(buckets)}")
        out: dict[str, list[str]] = {}
        for bucket, keywords in buckets.items():
            if not re.match(NAME_PATTERN, bucket):
                raise ValueError(f"buckets: bucket name {bucket[:40]!r} does not match {NAME_PATTERN}")
            if bucket == FALLBACK:
                raise ValueError(f"buckets: {FALLBACK!r} is the automatic fallback bucket, not a proposable one")
            if not 1 <= len(keywords) <= 8:
                raise ValueError(f"buckets.{bucket}: need 1 to 8 keywords, got {len(keywords)}")
            clean = []
            for kw in keywords:
                if not re.match(KEYWORD_PATTERN, kw) or not tokens(kw):
                    raise ValueError(f"buckets.{bucket}: keyword {kw[:40]!r} is not 1-30 letters, digits, "
                                     f"spaces or $%- with at least one word")
                clean.append(" ".join(kw.lower().split()))
            out[bucket] = clean
        return out

    @property
    def bucket_names(self) -> tuple[str, ...]:
        """The proposed buckets in match order, then ``other``."""
        return (*self.buckets, FALLBACK)


@dataclass(frozen=True)
class KeywordExtractor:
    """``problem -> bucket``: the first bucket (in order) one of whose keyword phrases occurs in the problem."""

    phrases: tuple[tuple[str, tuple[tuple[str, ...], ...]], ...]  # (bucket, keyword token tuples)

    def __call__(self, problem: str) -> str:
        toks = tokens(problem[:MAX_PROBLEM_CHARS])
        lengths = {len(p) for _, ps in self.phrases for p in ps}
        grams = {toks[i:i + n] for n in lengths for i in range(len(toks) - n + 1)}
        for bucket, ps in self.phrases:
            if any(p in grams for p in ps):
                return bucket
        return FALLBACK


def to_def(p: ProposedFactor) -> FactorDef:
    """The proposal as a factor synco computes from the problem text (never the card's claim)."""
    from synco.evosyn.space import FactorDef

    extractor = KeywordExtractor(tuple((b, tuple(tokens(kw) for kw in kws)) for b, kws in p.buckets.items()))
    desc = "; ".join(f"{b}: {', '.join(kws)}" for b, kws in p.buckets.items())
    return FactorDef(p.name, p.bucket_names, extractor, f"proposed at step {p.step} (keywords) - {desc}")


# ----------------------------------------------------------------- parsing model output


def balanced_objects(text: str) -> Iterable[str]:
    """The top-level balanced ``{...}`` spans of ``text`` in order (JSON string-aware inside a span).

    A span nested deeper than ``MAX_DEPTH`` is skipped; at most ``MAX_OBJECTS`` spans are tried.
    Linear in ``len(text)``.
    """
    i, n, found = 0, len(text), 0
    while found < MAX_OBJECTS:
        start = text.find("{", i)
        if start < 0:
            return
        depth, in_str, esc, too_deep, j = 0, False, False, False, start
        while j < n:
            ch = text[j]
            if in_str:
                if esc:
                    esc = False
                elif ch == "\\":
                    esc = True
                elif ch == '"':
                    in_str = False
            elif ch == '"':
                in_str = True
            elif ch in "{[":
                depth += 1
                too_deep = too_deep or depth > MAX_DEPTH
            elif ch in "}]":
                depth -= 1
                if depth == 0:
                    break
            j += 1
        if j >= n:  # unbalanced to the end: nothing more to find
            return
        found += 1
        if not too_deep:
            yield text[start:j + 1]
        i = j + 1


def _no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """``json.loads`` hook: a key written twice is an error (the later one would silently win)."""
    out: dict[str, Any] = {}
    for k, v in pairs:
        if k in out:
            raise ValueError(f"duplicate key {k!r}")
        out[k] = v
    return out


def parse_proposal(text: str, existing_names: Iterable[str], step: int) -> ProposedFactor | None:
    """The first JSON object in ``text`` that is a valid proposal with a new name, else None.

    Reads only the first ``MAX_SCAN`` characters; keys other than ``name`` and ``buckets`` are ignored.
    Never raises on model output.
    """
    if not isinstance(text, str):
        return None
    taken = {n.lower() for n in existing_names} | {FALLBACK}
    head = text[:MAX_SCAN]
    for span in balanced_objects(head):
        try:
            obj = json.loads(span, object_pairs_hook=_no_duplicate_keys)
        except (ValueError, RecursionError):
            continue
        if not isinstance(obj, dict) or "name" not in obj:
            continue
        name, buckets = obj.get("name"), obj.get("buckets")
        if not isinstance(name, str) or not isinstance(buckets, dict):
            return None
        if any(not isinstance(v, list) or not all(isinstance(k, str) for k in v) for v in buckets.values()):
            return None
        try:
            p = ProposedFactor(name=name, buckets=buckets, step=step, raw=head[:RAW_CHARS])
        except ValidationError:
            return None
        return None if p.name in taken else p
    return None


# ----------------------------------------------------------------- the prompt and its examples


@dataclass(frozen=True)
class ProposerExamples:
    """Problems the Reasoner failed and problems it solved, for the proposer prompt."""

    failed: list[str]
    solved: list[str]


def success_of(r: TaskRecord) -> float | None:
    """A valid, solved task's success rate (from its attempts when not recorded); None otherwise."""
    if not r.valid or r.card is None or not r.rollouts:
        return None
    if r.success_rate is not None:
        return r.success_rate
    return sum(ro.correct for ro in r.rollouts) / len(r.rollouts)


def pick_examples(records: Sequence[TaskRecord], n: int, rng: random.Random) -> ProposerExamples:
    """Up to ``n`` distinct failed problems (success 0 first, then < 0.5) and ``n`` solved ones (success 1)."""
    zero: dict[str, None] = {}
    low: dict[str, None] = {}
    solved: dict[str, None] = {}
    for r in records:
        s = success_of(r)
        if s is None:
            continue
        problem = r.card.problem  # type: ignore[union-attr]  # success_of checked the card
        if s == 0:
            zero.setdefault(problem, None)
        elif s < 0.5:
            low.setdefault(problem, None)
        elif s == 1:
            solved.setdefault(problem, None)
    failed = _sample(list(zero), n, rng)
    failed += _sample([p for p in low if p not in zero], n - len(failed), rng)
    return ProposerExamples(failed=failed, solved=_sample(list(solved), n, rng))


def _sample(items: list[str], k: int, rng: random.Random) -> list[str]:
    return rng.sample(items, min(k, len(items))) if k > 0 else []


def _bullets(problems: Sequence[str]) -> str:
    """One ``- problem`` line per problem, whitespace collapsed, clipped to ``EXAMPLE_CHARS``."""
    lines = []
    for p in problems:
        flat = " ".join(p.split())
        lines.append("- " + (flat if len(flat) <= EXAMPLE_CHARS else flat[:EXAMPLE_CHARS - 3] + "..."))
    return "\n".join(lines) if lines else "- none"


def proposer_prompt(failed: Sequence[str], solved: Sequence[str], existing_names: Iterable[str],
                    prompts_dir: str | Path | None = None) -> str:
    """``factor_proposer.txt`` filled with the failed and solved problems and the factor names in use."""
    return render(load_prompt("factor_proposer", prompts_dir), failed=_bullets(failed), solved=_bullets(solved),
                  existing=", ".join(sorted(set(existing_names))) or "none")
