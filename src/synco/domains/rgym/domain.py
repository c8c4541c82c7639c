"""The reasoning-gym world (``domain: rgym``): the Synthesizer writes generator configs, reasoning-gym generates the
question the Reasoner answers and scores its answer.

A card's ``problem``, as the Synthesizer writes it, is a config: ``{"family": "chain_sum", "config": {"max_terms":
3}}`` (checked by :mod:`synco.domains.rgym.catalog` before anything runs). The oracle *materialises* the card: it
draws the card's generator seed from the run's seed (a training seed is even; held-out seeds are odd, so no card
reaches one), generates the item in the worker process (:mod:`synco.domains.rgym.gym`) and rewrites the card in
place: ``problem`` becomes the generated question (what the Reasoner sees and novelty compares), ``solution`` the
config with its seed (``{"family": ..., "config": {...}, "seed": N}``: how the item is regenerated to score it),
``final_answer`` the generated answer (the oracle). Today's card has only string fields, so the config lives in
``solution``; a typed payload is a later change.

The Reasoner acts in a one-turn environment (:class:`ScoredAnswer`): its answer follows the prefilled
``rgym.answer_prefix`` (reasoning-gym's ``<answer>`` by default) up to ``</answer>`` or a newline, and is graded by
the family's own scorer in the worker; a scorer that raises or runs out of time scores 0 and is counted
(``scorer=error`` / ``scorer=timeout`` in the step's episode notes).

Factors: the family and the curriculum's global level are steered (the Designer's cells); each attribute's level,
``<family>.<attribute>``, is observed, a candidate the Reflector may promote.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import random
import re
import threading
from collections.abc import Mapping
from functools import lru_cache
from typing import Any

from synco.core.episodes import EnvStep, EpisodeGrade
from synco.core.records import CARD_FIELDS, HEADER_FIELDS, CardRejected, TaskCard
from synco.domains.base import DomainNeeds, HeldoutItem, compact_synthesizer_prompt
from synco.domains.rgym.audit import reward_of
from synco.domains.rgym.catalog import ConfigRejected, Family, config_text, families_from, parse_config
from synco.domains.rgym.gym import Gym, GymFailure
from synco.domains.rgym.payload import RgymPayload
from synco.domains.rgym.settings import RgymSettings
from synco.evosyn.space import Cell, FactorDef, factor_subject

logger = logging.getLogger(__name__)

LEVEL_BUCKETS = tuple(str(i) for i in range(16))
"""Global levels a factor may take (the longest curriculum has 13 levels)."""

MAX_ANSWER_CHARS = 400
"""An answer is cut to this many characters before it is scored."""

REPORT_BUDGET = 64
"""Characters of the compact capability report in the Synthesizer prompt."""


def derive_seed(*parts: object, heldout: bool = False) -> int:
    """A generator seed from ``parts`` (the run's seed, a counter...): even for training, odd for held-out, so the two
    namespaces never meet; below 2**31."""
    digest = hashlib.sha256(repr(parts).encode()).digest()
    return 2 * (int.from_bytes(digest[:8], "big") % (1 << 30)) + (1 if heldout else 0)


MIN_SPACE_DRAWS = 32
"""Draws of a held-out group before its question space is estimated (fewer: too noisy to cut the group)."""

MAX_REMEMBERED = 200_000
"""Questions the oracle remembers having generated (to prefer a fresh one on a redraw); beyond, it stops adding."""


def distinct_space(draws: int, distinct: int) -> float:
    """How many equally likely questions a generator draws from, estimated from ``distinct`` different questions
    among ``draws`` draws: the N whose expected number of distinct draws, ``N (1 - (1 - 1/N) ** draws)``, is
    ``distinct`` (that expectation rises with N). ``inf`` when no draw repeated."""
    if not 0 < distinct <= draws:
        raise ValueError(f"need 0 < distinct <= draws, got {distinct} of {draws}")
    if distinct == draws:
        return math.inf

    def expected(n: float) -> float:
        return n * (1.0 - (1.0 - 1.0 / n) ** draws)

    lo, hi = float(distinct), 2.0 * distinct
    while expected(hi) < distinct:
        hi *= 2.0
    for _ in range(200):
        mid = (lo + hi) / 2.0
        lo, hi = (mid, hi) if expected(mid) < distinct else (lo, mid)
    return (lo + hi) / 2.0


def heldout_size(n_per_group: int, share: float | None, space: float) -> int:
    """Items a held-out group keeps: ``n_per_group``, at most ``share`` of its estimated question ``space`` (at
    least 1), so that cards of a small cell can still draw most of its questions; all when ``share`` is None."""
    if share is None or math.isinf(space):
        return n_per_group
    return max(1, min(n_per_group, math.floor(share * space)))


_NUMBER = re.compile(r"-?\d{1,3}(?:,\d{3})+(?:\.\d+)?(?!\d)|-?\d+(?:\.\d+)?")
"""A number, with or without thousands separators (``24,877``), bounded by the answer's length cap."""


def extract_answer(response: str, prefix: str, first_number: bool = False) -> str:
    """The answer in a whole response (prefix included): after the last ``prefix`` (or from the start), up to
    ``</answer>`` or a newline, stripped of spaces and a final period; with ``first_number`` the first number there
    ("" if none). Bounded: the response is model output."""
    text = response[:4 * MAX_ANSWER_CHARS]
    if prefix and prefix in text:
        text = text[text.rindex(prefix) + len(prefix):]
    for stop in ("</answer>", "\n"):
        text = text.split(stop, 1)[0]
    if first_number:
        found = _NUMBER.search(text[:MAX_ANSWER_CHARS])
        return found.group().replace(",", "") if found else ""
    text = text.strip()
    return (text[:-1] if text.endswith(".") else text).strip()[:MAX_ANSWER_CHARS]


class ScoredAnswer:
    """One episode: one answer, graded by the family's scorer (the worker) on the card's item."""

    def __init__(self, domain: RgymDomain, family: Family, config: dict[str, Any], seed: int) -> None:
        self.domain, self.family, self.config, self.seed = domain, family, config, seed
        self.answer: str | None = None

    def step(self, text: str) -> EnvStep:
        settings = self.domain.settings
        self.answer = extract_answer(text, settings.answer_prefix, settings.first_number)
        return EnvStep(observation="", done=True)

    def grade(self) -> EpisodeGrade:
        if not self.answer:
            return EpisodeGrade(reward=0.0, correct=False, parts={"score": 0.0}, info={"scorer": "empty"})
        score = self.domain.gym.score(self.family.name, self.config, self.seed, self.answer)
        reward = reward_of(score.value, self.family.partial_credit) if score.status == "ok" else 0.0
        return EpisodeGrade(reward=reward, correct=score.status == "ok" and score.value >= 1.0,
                            parts={"score": score.value}, info={"scorer": score.status})


class _Unscorable:
    """The environment of a card that is not a materialised rgym card (never valid; scores 0)."""

    def step(self, text: str) -> EnvStep:
        return EnvStep(observation="", done=True)

    def grade(self) -> EpisodeGrade:
        return EpisodeGrade(reward=0.0, correct=False, info={"scorer": "no_item"})


class RgymDomain:
    """reasoning-gym's families as a co-training world (see the module docstring)."""

    name = "rgym"
    payload_type = RgymPayload
    needs = DomainNeeds(chat_model=False)
    has_oracle = True
    min_problem_chars = 3
    max_problem_chars = 600

    def __init__(self, settings: RgymSettings | None = None, seed: int = 0, gym: Gym | None = None) -> None:
        self.settings = settings or RgymSettings()
        self.seed = seed
        self.gym = gym or Gym(self.settings.memory_mb, self.settings.timeout_s)
        self._families: dict[str, Family] | None = None
        self._counter = 0
        self._lock = threading.Lock()
        self._heldout_questions: set[str] = set()
        self._generated: set[str] = set()  # questions the oracle gave cards (bounded: MAX_REMEMBERED)
        self._heldout_items: dict[str, tuple[str, dict[str, Any], int]] = {}
        self.reasoner_response_prefix = self.settings.answer_prefix

    def __getstate__(self) -> dict[str, Any]:  # a copy in another process (Ray, spawn) gets its own lock and worker
        state = dict(self.__dict__)
        state.pop("_lock")
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    def close(self) -> None:
        """Stop the generator worker (a later call starts a new one); the run calls it when it ends."""
        self.gym.close()

    # --- the families (described by the worker once)

    @property
    def families(self) -> dict[str, Family]:
        """The selected families (``rgym.families``), in that order."""
        if self._families is None:
            found = families_from(self.gym.describe(), self.settings.families)
            self._families = {n: found[n] for n in self.settings.families if n in found}
        return self._families

    def n_levels(self, family: Family) -> int:
        """The levels cards of ``family`` may ask for: its curriculum's, up to ``rgym.max_level``."""
        top = self.settings.max_level
        return family.n_levels if top is None else min(family.n_levels, top + 1)

    def _config_of(self, text: str) -> tuple[Family, dict[str, Any]] | None:
        try:
            return parse_config(text, self.families)
        except ConfigRejected:
            return None

    # --- cards

    def oracle(self, card: TaskCard) -> str | None:
        """Check the card's config, generate its item and materialise the card (module docstring); the answer."""
        task = RgymPayload.of(card)
        if task.seed is not None:
            raise CardRejected("bad_config", "the card is already materialised (its problem is a generated question)")
        try:
            family, config = parse_config(task.config.strip(), self.families)
        except ConfigRejected as err:
            raise CardRejected(err.code, err.detail) from None
        top = self.settings.max_level
        if top is not None and family.level(config) > top:
            raise CardRejected("out_of_range", f"{family.name} at level {family.level(config)} is above "
                                               f"rgym.max_level {top}")
        with self._lock:
            self._counter += 1
            counter = self._counter
        seed, question, answer = self._draw(family, config, task.config, counter)
        card.payload = RgymPayload(config=config_text(family.name, config), seed=seed, question=question, answer=answer)
        return answer

    def _draw(self, family: Family, config: dict[str, Any], text: str, counter: int) -> tuple[int, str, str]:
        """The card's item ``(seed, question, answer)``: its first seed's, or, when that question is held out or was
        generated before in this run, up to ``rgym.redraws`` further seeds' -- the first question neither held out nor
        seen, else the first not held out (a repeat), else the last (a held-out question, rejected ``heldout_problem``
        by :meth:`reject_reason`). The seed is synco's, not the Synthesizer's: a small cell's collision is not the
        card's fault, and rejecting it loses the slot."""
        fallback = None
        for attempt in range(1 + self.settings.redraws):
            parts: tuple[object, ...] = ("train", self.seed, counter, text) + ((attempt,) if attempt else ())
            seed = derive_seed(*parts)
            try:
                question, answer = self.gym.generate(family.name, config, seed)
            except GymFailure as err:
                raise CardRejected(err.code, err.detail) from None
            key = question.strip()
            if key in self._heldout_questions:
                continue
            with self._lock:
                fresh = key not in self._generated
                if fresh and len(self._generated) < MAX_REMEMBERED:
                    self._generated.add(key)
            if fresh:
                return seed, question, answer
            fallback = fallback or (seed, question, answer)
        return fallback or (seed, question, answer)

    def card_factors(self, card: TaskCard) -> dict[str, str]:
        """The family and level of the card's config (``RgymPayload.factor_subject``)."""
        found = _factor_values(self, factor_subject(card, RgymPayload))
        return {k: found[k] for k in ("family", "level") if k in found}

    def reject_reason(self, card: TaskCard) -> str | None:
        """``heldout_problem`` when the generated question is a held-out one."""
        task = RgymPayload.of(card)
        return "heldout_problem" if task.seed is not None and task.question.strip() in self._heldout_questions else None

    def format_card(self, family: str, config: Mapping[str, Any], level: int | str = "") -> str:
        """The nine-field card a Synthesizer writes for ``config`` (constants around the config)."""
        values = {"teaching_intent": "rgym", "target_reasoning_style": "exact", "expected_reasoner_weakness": "x",
                  "difficulty_estimate": f"L{level}", "problem": config_text(family, config), "solution": "x",
                  "final_answer": "x", "verification_notes": "x", "novelty_notes": "x"}
        return json.dumps({k: values[k] for k in CARD_FIELDS}, separators=(",", ":"))

    def random_config(self, rng: random.Random, family: Family, level: int,
                      fixed: Mapping[str, int] | None = None) -> dict[str, Any]:
        """A config of global ``level`` drawn uniformly: each attribute's level uniform in 0..``level`` (``fixed`` ones
        as given), one of them raised to ``level`` when none reached it; a range's lower field uniform up to its upper."""
        fixed = fixed or {}
        top = min(level, family.n_levels - 1)
        levels = {a.name: fixed.get(a.name, rng.randint(0, min(top, a.n_levels - 1))) for a in family.attributes}
        free = [a.name for a in family.attributes if a.name not in fixed and a.n_levels > top]
        if levels and max(levels.values()) < top and free:
            levels[rng.choice(free)] = top
        config: dict[str, Any] = {}
        for attr in family.attributes:
            values = attr.values_at(levels[attr.name])
            if len(attr.fields) == 2 and attr.numeric and not attr.interval:
                hi = values[attr.fields[1]]
                if isinstance(hi, int) and isinstance(attr.levels[0], int) and attr.levels[0] < hi:
                    values[attr.fields[0]] = rng.randint(attr.levels[0], hi)
            config.update(values)
        return dict(sorted(config.items()))

    def cell_cards(self, rng: random.Random, cell: Cell, n: int) -> list[str]:
        """``n`` cards inside ``cell`` (HasCellCards, ``mode=designer``): its family (else a uniform one), its global
        level (else uniform) and any promoted ``<family>.<attribute>`` levels, the rest drawn uniformly."""
        want = dict(cell)
        out = []
        for _ in range(n):
            name = want.get("family") or rng.choice(list(self.families))
            family = self.families.get(name) or self.families[rng.choice(list(self.families))]
            level = int(want["level"]) if str(want.get("level", "")).isdigit() else rng.randrange(self.n_levels(family))
            fixed = {a.name: int(want[f"{family.name}.{a.name}"]) for a in family.attributes
                     if str(want.get(f"{family.name}.{a.name}", "")).isdigit()}
            config = self.random_config(rng, family, level, fixed)
            out.append(self.format_card(family.name, config, family.level(config)))
        return out

    def static_cards(self, rng: random.Random, n: int) -> list[str]:
        out = []
        for _ in range(n):
            family = self.families[rng.choice(list(self.families))]
            level = rng.randrange(self.n_levels(family))
            out.append(self.format_card(family.name, self.random_config(rng, family, level), level))
        return out

    def export_fields(self, card: TaskCard) -> dict[str, Any]:
        """``valid_tasks.jsonl``'s columns ``rgym_config`` and ``rgym_seed``: how the item is regenerated (the export
        blanks ``solution`` because the Synthesizer's ``final_answer`` is always corrected by the oracle)."""
        task = RgymPayload.of(card)
        return {"rgym_config": task.config, "rgym_seed": task.seed} if task.seed is not None else {}

    # --- held-out

    def heldout_groups(self) -> list[tuple[str, Family, dict[str, Any]]]:
        """``(group, family, config)`` of every held-out group: each family's levels, then its default items."""
        out = []
        for family in self.families.values():
            for level in range(min(family.n_levels, self.settings.heldout_levels)):
                out.append((f"{family.name}/L{level}", family, family.config_at(level)))
            if self.settings.transfer:
                out.append((f"{family.name}/default", family, {}))
        return out

    def heldout(self, n_per_group: int, seed: int) -> list[HeldoutItem]:
        """``n_per_group`` distinct items per group, from odd (held-out) seeds, and with ``rgym.heldout_share`` at most
        that share of the group's question space (:func:`distinct_space` of its own draws; :func:`heldout_size`): a
        card whose question is held out cannot be trained, and at level 0 some families have only 100-200
        questions. A group whose generator fails is left out with a warning rather than ending the run."""
        items: list[HeldoutItem] = []
        share = self.settings.heldout_share
        for group, family, config in self.heldout_groups():
            drawn: list[tuple[str, str, int]] = []
            seen: set[str] = set()
            draws, want = 0, n_per_group
            for attempt in range(20 * n_per_group):
                if len(seen) >= want:
                    break
                item_seed = derive_seed("heldout", seed, group, attempt, heldout=True)
                try:
                    question, answer = self.gym.generate(family.name, config, item_seed)
                except GymFailure:
                    continue
                draws += 1
                if question not in seen:
                    seen.add(question)
                    drawn.append((question, answer, item_seed))
                if share is not None and draws >= max(n_per_group, MIN_SPACE_DRAWS):  # enough to read its size
                    want = heldout_size(n_per_group, share, distinct_space(draws, len(seen)))
            kept = drawn[:want]
            for question, answer, item_seed in kept:
                self._heldout_questions.add(question.strip())
                self._heldout_items[question] = (family.name, config, item_seed)
                items.append(HeldoutItem(problem=question, answer=answer, group=group))
            if want < n_per_group:
                logger.info("rgym held-out group %s: %d items, rgym.heldout_share %s of about %.0f questions", group,
                            len(kept), share, distinct_space(draws, len(seen)))
            elif len(kept) < n_per_group:
                logger.warning("rgym held-out group %s: %d of %d items (its generator failed or repeats itself)",
                               group, len(kept), n_per_group)
        return items

    def heldout_card(self, item: HeldoutItem) -> TaskCard:
        family, config, seed = self._heldout_items[item.problem]
        header = dict.fromkeys(HEADER_FIELDS, "x")
        return TaskCard(**header, notes="x", payload=RgymPayload(config=config_text(family, config), seed=seed,
                                                                 question=item.problem, answer=item.answer))

    # --- the Reasoner's episode

    def environment(self, card: TaskCard, reference: str, attempt: int = 0) -> ScoredAnswer | _Unscorable:
        task = RgymPayload.of(card)
        found = self._config_of(task.config) if task.seed is not None else None
        if found is None or task.seed is None:
            return _Unscorable()
        return ScoredAnswer(self, found[0], found[1], task.seed)

    # --- prompts

    def synthesizer_prompt(self, report: object, target: Cell | None = None) -> str:
        return compact_synthesizer_prompt(report, REPORT_BUDGET, target, ["family", "level"])

    def synthesizer_system_prompt(self) -> str | None:
        return None

    def reasoner_prompt(self, problem: str) -> str:
        """``rgym.reasoner_template`` with the question (``Q:<question>\\nA:``); the answer follows the prefilled
        ``rgym.answer_prefix``."""
        return self.settings.reasoner_template.replace("{question}", problem)

    def reasoner_system_prompt(self) -> str | None:
        return None

    def format_reasoner_answer(self, answer: str) -> str:
        """The supervised target after the prefix: the answer and reasoning-gym's closing tag when the prefix opens one."""
        return answer + ("</answer>" if self.settings.answer_prefix.strip() == "<answer>" else "")

    # --- the factor space

    builtin_factors: tuple[str, ...] = ("family", "level")

    def factor_defs(self) -> list[FactorDef]:
        names = tuple(self.families)
        defs = [FactorDef("family", names, lambda s: _factor_values(self, s).get("family"), "reasoning-gym family"),
                FactorDef("level", LEVEL_BUCKETS, lambda s: _factor_values(self, s).get("level"),
                          "the curriculum's global level (the highest of its attributes' levels)")]
        for family in self.families.values():
            for attr in family.attributes:
                key = f"{family.name}.{attr.name}"
                defs.append(FactorDef(key, LEVEL_BUCKETS[:attr.n_levels],
                                      lambda s, key=key: _factor_values(self, s).get(key),
                                      f"level of {family.name}'s {attr.name} ({attr.description[:80]})"))
        return defs

    def sample_any(self, rng: random.Random) -> str:
        family = self.families[rng.choice(list(self.families))]
        level = rng.randrange(self.n_levels(family))
        return config_text(family.name, self.random_config(rng, family, level))


@lru_cache(maxsize=4096)
def _cached_values(domain: RgymDomain, text: str) -> tuple[tuple[str, str], ...]:
    found = domain._config_of(text)
    if found is None:
        return ()
    family, config = found
    out = {"family": family.name, "level": str(family.level(config))}
    out.update({f"{family.name}.{k}": str(v) for k, v in family.levels(config).items()})
    return tuple(out.items())


def _factor_values(domain: RgymDomain, text: str) -> dict[str, str]:
    """The factors of a config text (``family``, ``level``, ``<family>.<attribute>``); {} for anything else."""
    if not isinstance(text, str) or len(text) > 800:
        return {}
    return dict(_cached_values(domain, text))
