"""The scorer audit: a family is allowed only when its scorer gives no reward to junk.

On a few items per level, :func:`audit_family` scores the empty answer, garbage and constant answers (small numbers,
yes/no, and every answer the items themselves have) and reports each item where one of them earns a reward while it
is not that item's answer, and each item whose own answer does not earn the full reward. The reward is the family's
score when its partial credit is trusted, else 1.0 on a full score only (:func:`reward_of`), so a family whose
partial scores leak can still be allowed with exact-only rewards. ``tests/domains/rgym/test_audit.py`` runs it over
every family of :data:`~synco.domains.rgym.catalog.AUDITED`.
"""

from __future__ import annotations

from synco.domains.rgym.catalog import Family
from synco.domains.rgym.gym import Gym, GymFailure

JUNK = ("", " ", "xyz", "The answer is", "<answer></answer>", "none", "[]", "{}", "-1", "1e999", "nan", "?")
"""Answers that are nobody's answer."""

CONSTANTS = ("0", "1", "2", "3", "10", "yes", "no", "True", "False", "a")
"""Constant answers a policy could collapse to."""


def reward_of(score: float, partial_credit: bool) -> float:
    """The Reasoner's reward for a scorer's value: the value itself for a family whose partial credit passed the
    audit, else 1.0 for a full score and 0 otherwise."""
    if partial_credit:
        return min(max(score, 0.0), 1.0)
    return 1.0 if score >= 1.0 else 0.0


def audit_family(gym: Gym, family: Family, items_per_level: int = 6, max_levels: int = 3,
                 seed: int = 991) -> list[str]:
    """The audit's findings for ``family`` (empty: it passes); see the module docstring."""
    items = []
    for level in range(min(family.n_levels, max_levels)):
        config = family.config_at(level)
        for i in range(items_per_level):
            try:
                items.append((config, seed + 1000 * level + i, *gym.generate(family.name, config, seed + 1000 * level + i)))
            except GymFailure as err:
                return [f"level {level}: generation failed ({err})"]
    answers = sorted({a.strip() for *_, a in items if a.strip()})
    findings = []
    for config, item_seed, question, answer in items:
        own = gym.score(family.name, config, item_seed, answer)
        if reward_of(own.value, family.partial_credit) < 1.0:
            findings.append(f"own answer {answer!r} scores {own.value} ({own.status}) on {question[:60]!r}")
        for candidate in (*JUNK, *CONSTANTS, *answers):
            if candidate.strip().lower() == answer.strip().lower():  # its own answer, up to case
                continue
            got = gym.score(family.name, config, item_seed, candidate)
            if reward_of(got.value, family.partial_credit) > 0.0:
                findings.append(f"{candidate!r} scores {got.value} against {answer!r}")
    return findings
