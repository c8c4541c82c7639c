"""The reasoning-gym world's warm-start data: generated items for the Reasoner, config cards for the Synthesizer.

Both come from reasoning-gym's generators on training seeds (never a held-out one):

* the **Reasoner** on ``Q:<question>\\nA:<answer>`` -> ``<answer></answer>`` (the prefix prefilled as in the run), for
  :data:`REASONER_FAMILIES`, levels weighted toward the easy end (:data:`LEVEL_WEIGHTS`), so the run starts partially
  competent, not solved; so many items (:data:`REASONER_ITEMS_PER_LEVEL`) that training sees most of them about
  twice, so it learns the skill rather than the items;
* the **Synthesizer**, for the default families (:data:`DEFAULT_FAMILIES`), on
  ``<report>\\nDO:family=F,level=L\\nCARD:`` -> a nine-field card whose problem is a config of
  that cell (:meth:`~synco.domains.rgym.domain.RgymDomain.format_card`); 15 % of prompts have no target.

Pure Python (the generators run in the world's worker process); the training is :mod:`synco.learn.pretrain`'s and
the recipe :mod:`synco.run.pretrain.rgym`'s. The shipped weights live with the world, in ``assets/``.
"""

from __future__ import annotations

import random
from collections.abc import Generator, Sequence
from pathlib import Path

from synco.core.records import CardRejected
from synco.domains.rgym.payload import RgymPayload
from synco.domains.rgym.catalog import config_text
from synco.domains.rgym.domain import RgymDomain, derive_seed
from synco.domains.rgym.gym import GymFailure
from synco.domains.rgym.settings import RgymSettings
from synco.domains.warm_start import Pair, random_report
from synco.grading.cards import CardError, parse_task_card

ASSET_DIR = Path(__file__).resolve().parent / "assets"
"""The shipped warm start (seed 0), with the world."""

DEFAULT_FAMILIES = ("basic_arithmetic", "chain_sum", "products", "count_bits", "gcd", "lcm", "spell_backward",
                    "letter_counting")
"""The ``rgym`` preset's families, chosen by measurement (20 items per level, levels 0-2): ASCII questions and
answers of at most ~130 characters (basic_arithmetic 26-39, chain_sum 67-83, products 85-101, count_bits 73-78,
gcd 106-124, lcm 63-81, spell_backward 51-55, letter_counting 103-130). Left out: number_sequence (its generator ran
past a 3 s deadline at level 2), aiw (582 characters at level 1), decimal_chain_sum and simple_equations (~195 at
level 2), count_primes (an answer no tiny model computes), the long-question families."""


REASONER_FAMILIES = ("basic_arithmetic", "chain_sum", "products", "spell_backward")
"""The families the Reasoner is warm-started on: those of :data:`DEFAULT_FAMILIES` where a tiny model learns a skill
above the best constant answer (on count_bits, gcd and letter_counting an 8-family Reasoner answered at or below the
family's most frequent answer, on lcm nothing; docs/RGYM.md). The ``rgym`` preset trains on these four."""


REASONER_ITEMS_PER_LEVEL = 2000
"""Generated items per family and level for the Reasoner: 24,000 against 48,000 examples of training, so most items
are seen about twice. With 400 a cell (each seen ~4 times) the Reasoner learnt its items, and GRPO's gains on trained
items did not carry over to held-out ones (held-out flat over 8 seeds); with 2,000 held-out rises (docs/RGYM.md)."""


LEVEL_WEIGHTS = (0.6, 0.3, 0.1)
"""The Reasoner's training items per level 0, 1, 2: easy first, so harder levels start partly learned."""


MAX_POSITIONS = 256


HELDOUT_PER_GROUP = 20


Item = tuple[str, int, str, str, str]
"""``(family, level, config text, question, answer)``."""


def draw_items(domain: RgymDomain, per_level: int, seed: int) -> list[Item]:
    """``per_level`` generated items per family and level (levels 0..2), from training seeds."""
    rng = random.Random(f"rgym-items-{seed}")
    out: list[Item] = []
    for family in domain.families.values():
        for level in range(min(family.n_levels, len(LEVEL_WEIGHTS))):
            for i in range(per_level):
                config = domain.random_config(rng, family, level)
                try:
                    question, answer = domain.gym.generate(family.name, config, derive_seed("warm", seed, family.name,
                                                                                            level, i))
                except GymFailure:
                    continue
                if question.isascii() and answer.isascii() and len(question) + len(answer) < MAX_POSITIONS - 32:
                    out.append((family.name, level, config_text(family.name, config), question, answer))
    return out


def extra_tokens(domain: RgymDomain) -> list[str]:
    """The Synthesizer's whole tokens beyond the card's keys: the target's factor names, the families, the fields."""
    names = {f"\\\"{field}\\\":" for family in domain.families.values() for field in family.defaults}
    return ["DO:family=", ",level=", '{\\"family\\":\\"', '\\",\\"config\\":{', *sorted(domain.families),
            *sorted(names)]


def make_domain(families: Sequence[str]) -> RgymDomain:
    """The world restricted to ``families`` (its generator worker starts with it; close ``domain.gym`` after)."""
    return RgymDomain(RgymSettings(families=list(families)))


# ----------------------------------------------------------------- example streams (what the trainer is handed)


def reasoner_examples(rng: random.Random, items: Sequence[Item], families: Sequence[str]) -> Generator[Pair, None, None]:
    """The Reasoner's endless stream: a drawn item of a level drawn by :data:`LEVEL_WEIGHTS`, prompt with the answer
    prefix prefilled -> the formatted answer."""
    domain = make_domain(families)
    try:
        by_level: dict[int, list[Item]] = {}
        for item in items:
            by_level.setdefault(item[1], []).append(item)
        levels = sorted(by_level)
        prefix = domain.settings.answer_prefix
        while True:
            _, _, _, question, answer = rng.choice(by_level[rng.choices(levels, LEVEL_WEIGHTS[:len(levels)])[0]])
            yield domain.reasoner_prompt(question) + prefix, domain.format_reasoner_answer(answer)
    finally:
        domain.gym.close()


def synthesizer_examples(rng: random.Random, families: Sequence[str]) -> Generator[Pair, None, None]:
    """The Synthesizer's endless stream: a random cell (family, then level), most prompts naming it as the target,
    -> a card of a config in it."""
    domain = make_domain(families)
    try:
        names = sorted(domain.families)
        order = list(domain.families)
        while True:
            family = domain.families[rng.choice(order)]
            level = rng.randrange(family.n_levels)
            config = domain.random_config(rng, family, level)
            target = (("family", family.name), ("level", str(family.level(config))))
            prompt = domain.synthesizer_prompt(random_report(rng, names), target if rng.random() > 0.15 else None)
            yield prompt, domain.format_card(family.name, config, family.level(config))
    finally:
        domain.gym.close()


# ----------------------------------------------------------------- scoring generated texts


def heldout_prompts(domain: RgymDomain, per_group: int, seed: int = 0) -> list[str]:
    """The Reasoner's prompt (answer prefix prefilled) of each held-out item of :meth:`RgymDomain.heldout`."""
    prefix = domain.settings.answer_prefix
    return [domain.reasoner_prompt(it.problem) + prefix for it in domain.heldout(per_group, seed)]


def heldout_success(domain: RgymDomain, per_group: int, texts: Sequence[str], seed: int = 0) -> dict[str, float]:
    """Success per group (the family's scorer, full score), as the run's held-out measures it: ``texts[i]`` answers
    the i-th item of ``domain.heldout(per_group, seed)``."""
    prefix = domain.settings.answer_prefix
    solved: dict[str, list[bool]] = {}
    for item, text in zip(domain.heldout(per_group, seed), texts):
        env = domain.environment(domain.heldout_card(item), item.answer)
        env.step(prefix + text)
        solved.setdefault(item.group, []).append(env.grade().correct)
    return {group: sum(v) / len(v) for group, v in solved.items()}


def card_prompts(domain: RgymDomain, n: int) -> list[str]:
    """``n`` Synthesizer prompts with no report, one per feasible (family, level) cell in turn."""
    cells = [(f.name, str(level)) for f in domain.families.values() for level in range(f.n_levels)]
    return [domain.synthesizer_prompt("", (("family", fam), ("level", lv))) for fam, lv in
            (cells[i % len(cells)] for i in range(n))]


def card_validity(domain: RgymDomain, texts: Sequence[str]) -> tuple[float, float]:
    """``(valid, distinct)`` shares of sampled card texts: parsed, config accepted and generated by the oracle;
    distinct among the valid."""
    valid, problems = 0, set()
    for text in texts:
        try:
            card = parse_task_card(text)
            domain.oracle(card)
        except (CardError, CardRejected):
            continue
        valid += 1
        task = RgymPayload.of(card)  # materialised by the oracle: its config and seed are the item
        problems.add((task.config, task.seed))
    return valid / len(texts), len(problems) / max(valid, 1)
