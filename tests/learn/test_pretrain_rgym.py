"""synco.learn.pretrain_rgym: the rgym warm start ships with the world and its data come from training seeds."""

from __future__ import annotations

import json

from synco.domains.rgym import RgymDomain, RgymSettings
from synco.learn.pretrain_rgym import ASSET_DIR, DEFAULT_FAMILIES, draw_items, extra_tokens, load_rgym_warm_start


def test_the_shipped_warm_start_lives_with_the_world() -> None:
    assert ASSET_DIR.parts[-3:] == ("domains", "rgym", "assets")
    assert load_rgym_warm_start(0) == ASSET_DIR  # complete: nothing is pretrained on first use
    meta = json.loads((ASSET_DIR / "meta.json").read_text())
    assert tuple(meta["families"]) == DEFAULT_FAMILIES and len(DEFAULT_FAMILIES) >= 8
    assert {g.split("/")[0] for g in meta["heldout_success"]} == set(DEFAULT_FAMILIES)
    size = sum(f.stat().st_size for f in ASSET_DIR.rglob("*") if f.is_file())
    assert size < 8 * 2**20  # a few MB


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
