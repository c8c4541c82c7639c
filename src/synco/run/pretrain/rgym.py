"""The reasoning-gym world's warm-start recipe (``synco pretrain --world rgym``, ``builtin:rgym/<role>``).

Both agents are tiny char-level Llamas (``synco.learn.charlm``) trained from scratch
(:func:`synco.learn.pretrain.train_saved`) on the world's example streams (:mod:`synco.domains.rgym.warm_start`:
generated items of :data:`REASONER_FAMILIES` for the Reasoner, config cards per family x level cell of the default
families for the Synthesizer). Held-out success per group of every default family (greedy) and the Synthesizer's
card validity are measured after training and written to ``meta.json``. The weights live with the world, in ``synco/domains/rgym/assets/{reasoner,synthesizer}``.
"""

from __future__ import annotations

import random
import time
from collections.abc import Sequence
from functools import partial
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from synco.domains.rgym.domain import RgymDomain
from synco.domains.rgym.warm_start import (
    ASSET_DIR,
    DEFAULT_FAMILIES,
    HELDOUT_PER_GROUP,
    REASONER_FAMILIES,
    REASONER_ITEMS_PER_LEVEL,
    MAX_POSITIONS,
    Item,
    card_prompts,
    card_validity,
    draw_items,
    extra_tokens,
    heldout_prompts,
    heldout_success,
    make_domain,
    reasoner_examples,
    synthesizer_examples,
)
from synco.learn.pretrain import TinyRole, generate_texts, torch_threads, train_roles, train_saved, warm_start_folder


class RgymPretrainMeta(BaseModel):
    """What ``meta.json`` records of an rgym warm start."""

    seed: int
    families: list[str]  # the Synthesizer's (and the held-out measured here)
    reasoner_families: list[str]
    reasoner_steps: int
    synthesizer_steps: int
    batch: int
    lr: float
    n_items: int
    n_params_reasoner: int
    n_params_synthesizer: int
    reasoner_final_loss: float
    synthesizer_final_loss: float
    heldout_success: dict[str, float]
    card_valid_rate: float
    card_distinct_rate: float
    seconds_total: float


def role_spec(role: str, seed: int, steps: int, batch: int, lr: float, out_dir: Path, items: Sequence[Item],
              families: Sequence[str], domain: RgymDomain, progress: bool = True) -> TinyRole:
    """What the learner is handed for one agent of ``families`` (``domain``: the world on them): the world's example
    stream (the Reasoner's drawn from ``items``), the tokens, the context; one torch thread (bitwise repeatable)."""
    families = tuple(families)
    if role == "reasoner":
        examples: Any = partial(reasoner_examples, items=tuple(items), families=families)
        tokens = None
    else:
        examples, tokens = partial(synthesizer_examples, families=families), tuple(extra_tokens(domain))
    return TinyRole(world="rgym", role=role, out_dir=out_dir, seed=seed, steps=steps, batch=batch, lr=lr,
                    examples=examples, tokens=tokens, max_positions=MAX_POSITIONS, progress=progress)


def measure(folder: Path, domain: RgymDomain, seed: int) -> tuple[dict[str, float], float, float]:
    """Greedy held-out success per group of the Reasoner in ``folder/reasoner``, and ``(valid, distinct)`` of 64 cards
    of the Synthesizer in ``folder/synthesizer`` (T = 0.7, one per feasible cell in turn, seeded by ``seed``)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    def load(role: str) -> tuple[Any, Any]:
        return AutoModelForCausalLM.from_pretrained(folder / role), AutoTokenizer.from_pretrained(folder / role)

    reasoner, tokenizer = load("reasoner")
    texts = generate_texts(reasoner, tokenizer, heldout_prompts(domain, HELDOUT_PER_GROUP), 24)
    success = heldout_success(domain, HELDOUT_PER_GROUP, texts)
    synthesizer, tokenizer = load("synthesizer")
    torch.manual_seed(random.Random(seed).randrange(1 << 30))
    valid, distinct = card_validity(domain, generate_texts(synthesizer, tokenizer, card_prompts(domain, 64), 96,
                                                           temperature=0.7))
    return success, valid, distinct


def pretrain_rgym(out_dir: str | Path, seed: int = 0, reasoner_steps: int = 1500, synthesizer_steps: int = 1500,
                  batch: int = 32, lr: float = 2e-3, per_level: int = REASONER_ITEMS_PER_LEVEL,
                  families: Sequence[str] = DEFAULT_FAMILIES, reasoner_families: Sequence[str] = REASONER_FAMILIES,
                  parallel: bool = True, progress: bool = True) -> RgymPretrainMeta:
    """Train and save the rgym warm start into ``out_dir/{reasoner,synthesizer}`` plus ``meta.json``: the Reasoner on
    ``per_level`` items a cell of ``reasoner_families``, the Synthesizer on the cells of ``families``."""
    t0 = time.perf_counter()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    domain, solver_world = make_domain(families), make_domain(reasoner_families)
    try:
        items = tuple(draw_items(solver_world, per_level, seed))
        specs = [role_spec("reasoner", seed, reasoner_steps, batch, lr, out, items, reasoner_families, solver_world,
                           progress),
                 role_spec("synthesizer", seed + 1, synthesizer_steps, batch, lr, out, (), families, domain, progress)]
        (r_loss, r_params), (s_loss, s_params) = train_roles(train_saved, specs, parallel)
        with torch_threads(1):
            success, valid, distinct = measure(out, domain, seed)
    finally:
        domain.gym.close()
        solver_world.gym.close()
    meta = RgymPretrainMeta(
        seed=seed, families=list(families), reasoner_families=list(reasoner_families), reasoner_steps=reasoner_steps, synthesizer_steps=synthesizer_steps,
        batch=batch, lr=lr, n_items=len(items), n_params_reasoner=r_params, n_params_synthesizer=s_params,
        reasoner_final_loss=round(r_loss, 5), synthesizer_final_loss=round(s_loss, 5),
        heldout_success={k: round(v, 3) for k, v in sorted(success.items())}, card_valid_rate=round(valid, 3),
        card_distinct_rate=round(distinct, 3), seconds_total=round(time.perf_counter() - t0, 1))
    (out / "meta.json").write_text(meta.model_dump_json(indent=2) + "\n")
    if progress:
        print(f"[pretrain] rgym warm start saved to {out} in {meta.seconds_total:.0f}s; held-out success "
              + " ".join(f"{k}={v:.2f}" for k, v in meta.heldout_success.items())
              + f"; cards valid {valid:.2f} distinct {distinct:.2f}", flush=True)
    return meta


def load_rgym_warm_start(seed: int = 0) -> Path:
    """The folder holding the rgym world's ``reasoner/`` and ``synthesizer/``: the shipped one (seed 0), else the
    cache ``~/.cache/synco/rgym-<seed>``, pretrained into first when missing (minutes on CPU)."""
    return warm_start_folder("rgym", seed, ASSET_DIR, lambda out: pretrain_rgym(out, seed=seed))


def warm_start(out_dir: str | Path, *, seed: int = 0, **kwargs: Any) -> RgymPretrainMeta:
    """The rgym world's registered warm start (``synco pretrain --world rgym``): the default families' recipe."""
    kwargs.pop("settings", None)  # the shipped recipe trains on DEFAULT_FAMILIES whatever the rgym: section says
    return pretrain_rgym(out_dir, seed=seed, **kwargs)
