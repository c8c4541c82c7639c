"""synco.domains.rgym.audit over every allowed family: junk never earns a reward (the condition of AUDITED)."""

from __future__ import annotations

import pytest

from synco.domains.rgym import catalog
from synco.domains.rgym.audit import audit_family, reward_of
from synco.domains.rgym.gym import Gym


def test_reward_of_trusts_partial_credit_only_where_audited() -> None:
    assert reward_of(0.5, True) == 0.5 and reward_of(0.5, False) == 0.0
    assert reward_of(1.0, False) == 1.0 and reward_of(1.7, True) == 1.0 and reward_of(-1.0, True) == 0.0


@pytest.mark.parametrize("name", sorted(catalog.AUDITED))
def test_every_allowed_family_passes_the_audit(gym: Gym, description: dict, name: str) -> None:
    family = catalog.families_from(description, [name])[name]
    assert audit_family(gym, family, items_per_level=3) == []


@pytest.mark.parametrize("name", ["game_of_life_halting", "coin_flip", "propositional_logic"])
def test_the_audit_catches_scorers_seen_accepting_junk(gym: Gym, description: dict, name: str,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(catalog.AUDITED, name, False)  # even exact-only rewards leak here
    family = catalog.families_from(description, [name])[name]
    assert audit_family(gym, family, items_per_level=3) != []
