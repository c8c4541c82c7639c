"""The rgym world's warm-start data come from training seeds, short ASCII items only."""

from __future__ import annotations

from synco.domains.rgym import RgymDomain, RgymSettings
from synco.domains.rgym.warm_start import draw_items, extra_tokens


def test_items_are_short_ascii_training_items() -> None:
    domain = RgymDomain(RgymSettings(families=["chain_sum", "spell_backward"]))
    try:
        items = draw_items(domain, 3, seed=0)
        heldout = {it.problem for it in domain.heldout(3, seed=0)}
    finally:
        domain.gym.close()
    assert {f for f, *_ in items} == {"chain_sum", "spell_backward"} and len(items) == 2 * 3 * 3
    assert all(q.isascii() and a.isascii() for *_, q, a in items)
    assert not heldout & {q for *_, q, _ in items}
    assert "DO:family=" in extra_tokens(domain) and "chain_sum" in extra_tokens(domain)
