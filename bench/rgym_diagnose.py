"""Where the rgym Reasoner's GRPO gain goes: its teachable band on held-out items, and its trained items vs held-out.

    python bench/rgym_diagnose.py [REASONER_DIR] [--run RUN_DIR] [--per-group 32] [--samples 16] [--first-steps 5]

``band``: each held-out item of levels 0-1 of the ``rgym`` preset's four families (held-out seed 0, ``--per-group``
items a group) answered greedily and ``--samples`` times at T = 1; per group the greedy accuracy, the mean success
probability p and how many items have p = 0, 0 < p < 0.5, 0.5 <= p < 1, p = 1 (GRPO can only sharpen the items with
0 < p < 1). ``REASONER_DIR``: a run's ``checkpoints/step_N/reasoner``, else the shipped warm start.

``--run``: the same sampled success of the warm start and of ``REASONER_DIR`` on up to 300 items the run trained on
(the valid cards of its first ``--first-steps`` steps, regenerated from their config and seed): what the Reasoner
learnt on its own cards, to set beside the held-out change (docs/RGYM.md, "Why the Reasoner barely learned").
"""

from __future__ import annotations

import argparse
import collections
import json
import sqlite3
from collections.abc import Sequence
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from synco.core.records import HEADER_FIELDS, TaskCard
from synco.domains.rgym.domain import RgymDomain
from synco.domains.rgym.payload import RgymPayload
from synco.domains.rgym.warm_start import ASSET_DIR, make_domain
from synco.learn.pretrain import generate_texts

FAMILIES = ("basic_arithmetic", "chain_sum", "products", "spell_backward")


def successes(domain: RgymDomain, folder: str, cards: Sequence[TaskCard], samples: int,
              greedy: bool = False) -> list[int]:
    """How many of ``samples`` answers (T = 1; one greedy answer with ``greedy``) the family's scorer gives full marks,
    per card."""
    torch.manual_seed(0)
    model, tok = AutoModelForCausalLM.from_pretrained(folder), AutoTokenizer.from_pretrained(folder)
    prefix = domain.settings.answer_prefix
    prompts = [domain.reasoner_prompt(RgymPayload.of(c).question) + prefix for c in cards]
    won = [0] * len(cards)
    for _ in range(1 if greedy else samples):
        texts = generate_texts(model, tok, prompts, 24, temperature=None if greedy else 1.0)
        for i, (card, text) in enumerate(zip(cards, texts)):
            env = domain.environment(card, RgymPayload.of(card).answer)
            env.step(prefix + text)
            won[i] += env.grade().correct
    return won


def band(domain: RgymDomain, folder: str, per_group: int, samples: int) -> None:
    items = domain.heldout(per_group, 0)
    cards = [domain.heldout_card(it) for it in items]
    greedy = successes(domain, folder, cards, 1, greedy=True)
    sampled = successes(domain, folder, cards, samples)
    print(f"band of {folder} (T=1, {samples} samples): group greedy mean_p | p=0 0<p<.5 .5<=p<1 p=1")
    rows: dict[str, list[tuple[int, float]]] = collections.defaultdict(list)
    for it, g, k in zip(items, greedy, sampled):
        rows[it.group].append((g, k / samples))
    rows["all"] = [gp for v in list(rows.values()) for gp in v]
    for group, v in rows.items():
        c = collections.Counter("0" if p == 0 else "lo" if p < .5 else "hi" if p < 1 else "1" for _, p in v)
        print(f"  {group:22s} {sum(g for g, _ in v) / len(v):.3f} {sum(p for _, p in v) / len(v):.3f} | "
              f"{c['0']:3d} {c['lo']:3d} {c['hi']:3d} {c['1']:3d}")


def trained_items(domain: RgymDomain, folder: str, run: Path, first_steps: int, samples: int) -> None:
    pool = sqlite3.connect(f"file:{run / 'pool.sqlite'}?mode=ro", uri=True)
    cards = []
    for (payload,) in pool.execute("SELECT payload_json FROM tasks WHERE valid = 1 AND step < ? ORDER BY task_id",
                                   (first_steps,)):
        p = json.loads(payload)
        cards.append(TaskCard(**dict.fromkeys(HEADER_FIELDS, "x"), notes="x",
                              payload=RgymPayload(config=p["config"], seed=p["seed"], question=p["question"],
                                                  answer=p["answer"])))
    cards = cards[:300]
    for name, where in (("warm start", str(ASSET_DIR / "reasoner")), ("trained", folder)):
        won = successes(domain, where, cards, samples)
        by: dict[str, list[int]] = collections.defaultdict(list)
        for card, k in zip(cards, won):
            by[json.loads(RgymPayload.of(card).config)["family"]].append(k)
        parts = " ".join(f"{f} {sum(v) / len(v) / samples:.3f}" for f, v in sorted(by.items()))
        print(f"{run} first {first_steps} steps' items, sampled success, {name}: {sum(won) / len(won) / samples:.3f} "
              f"({len(cards)} items; {parts})")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("reasoner", nargs="?", default=str(ASSET_DIR / "reasoner"))
    ap.add_argument("--run", type=Path, default=None)
    ap.add_argument("--per-group", type=int, default=32)
    ap.add_argument("--samples", type=int, default=16)
    ap.add_argument("--first-steps", type=int, default=6)
    args = ap.parse_args()
    torch.set_num_threads(1)
    domain = make_domain(FAMILIES)
    domain.settings.heldout_levels, domain.settings.transfer = 2, False
    try:
        band(domain, args.reasoner, args.per_group, args.samples)
        if args.run is not None:
            trained_items(domain, args.reasoner, args.run, args.first_steps, max(1, args.samples // 2))
    finally:
        domain.gym.close()


if __name__ == "__main__":
    main()
