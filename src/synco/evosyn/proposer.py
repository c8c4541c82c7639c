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
balanced ``{...}`` by scanning (``synco.grading.jsonscan``) (no regex built from model text), ``json.loads`` it (never
eval) and validates every field; anything wrong is None.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from synco.core.prompts import load_prompt, render
from synco.grading.jsonscan import balanced_objects
from synco.core.records import success_rate
from synco.evosyn.proposed import FALLBACK, MAX_PROBLEM_CHARS, RAW_CHARS, ProposedFactor, tokens

from synco.evosyn.space import FactorDef

if TYPE_CHECKING:
    from synco.core.records import TaskRecord

MAX_SCAN = 4000
"""Characters of model output :func:`parse_proposal` looks at."""

MAX_DEPTH = 8
"""Deepest ``{``/``[`` nesting a candidate object may have (a proposal needs 2)."""

MAX_OBJECTS = 16
"""Balanced ``{...}`` spans tried before giving up."""

EXAMPLE_CHARS = 300
"""Characters of each example problem shown in the proposer prompt."""


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
    for span in balanced_objects(head, MAX_DEPTH, MAX_OBJECTS):
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
    return success_rate(r.rollouts)


def pick_examples(records: Sequence[TaskRecord], n: int, rng: random.Random) -> ProposerExamples:
    """Up to ``n`` distinct failed problems (success 0 first, then < 0.5) and ``n`` solved ones (success 1)."""
    zero: dict[str, None] = {}
    low: dict[str, None] = {}
    solved: dict[str, None] = {}
    for r in records:
        s = success_of(r)
        if s is None:
            continue
        problem = r.card.payload.prompt_text()  # type: ignore[union-attr]  # success_of checked the card
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
