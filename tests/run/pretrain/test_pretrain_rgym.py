"""The rgym warm-start recipe: the shipped warm start lives with the world."""

from __future__ import annotations

import json

from synco.domains.rgym.warm_start import ASSET_DIR, DEFAULT_FAMILIES, REASONER_FAMILIES
from synco.run.pretrain.rgym import load_rgym_warm_start


def test_the_shipped_warm_start_lives_with_the_world() -> None:
    assert ASSET_DIR.parts[-3:] == ("domains", "rgym", "assets")
    assert load_rgym_warm_start(0) == ASSET_DIR  # complete: nothing is pretrained on first use
    meta = json.loads((ASSET_DIR / "meta.json").read_text())
    assert tuple(meta["families"]) == DEFAULT_FAMILIES and len(DEFAULT_FAMILIES) >= 8
    assert {g.split("/")[0] for g in meta["heldout_success"]} == set(DEFAULT_FAMILIES)
    # the Reasoner learns the families the rgym preset trains, from more items than it sees twice
    assert tuple(meta["reasoner_families"]) == REASONER_FAMILIES and set(REASONER_FAMILIES) < set(DEFAULT_FAMILIES)
    assert meta["n_items"] * 2 >= meta["reasoner_steps"] * meta["batch"]
    size = sum(f.stat().st_size for f in ASSET_DIR.rglob("*") if f.is_file())
    assert size < 8 * 2**20  # a few MB

